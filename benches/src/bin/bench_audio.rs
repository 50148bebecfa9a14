//! The audio models on the CPU against their peers, interleaved round by round:
//!
//! - Silero VAD v6 over 60 s of the test speech (1875 chunks of 512 samples), chunks/s with
//!   1 and 2 threads: ours as a file (`SileroVad::probabilities`: the front end batched, the
//!   LSTM as one sequence) and as a stream (`VadStream::push`, one chunk at a time), against
//!   ONNX Runtime streaming the package's ONNX graph (`benches/silero_ort.py`).
//! - Whisper tiny.en on a 30 s clip (the test speech, then its start): seconds for log-mel,
//!   encoder and greedy decoding, and the real-time factor, against faster-whisper on
//!   CTranslate2 in float32 with the same threads (`benches/whisper_ct2.py`), with both texts.
//!
//! Each contender runs in its own process (this binary re-runs itself with `--child`), so the
//! peak resident memory (VmHWM) of each is its own; ours touches only the CPU, so no GPU
//! driver is loaded. The peers need onnxruntime 1.32,
//! ctranslate2 4.8.5 and faster-whisper 1.2.1 on `python3`'s path.
//!
//! With `--features candle`, candle-onnx 0.11 also runs the ONNX graph chunk by chunk (as
//! candle's `silero-vad` example does), once per thread count; its line is printed as a
//! comment under the Silero table.
//!
//! `cargo run --release -p brotensor-benches --bin bench_audio [-- --rounds 3]`

use std::process::Command;
use std::time::Instant;

use brotensor::{Device, Dtype};
use brotensor_models::silero::{SileroVad, CHUNK};
use brotensor_models::whisper::Whisper;
use brotensor_models::{audio, files, in_cpu_pool};
use serde_json::{json, Value};

/// The test speech tiled and cut to `secs` seconds.
fn clip(secs: usize) -> Vec<f32> {
    let speech = audio::read_wav_16k(&audio::test_speech_path()).expect("speech.wav");
    speech.iter().copied().cycle().take(secs * 16_000).collect()
}

/// This process's peak resident memory in MiB (VmHWM).
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Best seconds of `f` over `reps` runs after a warm-up.
fn best_of(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn silero_child() -> Value {
    let samples = clip(60);
    let model = SileroVad::load(&files::silero_weights(), Device::Cpu, Dtype::F32).unwrap();
    let chunks = samples.len() / CHUNK;
    let batch = in_cpu_pool(|| best_of(5, || drop(model.probabilities(&samples).unwrap())));
    let stream = in_cpu_pool(|| {
        best_of(5, || {
            let mut s = model.stream().unwrap();
            for c in samples.chunks_exact(CHUNK) {
                s.push(c).unwrap();
            }
        })
    });
    json!({
        "chunks": chunks,
        "file_chunks_per_s": chunks as f64 / batch,
        "stream_chunks_per_s": chunks as f64 / stream,
        "peak_rss_mib": peak_rss_mib(),
    })
}

/// candle-onnx 0.11 running the package's ONNX graph chunk by chunk, as candle's
/// `silero-vad` example does (built with `--features candle`).
#[cfg(feature = "candle")]
fn silero_candle_child() -> Value {
    use candle_core::{Device as CDevice, Tensor as CTensor};
    use std::collections::HashMap;
    let samples = clip(60);
    let path = files::silero_weights().with_file_name("silero_vad_16k_op15.onnx");
    let model = candle_onnx::read_file(&path).expect("silero onnx");
    let graph = model.graph.as_ref().expect("graph");
    let inputs: Vec<Vec<f32>> = (0..samples.len() / CHUNK)
        .map(|i| {
            let mut x = vec![0f32; 576];
            let start = (i * CHUNK).saturating_sub(64);
            let from = i * CHUNK - start;
            x[64 - from..].copy_from_slice(&samples[start..(i + 1) * CHUNK]);
            x
        })
        .collect();
    let pass = || {
        let mut state =
            CTensor::zeros((2, 1, 128), candle_core::DType::F32, &CDevice::Cpu).unwrap();
        let mut probs = Vec::with_capacity(inputs.len());
        for x in &inputs {
            let mut feed = HashMap::new();
            feed.insert(
                "input".to_string(),
                CTensor::from_slice(x, (1, 576), &CDevice::Cpu).unwrap(),
            );
            feed.insert("state".to_string(), state.clone());
            feed.insert(
                "sr".to_string(),
                CTensor::new(16000i64, &CDevice::Cpu).unwrap(),
            );
            let mut out = candle_onnx::simple_eval(&model, feed).unwrap();
            let name = |i: usize| graph.output[i].name.clone();
            probs.push(
                out.remove(&name(0))
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()[0],
            );
            state = out.remove(&name(1)).unwrap();
        }
        probs
    };
    let ours = SileroVad::load(&files::silero_weights(), Device::Cpu, Dtype::F32).unwrap();
    let want = ours.probabilities(&samples).unwrap();
    let got = pass();
    let diff = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let secs = best_of(2, || drop(pass()));
    json!({
        "chunks": inputs.len(),
        "stream_chunks_per_s": inputs.len() as f64 / secs,
        "max_diff_vs_ours": diff,
        "peak_rss_mib": peak_rss_mib(),
    })
}

fn whisper_child() -> Value {
    let samples = clip(30);
    let model = Whisper::load(&files::whisper_dir(), Device::Cpu, Dtype::F32).unwrap();
    let mut text = String::new();
    let secs = in_cpu_pool(|| {
        best_of(3, || {
            let segments = model.transcribe(&samples, |_, _, _| {}).unwrap();
            text = segments.iter().map(|s| s.text.as_str()).collect();
        })
    });
    json!({
        "seconds": secs,
        "rtf": secs / 30.0,
        "text": text,
        "peak_rss_mib": peak_rss_mib(),
    })
}

/// Runs a child process and parses the JSON object on its last output line.
fn run_json(cmd: &mut Command) -> Option<Value> {
    let out = cmd.output().ok()?;
    if !out.status.success() {
        eprintln!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last()?).ok()
}

fn ours(model: &str, threads: usize) -> Option<Value> {
    let exe = std::env::current_exe().ok()?;
    run_json(
        Command::new(exe)
            .args(["--child", model])
            .env("RAYON_NUM_THREADS", threads.to_string()),
    )
}

fn peer(script: &str, threads: usize, reps: usize) -> Option<Value> {
    let path = format!("{}/{script}", env!("CARGO_MANIFEST_DIR"));
    run_json(Command::new("python3").arg(path).args([
        "--threads".to_string(),
        threads.to_string(),
        "--reps".to_string(),
        reps.to_string(),
    ]))
}

/// The best (largest for rates, smallest for times) of a field over rounds.
fn best(rows: &[Value], key: &str, larger: bool) -> f64 {
    let vals = rows.iter().filter_map(|r| r[key].as_f64());
    if larger {
        vals.fold(f64::NAN, f64::max)
    } else {
        vals.fold(f64::NAN, f64::min)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        // CPU only, as a CPU user's process: no GPU discovery (no Vulkan driver loaded).
        let out = match args.get(i + 1).map(String::as_str) {
            Some("silero") => silero_child(),
            Some("whisper") => whisper_child(),
            #[cfg(feature = "candle")]
            Some("silero-candle") => silero_candle_child(),
            other => panic!("unknown child {other:?}"),
        };
        println!("{out}");
        return;
    }
    let rounds = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(3usize);
    files::ensure_models().expect("model files");
    println!("# bench_audio: CPU F32, {rounds} rounds interleaved, best of each");
    println!("\n## Silero VAD v6, 60 s of speech (1875 chunks)\n");
    println!("| threads | ours, file: chunks/s | ours, stream: chunks/s | ORT stream: chunks/s | file vs ORT | stream vs ORT | ours MiB | ORT MiB |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for threads in [1, 2] {
        let (mut us, mut them) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            us.extend(ours("silero", threads));
            them.extend(peer("silero_ort.py", threads, 5));
        }
        let (file, stream) = (
            best(&us, "file_chunks_per_s", true),
            best(&us, "stream_chunks_per_s", true),
        );
        let ort = best(&them, "chunks_per_s", true);
        #[cfg(feature = "candle")]
        if let Some(c) = ours("silero-candle", threads) {
            println!("<!-- candle-onnx, {threads} threads: {c} -->");
        }
        println!(
            "| {threads} | {file:.0} | {stream:.0} | {ort:.0} | {:.2} | {:.2} | {:.1} | {:.1} |",
            file / ort,
            stream / ort,
            best(&us, "peak_rss_mib", false),
            best(&them, "peak_rss_mib", false)
        );
    }
    println!("\n## Whisper tiny.en, 30 s clip (log-mel + encoder + greedy decoding)\n");
    println!(
        "| threads | ours s | RTF | CTranslate2 s | RTF | vs CTranslate2 | ours MiB | CT2 MiB |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut texts = Vec::new();
    for threads in [1, 2] {
        let (mut us, mut them) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            us.extend(ours("whisper", threads));
            them.extend(peer("whisper_ct2.py", threads, 3));
        }
        let (a, b) = (best(&us, "seconds", false), best(&them, "seconds", false));
        println!(
            "| {threads} | {a:.3} | {:.4} | {b:.3} | {:.4} | {:.2} | {:.1} | {:.1} |",
            a / 30.0,
            b / 30.0,
            b / a,
            best(&us, "peak_rss_mib", false),
            best(&them, "peak_rss_mib", false)
        );
        texts.push((
            us.first()
                .and_then(|v| v["text"].as_str().map(String::from)),
            them.first()
                .and_then(|v| v["text"].as_str().map(String::from)),
        ));
    }
    for (ours, theirs) in texts.iter().take(1) {
        println!(
            "\nours: {}\nCTranslate2: {}",
            ours.as_deref().unwrap_or("-"),
            theirs.as_deref().unwrap_or("-")
        );
        println!("texts identical: {}", ours.is_some() && ours == theirs);
    }
}
