//! The real models' speed: SmolLM2 prefill (5 and 128 tokens) and greedy decode tokens/s,
//! MiniLM sentences/s at batch 1 and 32 (tokenization included). One implementation per
//! run, printed as one JSON line, so `benches/bench_models.py` can interleave brotensor,
//! candle-transformers (`--features candle`) and llama.cpp round by round.
//!
//! `bench_models smollm2 brotensor|candle [--device D] [--profile]`
//! `bench_models minilm brotensor|candle [--device D]`

use std::time::Instant;

use brotensor::{Device, Dtype};
use brotensor_models::minilm::MiniLm;
use brotensor_models::smollm2::{OpTimes, Sampling, SmolLm2};
use brotensor_models::{files, parse_device};

/// Greedy decode steps timed.
const DECODE: usize = 64;
/// The prompts: 5 tokens, and the first 128 tokens of this text.
const SHORT: &str = "The capital of France is";
const LONG: &str =
    "The history of the city begins with a small settlement on an island in the river, \
where fishermen and traders built wooden houses and a modest temple. Over the centuries the \
settlement grew into a market town, then into the seat of kings who raised walls, bridges, \
churches and palaces. Scholars came to its schools, merchants to its fairs, and artists to its \
workshops, so that by the end of the middle ages it was one of the largest cities of the \
continent. Revolutions, wars and rebuilding shaped its streets in the following centuries, and \
the wide avenues, parks and railway stations of the modern city date from that time of change. \
Today millions of visitors walk along its quays every year.";

/// Sentences for the MiniLM batches.
fn sentences(n: usize) -> Vec<String> {
    let subjects = [
        "The cat",
        "A young engineer",
        "The old bridge",
        "Our team",
        "The market",
    ];
    let verbs = ["watches", "builds", "crosses", "reviews", "opens"];
    let objects = [
        "the river at dawn.",
        "a new prototype.",
        "the quiet valley.",
        "every report twice.",
        "before sunrise.",
    ];
    (0..n)
        .map(|i| {
            format!(
                "{} {} {}",
                subjects[i % 5],
                verbs[(i / 5) % 5],
                objects[(i / 25 + i) % 5]
            )
        })
        .collect()
}

fn best<T>(reps: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut out = f();
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t = Instant::now();
        out = f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    (best, out)
}

fn smollm2_brotensor(device: Device, profile: bool) -> anyhow::Result<String> {
    let model = SmolLm2::load(&files::smollm2_gguf(), device, Dtype::F32)?;
    let short = model.encode(SHORT)?;
    let mut long = model.encode(LONG)?;
    anyhow::ensure!(
        long.len() >= 128,
        "the long prompt has only {} tokens",
        long.len()
    );
    long.truncate(128);
    let prefill = |ids: &[u32]| -> anyhow::Result<()> {
        let mut cache = model.new_cache(ids.len())?;
        model.forward(ids, &mut cache)?;
        brotensor::sync(device)?;
        Ok(())
    };
    let (p5, r) = best(5, || prefill(&short));
    r?;
    let (p128, r) = best(3, || prefill(&long));
    r?;
    // Decode: the prompt, then DECODE greedy steps (each reads its token back); the best of
    // three runs.
    let mut decode_secs = f64::INFINITY;
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let mut cache = model.new_cache(short.len() + DECODE + 1)?;
        let mut logits = model.forward(&short, &mut cache)?;
        let mut out = Vec::with_capacity(DECODE);
        let start = Instant::now();
        for step in 0..DECODE {
            let id = model.pick(&logits, &Sampling::greedy(), step as u64)?;
            out.push(id);
            logits = model.forward(&[id], &mut cache)?;
        }
        decode_secs = decode_secs.min(start.elapsed().as_secs_f64());
        tokens = out;
    }
    let mut line = format!(
        "{{\"impl\":\"brotensor\",\"device\":\"{device}\",\"prefill5\":{:.2},\"prefill128\":{:.2},\"decode\":{:.2},\"tokens\":{:?},\"short_ids\":{:?},\"long_ids\":{:?}",
        short.len() as f64 / p5,
        128.0 / p128,
        DECODE as f64 / decode_secs,
        tokens,
        short,
        long
    );
    if profile {
        let mut times = OpTimes::default();
        let mut cache = model.new_cache(short.len() + 33)?;
        let mut logits = model.forward(&short, &mut cache)?;
        for step in 0..32 {
            let id = model.pick(&logits, &Sampling::greedy(), step)?;
            logits = model.forward_timed(&[id], &mut cache, &mut times)?;
        }
        let total = times.total().as_secs_f64();
        let parts: Vec<String> = times
            .by_op
            .iter()
            .map(|(k, (d, n))| format!("\"{k}\":[{:.1},{n}]", d.as_secs_f64() / 32.0 * 1e6))
            .collect();
        line += &format!(
            ",\"profile_us_per_token\":{{{}}},\"profile_total_us\":{:.1}",
            parts.join(","),
            total / 32.0 * 1e6
        );
    }
    Ok(line + "}")
}

fn minilm_brotensor(device: Device) -> anyhow::Result<String> {
    let model = MiniLm::load(&files::minilm_dir(), device, Dtype::F32)?;
    let all = sentences(32);
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let (b1, r) = best(20, || -> anyhow::Result<()> {
        for s in &refs[..8] {
            model.embed(&[s])?;
        }
        Ok(())
    });
    r?;
    let (b32, r) = best(5, || model.embed(&refs));
    r?;
    Ok(format!(
        "{{\"impl\":\"brotensor\",\"device\":\"{device}\",\"batch1\":{:.1},\"batch32\":{:.1}}}",
        8.0 / b1,
        32.0 / b32
    ))
}

#[cfg(feature = "candle")]
mod peer {
    //! candle-transformers' `quantized_llama` and `bert` on the same files, CPU.
    use super::*;
    use candle_core::quantized::gguf_file;
    use candle_core::{DType, Device as CDevice, IndexOp, Tensor as CTensor, D};
    use candle_nn::VarBuilder;
    use candle_transformers::models::{bert, quantized_llama};

    pub fn smollm2() -> anyhow::Result<String> {
        let dev = CDevice::Cpu;
        let path = files::smollm2_gguf();
        let load = || -> anyhow::Result<quantized_llama::ModelWeights> {
            let mut file = std::fs::File::open(&path)?;
            let content = gguf_file::Content::read(&mut file)?;
            Ok(quantized_llama::ModelWeights::from_gguf(
                content, &mut file, &dev,
            )?)
        };
        // The same token ids as brotensor's (our tokenizer matches llama.cpp's).
        let gguf = brotensor::io::gguf::GgufFile::open(&path)?;
        let tok = brotensor_models::tokenizer::from_gguf(&gguf)?;
        let short = brotensor_models::tokenizer::encode(&tok, SHORT, false)?;
        let mut long = brotensor_models::tokenizer::encode(&tok, LONG, false)?;
        long.truncate(128);
        let mut model = load()?;
        let mut prefill = |ids: &[u32]| -> anyhow::Result<CTensor> {
            // A fresh model per prompt: its KV cache has no reset.
            model = load()?;
            let input = CTensor::new(ids, &dev)?.unsqueeze(0)?;
            Ok(model.forward(&input, 0)?)
        };
        let (p5, r) = best(3, || prefill(&short).map(|_| ()));
        r?;
        let (p128, r) = best(2, || prefill(&long).map(|_| ()));
        r?;
        let mut best_decode = f64::INFINITY;
        let mut tokens = Vec::new();
        for _ in 0..2 {
            let mut model = load()?;
            let input = CTensor::new(short.as_slice(), &dev)?.unsqueeze(0)?;
            let mut logits = model.forward(&input, 0)?;
            let mut out = Vec::with_capacity(DECODE);
            let start = Instant::now();
            for step in 0..DECODE {
                let id = logits.i(0)?.argmax(D::Minus1)?.to_scalar::<u32>()?;
                out.push(id);
                let input = CTensor::new(&[id], &dev)?.unsqueeze(0)?;
                logits = model.forward(&input, short.len() + step)?;
            }
            best_decode = best_decode.min(start.elapsed().as_secs_f64());
            tokens = out;
        }
        Ok(format!(
            "{{\"impl\":\"candle\",\"device\":\"cpu\",\"prefill5\":{:.2},\"prefill128\":{:.2},\"decode\":{:.2},\"tokens\":{:?}}}",
            short.len() as f64 / p5,
            128.0 / p128,
            DECODE as f64 / best_decode,
            tokens
        ))
    }

    pub fn minilm() -> anyhow::Result<String> {
        let dev = CDevice::Cpu;
        let dir = files::minilm_dir();
        let config: bert::Config =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json"))?)?;
        // SAFETY: the file is the fetched model, not modified while mapped.
        let vb = unsafe {
            VarBuilder::from_mmaped_safetensors(&[dir.join("model.safetensors")], DType::F32, &dev)?
        };
        let model = bert::BertModel::load(vb, &config)?;
        let mut tok = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        tok.with_padding(Some(tokenizers::PaddingParams::default()));
        let embed = |batch: &[&str]| -> anyhow::Result<CTensor> {
            let enc = tok
                .encode_batch(batch.to_vec(), true)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let ids: Vec<Vec<u32>> = enc.iter().map(|e| e.get_ids().to_vec()).collect();
            let mask: Vec<Vec<u32>> = enc
                .iter()
                .map(|e| e.get_attention_mask().to_vec())
                .collect();
            let ids = CTensor::new(ids, &dev)?;
            let mask = CTensor::new(mask, &dev)?;
            let types = ids.zeros_like()?;
            let h = model.forward(&ids, &types, Some(&mask))?;
            let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let sum = h.broadcast_mul(&m)?.sum(1)?;
            let mean = sum.broadcast_div(&m.sum(1)?)?;
            let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?;
            Ok(mean.broadcast_div(&norm)?)
        };
        let all = sentences(32);
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        let (b1, r) = best(20, || -> anyhow::Result<()> {
            for s in &refs[..8] {
                embed(&[s])?;
            }
            Ok(())
        });
        r?;
        let (b32, r) = best(5, || embed(&refs).map(|_| ()));
        r?;
        Ok(format!(
            "{{\"impl\":\"candle\",\"device\":\"cpu\",\"batch1\":{:.1},\"batch32\":{:.1}}}",
            8.0 / b1,
            32.0 / b32
        ))
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let model = args.first().map(String::as_str).unwrap_or("smollm2");
    let which = args.get(1).map(String::as_str).unwrap_or("brotensor");
    let device = match args.iter().position(|a| a == "--device") {
        Some(i) => parse_device(args.get(i + 1).map(String::as_str).unwrap_or("cpu"))?,
        None => Device::Cpu,
    };
    let profile = args.iter().any(|a| a == "--profile");
    if model == "tier" {
        // The CPU tier the ops run (BROTENSOR_CPU_TIER caps it), for the driver script.
        println!("{{\"tier\":\"{}\"}}", brotensor::cpu_tier()?);
        return Ok(());
    }
    brotensor::init()?;
    files::ensure_models()?;
    // The same thread as `SmolLm2::generate` uses: one of the CPU pool's.
    let line = brotensor_models::in_cpu_pool(|| -> anyhow::Result<String> {
        Ok(match (model, which) {
        ("smollm2", "brotensor") => smollm2_brotensor(device, profile)?,
        ("minilm", "brotensor") => minilm_brotensor(device)?,
        #[cfg(feature = "candle")]
        ("smollm2", "candle") => peer::smollm2()?,
        #[cfg(feature = "candle")]
        ("minilm", "candle") => peer::minilm()?,
        _ => anyhow::bail!("usage: bench_models smollm2|minilm brotensor|candle [--device D] [--profile], or bench_models tier (candle needs --features candle)"),
        })
    })?;
    println!("{line}");
    Ok(())
}
