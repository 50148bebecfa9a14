//! GGUF quantized products on the CPU, per weight type.
//!
//! - GEMV (decode, one activation row) on 4096 x 4096 and 4096 x 14336 weights (rows x
//!   cols): GB/s of quantized weight bytes read, against the streaming copy of the same
//!   number of bytes (`brotensor_cpu::cast::copy`, all cores, non-temporal stores; a copy
//!   also writes them, so it is a generous reference) timed in alternating batches, and
//!   against candle's `QMatMul` on the same blocks in the same process (`--features candle`;
//!   candle has no IQ4_NL / IQ4_XS / MXFP4). candle picks its AVX2 dot products at compile
//!   time (`target_feature = "avx2"`), so in a default build, like this one, it runs its
//!   portable code; brotensor picks AVX-512 / AVX2 at run time.
//! - GEMM (prefill) at batch 64 and 512 on the 4096 x 4096 weights: GFLOP/s against the
//!   measured FP32 peak (`cpu_fp32_peak_gflops`) and the dense FP32 product of the same shape.
//!
//! Run: `cargo run --release -p brotensor-benches [--features candle] --bin bench_quant
//! [gemv|gemm]` (one table, or both).
//! Weights are random valid blocks (random quants, finite scales); every figure is the best
//! of 5 timed batches.

use brotensor::ops::{self, Act, QUANT_WEIGHT_DTYPES};
use brotensor::{Device, Dtype, Tensor};
use brotensor_benches::{best_secs, best_secs_paired, cpu_fp32_peak_gflops};

/// SplitMix64 bytes.
fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(n);
    out
}

/// `rows x cols` random valid blocks of `dtype`: random quants with every f16 scale (and
/// minimum) set to a small finite value, MXFP4 exponents near 1.
fn weight_bytes(dtype: Dtype, rows: usize, cols: usize) -> Vec<u8> {
    let size = dtype.block_bytes();
    let mut b = random_bytes(rows * cols / dtype.block_size() * size, dtype as u64);
    // Byte offsets of the f16 scale and minimum in each layout.
    let (d_at, min_at) = match dtype {
        Dtype::Q4_1 | Dtype::Q5_1 | Dtype::Q4_K | Dtype::Q5_K => (0, Some(2)),
        Dtype::Q2_K => (80, Some(82)),
        Dtype::Q3_K => (108, None),
        Dtype::Q6_K => (208, None),
        _ => (0, None),
    };
    let d = 0x211Fu16.to_le_bytes(); // 0.01 in f16
    for block in b.chunks_exact_mut(size) {
        if dtype == Dtype::MXFP4 {
            block[0] = 120 + block[0] % 16;
            continue;
        }
        block[d_at..d_at + 2].copy_from_slice(&d);
        if let Some(at) = min_at {
            block[at..at + 2].copy_from_slice(&d);
        }
    }
    b
}

fn floats(n: usize, seed: u64) -> Vec<f32> {
    random_bytes(n, seed)
        .iter()
        .map(|&v| v as f32 / 128.0 - 1.0)
        .collect()
}

#[cfg(feature = "candle")]
fn candle_dtype(dtype: Dtype) -> Option<candle_core::quantized::GgmlDType> {
    use candle_core::quantized::GgmlDType as G;
    Some(match dtype {
        Dtype::Q4_0 => G::Q4_0,
        Dtype::Q4_1 => G::Q4_1,
        Dtype::Q5_0 => G::Q5_0,
        Dtype::Q5_1 => G::Q5_1,
        Dtype::Q8_0 => G::Q8_0,
        Dtype::Q2_K => G::Q2K,
        Dtype::Q3_K => G::Q3K,
        Dtype::Q4_K => G::Q4K,
        Dtype::Q5_K => G::Q5K,
        Dtype::Q6_K => G::Q6K,
        _ => return None,
    })
}

/// candle's seconds per `QMatMul` product of `x (m, cols)` with the blocks `bytes`, and its
/// output, or `None` where candle lacks the type.
#[cfg(feature = "candle")]
fn candle_time(
    dtype: Dtype,
    bytes: &[u8],
    (rows, cols): (usize, usize),
    x: &[f32],
    reps: usize,
) -> Option<(f64, Vec<f32>)> {
    use candle_core::quantized::{ggml_file::qtensor_from_ggml, QMatMul};
    use candle_core::{Device as CDevice, Module, Tensor as CTensor};
    let q = qtensor_from_ggml(candle_dtype(dtype)?, bytes, vec![rows, cols], &CDevice::Cpu)
        .expect("candle QTensor");
    let mm = QMatMul::from_qtensor(q).expect("candle QMatMul");
    let xc = CTensor::from_slice(x, (x.len() / cols, cols), &CDevice::Cpu).expect("candle x");
    let run = || mm.forward(&xc).expect("candle forward");
    let y = run().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let s = best_secs(Device::Cpu, reps, || drop(std::hint::black_box(run())));
    Some((s, y))
}

#[cfg(not(feature = "candle"))]
fn candle_time(
    _: Dtype,
    _: &[u8],
    _: (usize, usize),
    _: &[f32],
    _: usize,
) -> Option<(f64, Vec<f32>)> {
    None
}

/// `|a - b| / |b|` over whole vectors.
fn rel_diff(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        num += ((x - y) as f64).powi(2);
        den += (y as f64).powi(2);
    }
    (num / den).sqrt()
}

fn gemv_table() -> brotensor::Result<()> {
    println!("## GEMV, batch 1 (GB/s of quantized weight bytes)");
    println!();
    println!("| weight | type | MB | ms | GB/s | copy GB/s | vs copy | candle ms | candle GB/s | vs candle | rel. diff to candle |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (rows, cols) in [(4096usize, 4096usize), (4096, 14336)] {
        let x = floats(cols, 1);
        let xt = Tensor::from_slice_on(Device::Cpu, &x, 1, cols)?;
        for dtype in QUANT_WEIGHT_DTYPES {
            let bytes = weight_bytes(dtype, rows, cols);
            let w = Tensor::from_raw_bytes_on(Device::Cpu, &bytes, rows, cols, dtype)?;
            let mut y = Tensor::default();
            let mut dst = vec![0u8; bytes.len()];
            let reps = 20;
            let (s, s_copy) = best_secs_paired(
                Device::Cpu,
                reps,
                || ops::quant_linear(&w, None, &xt, Act::None, &mut y).unwrap(),
                || brotensor_cpu::cast::copy(&mut dst, &bytes),
            );
            let gb = bytes.len() as f64 / 1e9;
            let ours = y.to_vec::<f32>()?;
            let candle = candle_time(dtype, &bytes, (rows, cols), &x, reps);
            let (c_ms, c_gbs, vs, diff) = match &candle {
                Some((c, cy)) => (
                    format!("{:.3}", c * 1e3),
                    format!("{:.1}", gb / c),
                    format!("{:.2}", c / s),
                    format!("{:.1e}", rel_diff(&ours, cy)),
                ),
                None => ("n/a".into(), "n/a".into(), "n/a".into(), "n/a".into()),
            };
            println!(
                "| {rows}x{cols} | {dtype} | {:.1} | {:.3} | {:.1} | {:.1} | {:.2} | {c_ms} | {c_gbs} | {vs} | {diff} |",
                gb * 1e3,
                s * 1e3,
                gb / s,
                gb / s_copy,
                s_copy / s,
            );
        }
    }
    println!();
    Ok(())
}

fn gemm_table() -> brotensor::Result<()> {
    let peak = cpu_fp32_peak_gflops();
    let (rows, cols) = (4096usize, 4096usize);
    println!("## GEMM, weight {rows}x{cols} (FP32 peak {peak:.0} GFLOP/s)");
    println!();
    println!("| batch | type | ms | GFLOP/s | of peak | vs dense F32 |");
    println!("|---:|---|---:|---:|---:|---:|");
    for m in [64usize, 512] {
        let x = Tensor::from_slice_on(Device::Cpu, &floats(m * cols, 2), m, cols)?;
        let flop = 2.0 * (m * rows * cols) as f64;
        let reps = if m <= 64 { 3 } else { 1 };
        let dense = Tensor::from_slice_on(Device::Cpu, &floats(rows * cols, 3), rows, cols)?;
        let mut y = Tensor::default();
        let s_dense = best_secs(Device::Cpu, reps, || {
            ops::linear_forward_batched(&dense, None, &x, &mut y).unwrap()
        });
        println!(
            "| {m} | F32 dense | {:.2} | {:.1} | {:.2} | 1.00 |",
            s_dense * 1e3,
            flop / s_dense / 1e9,
            flop / s_dense / 1e9 / peak
        );
        for dtype in QUANT_WEIGHT_DTYPES {
            let bytes = weight_bytes(dtype, rows, cols);
            let w = Tensor::from_raw_bytes_on(Device::Cpu, &bytes, rows, cols, dtype)?;
            let s = best_secs(Device::Cpu, reps, || {
                ops::quant_linear(&w, None, &x, Act::None, &mut y).unwrap()
            });
            let gflops = flop / s / 1e9;
            println!(
                "| {m} | {dtype} | {:.2} | {gflops:.1} | {:.2} | {:.2} |",
                s * 1e3,
                gflops / peak,
                s_dense / s
            );
        }
    }
    println!();
    Ok(())
}

fn main() -> brotensor::Result<()> {
    let _ = brotensor::init();
    println!(
        "# bench_quant (cpu, {} threads)",
        rayon::current_num_threads()
    );
    println!();
    let only = std::env::args().nth(1);
    if only.as_deref() != Some("gemm") {
        gemv_table()?;
    }
    if only.as_deref() != Some("gemv") {
        gemm_table()?;
    }
    Ok(())
}
