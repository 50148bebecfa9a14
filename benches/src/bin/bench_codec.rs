//! Codec quantizers and the gated delta rule on each selected device (`BROTENSOR_BENCH_DEVICES`),
//! F32:
//! - `vq_encode_forward` on N = 4096 rows against K = 1024 codewords of D = 64: its product
//!   (2 N K D FLOP) against the measured FP32 peak on the CPU, and numpy's matmul + argmin
//!   (`benches/codec_numpy.py`, run once before our rows).
//! - `fsq_quantize_forward` on 1 Mi rows of 8 coordinates (levels 8, 5, ..., 5), in GB/s
//!   (32 B read and 36 B written per row), against numpy's formula.
//! - `gated_delta_rule_step` (one decode token) and `gated_delta_rule_chunked` (a 256-token
//!   prompt) at Qwen3-Next's shape (16 heads, d_k = d_v = 128): 4 d_k d_v FLOP per token and
//!   head against the peak; the step also as GB/s of its state (read and written once).
//!
//! `cargo run --release -p brotensor-benches --bin bench_codec`

use std::collections::HashMap;

use brotensor::{ops, Device, Dtype, Tensor};
use brotensor_benches::{best_secs, cpu_fp32_peak_gflops, lcg_values, selected_devices};

const N: usize = 4096;
const K: usize = 1024;
const D: usize = 64;
const FSQ_ROWS: usize = 1 << 20;
const LEVELS: [i32; 8] = [8, 5, 5, 5, 5, 5, 5, 5];
const HEADS: usize = 16;
const DK: usize = 128;
const DV: usize = 128;
const PROMPT: usize = 256;

/// numpy's best milliseconds per row name (`benches/codec_numpy.py`).
fn numpy_ms() -> HashMap<String, f64> {
    brotensor_benches::python_peer_ms(
        "codec_numpy.py",
        &[N, K, D, FSQ_ROWS].map(|d| d.to_string()),
    )
}

fn row(name: &str, ms: f64, rate: String, of_peak: String, numpy: Option<f64>) {
    let np = numpy.map_or("-".into(), |v| format!("{v:.2}"));
    let vs = numpy.map_or("-".into(), |v| format!("{:.2}x", v / ms));
    println!("| {name} | {ms:.3} | {rate} | {of_peak} | {np} | {vs} |");
}

fn bench(device: Device, peak: Option<f64>, numpy: &HashMap<String, f64>) -> brotensor::Result<()> {
    let of_peak = |gflops: f64| peak.map_or("-".into(), |p| format!("{:.2}", gflops / p));
    let t = |v: Vec<f32>, r: usize, c: usize| Tensor::from_slice_on(device, &v, r, c);

    let (x, cb) = (
        t(lcg_values(N * D, 1), N, D)?,
        t(lcg_values(K * D, 2), K, D)?,
    );
    let (mut idx, mut q) = (Tensor::default(), Tensor::default());
    let s = best_secs(device, 3, || {
        ops::vq_encode_forward(&x, &cb, &mut idx, &mut q).expect("vq")
    });
    let gflops = 2.0 * (N * K * D) as f64 / s / 1e9;
    row(
        &format!("vq_encode {N}x{D} vs {K} codewords"),
        s * 1e3,
        format!("{gflops:.1} GFLOP/s"),
        of_peak(gflops),
        numpy.get("vq_encode").copied(),
    );

    let y = t(
        lcg_values(FSQ_ROWS * LEVELS.len(), 3),
        FSQ_ROWS,
        LEVELS.len(),
    )?;
    let lv = Tensor::from_slice_on(device, &LEVELS, LEVELS.len(), 1)?;
    let (mut fq, mut fp) = (Tensor::default(), Tensor::default());
    let s = best_secs(device, 3, || {
        ops::fsq_quantize_forward(&y, &lv, &mut fq, &mut fp).expect("fsq")
    });
    let bytes = (FSQ_ROWS * (LEVELS.len() * 8 + 4)) as f64;
    row(
        &format!("fsq_quantize {FSQ_ROWS}x{}", LEVELS.len()),
        s * 1e3,
        format!("{:.1} GB/s", bytes / s / 1e9),
        "-".into(),
        numpy.get("fsq_quantize").copied(),
    );

    for (tokens, chunked) in [(1usize, false), (PROMPT, true)] {
        let qk = |seed| t(lcg_values(tokens * HEADS * DK, seed), tokens, HEADS * DK);
        let (qt, kt) = (qk(4)?, qk(5)?);
        let v = t(lcg_values(tokens * HEADS * DV, 6), tokens, HEADS * DV)?;
        let a = t(lcg_values(tokens * HEADS, 7), tokens, HEADS)?;
        let b = t(lcg_values(tokens * HEADS, 8), tokens, HEADS)?;
        let la = t(lcg_values(HEADS, 9), HEADS, 1)?;
        let mut state = Tensor::zeros_on(device, HEADS, DV * DK, Dtype::F32)?;
        let mut o = Tensor::default();
        let f = if chunked {
            ops::gated_delta_rule_chunked
        } else {
            ops::gated_delta_rule_step
        };
        let s = best_secs(device, if chunked { 1 } else { 20 }, || {
            f(
                &qt,
                &kt,
                &v,
                &a,
                &b,
                &la,
                (HEADS, DK, DV),
                &mut state,
                &mut o,
            )
            .expect("delta")
        });
        let gflops = 4.0 * (tokens * HEADS * DK * DV) as f64 / s / 1e9;
        let state_gbs = 8.0 * (HEADS * DK * DV) as f64 / s / 1e9;
        let name = if chunked {
            format!("gated_delta_rule_chunked {tokens} tokens, {HEADS}x{DK}x{DV}")
        } else {
            format!("gated_delta_rule_step 1 token, {HEADS}x{DK}x{DV}")
        };
        let rate = if chunked {
            format!("{gflops:.1} GFLOP/s")
        } else {
            format!("{gflops:.1} GFLOP/s, state {state_gbs:.1} GB/s")
        };
        row(&name, s * 1e3, rate, of_peak(gflops), None);
    }
    Ok(())
}

fn main() {
    let devices = selected_devices();
    let numpy = if devices.contains(&Device::Cpu) {
        numpy_ms()
    } else {
        HashMap::new()
    };
    for device in devices {
        let peak = (device == Device::Cpu).then(cpu_fp32_peak_gflops);
        let name = brotensor::device_name(device).unwrap_or_else(|_| device.to_string());
        println!(
            "\n# bench_codec on {name}: {} rayon threads{}",
            rayon::current_num_threads(),
            peak.map_or(String::new(), |p| format!(
                ", measured FP32 peak {p:.1} GFLOP/s"
            ))
        );
        println!("| op | ms | rate | of peak | numpy ms | vs numpy |");
        println!("|---|---:|---:|---:|---:|---:|");
        if let Err(e) = bench(device, peak, &numpy) {
            println!("| failed: {e} | | | | | |");
        }
    }
}
