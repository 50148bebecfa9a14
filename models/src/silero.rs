//! Silero VAD v6 (16 kHz): the speech probability of each 512-sample chunk of a signal, and
//! the speech segments found from them as the `silero-vad` package's
//! `get_speech_timestamps` finds them.
//!
//! One chunk's forward (weights from the package's `silero_vad_16k_op15.onnx`, converted to
//! safetensors by `scripts/fetch-models.sh`): the chunk with the previous chunk's last 64
//! samples in front (zeros for the first), reflect-padded by 64 samples on the right (640
//! samples); an STFT stored as a stride-128 convolution with a 258 x 256 basis, which is a
//! periodic Hann window times the cosines and negated sines of a 256-point real DFT (checked
//! at load, then run as `ops::stft`: 4 frames of 129 bins), the magnitude `sqrt(re^2 +
//! im^2)`; four kernel-3 convolutions with ReLU (129 ->
//! 128, 128 -> 64 stride 2, 64 -> 64 stride 2, 64 -> 128), which leave one time step; an
//! LSTM cell of 128 carrying its state from chunk to chunk; ReLU, a 1x1 convolution to one
//! value and a sigmoid.
//!
//! Only the LSTM depends on earlier chunks, so [`SileroVad::probabilities`] runs every
//! chunk's front end and encoder as one batch, the LSTM as one sequence
//! (`ops::lstm_forward`) and the head as one batch again; [`VadStream`] runs the same
//! forward one chunk at a time for live audio (`ops::lstm_cell`). Both give the same
//! probabilities.

use std::path::Path;

use anyhow::{bail, Context};
use brotensor::io::safetensors::{self as st, SafeTensors};
use brotensor::ops::{self, Conv1dSpec, LstmWeights, PadMode, StftSpec};
use brotensor::{Device, Dtype, Tensor};

/// Samples per chunk at 16 kHz.
pub const CHUNK: usize = 512;
/// Samples of the previous chunk fed in front of each chunk.
pub const CONTEXT: usize = 64;
/// Chunks per batch of [`SileroVad::probabilities`] (about 20 MB of intermediates).
pub const FILE_BLOCK: usize = 512;
/// The LSTM's width.
const HIDDEN: usize = 128;
/// STFT size (the basis' taps) and hop.
const N_FFT: usize = 256;
const HOP: usize = 128;
/// Frequency bins of the 256-point real DFT.
const BINS: usize = N_FFT / 2 + 1;
/// The encoder's convolutions: (input channels, output channels, stride).
const ENCODER: [(usize, usize, usize); 4] =
    [(BINS, 128, 1), (128, 64, 2), (64, 64, 2), (64, 128, 1)];

/// A convolution's weight `[C_out, C_in, 3]` and bias, with its stride.
struct Conv {
    w: Tensor,
    b: Tensor,
    spec: Conv1dSpec,
}

/// The loaded model on one device. The convolutions compute in the model's dtype (F32, or
/// F16 / BF16 on GPUs); the magnitude, the LSTM and the head always in F32.
pub struct SileroVad {
    device: Device,
    dtype: Dtype,
    /// The periodic Hann window the stored STFT basis applies, `(256)`.
    window: Tensor,
    encoder: Vec<Conv>,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor,
    b_hh: Tensor,
    /// The head's 1x1 convolution as a `(1, 128)` dense layer and its bias.
    head_w: Tensor,
    head_b: Tensor,
}

/// `name` from `file` on `device`, checked to have exactly `dims`.
fn load(file: &SafeTensors, name: &str, dims: &[usize], device: Device) -> anyhow::Result<Tensor> {
    let view = file.get(name)?;
    if view.shape != dims {
        bail!("`{name}` has shape {:?}, expected {dims:?}", view.shape);
    }
    if view.dtype != st::StDtype::F32 {
        bail!("`{name}` is {}, expected F32", view.dtype.name());
    }
    let numel: usize = dims.iter().product();
    let mut t = st::upload_on(device, &view, 1, numel)?;
    t.reshape_(dims)?;
    Ok(t)
}

/// Errors unless the stored STFT basis `[258, 1, 256]` is the periodic Hann window times
/// the cosines (rows 0..=128) and negated sines (rows 129..) of a 256-point DFT, to FP32
/// rounding: what lets `ops::stft` stand in for the convolution.
fn check_stft_basis(file: &SafeTensors) -> anyhow::Result<()> {
    let name = "model.stft.forward_basis_buffer";
    let view = file.get(name)?;
    if view.shape != [2 * BINS, 1, N_FFT] || view.dtype != st::StDtype::F32 {
        bail!(
            "`{name}` is {} {:?}, expected F32 [{}, 1, {N_FFT}]",
            view.dtype.name(),
            view.shape,
            2 * BINS
        );
    }
    let tau = std::f64::consts::TAU;
    let mut worst = 0f64;
    for (i, bytes) in view.data.chunks_exact(4).enumerate() {
        let (row, t) = (i / N_FFT, (i % N_FFT) as f64);
        let hann = 0.5 - 0.5 * (tau * t / N_FFT as f64).cos();
        let bin = (row % BINS) as f64;
        let phase = tau * bin * t / N_FFT as f64;
        let want = if row < BINS {
            hann * phase.cos()
        } else {
            -hann * phase.sin()
        };
        let got = f64::from(f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]));
        worst = worst.max((got - want).abs());
    }
    if worst > 1e-6 {
        bail!("`{name}` is not a Hann-windowed 256-point DFT (off by {worst:e})");
    }
    Ok(())
}

/// `t` in `dtype` (itself when it already is).
fn as_dtype(t: Tensor, dtype: Dtype) -> brotensor::Result<Tensor> {
    if t.dtype() == dtype {
        Ok(t)
    } else {
        t.to_dtype(dtype)
    }
}

impl SileroVad {
    /// Loads the converted weights (`silero_vad.safetensors`, the ONNX initializers under
    /// their ONNX names) onto `device`, the convolutions' in `dtype`.
    pub fn load(path: &Path, device: Device, dtype: Dtype) -> anyhow::Result<SileroVad> {
        if !brotensor::supports_dtype(device, dtype)?
            || (device == Device::Cpu && dtype != Dtype::F32)
        {
            bail!("{device} does not compute in {dtype}");
        }
        let file =
            SafeTensors::open(path).with_context(|| format!("opening {}", path.display()))?;
        let conv = |name: &str, dims: &[usize]| -> anyhow::Result<Tensor> {
            Ok(load(&file, name, dims, device)?.to_dtype(dtype)?)
        };
        check_stft_basis(&file)?;
        let mut encoder = Vec::with_capacity(ENCODER.len());
        for (i, &(c_in, c_out, stride)) in ENCODER.iter().enumerate() {
            let prefix = format!("model.encoder.{i}.reparam_conv");
            let mut spec = Conv1dSpec::new([3]);
            spec.stride = [stride];
            spec.padding = [1];
            encoder.push(Conv {
                w: conv(&format!("{prefix}.weight"), &[c_out, c_in, 3])?,
                b: conv(&format!("{prefix}.bias"), &[c_out])?,
                spec,
            });
        }
        let rnn = |part: &str, dims: &[usize]| {
            load(&file, &format!("model.decoder.rnn.{part}"), dims, device)
        };
        let mut head_w = load(
            &file,
            "model.decoder.decoder.2.weight",
            &[1, HIDDEN, 1],
            device,
        )?;
        head_w.reshape_(&[1, HIDDEN])?;
        Ok(SileroVad {
            device,
            dtype,
            window: ops::hann_window(N_FFT, true)?.to(device)?,
            encoder,
            w_ih: rnn("weight_ih", &[4 * HIDDEN, HIDDEN])?,
            w_hh: rnn("weight_hh", &[4 * HIDDEN, HIDDEN])?,
            b_ih: rnn("bias_ih", &[4 * HIDDEN])?,
            b_hh: rnn("bias_hh", &[4 * HIDDEN])?,
            head_w,
            head_b: load(&file, "model.decoder.decoder.2.bias", &[1], device)?,
        })
    }

    /// The device the model runs on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The convolutions' dtype.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    fn lstm(&self) -> LstmWeights<'_> {
        LstmWeights {
            w_ih: &self.w_ih,
            w_hh: &self.w_hh,
            b_ih: Some(&self.b_ih),
            b_hh: Some(&self.b_hh),
        }
    }

    /// The encoder features `(N, 128)` of `N` model inputs `(N, 576)` (context + chunk).
    fn features(&self, inputs: &Tensor) -> anyhow::Result<Tensor> {
        let n = inputs.rows();
        let mut padded = Tensor::default();
        ops::pad1d_forward(
            inputs,
            (n, 1, CONTEXT + CHUNK),
            (0, CONTEXT),
            PadMode::Reflect,
            &mut padded,
        )?;
        // |rfft(hann * frame)| of the 4 frames: (n 4 129, 2) pairs, then (n, 129, 4).
        let mut spec = StftSpec::new(N_FFT, HOP);
        spec.center = false;
        let mut pairs = padded.stft(&self.window, &spec)?;
        let frames = pairs.rows() / n.max(1);
        pairs.reshape_(&[n * frames * BINS, 2])?;
        let mut magnitude = ops::sqrt(&pairs.mul(&pairs)?.sum(1)?)?;
        magnitude.reshape_(&[n, frames, BINS])?;
        let mut x = as_dtype(ops::transpose(&magnitude, &[0, 2, 1])?, self.dtype)?;
        for conv in &self.encoder {
            x = x.conv1d(&conv.w, Some(&conv.b), &conv.spec)?.relu()?;
        }
        let mut x = as_dtype(x, Dtype::F32)?;
        if x.dims() != [n, HIDDEN, 1] {
            bail!(
                "silero: the encoder gave {:?}, expected [{n}, {HIDDEN}, 1]",
                x.dims()
            );
        }
        x.reshape_(&[n, HIDDEN])?;
        Ok(x)
    }

    /// The speech probabilities `(N, 1)` of the LSTM outputs `h (N, 128)`.
    fn head(&self, h: &Tensor) -> anyhow::Result<Tensor> {
        let mut logits = Tensor::default();
        ops::linear_forward_batched(&self.head_w, Some(&self.head_b), &h.relu()?, &mut logits)?;
        Ok(logits.sigmoid()?)
    }

    /// The speech probability of every 512-sample chunk of `samples` (16 kHz, `[-1, 1]`), as
    /// a fresh stream would give them: the last partial chunk is padded with zeros. Runs
    /// [`FILE_BLOCK`] chunks at a time (the LSTM state carried between blocks), so memory
    /// stays bounded on long files.
    pub fn probabilities(&self, samples: &[f32]) -> anyhow::Result<Vec<f32>> {
        let n = samples.len().div_ceil(CHUNK);
        let mut probs = Vec::with_capacity(n);
        let mut state: Option<(Tensor, Tensor)> = None;
        let width = CONTEXT + CHUNK;
        for first in (0..n).step_by(FILE_BLOCK) {
            let count = FILE_BLOCK.min(n - first);
            let mut host = vec![0f32; count * width];
            for (j, row) in host.chunks_exact_mut(width).enumerate() {
                // The context is the previous chunk's tail (zeros before the first chunk).
                let i = first + j;
                let start = (i * CHUNK).saturating_sub(CONTEXT);
                let from = i * CHUNK - start;
                let end = ((i + 1) * CHUNK).min(samples.len());
                row[CONTEXT - from..][..end - start].copy_from_slice(&samples[start..end]);
            }
            let inputs = Tensor::from_slice_on(self.device, &host, count, width)?;
            let features = self.features(&inputs)?;
            let (mut h, mut h_t, mut c_t) =
                (Tensor::default(), Tensor::default(), Tensor::default());
            let initial = state
                .as_ref()
                .map_or((None, None), |(h, c)| (Some(h), Some(c)));
            ops::lstm_forward(
                &features,
                &self.lstm(),
                initial,
                (count, 1),
                &mut h,
                Some((&mut h_t, &mut c_t)),
            )?;
            state = Some((h_t, c_t));
            probs.extend(self.head(&h)?.to_vec::<f32>()?);
        }
        Ok(probs)
    }

    /// A new stream: zero LSTM state and zero context.
    pub fn stream(&self) -> anyhow::Result<VadStream<'_>> {
        Ok(VadStream {
            model: self,
            input: vec![0.0; CONTEXT + CHUNK],
            h: Tensor::zeros_on(self.device, 1, HIDDEN, Dtype::F32)?,
            c: Tensor::zeros_on(self.device, 1, HIDDEN, Dtype::F32)?,
        })
    }
}

/// Live audio through [`SileroVad`] one chunk at a time, carrying the LSTM state and the
/// 64-sample context from chunk to chunk.
pub struct VadStream<'a> {
    model: &'a SileroVad,
    /// The next model input: the context, then room for the chunk.
    input: Vec<f32>,
    h: Tensor,
    c: Tensor,
}

impl VadStream<'_> {
    /// The speech probability of the next chunk of exactly 512 samples.
    pub fn push(&mut self, chunk: &[f32]) -> anyhow::Result<f32> {
        if chunk.len() != CHUNK {
            bail!(
                "silero: a chunk holds {CHUNK} samples at 16 kHz, got {}",
                chunk.len()
            );
        }
        self.input[CONTEXT..].copy_from_slice(chunk);
        let m = self.model;
        let inputs = Tensor::from_slice_on(m.device, &self.input, 1, CONTEXT + CHUNK)?;
        self.input.copy_within(CHUNK.., 0);
        let features = m.features(&inputs)?;
        ops::lstm_cell(&features, &m.lstm(), &mut self.h, &mut self.c)?;
        Ok(m.head(&self.h)?.to_vec::<f32>()?[0])
    }
}

/// The rules that turn chunk probabilities into speech segments, with the defaults of the
/// package's `get_speech_timestamps` (`Default`).
#[derive(Debug, Clone, Copy)]
pub struct SegmentRules {
    /// A chunk at or above it is speech.
    pub threshold: f32,
    /// Speech ends only below it (the package: `max(threshold - 0.15, 0.01)`).
    pub neg_threshold: f32,
    /// Shorter segments are dropped (samples).
    pub min_speech: usize,
    /// Silence shorter than this does not end a segment (samples).
    pub min_silence: usize,
    /// Added on both sides of each segment (samples; halved between close neighbours).
    pub speech_pad: usize,
}

impl Default for SegmentRules {
    fn default() -> Self {
        SegmentRules {
            threshold: 0.5,
            neg_threshold: 0.35,
            min_speech: 250 * 16,
            min_silence: 100 * 16,
            speech_pad: 30 * 16,
        }
    }
}

/// A stretch of speech, in samples at 16 kHz: `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// First sample.
    pub start: usize,
    /// One past the last sample.
    pub end: usize,
}

impl Segment {
    /// `(start, end)` in seconds.
    pub fn seconds(&self) -> (f64, f64) {
        let rate = f64::from(crate::audio::SAMPLE_RATE);
        (self.start as f64 / rate, self.end as f64 / rate)
    }
}

/// The speech segments of a signal of `n_samples` from its chunk probabilities (chunk `i`
/// starts at sample `512 i`), by `rules`.
pub fn speech_segments(probs: &[f32], n_samples: usize, rules: &SegmentRules) -> Vec<Segment> {
    let mut found = Vec::new();
    let mut start = None;
    let mut tentative_end: Option<usize> = None;
    for (i, &p) in probs.iter().enumerate() {
        let at = i * CHUNK;
        match start {
            None if p >= rules.threshold => start = Some(at),
            Some(_) if p >= rules.threshold => tentative_end = None,
            Some(s) if p < rules.neg_threshold => {
                let end = *tentative_end.get_or_insert(at);
                if at - end >= rules.min_silence {
                    if end - s > rules.min_speech {
                        found.push(Segment { start: s, end });
                    }
                    start = None;
                    tentative_end = None;
                }
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        if n_samples.saturating_sub(s) > rules.min_speech {
            found.push(Segment {
                start: s,
                end: n_samples,
            });
        }
    }
    pad_segments(&mut found, n_samples, rules.speech_pad);
    found
}

/// Widens each segment by `pad` samples on both sides; neighbours closer than `2 pad` meet
/// halfway across their gap instead.
fn pad_segments(segments: &mut [Segment], n_samples: usize, pad: usize) {
    let count = segments.len();
    for i in 0..count {
        if i == 0 {
            segments[0].start = segments[0].start.saturating_sub(pad);
        }
        if i + 1 < count {
            let gap = segments[i + 1].start - segments[i].end;
            if gap < 2 * pad {
                segments[i].end += gap / 2;
                segments[i + 1].start -= gap / 2;
            } else {
                segments[i].end = (segments[i].end + pad).min(n_samples);
                segments[i + 1].start -= pad;
            }
        } else {
            segments[i].end = (segments[i].end + pad).min(n_samples);
        }
    }
}
