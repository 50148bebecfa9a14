//! Flash attention on the CPU: `flash_attention_forward` GFLOP/s at B = 1, 16 heads,
//! L = 1024 / 4096, head dim 64 / 128, causal and not; `flash_attention_decode` GB/s of K/V
//! read (one query, 32 query heads over 8 KV heads, head dim 128, caches of 512, 4k and 16k
//! rows).
//!
//! Run: `cargo run --release -p brotensor-benches --bin bench_attention [-- --reps R]
//! [-- --max-len L]`. Each figure is the median of R calls (default 3) after one warm-up.
//! FLOPs count the two products (`4 L^2 D`, halved when causal: the keys a causal row skips
//! are not work); decode bytes count K and V rows read once (`2 valid_len nkv hd 4`).

use std::time::Instant;

use brotensor::{ops, Tensor};

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A `rows x cols` F32 tensor of small deterministic values.
fn filled(rows: usize, cols: usize, salt: usize) -> Tensor {
    let v: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7 + salt * 13) % 97) as f32 / 97.0 - 0.5)
        .collect();
    Tensor::from_slice(&v, rows, cols).expect("tensor")
}

/// The median seconds of `reps` calls of `f`, after one warm-up call.
fn median_secs(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    let reps: usize = arg("--reps", 3);
    let max_len: usize = arg("--max-len", 4096);
    let heads = 16;
    println!("flash_attention_forward, CPU F32, B = 1, {heads} heads");
    println!(
        "{:>6} {:>4} {:>7} {:>10} {:>10}",
        "L", "hd", "causal", "ms", "GFLOP/s"
    );
    for len in [1024usize, 4096].into_iter().filter(|&l| l <= max_len) {
        for hd in [64usize, 128] {
            let d = heads * hd;
            let (q, k, v) = (filled(len, d, 1), filled(len, d, 2), filled(len, d, 3));
            let mut o = Tensor::default();
            for causal in [false, true] {
                let secs = median_secs(reps, || {
                    ops::flash_attention_forward(&q, &k, &v, None, heads, causal, &mut o)
                        .expect("flash_attention_forward");
                });
                let mut flops = 4.0 * (len * len) as f64 * d as f64;
                if causal {
                    flops *= 0.5;
                }
                println!(
                    "{len:>6} {hd:>4} {causal:>7} {:>10.2} {:>10.1}",
                    secs * 1e3,
                    flops / secs / 1e9
                );
            }
        }
    }
    let (nq, nkv, hd) = (32usize, 8usize, 128usize);
    println!();
    println!("flash_attention_decode, CPU F32, 1 query, {nq}/{nkv} heads, hd {hd}");
    println!("{:>6} {:>10} {:>10}", "cache", "us", "GB/s");
    for rows in [512usize, 4096, 16_384] {
        let (kc, vc) = (filled(rows, nkv * hd, 4), filled(rows, nkv * hd, 5));
        let q = filled(1, nq * hd, 6);
        let mut o = Tensor::default();
        let secs = median_secs(reps.max(10), || {
            ops::flash_attention_decode(&q, &kc, &vc, rows, nq, nkv, 0.0, 0, &mut o)
                .expect("flash_attention_decode");
        });
        let bytes = 2.0 * (rows * nkv * hd * 4) as f64;
        println!(
            "{rows:>6} {:>10.1} {:>10.2}",
            secs * 1e6,
            bytes / secs / 1e9
        );
    }
}
