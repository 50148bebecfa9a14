//! The GPU decode GEMV with quantized weights (`quant_linear` with at most
//! `QUANT_GEMV_MAX_ROWS` activation rows): every block type and activation dtype against a
//! float64 product of the host-dequantized weights (the host decoder is bit-exact with the
//! gguf package, tests/tests/all/gguf.rs), computed here.

use brotensor::ops::{self, Act};
use brotensor::{Device, Dtype, Tensor};
use brotensor_tests::reference::epilogue;
use brotensor_tests::{gpu_devices, read_f32, round_through, tensor, SplitMix64};

use super::gpu_dequant::{host, moderate_blocks, random_blocks};

/// One product: `x (m, k)`, `w (n, k)` of `wtype`, optional bias, and its float64 result
/// with the bound each element must meet.
struct Case {
    w: Vec<u8>,
    x: Vec<f32>,
    bias: Option<Vec<f32>>,
    want: Vec<f64>,
    tol: Vec<f64>,
}

/// Unit roundoff of results stored in `dtype`.
fn unit(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F16 => 2f64.powi(-11),
        Dtype::BF16 => 2f64.powi(-8),
        _ => 2f64.powi(-24),
    }
}

#[allow(clippy::too_many_arguments)]
fn case(
    wtype: Dtype,
    xtype: Dtype,
    (m, n, k): (usize, usize, usize),
    with_bias: bool,
    act: Act,
    seed: u64,
) -> Case {
    let w = moderate_blocks(wtype, n * k / wtype.block_size(), seed);
    let wd = host(wtype, &w);
    let mut rng = SplitMix64::new(seed ^ 0x5eed);
    let x = round_through(xtype, &rng.uniform(m * k, -1.0, 1.0));
    let bias = with_bias.then(|| round_through(xtype, &rng.uniform(n, -2.0, 2.0)));
    let (mut want, mut tol) = (vec![0.0; m * n], vec![0.0; m * n]);
    for r in 0..m {
        for j in 0..n {
            let (mut s, mut mag) = (0f64, 0f64);
            for t in 0..k {
                let p = x[r * k + t] as f64 * wd[j * k + t] as f64;
                s += p;
                mag += p.abs();
            }
            let b = bias.as_ref().map_or(0.0, |b| b[j] as f64);
            let v = epilogue(act, s + b);
            want[r * n + j] = v;
            // FP32 accumulation (error grows with sqrt(k) in the magnitude of the terms),
            // then the rounding of the stored output; the epilogues are at most 1.2-Lipschitz.
            tol[r * n + j] = 1.2 * 8.0 * 2f64.powi(-24) * (k as f64).sqrt() * (mag + b.abs())
                + 2.0 * unit(xtype) * v.abs()
                + 1e-30;
        }
    }
    Case {
        w,
        x,
        bias,
        want,
        tol,
    }
}

/// The first element of `got` outside its bound, if any.
fn outside(c: &Case, got: &[f32]) -> Option<(usize, f64, f64)> {
    assert_eq!(got.len(), c.want.len());
    (0..got.len())
        .find(|&i| (got[i] as f64 - c.want[i]).abs() > c.tol[i] || got[i].is_nan())
        .map(|i| (i, got[i] as f64, c.want[i]))
}

/// Asserts `got` is within bounds, and that the bounds reject a halved result, zeros and
/// one element off by its own size (so the check can fail on these data).
fn assert_within(tag: &str, c: &Case, got: &[f32]) {
    if let Some((i, g, w)) = outside(c, got) {
        panic!(
            "{tag}: element {i} is {g}, want {w} (tolerance {})",
            c.tol[i]
        );
    }
    let want: Vec<f32> = c.want.iter().map(|&v| v as f32).collect();
    let big = (0..want.len())
        .max_by(|&a, &b| want[a].abs().total_cmp(&want[b].abs()))
        .unwrap();
    let halved: Vec<f32> = want.iter().map(|v| v * 0.5).collect();
    let mut one_off = want.clone();
    one_off[big] *= 2.0;
    assert!(
        outside(c, &halved).is_some(),
        "{tag}: the bound passes a halved result"
    );
    assert!(
        outside(c, &vec![0.0; want.len()]).is_some(),
        "{tag}: the bound passes zeros"
    );
    assert!(
        outside(c, &one_off).is_some(),
        "{tag}: the bound passes a doubled element"
    );
}

/// `quant_linear` on `dev` for `c`.
fn run(
    dev: Device,
    c: &Case,
    wtype: Dtype,
    xtype: Dtype,
    (m, n, k): (usize, usize, usize),
    act: Act,
) -> Vec<f32> {
    let w = Tensor::from_raw_bytes_on(dev, &c.w, n, k, wtype).unwrap();
    let x = tensor(dev, &c.x, m, k, xtype).unwrap();
    let b = c
        .bias
        .as_ref()
        .map(|b| tensor(dev, b, 1, n, xtype).unwrap());
    let mut y = Tensor::default();
    ops::quant_linear(&w, b.as_ref(), &x, act, &mut y).unwrap();
    assert_eq!((y.dtype(), y.shape()), (xtype, (m, n)));
    read_f32(&y).unwrap()
}

/// The activation dtypes `dev` computes in (F16 only where the device has it).
fn float_types(dev: Device) -> Vec<Dtype> {
    let mut v = vec![Dtype::F32, Dtype::BF16];
    if brotensor::supports_dtype(dev, Dtype::F16).unwrap() {
        v.push(Dtype::F16);
    } else {
        eprintln!("note: {dev} has no F16: F16 activations are not run there");
    }
    v
}

#[test]
fn every_block_type_and_activation_dtype() {
    for dev in gpu_devices() {
        for (i, &wtype) in ops::QUANT_WEIGHT_DTYPES.iter().enumerate() {
            let be = wtype.block_size();
            for xtype in float_types(dev) {
                // m = 1, 3, 8 rows; odd n; k from a few blocks up to 4096.
                let shapes = [(1, 13, 4096), (3, 9, 3 * be), (8, 5, 1024.max(be))];
                for (s, &shape) in shapes.iter().enumerate() {
                    let seed = 1000 * i as u64 + 10 * s as u64;
                    let c = case(wtype, xtype, shape, false, Act::None, seed);
                    let got = run(dev, &c, wtype, xtype, shape, Act::None);
                    assert_within(&format!("{wtype} x {xtype} {shape:?} on {dev}"), &c, &got);
                }
            }
        }
    }
}

#[test]
fn bias_and_every_epilogue() {
    let acts = [
        Act::None,
        Act::Relu,
        Act::Gelu,
        Act::GeluExact,
        Act::Silu,
        Act::QuickGelu,
    ];
    for dev in gpu_devices() {
        for (a, act) in acts.into_iter().enumerate() {
            for (wtype, xtype) in [(Dtype::Q4_K, Dtype::F32), (Dtype::Q8_0, Dtype::BF16)] {
                let shape = (2, 11, 512);
                let c = case(wtype, xtype, shape, true, act, 77 + a as u64);
                let got = run(dev, &c, wtype, xtype, shape, act);
                assert_within(
                    &format!("{wtype} {act:?} + bias, {xtype} on {dev}"),
                    &c,
                    &got,
                );
            }
        }
    }
}

type Gemv = fn(&Tensor, Option<&Tensor>, &Tensor, &mut Tensor) -> brotensor::Result<()>;

#[test]
fn cpp_linear_forward_wrappers() {
    let cases: [(Dtype, Gemv, Gemv); 3] = [
        (
            Dtype::Q4_K,
            ops::linear_forward_q4k_fp16,
            ops::linear_forward_batched_q4k_fp16,
        ),
        (
            Dtype::Q8_0,
            ops::linear_forward_q8_0_fp16,
            ops::linear_forward_batched_q8_0_fp16,
        ),
        (
            Dtype::Q6_K,
            ops::linear_forward_q6k_fp16,
            ops::linear_forward_batched_q6k_fp16,
        ),
    ];
    for dev in gpu_devices() {
        if !brotensor::supports_dtype(dev, Dtype::F16).unwrap() {
            eprintln!("note: {dev} has no F16: the _fp16 wrappers are not run there");
            continue;
        }
        for (i, (wtype, gemv, batched)) in cases.into_iter().enumerate() {
            let (n, k) = (7, 512);
            // y (out, 1) = W . x + bias, x `in` elements.
            let c = case(
                wtype,
                Dtype::F16,
                (1, n, k),
                true,
                Act::None,
                500 + i as u64,
            );
            let w = Tensor::from_raw_bytes_on(dev, &c.w, n, k, wtype).unwrap();
            let x = tensor(dev, &c.x, k, 1, Dtype::F16).unwrap();
            let b = tensor(dev, c.bias.as_ref().unwrap(), n, 1, Dtype::F16).unwrap();
            let mut y = Tensor::default();
            gemv(&w, Some(&b), &x, &mut y).unwrap();
            assert_eq!((y.dtype(), y.dims()), (Dtype::F16, &[n, 1][..]));
            assert_within(
                &format!("{wtype} gemv wrapper on {dev}"),
                &c,
                &read_f32(&y).unwrap(),
            );
            // Y (B, out) = X (B, in) . W^T + bias at a small batch (the GEMV path).
            let c = case(
                wtype,
                Dtype::F16,
                (4, n, k),
                true,
                Act::None,
                600 + i as u64,
            );
            let w = Tensor::from_raw_bytes_on(dev, &c.w, n, k, wtype).unwrap();
            let x = tensor(dev, &c.x, 4, k, Dtype::F16).unwrap();
            let b = tensor(dev, c.bias.as_ref().unwrap(), 1, n, Dtype::F16).unwrap();
            batched(&w, Some(&b), &x, &mut y).unwrap();
            assert_eq!((y.dtype(), y.shape()), (Dtype::F16, (4, n)));
            assert_within(
                &format!("{wtype} batched wrapper on {dev}"),
                &c,
                &read_f32(&y).unwrap(),
            );
            // F32 activations and another block type are refused by name.
            let x32 = tensor(dev, &c.x[..k], k, 1, Dtype::F32).unwrap();
            let e = gemv(&w, None, &x32, &mut y).unwrap_err().to_string();
            assert!(
                e.starts_with("brotensor: linear_forward_") && e.contains("`x`"),
                "{e}"
            );
            let q40 = random_blocks(Dtype::Q4_0, 16 * n, 2);
            let q40 = Tensor::from_raw_bytes_on(dev, &q40, n, k, Dtype::Q4_0).unwrap();
            let e = batched(&q40, None, &x, &mut y).unwrap_err().to_string();
            assert!(
                e.starts_with("brotensor: linear_forward_batched_") && e.contains("Q4_0"),
                "{e}"
            );
        }
    }
}

#[test]
fn quant_linear_rejects_bad_operands() {
    for dev in gpu_devices() {
        let (n, k) = (3, 256);
        let w =
            Tensor::from_raw_bytes_on(dev, &random_blocks(Dtype::Q4_K, n, 4), n, k, Dtype::Q4_K)
                .unwrap();
        let x = tensor(dev, &[0.5; 2 * 256], 2, k, Dtype::F32).unwrap();
        let mut y = Tensor::default();
        let err = |r: brotensor::Result<()>| r.unwrap_err().to_string();
        // `x` rows of another length.
        let short = tensor(dev, &[0.5; 2 * 128], 2, 128, Dtype::F32).unwrap();
        let e = err(ops::quant_linear(&w, None, &short, Act::None, &mut y));
        assert!(
            e.starts_with("brotensor: quant_linear:") && e.contains("`x`"),
            "{e}"
        );
        // Bias of the wrong length or dtype.
        let b = tensor(dev, &[0.0; 4], 1, 4, Dtype::F32).unwrap();
        let e = err(ops::quant_linear(&w, Some(&b), &x, Act::None, &mut y));
        assert!(
            e.starts_with("brotensor: quant_linear:") && e.contains("`bias`"),
            "{e}"
        );
        let b = tensor(dev, &[0.0; 3], 1, 3, Dtype::BF16).unwrap();
        let e = err(ops::quant_linear(&w, Some(&b), &x, Act::None, &mut y));
        assert!(e.contains("`bias`"), "{e}");
        // A float weight, and a block dtype as activations.
        let fw = tensor(dev, &[0.5; 3 * 256], n, k, Dtype::F32).unwrap();
        let e = err(ops::quant_linear(&fw, None, &x, Act::None, &mut y));
        assert!(
            e.starts_with("brotensor: quant_linear:") && e.contains("`w`"),
            "{e}"
        );
        let e = err(ops::quant_linear(&w, None, &w, Act::None, &mut y));
        assert!(e.starts_with("brotensor: quant_linear:"), "{e}");
        // Operands on two devices.
        let xc = tensor(Device::Cpu, &[0.5; 2 * 256], 2, k, Dtype::F32).unwrap();
        let e = err(ops::quant_linear(&w, None, &xc, Act::None, &mut y));
        assert!(e.starts_with("brotensor: quant_linear:"), "{e}");
    }
}
