//! Speech to text with Whisper tiny.en: prints each segment with its times, then the
//! real-time factor (seconds of compute per second of audio). Decoding is greedy with
//! timestamps, as faster-whisper's `beam_size=1, temperature=0`.
//!
//! `cargo run --release -p brotensor-models --bin transcribe -- --device wgpu:0 speech.wav`

use std::path::PathBuf;
use std::time::Instant;

use brotensor_models::whisper::Whisper;
use brotensor_models::{audio, files, DeviceArgs};
use clap::Parser;

/// Transcribes a 16 kHz WAV file with Whisper tiny.en on a brotensor device.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    target: DeviceArgs,
    /// A 16 kHz WAV file (default: the committed test speech).
    wav: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (device, dtype) = args.target.resolve()?;
    let path = args.wav.unwrap_or_else(audio::test_speech_path);
    let samples = audio::read_wav_16k(&path)?;
    let model = Whisper::load(&files::whisper_dir(), device, dtype)?;
    let audio_secs = samples.len() as f64 / f64::from(audio::SAMPLE_RATE);
    eprintln!(
        "{}: {audio_secs:.2} s of audio on {device} ({dtype})",
        path.display()
    );
    let start = Instant::now();
    let segments = model.transcribe(&samples, |frame, frames, _| {
        eprintln!(
            "  window at {:.2} s of {:.2} s encoded",
            frame as f64 * 0.01,
            frames as f64 * 0.01
        );
    })?;
    let secs = start.elapsed().as_secs_f64();
    for s in &segments {
        println!("[{:6.2} s -> {:6.2} s]{}", s.start, s.end, s.text);
    }
    println!(
        "{:.2} s for {audio_secs:.2} s of audio: real-time factor {:.3} ({:.1}x faster than real time)",
        secs,
        secs / audio_secs,
        audio_secs / secs.max(1e-9)
    );
    Ok(())
}
