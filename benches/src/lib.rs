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
