//! Audio input for the speech models: 16 kHz mono samples from WAV files (read with the
//! `hound` crate) as `f32` in `[-1, 1]`.

use std::path::Path;

use anyhow::{bail, Context};

/// The sample rate both speech models take.
pub const SAMPLE_RATE: u32 = 16_000;

/// Reads a WAV file as 16 kHz mono samples in `[-1, 1]`: 8/16/24/32-bit integer or 32-bit
/// float PCM; several channels are averaged. Errors on another sample rate (resample it
/// first, e.g. `sox in.wav -r 16000 out.wav`) and on a file `hound` cannot read.
pub fn read_wav_16k(path: &Path) -> anyhow::Result<Vec<f32>> {
    let mut reader =
        hound::WavReader::open(path).with_context(|| format!("reading {}", path.display()))?;
    let spec = reader.spec();
    if spec.sample_rate != SAMPLE_RATE {
        bail!(
            "{}: {} Hz audio; the speech models take {SAMPLE_RATE} Hz (resample it first)",
            path.display(),
            spec.sample_rate
        );
    }
    let channels = usize::from(spec.channels.max(1));
    let interleaved: Vec<f32> = match spec.sample_format {
        hound::SampleFormat::Float => reader
            .samples::<f32>()
            .collect::<Result<_, _>>()
            .with_context(|| format!("decoding {}", path.display()))?,
        hound::SampleFormat::Int => {
            if !(1..=32).contains(&spec.bits_per_sample) {
                bail!("{}: {}-bit samples", path.display(), spec.bits_per_sample);
            }
            let scale = 1.0 / (1u64 << (spec.bits_per_sample - 1)) as f32;
            reader
                .samples::<i32>()
                .map(|s| s.map(|v| v as f32 * scale))
                .collect::<Result<_, _>>()
                .with_context(|| format!("decoding {}", path.display()))?
        }
    };
    Ok(interleaved
        .chunks_exact(channels)
        .map(|frame| frame.iter().sum::<f32>() / channels as f32)
        .collect())
}

/// The committed test speech (`tests/fixtures/audio/speech.wav`, made by `make_speech.py`
/// there): three sentences spoken by espeak-ng with noise between them, 16 s at 16 kHz.
pub fn test_speech_path() -> std::path::PathBuf {
    let local = Path::new("tests/fixtures/audio/speech.wav");
    if local.is_file() {
        return local.to_path_buf();
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/audio/speech.wav")
}
