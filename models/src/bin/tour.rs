//! The README's main job: lists every device brotensor finds, then on each one embeds a few
//! sentences with all-MiniLM-L6-v2 (printing their similarity matrix) and generates text
//! with SmolLM2-135M-Instruct, printing tokens/s and whether each result matched the
//! float64 references in `tests/fixtures/models/`, and trains the digits CNN (its first 20
//! losses against the float64 reference in `tests/fixtures/digits/`; ten epochs to the 97 %
//! bar on the CPU and hardware GPUs), then finds the speech in the committed test speech with
//! Silero VAD (against ONNX Runtime's probabilities and the package's segments) and
//! transcribes it with Whisper tiny.en (against faster-whisper's text), draws faces with the
//! DCGAN and terrain with the diffusion UNet (both against ONNX Runtime's outputs) and reads
//! the two OCR test images with PP-OCRv4 (against the rapidocr package's text), writing the
//! pictures into `tour-out/`. Exits non-zero on a mismatch.
//!
//! `./scripts/tour.sh` (or `cargo run --release -p brotensor-models --bin tour`).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use brotensor::distributed::{thread_group, Communicator};
use brotensor::{Device, Dtype, Tensor};
use brotensor_models::dcgan::{grid, DcGan, LATENT};
use brotensor_models::digits::{Digits, Trainer};
use brotensor_models::minilm::{cosine, MiniLm};
use brotensor_models::ocr::{draw_boxes, load_bgr, Ocr};
use brotensor_models::silero::{speech_segments, SegmentRules, SileroVad};
use brotensor_models::smollm2::{Sampling, Shard, SmolLm2};
use brotensor_models::terrain::{height_map, Terrain, SIDE, SIGMA_MAX};
use brotensor_models::whisper::Whisper;
use brotensor_models::{audio, files};
use serde_json::Value;

/// The path of `name` under `tests/fixtures/` in the working directory (a copied checkout),
/// else in the checkout this binary was built from.
fn fixture_path(name: &str) -> PathBuf {
    let local = PathBuf::from("tests/fixtures").join(name);
    if local.is_file() {
        local
    } else {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(name)
    }
}

/// The little-endian f32 values of a binary fixture.
fn floats_fixture(name: &str) -> anyhow::Result<Vec<f32>> {
    let path = fixture_path(name);
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// The largest |a - b|.
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Where the tour writes its pictures.
const OUT: &str = "tour-out";

/// A reference file: `name` under `tests/fixtures/`.
fn reference(name: &str) -> anyhow::Result<Value> {
    let path = fixture_path(name);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "matches the reference"
    } else {
        "DOES NOT MATCH the reference"
    }
}

/// MiniLM on `device`: embeddings of the reference sentences against the float64 ones.
fn minilm(device: Device, reference: &Value) -> anyhow::Result<bool> {
    let sentences: Vec<&str> = reference["sentences"]
        .as_array()
        .context("sentences")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let model = MiniLm::load(&files::minilm_dir(), device, Dtype::F32)?;
    model.embed(&sentences)?; // warm-up: kernels compile on first use
    let start = Instant::now();
    let emb = model.embed(&sentences)?;
    let secs = start.elapsed().as_secs_f64();
    let mut err = 0f64;
    for (got, want) in emb
        .iter()
        .zip(reference["embeddings"].as_array().context("embeddings")?)
    {
        for (g, w) in got.iter().zip(want.as_array().context("embedding")?) {
            err = err.max((f64::from(*g) - w.as_f64().unwrap_or(f64::NAN)).abs());
        }
    }
    let ok = err <= 1e-4 && emb.len() == sentences.len();
    println!(
        "  MiniLM: {} sentences in {:.1} ms ({:.0} sentences/s); {} (max error {err:.1e})",
        sentences.len(),
        secs * 1e3,
        sentences.len() as f64 / secs,
        verdict(ok)
    );
    for (i, a) in emb.iter().enumerate() {
        let row: Vec<String> = emb
            .iter()
            .map(|b| format!("{:6.3}", cosine(a, b)))
            .collect();
        println!("    {}  {}", row.join(" "), sentences[i]);
    }
    Ok(ok)
}

/// The reference's greedy token ids.
fn greedy_ids(reference: &Value) -> anyhow::Result<Vec<u32>> {
    Ok(reference["greedy"]
        .as_array()
        .context("greedy")?
        .iter()
        .filter_map(|v| v.as_u64().map(|x| x as u32))
        .collect())
}

/// SmolLM2 on `device`: the reference prompt's greedy continuation, then a chat answer.
fn smollm2(device: Device, reference: &Value, software: bool) -> anyhow::Result<bool> {
    let model = SmolLm2::load(&files::smollm2_gguf(), device, Dtype::F32)?;
    let prompt = model.encode(reference["prompt"].as_str().context("prompt")?)?;
    let want = greedy_ids(reference)?;
    let got = model.generate(&prompt, want.len(), &Sampling::greedy(), |_| Ok(()))?;
    let ok = got == want;
    println!(
        "  SmolLM2: {:?} + {:?}: {} ({} greedy tokens)",
        reference["prompt"].as_str().unwrap_or(""),
        model.decode(&got)?,
        verdict(ok),
        want.len()
    );
    let question = "What is the capital of France?";
    let chat = model.encode(&model.chat_prompt(question)?)?;
    let max_tokens = if software { 24 } else { 64 };
    let start = Instant::now();
    let mut first = None;
    let answer = model.generate(&chat, max_tokens, &Sampling::greedy(), |_| {
        first.get_or_insert_with(|| start.elapsed());
        Ok(())
    })?;
    let total = start.elapsed();
    let text_ids = answer.strip_suffix(&[model.eos()]).unwrap_or(&answer);
    let prefill = first.unwrap_or(total);
    let decode = (total - prefill).as_secs_f64().max(1e-9);
    println!(
        "  SmolLM2 chat: {question:?} -> {:?}\n    prefill {} tokens at {:.1} tokens/s, decode {} tokens at {:.1} tokens/s",
        model.decode(text_ids)?.trim(),
        chat.len(),
        chat.len() as f64 / prefill.as_secs_f64(),
        answer.len().saturating_sub(1),
        answer.len().saturating_sub(1) as f64 / decode
    );
    Ok(ok)
}

/// SmolLM2 split over `world` ranks (threads, tensor parallelism) on the CPU: the reference's
/// greedy tokens, as one rank gives them.
fn smollm2_split(reference: &Value, world: usize) -> anyhow::Result<bool> {
    let want = greedy_ids(reference)?;
    let text = reference["prompt"].as_str().context("prompt")?;
    let start = Instant::now();
    let runs: Vec<anyhow::Result<Vec<u32>>> = std::thread::scope(|s| {
        let handles: Vec<_> = thread_group(world)?
            .into_iter()
            .map(|comm| {
                let want = &want;
                s.spawn(move || -> anyhow::Result<Vec<u32>> {
                    let shard = Shard {
                        rank: comm.rank(),
                        world: comm.world_size(),
                    };
                    let model = SmolLm2::load_shard(
                        &files::smollm2_gguf(),
                        Device::Cpu,
                        Dtype::F32,
                        shard,
                    )?;
                    let prompt = model.encode(text)?;
                    model.generate_sharded(&prompt, want.len(), &Sampling::greedy(), &comm)
                })
            })
            .collect();
        anyhow::Ok(
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a rank panicked")))
                })
                .collect(),
        )
    })?;
    let mut ok = true;
    for r in runs {
        ok &= r? == want;
    }
    println!(
        "  SmolLM2 split over {world} ranks (threads, tensor parallel): {} ({} greedy tokens, {:.2} s)",
        verdict(ok),
        want.len(),
        start.elapsed().as_secs_f64()
    );
    Ok(ok)
}

/// The digits CNN on `device`: 20 Adam steps against the float64 losses, then (not on
/// software devices, where a step takes about a second) ten epochs to the accuracy bar.
fn digits(
    device: Device,
    reference: &Value,
    data: &Digits,
    software: bool,
) -> anyhow::Result<bool> {
    let want: Vec<f64> = reference["losses"]
        .as_array()
        .context("losses")?
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    let mut trainer = Trainer::new(device, 3e-3, 64)?;
    let start = Instant::now();
    let mut worst = 0f64;
    for w in &want {
        let got = f64::from(trainer.step(data)?);
        worst = worst.max((got - w).abs() / w.abs());
    }
    let total = if software {
        want.len()
    } else {
        10 * trainer.steps_per_epoch()
    };
    for _ in want.len()..total {
        trainer.step(data)?;
    }
    brotensor::sync(device)?;
    let secs = start.elapsed().as_secs_f64();
    let acc = trainer.net.accuracy(&data.test_x, &data.test_y, device)?;
    let ok = worst <= 2e-5 && want.len() == 20 && (software || acc >= 0.97);
    let bar = if software { "" } else { " (bar 97 %)" };
    println!(
        "  digits CNN: {total} Adam steps at {:.1} steps/s, test accuracy {:.2} %{bar}; first 20 \
         losses within {worst:.1e} of float64: {}",
        total as f64 / secs,
        100.0 * acc,
        verdict(ok)
    );
    Ok(ok)
}

/// Silero VAD on `device`: the test speech's chunk probabilities against ONNX Runtime's and
/// its speech segments against the package's.
fn silero(device: Device, reference: &Value, samples: &[f32]) -> anyhow::Result<bool> {
    let model = SileroVad::load(&files::silero_weights(), device, Dtype::F32)?;
    model.probabilities(&samples[..16_000])?; // warm-up
    let start = Instant::now();
    let probs = model.probabilities(samples)?;
    let secs = start.elapsed().as_secs_f64();
    let want = reference["ort_probs"].as_array().context("ort_probs")?;
    let err = probs
        .iter()
        .zip(want)
        .map(|(&p, w)| (f64::from(p) - w.as_f64().unwrap_or(f64::NAN)).abs())
        .fold(0.0, f64::max);
    let segments = speech_segments(&probs, samples.len(), &SegmentRules::default());
    let want_segments = reference["segments"].as_array().context("segments")?;
    let same = segments.len() == want_segments.len()
        && segments.iter().zip(want_segments).all(|(s, w)| {
            w["start"].as_u64() == Some(s.start as u64) && w["end"].as_u64() == Some(s.end as u64)
        });
    let ok = err <= 1e-4 && probs.len() == want.len() && same;
    let list: Vec<String> = segments
        .iter()
        .map(|s| {
            let (a, b) = s.seconds();
            format!("{a:.2}-{b:.2} s")
        })
        .collect();
    println!(
        "  Silero VAD: {} chunks in {:.1} ms ({:.0}x real time), speech at {}; {} (max error {err:.1e})",
        probs.len(),
        secs * 1e3,
        samples.len() as f64 / 16_000.0 / secs,
        list.join(", "),
        verdict(ok)
    );
    Ok(ok)
}

/// Whisper tiny.en on `device`: the test speech's transcript against faster-whisper's.
fn whisper(device: Device, reference: &Value, samples: &[f32]) -> anyhow::Result<bool> {
    let model = Whisper::load(&files::whisper_dir(), device, Dtype::F32)?;
    let start = Instant::now();
    let segments = model.transcribe(samples, |_, _, _| {})?;
    let secs = start.elapsed().as_secs_f64();
    let text: String = segments.iter().map(|s| s.text.as_str()).collect();
    let ok = text == reference["text"].as_str().unwrap_or("");
    println!(
        "  Whisper tiny.en: {:?}\n    {:.2} s for {:.1} s of audio (real-time factor {:.3}, first call); {}",
        text.trim(),
        secs,
        samples.len() as f64 / 16_000.0,
        secs * 16_000.0 / samples.len() as f64,
        verdict(ok)
    );
    Ok(ok)
}

/// The DCGAN on `device`: the reference latents against ONNX Runtime's faces, then 16 faces
/// of seed 0 written as a PNG grid.
fn faces(device: Device, reference: &Value) -> anyhow::Result<bool> {
    let model = DcGan::load(&files::dcgan_weights(), device, Dtype::F32)?;
    let batch = reference["batch"].as_u64().context("batch")? as usize;
    let z = Tensor::from_slice_nd_on(
        device,
        &floats_fixture("models/dcgan_z.bin")?,
        &[batch, LATENT],
    )?;
    let err = max_diff(
        &model.generate(&z)?.to_vec::<f32>()?,
        &floats_fixture("models/dcgan_faces.bin")?,
    );
    let z = model.noise(16, 0)?;
    model.generate(&z)?; // warm-up
    let start = Instant::now();
    let faces = model.generate(&z)?;
    let secs = start.elapsed().as_secs_f64();
    let path = format!("{OUT}/faces-{}.png", device.to_string().replace(':', ""));
    brotensor::io::image::save_png(&grid(&faces, 8)?, &path)?;
    let ok = err <= 1e-4;
    println!(
        "  DCGAN: 16 faces in {:.1} ms -> {path}; {} (max error {err:.1e})",
        secs * 1e3,
        verdict(ok)
    );
    Ok(ok)
}

/// The terrain UNet on `device`: a reference case against ONNX Runtime (the 128 x 128 one on
/// the CPU and hardware GPUs, the batch of two 64 x 64 maps on software ones), then four maps
/// of seed 0 written as a PNG.
fn terrain(device: Device, reference: &Value, software: bool) -> anyhow::Result<bool> {
    let model = Terrain::load(&files::terrain_weights(), device, Dtype::F32)?;
    let case = &reference[if software { "case_b" } else { "case_a" }];
    let num = |k: &str| -> Vec<f32> {
        case[k].as_array().map_or(Vec::new(), |a| {
            a.iter()
                .filter_map(Value::as_f64)
                .map(|v| v as f32)
                .collect()
        })
    };
    let (b, h, w) = (
        case["batch"].as_u64().unwrap_or(0) as usize,
        case["height"].as_u64().unwrap_or(0) as usize,
        case["width"].as_u64().unwrap_or(0) as usize,
    );
    let noisy = floats_fixture(&format!(
        "models/{}",
        case["files"]["noisy"].as_str().unwrap_or("")
    ))?;
    let want = floats_fixture(&format!(
        "models/{}",
        case["files"]["ort"].as_str().unwrap_or("")
    ))?;
    let x = Tensor::from_slice_nd_on(device, &noisy, &[b, 1, h, w])?;
    let start = Instant::now();
    let got = model
        .denoise(&x, &num("sigma"), &num("difficulty_input"))?
        .to_vec::<f32>()?;
    let secs = start.elapsed().as_secs_f64();
    let err = max_diff(&got, &want);
    let maps = if software { 1 } else { 4 };
    let noise = model.noise(maps, SIDE, 0)?;
    let out = model.denoise(
        &noise,
        &vec![SIGMA_MAX; maps],
        &vec![Terrain::difficulty_input(60)?; maps],
    )?;
    let values = out.to_vec::<f32>()?;
    let mut canvas = Vec::with_capacity(values.len());
    let mut rows = vec![Vec::new(); SIDE];
    for map in values.chunks_exact(SIDE * SIDE) {
        let heights = height_map(map);
        let top = heights.iter().copied().fold(f32::MIN_POSITIVE, f32::max);
        for (y, row) in heights.chunks_exact(SIDE).enumerate() {
            rows[y].extend(row.iter().map(|v| v / top));
        }
    }
    rows.into_iter().for_each(|r| canvas.extend(r));
    let path = format!("{OUT}/terrain-{}.png", device.to_string().replace(':', ""));
    let image = Tensor::from_slice_nd_on(Device::Cpu, &canvas, &[1, SIDE, maps * SIDE])?;
    brotensor::io::image::save_png(&image, &path)?;
    let ok = err <= 1e-4;
    println!(
        "  terrain UNet: {b} x {h} x {w} denoised in {:.1} ms (first call) -> {path}; {} (max error {err:.1e})",
        secs * 1e3,
        verdict(ok)
    );
    Ok(ok)
}

/// PP-OCRv4 on `device`: the test images' text against the rapidocr package's (the photo
/// only on software GPUs, where one image takes over two minutes), each with its boxes drawn
/// written as a PNG.
fn ocr(device: Device, reference: &Value, software: bool) -> anyhow::Result<bool> {
    let model = Ocr::load(&files::ppocr_dir(), device, Dtype::F32)?;
    let mut ok = true;
    let names: &[&str] = if software {
        &["photo"]
    } else {
        &["plain", "photo"]
    };
    for &name in names {
        let image = load_bgr(&fixture_path(&format!("image/ocr_{name}.png")))?;
        let start = Instant::now();
        let (lines, _) = model.read(&image)?;
        let secs = start.elapsed().as_secs_f64();
        let want: Vec<&str> = reference["pipeline"][name]["result"]
            .as_array()
            .context("result")?
            .iter()
            .filter_map(|r| r["text"].as_str())
            .collect();
        let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
        let same = texts == want;
        ok &= same;
        let path = format!(
            "{OUT}/ocr-{name}-{}.png",
            device.to_string().replace(':', "")
        );
        brotensor::io::image::save_png(&draw_boxes(&image, &lines)?, &path)?;
        println!(
            "  PP-OCRv4 ({name}): {} lines in {:.1} ms (first call) -> {path}; {}\n    {}",
            lines.len(),
            secs * 1e3,
            verdict(same),
            texts.join(" | ")
        );
    }
    Ok(ok)
}

fn main() -> anyhow::Result<()> {
    brotensor::init()?;
    files::ensure_models()?;
    let minilm_ref = reference("models/minilm.json")?;
    let smollm2_ref = reference("models/smollm2.json")?;
    let digits_ref = reference("digits/first_steps.json")?;
    let silero_ref = reference("models/silero_reference.json")?;
    let whisper_ref = reference("models/whisper_reference.json")?;
    let dcgan_ref = reference("models/dcgan_reference.json")?;
    let terrain_ref = reference("models/terrain_reference.json")?;
    let ocr_ref = reference("models/ocr_reference.json")?;
    std::fs::create_dir_all(OUT).with_context(|| format!("creating {OUT}/"))?;
    let speech = audio::read_wav_16k(&audio::test_speech_path())?;
    let data = Digits::load(&files::digits_csv())?;
    let devices = brotensor::available_devices();
    println!("brotensor devices:");
    for &d in &devices {
        let soft = brotensor::is_software(d).unwrap_or(false);
        let name = brotensor::device_name(d).unwrap_or_default();
        println!("  {d}: {name}{}", if soft { " (software)" } else { "" });
    }
    let mut all_ok = true;
    for &device in &devices {
        let software = brotensor::is_software(device).unwrap_or(false);
        println!("\n== {device}");
        all_ok &= minilm(device, &minilm_ref)?;
        all_ok &= smollm2(device, &smollm2_ref, software)?;
        all_ok &= digits(device, &digits_ref, &data, software)?;
        all_ok &= silero(device, &silero_ref, &speech)?;
        all_ok &= whisper(device, &whisper_ref, &speech)?;
        all_ok &= faces(device, &dcgan_ref)?;
        all_ok &= terrain(device, &terrain_ref, software)?;
        all_ok &= ocr(device, &ocr_ref, software)?;
    }
    println!("\n== several ranks");
    for world in [2, 3] {
        all_ok &= smollm2_split(&smollm2_ref, world)?;
    }
    if !all_ok {
        anyhow::bail!("a result did not match its reference");
    }
    println!("\nevery result matched its reference");
    Ok(())
}
