//! The optimizer family against its formulas in float64, written here: several steps of
//! Adam, AdamW and SGD with fresh gradients, from step 1 (bias correction 1 - beta) and from
//! step 1000 with a prior state; every device and float dtype, with and without an FP32
//! master copy; the update in place (same allocations). The initialisers against the
//! splitmix64 Xavier formula and the moments of their distributions; the error cases.

use brotensor::ops::{self, AdamParams};
use brotensor::{Device, Dtype, Error, Result, Tensor};
use brotensor_tests::{
    assert_close, gpu_devices, read_f32, round_through, tensor, tolerance, SplitMix64,
};

const ROWS: usize = 7;
const COLS: usize = 45;
const N: usize = ROWS * COLS;

/// Which optimizer a case runs.
#[derive(Clone, Copy, Debug)]
enum Rule {
    Adam(AdamParams),
    Sgd { lr: f32, momentum: f32 },
}

/// The float64 state of one parameter tensor.
struct State64 {
    p: Vec<f64>,
    a: Vec<f64>,
    b: Vec<f64>,
}

impl Rule {
    /// One step of the formula in float64 on every element (indexed: four arrays in step); `round` narrows the stored
    /// parameter (the device keeps it in its dtype; with a master copy it does not).
    #[allow(clippy::needless_range_loop)]
    fn step64(&self, s: &mut State64, g: &[f64], step: u32, round: &dyn Fn(f64) -> f64) {
        match *self {
            Rule::Adam(h) => {
                let (b1, b2) = (f64::from(h.beta1), f64::from(h.beta2));
                let bc1 = 1.0 - b1.powi(step as i32);
                let bc2 = 1.0 - b2.powi(step as i32);
                let (lr, eps, wd) = (f64::from(h.lr), f64::from(h.eps), f64::from(h.weight_decay));
                for i in 0..g.len() {
                    s.a[i] = b1 * s.a[i] + (1.0 - b1) * g[i];
                    s.b[i] = b2 * s.b[i] + (1.0 - b2) * g[i] * g[i];
                    let upd = lr * (s.a[i] / bc1) / ((s.b[i] / bc2).sqrt() + eps);
                    s.p[i] = round(s.p[i] * (1.0 - lr * wd) - upd);
                }
            }
            Rule::Sgd { lr, momentum } => {
                for i in 0..g.len() {
                    s.a[i] = f64::from(momentum) * s.a[i] + g[i];
                    s.p[i] = round(s.p[i] - f64::from(lr) * s.a[i]);
                }
            }
        }
    }

    /// One step on the device.
    fn step(
        &self,
        p: &mut Tensor,
        master: Option<&mut Tensor>,
        g: &Tensor,
        (a, b): (&mut Tensor, &mut Tensor),
        step: u32,
    ) -> Result<()> {
        match (*self, master) {
            (Rule::Adam(h), None) => ops::adam_step(p, g, a, b, &h, step),
            (Rule::Adam(h), Some(w)) => ops::adam_step_master(p, w, g, (a, b), &h, step),
            (Rule::Sgd { lr, momentum }, None) => ops::sgd_step(p, g, a, lr, momentum),
            (Rule::Sgd { lr, momentum }, Some(w)) => ops::sgd_step_master(p, w, g, a, lr, momentum),
        }
    }
}

fn f32_tensor(device: Device, v: &[f32]) -> Result<Tensor> {
    tensor(device, v, ROWS, COLS, Dtype::F32)
}

fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

fn narrow(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

/// Runs `steps` steps of `rule` from `first_step` on `device` in `dtype` and compares the
/// parameter's displacement and the F32 state with the float64 formula.
fn run_case(rule: Rule, device: Device, dtype: Dtype, master: bool, first_step: u32, seed: u64) {
    const STEPS: u32 = 3;
    let tag = format!("{rule:?} {device} {dtype} master {master} from step {first_step}");
    let mut rng = SplitMix64::new(seed);
    let p0 = round_through(dtype, &rng.uniform(N, -1.0, 1.0));
    // A prior state for the later steps (v >= 0), zeros at step 1.
    let (a0, b0) = if first_step > 1 {
        (rng.uniform(N, -0.2, 0.2), rng.uniform(N, 0.0, 0.05))
    } else {
        (vec![0.0; N], vec![0.0; N])
    };
    let grads: Vec<Vec<f32>> = (0..STEPS)
        .map(|_| round_through(dtype, &rng.uniform(N, -0.5, 0.5)))
        .collect();

    let run = || -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
        let mut p = tensor(device, &p0, ROWS, COLS, dtype)?;
        let mut w = master.then(|| f32_tensor(device, &p0)).transpose()?;
        let (mut a, mut b) = (f32_tensor(device, &a0)?, f32_tensor(device, &b0)?);
        let ids = [p.allocation_id(), a.allocation_id(), b.allocation_id()];
        for (k, g) in grads.iter().enumerate() {
            let g = tensor(device, g, ROWS, COLS, dtype)?;
            rule.step(
                &mut p,
                w.as_mut(),
                &g,
                (&mut a, &mut b),
                first_step + k as u32,
            )?;
        }
        assert_eq!(
            ids,
            [p.allocation_id(), a.allocation_id(), b.allocation_id()],
            "{tag}: the step must update its tensors in place"
        );
        Ok((read_f32(&p)?, read_f32(&a)?, read_f32(&b)?))
    };
    let (p, a, b) = run().unwrap_or_else(|e| panic!("{tag}: {e}"));

    let round = |x: f64| {
        if master {
            x
        } else {
            f64::from(round_through(dtype, &[x as f32])[0])
        }
    };
    let mut s = State64 {
        p: widen(&p0),
        a: widen(&a0),
        b: widen(&b0),
    };
    for (k, g) in grads.iter().enumerate() {
        rule.step64(&mut s, &widen(g), first_step + k as u32, &round);
    }
    let want_p = round_through(dtype, &narrow(&s.p));
    // The displacement, so that the check is relative to the update's own size.
    let moved = |v: &[f32]| -> Vec<f32> { v.iter().zip(&p0).map(|(x, x0)| x - x0).collect() };
    assert_close(
        &format!("{tag}: param displacement"),
        &moved(&want_p),
        &moved(&p),
        tolerance(dtype),
    );
    assert_close(
        &format!("{tag}: m / velocity"),
        &narrow(&s.a),
        &a,
        tolerance(Dtype::F32),
    );
    if matches!(rule, Rule::Adam(_)) {
        assert_close(
            &format!("{tag}: v"),
            &narrow(&s.b),
            &b,
            tolerance(Dtype::F32),
        );
    }
}

fn every_device() -> Vec<Device> {
    let gpus = gpu_devices();
    if gpus.is_empty() {
        eprintln!("optim: SKIPPED on GPU (no GPU device found)");
    }
    std::iter::once(Device::Cpu).chain(gpus).collect()
}

fn rules() -> [Rule; 3] {
    [
        Rule::Adam(AdamParams::new(0.1)),
        Rule::Adam(AdamParams {
            beta1: 0.8,
            beta2: 0.99,
            eps: 1e-3,
            ..AdamParams::adamw(0.05, 0.1)
        }),
        Rule::Sgd {
            lr: 0.1,
            momentum: 0.9,
        },
    ]
}

#[test]
fn optimizer_steps_against_their_formulas_on_every_device() {
    for device in every_device() {
        for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
            if !brotensor::supports_dtype(device, dtype).unwrap() {
                eprintln!("optim: {dtype} is not computed on {device}; skipped there");
                continue;
            }
            for (r, rule) in rules().into_iter().enumerate() {
                for first_step in [1, 1000] {
                    let seed = 0x0b71 + r as u64 * 7 + u64::from(first_step);
                    run_case(rule, device, dtype, false, first_step, seed);
                    if dtype != Dtype::F32 {
                        run_case(rule, device, dtype, true, first_step, seed);
                    }
                }
            }
        }
    }
}

#[test]
fn the_master_copy_keeps_updates_below_16_bit_rounding() {
    // 1 + 1e-4 rounds back to 1 in BF16: without a master copy 50 steps of lr 1e-4 leave the
    // parameter at 1; with one they move it by about 5e-3.
    for device in every_device() {
        if !brotensor::supports_dtype(device, Dtype::BF16).unwrap() {
            continue;
        }
        let ones = vec![1.0f32; N];
        let g = tensor(device, &vec![-1.0; N], ROWS, COLS, Dtype::BF16).unwrap();
        let mut p = tensor(device, &ones, ROWS, COLS, Dtype::BF16).unwrap();
        let mut w = f32_tensor(device, &ones).unwrap();
        let mut u = f32_tensor(device, &vec![0.0; N]).unwrap();
        let mut u2 = f32_tensor(device, &vec![0.0; N]).unwrap();
        let mut q = tensor(device, &ones, ROWS, COLS, Dtype::BF16).unwrap();
        for _ in 0..50 {
            ops::sgd_step_master(&mut p, &mut w, &g, &mut u, 1e-4, 0.0).unwrap();
            ops::sgd_step(&mut q, &g, &mut u2, 1e-4, 0.0).unwrap();
        }
        let master = read_f32(&w).unwrap();
        assert!(
            master.iter().all(|&x| (x - 1.005).abs() < 1e-5),
            "{device}: master {}",
            master[0]
        );
        assert!(read_f32(&p).unwrap().iter().all(|&x| x == 1.0078125));
        assert!(read_f32(&q).unwrap().iter().all(|&x| x == 1.0), "{device}");
    }
}

/// The splitmix64 Xavier values, written from the contract.
fn xavier64(n: usize, fan_in: usize, fan_out: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    let a = (6.0 / (fan_in + fan_out) as f64).sqrt();
    (0..n)
        .map(|_| {
            let u = (rng.next_u64() >> 40) as f64 / 16_777_216.0;
            (a * (2.0 * u - 1.0)) as f32
        })
        .collect()
}

#[test]
fn xavier_init_follows_splitmix64_on_every_device() {
    let dims = [24usize, 3, 3, 5];
    let n: usize = dims.iter().product();
    let want = xavier64(n, n / 24, 24, 99);
    for device in every_device() {
        for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
            if !brotensor::supports_dtype(device, dtype).unwrap() {
                continue;
            }
            let mut w = Tensor::empty_nd_on(device, &dims, dtype).unwrap();
            let id = w.allocation_id();
            let mut state = 99u64;
            ops::xavier_init(&mut w, &mut state).unwrap();
            assert_eq!(w.allocation_id(), id, "xavier_init fills `w` in place");
            let advanced = 99u64.wrapping_add((n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            assert_eq!(state, advanced, "one draw per element");
            let got = read_f32(&w).unwrap();
            assert_eq!(got, round_through(dtype, &want), "{device} {dtype}");
        }
    }
    // The distribution: within (-a, a), mean near 0, variance near a^2 / 3.
    let a = (6.0f64 / (n / 24 + 24) as f64).sqrt();
    let v = widen(&want);
    let mean = v.iter().sum::<f64>() / n as f64;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
    assert!(v.iter().all(|x| x.abs() < a));
    assert!(mean.abs() < 0.05 * a, "mean {mean}");
    assert!((var / (a * a / 3.0) - 1.0).abs() < 0.1, "variance {var}");
}

#[test]
fn philox_initialisers_have_their_moments_and_agree_across_devices() {
    let dims = [64usize, 200];
    let n = 64 * 200;
    let a = (6.0f64 / (200.0 + 64.0)).sqrt();
    let mut cpu_values: Option<(Vec<f32>, Vec<f32>)> = None;
    for device in every_device() {
        let mut w = Tensor::empty_nd_on(device, &dims, Dtype::F32).unwrap();
        ops::xavier_uniform(&mut w, 5, 0).unwrap();
        let x = read_f32(&w).unwrap();
        let mut h = Tensor::empty_nd_on(device, &dims, Dtype::F32).unwrap();
        ops::kaiming_normal(&mut h, 5, 0).unwrap();
        let z = read_f32(&h).unwrap();
        let moments = |v: &[f32]| {
            let m = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n as f64;
            let s = v.iter().map(|&x| (f64::from(x) - m).powi(2)).sum::<f64>() / n as f64;
            (m, s)
        };
        let (m, s) = moments(&x);
        assert!(x.iter().all(|&v| f64::from(v).abs() <= a * (1.0 + 1e-6)));
        assert!(m.abs() < 0.03 * a && (s / (a * a / 3.0) - 1.0).abs() < 0.05);
        let (m, s) = moments(&z);
        assert!(
            m.abs() < 0.03 && (s / (2.0 / 200.0) - 1.0).abs() < 0.05,
            "{m} {s}"
        );
        match &cpu_values {
            None => cpu_values = Some((x, z)),
            Some((cx, cz)) => {
                assert_close(
                    &format!("xavier_uniform {device}"),
                    cx,
                    &x,
                    tolerance(Dtype::F32),
                );
                assert_close(
                    &format!("kaiming_normal {device}"),
                    cz,
                    &z,
                    tolerance(Dtype::F32),
                );
            }
        }
    }
}

#[test]
fn optimizer_errors_name_the_operand() {
    let t = |v: f32| Tensor::from_slice(&[v; 6], 2, 3).unwrap();
    let (mut p, g, mut m, mut v) = (t(1.0), t(0.5), t(0.0), t(0.0));
    let h = AdamParams::new(0.1);
    let msg = |e: Error| e.to_string();
    let e = ops::adam_step(&mut p, &g, &mut m, &mut v, &h, 0).unwrap_err();
    assert!(msg(e).contains("1-based"));
    for bad in [
        AdamParams { beta1: 1.0, ..h },
        AdamParams { eps: 0.0, ..h },
        AdamParams { lr: f32::NAN, ..h },
        AdamParams::adamw(0.1, -1.0),
    ] {
        let e = ops::adam_step(&mut p, &g, &mut m, &mut v, &bad, 1).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    op: "adam_step",
                    ..
                }
            ),
            "{e}"
        );
    }
    let mut wide = Tensor::from_slice(&[0.0f32; 8], 2, 4).unwrap();
    let e = ops::adam_step(&mut p, &g, &mut wide, &mut v, &h, 1).unwrap_err();
    assert!(msg(e).contains("`m`"), "shape");
    let mut half = t(0.0).to_dtype(Dtype::F16).unwrap();
    let e = ops::adam_step(&mut p, &g, &mut m, &mut half, &h, 1).unwrap_err();
    assert!(matches!(e, Error::Dtype { operand: "v", .. }), "{e}");
    let g16 = g.to_dtype(Dtype::F16).unwrap();
    let e = ops::sgd_step(&mut p, &g16, &mut m, 0.1, 0.9).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Dtype {
                operand: "grad",
                ..
            }
        ),
        "{e}"
    );
    let e = ops::sgd_step(&mut p, &g, &mut m, f32::INFINITY, 0.9).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let mut unsized_state = Tensor::default();
    let e = ops::sgd_step(&mut p, &g, &mut unsized_state, 0.1, 0.9).unwrap_err();
    assert!(msg(e).contains("velocity"));
    let mut ints = Tensor::from_slice(&[1i32; 6], 2, 3).unwrap();
    let mut state = 1u64;
    assert!(matches!(
        ops::xavier_init(&mut ints, &mut state),
        Err(Error::Dtype { operand: "w", .. })
    ));
    assert_eq!(state, 1, "a refused init draws nothing");
    // Nothing changed by the refused steps.
    assert_eq!(p.to_vec::<f32>().unwrap(), vec![1.0; 6]);
    // Empty parameters are a no-op.
    let mut e0 = Tensor::zeros(0, 3, Dtype::F32).unwrap();
    let (mut m0, mut v0) = (e0.try_clone().unwrap(), e0.try_clone().unwrap());
    let g0 = e0.try_clone().unwrap();
    ops::adam_step(&mut e0, &g0, &mut m0, &mut v0, &h, 1).unwrap();
}
