//! Sentence embeddings with all-MiniLM-L6-v2: prints each sentence's embedding norm and
//! first values, then the cosine-similarity matrix.
//!
//! `cargo run --release -p brotensor-models --bin minilm -- --device wgpu:0 "A cat." "A dog."`

use std::time::Instant;

use brotensor_models::minilm::{cosine, MiniLm};
use brotensor_models::{files, DeviceArgs};
use clap::Parser;

/// Embeds sentences with all-MiniLM-L6-v2 on a brotensor device.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    target: DeviceArgs,
    /// The sentences (a few examples when none are given).
    sentences: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (device, dtype) = args.target.resolve()?;
    let model = MiniLm::load(&files::minilm_dir(), device, dtype)?;
    let sentences: Vec<String> = if args.sentences.is_empty() {
        [
            "The cat sits on the mat.",
            "A cat is sitting on a rug.",
            "Stock markets fell sharply today.",
        ]
        .map(String::from)
        .to_vec()
    } else {
        args.sentences
    };
    let refs: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let t = Instant::now();
    let emb = model.embed(&refs)?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "all-MiniLM-L6-v2 on {device} ({dtype}): {} sentences in {:.1} ms",
        refs.len(),
        secs * 1e3
    );
    for (s, e) in refs.iter().zip(&emb) {
        println!("  [{:+.4}, {:+.4}, {:+.4}, ...] {s}", e[0], e[1], e[2]);
    }
    println!("cosine similarity:");
    for a in &emb {
        let row: Vec<String> = emb
            .iter()
            .map(|b| format!("{:6.3}", cosine(a, b)))
            .collect();
        println!("  {}", row.join(" "));
    }
    Ok(())
}
