//! Flash attention on every selected GPU device in F16 and BF16, at the shapes of the
//! issue's GPU goals: `flash_attention_forward` (B = 1, 16 heads, L = 1024 / 4096, head dim
//! 64 / 128, causal and not) in TFLOP/s, and `flash_attention_decode` (one query, 32 query
//! heads over 8 KV heads, head dim 128, caches of 512 / 4096 / 16384 rows) in GB/s of K/V
//! read against a device copy of the same K/V bytes, timed in alternating batches.
//! `gpu-kit/torch_peer.py` measures `scaled_dot_product_attention` at the same shapes in the
//! same kit run.
//!
//! Run: `cargo run --release -p brotensor-benches --bin bench_attention_gpu [-- --max-len L]`
//! (`BROTENSOR_BENCH_DEVICES=cuda` to pick the device). FLOPs count the two products (`4 L^2
//! D`, halved when causal); the copy moves each byte twice (read and write), as torch's
//! figure does.

use brotensor::{ops, Device, Dtype, Tensor};
use brotensor_benches::{best_secs, best_secs_paired, selected_devices};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A `rows x cols` tensor of small deterministic values on `device` in `dtype`.
fn filled(device: Device, rows: usize, cols: usize, salt: usize, dtype: Dtype) -> Tensor {
    let v: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7 + salt * 13) % 97) as f32 / 97.0 - 0.5)
        .collect();
    Tensor::from_slice_on(device, &v, rows, cols)
        .and_then(|t| t.to_dtype(dtype))
        .expect("bench tensor")
}

fn main() {
    let max_len = arg("--max-len", 4096);
    println!("| device | dtype | op | shape | ms | rate | vs copy |");
    println!("|---|---|---|---|---:|---:|---:|");
    for device in selected_devices().into_iter().filter(|d| d.is_gpu()) {
        for dtype in [Dtype::F16, Dtype::BF16] {
            if !brotensor::supports_dtype(device, dtype).unwrap_or(false) {
                println!("| {device} | {dtype} | (not supported on this device) | | | | |");
                continue;
            }
            let heads = 16;
            for len in [1024usize, 4096].into_iter().filter(|&l| l <= max_len) {
                for hd in [64usize, 128] {
                    let d = heads * hd;
                    let q = filled(device, len, d, 1, dtype);
                    let k = filled(device, len, d, 2, dtype);
                    let v = filled(device, len, d, 3, dtype);
                    let mut o = Tensor::default();
                    for causal in [false, true] {
                        let s = best_secs(device, 3, || {
                            ops::flash_attention_forward(&q, &k, &v, None, heads, causal, &mut o)
                                .expect("flash_attention_forward");
                        });
                        let flop = 4.0 * (len * len * d) as f64 * if causal { 0.5 } else { 1.0 };
                        let tag = if causal { "causal" } else { "full" };
                        println!(
                            "| {device} | {dtype} | forward {tag} | H16 L{len} hd{hd} | {:.3} | {:.2} TFLOP/s | |",
                            s * 1e3,
                            flop / s / 1e12
                        );
                    }
                }
            }
            let (nq, nkv, hd) = (32, 8, 128);
            for cache in [512usize, 4096, 16384] {
                let q = filled(device, 1, nq * hd, 1, dtype);
                let k = filled(device, cache, nkv * hd, 2, dtype);
                let v = filled(device, cache, nkv * hd, 3, dtype);
                let kv = filled(device, 2 * cache, nkv * hd, 4, dtype);
                let mut kv_copy = kv.clone();
                let mut o = Tensor::default();
                let (s, s_copy) = best_secs_paired(
                    device,
                    20,
                    || {
                        ops::flash_attention_decode(&q, &k, &v, cache, nq, nkv, 0.0, 0, &mut o)
                            .expect("flash_attention_decode");
                    },
                    || ops::copy_into(&kv, &mut kv_copy).expect("copy"),
                );
                let bytes = (2 * cache * nkv * hd * dtype.size_bytes().expect("sized")) as f64;
                let (rate, copy_rate) = (bytes / s / 1e9, 2.0 * bytes / s_copy / 1e9);
                println!(
                    "| {device} | {dtype} | decode 32q/8kv | cache {cache} hd128 | {:.4} | {rate:.1} GB/s | {:.2} (copy {copy_rate:.1} GB/s) |",
                    s * 1e3,
                    rate / copy_rate
                );
            }
        }
    }
}
