//! The spectral transforms on each selected device (`BROTENSOR_BENCH_DEVICES`), F32:
//! - `fft` and `rfft` of 4 Mi values as rows of 256, 400, 1000, 1009 (prime), 1024, 4096 and
//!   65536, as GFLOP/s of the nominal `5 n log2 n` (half for rfft) per row; on the CPU against
//!   raw rustfft / realfft on all cores in place (paired, interleaved batches), scipy.fft
//!   with workers=2 and numpy.fft (`benches/fft_scipy.py`, run once before our rows).
//! - `stft` of 8 signals of 480000 samples (n_fft 400, hop 160, periodic Hann, centred: the
//!   Whisper front end) against scipy's `ShortTimeFFT.stft`.
//!
//! `cargo run --release -p brotensor-benches --bin bench_fft`

use std::collections::HashMap;

use brotensor::{ops, Device, Tensor};
use brotensor_benches::{best_secs, best_secs_paired, lcg_values, selected_devices};
use num_complex::Complex32;
use rayon::prelude::*;

const TOTAL: usize = 1 << 22;
const LENS: [usize; 7] = [256, 400, 1000, 1009, 1024, 4096, 65536];
const SIGNALS: usize = 8;
const SAMPLES: usize = 480_000;

/// The peers' best milliseconds per row name (`benches/fft_scipy.py`).
fn peer_ms() -> HashMap<String, f64> {
    let mut args = vec![TOTAL.to_string()];
    args.extend(LENS.iter().map(|n| n.to_string()));
    brotensor_benches::python_peer_ms("fft_scipy.py", &args)
}

/// Raw rustfft on all cores: rows in place over rayon with per-job scratch.
fn raw_fft(buf: &mut [Complex32], n: usize) {
    let plan = rustfft::FftPlanner::<f32>::new().plan_fft_forward(n);
    let job = (16384 / n).max(1) * n;
    buf.par_chunks_mut(job).for_each_init(
        || vec![Complex32::default(); plan.get_inplace_scratch_len()],
        |scratch, rows| plan.process_with_scratch(rows, scratch),
    );
}

/// Raw realfft on all cores: rows over rayon into their half spectra.
fn raw_rfft(x: &mut [f32], y: &mut [Complex32], n: usize) {
    let plan = realfft::RealFftPlanner::<f32>::new().plan_fft_forward(n);
    let rows = (16384 / n).max(1);
    x.par_chunks_mut(rows * n)
        .zip(y.par_chunks_mut(rows * (n / 2 + 1)))
        .for_each_init(
            || plan.make_scratch_vec(),
            |scratch, (x, y)| {
                for (x, y) in x.chunks_exact_mut(n).zip(y.chunks_exact_mut(n / 2 + 1)) {
                    plan.process_with_scratch(x, y, scratch)
                        .expect("plan lengths");
                }
            },
        );
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

#[allow(clippy::too_many_arguments)]
fn row(
    op: &str,
    n: usize,
    ms: f64,
    flop: f64,
    raw: Option<f64>,
    scipy: Option<f64>,
    numpy: Option<f64>,
) {
    let ratio = |peer: Option<f64>| peer.map_or("-".into(), |p| format!("{:.2}x", p / ms));
    println!(
        "| {op} {n} | {ms:.2} | {:.1} | {} | {} | {} | {} | {} |",
        flop / ms / 1e6,
        fmt_opt(raw),
        ratio(raw),
        fmt_opt(scipy),
        ratio(scipy),
        fmt_opt(numpy)
    );
}

fn bench(device: Device, peers: &HashMap<String, f64>) -> brotensor::Result<()> {
    let cpu = device == Device::Cpu;
    for n in LENS {
        let rows = TOTAL / n;
        let flop = 5.0 * (rows * n) as f64 * (n as f64).log2();
        let z = lcg_values(2 * rows * n, n as u64);
        let zt = Tensor::from_slice_on(device, &z, rows, 2 * n)?;
        let mut y = Tensor::default();
        ops::fft(&zt, &mut y)?;
        let (ms, raw) = if cpu {
            let mut buf: Vec<Complex32> = bytemuck::cast_slice(&z).to_vec();
            let (ours, raw) = best_secs_paired(
                device,
                3,
                || ops::fft(&zt, &mut y).expect("fft"),
                || raw_fft(&mut buf, n),
            );
            (ours * 1e3, Some(raw * 1e3))
        } else {
            (
                best_secs(device, 3, || ops::fft(&zt, &mut y).expect("fft")) * 1e3,
                None,
            )
        };
        let p = |k: &str| peers.get(&format!("{k} fft {n}")).copied();
        row("fft", n, ms, flop, raw, p("scipy"), p("numpy"));

        let x = lcg_values(rows * n, n as u64 + 1);
        let xt = Tensor::from_slice_on(device, &x, rows, n)?;
        ops::rfft(&xt, &mut y)?;
        let (ms, raw) = if cpu {
            let mut xb = x.clone();
            let mut yb = vec![Complex32::default(); rows * (n / 2 + 1)];
            let (ours, raw) = best_secs_paired(
                device,
                3,
                || ops::rfft(&xt, &mut y).expect("rfft"),
                || raw_rfft(&mut xb, &mut yb, n),
            );
            (ours * 1e3, Some(raw * 1e3))
        } else {
            (
                best_secs(device, 3, || ops::rfft(&xt, &mut y).expect("rfft")) * 1e3,
                None,
            )
        };
        let p = |k: &str| peers.get(&format!("{k} rfft {n}")).copied();
        row("rfft", n, ms, flop / 2.0, raw, p("scipy"), p("numpy"));
    }
    let sig = Tensor::from_slice_on(device, &lcg_values(SIGNALS * SAMPLES, 7), SIGNALS, SAMPLES)?;
    let window = ops::hann_window(400, true)?.to(device)?;
    let spec = ops::StftSpec::new(400, 160);
    let mut out = Tensor::default();
    ops::stft(&sig, &window, &spec, &mut out)?;
    let ms = best_secs(device, 2, || {
        ops::stft(&sig, &window, &spec, &mut out).expect("stft")
    }) * 1e3;
    let frames = spec.frames(SAMPLES)? * SIGNALS;
    let flop = 2.5 * (frames * 400) as f64 * 400f64.log2();
    row(
        "stft 8 x 480000, n_fft",
        400,
        ms,
        flop,
        None,
        peers.get("scipy stft").copied(),
        None,
    );
    Ok(())
}

fn main() {
    let devices = selected_devices();
    let peers = if devices.contains(&Device::Cpu) {
        peer_ms()
    } else {
        HashMap::new()
    };
    for device in devices {
        let name = brotensor::device_name(device).unwrap_or_else(|_| device.to_string());
        println!(
            "\n# bench_fft on {name}: {} rayon threads, 4 Mi values per transform size",
            rayon::current_num_threads()
        );
        println!("| op, length | ms | GFLOP/s | raw rustfft ms | vs raw | scipy ms | vs scipy | numpy ms |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|");
        if let Err(e) = bench(device, &peers) {
            println!("| failed: {e} | | | | | | | |");
        }
    }
}
