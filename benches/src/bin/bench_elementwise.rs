//! Element-wise throughput on every device, as GB/s and as a ratio to the device's copy
//! bandwidth measured in the same run.
//!
//! Run: `cargo run --release -p brotensor-benches --bin bench_elementwise [-- --elems N]`.
//! Each figure is the best of 5 timed batches; GPU batches end with a sync. Bytes counted
//! are the bytes each op must read and write once (e.g. add: 2 reads + 1 write).

use brotensor::{ops, Dtype, Tensor};
use brotensor_benches::best_secs;

fn parse_elems() -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--elems")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1 << 26)
}

fn main() -> brotensor::Result<()> {
    let _ = brotensor::init();
    let n = parse_elems();
    let cols = 1024;
    let rows = n / cols;
    let n = rows * cols;
    println!(
        "# bench_elementwise: {n} elements ({} MiB in F32)",
        (n * 4) >> 20
    );
    println!();
    println!("| device | dtype | elements | op | ms | GB/s | vs copy |");
    println!("|---|---|---:|---|---:|---:|---:|");
    let host: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 1e-3).collect();
    for device in brotensor_benches::selected_devices() {
        let name = brotensor::device_name(device)?;
        // Tensors no larger than the device's largest buffer (wgpu adapters bind a limited size).
        let max_rows = (brotensor::max_buffer_bytes(device)? / (4 * cols as u64)) as usize;
        let rows = rows.min(max_rows);
        let n = rows * cols;
        let host = &host[..n];
        let reps = if brotensor::is_software(device)? {
            3
        } else {
            20
        };
        for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
            if !brotensor::supports_dtype(device, dtype)? {
                continue;
            }
            let es = if dtype == Dtype::F32 { 4 } else { 2 };
            let x = Tensor::from_slice_on(device, host, rows, cols)?.to_dtype(dtype)?;
            let y = x.try_clone()?;
            let mut out = Tensor::zeros_on(device, rows, cols, dtype)?;
            let mut acc = x.try_clone()?;
            // The reference: the same-dtype cast into a reused buffer, which is the device's
            // copy (on the CPU, all cores with streaming stores; on a GPU, a vectorized
            // device-to-device word copy).
            let s = best_secs(device, reps, || ops::cast(&x, &mut out, dtype).unwrap());
            let copy_gbs = (2 * n * es) as f64 / s / 1e9;
            let row = |op: &str, bytes: usize, s: f64| {
                let gbs = bytes as f64 / s / 1e9;
                println!(
                    "| {name} | {dtype} | {n} | {op} | {:.3} | {gbs:.1} | {:.2} |",
                    s * 1e3,
                    gbs / copy_gbs
                );
            };
            row(
                "copy (reference)",
                2 * n * es,
                (2 * n * es) as f64 / copy_gbs / 1e9,
            );
            let s = best_secs(device, reps, || ops::add_out(&x, &y, &mut out).unwrap());
            row("add_out", 3 * n * es, s);
            let s = best_secs(device, reps, || ops::scale_inplace(&mut acc, 1.0).unwrap());
            row("scale_inplace", 2 * n * es, s);
            let s = best_secs(device, reps, || {
                ops::axpby_inplace(&mut acc, &x, 0.5, 0.5).unwrap()
            });
            row("axpby_inplace", 3 * n * es, s);
            let s = best_secs(device, reps, || ops::exp_forward(&x, &mut out).unwrap());
            row("exp_forward", 2 * n * es, s);
            let s = best_secs(device, reps, || ops::silu_forward(&x, &mut out).unwrap());
            row("silu_forward", 2 * n * es, s);
            if dtype == Dtype::F32 {
                let mut half = Tensor::default();
                let s = best_secs(device, reps, || {
                    ops::cast(&x, &mut half, Dtype::F16).unwrap()
                });
                row("cast F32->F16", n * 6, s);
            }
        }
    }
    Ok(())
}
