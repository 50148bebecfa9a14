//! Real models written only against brotensor's public API: the examples of how to use the
//! library on a whole network, not special paths inside it.
//!
//! - [`minilm`]: all-MiniLM-L6-v2 sentence embeddings (BERT, 6 layers, hidden 384, 12 heads;
//!   mean pooling and L2 normalisation as sentence-transformers does), F32 safetensors.
//! - [`smollm2`]: SmolLM2-135M-Instruct text generation from its Q4_1 GGUF file (llama
//!   architecture), on the quantized weights as they are, with a KV cache.
//! - [`silero`]: Silero VAD v6, speech probabilities per 32 ms chunk and the speech segments.
//! - [`whisper`]: Whisper tiny.en speech recognition (log-mel, encoder, greedy decoding with
//!   timestamps), as faster-whisper runs it.
//! - [`dcgan`]: a DCGAN drawing 64 x 64 faces from 100-d noise.
//! - [`terrain`]: a diffusion UNet drawing 128 x 128 terrain height maps in one step.
//! - [`ppocr`]: PP-OCRv4's text detector, direction classifier and recogniser;
//!   [`ocr`] runs rapidocr's whole pipeline around them, [`ocr_geometry`] its OpenCV and
//!   Clipper steps (resize, warp, contours, boxes) bit for bit.
//! - [`audio`]: 16 kHz WAV input.
//! - [`tokenizer`]: both tokenizers, built with the Hugging Face `tokenizers` crate.
//! - [`digits`]: a small CNN trained on scikit-learn's 8x8 digits with the tape and Adam.
//! - [`plot`]: the training loss curve as a PNG.
//! - [`files`]: where the model files live, fetched by `scripts/fetch-models.sh`.
//!
//! The binaries `minilm`, `smollm2`, `vad`, `transcribe`, `faces`, `terrain` and `ocr` are the command-line front ends;
//! `tour` runs every model on every device (the README's main job); `train_digits` trains
//! the digits CNN.

pub mod audio;
pub mod dcgan;
pub mod digits;
pub mod files;
pub mod minilm;
pub mod ocr;
pub mod ocr_geometry;
pub mod plot;
pub mod ppocr;
pub mod silero;
pub mod smollm2;
pub mod terrain;
pub mod tokenizer;
pub mod whisper;

use brotensor::{Device, Dtype};

/// Parses a device name as the CLIs take it (`cpu`, `wgpu:N`, `cuda:N`).
pub fn parse_device(name: &str) -> anyhow::Result<Device> {
    name.parse::<Device>()
        .map_err(|e| anyhow::anyhow!("unknown device `{name}`: {e}"))
}

/// Parses a compute dtype name: `f32`, `f16`, `bf16`.
pub fn parse_dtype(name: &str) -> anyhow::Result<Dtype> {
    match name.to_ascii_lowercase().as_str() {
        "f32" => Ok(Dtype::F32),
        "f16" => Ok(Dtype::F16),
        "bf16" => Ok(Dtype::BF16),
        _ => Err(anyhow::anyhow!(
            "unknown dtype `{name}` (expected f32, f16 or bf16)"
        )),
    }
}

/// Runs `f` on a thread of rayon's global pool, the pool brotensor's CPU ops run on.
///
/// Each CPU op is a parallel section; entered from a thread outside the pool, every one
/// costs a hand-over and a wake-up (about 10 us), which for a decode step of ~400 small ops
/// is a large share. Run from inside the pool, the calling thread takes part in the work
/// instead. Harmless for GPU devices.
pub fn in_cpu_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::scope(|_| f())
}

/// The command-line options every model CLI shares.
#[derive(clap::Args, Debug)]
pub struct DeviceArgs {
    /// Device: cpu, wgpu:N or cuda:N (default: the library's default device).
    #[arg(long)]
    pub device: Option<String>,
    /// Compute dtype: f32, f16 or bf16 (16-bit on GPUs only).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
}

impl DeviceArgs {
    /// Initialises brotensor, fetches the model files if they are missing, and returns the
    /// chosen device and dtype.
    pub fn resolve(&self) -> anyhow::Result<(Device, Dtype)> {
        let chosen = self.device_and_dtype()?;
        files::ensure_models()?;
        Ok(chosen)
    }

    /// Initialises brotensor and returns the chosen device and dtype (no files fetched).
    pub fn device_and_dtype(&self) -> anyhow::Result<(Device, Dtype)> {
        brotensor::init()?;
        let device = match &self.device {
            Some(d) => parse_device(d)?,
            None => brotensor::default_device(),
        };
        Ok((device, parse_dtype(&self.dtype)?))
    }
}
