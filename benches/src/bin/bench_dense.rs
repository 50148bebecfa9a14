//! Dense-core throughput on every device: matmul in GFLOP/s (on the CPU also against the
//! `gemm` crate called directly, in the same run) and the row ops at 4096 x 4096 in GB/s
//! against the device's copy bandwidth measured in the same run.
//!
//! Run: `cargo run --release -p brotensor-benches --bin bench_dense`. Figures are the best of
//! 5 timed batches; GPU batches end with a sync.

use brotensor::{ops, Device, Dtype, Tensor};
use brotensor_benches::best_secs;

fn host(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 7919 + seed) % 2001) as f32 - 1000.0) * 1e-3)
        .collect()
}

/// `gemm` called directly on host slices: the CPU reference for the matmul ratio.
fn gemm_direct_secs(n: usize) -> f64 {
    let a = host(n * n, 1);
    let b = host(n * n, 2);
    let mut c = vec![0.0f32; n * n];
    best_secs(Device::Cpu, if n <= 256 { 50 } else { 3 }, || {
        // SAFETY: a, b, c are n*n row-major matrices with the strides given; c is unique.
        unsafe {
            gemm::gemm(
                n,
                n,
                n,
                c.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                1,
                n as isize,
                b.as_ptr(),
                1,
                n as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(0),
            );
        }
    })
}

fn main() -> brotensor::Result<()> {
    let _ = brotensor::init();
    println!("# bench_dense");
    println!();
    println!("| device | dtype | op | size | ms | rate | vs reference |");
    println!("|---|---|---|---|---:|---:|---:|");
    for device in brotensor::available_devices() {
        let name = brotensor::device_name(device)?;
        let software = brotensor::is_software(device)?;
        let sizes: &[usize] = if software {
            &[256, 1024]
        } else {
            &[256, 1024, 2048]
        };
        for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
            if !brotensor::supports_dtype(device, dtype)? {
                continue;
            }
            for &n in sizes {
                let a = Tensor::from_slice_on(device, &host(n * n, 1), n, n)?.to_dtype(dtype)?;
                let b = Tensor::from_slice_on(device, &host(n * n, 2), n, n)?.to_dtype(dtype)?;
                let mut c = Tensor::default();
                let reps = if n <= 256 {
                    20
                } else if software {
                    1
                } else {
                    3
                };
                let s = best_secs(device, reps, || ops::matmul(&a, &b, &mut c).unwrap());
                let gflops = 2.0 * (n * n * n) as f64 / s / 1e9;
                let vs = if device == Device::Cpu {
                    let g = 2.0 * (n * n * n) as f64 / gemm_direct_secs(n) / 1e9;
                    format!("{:.2} (gemm crate {g:.1} GFLOP/s)", gflops / g)
                } else {
                    "-".to_string()
                };
                println!(
                    "| {name} | {dtype} | matmul | {n}^3 | {:.3} | {gflops:.1} GFLOP/s | {vs} |",
                    s * 1e3
                );
            }
            // Memory-bound row ops at 4096 x 4096 against a copy of the same tensor.
            let (r, cols) = (4096usize, 4096usize);
            let es = if dtype == Dtype::F32 { 4 } else { 2 };
            let bytes = 2 * r * cols * es;
            let x = Tensor::from_slice_on(device, &host(r * cols, 3), r, cols)?.to_dtype(dtype)?;
            let g = Tensor::from_slice_on(device, &host(cols, 4), cols, 1)?.to_dtype(dtype)?;
            let bt = Tensor::from_slice_on(device, &host(cols, 5), cols, 1)?.to_dtype(dtype)?;
            let mut y = Tensor::zeros_on(device, r, cols, dtype)?;
            let reps = if software { 2 } else { 10 };
            let copy = best_secs(device, reps, || ops::cast(&x, &mut y, dtype).unwrap());
            let copy_gbs = bytes as f64 / copy / 1e9;
            println!("| {name} | {dtype} | copy (reference) | 4096^2 | {:.3} | {copy_gbs:.1} GB/s | 1.00 |", copy * 1e3);
            let row = |op: &str, s: f64| {
                let gbs = bytes as f64 / s / 1e9;
                println!(
                    "| {name} | {dtype} | {op} | 4096^2 | {:.3} | {gbs:.1} GB/s | {:.2} |",
                    s * 1e3,
                    gbs / copy_gbs
                );
            };
            row(
                "softmax_rows_forward",
                best_secs(device, reps, || {
                    ops::softmax_rows_forward(&x, &mut y, r, cols).unwrap()
                }),
            );
            row(
                "layernorm (inference)",
                best_secs(device, reps, || {
                    ops::layernorm_forward_inference_batched(&x, &g, &bt, &mut y, 1e-5).unwrap()
                }),
            );
            row(
                "rms_norm_forward",
                best_secs(device, reps, || {
                    ops::rms_norm_forward(&x, &g, 1e-6, &mut y).unwrap()
                }),
            );
            row(
                "gelu_forward",
                best_secs(device, reps, || ops::gelu_forward(&x, &mut y).unwrap()),
            );
        }
    }
    Ok(())
}
