//! The terrain diffusion UNet of `adaptive-terrain-diffusion` 0.4.2: a guided-diffusion
//! (ADM) UNet distilled for one-step generation of 128 x 128 height maps, with
//! consistency-model preconditioning and a difficulty condition.
//!
//! Weights: the package's ONNX graph, converted by `scripts/terrain_to_safetensors.py` (its
//! anonymous GroupNorm parameters named by graph position; the hyperparameters in the file's
//! metadata). The forward, as the graph computes it:
//!
//! - Preconditioning (per sample, FP32 on the host): with `s = sigma - 0.002`, `c_in = 1 /
//!   sqrt(sigma^2 + 0.25)`, `c_skip = 0.25 / (s^2 + 0.25)`, `c_out = 0.5 s / sqrt(sigma^2 +
//!   0.25)`; `denoised = clip(c_out F(c_in x) + c_skip x, -1, 1)`.
//! - Conditioning: `t = 250 ln sigma` through `ops::timestep_embedding` (dim 32, cos then sin)
//!   and a two-layer SiLU MLP to 128, plus a two-layer MLP of the difficulty scalar; `e =
//!   silu(sum)` feeds every residual block.
//! - The UNet (`model_channels` 32, `channel_mult` (1, 1, 2, 3, 4), 4 residual blocks per
//!   level, attention at 1/4, 1/8 and 1/16 of the input size, heads of 32 channels): residual
//!   blocks `h = conv(silu(GN(h) (1 + scale) + shift))` after `h = conv(silu(GN(x)))` with
//!   the block's `(scale, shift)` a linear map of `e`, the skip a 1x1 convolution where the
//!   channel count changes; the down blocks average-pool 2x2 and the up blocks repeat pixels
//!   2x2 (`ops::downsample_avg_2x`, `ops::upsample_nearest_2x`) after the first SiLU, on both
//!   paths; attention over the `H W` positions (GroupNorm, q/k/v projections, softmax
//!   attention with `1 / sqrt(32)` per head, an output projection, residual); the decoder
//!   concatenates the encoder's outputs on the channel axis; GroupNorm 32, eps 1e-5.
//!
//! The network is fully convolutional: any height and width divisible by 16 works (the
//! package runs 128 x 128). [`height_map`] turns a denoised sample into metres as
//! the package's generator does.

use std::path::Path;

use anyhow::{bail, Context};
use brotensor::io::safetensors::{self as st, SafeTensors};
use brotensor::ops::{self, Conv2dSpec};
use brotensor::{Device, Dtype, Tensor};

/// The package's one-step sampling sigma (the schedule's largest).
pub const SIGMA_MAX: f32 = 80.0;
/// The schedule's smallest sigma (where the model is the identity up to the clip).
pub const SIGMA_MIN: f32 = 0.002;
/// The data's standard deviation in the preconditioning.
const SIGMA_DATA: f32 = 0.5;
/// The side the package generates.
pub const SIDE: usize = 128;
/// The embedding width.
const EMB: usize = 128;
/// GroupNorm's epsilon.
const GN_EPS: f32 = 1e-5;
/// The timestep embedding's period.
const MAX_PERIOD: f32 = 10_000.0;
/// `t = C_NOISE * ln sigma`.
const C_NOISE: f32 = 250.0;
/// The largest height in metres and the asinh companding scale of the package.
const HEIGHT_RANGE: f64 = 22.168_640_136_718_75;
const ASINH_SCALE: f64 = 0.1;

/// The architecture numbers read from the file's metadata.
struct Hyper {
    model_channels: usize,
    channel_mult: Vec<usize>,
    num_res_blocks: usize,
    attention_ds: Vec<usize>,
    head_channels: usize,
    groups: usize,
}

impl Hyper {
    fn read(file: &SafeTensors) -> anyhow::Result<Hyper> {
        let meta = file.metadata();
        let get = |k: &str| -> anyhow::Result<serde_json::Value> {
            let text = meta
                .get(k)
                .with_context(|| format!("the weights' metadata has no `{k}`"))?;
            serde_json::from_str(text).with_context(|| format!("metadata `{k}` = {text:?}"))
        };
        let int = |k: &str| -> anyhow::Result<usize> {
            get(k)?
                .as_u64()
                .map(|v| v as usize)
                .with_context(|| format!("metadata `{k}` is not a count"))
        };
        let list = |k: &str| -> anyhow::Result<Vec<usize>> {
            get(k)?
                .as_array()
                .and_then(|a| a.iter().map(|v| v.as_u64().map(|v| v as usize)).collect())
                .with_context(|| format!("metadata `{k}` is not a list of counts"))
        };
        for (k, want) in [("sigma_data", SIGMA_DATA), ("sigma_min", SIGMA_MIN)] {
            let got = get(k)?.as_f64().unwrap_or(f64::NAN);
            if (got - f64::from(want)).abs() > 1e-9 {
                bail!("metadata `{k}` is {got}, this model is written for {want}");
            }
        }
        let h = Hyper {
            model_channels: int("model_channels")?,
            channel_mult: list("channel_mult")?,
            num_res_blocks: int("num_res_blocks")?,
            attention_ds: list("attention_ds")?,
            head_channels: int("num_head_channels")?,
            groups: int("group_norm_groups")?,
        };
        if h.channel_mult.is_empty() || h.head_channels == 0 || h.groups == 0 {
            bail!("the weights' metadata describes an empty network");
        }
        if h.channel_mult.len() > 8 {
            bail!(
                "the weights' metadata asks for {} levels (at most 8)",
                h.channel_mult.len()
            );
        }
        Ok(h)
    }
}

/// Reads the weights, each checked for its shape, on one device in one dtype.
struct Loader<'a> {
    file: &'a SafeTensors,
    device: Device,
    dtype: Dtype,
}

impl Loader<'_> {
    fn get(&self, name: &str, dims: &[usize]) -> anyhow::Result<Tensor> {
        let view = self.file.get(name)?;
        if view.shape != dims {
            bail!("`{name}` has shape {:?}, expected {dims:?}", view.shape);
        }
        if view.dtype != st::StDtype::F32 {
            bail!("`{name}` is {}, expected F32", view.dtype.name());
        }
        let numel: usize = dims.iter().product();
        let mut t = st::upload_on(self.device, &view, 1, numel)?;
        t.reshape_(dims)?;
        Ok(if self.dtype == Dtype::F32 {
            t
        } else {
            t.to_dtype(self.dtype)?
        })
    }

    fn norm(&self, prefix: &str, c: usize) -> anyhow::Result<Norm> {
        Ok(Norm {
            gamma: self.get(&format!("{prefix}.weight"), &[c])?,
            beta: self.get(&format!("{prefix}.bias"), &[c])?,
        })
    }

    fn linear(&self, prefix: &str, c_in: usize, c_out: usize) -> anyhow::Result<Linear> {
        Ok(Linear {
            w: self.get(&format!("{prefix}.weight"), &[c_out, c_in])?,
            b: self.get(&format!("{prefix}.bias"), &[c_out])?,
        })
    }

    /// A 3x3 convolution (padding 1), or a 1x1 one stored as `[C_out, C_in]`.
    fn conv(&self, prefix: &str, c_in: usize, c_out: usize, k: usize) -> anyhow::Result<Conv> {
        let name = format!("{prefix}.weight");
        let mut w = if k == 1 {
            self.get(&name, &[c_out, c_in])?
        } else {
            self.get(&name, &[c_out, c_in, k, k])?
        };
        w.reshape_(&[c_out, c_in, k, k])?;
        let mut spec = Conv2dSpec::new([k, k]);
        spec.padding = [k / 2, k / 2];
        Ok(Conv {
            w,
            b: self.get(&format!("{prefix}.bias"), &[c_out])?,
            spec,
        })
    }
}

/// GroupNorm's per-channel affine parameters.
struct Norm {
    gamma: Tensor,
    beta: Tensor,
}

/// A dense layer `y = x W^T + b`, `W [out, in]`.
struct Linear {
    w: Tensor,
    b: Tensor,
}

impl Linear {
    fn forward(&self, x: &Tensor) -> anyhow::Result<Tensor> {
        let mut y = Tensor::default();
        ops::linear_forward_batched(&self.w, Some(&self.b), x, &mut y)?;
        Ok(y)
    }
}

/// A convolution with bias.
struct Conv {
    w: Tensor,
    b: Tensor,
    spec: Conv2dSpec,
}

impl Conv {
    fn forward(&self, x: &Tensor) -> anyhow::Result<Tensor> {
        Ok(x.conv2d(&self.w, Some(&self.b), &self.spec)?)
    }
}

/// What a residual block does to the resolution.
#[derive(Clone, Copy, PartialEq)]
enum Resample {
    Keep,
    Down,
    Up,
}

/// A residual block with scale-shift conditioning.
struct ResBlock {
    c_out: usize,
    in_norm: Norm,
    in_conv: Conv,
    emb: Linear,
    out_norm: Norm,
    out_conv: Conv,
    skip: Option<Conv>,
    resample: Resample,
}

/// Self-attention over the positions of a feature map.
struct Attention {
    norm: Norm,
    qkv: Linear,
    proj: Linear,
}

/// One element of a UNet block's sequence.
enum Layer {
    Conv(Box<Conv>),
    Res(Box<ResBlock>),
    Attn(Box<Attention>),
}

/// The loaded UNet on one device, computing in its dtype (F32, or BF16 on GPUs that have
/// it; F16 overflows on this model's activations and is refused).
pub struct Terrain {
    device: Device,
    dtype: Dtype,
    groups: usize,
    head_channels: usize,
    /// Height and width must be multiples of it: 2^(levels - 1).
    multiple: usize,
    time_embed: [Linear; 2],
    label_emb: [Linear; 2],
    input_blocks: Vec<Vec<Layer>>,
    middle: Vec<Layer>,
    output_blocks: Vec<Vec<Layer>>,
    out_norm: Norm,
    out_conv: Conv,
}

/// A second handle on `t`'s elements (a view, no copy).
fn share(t: &Tensor) -> brotensor::Result<Tensor> {
    t.reshape(t.dims())
}

/// `x [B, C, H, W]` times `v [B, C]` per (sample, channel), or plus.
fn per_channel(x: &Tensor, v: &Tensor, add: bool) -> anyhow::Result<Tensor> {
    let (b, c) = (v.dims()[0], v.dims()[1]);
    let v = v.contiguous()?.reshape(&[b, c, 1, 1])?;
    Ok(if add { x.add(&v)? } else { x.mul(&v)? })
}

impl Terrain {
    /// Loads the converted weights (`terrain_unet.safetensors`) onto `device`, computing in
    /// `dtype`.
    pub fn load(path: &Path, device: Device, dtype: Dtype) -> anyhow::Result<Terrain> {
        if dtype == Dtype::F16 {
            bail!(
                "the terrain UNet does not run in F16: its residual stream reaches 3e10, past \
                 F16's 65504 (use f32, or bf16 on a GPU)"
            );
        }
        if !brotensor::supports_dtype(device, dtype)?
            || (device == Device::Cpu && dtype != Dtype::F32)
        {
            bail!("{device} does not compute in {dtype}");
        }
        let file =
            SafeTensors::open(path).with_context(|| format!("opening {}", path.display()))?;
        let hp = Hyper::read(&file)?;
        let ld = Loader {
            file: &file,
            device,
            dtype,
        };
        let mc = hp.model_channels;
        let res = |prefix: &str, c_in: usize, c_out: usize, resample| -> anyhow::Result<Layer> {
            let skip = if c_in == c_out {
                None
            } else {
                Some(ld.conv(&format!("{prefix}.skip_connection"), c_in, c_out, 1)?)
            };
            Ok(Layer::Res(Box::new(ResBlock {
                c_out,
                in_norm: ld.norm(&format!("{prefix}.in_layers.0"), c_in)?,
                in_conv: ld.conv(&format!("{prefix}.in_layers.2"), c_in, c_out, 3)?,
                emb: ld.linear(&format!("{prefix}.emb_layers.1"), EMB, 2 * c_out)?,
                out_norm: ld.norm(&format!("{prefix}.out_layers.0"), c_out)?,
                out_conv: ld.conv(&format!("{prefix}.out_layers.3"), c_out, c_out, 3)?,
                skip,
                resample,
            })))
        };
        let attn = |prefix: &str, c: usize| -> anyhow::Result<Layer> {
            if !c.is_multiple_of(hp.head_channels) || !c.is_multiple_of(hp.groups) {
                bail!(
                    "{prefix}: {c} channels do not split into heads of {}",
                    hp.head_channels
                );
            }
            Ok(Layer::Attn(Box::new(Attention {
                norm: ld.norm(&format!("{prefix}.norm"), c)?,
                qkv: ld.linear(&format!("{prefix}.qkv"), c, 3 * c)?,
                proj: ld.linear(&format!("{prefix}.proj_out"), c, c)?,
            })))
        };
        // guided-diffusion's UNetModel layout.
        let mut input_blocks = vec![vec![Layer::Conv(Box::new(ld.conv(
            "input_blocks.0.0",
            1,
            mc,
            3,
        )?))]];
        let mut pushed = vec![mc];
        let (mut ch, mut ds) = (mc, 1);
        let levels = hp.channel_mult.len();
        for (level, &mult) in hp.channel_mult.iter().enumerate() {
            for _ in 0..hp.num_res_blocks {
                let p = format!("input_blocks.{}", input_blocks.len());
                let mut layers = vec![res(&format!("{p}.0"), ch, mult * mc, Resample::Keep)?];
                ch = mult * mc;
                if hp.attention_ds.contains(&ds) {
                    layers.push(attn(&format!("{p}.1"), ch)?);
                }
                input_blocks.push(layers);
                pushed.push(ch);
            }
            if level + 1 < levels {
                let p = format!("input_blocks.{}.0", input_blocks.len());
                input_blocks.push(vec![res(&p, ch, ch, Resample::Down)?]);
                pushed.push(ch);
                ds *= 2;
            }
        }
        let middle = vec![
            res("middle_block.0", ch, ch, Resample::Keep)?,
            attn("middle_block.1", ch)?,
            res("middle_block.2", ch, ch, Resample::Keep)?,
        ];
        let mut output_blocks = Vec::new();
        for (level, &mult) in hp.channel_mult.iter().enumerate().rev() {
            for i in 0..=hp.num_res_blocks {
                let p = format!("output_blocks.{}", output_blocks.len());
                let skip_ch = pushed.pop().context("the encoder pushed too few outputs")?;
                let mut layers = vec![res(
                    &format!("{p}.0"),
                    ch + skip_ch,
                    mult * mc,
                    Resample::Keep,
                )?];
                ch = mult * mc;
                if hp.attention_ds.contains(&ds) {
                    layers.push(attn(&format!("{p}.1"), ch)?);
                }
                if level > 0 && i == hp.num_res_blocks {
                    let q = format!("{p}.{}", layers.len());
                    layers.push(res(&q, ch, ch, Resample::Up)?);
                    ds /= 2;
                }
                output_blocks.push(layers);
            }
        }
        Ok(Terrain {
            device,
            dtype,
            multiple: 1 << (levels - 1),
            groups: hp.groups,
            head_channels: hp.head_channels,
            time_embed: [
                ld.linear("time_embed.0", mc, EMB)?,
                ld.linear("time_embed.2", EMB, EMB)?,
            ],
            label_emb: [
                ld.linear("label_emb.0", 1, EMB)?,
                ld.linear("label_emb.2", EMB, EMB)?,
            ],
            input_blocks,
            middle,
            output_blocks,
            out_norm: ld.norm("out.0", ch)?,
            out_conv: ld.conv("out.2", ch, 1, 3)?,
        })
    }

    /// The device the model runs on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The dtype the UNet computes in.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// GroupNorm of `x [B, C, H, W]` with `norm`'s affine parameters.
    fn group_norm(&self, x: &Tensor, norm: &Norm) -> anyhow::Result<Tensor> {
        let d = x.dims();
        let mut y = Tensor::default();
        let dims = (d[0], d[1], d[2], d[3]);
        let rows = x.reshape(&[d[0], d[1] * d[2] * d[3]])?;
        ops::group_norm_forward(
            &rows,
            &norm.gamma,
            &norm.beta,
            dims,
            self.groups,
            GN_EPS,
            &mut y,
        )?;
        y.reshape_(d)?;
        Ok(y)
    }

    fn resblock(&self, x: &Tensor, e: &Tensor, r: &ResBlock) -> anyhow::Result<Tensor> {
        let mut h = self.group_norm(x, &r.in_norm)?;
        h.silu_()?;
        let resample = |t: &Tensor| -> anyhow::Result<Tensor> {
            let d = t.dims();
            let dims = (d[0], d[1], d[2], d[3]);
            let mut y = Tensor::default();
            let out = match r.resample {
                Resample::Keep => return Ok(share(t)?),
                Resample::Down => {
                    ops::downsample_avg_2x(t, dims, &mut y)?;
                    [d[0], d[1], d[2] / 2, d[3] / 2]
                }
                Resample::Up => {
                    ops::upsample_nearest_2x(t, dims, &mut y)?;
                    [d[0], d[1], d[2] * 2, d[3] * 2]
                }
            };
            y.reshape_(&out)?;
            Ok(y)
        };
        let (h, x) = (resample(&h)?, resample(x)?);
        let h = r.in_conv.forward(&h)?;
        // (scale, shift) per sample and channel; GN(h) (1 + scale) + shift.
        let s = r.emb.forward(e)?;
        let c = r.c_out;
        let one_plus = ops::add_scalar(&s.narrow(1, 0, c)?.contiguous()?, 1.0)?;
        let shift = s.narrow(1, c, c)?.contiguous()?;
        let mut h = if h.dims()[0] == 1 {
            // One sample: fold the modulation into GroupNorm's affine parameters.
            let gamma = r.out_norm.gamma.mul(&one_plus.reshape(&[c])?)?;
            let beta = r
                .out_norm
                .beta
                .mul(&one_plus.reshape(&[c])?)?
                .add(&shift.reshape(&[c])?)?;
            self.group_norm(&h, &Norm { gamma, beta })?
        } else {
            let n = self.group_norm(&h, &r.out_norm)?;
            per_channel(&per_channel(&n, &one_plus, false)?, &shift, true)?
        };
        h.silu_()?;
        let h = r.out_conv.forward(&h)?;
        let skip = match &r.skip {
            Some(conv) => conv.forward(&x)?,
            None => x,
        };
        Ok(h.add(&skip)?)
    }

    fn attention(&self, x: &Tensor, a: &Attention) -> anyhow::Result<Tensor> {
        let d = x.dims().to_vec();
        let (b, c, t) = (d[0], d[1], d[2] * d[3]);
        let n = self.group_norm(x, &a.norm)?;
        // Token rows: [B, C, T] -> [B T, C].
        let mut rows = ops::transpose(&n.reshape(&[b, c, t])?, &[0, 2, 1])?;
        rows.reshape_(&[b * t, c])?;
        let qkv = a.qkv.forward(&rows)?;
        let heads = c / self.head_channels;
        let mut outs = Vec::with_capacity(b);
        for s in 0..b {
            let sample = qkv.narrow(0, s * t, t)?;
            let mut o = Tensor::default();
            ops::flash_attention_forward(
                &sample.narrow(1, 0, c)?,
                &sample.narrow(1, c, c)?,
                &sample.narrow(1, 2 * c, c)?,
                None,
                heads,
                false,
                &mut o,
            )?;
            outs.push(o);
        }
        let o = if b == 1 {
            outs.pop().context("one sample")?
        } else {
            let parts: Vec<&Tensor> = outs.iter().collect();
            let mut all = Tensor::default();
            ops::concat_rows(&parts, &mut all)?;
            all.reshape_(&[b * t, c])?;
            all
        };
        let mut p = a.proj.forward(&o)?;
        p.reshape_(&[b, t, c])?;
        let mut p = ops::transpose(&p, &[0, 2, 1])?;
        p.reshape_(&d)?;
        Ok(x.add(&p)?)
    }

    fn run(&self, layers: &[Layer], x: Tensor, e: &Tensor) -> anyhow::Result<Tensor> {
        let mut h = x;
        for layer in layers {
            h = match layer {
                Layer::Conv(c) => c.forward(&h)?,
                Layer::Res(r) => self.resblock(&h, e, r)?,
                Layer::Attn(a) => self.attention(&h, a)?,
            };
        }
        Ok(h)
    }

    /// The conditioning `silu(time_embed(t) + label_emb(difficulty))`, `[B, 128]`.
    fn embedding(&self, sigma: &[f32], difficulty: &[f32]) -> anyhow::Result<Tensor> {
        let b = sigma.len();
        let t: Vec<f32> = sigma.iter().map(|s| C_NOISE * s.ln()).collect();
        let t = Tensor::from_slice_nd_on(self.device, &t, &[b])?;
        let mut temb = Tensor::default();
        ops::timestep_embedding(&t, self.time_embed[0].w.dims()[1], MAX_PERIOD, &mut temb)?;
        let temb = self.as_dtype(temb)?;
        let mut h = self.time_embed[0].forward(&temb)?;
        h.silu_()?;
        let time = self.time_embed[1].forward(&h)?;
        let d = self.as_dtype(Tensor::from_slice_nd_on(self.device, difficulty, &[b, 1])?)?;
        let mut h = self.label_emb[0].forward(&d)?;
        h.silu_()?;
        let mut e = time.add(&self.label_emb[1].forward(&h)?)?;
        e.silu_()?;
        Ok(e)
    }

    fn as_dtype(&self, t: Tensor) -> brotensor::Result<Tensor> {
        if t.dtype() == self.dtype {
            Ok(t)
        } else {
            t.to_dtype(self.dtype)
        }
    }

    /// The raw network output `F [B, 1, H, W]` (F32) for the scaled input `x [B, 1, H, W]`.
    fn unet(&self, x: &Tensor, sigma: &[f32], difficulty: &[f32]) -> anyhow::Result<Tensor> {
        let e = self.embedding(sigma, difficulty)?;
        let mut h = self.as_dtype(share(x)?)?;
        let mut skips = Vec::with_capacity(self.input_blocks.len());
        for block in &self.input_blocks {
            h = self.run(block, h, &e)?;
            skips.push(share(&h)?);
        }
        h = self.run(&self.middle, h, &e)?;
        for block in &self.output_blocks {
            let skip = skips
                .pop()
                .context("the decoder needs more encoder outputs")?;
            let (d, cs) = (h.dims().to_vec(), skip.dims()[1]);
            let mut cat = Tensor::default();
            ops::concat_nchw_channels(
                &[&h, &skip],
                (d[0], d[1] + cs, d[2], d[3]),
                &[d[1], cs],
                &mut cat,
            )?;
            cat.reshape_(&[d[0], d[1] + cs, d[2], d[3]])?;
            h = self.run(block, cat, &e)?;
        }
        let mut n = self.group_norm(&h, &self.out_norm)?;
        n.silu_()?;
        let f = self.out_conv.forward(&n)?;
        Ok(if f.dtype() == Dtype::F32 {
            f
        } else {
            f.to_dtype(Dtype::F32)?
        })
    }

    /// One evaluation of the denoiser: `denoised [B, 1, H, W]` (F32, in `[-1, 1]`) of
    /// `noisy [B, 1, H, W]` (F32, on the model's device, `H` and `W` multiples of 16 for this model's 5 levels) at
    /// noise levels `sigma` (`B` positive values) and difficulties `difficulty` (`B` values
    /// in `[0, 1]`: the package's `(d - 1) / 99` for a difficulty `d` in 1..=100).
    pub fn denoise(
        &self,
        noisy: &Tensor,
        sigma: &[f32],
        difficulty: &[f32],
    ) -> anyhow::Result<Tensor> {
        let (d, m) = (noisy.dims(), self.multiple);
        if d.len() != 4
            || d[1] != 1
            || !d[2].is_multiple_of(m)
            || !d[3].is_multiple_of(m)
            || d[2] == 0
            || d[3] == 0
        {
            bail!("terrain: noisy must be [B, 1, H, W] with H and W positive multiples of {m}, got {d:?}");
        }
        let b = d[0];
        if sigma.len() != b || difficulty.len() != b {
            bail!(
                "terrain: {b} samples need {b} sigmas and difficulties, got {} and {}",
                sigma.len(),
                difficulty.len()
            );
        }
        if let Some(s) = sigma.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            bail!("terrain: sigma must be positive and finite, got {s}");
        }
        if let Some(v) = difficulty.iter().find(|v| !v.is_finite()) {
            bail!("terrain: difficulty must be finite, got {v}");
        }
        let sd2 = SIGMA_DATA * SIGMA_DATA;
        let mut scales = [Vec::new(), Vec::new(), Vec::new()];
        for &s in sigma {
            let sub = s - SIGMA_MIN;
            let root = (s * s + sd2).sqrt();
            scales[0].push(1.0 / root);
            scales[1].push(sd2 * (1.0 / (sub * sub + sd2)));
            scales[2].push(sub * SIGMA_DATA / root);
        }
        let per_sample = |v: &[f32]| Tensor::from_slice_nd_on(self.device, v, &[b, 1, 1, 1]);
        let [c_in, c_skip, c_out] = [&scales[0], &scales[1], &scales[2]].map(|v| per_sample(v));
        let f = self.unet(&noisy.mul(&c_in?)?, sigma, difficulty)?;
        let mut y = f.mul(&c_out?)?.add(&noisy.mul(&c_skip?)?)?;
        y.clamp_(-1.0, 1.0)?;
        Ok(y)
    }

    /// `count` starting noises `[count, 1, side, side]` (F32, standard normals times
    /// [`SIGMA_MAX`]) from brotensor's counter-based generator with key `seed`: the same on
    /// every device.
    pub fn noise(&self, count: usize, side: usize, seed: u64) -> anyhow::Result<Tensor> {
        let mut z = Tensor::zeros_nd_on(self.device, &[count, 1, side, side], Dtype::F32)?;
        ops::randn(seed, 0, &mut z)?;
        z.mul_scalar_(SIGMA_MAX)?;
        Ok(z)
    }

    /// The package's difficulty input for an integer difficulty `d` in 1..=100.
    pub fn difficulty_input(d: u32) -> anyhow::Result<f32> {
        if !(1..=100).contains(&d) {
            bail!("terrain: difficulty must be in 1..=100, got {d}");
        }
        Ok((d - 1) as f32 / 99.0)
    }
}

/// A sampler that runs the denoiser over a decreasing sigma schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampler {
    /// First-order Euler steps on `d = (x - D(x)) / sigma` (`ops::euler_step`).
    Euler,
    /// DPM-Solver++ 2M (`ops::dpmpp_2m_step`), with Euler for the first step and for the
    /// last one when it ends at sigma 0, as k-diffusion runs it.
    Dpmpp2m,
}

/// Karras et al.'s schedule of `n` sigmas from `sigma_max` down to `sigma_min` with exponent
/// `rho` (k-diffusion's `get_sigmas_karras`), then a final 0: `n + 1` values, computed in
/// float64 and rounded once.
pub fn karras_sigmas(n: usize, sigma_min: f64, sigma_max: f64, rho: f64) -> Vec<f32> {
    let (a, b) = (sigma_max.powf(1.0 / rho), sigma_min.powf(1.0 / rho));
    let mut sigmas: Vec<f32> = (0..n)
        .map(|i| {
            let t = if n > 1 {
                i as f64 / (n - 1) as f64
            } else {
                0.0
            };
            (a + t * (b - a)).powf(rho) as f32
        })
        .collect();
    sigmas.push(0.0);
    sigmas
}

impl Terrain {
    /// Runs `sampler` from `x [B, 1, H, W]` (F32, noise at `sigmas[0]`) down the schedule
    /// `sigmas` (decreasing, the last one 0 or positive), the denoiser evaluated at every
    /// sigma but the last: the final sample, F32. `on_step(i, steps)` is called after each
    /// step, for progress.
    pub fn sample(
        &self,
        x: Tensor,
        sigmas: &[f32],
        difficulty: &[f32],
        sampler: Sampler,
        mut on_step: impl FnMut(usize, usize),
    ) -> anyhow::Result<Tensor> {
        if sigmas.len() < 2 {
            bail!(
                "terrain: a schedule needs at least two sigmas, got {}",
                sigmas.len()
            );
        }
        if sigmas.windows(2).any(|w| !(w[0] > w[1] && w[1] >= 0.0)) {
            bail!("terrain: sigmas must decrease to a value >= 0, got {sigmas:?}");
        }
        let b = x.dims().first().copied().unwrap_or(0);
        let steps = sigmas.len() - 1;
        let (mut x, mut x0_prev) = (x, None::<Tensor>);
        for i in 0..steps {
            let (s, next) = (sigmas[i], sigmas[i + 1]);
            let denoised = self.denoise(&x, &vec![s; b], difficulty)?;
            // The model's derivative d = (x - D) / sigma, the eps of the step ops.
            let eps = ops::div_scalar(&x.sub(&denoised)?, s)?;
            let mut out = Tensor::default();
            match (sampler, &x0_prev) {
                (Sampler::Dpmpp2m, Some(prev)) if next > 0.0 => {
                    let c = ops::Dpmpp2mCoefficients::new(sigmas[i - 1], s, next)?;
                    let mut x0 = Tensor::default();
                    ops::dpmpp_2m_step(&x, &eps, prev, s, c, &mut out, &mut x0)?;
                    x0_prev = Some(x0);
                }
                _ => {
                    ops::euler_step(&x, &eps, s, next, &mut out)?;
                    x0_prev = Some(denoised);
                }
            }
            x = out;
            on_step(i + 1, steps);
        }
        Ok(x)
    }
}

/// The height map in metres of one denoised sample (values in `[-1, 1]`), as the package's
/// generator makes it: `u = clip((x + 1) / 2, 0, 1)`, `h = 0.1 sinh(u asinh(221.69))`
/// clipped to `[0, 22.17]` m, minus its minimum.
pub fn height_map(denoised: &[f32]) -> Vec<f32> {
    let top = (HEIGHT_RANGE / ASINH_SCALE).asinh();
    let h: Vec<f32> = denoised
        .iter()
        .map(|&x| {
            let u = ((x + 1.0) * 0.5).clamp(0.0, 1.0);
            (ASINH_SCALE * (f64::from(u) * top).sinh()).clamp(0.0, HEIGHT_RANGE) as f32
        })
        .collect();
    let floor = h.iter().copied().fold(f32::INFINITY, f32::min);
    h.into_iter().map(|v| v - floor).collect()
}
