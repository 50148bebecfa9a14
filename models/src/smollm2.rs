//! SmolLM2-135M-Instruct from its Q4_1 GGUF file: a llama decoder (30 layers, width 576,
//! 9 query and 3 KV heads of 64, RMSNorm, RoPE on adjacent pairs as GGUF llama weights
//! expect, SwiGLU FFN of 1536, output tied to the Q8_0 token embedding).
//!
//! The weights stay in their GGUF blocks on the device: every product is
//! `ops::quant_linear` reading Q4_1 / Q8_0 blocks with FP32 activations (no 8-bit rounding
//! of the activations, unlike llama.cpp), and an embedding row is decoded from its Q8_0
//! blocks on the host when its token comes in. Attention runs over a KV cache with
//! `ops::flash_attention_decode` (causal, bottom-right, GQA without copying K/V).
//!
//! Tensor parallelism ([`SmolLm2::load_shard`], [`SmolLm2::generate_sharded`]): each rank of
//! a [`Communicator`] world holds whole KV groups of the attention (their query, key and
//! value rows and the matching columns of the output projection) and a slice of the FFN
//! (gate and up rows, down columns), cut at quantization-block boundaries from the GGUF
//! bytes; the norms, the embedding and the output head are whole on every rank. Each layer
//! sums the ranks' partial outputs with two all-reduces, after the attention output and after
//! the FFN.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use brotensor::distributed::{Communicator, ReduceOp};
use brotensor::io::gguf::{self, GgufFile, TensorInfo};
use brotensor::ops::{self, Act, RopeParams};
use brotensor::{Device, Dtype, Tensor};
use tokenizers::Tokenizer;

use crate::files::progress;
use crate::tokenizer;

/// The hyper-parameters read from the GGUF metadata.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Decoder layers.
    pub layers: usize,
    /// Model width.
    pub width: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Head size.
    pub head_dim: usize,
    /// FFN width.
    pub ffn: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// The trained context length.
    pub context: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// RoPE frequency base.
    pub rope_base: f32,
}

/// Which part of the model a rank holds: rank `rank` of `world` (the whole model is rank 0 of
/// 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This rank.
    pub rank: usize,
    /// The number of ranks the model is split over.
    pub world: usize,
}

impl Shard {
    /// The whole model on one rank.
    pub const WHOLE: Shard = Shard { rank: 0, world: 1 };
}

/// `rank`'s range of `n` units split over `world` (the first `n % world` ranks take one more).
fn split(n: usize, world: usize, rank: usize) -> (usize, usize) {
    let (q, rem) = (n / world, n % world);
    let lo = rank * q + rank.min(rem);
    (lo, lo + q + usize::from(rank < rem))
}

/// The attention heads one rank computes (its FFN slice is in the shapes of its weights).
#[derive(Debug, Clone, Copy)]
struct Local {
    heads: usize,
    kv_heads: usize,
}

/// Rows `lo..hi` of a row-major matrix of `rows` rows stored as `data`.
fn rows_of(data: &[u8], rows: usize, lo: usize, hi: usize) -> &[u8] {
    let row = data.len() / rows;
    &data[lo * row..hi * row]
}

/// Columns `lo..hi` of every row of a row-major `rows x cols` matrix of `dtype` blocks
/// stored as `data`; the cut must fall on block boundaries.
fn cols_of(
    name: &str,
    data: &[u8],
    (rows, cols): (usize, usize),
    dtype: Dtype,
    (lo, hi): (usize, usize),
) -> anyhow::Result<Vec<u8>> {
    let block = dtype.block_size();
    if lo % block != 0 || hi % block != 0 {
        bail!(
            "{name}: cannot split {cols} columns at {lo}..{hi}: not on {dtype} block \
             boundaries (every {block} columns)"
        );
    }
    let row = data.len() / rows;
    let (a, b) = (
        lo / block * dtype.block_bytes(),
        hi / block * dtype.block_bytes(),
    );
    let mut out = Vec::with_capacity(rows * (b - a));
    for r in 0..rows {
        out.extend_from_slice(&data[r * row + a..r * row + b]);
    }
    Ok(out)
}

struct Layer {
    attn_norm: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    ffn_norm: Tensor,
    /// `ffn_gate` rows then `ffn_up` rows, one quantized matrix (`2 ffn x width`), so one
    /// product feeds `swiglu_forward`.
    gate_up: Tensor,
    down: Tensor,
}

/// The loaded model on one device.
pub struct SmolLm2 {
    /// Its hyper-parameters (of the whole model).
    pub config: Config,
    shard: Shard,
    local: Local,
    device: Device,
    dtype: Dtype,
    file: GgufFile,
    tokenizer: Tokenizer,
    bos: Option<u32>,
    eos: u32,
    embed: TensorInfo,
    layers: Vec<Layer>,
    output_norm: Tensor,
    /// The tied output projection: the token embedding's Q8_0 blocks.
    lm_head: Tensor,
}

/// A KV cache: one `(capacity, kv_heads * head_dim)` K and V per layer.
pub struct Cache {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    len: usize,
}

impl Cache {
    /// Tokens held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no token.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Tokens it can hold.
    pub fn capacity(&self) -> usize {
        self.k.first().map_or(0, Tensor::rows)
    }
}

/// Time spent per op kind, filled by [`SmolLm2::forward_timed`].
#[derive(Debug, Default, Clone)]
pub struct OpTimes {
    /// Op name to (total time, calls).
    pub by_op: BTreeMap<&'static str, (Duration, usize)>,
}

impl OpTimes {
    fn add(&mut self, name: &'static str, d: Duration) {
        let e = self.by_op.entry(name).or_default();
        e.0 += d;
        e.1 += 1;
    }

    /// The total time.
    pub fn total(&self) -> Duration {
        self.by_op.values().map(|v| v.0).sum()
    }
}

/// How to pick each next token.
#[derive(Debug, Clone, Copy)]
pub struct Sampling {
    /// 0: greedy (the argmax).
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0: all).
    pub top_k: i32,
    /// Keep the smallest prefix reaching this probability (1: all).
    pub top_p: f32,
    /// The Philox key: equal seeds give equal tokens on every device.
    pub seed: u64,
}

impl Sampling {
    /// Greedy decoding.
    pub fn greedy() -> Sampling {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

fn usize_meta(file: &GgufFile, key: &str) -> anyhow::Result<usize> {
    usize::try_from(file.meta_u64(key)?).with_context(|| key.to_string())
}

impl SmolLm2 {
    /// Maps the GGUF at `path` and uploads its weights to `device` (quantized matrices as
    /// their blocks; norms in `dtype`, the dtype activations are computed in).
    pub fn load(path: &Path, device: Device, dtype: Dtype) -> anyhow::Result<SmolLm2> {
        SmolLm2::load_shard(path, device, dtype, Shard::WHOLE)
    }

    /// [`SmolLm2::load`] of `shard`'s part for tensor parallelism: whole KV groups of the
    /// attention and a slice of the FFN (see the module docs). Errors when the world has
    /// more ranks than KV heads or a cut misses a quantization block boundary.
    pub fn load_shard(
        path: &Path,
        device: Device,
        dtype: Dtype,
        shard: Shard,
    ) -> anyhow::Result<SmolLm2> {
        let file = GgufFile::open(path).with_context(|| format!("opening {}", path.display()))?;
        let arch = file.meta_str("general.architecture")?;
        if arch != "llama" {
            bail!(
                "{} is a `{arch}` model; this example runs llama ones",
                path.display()
            );
        }
        let heads = usize_meta(&file, "llama.attention.head_count")?;
        let width = usize_meta(&file, "llama.embedding_length")?;
        let config = Config {
            layers: usize_meta(&file, "llama.block_count")?,
            width,
            heads,
            kv_heads: usize_meta(&file, "llama.attention.head_count_kv")?,
            head_dim: width / heads.max(1),
            ffn: usize_meta(&file, "llama.feed_forward_length")?,
            vocab: file.meta_str_array("tokenizer.ggml.tokens")?.len(),
            context: usize_meta(&file, "llama.context_length")?,
            rms_eps: file.meta_f64("llama.attention.layer_norm_rms_epsilon")? as f32,
            rope_base: file
                .find_meta("llama.rope.freq_base")
                .and_then(|v| v.as_f64())
                .unwrap_or(10_000.0) as f32,
        };
        if heads == 0 || width % heads != 0 || config.kv_heads == 0 || heads % config.kv_heads != 0
        {
            bail!("unsupported head layout: {config:?}");
        }
        if shard.world == 0 || shard.rank >= shard.world || shard.world > config.kv_heads {
            bail!(
                "cannot take rank {} of {}: the model splits over 1 to {} ranks (its KV heads)",
                shard.rank,
                shard.world,
                config.kv_heads
            );
        }
        let group = heads / config.kv_heads;
        let (kv0, kv1) = split(config.kv_heads, shard.world, shard.rank);
        let local = Local {
            heads: (kv1 - kv0) * group,
            kv_heads: kv1 - kv0,
        };
        let hd = config.head_dim;
        let (q_rows, kv_rows) = ((kv0 * group * hd, kv1 * group * hd), (kv0 * hd, kv1 * hd));
        let tokenizer = tokenizer::from_gguf(&file)?;
        let bos = tokenizer::gguf_adds_bos(&file)?;
        let eos = u32::try_from(file.meta_u64("tokenizer.ggml.eos_token_id")?)?;

        let bar = progress(config.layers as u64 + 1, "smollm2");
        let info =
            |name: &str| -> anyhow::Result<TensorInfo> { Ok(file.get_tensor(name)?.clone()) };
        let norm = |name: &str| -> anyhow::Result<Tensor> {
            Ok(gguf::dequantize_tensor_on(device, &file, &info(name)?)?.to_dtype(dtype)?)
        };
        let embed = info("token_embd.weight")?;
        let lm_head = match file.find_tensor("output.weight") {
            Some(out) => gguf::upload_raw_on(device, &file, out)?,
            None => gguf::upload_raw_on(device, &file, &embed)?,
        };
        let output_norm = norm("output_norm.weight")?;
        bar.inc(1);
        let mut layers = Vec::with_capacity(config.layers);
        for i in 0..config.layers {
            let name = |t: &str| format!("blk.{i}.{t}.weight");
            let quant = |info: &TensorInfo| {
                info.dtype
                    .ok_or_else(|| anyhow!("{} is {}", info.name, info.type_name))
            };
            // Rows `lo..hi` of a `[rows, width]` matrix.
            let row_part =
                |t: &str, rows: usize, (lo, hi): (usize, usize)| -> anyhow::Result<Tensor> {
                    let info = info(&name(t))?;
                    let bytes = rows_of(file.data(&info), rows, lo, hi);
                    Ok(Tensor::from_raw_bytes_nd_on(
                        device,
                        bytes,
                        &[hi - lo, width],
                        quant(&info)?,
                    )?)
                };
            // Columns `lo..hi` of a `[width, cols]` matrix.
            let col_part =
                |t: &str, cols: usize, (lo, hi): (usize, usize)| -> anyhow::Result<Tensor> {
                    let info = info(&name(t))?;
                    let dt = quant(&info)?;
                    let bytes = cols_of(&info.name, file.data(&info), (width, cols), dt, (lo, hi))?;
                    Ok(Tensor::from_raw_bytes_nd_on(
                        device,
                        &bytes,
                        &[width, hi - lo],
                        dt,
                    )?)
                };
            let gate = info(&name("ffn_gate"))?;
            let up = info(&name("ffn_up"))?;
            if gate.dtype != up.dtype || gate.shape != up.shape {
                bail!("blk.{i}: ffn_gate and ffn_up differ in type or shape");
            }
            let dt = quant(&gate)?;
            // The FFN is cut in whole blocks of `ffn_down`'s columns.
            let down_block = quant(&info(&name("ffn_down"))?)?.block_size();
            if !config.ffn.is_multiple_of(down_block) {
                bail!(
                    "blk.{i}: ffn_down's {} columns are not whole blocks",
                    config.ffn
                );
            }
            let (b0, b1) = split(config.ffn / down_block, shard.world, shard.rank);
            let ffn_cols = (b0 * down_block, b1 * down_block);
            let mut bytes = Vec::new();
            for t in [&gate, &up] {
                bytes.extend_from_slice(rows_of(file.data(t), config.ffn, ffn_cols.0, ffn_cols.1));
            }
            let gate_up = Tensor::from_raw_bytes_nd_on(
                device,
                &bytes,
                &[2 * (ffn_cols.1 - ffn_cols.0), width],
                dt,
            )?;
            layers.push(Layer {
                attn_norm: norm(&name("attn_norm"))?,
                q: row_part("attn_q", heads * hd, q_rows)?,
                k: row_part("attn_k", config.kv_heads * hd, kv_rows)?,
                v: row_part("attn_v", config.kv_heads * hd, kv_rows)?,
                out: col_part("attn_output", heads * hd, q_rows)?,
                ffn_norm: norm(&name("ffn_norm"))?,
                gate_up,
                down: col_part("ffn_down", config.ffn, ffn_cols)?,
            });
            bar.inc(1);
        }
        bar.finish_and_clear();
        Ok(SmolLm2 {
            config,
            shard,
            local,
            device,
            dtype,
            file,
            tokenizer,
            bos,
            eos,
            embed,
            layers,
            output_norm,
            lm_head,
        })
    }

    /// The device it runs on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The tokenizer built from the GGUF metadata.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The end-of-sequence token.
    pub fn eos(&self) -> u32 {
        self.eos
    }

    /// Token ids of `text` (BOS first when the GGUF asks for it; special tokens matched).
    pub fn encode(&self, text: &str) -> anyhow::Result<Vec<u32>> {
        let mut ids: Vec<u32> = self.bos.into_iter().collect();
        ids.extend(tokenizer::encode(&self.tokenizer, text, false)?);
        Ok(ids)
    }

    /// The text of `ids`.
    pub fn decode(&self, ids: &[u32]) -> anyhow::Result<String> {
        tokenizer::decode(&self.tokenizer, ids)
    }

    /// `user` wrapped by the GGUF's chat template (`tokenizer.chat_template`), ready for the
    /// assistant's answer.
    pub fn chat_prompt(&self, user: &str) -> anyhow::Result<String> {
        let template = self.file.meta_str("tokenizer.chat_template")?;
        let mut env = minijinja::Environment::new();
        env.add_template("chat", template)?;
        let messages = vec![minijinja::context! { role => "user", content => user }];
        Ok(env.get_template("chat")?.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => true,
        })?)
    }

    /// An empty KV cache for `capacity` tokens.
    pub fn new_cache(&self, capacity: usize) -> anyhow::Result<Cache> {
        let c = &self.config;
        let cols = self.local.kv_heads * c.head_dim;
        let mut k = Vec::with_capacity(c.layers);
        let mut v = Vec::with_capacity(c.layers);
        for _ in 0..c.layers {
            k.push(Tensor::zeros_on(self.device, capacity, cols, self.dtype)?);
            v.push(Tensor::zeros_on(self.device, capacity, cols, self.dtype)?);
        }
        Ok(Cache { k, v, len: 0 })
    }

    /// An empty cache for `prompt` and up to `max_tokens` generated tokens.
    fn generation_cache(&self, prompt: &[u32], max_tokens: usize) -> anyhow::Result<Cache> {
        let capacity = prompt
            .len()
            .checked_add(max_tokens)
            .context("prompt plus max_tokens overflows")?;
        self.new_cache(capacity)
    }

    /// The embedding rows of `ids`, decoded from their Q8_0 blocks on the host.
    fn embed_rows(&self, ids: &[u32]) -> anyhow::Result<Tensor> {
        let dt = self
            .embed
            .dtype
            .ok_or_else(|| anyhow!("token_embd is {}", self.embed.type_name))?;
        let data = self.file.data(&self.embed);
        let row_bytes = data.len() / self.config.vocab;
        let mut rows = Vec::with_capacity(ids.len() * self.config.width);
        for &id in ids {
            let id = id as usize;
            if id >= self.config.vocab {
                bail!(
                    "token id {id} is outside the vocabulary of {}",
                    self.config.vocab
                );
            }
            rows.extend(gguf::dequantize(
                dt,
                &data[id * row_bytes..(id + 1) * row_bytes],
            )?);
        }
        Ok(
            Tensor::from_slice_on(self.device, &rows, ids.len(), self.config.width)?
                .to_dtype(self.dtype)?,
        )
    }

    /// Runs `ids` (at positions `cache.len() ..`) through the decoder, appending their keys
    /// and values to `cache`; returns the next-token logits `(1, vocab)` F32 of the last one.
    pub fn forward(&self, ids: &[u32], cache: &mut Cache) -> anyhow::Result<Tensor> {
        self.forward_inner(ids, cache, None, None)
    }

    /// [`SmolLm2::forward`] of a model loaded by [`SmolLm2::load_shard`]: every rank of
    /// `comm` (whose rank and world must be the shard's) calls it with the same tokens and
    /// gets the same logits.
    pub fn forward_sharded(
        &self,
        ids: &[u32],
        cache: &mut Cache,
        comm: &dyn Communicator,
    ) -> anyhow::Result<Tensor> {
        if (comm.rank(), comm.world_size()) != (self.shard.rank, self.shard.world) {
            bail!(
                "the communicator is rank {} of {}, the model's shard rank {} of {}",
                comm.rank(),
                comm.world_size(),
                self.shard.rank,
                self.shard.world
            );
        }
        self.forward_inner(ids, cache, None, Some(comm))
    }

    /// [`SmolLm2::forward`], adding each op's time to `times` (the device is synchronized
    /// after every op, so the sum is slower than an untimed forward).
    pub fn forward_timed(
        &self,
        ids: &[u32],
        cache: &mut Cache,
        times: &mut OpTimes,
    ) -> anyhow::Result<Tensor> {
        self.forward_inner(ids, cache, Some(times), None)
    }

    fn forward_inner(
        &self,
        ids: &[u32],
        cache: &mut Cache,
        mut times: Option<&mut OpTimes>,
        comm: Option<&dyn Communicator>,
    ) -> anyhow::Result<Tensor> {
        if comm.is_none() && self.shard.world > 1 {
            bail!("this model is a shard: run it with forward_sharded");
        }
        let c = &self.config;
        let (heads, kv_heads) = (self.local.heads, self.local.kv_heads);
        let n = ids.len();
        if n == 0 {
            bail!("forward needs at least one token");
        }
        let pos = cache.len;
        if pos + n > cache.capacity() {
            bail!(
                "the KV cache holds {} tokens; {} more do not fit",
                cache.capacity(),
                n
            );
        }
        let device = self.device;
        let rope = RopeParams::new(c.rope_base);
        let start = Instant::now();
        let mut x = self.embed_rows(ids)?;
        if let Some(t) = times.as_deref_mut() {
            brotensor::sync(device)?;
            t.add("embedding (host Q8_0 rows)", start.elapsed());
        }
        let mut timed =
            |name: &'static str, f: &mut dyn FnMut() -> brotensor::Result<()>| match times
                .as_deref_mut()
            {
                None => f(),
                Some(t) => {
                    let start = Instant::now();
                    f()?;
                    brotensor::sync(device)?;
                    t.add(name, start.elapsed());
                    Ok(())
                }
            };
        let [mut h, mut q, mut k, mut v, mut qr, mut kr, mut o, mut a, mut gu, mut s] =
            std::array::from_fn(|_| Tensor::default());
        for (i, l) in self.layers.iter().enumerate() {
            timed("rms_norm", &mut || {
                ops::rms_norm_forward(&x, &l.attn_norm, c.rms_eps, &mut h)
            })?;
            timed("quant_linear q,k,v", &mut || {
                ops::quant_linear(&l.q, None, &h, Act::None, &mut q)?;
                ops::quant_linear(&l.k, None, &h, Act::None, &mut k)?;
                ops::quant_linear(&l.v, None, &h, Act::None, &mut v)
            })?;
            timed("rope", &mut || {
                ops::rope_forward(&q, c.head_dim, heads, pos, &rope, &mut qr)?;
                ops::rope_forward(&k, c.head_dim, kv_heads, pos, &rope, &mut kr)
            })?;
            let (kc, vc) = (&mut cache.k[i], &mut cache.v[i]);
            timed("kv_cache_append", &mut || {
                ops::kv_cache_append(&kr, &v, pos, kc, vc)
            })?;
            timed("flash_attention_decode", &mut || {
                ops::flash_attention_decode(&qr, kc, vc, pos + n, heads, kv_heads, 0.0, 0, &mut o)
            })?;
            timed("quant_linear out", &mut || {
                ops::quant_linear(&l.out, None, &o, Act::None, &mut a)
            })?;
            if let Some(comm) = comm {
                comm.all_reduce(&mut a, ReduceOp::Sum)?;
            }
            timed("add (residual)", &mut || ops::add_inplace(&mut x, &a))?;
            timed("rms_norm", &mut || {
                ops::rms_norm_forward(&x, &l.ffn_norm, c.rms_eps, &mut h)
            })?;
            timed("quant_linear gate+up", &mut || {
                ops::quant_linear(&l.gate_up, None, &h, Act::None, &mut gu)
            })?;
            timed("swiglu", &mut || ops::swiglu_forward(&gu, &mut s))?;
            timed("quant_linear down", &mut || {
                ops::quant_linear(&l.down, None, &s, Act::None, &mut a)
            })?;
            if let Some(comm) = comm {
                comm.all_reduce(&mut a, ReduceOp::Sum)?;
            }
            timed("add (residual)", &mut || ops::add_inplace(&mut x, &a))?;
        }
        cache.len = pos + n;
        let mut logits = Tensor::default();
        timed("output norm + lm_head (Q8_0)", &mut || {
            let last = x.narrow(0, n - 1, 1)?.contiguous()?;
            ops::rms_norm_forward(&last, &self.output_norm, c.rms_eps, &mut h)?;
            ops::quant_linear(&self.lm_head, None, &h, Act::None, &mut logits)?;
            logits = logits.to_dtype(Dtype::F32)?;
            Ok(())
        })?;
        Ok(logits)
    }

    /// The next token from `logits (1, vocab)` F32; `step` picks the draw's substream.
    pub fn pick(&self, logits: &Tensor, sampling: &Sampling, step: u64) -> anyhow::Result<u32> {
        let mut idx = Tensor::default();
        ops::sample_logits(
            logits,
            sampling.temperature,
            sampling.top_k,
            sampling.top_p,
            sampling.seed,
            step,
            &mut idx,
        )?;
        let id = idx.to_vec::<i32>()?[0];
        u32::try_from(id).map_err(|_| anyhow!("sampled a negative token id {id}"))
    }

    /// Prefills `prompt` and generates up to `max_tokens` tokens (stopping after EOS),
    /// calling `on_token` with each new one. Returns the new tokens. Runs inside the CPU
    /// thread pool ([`crate::in_cpu_pool`]).
    pub fn generate(
        &self,
        prompt: &[u32],
        max_tokens: usize,
        sampling: &Sampling,
        mut on_token: impl FnMut(u32) -> anyhow::Result<()> + Send,
    ) -> anyhow::Result<Vec<u32>> {
        crate::in_cpu_pool(|| {
            let mut cache = self.generation_cache(prompt, max_tokens)?;
            let mut out = Vec::with_capacity(max_tokens);
            if max_tokens == 0 {
                return Ok(out);
            }
            let mut logits = self.forward(prompt, &mut cache)?;
            for step in 0..max_tokens {
                let id = self.pick(&logits, sampling, step as u64)?;
                out.push(id);
                on_token(id)?;
                if id == self.eos || step + 1 == max_tokens {
                    break;
                }
                logits = self.forward(&[id], &mut cache)?;
            }
            Ok(out)
        })
    }

    /// [`SmolLm2::generate`] of a shard: every rank of `comm` calls it with the same prompt
    /// and gets the same tokens (rank 0 picks each token and broadcasts it). Runs on the
    /// calling thread (not inside the CPU pool: ranks that are threads of one process would
    /// otherwise wait for each other on pool threads).
    pub fn generate_sharded(
        &self,
        prompt: &[u32],
        max_tokens: usize,
        sampling: &Sampling,
        comm: &dyn Communicator,
    ) -> anyhow::Result<Vec<u32>> {
        let mut cache = self.generation_cache(prompt, max_tokens)?;
        let mut out = Vec::with_capacity(max_tokens);
        if max_tokens == 0 {
            return Ok(out);
        }
        if self.config.vocab > 1 << 24 {
            bail!("token ids past 2^24 do not survive the F32 broadcast");
        }
        let mut logits = self.forward_sharded(prompt, &mut cache, comm)?;
        for step in 0..max_tokens {
            let id = self.pick(&logits, sampling, step as u64)?;
            // Token ids below 2^24 are exact in F32.
            let mut picked = Tensor::from_slice_on(Device::Cpu, &[id as f32], 1, 1)?;
            comm.broadcast(&mut picked, 0)?;
            let id = picked.to_vec::<f32>()?[0] as u32;
            out.push(id);
            if id == self.eos || step + 1 == max_tokens {
                break;
            }
            logits = self.forward_sharded(&[id], &mut cache, comm)?;
        }
        Ok(out)
    }
}
