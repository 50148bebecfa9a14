//! Voice activity detection with Silero VAD v6: prints the speech segments of a 16 kHz WAV
//! file (start and end in seconds), as the `silero-vad` package's `get_speech_timestamps`
//! finds them with its default rules.
//!
//! `cargo run --release -p brotensor-models --bin vad -- --device wgpu:0 speech.wav`

use std::path::PathBuf;
use std::time::Instant;

use brotensor_models::silero::{speech_segments, SegmentRules, SileroVad, CHUNK};
use brotensor_models::{audio, files, DeviceArgs};
use clap::Parser;

/// Finds the speech in a 16 kHz WAV file with Silero VAD on a brotensor device.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    target: DeviceArgs,
    /// Speech threshold for a 32 ms chunk (the package's default: 0.5).
    #[arg(long, default_value_t = 0.5)]
    threshold: f32,
    /// Also print every chunk's probability.
    #[arg(long)]
    probs: bool,
    /// A 16 kHz WAV file (default: the committed test speech).
    wav: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (device, dtype) = args.target.resolve()?;
    let path = args.wav.unwrap_or_else(audio::test_speech_path);
    let samples = audio::read_wav_16k(&path)?;
    let model = SileroVad::load(&files::silero_weights(), device, dtype)?;
    let start = Instant::now();
    let probs = model.probabilities(&samples)?;
    let secs = start.elapsed().as_secs_f64();
    let rules = SegmentRules {
        threshold: args.threshold,
        neg_threshold: (args.threshold - 0.15).max(0.01),
        ..SegmentRules::default()
    };
    let audio_secs = samples.len() as f64 / f64::from(audio::SAMPLE_RATE);
    println!(
        "{}: {audio_secs:.2} s, {} chunks in {:.1} ms on {device} ({dtype}), {:.0}x real time",
        path.display(),
        probs.len(),
        secs * 1e3,
        audio_secs / secs.max(1e-9)
    );
    if args.probs {
        for (i, p) in probs.iter().enumerate() {
            println!(
                "  {:8.3} s  {p:.4}",
                (i * CHUNK) as f64 / f64::from(audio::SAMPLE_RATE)
            );
        }
    }
    let segments = speech_segments(&probs, samples.len(), &rules);
    if segments.is_empty() {
        println!("no speech found");
    }
    for s in &segments {
        let (a, b) = s.seconds();
        println!("speech {a:7.3} s - {b:7.3} s");
    }
    Ok(())
}
