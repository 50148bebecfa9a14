//! Where the CPU tier's time goes (issue 24's goals), from `brotensor-cpu` directly:
//!
//! - Each exp-, log- and sine-based map over 16 Mi F32 elements streamed from memory on
//!   every thread, against a copy of the same tensor timed in the same rounds; then its
//!   compute alone: one thread over 64 Ki elements that stay in L2, 256 times (the same
//!   element count). A map whose one-thread in-cache time, divided by the threads, is
//!   above the copy's is compute-bound: no memory scheme brings it to the copy.
//! - The GGUF GEMV (one activation row) at SmolLM2-135M's decode shapes, its weights
//!   streamed from memory (64 distinct copies, ~64 MB per timing) and held in cache (one
//!   copy), on every thread and on one: GB/s of weight bytes.
//!
//! Run: `cargo run --release -p brotensor-benches --bin bench_cpu_floor [gemv [M]]`
//! (`BROTENSOR_CPU_TIER` caps the tier; `gemv` runs the GEMV table alone, with `M`
//! activation rows, default 1, at most `GEMV_MAX_ROWS`). Figures are the best of 7 rounds.

use std::time::Instant;

use brotensor_cpu::elementwise::{self as ew, log_fits, log_with, sin_cos_with, trig_fits};
use brotensor_cpu::linear::Act;
use brotensor_cpu::quant::{gemv, Block, GEMV_MAX_ROWS};
use brotensor_cpu::{activation as act, simd::MulAdd};

const ROUNDS: usize = 7;
const STREAMED: usize = 1 << 24;
const CACHED: usize = 1 << 16;

/// Seconds of one call of `f`.
fn secs(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

/// Seconds of the fastest of [`ROUNDS`] calls of `f`, after a warm-up call.
fn best(mut f: impl FnMut()) -> f64 {
    f();
    (0..ROUNDS)
        .map(|_| secs(&mut f))
        .fold(f64::INFINITY, f64::min)
}

/// A map from `x` into `y`.
type Map = fn(&[f32], &mut [f32]);

fn maps() -> Vec<(&'static str, Map)> {
    vec![
        ("exp", |x, y| ew::map_unary(x, y, ew::exp_with)),
        ("log", |x, y| {
            ew::map_unary_fitted(x, y, log_fits, log_with, ew::log)
        }),
        ("sin", |x, y| {
            ew::map_unary_fitted(
                x,
                y,
                trig_fits,
                |m: MulAdd, v: f32| sin_cos_with(m, v).0,
                ew::sin,
            )
        }),
        ("tanh", |x, y| ew::map_unary(x, y, ew::tanh_with)),
        ("silu", |x, y| ew::map_unary(x, y, act::silu_with)),
        ("gelu (tanh form)", |x, y| {
            ew::map_unary(x, y, act::gelu_with)
        }),
        ("gelu_exact", |x, y| {
            ew::map_unary(x, y, act::gelu_exact_with)
        }),
        ("softmax rows of 4096", |x, y| {
            brotensor_cpu::norm::softmax_rows(x, 4096, None, y)
        }),
    ]
}

/// `rows x cols` random blocks of `kind` (Q8_0 or Q4_1) with small finite f16 scales.
fn weights(kind: Block, rows: usize, cols: usize) -> Vec<u8> {
    let (size, scale_bytes) = match kind {
        Block::Q8_0 => (34, 2),
        _ => (20, 4),
    };
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut out = Vec::with_capacity(rows * cols / 32 * size);
    for _ in 0..rows * cols / 32 {
        for j in 0..size {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // f16 0x2000 (2^-7) for every scale and minimum, random quants.
            out.push(if j < scale_bytes {
                [0x00, 0x20][j % 2]
            } else {
                (s >> 33) as u8
            });
        }
    }
    out
}

fn main() {
    let threads = rayon::current_num_threads();
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a one-thread pool");
    println!(
        "# bench_cpu_floor: tier {}, {threads} threads",
        brotensor_cpu::simd::tier().name()
    );
    println!();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some("gemv") {
        map_table(threads, &one);
    }
    let m = match args.get(2) {
        Some(a) => a.parse().expect("bench_cpu_floor: M must be a number"),
        None => 1,
    };
    assert!(
        (1..=GEMV_MAX_ROWS).contains(&m),
        "bench_cpu_floor: M in 1..={GEMV_MAX_ROWS}"
    );
    gemv_table(&one, m);
}

/// The maps streamed and in cache.
fn map_table(threads: usize, one: &rayon::ThreadPool) {
    let x: Vec<f32> = (0..STREAMED)
        .map(|i| ((i * 7919 + 1) % 2001) as f32 * 1e-3 - 1.0 + if i % 3 == 0 { 1.5 } else { 0.0 })
        .collect();
    // log's input: positive, so that every chunk takes its vector form.
    let positive: Vec<f32> = x.iter().map(|v| v.abs() + 1e-3).collect();
    let mut y = vec![0.0f32; STREAMED];
    let copy = |y: &mut [f32]| ew::map_unary(&x, y, |_, v| v);
    println!("| map (16 Mi F32) | streamed ms | copy ms | vs copy | 1 thread in L2 ms | ÷ threads vs copy |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, f) in maps() {
        let x = if name == "log" { &positive } else { &x };
        // Alternating, so that both see the same phases of the VM's bandwidth.
        f(x, &mut y);
        let (mut op_s, mut copy_s) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..ROUNDS {
            copy_s = copy_s.min(secs(|| copy(&mut y)));
            op_s = op_s.min(secs(|| f(x, &mut y)));
        }
        let (xs, mut ys) = (&x[..CACHED], vec![0.0f32; CACHED]);
        let cached = one.install(|| {
            best(|| {
                for _ in 0..STREAMED / CACHED {
                    f(xs, &mut ys);
                }
            })
        });
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            op_s * 1e3,
            copy_s * 1e3,
            copy_s / op_s,
            cached * 1e3,
            copy_s / (cached / threads as f64)
        );
    }
}

/// The GEMV at SmolLM2-135M's shapes, streamed and in cache.
fn gemv_table(one: &rayon::ThreadPool, m: usize) {
    println!();
    println!("| GEMV (SmolLM2-135M), {m} activation row(s) | rows x cols | streamed GB/s | in cache GB/s | in cache, 1 thread GB/s |");
    println!("|---|---|---:|---:|---:|");
    for (name, kind, rows, cols) in [
        ("lm_head Q8_0", Block::Q8_0, 49_152usize, 576usize),
        ("gate+up Q4_1", Block::Q4_1, 3072, 576),
        ("down Q4_1", Block::Q4_1, 576, 1536),
        ("q,k,v Q4_1", Block::Q4_1, 960, 576),
    ] {
        let w = weights(kind, rows, cols);
        let a: Vec<f32> = (0..m * cols).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect();
        let mut out = vec![0.0f32; m * rows];
        let calls = (64 << 20) / w.len() + 1;
        let copies: Vec<Vec<u8>> = (0..calls.min(64)).map(|_| w.clone()).collect();
        let mut run = |copies: &[Vec<u8>]| {
            best(|| {
                for i in 0..calls {
                    let w = &copies[i % copies.len()];
                    gemv(kind, w, rows, cols, &a, None, Act::None, &mut out);
                }
            }) / calls as f64
        };
        let streamed = run(&copies);
        let cached = run(&copies[..1]);
        let cached_one = one.install(|| run(&copies[..1]));
        let gbs = |s: f64| w.len() as f64 / s / 1e9;
        println!(
            "| {name} | {rows} x {cols} | {:.1} | {:.1} | {:.1} |",
            gbs(streamed),
            gbs(cached),
            gbs(cached_one)
        );
    }
}
