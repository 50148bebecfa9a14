//! Activations: the CPU reference against every GPU device and float dtype.

use brotensor::{ops, Result, Tensor};
use brotensor_tests::{parity, Input};

const SHAPE: (usize, usize) = (129, 256);
const ODD: (usize, usize) = (33, 21);

fn one((r, c): (usize, usize), lo: f32, hi: f32) -> [Input; 1] {
    [Input::new(r, c, lo, hi)]
}

fn with_grad((r, c): (usize, usize), lo: f32, hi: f32) -> [Input; 2] {
    [Input::new(r, c, lo, hi), Input::new(r, c, -1.0, 1.0)]
}

type Fwd = fn(&Tensor, &mut Tensor) -> Result<()>;
type Bwd = fn(&Tensor, &Tensor, &mut Tensor) -> Result<()>;

fn fwd(f: Fwd) -> impl Fn(&[Tensor]) -> Result<Tensor> {
    move |t| {
        let mut y = Tensor::default();
        f(&t[0], &mut y)?;
        Ok(y)
    }
}

fn bwd(f: Bwd) -> impl Fn(&[Tensor]) -> Result<Tensor> {
    move |t| {
        // A stale destination: gradients must overwrite it.
        let mut dx = Tensor::zeros_on(t[0].device(), 3, 5, t[0].dtype())?;
        ops::fill(&mut dx, 9.0)?;
        f(&t[0], &t[1], &mut dx)?;
        Ok(dx)
    }
}

#[test]
fn pointwise_forward() {
    let cases: [(&str, Fwd, f32, f32); 9] = [
        ("relu_forward", ops::relu_forward, -2.0, 2.0),
        ("relu_forward_batched", ops::relu_forward_batched, -2.0, 2.0),
        ("tanh_forward", ops::tanh_forward, -4.0, 4.0),
        ("tanh_forward_batched", ops::tanh_forward_batched, -4.0, 4.0),
        ("sigmoid_forward", ops::sigmoid_forward, -6.0, 6.0),
        ("silu_forward", ops::silu_forward, -6.0, 6.0),
        ("gelu_forward", ops::gelu_forward, -5.0, 5.0),
        ("gelu_exact_forward", ops::gelu_exact_forward, -5.0, 5.0),
        ("quick_gelu_forward", ops::quick_gelu_forward, -5.0, 5.0),
    ];
    for (i, (name, f, lo, hi)) in cases.into_iter().enumerate() {
        parity(name, 0x100 + i as u64, &one(SHAPE, lo, hi), fwd(f));
    }
    parity("elu_forward", 0x110, &one(ODD, -3.0, 3.0), |t| {
        let mut y = Tensor::default();
        ops::elu_forward(&t[0], 0.7, &mut y)?;
        Ok(y)
    });
    parity("leaky_relu_forward", 0x111, &one(SHAPE, -3.0, 3.0), |t| {
        let mut y = Tensor::default();
        ops::leaky_relu_forward(&t[0], 0.05, &mut y)?;
        Ok(y)
    });
    parity(
        "hardswish_forward",
        0x114,
        &one(ODD, -5.0, 5.0),
        fwd(ops::hardswish_forward),
    );
    parity("hard_sigmoid_forward", 0x115, &one(SHAPE, -4.0, 4.0), |t| {
        let mut y = Tensor::default();
        ops::hard_sigmoid_forward(&t[0], 1.0 / 6.0, 0.5, &mut y)?;
        Ok(y)
    });
    parity("gelu_ in place", 0x112, &one(ODD, -3.0, 3.0), |t| {
        let mut y = t[0].clone();
        y.gelu_()?;
        Ok(y)
    });
    parity("silu allocating", 0x113, &one(ODD, -3.0, 3.0), |t| {
        ops::silu(&t[0])
    });
}

#[test]
fn pointwise_backward() {
    let cases: [(&str, Bwd, f32, f32); 9] = [
        ("relu_backward", ops::relu_backward, -2.0, 2.0),
        (
            "relu_backward_batched",
            ops::relu_backward_batched,
            -2.0,
            2.0,
        ),
        ("tanh_backward", ops::tanh_backward, -0.99, 0.99),
        (
            "tanh_backward_batched",
            ops::tanh_backward_batched,
            -0.99,
            0.99,
        ),
        ("sigmoid_backward", ops::sigmoid_backward, 0.01, 0.99),
        ("silu_backward", ops::silu_backward, -6.0, 6.0),
        ("gelu_backward", ops::gelu_backward, -5.0, 5.0),
        ("gelu_exact_backward", ops::gelu_exact_backward, -5.0, 5.0),
        ("quick_gelu_backward", ops::quick_gelu_backward, -5.0, 5.0),
    ];
    for (i, (name, f, lo, hi)) in cases.into_iter().enumerate() {
        parity(name, 0x200 + i as u64, &with_grad(SHAPE, lo, hi), bwd(f));
    }
    parity("elu_backward", 0x210, &with_grad(ODD, -3.0, 3.0), |t| {
        let mut dx = Tensor::default();
        ops::elu_backward(&t[0], &t[1], 1.3, &mut dx)?;
        Ok(dx)
    });
    parity(
        "leaky_relu_backward",
        0x211,
        &with_grad(SHAPE, -3.0, 3.0),
        |t| {
            let mut dx = Tensor::default();
            ops::leaky_relu_backward(&t[0], &t[1], 0.2, &mut dx)?;
            Ok(dx)
        },
    );
}

#[test]
fn gated_units() {
    let glu: [(&str, Fwd, Bwd); 3] = [
        ("geglu", ops::geglu_forward, ops::geglu_backward),
        (
            "geglu_exact",
            ops::geglu_exact_forward,
            ops::geglu_exact_backward,
        ),
        ("swiglu", ops::swiglu_forward, ops::swiglu_backward),
    ];
    for (i, (name, f, b)) in glu.into_iter().enumerate() {
        for (j, d) in [96usize, 7].into_iter().enumerate() {
            let seed = 0x300 + 10 * i as u64 + j as u64;
            parity(
                &format!("{name}_forward D={d}"),
                seed,
                &[Input::new(17, 2 * d, -3.0, 3.0)],
                fwd(f),
            );
            parity(
                &format!("{name}_backward D={d}"),
                seed + 5,
                &[
                    Input::new(17, 2 * d, -3.0, 3.0),
                    Input::new(17, d, -1.0, 1.0),
                ],
                bwd(b),
            );
        }
    }
}

#[test]
fn gated_units_check_shapes() {
    let x = Tensor::zeros_on(brotensor::Device::Cpu, 2, 5, brotensor::Dtype::F32).unwrap();
    let e = ops::swiglu_forward(&x, &mut Tensor::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "brotensor: swiglu_forward: X.cols must be even (2*D), got 5"
    );
    let x = Tensor::zeros_on(brotensor::Device::Cpu, 2, 4, brotensor::Dtype::F32).unwrap();
    let dy = Tensor::zeros_on(brotensor::Device::Cpu, 2, 4, brotensor::Dtype::F32).unwrap();
    let e = ops::geglu_backward(&x, &dy, &mut Tensor::default()).unwrap_err();
    assert!(
        matches!(
            e,
            brotensor::Error::Shape {
                op: "geglu_backward",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn snake_against_float64_and_across_devices() {
    use brotensor::{Device, Dtype};
    let (n, c, l) = (2usize, 3usize, 5usize);
    let x: Vec<f32> = (0..n * c * l)
        .map(|i| ((i * 7) % 13) as f32 * 0.3 - 1.8)
        .collect();
    let dy: Vec<f32> = (0..n * c * l)
        .map(|i| ((i * 5) % 11) as f32 * 0.2 - 1.0)
        .collect();
    let alpha = [0.5f32, 1.5, -0.7];
    let beta = [2.0f32, 0.0, -1e-12];
    for dev in std::iter::once(Device::Cpu).chain(brotensor_tests::gpu_devices()) {
        for with_beta in [false, true] {
            let xt = Tensor::from_slice_on(dev, &x, n, c * l).unwrap();
            let at = Tensor::from_slice_on(dev, &alpha, c, 1).unwrap();
            let bt = Tensor::from_slice_on(dev, &beta, c, 1).unwrap();
            let b = with_beta.then_some(&bt);
            let mut y = Tensor::default();
            ops::snake_forward(&xt, &at, b, (n, c, l), &mut y).unwrap();
            let dyt = Tensor::from_slice_on(dev, &dy, n, c * l).unwrap();
            let (mut dx, mut da) = (
                Tensor::default(),
                Tensor::zeros_on(dev, c, 1, Dtype::F32).unwrap(),
            );
            let mut db = Tensor::zeros_on(dev, c, 1, Dtype::F32).unwrap();
            ops::snake_backward(
                &xt,
                &at,
                b,
                &dyt,
                (n, c, l),
                &mut dx,
                &mut da,
                with_beta.then_some(&mut db),
            )
            .unwrap();
            let (y, dx, da, db) = (
                y.to_vec::<f32>().unwrap(),
                dx.to_vec::<f32>().unwrap(),
                da.to_vec::<f32>().unwrap(),
                db.to_vec::<f32>().unwrap(),
            );
            let (mut wa, mut wb) = (vec![0.0f64; c], vec![0.0f64; c]);
            for i in 0..x.len() {
                let ch = (i / l) % c;
                let a = alpha[ch] as f64;
                let d = if with_beta { beta[ch] as f64 } else { a };
                let d = if d >= 0.0 { d.max(1e-9) } else { d.min(-1e-9) };
                let r = 1.0 / d;
                let (xv, g) = (x[i] as f64, dy[i] as f64);
                let (s, co) = ((a * xv).sin(), (a * xv).cos());
                let want_y = xv + r * s * s;
                let want_dx = g * (1.0 + 2.0 * a * r * s * co);
                let tol = |w: f64| 1e-4 * (1.0 + w.abs());
                // Channels with |d| floored at 1e-9 blow up (r = 1e9): compare relatively.
                assert!(
                    (y[i] as f64 - want_y).abs()
                        <= tol(want_y) * if r.abs() > 1e6 { 1e3 } else { 1.0 },
                    "{dev} beta={with_beta} y[{i}]"
                );
                assert!(
                    (dx[i] as f64 - want_dx).abs()
                        <= tol(want_dx) * if r.abs() > 1e6 { 1e3 } else { 1.0 },
                    "{dev} dx[{i}]"
                );
                wa[ch] += g * 2.0 * r * xv * s * co;
                let bterm = g * (-r * r * s * s);
                if with_beta {
                    wb[ch] += bterm;
                } else {
                    wa[ch] += bterm;
                }
            }
            for ch in 0..c {
                if (if with_beta {
                    beta[ch] as f64
                } else {
                    alpha[ch] as f64
                })
                .abs()
                    < 1e-6
                {
                    continue; // the floored channel's gradient is ~1e18: checked for sign only
                }
                assert!(
                    (da[ch] as f64 - wa[ch]).abs() <= 1e-3 * (1.0 + wa[ch].abs()),
                    "{dev} dalpha[{ch}]: {} vs {}",
                    da[ch],
                    wa[ch]
                );
                if with_beta {
                    assert!(
                        (db[ch] as f64 - wb[ch]).abs() <= 1e-3 * (1.0 + wb[ch].abs()),
                        "{dev} dbeta[{ch}]"
                    );
                }
            }
        }
    }
}
