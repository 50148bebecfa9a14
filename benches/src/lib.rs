//! Shared timing for the benchmark binaries.

use std::collections::HashMap;
use std::process::Command;
use std::time::Instant;

pub mod resblock;

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

/// The CPU's measured FP32 peak in GFLOP/s: every rayon thread runs 12 independent chains
/// of fused multiply-adds on the widest vector registers the CPU has (AVX-512, else
/// AVX2 + FMA, written with intrinsics so the compiler cannot re-vectorise them the wrong
/// way), the best of 5 timed rounds. The figure the compute-bound CPU benchmarks are
/// measured against. Elsewhere it times scalar `mul_add` chains.
pub fn cpu_fp32_peak_gflops() -> f64 {
    use rayon::prelude::*;
    const ITERS: usize = 4_000_000;
    let threads = rayon::current_num_threads();
    let round = || {
        let t0 = Instant::now();
        let (sink, lanes): (f32, usize) = (0..threads)
            .into_par_iter()
            .map(|t| fma_chains(ITERS, t as f32 * 1e-3))
            .reduce(|| (0.0, 0), |a, b| (a.0 + b.0, b.1.max(a.1)));
        std::hint::black_box(sink);
        (t0.elapsed().as_secs_f64(), lanes)
    };
    round();
    let (best, lanes) =
        (0..5)
            .map(|_| round())
            .fold((f64::INFINITY, 1), |a, b| if b.0 < a.0 { b } else { a });
    let flop = 2.0 * (threads * ITERS * FMA_CHAINS * lanes) as f64;
    flop / best / 1e9
}

/// Independent accumulators per thread: enough to cover the FMA latency on two FMA ports.
const FMA_CHAINS: usize = 12;

/// Runs `iters` steps of [`FMA_CHAINS`] independent vector FMA chains starting at `seed`;
/// returns their sum (to keep the work alive) and the vector width in f32 lanes.
fn fma_chains(iters: usize, seed: f32) -> (f32, usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F was detected on this CPU just above.
            return (unsafe { fma_chains_avx512(iters, seed) }, 16);
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: AVX2 and FMA were detected on this CPU just above.
            return (unsafe { fma_chains_avx2(iters, seed) }, 8);
        }
    }
    let mut acc = [seed; FMA_CHAINS];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = x.mul_add(0.999_99, 1e-6);
        }
    }
    (acc.iter().sum(), 1)
}

/// [`fma_chains`] on 16-lane AVX-512 registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_chains_avx512(iters: usize, seed: f32) -> f32 {
    use std::arch::x86_64::*;
    let (a, b) = (_mm512_set1_ps(0.999_99), _mm512_set1_ps(1e-6));
    let mut acc = [_mm512_set1_ps(seed); FMA_CHAINS];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm512_fmadd_ps(*x, a, b);
        }
    }
    let sum = acc
        .iter()
        .fold(_mm512_setzero_ps(), |s, &x| _mm512_add_ps(s, x));
    _mm512_reduce_add_ps(sum)
}

/// [`fma_chains`] on 8-lane AVX2 registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_chains_avx2(iters: usize, seed: f32) -> f32 {
    use std::arch::x86_64::*;
    let (a, b) = (_mm256_set1_ps(0.999_99), _mm256_set1_ps(1e-6));
    let mut acc = [_mm256_set1_ps(seed); FMA_CHAINS];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm256_fmadd_ps(*x, a, b);
        }
    }
    let mut lanes = [0.0f32; 8];
    let sum = acc
        .iter()
        .fold(_mm256_setzero_ps(), |s, &x| _mm256_add_ps(s, x));
    _mm256_storeu_ps(lanes.as_mut_ptr(), sum);
    lanes.iter().sum()
}

/// A Python peer's best milliseconds per row name: runs `python3 benches/<script> <args>`,
/// which prints `name<TAB>ms` lines. Empty, with the reason said once, when the script
/// cannot run (no python3, a missing package).
pub fn python_peer_ms(script: &str, args: &[String]) -> HashMap<String, f64> {
    let path = format!("{}/{script}", env!("CARGO_MANIFEST_DIR"));
    match Command::new("python3").arg(&path).args(args).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| {
                let (name, ms) = l.split_once('\t')?;
                Some((name.to_string(), ms.trim().parse().ok()?))
            })
            .collect(),
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            eprintln!("{script} failed: {}", err.lines().last().unwrap_or(""));
            HashMap::new()
        }
        Err(e) => {
            eprintln!("{script} did not run: {e}");
            HashMap::new()
        }
    }
}

/// `len` deterministic values in `[-1, 1)` from `seed` (a 64-bit LCG's high bits): bench
/// inputs that every run and every contender sees alike.
pub fn lcg_values(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}
