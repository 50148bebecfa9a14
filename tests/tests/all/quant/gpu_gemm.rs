//! The GPU prefill GEMM with quantized weights (`quant_linear` with more than
//! `QUANT_GEMV_MAX_ROWS` rows): every weight block type, F32/F16/BF16 activations, row
//! counts that are not tile multiples, odd output widths, with and without bias, every
//! epilogue, against a float64 product of the host-decoded weights (the host decoder is
//! bit-exact with the gguf package, tests/tests/all/gguf.rs).

use super::gpu_dequant::{host, random_blocks};
use brotensor::ops::{self, Act, QUANT_GEMV_MAX_ROWS, QUANT_WEIGHT_DTYPES};
use brotensor::{Device, Dtype, Tensor};
use brotensor_tests::{
    assert_close_rows, gpu_devices, read_f32, round_through, tensor, tolerance, SplitMix64,
};

/// erf to about 1.5e-7 (Abramowitz and Stegun 7.1.26), in float64.
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    (1.0 - poly * (-x * x).exp()).copysign(x)
}

/// The epilogue `act` of one value, in float64.
fn act64(act: Act, v: f64) -> f64 {
    let sigmoid = |z: f64| 1.0 / (1.0 + (-z).exp());
    match act {
        Act::None => v,
        Act::Relu => v.max(0.0),
        Act::Gelu => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * v * (1.0 + (c * (v + 0.044_715 * v * v * v)).tanh())
        }
        Act::GeluExact => 0.5 * v * (1.0 + erf(v / std::f64::consts::SQRT_2)),
        Act::Silu => v * sigmoid(v),
        Act::QuickGelu => v * sigmoid(1.702 * v),
    }
}

/// One GEMM case: `w (n, k)` random blocks of `wtype`, `x (m, k)` and `bias` of `dtype`.
struct Case {
    wtype: Dtype,
    dtype: Dtype,
    m: usize,
    n: usize,
    k: usize,
    bias: bool,
    act: Act,
    seed: u64,
}

/// The case's operands on the host: raw weight blocks, `x`, `bias` (rounded through
/// `dtype`), and the float64 expectation as f32. `x` is scaled so that outputs are O(1)
/// whatever the weights' scales (F16 outputs stay finite).
struct Host {
    raw: Vec<u8>,
    x: Vec<f32>,
    bias: Option<Vec<f32>>,
    want: Vec<f32>,
}

fn host_case(c: &Case) -> Host {
    let blocks = c.n * c.k / c.wtype.block_size();
    let raw = random_blocks(c.wtype, blocks, c.seed);
    let wf = host(c.wtype, &raw);
    let wmax = wf.iter().fold(0.0f32, |a, v| a.max(v.abs())).max(1e-30);
    let amp = 4.0 / (wmax * (c.k as f32).sqrt());
    let mut rng = SplitMix64::new(c.seed ^ 0x9E37_79B9);
    let x = round_through(c.dtype, &rng.uniform(c.m * c.k, -amp, amp));
    let bias = c
        .bias
        .then(|| round_through(c.dtype, &rng.uniform(c.n, -1.0, 1.0)));
    let mut want = vec![0.0f32; c.m * c.n];
    for i in 0..c.m {
        for j in 0..c.n {
            let xr = &x[i * c.k..(i + 1) * c.k];
            let wr = &wf[j * c.k..(j + 1) * c.k];
            let mut s: f64 = xr.iter().zip(wr).map(|(&a, &b)| a as f64 * b as f64).sum();
            if let Some(b) = &bias {
                s += b[j] as f64;
            }
            want[i * c.n + j] = act64(c.act, s) as f32;
        }
    }
    Host { raw, x, bias, want }
}

/// The tolerance of a `k`-deep product stored in `dtype`: the storage rounding of
/// [`tolerance`] plus FP32 accumulation error growing with `sqrt(k)`.
fn gemm_tol(dtype: Dtype, k: usize) -> (f32, f32) {
    let (s, r) = tolerance(dtype);
    (s + 1e-6 * (k as f32).sqrt(), r)
}

/// Runs the case on `dev` through `quant_linear` and checks it.
fn run(dev: Device, c: &Case) {
    assert!(
        c.m > QUANT_GEMV_MAX_ROWS,
        "a GEMM case needs more than 8 rows"
    );
    let h = host_case(c);
    let w = Tensor::from_raw_bytes_on(dev, &h.raw, c.n, c.k, c.wtype).unwrap();
    let x = tensor(dev, &h.x, c.m, c.k, c.dtype).unwrap();
    let bias = h
        .bias
        .as_ref()
        .map(|b| tensor(dev, b, 1, c.n, c.dtype).unwrap());
    let mut y = Tensor::default();
    ops::quant_linear(&w, bias.as_ref(), &x, c.act, &mut y).unwrap();
    assert_eq!((y.dims(), y.dtype()), (&[c.m, c.n][..], c.dtype));
    let tag = format!(
        "{dev:?} {} x {} m={} n={} k={} bias={} {:?}",
        c.wtype, c.dtype, c.m, c.n, c.k, c.bias, c.act
    );
    let got = read_f32(&y).unwrap();
    assert_close_rows(&tag, &h.want, &got, c.n, gemm_tol(c.dtype, c.k));
}

#[test]
fn every_weight_type_and_activation_dtype_matches_a_float64_product() {
    let gpus = gpu_devices();
    for &dev in &gpus {
        for (t, &wtype) in QUANT_WEIGHT_DTYPES.iter().enumerate() {
            // Two 256-element blocks, or eight of 32, per row.
            let k = 512;
            for (d, dtype) in [Dtype::F32, Dtype::F16, Dtype::BF16]
                .into_iter()
                .enumerate()
            {
                for (i, m) in [9, 64, 100].into_iter().enumerate() {
                    run(
                        dev,
                        &Case {
                            wtype,
                            dtype,
                            m,
                            n: 67,
                            k,
                            bias: (i + d) % 2 == 1,
                            act: Act::None,
                            seed: (t * 100 + d * 10 + i) as u64,
                        },
                    );
                }
            }
        }
    }
}

#[test]
fn long_rows_accumulate_in_fp32() {
    for &dev in &gpu_devices() {
        for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
            run(
                dev,
                &Case {
                    wtype: Dtype::Q4_K,
                    dtype,
                    m: 100,
                    n: 33,
                    k: 4096,
                    bias: true,
                    act: Act::None,
                    seed: 7,
                },
            );
        }
    }
}

#[test]
fn every_epilogue_applies_after_the_bias() {
    let acts = [
        Act::None,
        Act::Relu,
        Act::Gelu,
        Act::GeluExact,
        Act::Silu,
        Act::QuickGelu,
    ];
    for &dev in &gpu_devices() {
        for (a, act) in acts.into_iter().enumerate() {
            for bias in [false, true] {
                run(
                    dev,
                    &Case {
                        wtype: Dtype::Q8_0,
                        dtype: Dtype::F32,
                        m: 20,
                        n: 17,
                        k: 96,
                        bias,
                        act,
                        seed: 40 + a as u64,
                    },
                );
            }
        }
    }
}

#[test]
fn cpp_batched_wrappers_at_b16() {
    type Wrapper = fn(&Tensor, Option<&Tensor>, &Tensor, &mut Tensor) -> brotensor::Result<()>;
    let wrappers: [(Dtype, Wrapper); 3] = [
        (Dtype::Q4_K, ops::linear_forward_batched_q4k_fp16),
        (Dtype::Q8_0, ops::linear_forward_batched_q8_0_fp16),
        (Dtype::Q6_K, ops::linear_forward_batched_q6k_fp16),
    ];
    for &dev in &gpu_devices() {
        for (i, (wtype, f)) in wrappers.into_iter().enumerate() {
            let c = Case {
                wtype,
                dtype: Dtype::F16,
                m: 16,
                n: 45,
                k: 512,
                bias: i != 1,
                act: Act::None,
                seed: 90 + i as u64,
            };
            let h = host_case(&c);
            let w = Tensor::from_raw_bytes_on(dev, &h.raw, c.n, c.k, wtype).unwrap();
            let x = tensor(dev, &h.x, c.m, c.k, Dtype::F16).unwrap();
            let bias = h
                .bias
                .as_ref()
                .map(|b| tensor(dev, b, 1, c.n, Dtype::F16).unwrap());
            let mut y = Tensor::default();
            f(&w, bias.as_ref(), &x, &mut y).unwrap();
            assert_eq!((y.dims(), y.dtype()), (&[16, c.n][..], Dtype::F16));
            let got = read_f32(&y).unwrap();
            let tag = format!("{dev:?} batched {wtype} B=16");
            assert_close_rows(&tag, &h.want, &got, c.n, gemm_tol(Dtype::F16, c.k));
        }
    }
}

#[test]
fn gemm_rejects_rows_that_are_not_whole_blocks() {
    for &dev in &gpu_devices() {
        let raw = random_blocks(Dtype::Q4_K, 4, 5);
        // A weight whose rows end inside a block cannot be built.
        assert!(Tensor::from_raw_bytes_on(dev, &raw, 3, 300, Dtype::Q4_K).is_err());
        let w = Tensor::from_raw_bytes_on(dev, &raw, 4, 256, Dtype::Q4_K).unwrap();
        // GEMM-size activations whose rows are not the weight's whole blocks.
        let x = Tensor::from_slice_on(dev, &vec![0.5f32; 16 * 300], 16, 300).unwrap();
        let mut y = Tensor::default();
        let e = ops::quant_linear(&w, None, &x, Act::None, &mut y).unwrap_err();
        assert!(e.to_string().starts_with("brotensor: quant_linear:"), "{e}");
        let x = Tensor::from_slice_on(dev, &vec![0.5f32; 16 * 200], 16, 200).unwrap();
        assert!(ops::quant_linear(&w, None, &x, Act::None, &mut y).is_err());
    }
}
