//! The gated delta rule against the per-token rule in float64 written here (from a random
//! non-zero state, every device, F32 and the 16-bit dtypes), the step and chunked forms
//! against each other, a prompt of several chunks, a prompt split across calls against one
//! call, empty prompts and the error cases.

use brotensor::{ops, Device, Dtype, Error, Tensor};
use brotensor_tests::{
    assert_close_rows, gpu_devices, read_f32, round_through, tensor, tolerance, SplitMix64,
};

const H: usize = 3;
const DK: usize = 11;
const DV: usize = 4;

/// The inputs of one case: q, k, v, a_raw, beta_raw, log_a and the initial state.
struct Case {
    tokens: usize,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    a_raw: Vec<f32>,
    beta: Vec<f32>,
    log_a: Vec<f32>,
    state: Vec<f32>,
}

fn case(tokens: usize, seed: u64) -> Case {
    let mut rng = SplitMix64::new(seed);
    Case {
        tokens,
        q: rng.uniform(tokens * H * DK, -0.5, 0.5),
        k: rng.uniform(tokens * H * DK, -0.5, 0.5),
        v: rng.uniform(tokens * H * DV, -1.0, 1.0),
        a_raw: rng.uniform(tokens * H, -3.0, 3.0),
        beta: rng.uniform(tokens * H, -3.0, 3.0),
        log_a: rng.uniform(H, -1.0, 1.0),
        state: rng.uniform(H * DV * DK, -0.5, 0.5),
    }
}

/// The per-token rule in float64: `(o, final state)` from `state`, for inputs `q`, `k`, `v`
/// as given (already rounded through the dtype under test).
fn rule64(c: &Case, q: &[f32], k: &[f32], v: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let mut s: Vec<f64> = c.state.iter().map(|&x| f64::from(x)).collect();
    let mut o = vec![0.0f64; c.tokens * H * DV];
    for t in 0..c.tokens {
        for h in 0..H {
            let g = t * H + h;
            let softplus = (f64::from(c.a_raw[g])).exp().ln_1p();
            let alpha = (-softplus * f64::from(c.log_a[h]).exp()).exp();
            let beta = 1.0 / (1.0 + (-f64::from(c.beta[g])).exp());
            let kt: Vec<f64> = k[g * DK..(g + 1) * DK]
                .iter()
                .map(|&x| f64::from(x))
                .collect();
            let qt: Vec<f64> = q[g * DK..(g + 1) * DK]
                .iter()
                .map(|&x| f64::from(x))
                .collect();
            for i in 0..DV {
                let row = &mut s[(h * DV + i) * DK..(h * DV + i + 1) * DK];
                for x in row.iter_mut() {
                    *x *= alpha;
                }
                let sk: f64 = row.iter().zip(&kt).map(|(a, b)| a * b).sum();
                let u = f64::from(v[g * DV + i]) - sk;
                for (x, kj) in row.iter_mut().zip(&kt) {
                    *x += beta * u * kj;
                }
                o[g * DV + i] = row.iter().zip(&qt).map(|(a, b)| a * b).sum();
            }
        }
    }
    (o, s)
}

/// Runs one form of the rule on `dev` in `dtype`: `(o, final state)` as f32.
fn run(
    c: &Case,
    dev: Device,
    dtype: Dtype,
    chunked: bool,
) -> brotensor::Result<(Vec<f32>, Vec<f32>)> {
    let l = c.tokens;
    let q = tensor(dev, &c.q, l, H * DK, dtype)?;
    let k = tensor(dev, &c.k, l, H * DK, dtype)?;
    let v = tensor(dev, &c.v, l, H * DV, dtype)?;
    let a = Tensor::from_slice_on(dev, &c.a_raw, l, H)?;
    let b = Tensor::from_slice_on(dev, &c.beta, l, H)?;
    let la = Tensor::from_slice_on(dev, &c.log_a, H, 1)?;
    let mut state = Tensor::from_slice_on(dev, &c.state, H, DV * DK)?;
    let mut o = Tensor::default();
    let f = if chunked {
        ops::gated_delta_rule_chunked
    } else {
        ops::gated_delta_rule_step
    };
    f(&q, &k, &v, &a, &b, &la, (H, DK, DV), &mut state, &mut o)?;
    assert_eq!((o.dims(), o.dtype()), (&[l, H * DV][..], dtype));
    Ok((read_f32(&o)?, state.to_vec::<f32>()?))
}

#[test]
fn gated_delta_rule_follows_the_per_token_rule_in_float64() {
    let c = case(9, 0xde17a);
    for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        let (q, k, v) = (
            round_through(dtype, &c.q),
            round_through(dtype, &c.k),
            round_through(dtype, &c.v),
        );
        let (o64, s64) = rule64(&c, &q, &k, &v);
        let want_o: Vec<f32> = o64.iter().map(|&x| x as f32).collect();
        let want_s: Vec<f32> = s64.iter().map(|&x| x as f32).collect();
        // The state is F32 in every dtype: only the inputs' rounding (in the reference too)
        // and FP32 arithmetic separate it from float64.
        let state_tol = (1e-5, 1e-4);
        for dev in std::iter::once(Device::Cpu).chain(gpu_devices()) {
            for chunked in [false, true] {
                let (o, s) = run(&c, dev, dtype, chunked).unwrap();
                let tag = format!("delta rule {dev} {dtype} chunked={chunked}");
                assert_close_rows(&format!("{tag} o"), &want_o, &o, H * DV, tolerance(dtype));
                assert_close_rows(&format!("{tag} state"), &want_s, &s, DK, state_tol);
            }
        }
    }
}

#[test]
fn a_prompt_of_several_chunks_follows_the_per_token_rule_in_float64() {
    // 150 tokens: chunks of 64, 64 and 22 on the CPU's chunked form.
    let c = case(150, 0xc4a2);
    let (o64, s64) = rule64(&c, &c.q, &c.k, &c.v);
    let want_o: Vec<f32> = o64.iter().map(|&x| x as f32).collect();
    let want_s: Vec<f32> = s64.iter().map(|&x| x as f32).collect();
    for dev in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        for chunked in [false, true] {
            let (o, s) = run(&c, dev, Dtype::F32, chunked).unwrap();
            let tag = format!("150-token delta rule {dev} chunked={chunked}");
            assert_close_rows(&format!("{tag} o"), &want_o, &o, H * DV, (2e-5, 1e-5));
            assert_close_rows(&format!("{tag} state"), &want_s, &s, DK, (1e-5, 1e-4));
        }
    }
}

#[test]
fn a_prompt_split_across_calls_equals_one_call() {
    let c = case(7, 0x5917);
    let (l1, l2) = (3, 4);
    let part = |from: usize, to: usize, state: &[f32]| Case {
        tokens: to - from,
        q: c.q[from * H * DK..to * H * DK].to_vec(),
        k: c.k[from * H * DK..to * H * DK].to_vec(),
        v: c.v[from * H * DV..to * H * DV].to_vec(),
        a_raw: c.a_raw[from * H..to * H].to_vec(),
        beta: c.beta[from * H..to * H].to_vec(),
        log_a: c.log_a.clone(),
        state: state.to_vec(),
    };
    for dev in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let (o, s) = run(&c, dev, Dtype::F32, false).unwrap();
        let (o1, s1) = run(&part(0, l1, &c.state), dev, Dtype::F32, false).unwrap();
        let (o2, s2) = run(&part(l1, l1 + l2, &s1), dev, Dtype::F32, false).unwrap();
        // The token scan: the same arithmetic in the same order, equal bits.
        let split = [o1, o2].concat();
        assert_eq!(split, o, "{dev}: outputs");
        assert_eq!(s2, s, "{dev}: final state");
        // The prompt form in one call (chunked on the CPU): equal to FP32 rounding.
        let (oc, sc) = run(&c, dev, Dtype::F32, true).unwrap();
        assert_close_rows(
            &format!("{dev}: chunked outputs"),
            &split,
            &oc,
            H * DV,
            (2e-6, 1e-6),
        );
        assert_close_rows(&format!("{dev}: chunked state"), &s2, &sc, DK, (2e-6, 1e-6));
    }
}

#[test]
fn an_empty_prompt_leaves_the_state() {
    let c = case(0, 1);
    for dev in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let (o, s) = run(&c, dev, Dtype::F32, false).unwrap();
        assert!(o.is_empty());
        assert_eq!(s, c.state, "{dev}");
    }
}

#[test]
fn delta_rule_errors_name_the_operand() {
    let c = case(2, 2);
    let q = Tensor::from_slice(&c.q, 2, H * DK).unwrap();
    let k = Tensor::from_slice(&c.k, 2, H * DK).unwrap();
    let v = Tensor::from_slice(&c.v, 2, H * DV).unwrap();
    let a = Tensor::from_slice(&c.a_raw, 2, H).unwrap();
    let b = Tensor::from_slice(&c.beta, 2, H).unwrap();
    let la = Tensor::from_slice(&c.log_a, H, 1).unwrap();
    let good_state = || Tensor::from_slice(&c.state, H, DV * DK).unwrap();
    let mut o = Tensor::default();
    let shape_names = |r: brotensor::Result<()>, name: &str| match r {
        Err(Error::Shape { reason, .. }) => assert!(reason.starts_with(name), "{reason}"),
        other => panic!("{name}: expected a shape error, got {other:?}"),
    };
    let short = H * (DV * DK - DK);
    let mut st = Tensor::from_slice(&c.state[..short], H, DV * DK - DK).unwrap();
    shape_names(
        ops::gated_delta_rule_step(&q, &k, &v, &a, &b, &la, (H, DK, DV), &mut st, &mut o),
        "state",
    );
    let mut st = good_state();
    shape_names(
        ops::gated_delta_rule_step(&q, &k, &v, &a, &b, &la, (H, DK, DV + 1), &mut st, &mut o),
        "v",
    );
    shape_names(
        ops::gated_delta_rule_step(&q, &k, &v, &a, &b, &la, (H, DK + 1, DV), &mut st, &mut o),
        "q",
    );
    shape_names(
        ops::gated_delta_rule_step(&q, &k, &v, &b, &b, &v, (H, DK, DV), &mut st, &mut o),
        "log_a",
    );
    let r = ops::gated_delta_rule_step(&q, &k, &v, &a, &b, &la, (0, DK, DV), &mut st, &mut o);
    assert!(matches!(r, Err(Error::Shape { .. })), "{r:?}");
    let a16 = a.to_dtype(Dtype::F16).unwrap();
    let r = ops::gated_delta_rule_step(&q, &k, &v, &a16, &b, &la, (H, DK, DV), &mut st, &mut o);
    assert!(
        matches!(
            r,
            Err(Error::Dtype {
                operand: "a_raw",
                ..
            })
        ),
        "{r:?}"
    );
    let v16 = v.to_dtype(Dtype::F16).unwrap();
    let r = ops::gated_delta_rule_step(&q, &k, &v16, &a, &b, &la, (H, DK, DV), &mut st, &mut o);
    assert!(matches!(r, Err(Error::Dtype { operand: "v", .. })), "{r:?}");
    // The state was never touched by the refused calls.
    assert_eq!(st.to_vec::<f32>().unwrap(), c.state);
}
