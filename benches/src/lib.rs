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

/// The CPU's measured FP32 peak in GFLOP/s: every rayon thread runs independent chains of
/// fused multiply-adds on 16-wide accumulators (compiled for the widest vector extension the
/// CPU has, through `brotensor_cpu::simd::wide`), the best of 5 timed rounds. The figure the
/// compute-bound CPU benchmarks are measured against.
pub fn cpu_fp32_peak_gflops() -> f64 {
    use rayon::prelude::*;
    /// Accumulator count and width: enough independent chains to cover the FMA latency.
    const CHAINS: usize = 12;
    const WIDTH: usize = 16;
    const ITERS: usize = 2_000_000;
    let threads = rayon::current_num_threads();
    let round = || {
        let t0 = Instant::now();
        let sink: f32 = (0..threads)
            .into_par_iter()
            .map(|t| {
                brotensor_cpu::simd::wide(
                    #[inline(always)]
                    |m| {
                        let mut acc = [[t as f32 * 1e-3; WIDTH]; CHAINS];
                        let (a, b) = (0.999_99f32, 1e-6f32);
                        for _ in 0..ITERS {
                            for chain in acc.iter_mut() {
                                for v in chain.iter_mut() {
                                    *v = m.apply(*v, a, b);
                                }
                            }
                        }
                        acc.iter().flatten().sum::<f32>()
                    },
                )
            })
            .sum();
        std::hint::black_box(sink);
        t0.elapsed().as_secs_f64()
    };
    round();
    let best = (0..5).map(|_| round()).fold(f64::INFINITY, f64::min);
    let flop = 2.0 * (threads * ITERS * CHAINS * WIDTH) as f64;
    flop / best / 1e9
}
