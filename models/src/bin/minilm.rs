//! Sentence embeddings with all-MiniLM-L6-v2: prints each sentence's embedding norm and
//! first values, then the cosine-similarity matrix.
//!
//! `cargo run --release -p brotensor-models --bin minilm -- --device wgpu:0 "A cat." "A dog."`

use std::time::Instant;

use brotensor_models::{files, minilm::{cosine, MiniLm}, parse_device, parse_dtype};
use clap::Parser;

/// Embeds sentences with all-MiniLM-L6-v2 on a brotensor device.
#[derive(Parser)]
struct Args {
    /// Device: cpu, wgpu:N or cuda:N (default: the library's default device).
    #[arg(long)]
    device: Option<String>,
    /// Compute dtype: f32, f16 or bf16 (16-bit on GPUs only).
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// The sentences (a few examples when none are given).
    sentences: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    brotensor::init()?;
    let device = match &args.device {
        Some(d) => parse_device(d)?,
        None => brotensor::default_device(),
    };
    let dtype = parse_dtype(&args.dtype)?;
    files::ensure_models()?;
    let model = MiniLm::load(&files::minilm_dir(), device, dtype)?;
    let sentences: Vec<String> = if args.sentences.is_empty() {
        ["The cat sits on the mat.", "A cat is sitting on a rug.", "Stock markets fell sharply today."]
            .map(String::from)
            .to_vec()
    } else {
        args.sentences
    };
    let refs: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let t = Instant::now();
    let emb = model.embed(&refs)?;
    let secs = t.elapsed().as_secs_f64();
    println!("all-MiniLM-L6-v2 on {device} ({dtype}): {} sentences in {:.1} ms", refs.len(), secs * 1e3);
    for (s, e) in refs.iter().zip(&emb) {
        println!("  [{:+.4}, {:+.4}, {:+.4}, ...] {s}", e[0], e[1], e[2]);
    }
    println!("cosine similarity:");
    for a in &emb {
        let row: Vec<String> = emb.iter().map(|b| format!("{:6.3}", cosine(a, b))).collect();
        println!("  {}", row.join(" "));
    }
    Ok(())
}
