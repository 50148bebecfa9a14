//! Claims of docs/op-coverage.md that no other test exercised, each checked against a float64
//! reference written here (not the CPU crate's code): the 16-bit batched LayerNorm, the
//! single-vector LayerNorm and its gradient in every dtype, the 16-bit linear ops on the CPU
//! in F16 and BF16, and the F16 inputs of `threshold_u8` and `rows_count_above` on the CPU.

use brotensor::ops::{self, AbtSpec, Act};
use brotensor::{Device, Dtype, Error, Tensor};
use brotensor_tests::reference::epilogue;
use brotensor_tests::{assert_close, gpu_devices, read_f32, round_through, tensor, SplitMix64};

/// `(atol, rtol)` for a result stored in `dtype`, on values scaled so that the largest
/// expected magnitude is 1: half an output ulp and a little FP32 work, so a zero, halved or
/// misplaced output still fails.
fn tol(dtype: Dtype) -> (f32, f32) {
    match dtype {
        Dtype::F16 => (3e-3, 3e-3),
        Dtype::BF16 => (1.6e-2, 1e-2),
        _ => (2e-5, 1e-4),
    }
}

/// Compares `got` with the float64 reference `want` at [`tol`] for `dtype`. Both sides are
/// divided by the reference's largest magnitude first, so the absolute part of the tolerance
/// is relative to the output's own scale.
fn check(tag: &str, dtype: Dtype, want: &[f64], got: &Tensor) {
    assert_eq!(got.dtype(), dtype, "{tag}: output dtype");
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(scale > 0.0, "{tag}: an all-zero reference cannot fail");
    let want: Vec<f32> = want.iter().map(|&v| (v / scale) as f32).collect();
    let got: Vec<f32> = read_f32(got)
        .unwrap_or_else(|e| panic!("{tag}: read back: {e}"))
        .into_iter()
        .map(|v| (f64::from(v) / scale) as f32)
        .collect();
    assert_close(tag, &want, &got, tol(dtype));
}

/// The devices on which `dtype` computes: the CPU for F32 only (it is the FP32 reference),
/// then every GPU that supports `dtype`.
fn devices(dtype: Dtype, with_cpu: bool) -> Vec<Device> {
    let mut out = Vec::new();
    if with_cpu {
        out.push(Device::Cpu);
    }
    for d in gpu_devices() {
        if brotensor::supports_dtype(d, dtype).unwrap() {
            out.push(d);
        } else {
            eprintln!("coverage_gaps: {d} has no {dtype}, skipped there");
        }
    }
    out
}

/// `values` rounded through `dtype` and widened to f64: what a device of that dtype holds.
fn held(dtype: Dtype, values: &[f32]) -> Vec<f64> {
    round_through(dtype, values)
        .into_iter()
        .map(f64::from)
        .collect()
}

/// Two-pass LayerNorm of one row in f64: `(y, xhat, mean, rstd)`.
fn layernorm_f64(x: &[f64], g: &[f64], b: &[f64], eps: f64) -> (Vec<f64>, Vec<f64>, f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    let rstd = 1.0 / (var + eps).sqrt();
    let xhat: Vec<f64> = x.iter().map(|v| (v - mean) * rstd).collect();
    let y = xhat
        .iter()
        .zip(g.iter().zip(b))
        .map(|(h, (g, b))| h * g + b)
        .collect();
    (y, xhat, mean, rstd)
}

/// The input gradient of one LayerNorm row in f64: `rstd (u - mean(u) - xhat mean(u xhat))`
/// with `u = dy gamma`.
fn layernorm_dx_f64(dy: &[f64], xhat: &[f64], g: &[f64], rstd: f64) -> Vec<f64> {
    let n = dy.len() as f64;
    let u: Vec<f64> = dy.iter().zip(g).map(|(d, g)| d * g).collect();
    let mu = u.iter().sum::<f64>() / n;
    let mux = u.iter().zip(xhat).map(|(u, h)| u * h).sum::<f64>() / n;
    u.iter()
        .zip(xhat)
        .map(|(u, h)| rstd * (u - mu - h * mux))
        .collect()
}

#[test]
fn layernorm_forward_inference_batched_fp16_against_f64() {
    let (rows, d, eps) = (7, 200, 1e-5f32);
    let mut rng = SplitMix64::new(0xC0_01);
    let x = rng.uniform(rows * d, -3.0, 5.0);
    let g = rng.uniform(d, 0.5, 1.5);
    let b = rng.uniform(d, -0.5, 0.5);
    for dtype in [Dtype::F16, Dtype::BF16] {
        let (xh, gh, bh) = (held(dtype, &x), held(dtype, &g), held(dtype, &b));
        let want: Vec<f64> = xh
            .chunks(d)
            .flat_map(|row| layernorm_f64(row, &gh, &bh, f64::from(eps)).0)
            .collect();
        for dev in devices(dtype, true) {
            let xt = tensor(dev, &x, rows, d, dtype).unwrap();
            let gt = tensor(dev, &g, d, 1, dtype).unwrap();
            let bt = tensor(dev, &b, d, 1, dtype).unwrap();
            let mut y = Tensor::default();
            ops::layernorm_forward_inference_batched_fp16(&xt, &gt, &bt, eps, &mut y).unwrap();
            assert_eq!(y.shape(), (rows, d));
            check(
                &format!("layernorm_forward_inference_batched_fp16 on {dev} {dtype}"),
                dtype,
                &want,
                &y,
            );
        }
    }
    // The table's other cell: no F32 form.
    let x32 = tensor(Device::Cpu, &x, rows, d, Dtype::F32).unwrap();
    let g32 = tensor(Device::Cpu, &g, d, 1, Dtype::F32).unwrap();
    let b32 = tensor(Device::Cpu, &b, d, 1, Dtype::F32).unwrap();
    let mut y = Tensor::default();
    assert!(matches!(
        ops::layernorm_forward_inference_batched_fp16(&x32, &g32, &b32, eps, &mut y),
        Err(Error::Dtype { .. })
    ));
}

#[test]
fn single_vector_layernorm_and_gradient_against_f64() {
    // `x` is 6x50 but normalized as one vector of 300; gamma and beta hold 300 values.
    let (rows, cols, eps) = (6, 50, 1e-5f32);
    let n = rows * cols;
    let mut rng = SplitMix64::new(0xC0_02);
    let x = rng.uniform(n, -2.0, 3.0);
    let g = rng.uniform(n, 0.5, 1.5);
    let b = rng.uniform(n, -0.5, 0.5);
    let dy = rng.uniform(n, -1.0, 1.0);
    // The parameter gradients accumulate onto what they hold.
    let dg0 = rng.uniform(n, -0.25, 0.25);
    let db0 = rng.uniform(n, -0.25, 0.25);
    for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        let (xh, gh, bh, dyh) = (
            held(dtype, &x),
            held(dtype, &g),
            held(dtype, &b),
            held(dtype, &dy),
        );
        let (y_want, xhat_want, mean_want, rstd_want) =
            layernorm_f64(&xh, &gh, &bh, f64::from(eps));
        let dx_want = layernorm_dx_f64(&dyh, &xhat_want, &gh, rstd_want);
        let dg_want: Vec<f64> = held(dtype, &dg0)
            .iter()
            .zip(dyh.iter().zip(&xhat_want))
            .map(|(a, (d, h))| a + d * h)
            .collect();
        let db_want: Vec<f64> = held(dtype, &db0)
            .iter()
            .zip(&dyh)
            .map(|(a, d)| a + d)
            .collect();
        for dev in devices(dtype, true) {
            let tag = |what: &str| format!("{what} on {dev} {dtype}");
            let xt = tensor(dev, &x, rows, cols, dtype).unwrap();
            let gt = tensor(dev, &g, n, 1, dtype).unwrap();
            let bt = tensor(dev, &b, n, 1, dtype).unwrap();
            let (mut y, mut xhat) = (Tensor::default(), Tensor::default());
            let (mean, rstd) =
                ops::layernorm_forward(&xt, &gt, &bt, eps, &mut y, &mut xhat).unwrap();
            assert!(
                (f64::from(mean) - mean_want).abs() <= 1e-5 + 1e-5 * mean_want.abs(),
                "{}: {mean} vs {mean_want}",
                tag("layernorm_forward mean")
            );
            assert!(
                (f64::from(rstd) - rstd_want).abs() <= 1e-5 * rstd_want,
                "{}: {rstd} vs {rstd_want}",
                tag("layernorm_forward rstd")
            );
            assert_eq!((y.shape(), xhat.shape()), ((rows, cols), (rows, cols)));
            check(&tag("layernorm_forward y"), dtype, &y_want, &y);
            check(&tag("layernorm_forward xhat"), dtype, &xhat_want, &xhat);

            let dyt = tensor(dev, &dy, rows, cols, dtype).unwrap();
            let mut dgt = tensor(dev, &dg0, n, 1, dtype).unwrap();
            let mut dbt = tensor(dev, &db0, n, 1, dtype).unwrap();
            let mut dx = Tensor::default();
            ops::layernorm_backward(&dyt, &xhat, &gt, rstd, &mut dx, &mut dgt, &mut dbt).unwrap();
            assert_eq!(dx.shape(), (rows, cols));
            check(&tag("layernorm_backward dx"), dtype, &dx_want, &dx);
            check(&tag("layernorm_backward dgamma"), dtype, &dg_want, &dgt);
            check(&tag("layernorm_backward dbeta"), dtype, &db_want, &dbt);
        }
    }
}

/// `act(A (m, k) . B (n, k)^T + bias)` in f64, row-major `(m, n)`.
fn abt_f64(
    a: &[f64],
    b: &[f64],
    bias: Option<&[f64]>,
    (m, n, k): (usize, usize, usize),
    act: Act,
) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k).map(|p| a[i * k + p] * b[j * k + p]).sum();
            c[i * n + j] = epilogue(act, dot + bias.map_or(0.0, |b| b[j]));
        }
    }
    c
}

/// Every device that runs the 16-bit linear ops in `dtype`: the CPU (in F32 on widened
/// copies) and each GPU with `dtype`.
fn linear_devices(dtype: Dtype) -> Vec<Device> {
    let mut out = vec![Device::Cpu];
    out.extend(devices(dtype, false));
    out
}

#[test]
fn sixteen_bit_linear_ops_on_cpu_and_gpu_against_f64() {
    let (batch, out, inp) = (5, 24, 70);
    let mut rng = SplitMix64::new(0xC0_03);
    let w = rng.uniform(out * inp, -1.0, 1.0);
    let bias = rng.uniform(out, -0.5, 0.5);
    let x = rng.uniform(batch * inp, -1.0, 1.0);
    for dtype in [Dtype::F16, Dtype::BF16] {
        let (wh, bh, xh) = (held(dtype, &w), held(dtype, &bias), held(dtype, &x));
        for dev in linear_devices(dtype) {
            let wt = tensor(dev, &w, out, inp, dtype).unwrap();
            let bt = tensor(dev, &bias, out, 1, dtype).unwrap();
            let xt = tensor(dev, &x, batch, inp, dtype).unwrap();
            let mut y = Tensor::default();
            ops::linear_forward_batched_fp16(&wt, Some(&bt), &xt, &mut y).unwrap();
            assert_eq!(y.shape(), (batch, out));
            let want = abt_f64(&xh, &wh, Some(&bh), (batch, out, inp), Act::None);
            check(
                &format!("linear_forward_batched_fp16 on {dev} {dtype}"),
                dtype,
                &want,
                &y,
            );
            for act in [
                Act::Relu,
                Act::Gelu,
                Act::GeluExact,
                Act::Silu,
                Act::QuickGelu,
            ] {
                let mut y = Tensor::default();
                ops::linear_forward_batched_fp16_act(&wt, Some(&bt), &xt, &mut y, act).unwrap();
                let want = abt_f64(&xh, &wh, Some(&bh), (batch, out, inp), act);
                check(
                    &format!("linear_forward_batched_fp16_act {act:?} on {dev} {dtype}"),
                    dtype,
                    &want,
                    &y,
                );
            }
        }
        // They are 16-bit ops: F32 operands are refused on every device.
        let w32 = tensor(Device::Cpu, &w, out, inp, Dtype::F32).unwrap();
        let x32 = tensor(Device::Cpu, &x, batch, inp, Dtype::F32).unwrap();
        let mut y = Tensor::default();
        assert!(matches!(
            ops::linear_forward_batched_fp16(&w32, None, &x32, &mut y),
            Err(Error::Dtype { .. })
        ));
    }
}

#[test]
fn matmul_abt_on_cpu_and_gpu_against_f64() {
    let (batch, m, n, k) = (3, 9, 20, 33);
    let spec = AbtSpec {
        batch,
        m,
        n,
        k,
        stride_a: m * k,
        stride_b: n * k,
        stride_c: m * n,
    };
    let mut rng = SplitMix64::new(0xC0_04);
    let a = rng.uniform(batch * m * k, -1.0, 1.0);
    let b = rng.uniform(batch * n * k, -1.0, 1.0);
    let bias = rng.uniform(n, -0.5, 0.5);
    for dtype in [Dtype::F16, Dtype::BF16] {
        let (ah, bh, biash) = (held(dtype, &a), held(dtype, &b), held(dtype, &bias));
        for act in [Act::None, Act::Silu] {
            let want: Vec<f64> = (0..batch)
                .flat_map(|z| {
                    abt_f64(
                        &ah[z * m * k..(z + 1) * m * k],
                        &bh[z * n * k..(z + 1) * n * k],
                        Some(&biash),
                        (m, n, k),
                        act,
                    )
                })
                .collect();
            for dev in linear_devices(dtype) {
                let at = tensor(dev, &a, batch * m, k, dtype).unwrap();
                let bt = tensor(dev, &b, batch * n, k, dtype).unwrap();
                let biast = tensor(dev, &bias, n, 1, dtype).unwrap();
                let mut c = Tensor::zeros_on(dev, batch * m, n, dtype).unwrap();
                ops::matmul_abt(&at, &bt, &mut c, spec, Some(&biast), act).unwrap();
                check(
                    &format!("matmul_abt {act:?} on {dev} {dtype}"),
                    dtype,
                    &want,
                    &c,
                );
            }
        }
    }
}

#[test]
fn int8_weight_linear_on_cpu_and_gpu_against_f64() {
    let (batch, out, inp) = (4, 16, 45);
    let mut rng = SplitMix64::new(0xC0_05);
    let q: Vec<i8> = (0..out * inp)
        .map(|_| ((rng.next_u64() % 255) as i32 - 127) as i8)
        .collect();
    let scales = rng.uniform(out, 0.001, 0.02);
    let bias = rng.uniform(out, -0.5, 0.5);
    let x = rng.uniform(batch * inp, -1.0, 1.0);
    // The dequantized weight in f64: q * scale per row.
    let wd: Vec<f64> = q
        .iter()
        .enumerate()
        .map(|(i, &v)| f64::from(v) * f64::from(scales[i / inp]))
        .collect();
    for dtype in [Dtype::F16, Dtype::BF16] {
        // The device narrows the dequantized weight to `dtype` before the product.
        let w_held: Vec<f32> = wd.iter().map(|&v| v as f32).collect();
        let want = abt_f64(
            &held(dtype, &x),
            &held(dtype, &w_held),
            Some(&held(dtype, &bias)),
            (batch, out, inp),
            Act::None,
        );
        for dev in linear_devices(dtype) {
            let wt = Tensor::from_slice_on(dev, &q, out, inp).unwrap();
            let st = Tensor::from_slice_on(dev, &scales, out, 1).unwrap();
            let bt = tensor(dev, &bias, out, 1, dtype).unwrap();
            let xt = tensor(dev, &x, batch, inp, dtype).unwrap();
            let mut y = Tensor::default();
            ops::linear_forward_batched_int8w_fp16(&wt, &st, Some(&bt), &xt, &mut y).unwrap();
            assert_eq!(y.shape(), (batch, out));
            check(
                &format!("linear_forward_batched_int8w_fp16 on {dev} {dtype}"),
                dtype,
                &want,
                &y,
            );
        }
    }
}

#[test]
fn int8_weight_matmul_on_cpu_and_gpu_against_f64() {
    let (out, inp, cols) = (12, 37, 5);
    let mut rng = SplitMix64::new(0xC0_06);
    let q: Vec<i8> = (0..out * inp)
        .map(|_| ((rng.next_u64() % 255) as i32 - 127) as i8)
        .collect();
    let scales = rng.uniform(out, 0.001, 0.02);
    let x = rng.uniform(inp * cols, -1.0, 1.0);
    for dtype in [Dtype::F16, Dtype::BF16] {
        // The device narrows the dequantized weight q * scale to `dtype` before the product.
        let w_held: Vec<f32> = (0..out * inp)
            .map(|i| (f64::from(q[i]) * f64::from(scales[i / inp])) as f32)
            .collect();
        let (wd, xd) = (held(dtype, &w_held), held(dtype, &x));
        let want: Vec<f64> = (0..out * cols)
            .map(|i| {
                let (r, c) = (i / cols, i % cols);
                (0..inp).map(|k| wd[r * inp + k] * xd[k * cols + c]).sum()
            })
            .collect();
        for dev in linear_devices(dtype) {
            let wt = Tensor::from_slice_on(dev, &q, out, inp).unwrap();
            let st = Tensor::from_slice_on(dev, &scales, out, 1).unwrap();
            let xt = tensor(dev, &x, inp, cols, dtype).unwrap();
            let mut y = Tensor::default();
            ops::matmul_int8w_fp16(&wt, &st, &xt, &mut y).unwrap();
            assert_eq!(y.shape(), (out, cols));
            check(
                &format!("matmul_int8w_fp16 on {dev} {dtype}"),
                dtype,
                &want,
                &y,
            );
            // X's rows must match W's columns; scales one per row; W must be I8.
            let bad_x = tensor(dev, &x[..(inp - 1) * cols], inp - 1, cols, dtype).unwrap();
            let err = ops::matmul_int8w_fp16(&wt, &st, &bad_x, &mut y).unwrap_err();
            assert!(err.to_string().contains("matmul_int8w_fp16"), "{err}");
            let short = Tensor::from_slice_on(dev, &scales[1..], out - 1, 1).unwrap();
            assert!(ops::matmul_int8w_fp16(&wt, &short, &xt, &mut y).is_err());
            let f32_w = Tensor::from_slice_on(dev, &w_held, out, inp).unwrap();
            assert!(ops::matmul_int8w_fp16(&f32_w, &st, &xt, &mut y).is_err());
        }
    }
}

/// Inputs for the comparisons: random values plus ones equal to the thresholds (strictly
/// greater counts, so these give 0), their neighbours, infinities and NaN.
fn threshold_inputs(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut v = SplitMix64::new(seed).uniform(rows * cols, -1.0, 1.0);
    let special = [
        0.25,
        -0.25,
        0.5,
        0.25 + 1.0 / 4096.0, // the F16 value just above 0.25
        0.25 - 1.0 / 8192.0, // the F16 value just below 0.25
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
    ];
    for (i, s) in special.into_iter().enumerate() {
        v[i * 7 % (rows * cols)] = s;
    }
    v
}

#[test]
fn threshold_u8_f32_and_f16_on_every_device_against_f64() {
    let (rows, cols, t) = (11, 37, 0.25f32);
    let x = threshold_inputs(rows, cols, 0xC0_06);
    for dtype in [Dtype::F32, Dtype::F16] {
        // NaN compares false, as in the f64 comparison.
        let want: Vec<i8> = held(dtype, &x)
            .iter()
            .map(|&v| i8::from(v > f64::from(t)))
            .collect();
        assert!(want.contains(&1) && want.contains(&0));
        let mut devs = vec![Device::Cpu];
        devs.extend(devices(dtype, false));
        for dev in devs {
            let xt = tensor(dev, &x, rows, cols, dtype).unwrap();
            let mut y = Tensor::default();
            ops::threshold_u8(&xt, t, &mut y).unwrap();
            assert_eq!((y.dtype(), y.shape()), (Dtype::I8, (rows, cols)));
            assert_eq!(
                y.to_vec::<i8>().unwrap(),
                want,
                "threshold_u8 on {dev} {dtype}"
            );
        }
    }
}

#[test]
fn rows_count_above_f32_and_f16_on_every_device_against_f64() {
    let (rows, cols, lo, hi) = (9, 301, -0.25f32, 0.5f32);
    let x = threshold_inputs(rows, cols, 0xC0_07);
    for dtype in [Dtype::F32, Dtype::F16] {
        let want: Vec<i32> = held(dtype, &x)
            .chunks(cols)
            .flat_map(|row| {
                let above = |t: f32| row.iter().filter(|&&v| v > f64::from(t)).count() as i32;
                [above(lo), above(hi)]
            })
            .collect();
        let mut devs = vec![Device::Cpu];
        devs.extend(devices(dtype, false));
        for dev in devs {
            let xt = tensor(dev, &x, rows, cols, dtype).unwrap();
            let mut c = Tensor::default();
            ops::rows_count_above(&xt, lo, hi, &mut c).unwrap();
            assert_eq!((c.dtype(), c.shape()), (Dtype::I32, (rows, 2)));
            assert_eq!(
                c.to_vec::<i32>().unwrap(),
                want,
                "rows_count_above on {dev} {dtype}"
            );
        }
    }
}

/// The element-wise functions the coverage table names whose other tests reach them only
/// through an alias (`ops::log` for `ops::log_forward`, `ops::sub` for `ops::sub_out`, ...):
/// each called by its own name on every device and dtype against f64.
#[test]
fn elementwise_functions_by_their_table_names_against_f64() {
    /// A name, the op, its f64 formula and the input range.
    type Case = (
        &'static str,
        fn(&Tensor, &mut Tensor) -> brotensor::Result<()>,
        fn(f64) -> f64,
        (f32, f32),
    );
    let (rows, cols) = (5, 131);
    let forwards: [Case; 5] = [
        ("log_forward", ops::log_forward, f64::ln, (0.05, 8.0)),
        (
            "round_forward",
            ops::round_forward,
            f64::round_ties_even,
            (-20.0, 20.0),
        ),
        ("sin_forward", ops::sin_forward, f64::sin, (-6.0, 6.0)),
        ("cos_forward", ops::cos_forward, f64::cos, (-6.0, 6.0)),
        (
            "rsqrt_forward",
            ops::rsqrt_forward,
            |v| 1.0 / v.sqrt(),
            (0.05, 9.0),
        ),
    ];
    let mut rng = SplitMix64::new(0xC0_08);
    let a = rng.uniform(rows * cols, -2.0, 2.0);
    let b = rng.uniform(rows * cols, 0.5, 2.0);
    let s = 0.375f32;
    for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        let (ah, bh) = (held(dtype, &a), held(dtype, &b));
        let map = |f: &dyn Fn(f64, f64) -> f64| -> Vec<f64> {
            ah.iter().zip(&bh).map(|(&x, &y)| f(x, y)).collect()
        };
        let s64 = f64::from(s);
        for dev in devices(dtype, true) {
            let tag = |what: &str| format!("{what} on {dev} {dtype}");
            for (name, op, f, (lo, hi)) in forwards {
                let x: Vec<f32> = a.iter().map(|v| lo + (hi - lo) * (v + 2.0) / 4.0).collect();
                let want: Vec<f64> = held(dtype, &x).into_iter().map(f).collect();
                let xt = tensor(dev, &x, rows, cols, dtype).unwrap();
                let mut y = Tensor::default();
                op(&xt, &mut y).unwrap();
                check(&tag(name), dtype, &want, &y);
            }
            let at = tensor(dev, &a, rows, cols, dtype).unwrap();
            let bt = tensor(dev, &b, rows, cols, dtype).unwrap();
            // A committed destination of another size: the `_out` forms resize it.
            let stale = || Tensor::zeros_on(dev, 2, 3, dtype).unwrap();
            let mut out = stale();
            ops::sub_out(&at, &bt, &mut out).unwrap();
            check(&tag("sub_out"), dtype, &map(&|x, y| x - y), &out);
            let mut out = stale();
            ops::div_out(&at, &bt, &mut out).unwrap();
            check(&tag("div_out"), dtype, &map(&|x, y| x / y), &out);
            let out = ops::sub_scalar(&at, s).unwrap();
            check(&tag("sub_scalar"), dtype, &map(&|x, _| x - s64), &out);
            let mut out = at.clone();
            out.sub_scalar_(s).unwrap();
            check(
                &tag("Tensor::sub_scalar_"),
                dtype,
                &map(&|x, _| x - s64),
                &out,
            );
            let mut out = stale();
            ops::div_scalar_out(&at, s, &mut out).unwrap();
            check(&tag("div_scalar_out"), dtype, &map(&|x, _| x / s64), &out);
            let mut out = at.clone();
            out.div_scalar_(s).unwrap();
            check(
                &tag("Tensor::div_scalar_"),
                dtype,
                &map(&|x, _| x / s64),
                &out,
            );
        }
    }
}
