//! The quantized prefill GEMM on every selected GPU device: `quant_linear` with 64 and 512
//! activation rows against 4096 x 4096 Q4_K, Q8_0 and Q6_K weights (raw GGUF blocks, random
//! quants, small finite scales) in GFLOP/s, each beside the dense `linear_forward_batched`
//! of the same shape in the same activation dtype, timed in alternating batches. Software devices (lavapipe)
//! run 1024 x 1024 weights: their figures only show the path runs.
//!
//! Run: `cargo run --release -p brotensor-benches --bin bench_quant_gemm_gpu`
//! (`BROTENSOR_BENCH_DEVICES` picks devices). Figures are the best of 5 timed batches, each
//! ending with a sync.

use brotensor::{ops, Dtype, Tensor};
use brotensor_benches::best_secs_paired;

/// SplitMix64: the bench's deterministic bytes.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `rows x cols` weights of `dtype` as raw blocks: random quant bytes, the f16 scales at
/// `scales` (byte offsets in a block) set to small positive values.
fn weight_bytes(dtype: Dtype, rows: usize, cols: usize, scales: &[usize]) -> Vec<u8> {
    let bytes = dtype.storage_bytes(rows * cols).expect("whole blocks");
    let per_block = bytes / (rows * cols / dtype.block_size());
    let mut state = 0x5EED;
    let mut raw: Vec<u8> = (0..bytes).map(|_| splitmix(&mut state) as u8).collect();
    for b in raw.chunks_exact_mut(per_block) {
        for &at in scales {
            // 2^-10 .. 2^-9: f16 exponent 5, random mantissa.
            let bits = (5u16 << 10) | (splitmix(&mut state) as u16 & 0x3FF);
            b[at..at + 2].copy_from_slice(&bits.to_le_bytes());
        }
    }
    raw
}

fn host(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 7919 + seed) % 2001) as f32 - 1000.0) * 1e-3)
        .collect()
}

fn main() -> brotensor::Result<()> {
    let _ = brotensor::init();
    println!("# bench_quant_gemm_gpu");
    println!();
    println!("| device | weight | x dtype | m x n x k | ms | GFLOP/s | dense GFLOP/s | vs dense |");
    println!("|---|---|---|---|---:|---:|---:|---:|");
    // (weight dtype, byte offsets of its f16 scales: d, and dmin where there is one)
    let weights: [(Dtype, &[usize]); 3] = [
        (Dtype::Q4_K, &[0, 2]),
        (Dtype::Q8_0, &[0]),
        (Dtype::Q6_K, &[208]),
    ];
    for device in brotensor_benches::selected_devices() {
        if !device.is_gpu() {
            continue;
        }
        let name = brotensor::device_name(device)?;
        let software = brotensor::is_software(device)?;
        let nk = if software { 1024 } else { 4096 };
        for dtype in [Dtype::F16, Dtype::F32] {
            if !brotensor::supports_dtype(device, dtype)? {
                continue;
            }
            for (wtype, scales) in weights {
                if !brotensor::supports_dtype(device, wtype)? {
                    continue;
                }
                let raw = weight_bytes(wtype, nk, nk, scales);
                let w = Tensor::from_raw_bytes_on(device, &raw, nk, nk, wtype)?;
                // The dense reference: the same weights decoded, multiplied by the dense
                // linear (`x . wd^T`).
                let mut wd = Tensor::default();
                ops::dequantize(&w, dtype, &mut wd)?;
                for m in [64usize, 512] {
                    let x =
                        Tensor::from_slice_on(device, &host(m * nk, 1), m, nk)?.to_dtype(dtype)?;
                    let (mut y, mut yd) = (Tensor::default(), Tensor::default());
                    let reps = if software { 1 } else { 20 };
                    let (s, dense) = best_secs_paired(
                        device,
                        reps,
                        || ops::quant_linear(&w, None, &x, ops::Act::None, &mut y).unwrap(),
                        || ops::linear_forward_batched(&wd, None, &x, &mut yd).unwrap(),
                    );
                    let flop = 2.0 * (m * nk * nk) as f64;
                    let (g, gd) = (flop / s / 1e9, flop / dense / 1e9);
                    println!(
                        "| {name} | {wtype} | {dtype} | {m} x {nk} x {nk} | {:.3} | {g:.1} | {gd:.1} | {:.2} |",
                        s * 1e3,
                        g / gd
                    );
                }
            }
        }
    }
    Ok(())
}
