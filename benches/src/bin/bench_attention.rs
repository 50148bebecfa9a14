//! Flash attention on the CPU: `flash_attention_forward` GFLOP/s at B = 1, 16 heads,
//! L = 1024 / 4096, head dim 64 / 128, causal and not, against the measured FP32 peak and
//! (with `--features candle`) against candle's attention done the usual way (`Q K^T` by
//! `matmul`, `candle_nn::ops::softmax_last_dim`, `matmul` by V, on `(1, 16, L, hd)` tensors;
//! causal adds a `(L, L)` mask of 0 / -inf before the softmax); `flash_attention_decode` GB/s
//! of K/V read (one query, 32 query heads over 8 KV heads, head dim 128, caches of 512, 4k
//! and 16k rows) against the streaming copy of the same bytes.
//!
//! Run: `cargo run --release -p brotensor-benches [--features candle] --bin bench_attention
//! [-- --max-len L]`. Contenders alternate batch by batch (`best_secs_paired`: best of 5
//! batches each). FLOPs count the two products (`4 L^2 D`, halved when causal: the keys a
//! causal row skips are not work; candle's GFLOP/s use the same count, so its column is the
//! useful rate). Decode bytes count K and V rows read once (`2 valid_len nkv hd 4`); the
//! copy's GB/s count its reads and writes of those bytes.

use std::time::Instant;

use brotensor::{ops, Device, Tensor};
use brotensor_benches::{best_secs_paired, cpu_fp32_peak_gflops};

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `rows * cols` small deterministic values.
fn values(rows: usize, cols: usize, salt: usize) -> Vec<f32> {
    (0..rows * cols)
        .map(|i| ((i * 7 + salt * 13) % 97) as f32 / 97.0 - 0.5)
        .collect()
}

/// A `rows x cols` F32 tensor of [`values`].
fn filled(rows: usize, cols: usize, salt: usize) -> Tensor {
    Tensor::from_slice(&values(rows, cols, salt), rows, cols).expect("tensor")
}

/// Candle's attention the usual way, on `(1, heads, L, hd)` tensors.
#[cfg(feature = "candle")]
mod peer {
    use candle_core::{Device, Tensor};

    /// `(L, heads*hd)` row-major values as a `(1, heads, L, hd)` candle tensor.
    pub fn heads_first(x: &[f32], len: usize, heads: usize, hd: usize) -> Tensor {
        Tensor::from_vec(x.to_vec(), (1, len, heads, hd), &Device::Cpu)
            .and_then(|t| t.transpose(1, 2))
            .and_then(|t| t.contiguous())
            .expect("candle tensor")
    }

    /// The `(L, L)` causal mask: 0 on and below the diagonal, -inf above.
    pub fn causal_mask(len: usize) -> Tensor {
        let m: Vec<f32> = (0..len * len)
            .map(|i| {
                if i % len > i / len {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();
        Tensor::from_vec(m, (len, len), &Device::Cpu).expect("candle mask")
    }

    /// `softmax(Q K^T * scale [+ mask]) V`.
    pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> Tensor {
        let hd = q.dims()[3];
        let run = || -> candle_core::Result<Tensor> {
            let s = (q.matmul(&k.t()?)? * (1.0 / (hd as f64).sqrt()))?;
            let s = match mask {
                Some(m) => s.broadcast_add(m)?,
                None => s,
            };
            candle_nn::ops::softmax_last_dim(&s)?.matmul(v)
        };
        run().expect("candle attention")
    }

    /// Largest `|ours - candle|` with candle's `(1, heads, L, hd)` output brought back to
    /// `(L, heads*hd)`.
    pub fn max_diff(ours: &[f32], theirs: &Tensor) -> f32 {
        let flat: Vec<f32> = theirs
            .transpose(1, 2)
            .and_then(|t| t.contiguous())
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1())
            .expect("candle output");
        ours.iter()
            .zip(&flat)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max)
    }
}

fn forward_table(peak: f64, max_len: usize) {
    let heads = 16;
    println!("## flash_attention_forward, CPU F32, B = 1, {heads} heads");
    println!();
    println!("| L | hd | causal | ms | GFLOP/s | of peak | candle ms | candle GFLOP/s | vs candle | max abs diff |");
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for len in [1024usize, 4096].into_iter().filter(|&l| l <= max_len) {
        for hd in [64usize, 128] {
            let d = heads * hd;
            let (qv, kv, vv) = (values(len, d, 1), values(len, d, 2), values(len, d, 3));
            let t = |x: &[f32]| Tensor::from_slice(x, len, d).expect("tensor");
            let (q, k, v) = (t(&qv), t(&kv), t(&vv));
            #[cfg(feature = "candle")]
            let (cq, ck, cv) = (
                peer::heads_first(&qv, len, heads, hd),
                peer::heads_first(&kv, len, heads, hd),
                peer::heads_first(&vv, len, heads, hd),
            );
            #[cfg(feature = "candle")]
            let mask = peer::causal_mask(len);
            let mut o = Tensor::default();
            for causal in [false, true] {
                let mut ours = || {
                    ops::flash_attention_forward(&q, &k, &v, None, heads, causal, &mut o)
                        .expect("flash_attention_forward");
                };
                #[cfg(feature = "candle")]
                let mut out_c = None;
                #[cfg(feature = "candle")]
                let (secs, secs_c) = best_secs_paired(Device::Cpu, 1, &mut ours, || {
                    out_c = Some(peer::attention(&cq, &ck, &cv, causal.then_some(&mask)));
                });
                #[cfg(not(feature = "candle"))]
                let (secs, secs_c) = best_secs_paired(Device::Cpu, 1, &mut ours, || {});
                let mut flops = 4.0 * (len * len) as f64 * d as f64;
                if causal {
                    flops *= 0.5;
                }
                let gf = flops / secs / 1e9;
                #[cfg(feature = "candle")]
                let (gf_c, diff) = (
                    flops / secs_c / 1e9,
                    format!(
                        "{:.1e}",
                        peer::max_diff(
                            &o.to_vec::<f32>().expect("output"),
                            out_c.as_ref().expect("ran")
                        )
                    ),
                );
                #[cfg(not(feature = "candle"))]
                let (gf_c, diff) = (f64::NAN, "-".to_string());
                println!(
                    "| {len} | {hd} | {causal} | {:.1} | {gf:.1} | {:.2} | {:.1} | {gf_c:.1} | {:.2} | {diff} |",
                    secs * 1e3,
                    gf / peak,
                    secs_c * 1e3,
                    gf / gf_c,
                );
            }
        }
    }
}

fn decode_table() {
    let (nq, nkv, hd) = (32usize, 8usize, 128usize);
    println!("## flash_attention_decode, CPU F32, 1 query, {nq}/{nkv} heads, hd {hd}");
    println!();
    println!("| cache rows | K+V MiB | us | GB/s | copy us | copy GB/s | vs copy |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for rows in [512usize, 4096, 16_384] {
        let (kc, vc) = (filled(rows, nkv * hd, 4), filled(rows, nkv * hd, 5));
        let q = filled(1, nq * hd, 6);
        let mut o = Tensor::default();
        let bytes = 2 * rows * nkv * hd * 4;
        let src = vec![1u8; bytes];
        let mut dst = vec![0u8; bytes];
        let reps = (20 * 16_384 / rows).max(5);
        let (secs, secs_copy) = best_secs_paired(
            Device::Cpu,
            reps,
            || {
                ops::flash_attention_decode(&q, &kc, &vc, rows, nq, nkv, 0.0, 0, &mut o)
                    .expect("flash_attention_decode");
            },
            || brotensor_cpu::cast::copy(&mut dst, &src),
        );
        let gb = bytes as f64 / secs / 1e9;
        let gb_copy = 2.0 * bytes as f64 / secs_copy / 1e9;
        println!(
            "| {rows} | {:.0} | {:.1} | {gb:.1} | {:.1} | {gb_copy:.1} | {:.2} |",
            bytes as f64 / (1 << 20) as f64,
            secs * 1e6,
            secs_copy * 1e6,
            gb / gb_copy
        );
    }
}

fn main() {
    let max_len: usize = arg("--max-len", 4096);
    let t0 = Instant::now();
    let peak = cpu_fp32_peak_gflops();
    println!(
        "# bench_attention: {} rayon threads, measured FP32 peak {peak:.1} GFLOP/s",
        rayon::current_num_threads()
    );
    println!();
    forward_table(peak, max_len);
    println!();
    decode_table();
    println!();
    println!("(total {:.0} s)", t0.elapsed().as_secs_f64());
}
