//! Text generation with SmolLM2-135M-Instruct (Q4_1 GGUF, run quantized): prints the answer
//! as it is generated, then prefill and decode tokens/s.
//!
//! `cargo run --release -p brotensor-models --bin smollm2 -- --device cpu "What is the capital of France?"`
//!
//! `--ranks N` splits the model over N ranks (threads of this process, all on the device;
//! tensor parallelism over `brotensor::distributed`) and prints the answer at the end.

use std::io::Write;
use std::time::Instant;

use brotensor::distributed::{thread_group, Communicator};
use brotensor_models::smollm2::{Sampling, Shard, SmolLm2};
use brotensor_models::{files, DeviceArgs};
use clap::Parser;

/// Generates text with SmolLM2-135M-Instruct on a brotensor device.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    target: DeviceArgs,
    /// Tokens to generate at most.
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Keep the k most likely tokens when sampling (0: all).
    #[arg(long, default_value_t = 0)]
    top_k: i32,
    /// Keep the smallest set reaching this probability when sampling.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Sampling seed (equal seeds give equal tokens on every device).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Split the model over this many ranks (tensor parallelism; 1 to the 3 KV heads).
    #[arg(long, default_value_t = 1)]
    ranks: usize,
    /// Use the prompt as raw text instead of wrapping it in the chat template.
    #[arg(long)]
    raw: bool,
    /// The prompt.
    #[arg(default_value = "What is the capital of France?")]
    prompt: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (device, dtype) = args.target.resolve()?;
    if args.ranks > 1 {
        return sharded(&args, device, dtype);
    }
    let model = SmolLm2::load(&files::smollm2_gguf(), device, dtype)?;
    let text = if args.raw {
        args.prompt.clone()
    } else {
        model.chat_prompt(&args.prompt)?
    };
    let prompt = model.encode(&text)?;
    let sampling = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
    };
    eprintln!(
        "SmolLM2-135M-Instruct on {device} ({dtype}), {} prompt tokens",
        prompt.len()
    );
    let mut out = Vec::new();
    let mut shown = String::new();
    let mut first = None;
    let start = Instant::now();
    let tokens = model.generate(&prompt, args.max_tokens, &sampling, |id| {
        first.get_or_insert_with(|| start.elapsed());
        out.push(id);
        let now = model.decode(&out)?;
        if let Some(new) = now.strip_prefix(shown.as_str()) {
            print!("{new}");
            std::io::stdout().flush()?;
        }
        shown = now;
        Ok(())
    })?;
    let total = start.elapsed();
    println!();
    let prefill = first.unwrap_or(total);
    let decode = total.saturating_sub(prefill).as_secs_f64();
    eprintln!(
        "prefill {} tokens: {:.1} tokens/s; decode {} tokens: {:.1} tokens/s",
        prompt.len(),
        prompt.len() as f64 / prefill.as_secs_f64(),
        tokens.len().saturating_sub(1),
        tokens.len().saturating_sub(1) as f64 / decode.max(1e-9),
    );
    Ok(())
}

/// The model split over `args.ranks` thread ranks; rank 0 prints the answer.
fn sharded(args: &Args, device: brotensor::Device, dtype: brotensor::Dtype) -> anyhow::Result<()> {
    let sampling = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
    };
    let ranks = thread_group(args.ranks)?;
    let start = Instant::now();
    let results: Vec<anyhow::Result<Option<String>>> = std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .into_iter()
            .map(|comm| {
                let sampling = &sampling;
                s.spawn(move || -> anyhow::Result<Option<String>> {
                    let shard = Shard {
                        rank: comm.rank(),
                        world: comm.world_size(),
                    };
                    let model = SmolLm2::load_shard(&files::smollm2_gguf(), device, dtype, shard)?;
                    let text = if args.raw {
                        args.prompt.clone()
                    } else {
                        model.chat_prompt(&args.prompt)?
                    };
                    let prompt = model.encode(&text)?;
                    let tokens =
                        model.generate_sharded(&prompt, args.max_tokens, sampling, &comm)?;
                    (comm.rank() == 0)
                        .then(|| model.decode(&tokens))
                        .transpose()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a rank panicked")))
            })
            .collect()
    });
    for r in results {
        if let Some(text) = r? {
            println!("{text}");
        }
    }
    eprintln!(
        "SmolLM2-135M-Instruct split over {} ranks on {device} ({dtype}): {:.2} s in all",
        args.ranks,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
