//! Shared timing for the benchmark binaries.

use std::time::Instant;

use brotensor::Device;

/// Best seconds per call of `f` over 5 batches of `reps` calls after one warm-up call, with
/// a sync of `device` closing every batch (GPU launches are asynchronous).
pub fn best_secs(device: Device, reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    brotensor::sync(device).expect("sync");
    (0..5)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..reps {
                f();
            }
            brotensor::sync(device).expect("sync");
            t0.elapsed().as_secs_f64() / reps as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// Best seconds per call of `op` and of `reference`, timed in alternating batches (5 of each,
/// `reps` calls per batch, one warm-up call each, a sync of `device` closing every batch).
/// Interleaving keeps a ratio fair on a machine whose bandwidth drifts during a run.
pub fn best_secs_paired(
    device: Device,
    reps: usize,
    mut op: impl FnMut(),
    mut reference: impl FnMut(),
) -> (f64, f64) {
    let batch = |f: &mut dyn FnMut()| {
        let t0 = Instant::now();
        for _ in 0..reps {
            f();
        }
        brotensor::sync(device).expect("sync");
        t0.elapsed().as_secs_f64() / reps as f64
    };
    op();
    reference();
    brotensor::sync(device).expect("sync");
    let (mut best_op, mut best_ref) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..5 {
        best_ref = best_ref.min(batch(&mut reference));
        best_op = best_op.min(batch(&mut op));
    }
    (best_op, best_ref)
}

/// Environment variable naming the devices to measure: comma-separated tag prefixes
/// (`BROTENSOR_BENCH_DEVICES=cpu`, `=cuda,wgpu:1`); unset means every available device.
pub const DEVICES_ENV: &str = "BROTENSOR_BENCH_DEVICES";

/// The available devices whose tag (`cpu`, `wgpu:0`, `cuda:0`) starts with one of the
/// prefixes in [`DEVICES_ENV`], or all of them when it is unset or empty.
pub fn selected_devices() -> Vec<Device> {
    let wanted = std::env::var(DEVICES_ENV).unwrap_or_default();
    let prefixes: Vec<&str> = wanted.split(',').filter(|p| !p.is_empty()).collect();
    brotensor::available_devices()
        .into_iter()
        .filter(|d| {
            let tag = d.to_string();
            prefixes.is_empty() || prefixes.iter().any(|p| tag.starts_with(p))
        })
        .collect()
}
