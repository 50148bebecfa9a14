//! all-MiniLM-L6-v2 sentence embeddings: a 6-layer BERT encoder (hidden 384, 12 heads of 32,
//! GELU (erf) FFN of 1536, post-LayerNorm), then mean pooling over each sentence's tokens
//! and L2 normalisation, as sentence-transformers computes them.
//!
//! The sentences of a batch are packed row after row (no padding): one `(T, 384)` matrix
//! for the `T` tokens of all of them, with `flash_attention_varlen_forward` keeping each
//! sentence's attention to itself, and the pooling a `(B, T)` averaging matrix times it.

use std::path::Path;

use anyhow::{bail, Context};
use brotensor::io::safetensors::{self as st, SafeTensors};
use brotensor::{ops, Device, Dtype, Tensor};
use tokenizers::Tokenizer;

use crate::files::progress;
use crate::tokenizer;

/// Hidden size.
pub const HIDDEN: usize = 384;
const HEADS: usize = 12;
const HEAD_DIM: usize = HIDDEN / HEADS;
const LAYERS: usize = 6;
const FFN: usize = 1536;
const MAX_POSITIONS: usize = 512;
/// Sentences per forward pass.
const BATCH: usize = 64;
/// `layer_norm_eps` of the model's config.
const LN_EPS: f32 = 1e-12;

/// A dense layer `y = x W^T + b`.
struct Dense {
    w: Tensor,
    b: Tensor,
}

impl Dense {
    fn forward(&self, x: &Tensor, y: &mut Tensor) -> brotensor::Result<()> {
        ops::linear_forward_batched(&self.w, Some(&self.b), x, y)
    }
}

/// LayerNorm parameters.
struct Norm {
    gamma: Tensor,
    beta: Tensor,
}

impl Norm {
    fn forward(&self, x: &Tensor, y: &mut Tensor) -> brotensor::Result<()> {
        ops::layernorm_forward_inference_batched(x, &self.gamma, &self.beta, LN_EPS, y)
    }
}

struct Layer {
    /// Query, key and value projections stacked: `(3 * 384, 384)`, one product for the three.
    qkv: Dense,
    out: Dense,
    attn_norm: Norm,
    up: Dense,
    down: Dense,
    ffn_norm: Norm,
}

/// The loaded model on one device, computing in one dtype.
pub struct MiniLm {
    device: Device,
    dtype: Dtype,
    tokenizer: Tokenizer,
    word: Tensor,
    /// Position embeddings plus the (only used) token-type 0 embedding, folded at load.
    position: Tensor,
    embed_norm: Norm,
    layers: Vec<Layer>,
}

/// Reads a tensor's F32 values from the file (little-endian).
fn host_f32(file: &SafeTensors, name: &str) -> anyhow::Result<Vec<f32>> {
    let view = file.get(name)?;
    if view.dtype != st::StDtype::F32 {
        bail!("`{name}` is {}, expected F32", view.dtype.name());
    }
    Ok(view
        .data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// The query, key and value weights and biases under `prefix` stacked into one dense layer
/// of `3 * 384` outputs, on `device` in `dtype`.
fn stacked(
    file: &SafeTensors,
    prefix: &str,
    device: Device,
    dtype: Dtype,
) -> anyhow::Result<Dense> {
    let mut w = Vec::with_capacity(3 * HIDDEN * HIDDEN);
    let mut b = Vec::with_capacity(3 * HIDDEN);
    for part in ["query", "key", "value"] {
        w.extend(host_f32(file, &format!("{prefix}.{part}.weight"))?);
        b.extend(host_f32(file, &format!("{prefix}.{part}.bias"))?);
    }
    if w.len() != 3 * HIDDEN * HIDDEN || b.len() != 3 * HIDDEN {
        bail!("unexpected attention shapes under {prefix}");
    }
    Ok(Dense {
        w: Tensor::from_slice_on(device, &w, 3 * HIDDEN, HIDDEN)?.to_dtype(dtype)?,
        b: Tensor::from_slice_on(device, &b, 1, 3 * HIDDEN)?.to_dtype(dtype)?,
    })
}

impl MiniLm {
    /// Loads `model.safetensors` and `tokenizer.json` from `dir` onto `device`, converting
    /// the weights to `dtype` (F32, or F16/BF16 where the device computes in them).
    pub fn load(dir: &Path, device: Device, dtype: Dtype) -> anyhow::Result<MiniLm> {
        if !brotensor::supports_dtype(device, dtype)?
            || (device == Device::Cpu && dtype != Dtype::F32)
        {
            bail!("{device} does not compute in {dtype}");
        }
        let tokenizer = tokenizer::from_json_file(&dir.join("tokenizer.json"))?;
        let path = dir.join("model.safetensors");
        let file =
            SafeTensors::open(&path).with_context(|| format!("opening {}", path.display()))?;
        let bar = progress((LAYERS + 1) as u64, "minilm");
        let get = |name: &str, rows: usize, cols: usize| -> anyhow::Result<Tensor> {
            let view = file.get(name)?;
            Ok(st::upload_as_on(device, &view, rows, cols, dtype)?)
        };
        let dense = |prefix: &str, out: usize, inp: usize| -> anyhow::Result<Dense> {
            Ok(Dense {
                w: get(&format!("{prefix}.weight"), out, inp)?,
                b: get(&format!("{prefix}.bias"), 1, out)?,
            })
        };
        let norm = |prefix: &str| -> anyhow::Result<Norm> {
            Ok(Norm {
                gamma: get(&format!("{prefix}.weight"), 1, HIDDEN)?,
                beta: get(&format!("{prefix}.bias"), 1, HIDDEN)?,
            })
        };
        let word = get("embeddings.word_embeddings.weight", 30522, HIDDEN)?;
        let mut pos = host_f32(&file, "embeddings.position_embeddings.weight")?;
        let types = host_f32(&file, "embeddings.token_type_embeddings.weight")?;
        if pos.len() != MAX_POSITIONS * HIDDEN || types.len() < HIDDEN {
            bail!("unexpected embedding shapes in {}", path.display());
        }
        for row in pos.chunks_exact_mut(HIDDEN) {
            row.iter_mut()
                .zip(&types[..HIDDEN])
                .for_each(|(p, t)| *p += t);
        }
        let position =
            Tensor::from_slice_on(device, &pos, MAX_POSITIONS, HIDDEN)?.to_dtype(dtype)?;
        let embed_norm = norm("embeddings.LayerNorm")?;
        bar.inc(1);
        let mut layers = Vec::with_capacity(LAYERS);
        for i in 0..LAYERS {
            let p = format!("encoder.layer.{i}");
            layers.push(Layer {
                qkv: stacked(&file, &format!("{p}.attention.self"), device, dtype)?,
                out: dense(&format!("{p}.attention.output.dense"), HIDDEN, HIDDEN)?,
                attn_norm: norm(&format!("{p}.attention.output.LayerNorm"))?,
                up: dense(&format!("{p}.intermediate.dense"), FFN, HIDDEN)?,
                down: dense(&format!("{p}.output.dense"), HIDDEN, FFN)?,
                ffn_norm: norm(&format!("{p}.output.LayerNorm"))?,
            });
            bar.inc(1);
        }
        bar.finish_and_clear();
        Ok(MiniLm {
            device,
            dtype,
            tokenizer,
            word,
            position,
            embed_norm,
            layers,
        })
    }

    /// The device the model lives on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The dtype it computes in.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Token ids of each sentence (`[CLS] ... [SEP]`, truncated as the tokenizer says).
    pub fn tokenize(&self, sentences: &[&str]) -> anyhow::Result<Vec<Vec<u32>>> {
        sentences
            .iter()
            .map(|s| tokenizer::encode(&self.tokenizer, s, true))
            .collect()
    }

    /// Unit-length embeddings `(B, 384)` (F32 values, row per sentence).
    pub fn embed(&self, sentences: &[&str]) -> anyhow::Result<Vec<Vec<f32>>> {
        let ids = self.tokenize(sentences)?;
        self.embed_ids(&ids)
    }

    /// [`MiniLm::embed`] from token ids (each sentence non-empty, at most 512 tokens). Runs
    /// inside the CPU thread pool ([`crate::in_cpu_pool`]).
    pub fn embed_ids(&self, ids: &[Vec<u32>]) -> anyhow::Result<Vec<Vec<f32>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // Batches of at most BATCH sentences keep the (B, T) pooling matrix small.
        let mut out = Vec::with_capacity(ids.len());
        for batch in ids.chunks(BATCH) {
            let e = crate::in_cpu_pool(|| -> anyhow::Result<Vec<f32>> {
                Ok(self.forward(batch)?.to_dtype(Dtype::F32)?.to_vec::<f32>()?)
            })?;
            out.extend(e.chunks_exact(HIDDEN).map(<[f32]>::to_vec));
        }
        Ok(out)
    }

    /// The pooled, normalised `(B, 384)` embeddings in the model's dtype.
    fn forward(&self, ids: &[Vec<u32>]) -> anyhow::Result<Tensor> {
        let dev = self.device;
        let mut flat = Vec::new();
        let mut positions = Vec::new();
        let mut cu = vec![0i32];
        let mut longest = 0;
        for s in ids {
            if s.is_empty() || s.len() > MAX_POSITIONS {
                bail!(
                    "a sentence has {} tokens; 1 to {MAX_POSITIONS} fit",
                    s.len()
                );
            }
            longest = longest.max(s.len());
            for (p, &t) in s.iter().enumerate() {
                flat.push(i32::try_from(t).context("token id")?);
                positions.push(p as i32);
            }
            cu.push(i32::try_from(flat.len()).context("too many tokens")?);
        }
        let t = flat.len();
        let ids_t = Tensor::from_slice_on(dev, &flat, t, 1)?;
        let pos_t = Tensor::from_slice_on(dev, &positions, t, 1)?;
        let cu_t = Tensor::from_slice_on(dev, &cu, cu.len(), 1)?;

        let (mut x, mut p) = (Tensor::default(), Tensor::default());
        ops::embedding_lookup_forward(&self.word, &ids_t, &mut x)?;
        ops::embedding_lookup_forward(&self.position, &pos_t, &mut p)?;
        ops::add_inplace(&mut x, &p)?;
        let mut h = Tensor::default();
        self.embed_norm.forward(&x, &mut h)?;

        let [mut qkv, mut o, mut a, mut h1, mut u, mut g, mut d] =
            std::array::from_fn(|_| Tensor::default());
        for l in &self.layers {
            l.qkv.forward(&h, &mut qkv)?;
            let q = qkv.narrow(1, 0, HIDDEN)?;
            let k = qkv.narrow(1, HIDDEN, HIDDEN)?;
            let v = qkv.narrow(1, 2 * HIDDEN, HIDDEN)?;
            ops::flash_attention_varlen_forward(
                &q, &k, &v, &cu_t, &cu_t, longest, longest, HEADS, HEAD_DIM, false, &mut o,
            )?;
            l.out.forward(&o, &mut a)?;
            ops::add_inplace(&mut a, &h)?;
            l.attn_norm.forward(&a, &mut h1)?;
            l.up.forward(&h1, &mut u)?;
            ops::gelu_exact_forward(&u, &mut g)?;
            l.down.forward(&g, &mut d)?;
            ops::add_inplace(&mut d, &h1)?;
            l.ffn_norm.forward(&d, &mut h)?;
        }

        // Mean pooling: row b of the (B, T) matrix averages sentence b's rows.
        let cells = ids
            .len()
            .checked_mul(t)
            .context("pooling matrix size overflows")?;
        let mut pool = vec![0f32; cells];
        for (b, w) in cu.windows(2).enumerate() {
            let (s, e) = (w[0] as usize, w[1] as usize);
            let inv = 1.0 / (e - s) as f32;
            pool[b * t + s..b * t + e].fill(inv);
        }
        let pool = Tensor::from_slice_on(dev, &pool, ids.len(), t)?.to_dtype(self.dtype)?;
        let mut mean = Tensor::default();
        ops::matmul(&pool, &h, &mut mean)?;
        // x / max(|x|, 1e-12) as torch's normalize; sqrt(|x|^2 + 1e-24) is the same here.
        let mut out = Tensor::default();
        ops::l2_norm_forward(&mean, HIDDEN, 1, 1e-24, &mut out)?;
        Ok(out)
    }
}

/// Cosine similarity of two unit vectors (their dot product, in f64).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}
