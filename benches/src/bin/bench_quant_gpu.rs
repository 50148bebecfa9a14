//! GPU throughput of the quantized ops: the decode GEMV (`ops::quant_linear` with 1 and 8
//! activation rows) for every weight block type, in GB/s of weight bytes read, against a
//! device copy of the same number of bytes timed in batches alternating with it.
//!
//! Weights are `n x 16384` with `n` chosen so that each type's blocks hold at least 256 MB
//! (on a software device `256 x 4096`: figures for correctness of the harness only).
//! Run: `cargo run --release -p brotensor-benches --bin bench_quant_gpu` (devices from
//! `BROTENSOR_BENCH_DEVICES`; the CPU is skipped). Figures are the best of 5 timed batches;
//! batches end with a sync.

use brotensor::ops::{self, Act, QUANT_WEIGHT_DTYPES};
use brotensor::{Device, Dtype, Tensor};
use brotensor_benches::best_secs_paired;

/// `bytes` deterministic pseudo-random bytes as raw blocks, every f16 field left as it falls
/// (the kernels' cost does not depend on the values).
fn raw(bytes: usize) -> Vec<u8> {
    (0..bytes)
        .map(|i| ((i.wrapping_mul(2_654_435_761) >> 13) & 0x3F) as u8)
        .collect()
}

fn main() -> brotensor::Result<()> {
    let _ = brotensor::init();
    println!("# bench_quant_gpu");
    println!();
    println!("| device | op | weight | x | shape (m x n x k) | MB | ms | weight GB/s | vs copy |");
    println!("|---|---|---|---|---|---:|---:|---:|---:|");
    for device in brotensor_benches::selected_devices() {
        if device == Device::Cpu {
            continue;
        }
        let name = brotensor::device_name(device)?;
        let software = brotensor::is_software(device)?;
        let xtype = if brotensor::supports_dtype(device, Dtype::F16)? {
            Dtype::F16
        } else {
            Dtype::F32
        };
        for wtype in QUANT_WEIGHT_DTYPES {
            let k = if software { 4096 } else { 16384 };
            let row_bytes = wtype.storage_bytes(k)?;
            let n = if software {
                256
            } else {
                (256usize << 20).div_ceil(row_bytes).next_multiple_of(8)
            };
            let bytes = n * row_bytes;
            // The copy: the same bytes as an F32 tensor, cast into a second buffer.
            let tensors =
                Tensor::from_raw_bytes_on(device, &raw(bytes), n, k, wtype).and_then(|w| {
                    let c = Tensor::from_raw_bytes_on(
                        device,
                        &raw(bytes),
                        n,
                        row_bytes / 4,
                        Dtype::F32,
                    )?;
                    Ok((w, c))
                });
            let (w, c) = match tensors {
                Ok(t) => t,
                Err(e) => {
                    println!("| {name} | quant_linear (GEMV) | {wtype} | {xtype} | - | {:.0} | skipped: {e} | | |", bytes as f64 / 1e6);
                    continue;
                }
            };
            let mut c2 = Tensor::default();
            for m in [1usize, 8] {
                let xs: Vec<f32> = (0..m * k).map(|i| ((i % 17) as f32 - 8.0) / 8.0).collect();
                let x = Tensor::from_slice_on(device, &xs, m, k)?.to_dtype(xtype)?;
                let mut y = Tensor::default();
                let reps = if software { 1 } else { 10 };
                let (s, copy) = best_secs_paired(
                    device,
                    reps,
                    || ops::quant_linear(&w, None, &x, Act::None, &mut y).unwrap(),
                    || ops::cast(&c, &mut c2, Dtype::F32).unwrap(),
                );
                let gbs = bytes as f64 / s / 1e9;
                // The copy reads and writes every byte.
                let copy_gbs = 2.0 * bytes as f64 / copy / 1e9;
                println!(
                    "| {name} | quant_linear (GEMV) | {wtype} | {xtype} | {m} x {n} x {k} | {:.0} | {:.3} | {gbs:.1} | {:.2} (copy {copy_gbs:.1} GB/s) |",
                    bytes as f64 / 1e6,
                    s * 1e3,
                    gbs / copy_gbs,
                );
            }
        }
    }
    Ok(())
}
