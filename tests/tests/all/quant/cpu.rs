//! The quantized ops on the CPU against the Python `gguf` package
//! (tests/fixtures/make_quant_linear.py): `dequantize` bit for bit, `quant_linear` (GEMV and
//! GEMM paths, every epilogue) against the float64 product of the package's dequantized
//! weight, and every error case.

use brotensor::io::gguf::{self, GgufFile};
use brotensor::ops::{self, Act, QUANT_WEIGHT_DTYPES};
use brotensor::{Device, Dtype, Error, Tensor};
use brotensor_tests::assert_close_rows;
use brotensor_tests::reference::epilogue;
use half::{bf16, f16};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/quant_linear.gguf");
/// Weight rows of the per-type fixtures.
const N: usize = 37;
/// Weight columns of the per-type fixtures.
const K: usize = 512;
/// Activation rows in the fixture.
const M_MAX: usize = 64;

fn fixture() -> GgufFile {
    GgufFile::open(FIXTURE).unwrap()
}

fn bytes(f: &GgufFile, name: &str) -> Vec<u8> {
    f.data(f.get_tensor(name).unwrap()).to_vec()
}

fn f32s(f: &GgufFile, name: &str) -> Vec<f32> {
    let b = bytes(f, name);
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn f64s(f: &GgufFile, name: &str) -> Vec<f64> {
    let b = bytes(f, name);
    b.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// The block-dtype weight `name` on the CPU.
fn weight(f: &GgufFile, name: &str) -> Tensor {
    gguf::upload_raw_on(Device::Cpu, f, f.get_tensor(name).unwrap()).unwrap()
}

/// The FP32 accumulation tolerance for a K-long dot product, relative to each output row's
/// scale: 1e-6 sqrt(K) (the FP32 path lands near 3e-7 at K = 512; the float64 products are
/// exact far beyond that).
fn tol(k: usize) -> (f32, f32) {
    (1e-6 * (k as f32).sqrt(), 0.0)
}

/// `y (m, n)` of `quant_linear(w, bias, x[..m])` on the CPU.
fn linear(w: &Tensor, bias: Option<&[f32]>, x: &[f32], m: usize, act: Act) -> Vec<f32> {
    let k = w.cols();
    let xt = Tensor::from_slice_on(Device::Cpu, &x[..m * k], m, k).unwrap();
    let b = bias.map(|b| Tensor::from_slice_on(Device::Cpu, b, 1, b.len()).unwrap());
    let mut y = Tensor::default();
    ops::quant_linear(w, b.as_ref(), &xt, act, &mut y).unwrap();
    assert_eq!(y.dims(), &[m, w.rows()]);
    y.to_vec::<f32>().unwrap()
}

#[test]
fn dequantize_is_bit_exact_with_the_gguf_package() {
    let f = fixture();
    for dtype in QUANT_WEIGHT_DTYPES {
        for name in [dtype.to_string(), format!("{dtype}.long")] {
            let Some(_) = f.find_tensor(&name) else {
                continue;
            };
            let w = weight(&f, &name);
            assert_eq!(w.dtype(), dtype);
            let want = f32s(&f, &format!("{name}.deq"));
            let mut out = Tensor::default();
            ops::dequantize(&w, Dtype::F32, &mut out).unwrap();
            assert_eq!(out.dims(), w.dims(), "{name}");
            let got = out.to_vec::<f32>().unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{name} F32");
            ops::dequantize(&w, Dtype::F16, &mut out).unwrap();
            let want16: Vec<f16> = want.iter().map(|&v| f16::from_f32(v)).collect();
            assert_eq!(out.to_vec::<f16>().unwrap(), want16, "{name} F16");
            ops::dequantize(&w, Dtype::BF16, &mut out).unwrap();
            let want_bf: Vec<bf16> = want.iter().map(|&v| bf16::from_f32(v)).collect();
            assert_eq!(out.to_vec::<bf16>().unwrap(), want_bf, "{name} BF16");
        }
    }
    // The C++-named F16 decoders run on the CPU too.
    let mut out = Tensor::default();
    for (name, run) in [
        (
            "Q4_K",
            ops::dequant_q4k_to_fp16 as fn(&Tensor, &mut Tensor) -> _,
        ),
        ("Q8_0", ops::dequant_q8_0_to_fp16),
        ("Q6_K", ops::dequant_q6k_to_fp16),
    ] {
        run(&weight(&f, name), &mut out).unwrap();
        let want: Vec<f16> = f32s(&f, &format!("{name}.deq"))
            .iter()
            .map(|&v| f16::from_f32(v))
            .collect();
        assert_eq!(out.to_vec::<f16>().unwrap(), want, "{name}");
    }
}

#[test]
fn quant_linear_matches_the_float64_product() {
    let f = fixture();
    let x = f32s(&f, "x");
    for dtype in QUANT_WEIGHT_DTYPES {
        let name = dtype.to_string();
        let w = weight(&f, &name);
        let bias = f32s(&f, &format!("{name}.bias"));
        for (suffix, b) in [("y", None), ("yb", Some(bias.as_slice()))] {
            let want64 = f64s(&f, &format!("{name}.{suffix}"));
            for m in [1, 3, 8, 9, M_MAX] {
                let want: Vec<f32> = want64[..m * N].iter().map(|&v| v as f32).collect();
                let got = linear(&w, b, &x, m, Act::None);
                assert_close_rows(&format!("{name}.{suffix} m={m}"), &want, &got, N, tol(K));
            }
        }
    }
}

#[test]
fn a_long_row_matches_the_float64_product() {
    let f = fixture();
    let (x, w) = (f32s(&f, "x.long"), weight(&f, "Q4_K.long"));
    let k = w.cols();
    assert!(k >= 4096);
    let want64 = f64s(&f, "Q4_K.long.y");
    for m in [1, 3, 8, 9] {
        let want: Vec<f32> = want64[..m * w.rows()].iter().map(|&v| v as f32).collect();
        let got = linear(&w, None, &x, m, Act::None);
        assert_close_rows(&format!("long m={m}"), &want, &got, w.rows(), tol(k));
    }
}

#[test]
fn every_epilogue_on_both_paths() {
    let f = fixture();
    let (x, w) = (f32s(&f, "x"), weight(&f, "Q6_K"));
    let bias = f32s(&f, "Q6_K.bias");
    let want64 = f64s(&f, "Q6_K.yb");
    for act in [
        Act::Relu,
        Act::Gelu,
        Act::GeluExact,
        Act::Silu,
        Act::QuickGelu,
    ] {
        for m in [3, 9] {
            let want: Vec<f32> = want64[..m * N]
                .iter()
                .map(|&v| epilogue(act, v) as f32)
                .collect();
            let got = linear(&w, Some(&bias), &x, m, act);
            assert_close_rows(&format!("{act:?} m={m}"), &want, &got, N, tol(K));
        }
    }
}

/// The choice of FP32 activations, measured: the worst error of the FP32 path against the
/// float64 product, and the worst error of the same product with the activations rounded to
/// Q8_0 (ggml's 8-bit blocks of 32 for its integer dot products), both relative to each
/// output row's largest magnitude. FP32 activations must be at least 100 times closer.
#[test]
fn fp32_activations_beat_8_bit_ones() {
    let f = fixture();
    let x = f32s(&f, "x");
    let m = 8;
    let q8: Vec<f64> = x[..m * K]
        .chunks(32)
        .flat_map(|b| {
            let amax = b.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let d = f16::from_f32(amax / 127.0).to_f32() as f64;
            b.iter().map(move |&v| {
                if d == 0.0 {
                    0.0
                } else {
                    (v as f64 / d).round() * d
                }
            })
        })
        .collect();
    let (mut worst_fp32, mut worst_q8) = (0.0f64, 0.0f64);
    for dtype in QUANT_WEIGHT_DTYPES {
        let name = dtype.to_string();
        let deq = f32s(&f, &format!("{name}.deq"));
        let want = f64s(&f, &format!("{name}.y"));
        let got = linear(&weight(&f, &name), None, &x, m, Act::None);
        for i in 0..m {
            let row = &want[i * N..(i + 1) * N];
            let scale = row.iter().fold(0.0f64, |a, v| a.max(v.abs()));
            for r in 0..N {
                let with_q8: f64 = (0..K).map(|j| q8[i * K + j] * deq[r * K + j] as f64).sum();
                worst_fp32 = worst_fp32.max((got[i * N + r] as f64 - row[r]).abs() / scale);
                worst_q8 = worst_q8.max((with_q8 - row[r]).abs() / scale);
            }
        }
    }
    eprintln!("quant_linear K={K}: FP32 activations {worst_fp32:.2e}, Q8_0 activations {worst_q8:.2e} of the row scale");
    assert!(worst_fp32 * 100.0 < worst_q8, "{worst_fp32} vs {worst_q8}");
}

fn rejects(r: brotensor::Result<()>, needle: &str) {
    let e = r.expect_err(needle);
    assert!(e.to_string().contains(needle), "{e} lacks {needle:?}");
}

#[test]
fn errors_are_clean() {
    let f = fixture();
    let w = weight(&f, "Q8_0");
    let cpu =
        |data: &[f32], rows, cols| Tensor::from_slice_on(Device::Cpu, data, rows, cols).unwrap();
    let x = cpu(&f32s(&f, "x")[..K], 1, K);
    let mut y = Tensor::default();
    // A weight whose rows are not whole blocks cannot be made: not from bytes, not by a
    // reshape (so `quant_linear` and `dequantize` never see one).
    let odd = Tensor::from_raw_bytes_on(Device::Cpu, &[0u8; 34 * 3], 2, 48, Dtype::Q8_0);
    rejects(odd.map(drop), "Q8_0 rows must hold whole blocks");
    rejects(
        w.reshaped(N * 32, K / 32).map(drop),
        "Q8_0 rows must hold whole blocks",
    );
    // x's width against w's.
    let narrow = cpu(&[0.0; 256], 1, 256);
    rejects(
        ops::quant_linear(&w, None, &narrow, Act::None, &mut y),
        "`x` rows have 256 elements but `w` rows have 512",
    );
    // Bias length and dtype.
    let short = cpu(&[0.0; N - 1], 1, N - 1);
    rejects(
        ops::quant_linear(&w, Some(&short), &x, Act::None, &mut y),
        "`bias` must hold 37 elements of F32",
    );
    let b16 = Tensor::from_slice_on(Device::Cpu, &[f16::ZERO; N], 1, N).unwrap();
    rejects(
        ops::quant_linear(&w, Some(&b16), &x, Act::None, &mut y),
        "not 37 of F16",
    );
    // A float tensor, or ggml's activation blocks, as the weight.
    let dense = cpu(&vec![0.0; N * K], N, K);
    let e = ops::quant_linear(&dense, None, &x, Act::None, &mut y).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Dtype {
                operand: "w",
                found: Dtype::F32,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(ops::dequantize(&dense, Dtype::F32, &mut y).is_err());
    let q8k = Tensor::from_raw_bytes_on(Device::Cpu, &vec![0u8; 292], 1, 256, Dtype::Q8_K).unwrap();
    let e = ops::dequantize(&q8k, Dtype::F32, &mut y).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Dtype {
                operand: "w",
                found: Dtype::Q8_K,
                ..
            }
        ),
        "{e:?}"
    );
    // The CPU takes 16-bit activations (FP32 math, the output rounded once); outputs of
    // dequantize are floats.
    let x16 = Tensor::from_slice_on(Device::Cpu, &vec![f16::ZERO; K], 1, K).unwrap();
    ops::quant_linear(&w, None, &x16, Act::None, &mut y).unwrap();
    assert_eq!(y.dtype(), Dtype::F16);
    ops::linear_forward_q8_0_fp16(&w, None, &x16, &mut y).unwrap();
    assert_eq!(y.dtype(), Dtype::F16);
    let e = ops::dequantize(&w, Dtype::I32, &mut y).unwrap_err();
    assert!(
        matches!(
            e,
            Error::UnsupportedDtype {
                dtype: Dtype::I32,
                ..
            }
        ),
        "{e:?}"
    );
    // The C++-named wrappers check the block type.
    rejects(ops::dequant_q4k_to_fp16(&w, &mut y), "must be Q4_K");
    // Truncated raw bytes never make a weight.
    for dtype in QUANT_WEIGHT_DTYPES {
        let name = dtype.to_string();
        let raw = bytes(&f, &name);
        let t = Tensor::from_raw_bytes_on(Device::Cpu, &raw[..raw.len() - 1], N, K, dtype);
        assert!(t.is_err(), "{name}: a truncated weight was accepted");
        let t = Tensor::from_raw_bytes_on(Device::Cpu, &raw, N, K, dtype).unwrap();
        assert_eq!(t.to_bytes().unwrap(), raw);
    }
}

#[test]
fn empty_and_zero_k_products() {
    let cpu =
        |data: &[f32], rows, cols| Tensor::from_slice_on(Device::Cpu, data, rows, cols).unwrap();
    let mut y = Tensor::default();
    // No rows of x: an empty output.
    let w = Tensor::from_raw_bytes_on(Device::Cpu, &[0u8; 34], 1, 32, Dtype::Q8_0).unwrap();
    ops::quant_linear(&w, None, &cpu(&[], 0, 32), Act::None, &mut y).unwrap();
    assert_eq!(y.dims(), &[0, 1]);
    // Rows of no elements: the product is zero, so y is the bias (GEMV and GEMM paths).
    let w = Tensor::from_raw_bytes_on(Device::Cpu, &[], 3, 0, Dtype::Q4_K).unwrap();
    let bias = cpu(&[1.0, -2.0, 3.0], 1, 3);
    for m in [2, 9] {
        ops::quant_linear(&w, Some(&bias), &cpu(&[], m, 0), Act::Relu, &mut y).unwrap();
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            [1.0, 0.0, 3.0].repeat(m),
            "m={m}"
        );
    }
}
