//! GPU dequantization of every weight block type: bit-exact with the Python gguf package
//! (tests/fixtures/quants.gguf holds each type's blocks and the package's `.deq` floats),
//! with the host decoder (which that fixture proves bit-exact) on long rows and odd row
//! counts, F16/BF16 outputs the F32 result rounded to nearest even; the block layout the
//! kernels decode checked against the host's block table.

use brotensor::io::gguf::{self, GgufFile};
use brotensor::ops::{self, QUANT_WEIGHT_DTYPES};
use brotensor::{Device, Dtype, Tensor};
use brotensor_kernels::quant::blocks as qb;
use brotensor_tests::{gpu_devices, SplitMix64};
use half::{bf16, f16};

/// The kernels' block type code of a weight dtype, and the host's block of the same type.
fn kinds() -> [(Dtype, u32, brotensor_cpu::quant::Block); 13] {
    use brotensor_cpu::quant::Block as B;
    [
        (Dtype::Q4_0, qb::Q4_0, B::Q4_0),
        (Dtype::Q4_1, qb::Q4_1, B::Q4_1),
        (Dtype::Q5_0, qb::Q5_0, B::Q5_0),
        (Dtype::Q5_1, qb::Q5_1, B::Q5_1),
        (Dtype::Q8_0, qb::Q8_0, B::Q8_0),
        (Dtype::Q2_K, qb::Q2_K, B::Q2_K),
        (Dtype::Q3_K, qb::Q3_K, B::Q3_K),
        (Dtype::Q4_K, qb::Q4_K, B::Q4_K),
        (Dtype::Q5_K, qb::Q5_K, B::Q5_K),
        (Dtype::Q6_K, qb::Q6_K, B::Q6_K),
        (Dtype::IQ4_NL, qb::IQ4_NL, B::IQ4_NL),
        (Dtype::IQ4_XS, qb::IQ4_XS, B::IQ4_XS),
        (Dtype::MXFP4, qb::MXFP4, B::MXFP4),
    ]
}

/// Byte offsets of each type's f16 scale fields (`d`, and `m` / `dmin` where there is one).
fn f16_fields(dtype: Dtype) -> &'static [usize] {
    match dtype {
        Dtype::Q4_1 | Dtype::Q5_1 | Dtype::Q4_K | Dtype::Q5_K => &[0, 2],
        Dtype::Q2_K => &[qb::Q2_K_D_AT, qb::Q2_K_DMIN_AT],
        Dtype::Q3_K => &[qb::Q3_K_D_AT],
        Dtype::Q6_K => &[qb::Q6_K_D_AT],
        Dtype::MXFP4 => &[],
        _ => &[0],
    }
}

/// `blocks` random blocks of `dtype`: random quant bytes, f16 scales finite (subnormals
/// included, magnitudes below 1/4, so that products stay in F16 range) and MXFP4 exponents that keep every value finite.
pub(super) fn random_blocks(dtype: Dtype, blocks: usize, seed: u64) -> Vec<u8> {
    blocks_with(dtype, blocks, seed, 0..250)
}

/// [`random_blocks`] whose MXFP4 scales stay within `2^-10 .. 2^2` (the products of a GEMV
/// stay in F16 range).
pub(super) fn moderate_blocks(dtype: Dtype, blocks: usize, seed: u64) -> Vec<u8> {
    blocks_with(dtype, blocks, seed, 118..131)
}

fn blocks_with(dtype: Dtype, blocks: usize, seed: u64, mx_exps: std::ops::Range<u64>) -> Vec<u8> {
    let bytes = dtype.storage_bytes(blocks * dtype.block_size()).unwrap();
    let size = bytes / blocks.max(1);
    let mut rng = SplitMix64::new(seed);
    let mut raw: Vec<u8> = (0..bytes).map(|_| rng.next_u64() as u8).collect();
    for b in raw.chunks_exact_mut(size) {
        for &at in f16_fields(dtype) {
            let r = rng.next_u64();
            let bits = ((r & 1) << 15) | (((r >> 1) % 13) << 10) | ((r >> 8) & 0x3FF);
            b[at..at + 2].copy_from_slice(&(bits as u16).to_le_bytes());
        }
        if dtype == Dtype::MXFP4 {
            b[0] = (mx_exps.start + rng.next_u64() % (mx_exps.end - mx_exps.start)) as u8;
        }
    }
    raw
}

/// The host decoder's F32 values of `raw`.
pub(super) fn host(dtype: Dtype, raw: &[u8]) -> Vec<f32> {
    gguf::dequantize(dtype, raw).unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The first index where `got` and `want` differ in bits.
/// The first index where `got` and `want` (f32 bit patterns) differ. A device may flush
/// subnormal results to zero (lavapipe through SPIR-V does, without the Vulkan
/// denorm-preserve mode), so a subnormal `want` also matches a zero of the same sign there;
/// every normal value must match bit for bit.
fn first_diff(got: &[u32], want: &[u32]) -> Option<usize> {
    let flushed = |g: u32, w: u32| w & 0x7F80_0000 == 0 && g == w & 0x8000_0000;
    (got.len() != want.len())
        .then_some(got.len().min(want.len()))
        .or_else(|| {
            got.iter()
                .zip(want)
                .position(|(&g, &w)| g != w && !flushed(g, w))
        })
}

#[test]
fn block_layouts_match_the_host_table() {
    for (dtype, kind, block) in kinds() {
        assert_eq!(qb::BLOCK_SIZES[kind as usize], block.size(), "{dtype}");
        assert_eq!(
            (qb::block_elems(kind), dtype.block_size()),
            (block.size().0, block.size().0),
            "{dtype}"
        );
    }
    assert_eq!(qb::KINDS.len(), QUANT_WEIGHT_DTYPES.len());
    // The last field of each block ends where the block does.
    let ends = [
        (qb::Q4_0, qb::Q4_0_QS_AT + 16),
        (qb::Q4_1, qb::Q4_1_QS_AT + 16),
        (qb::Q5_0, qb::Q5_0_QS_AT + 16),
        (qb::Q5_1, qb::Q5_1_QS_AT + 16),
        (qb::Q8_0, qb::Q8_0_QS_AT + 32),
        (qb::Q2_K, qb::Q2_K_DMIN_AT + 2),
        (qb::Q3_K, qb::Q3_K_D_AT + 2),
        (qb::Q4_K, qb::Q4_K_QS_AT + 128),
        (qb::Q5_K, qb::Q5_K_QS_AT + 128),
        (qb::Q6_K, qb::Q6_K_D_AT + 2),
        (qb::IQ4_NL, qb::Q4_0_QS_AT + 16),
        (qb::IQ4_XS, qb::IQ4_XS_QS_AT + 128),
        (qb::MXFP4, qb::MXFP4_QS_AT + 16),
    ];
    for (kind, end) in ends {
        assert_eq!(qb::block_bytes(kind), end, "block type code {kind}");
    }
    // Fields in order, each where the previous one ends.
    assert_eq!(qb::Q2_K_QS_AT + 64, qb::Q2_K_D_AT);
    assert_eq!(qb::Q3_K_QS_AT + 64, qb::Q3_K_SCALES_AT);
    assert_eq!(qb::Q3_K_SCALES_AT + 12, qb::Q3_K_D_AT);
    assert_eq!(qb::QK_SCALES_AT + 12, qb::Q4_K_QS_AT);
    assert_eq!(qb::Q5_K_QH_AT + 32, qb::Q5_K_QS_AT);
    assert_eq!(qb::Q6_K_QH_AT + 64, qb::Q6_K_SCALES_AT);
    assert_eq!(qb::Q6_K_SCALES_AT + 16, qb::Q6_K_D_AT);
    assert_eq!(qb::IQ4_XS_SCALES_L_AT + 4, qb::IQ4_XS_QS_AT);
}

#[test]
fn dequantization_matches_the_gguf_package_bit_for_bit() {
    let f = GgufFile::open(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/quants.gguf")).unwrap();
    let gpus = gpu_devices();
    let mut checked = 0;
    for info in f.tensors().iter().filter(|t| !t.name.ends_with(".deq")) {
        let want: Vec<u32> = f
            .data(f.get_tensor(&format!("{}.deq", info.name)).unwrap())
            .chunks(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        for &dev in &gpus {
            let w = gguf::upload_raw_on(dev, &f, info).unwrap();
            assert!(QUANT_WEIGHT_DTYPES.contains(&w.dtype()));
            let mut out = Tensor::default();
            ops::dequantize(&w, Dtype::F32, &mut out).unwrap();
            assert_eq!(out.dims(), w.dims());
            let got = bits(&out.to_vec::<f32>().unwrap());
            assert_eq!(
                first_diff(&got, &want),
                None,
                "{} on {dev}: first differing element",
                info.name
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 13, "every weight block type in the fixture");
}

#[test]
fn long_rows_and_odd_row_counts_match_the_host_decoder() {
    let gpus = gpu_devices();
    for (i, (dtype, _, _)) in kinds().into_iter().enumerate() {
        // Odd row counts of a few blocks each, and every element position of a block.
        for (rows, per_row) in [(3usize, 5usize), (7, 1), (1, 2)] {
            let raw = random_blocks(dtype, rows * per_row, 100 + i as u64);
            let want = bits(&host(dtype, &raw));
            for &dev in &gpus {
                let cols = per_row * dtype.block_size();
                let w = Tensor::from_raw_bytes_on(dev, &raw, rows, cols, dtype).unwrap();
                let mut out = Tensor::default();
                ops::dequantize(&w, Dtype::F32, &mut out).unwrap();
                assert_eq!(out.shape(), (rows, cols));
                let got = bits(&out.to_vec::<f32>().unwrap());
                assert_eq!(
                    first_diff(&got, &want),
                    None,
                    "{dtype} {rows}x{cols} on {dev}"
                );
            }
        }
    }
    // Rows of 70,000+ blocks: more than the 65,535 cubes of one grid dimension.
    for (dtype, rows, blocks) in [
        (Dtype::Q4_0, 1, 70_001),
        (Dtype::MXFP4, 3, 70_000),
        (Dtype::Q4_K, 1, 70_000),
    ] {
        let raw = random_blocks(dtype, rows * blocks, 7);
        let want = bits(&host(dtype, &raw));
        for &dev in &gpus {
            let cols = blocks * dtype.block_size();
            let w = Tensor::from_raw_bytes_on(dev, &raw, rows, cols, dtype).unwrap();
            let mut out = Tensor::default();
            ops::dequantize(&w, Dtype::F32, &mut out).unwrap();
            let got = bits(&out.to_vec::<f32>().unwrap());
            let diff = first_diff(&got, &want);
            assert_eq!(
                diff,
                None,
                "{dtype} {rows}x{cols} on {dev}: got {:?}, want {:?}",
                diff.map(|i| f32::from_bits(got[i])),
                diff.map(|i| f32::from_bits(want[i]))
            );
        }
    }
}

#[test]
fn half_outputs_are_the_f32_decode_rounded_to_nearest_even() {
    for dev in gpu_devices() {
        for (i, (dtype, _, _)) in kinds().into_iter().enumerate() {
            let raw = random_blocks(dtype, 6, 300 + i as u64);
            let f = host(dtype, &raw);
            let cols = 2 * dtype.block_size();
            let w = Tensor::from_raw_bytes_on(dev, &raw, 3, cols, dtype).unwrap();
            let mut out = Tensor::default();
            if brotensor::supports_dtype(dev, Dtype::F16).unwrap() {
                ops::dequantize(&w, Dtype::F16, &mut out).unwrap();
                assert_eq!((out.dtype(), out.shape()), (Dtype::F16, (3, cols)));
                let got: Vec<u16> = out
                    .to_vec::<f16>()
                    .unwrap()
                    .iter()
                    .map(|h| h.to_bits())
                    .collect();
                let want: Vec<u16> = f.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
                assert!(got == want, "{dtype} F16 on {dev}");
            } else {
                let e = ops::dequantize(&w, Dtype::F16, &mut out).unwrap_err();
                assert!(e.to_string().contains("dequantize"), "{e}");
                eprintln!("note: {dev} has no F16: dequantize to F16 refused");
            }
            ops::dequantize(&w, Dtype::BF16, &mut out).unwrap();
            assert_eq!((out.dtype(), out.shape()), (Dtype::BF16, (3, cols)));
            let got: Vec<u16> = out
                .to_vec::<bf16>()
                .unwrap()
                .iter()
                .map(|h| h.to_bits())
                .collect();
            let want: Vec<u16> = f.iter().map(|&v| bf16::from_f32(v).to_bits()).collect();
            assert!(got == want, "{dtype} BF16 on {dev}");
        }
    }
}

#[test]
fn cpp_dequant_wrappers_decode_to_f16() {
    type Wrapper = fn(&Tensor, &mut Tensor) -> brotensor::Result<()>;
    let cases: [(Dtype, Wrapper); 3] = [
        (Dtype::Q4_K, ops::dequant_q4k_to_fp16),
        (Dtype::Q8_0, ops::dequant_q8_0_to_fp16),
        (Dtype::Q6_K, ops::dequant_q6k_to_fp16),
    ];
    for dev in gpu_devices() {
        if !brotensor::supports_dtype(dev, Dtype::F16).unwrap() {
            eprintln!("note: {dev} has no F16: the _fp16 wrappers are not run there");
            continue;
        }
        for (dtype, f) in cases {
            let raw = random_blocks(dtype, 4, 9);
            let want: Vec<u16> = host(dtype, &raw)
                .iter()
                .map(|&v| f16::from_f32(v).to_bits())
                .collect();
            let cols = 2 * dtype.block_size();
            let w = Tensor::from_raw_bytes_on(dev, &raw, 2, cols, dtype).unwrap();
            let mut out = Tensor::default();
            f(&w, &mut out).unwrap();
            assert_eq!((out.dtype(), out.shape()), (Dtype::F16, (2, cols)));
            let got: Vec<u16> = out
                .to_vec::<f16>()
                .unwrap()
                .iter()
                .map(|h| h.to_bits())
                .collect();
            assert!(got == want, "{dtype} wrapper on {dev}");
            // Another block type is refused by name.
            let other = Tensor::from_raw_bytes_on(
                dev,
                &random_blocks(Dtype::Q4_0, 8, 1),
                1,
                256,
                Dtype::Q4_0,
            )
            .unwrap();
            let e = f(&other, &mut out).unwrap_err().to_string();
            assert!(
                e.starts_with("brotensor: dequant_") && e.contains("Q4_0"),
                "{e}"
            );
        }
    }
}

#[test]
fn dequantize_rejects_bad_operands() {
    for dev in gpu_devices() {
        let raw = random_blocks(Dtype::Q4_K, 2, 3);
        let w = Tensor::from_raw_bytes_on(dev, &raw, 2, 256, Dtype::Q4_K).unwrap();
        let mut out = Tensor::default();
        // Rows of a block dtype hold whole blocks: no view splits a block.
        assert!(w.reshaped(4, 128).is_err());
        assert!(Tensor::from_raw_bytes_on(dev, &raw, 1, 500, Dtype::Q4_K).is_err());
        // Truncated raw bytes.
        assert!(
            Tensor::from_raw_bytes_on(dev, &raw[..raw.len() - 1], 2, 256, Dtype::Q4_K).is_err()
        );
        // An output dtype that is not a float.
        let e = ops::dequantize(&w, Dtype::I32, &mut out)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("brotensor: dequantize:"), "{e}");
        let e = ops::dequantize(&w, Dtype::Q8_0, &mut out)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("brotensor: dequantize:"), "{e}");
        // A float tensor as `w`.
        let f = Tensor::from_slice_on(dev, &[1.0f32; 64], 2, 32).unwrap();
        let e = ops::dequantize(&f, Dtype::F32, &mut out)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("brotensor: dequantize:") && e.contains("`w`"),
            "{e}"
        );
        // Not a weight type (Q8_K is an activation format).
        let q8k = Tensor::from_raw_bytes_on(dev, &[0u8; 292], 1, 256, Dtype::Q8_K).unwrap();
        assert!(ops::dequantize(&q8k, Dtype::F32, &mut out).is_err());
        // An output on another device.
        let mut host_out = Tensor::empty_on(Device::Cpu, 2, 256, Dtype::F32).unwrap();
        let e = ops::dequantize(&w, Dtype::F32, &mut host_out)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("brotensor: dequantize:"), "{e}");
    }
}
