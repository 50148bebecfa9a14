//! The image models of issue 31 on the CPU against ONNX Runtime, interleaved round by round,
//! each contender in its own process (this binary re-runs itself with `--child`), so the
//! peak resident memory (VmHWM) of each is its own:
//!
//! - the DCGAN generator on a batch of 64 latent vectors;
//! - one evaluation of the terrain UNet at 1 x 1 x 128 x 128;
//! - the PP-OCRv4 detector at 1 x 3 x 640 x 640 and the recogniser at 1 x 3 x 48 x 320.
//!
//! The peer is `benches/vision_ort.py` (onnxruntime 1.32, the same thread count, the
//! package's graphs; the DCGAN as a graph built from the same checkpoint). Seconds are the
//! best of 5 runs after a warm-up, then the best over rounds.
//!
//! `cargo run --release -p brotensor-benches --bin bench_vision [-- --rounds 3 --threads 2]`

use std::process::Command;
use std::time::Instant;

use brotensor::{Device, Dtype, Tensor};
use brotensor_models::dcgan::{DcGan, LATENT};
use brotensor_models::ppocr::{Detector, Recognizer};
use brotensor_models::terrain::{Terrain, SIDE, SIGMA_MAX};
use brotensor_models::{files, in_cpu_pool};
use serde_json::{json, Value};

/// The workloads: (name, what it is).
const WORKLOADS: [(&str, &str); 4] = [
    ("dcgan", "DCGAN generator, batch 64"),
    ("terrain", "terrain UNet, 1x1x128x128"),
    ("ocr-det", "PP-OCRv4 detector, 1x3x640x640"),
    ("ocr-rec", "PP-OCRv4 recogniser, 1x3x48x320"),
];

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

/// Normals from brotensor's generator, `[dims]` on the CPU.
fn normals(dims: &[usize], seed: u64) -> Tensor {
    let mut t = Tensor::zeros_nd_on(Device::Cpu, dims, Dtype::F32).unwrap();
    brotensor::ops::randn(seed, 0, &mut t).unwrap();
    t
}

fn child(name: &str) -> Value {
    let cpu = Device::Cpu;
    let secs = match name {
        "dcgan" => {
            let model = DcGan::load(&files::dcgan_weights(), cpu, Dtype::F32).unwrap();
            let z = normals(&[64, LATENT], 0);
            in_cpu_pool(|| best_of(5, || drop(model.generate(&z).unwrap())))
        }
        "terrain" => {
            let model = Terrain::load(&files::terrain_weights(), cpu, Dtype::F32).unwrap();
            let mut x = normals(&[1, 1, SIDE, SIDE], 0);
            x.mul_scalar_(SIGMA_MAX).unwrap();
            in_cpu_pool(|| best_of(5, || drop(model.denoise(&x, &[SIGMA_MAX], &[0.5]).unwrap())))
        }
        "ocr-det" => {
            let path = files::ppocr_dir().join("det.safetensors");
            let model = Detector::load(&path, cpu, Dtype::F32).unwrap();
            let x = normals(&[1, 3, 640, 640], 0);
            in_cpu_pool(|| best_of(5, || drop(model.forward(&x).unwrap())))
        }
        "ocr-rec" => {
            let path = files::ppocr_dir().join("rec.safetensors");
            let model = Recognizer::load(&path, cpu, Dtype::F32).unwrap();
            let x = normals(&[1, 3, 48, 320], 0);
            in_cpu_pool(|| best_of(5, || drop(model.forward(&x).unwrap())))
        }
        other => panic!("unknown child {other:?}"),
    };
    json!({"seconds": secs, "peak_rss_mib": peak_rss_mib()})
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

/// The smallest of a field over rounds.
fn least(rows: &[Value], key: &str) -> f64 {
    rows.iter()
        .filter_map(|r| r[key].as_f64())
        .fold(f64::NAN, f64::min)
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        // CPU only, as a CPU user's process: no GPU discovery (no Vulkan driver loaded).
        println!("{}", child(args.get(i + 1).map_or("", String::as_str)));
        return;
    }
    let (rounds, threads) = (arg(&args, "--rounds", 3), arg(&args, "--threads", 2));
    files::ensure_models().expect("model files");
    let exe = std::env::current_exe().expect("this binary");
    let script = format!("{}/vision_ort.py", env!("CARGO_MANIFEST_DIR"));
    println!(
        "# bench_vision: CPU F32, {threads} threads, {rounds} rounds interleaved, best of each\n"
    );
    println!("| model | ours ms | ONNX Runtime ms | vs ORT | ours MiB | ORT MiB |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, what) in WORKLOADS {
        let (mut us, mut them) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            us.extend(run_json(
                Command::new(&exe)
                    .args(["--child", name])
                    .env("RAYON_NUM_THREADS", threads.to_string()),
            ));
            them.extend(run_json(Command::new("python3").args([
                script.as_str(),
                name,
                "--threads",
                &threads.to_string(),
            ])));
        }
        let (a, b) = (least(&us, "seconds"), least(&them, "seconds"));
        println!(
            "| {what} | {:.1} | {:.1} | {:.2} | {:.0} | {:.0} |",
            a * 1e3,
            b * 1e3,
            b / a,
            least(&us, "peak_rss_mib"),
            least(&them, "peak_rss_mib")
        );
    }
}
