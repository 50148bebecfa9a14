//! PP-OCRv4 (as `rapidocr-onnxruntime` 1.4.4 ships it): the text detector, the
//! text-direction classifier and the text recogniser, written on brotensor's public API.
//!
//! Weights: the three ONNX graphs' Constant nodes, converted by
//! `scripts/ppocr_to_safetensors.py` under structured names with every batch norm folded into
//! the convolution before it; each layer's geometry (kernel, stride, padding, groups,
//! activation) and the squeeze-excite gates' slopes are in the file's metadata, which the
//! loaders here read.
//!
//! - [`Detector`] (PP-LCNetV3 backbone, RSE-FPN neck, DB head): `[N, 3, H, W]` (H, W
//!   multiples of 32, BGR normalised to `[-1, 1]`) to the text probability map `[N, 1, H,
//!   W]`. Backbone layers are convolution, a learnable scalar affine (folded into the
//!   convolution at load), hardswish and a second scalar affine; squeeze-excite gates use
//!   `hard_sigmoid`; the neck adds nearest-upsampled levels top-down; the head ends in two
//!   2x2 stride-2 transposed convolutions and a sigmoid.
//! - [`Classifier`] (MobileNetV3-small x0.35): `[N, 3, 48, 192]` to `[N, 2]` probabilities of
//!   upright and upside-down text.
//! - [`Recognizer`] (PP-LCNetV3 and an SVTR neck: two pre-norm attention blocks over the
//!   width positions): `[N, 3, 48, W]` to `[N, T, 6625]` per-step class probabilities, `T =
//!   W / 8` (rounded as the convolutions round), class 0 the CTC blank, 1..=6623 the
//!   characters of the file's `character` list, 6624 a space.
//!
//! [`crate::ocr`] runs the package's whole pipeline around them.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Context};
use brotensor::io::safetensors::{self as st, SafeTensors};
use brotensor::ops::{self, Conv2dSpec};
use brotensor::{Device, Dtype, Tensor};
use serde_json::Value;

/// A convolution's activation, as the metadata names it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Act {
    None,
    Relu,
    HardSwish,
    Sigmoid,
    Swish,
}

/// A convolution (or 2x2 transposed convolution) with its folded affine and activation.
struct ConvLayer {
    w: Tensor,
    b: Option<Tensor>,
    spec: Conv2dSpec,
    transpose: bool,
    act: Act,
    /// `(scale, bias)` applied after the activation (PP-LCNetV3's `act_lab`).
    after: Option<(f32, f32)>,
}

impl ConvLayer {
    fn forward(&self, x: &Tensor) -> anyhow::Result<Tensor> {
        let mut y = if self.transpose {
            x.conv_transpose2d(&self.w, self.b.as_ref(), &self.spec, [0, 0])?
        } else {
            x.conv2d(&self.w, self.b.as_ref(), &self.spec)?
        };
        match self.act {
            Act::None => {}
            Act::Relu => y.relu_()?,
            Act::HardSwish => y.hardswish_()?,
            Act::Sigmoid => y.sigmoid_()?,
            Act::Swish => y.silu_()?,
        }
        if let Some((s, b)) = self.after {
            y.mul_scalar_(s)?;
            y.add_scalar_(b)?;
        }
        Ok(y)
    }
}

/// A squeeze-excite gate: `x g` (or `x (1 + g)` when residual) with `g = hard_sigmoid(conv2(
/// relu(conv1(mean over H, W of x))))`.
struct SqueezeExcite {
    conv1: ConvLayer,
    conv2: ConvLayer,
    alpha: f32,
    beta: f32,
    residual: bool,
}

impl SqueezeExcite {
    fn forward(&self, x: &Tensor) -> anyhow::Result<Tensor> {
        let pooled = x.adaptive_avg_pool2d([1, 1])?;
        let mut g = self.conv2.forward(&self.conv1.forward(&pooled)?)?;
        g.hard_sigmoid_(self.alpha, self.beta)?;
        if self.residual {
            g.add_scalar_(1.0)?;
        }
        Ok(x.mul(&g)?)
    }
}

/// A dense layer `y = x W^T + b` (`W [out, in]`; the file stores `[in, out]`).
struct Dense {
    w: Tensor,
    b: Tensor,
}

impl Dense {
    fn forward(&self, x: &Tensor) -> anyhow::Result<Tensor> {
        let mut y = Tensor::default();
        ops::linear_forward_batched(&self.w, Some(&self.b), x, &mut y)?;
        Ok(y)
    }
}

/// A converted PP-OCR file: its tensors and the per-layer metadata.
struct Weights {
    file: SafeTensors,
    layers: HashMap<String, Value>,
    device: Device,
    dtype: Dtype,
}

impl Weights {
    fn open(path: &Path, kind: &str, device: Device, dtype: Dtype) -> anyhow::Result<Weights> {
        if !brotensor::supports_dtype(device, dtype)?
            || (device == Device::Cpu && dtype != Dtype::F32)
        {
            bail!("{device} does not compute in {dtype}");
        }
        let file =
            SafeTensors::open(path).with_context(|| format!("opening {}", path.display()))?;
        let meta = file.metadata();
        if meta.get("kind").map(String::as_str) != Some(kind) {
            bail!(
                "{} holds a PP-OCR `{}` model, expected `{kind}`",
                path.display(),
                meta.get("kind").map_or("?", String::as_str)
            );
        }
        let layers: HashMap<String, Value> = serde_json::from_str(
            meta.get("layers")
                .context("the weights' metadata has no `layers`")?,
        )
        .context("metadata `layers`")?;
        Ok(Weights {
            file,
            layers,
            device,
            dtype,
        })
    }

    fn has(&self, name: &str) -> bool {
        self.file.get(name).is_ok()
    }

    /// The F32 values of `name`, checked to have `dims`.
    fn host(&self, name: &str, dims: &[usize]) -> anyhow::Result<Vec<f32>> {
        let view = self.file.get(name)?;
        if view.shape != dims {
            bail!("`{name}` has shape {:?}, expected {dims:?}", view.shape);
        }
        if view.dtype != st::StDtype::F32 {
            bail!("`{name}` is {}, expected F32", view.dtype.name());
        }
        Ok(view
            .data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    fn upload(&self, values: &[f32], dims: &[usize]) -> anyhow::Result<Tensor> {
        let t = Tensor::from_slice_nd_on(self.device, values, dims)?;
        Ok(if self.dtype == Dtype::F32 {
            t
        } else {
            t.to_dtype(self.dtype)?
        })
    }

    /// One value of a one-element tensor.
    fn scalar(&self, name: &str) -> anyhow::Result<f32> {
        let view = self.file.get(name)?;
        if view.dtype != st::StDtype::F32 || view.data.len() != 4 {
            bail!("`{name}` is not one F32 value");
        }
        Ok(f32::from_le_bytes([
            view.data[0],
            view.data[1],
            view.data[2],
            view.data[3],
        ]))
    }

    fn meta(&self, name: &str) -> anyhow::Result<&Value> {
        self.layers
            .get(name)
            .with_context(|| format!("the metadata has no layer `{name}`"))
    }

    fn conv(&self, name: &str) -> anyhow::Result<ConvLayer> {
        let m = self.meta(name)?;
        let pair = |k: &str| -> anyhow::Result<[usize; 2]> {
            let v: Vec<usize> = m[k]
                .as_array()
                .and_then(|a| a.iter().map(|x| x.as_u64().map(|x| x as usize)).collect())
                .with_context(|| format!("`{name}`: metadata `{k}`"))?;
            match v[..] {
                [a, b] => Ok([a, b]),
                [t, l, b, r] if t == b && l == r => Ok([t, l]),
                _ => bail!("`{name}`: `{k}` = {v:?} is not symmetric"),
            }
        };
        let count = |k: &str| {
            m[k].as_u64()
                .map(|v| v as usize)
                .with_context(|| format!("`{name}`: metadata `{k}`"))
        };
        let transpose = match m["op"].as_str() {
            Some("Conv") => false,
            Some("ConvTranspose") => true,
            other => bail!("`{name}` is a {other:?}, not a convolution"),
        };
        let (c_in, c_out, groups) = (count("in")?, count("out")?, count("group")?);
        if groups == 0 || c_in % groups != 0 || c_out % groups != 0 {
            bail!("`{name}`: {groups} groups do not divide {c_in} -> {c_out} channels");
        }
        let mut spec = Conv2dSpec::new(pair("kernel")?);
        spec.stride = pair("stride")?;
        spec.padding = pair("pads")?;
        spec.groups = groups;
        let [kh, kw] = spec.kernel;
        let dims = if transpose {
            [c_in, c_out / groups, kh, kw]
        } else {
            [c_out, c_in / groups, kh, kw]
        };
        let mut w = self.host(&format!("{name}.weight"), &dims)?;
        let bias_name = format!("{name}.bias");
        let mut b = if self.has(&bias_name) {
            Some(self.host(&bias_name, &[c_out])?)
        } else {
            None
        };
        // The learnable affine after the convolution folds into it.
        if self.has(&format!("{name}.lab.scale")) {
            let s = f64::from(self.scalar(&format!("{name}.lab.scale"))?);
            let shift = f64::from(self.scalar(&format!("{name}.lab.bias"))?);
            w.iter_mut().for_each(|v| *v = (f64::from(*v) * s) as f32);
            let bias = b.get_or_insert_with(|| vec![0.0; c_out]);
            bias.iter_mut()
                .for_each(|v| *v = (f64::from(*v) * s + shift) as f32);
        }
        let act = match m["act"].as_str() {
            None => Act::None,
            Some("relu") => Act::Relu,
            Some("hardswish" | "hardswish+affine") => Act::HardSwish,
            Some("sigmoid") => Act::Sigmoid,
            Some("swish") => Act::Swish,
            Some(other) => bail!("`{name}`: unknown activation `{other}`"),
        };
        let after = if self.has(&format!("{name}.act_lab.scale")) {
            Some((
                self.scalar(&format!("{name}.act_lab.scale"))?,
                self.scalar(&format!("{name}.act_lab.bias"))?,
            ))
        } else {
            None
        };
        Ok(ConvLayer {
            w: self.upload(&w, &dims)?,
            b: b.map(|b| self.upload(&b, &[c_out])).transpose()?,
            spec,
            transpose,
            act,
            after,
        })
    }

    /// The squeeze-excite gate `name` (its convolutions `name.conv1`, `name.conv2`), if the
    /// model has one there.
    fn se(&self, name: &str) -> anyhow::Result<Option<SqueezeExcite>> {
        let Some(m) = self.layers.get(name) else {
            return Ok(None);
        };
        let num = |k: &str| {
            m[k].as_f64()
                .map(|v| v as f32)
                .with_context(|| format!("`{name}`: metadata `{k}`"))
        };
        // The gate's inner convolutions are plain 1x1 layers; relu after the first.
        let mut conv1 = self.conv(&format!("{name}.conv1"))?;
        conv1.act = Act::Relu;
        Ok(Some(SqueezeExcite {
            conv1,
            conv2: self.conv(&format!("{name}.conv2"))?,
            alpha: num("hardsigmoid_alpha")?,
            beta: num("hardsigmoid_beta")?,
            residual: m["residual"].as_bool().unwrap_or(false),
        }))
    }

    /// A dense layer stored `[in, out]`.
    fn dense(&self, name: &str) -> anyhow::Result<Dense> {
        let m = self.meta(name)?;
        let count = |k: &str| {
            m[k].as_u64()
                .map(|v| v as usize)
                .with_context(|| format!("`{name}`: metadata `{k}`"))
        };
        let (c_in, c_out) = (count("in")?, count("out")?);
        let w = self.host(&format!("{name}.weight"), &[c_in, c_out])?;
        let mut t = vec![0f32; w.len()];
        for (i, row) in w.chunks_exact(c_out).enumerate() {
            for (o, v) in row.iter().enumerate() {
                t[o * c_in + i] = *v;
            }
        }
        Ok(Dense {
            w: self.upload(&t, &[c_out, c_in])?,
            b: self.upload(&self.host(&format!("{name}.bias"), &[c_out])?, &[c_out])?,
        })
    }

    fn layer_norm(&self, name: &str) -> anyhow::Result<(Tensor, Tensor, f32)> {
        let m = self.meta(name)?;
        let c = m["dim"]
            .as_u64()
            .with_context(|| format!("`{name}`: metadata `dim`"))? as usize;
        let eps = m["eps"]
            .as_f64()
            .with_context(|| format!("`{name}`: metadata `eps`"))? as f32;
        let gamma = self.upload(&self.host(&format!("{name}.weight"), &[c])?, &[c])?;
        let beta = self.upload(&self.host(&format!("{name}.bias"), &[c])?, &[c])?;
        Ok((gamma, beta, eps))
    }
}

/// One PP-LCNetV3 block: depthwise layer, optional squeeze-excite, pointwise layer.
struct LcBlock {
    dw: ConvLayer,
    se: Option<SqueezeExcite>,
    pw: ConvLayer,
}

impl LcBlock {
    fn forward(&self, x: &Tensor) -> anyhow::Result<Tensor> {
        let mut h = self.dw.forward(x)?;
        if let Some(se) = &self.se {
            h = se.forward(&h)?;
        }
        self.pw.forward(&h)
    }
}

/// The PP-LCNetV3 backbone blocks `backbone.blocks.0..` of a detector or recogniser.
fn lc_blocks(w: &Weights) -> anyhow::Result<Vec<LcBlock>> {
    let mut blocks = Vec::new();
    while w
        .layers
        .contains_key(&format!("backbone.blocks.{}.dw", blocks.len()))
    {
        let p = format!("backbone.blocks.{}", blocks.len());
        blocks.push(LcBlock {
            dw: w.conv(&format!("{p}.dw"))?,
            se: w.se(&format!("{p}.se"))?,
            pw: w.conv(&format!("{p}.pw"))?,
        });
    }
    if blocks.is_empty() {
        bail!("the weights have no backbone blocks");
    }
    Ok(blocks)
}

/// `x` in `dtype` (itself when it already is).
fn as_dtype(x: &Tensor, dtype: Dtype) -> brotensor::Result<Tensor> {
    if x.dtype() == dtype {
        x.reshape(x.dims())
    } else {
        x.to_dtype(dtype)
    }
}

/// Checks an input batch `[N, 3, H, W]` (F32) and returns its dims.
fn check_input(what: &str, x: &Tensor) -> anyhow::Result<[usize; 4]> {
    match *x.dims() {
        [n, 3, h, w] if x.dtype() == Dtype::F32 => Ok([n, 3, h, w]),
        _ => bail!(
            "{what}: input must be F32 [N, 3, H, W], got {} {:?}",
            x.dtype(),
            x.dims()
        ),
    }
}

/// The PP-OCRv4 text detector.
pub struct Detector {
    dtype: Dtype,
    conv1: ConvLayer,
    blocks: Vec<LcBlock>,
    /// Backbone blocks whose outputs feed the neck, finest first.
    taps: Vec<usize>,
    out_convs: Vec<ConvLayer>,
    /// Per level: the 1x1 and 3x3 convolutions of the neck with their residual gates.
    ins: Vec<(ConvLayer, SqueezeExcite)>,
    inp: Vec<(ConvLayer, SqueezeExcite)>,
    head: [ConvLayer; 3],
}

impl Detector {
    /// Loads `det.safetensors` onto `device`, computing in `dtype`.
    pub fn load(path: &Path, device: Device, dtype: Dtype) -> anyhow::Result<Detector> {
        let w = Weights::open(path, "det", device, dtype)?;
        let structure: Value = serde_json::from_str(
            w.file
                .metadata()
                .get("structure")
                .context("the weights' metadata has no `structure`")?,
        )?;
        let taps: Vec<usize> = structure["taps"]["blocks"]
            .as_array()
            .and_then(|a| a.iter().map(|v| v.as_u64().map(|v| v as usize)).collect())
            .context("metadata `structure.taps.blocks`")?;
        let gated = |name: &str| -> anyhow::Result<(ConvLayer, SqueezeExcite)> {
            let se = w
                .se(&format!("{name}.se"))?
                .with_context(|| format!("`{name}` has no gate"))?;
            Ok((w.conv(&format!("{name}.conv"))?, se))
        };
        let blocks = lc_blocks(&w)?;
        if taps.is_empty()
            || taps.len() > 6
            || taps.windows(2).any(|w| w[0] >= w[1])
            || taps.iter().any(|&t| t >= blocks.len())
        {
            bail!(
                "the neck taps {taps:?} must be 1 to 6 increasing blocks below {}",
                blocks.len()
            );
        }
        let levels = 0..taps.len();
        Ok(Detector {
            dtype,
            conv1: w.conv("backbone.conv1")?,
            out_convs: levels
                .clone()
                .map(|k| w.conv(&format!("backbone.out_convs.{k}")))
                .collect::<anyhow::Result<_>>()?,
            ins: levels
                .clone()
                .map(|k| gated(&format!("neck.ins_conv.{k}")))
                .collect::<anyhow::Result<_>>()?,
            inp: levels
                .map(|k| gated(&format!("neck.inp_conv.{k}")))
                .collect::<anyhow::Result<_>>()?,
            blocks,
            taps,
            head: [
                w.conv("head.conv1")?,
                w.conv("head.conv2")?,
                w.conv("head.conv3")?,
            ],
        })
    }

    /// The text probability map `[N, 1, H, W]` (F32) of a normalised BGR batch `[N, 3, H,
    /// W]` (F32, `H` and `W` multiples of 32).
    pub fn forward(&self, x: &Tensor) -> anyhow::Result<Tensor> {
        let [_, _, h, w] = check_input("ppocr detector", x)?;
        let levels = self.taps.len();
        let stride = 1usize << (levels + 1);
        if h == 0 || w == 0 || h % stride != 0 || w % stride != 0 {
            bail!("ppocr detector: H and W must be positive multiples of {stride}, got {h} x {w}");
        }
        let mut t = self.conv1.forward(&as_dtype(x, self.dtype)?)?;
        let mut features = Vec::with_capacity(levels);
        for (i, block) in self.blocks.iter().enumerate() {
            t = block.forward(&t)?;
            if self.taps.contains(&i) {
                features.push(t.reshape(t.dims())?);
            }
        }
        // in_k, then top-down sums: t_k = in_k + up2(t_{k+1}).
        let mut sums: Vec<Tensor> = Vec::with_capacity(levels);
        for k in (0..levels).rev() {
            let (conv, se) = &self.ins[k];
            let y = se.forward(&conv.forward(&self.out_convs[k].forward(&features[k])?)?)?;
            let y = match sums.last() {
                Some(coarser) => y.add(&coarser.upsample_nearest2d(2)?)?,
                None => y,
            };
            sums.push(y);
        }
        sums.reverse();
        // p_k, upsampled to the finest level, coarsest first on the channel axis.
        let mut parts = Vec::with_capacity(levels);
        for k in (0..levels).rev() {
            let (conv, se) = &self.inp[k];
            let p = se.forward(&conv.forward(&sums[k])?)?;
            parts.push(if k == 0 {
                p
            } else {
                p.upsample_nearest2d(1 << k)?
            });
        }
        let d = parts[0].dims().to_vec();
        let counts: Vec<usize> = parts.iter().map(|p| p.dims()[1]).collect();
        let c: usize = counts.iter().sum();
        let refs: Vec<&Tensor> = parts.iter().collect();
        let mut cat = Tensor::default();
        ops::concat_nchw_channels(&refs, (d[0], c, d[2], d[3]), &counts, &mut cat)?;
        cat.reshape_(&[d[0], c, d[2], d[3]])?;
        let mut y = cat;
        for layer in &self.head {
            y = layer.forward(&y)?;
        }
        Ok(as_dtype(&y, Dtype::F32)?)
    }
}

/// The text-direction classifier (upright or turned 180 degrees).
pub struct Classifier {
    dtype: Dtype,
    conv1: ConvLayer,
    /// Expand, depthwise, optional gate, project, and whether the input is added back.
    blocks: Vec<(ConvLayer, ConvLayer, Option<SqueezeExcite>, ConvLayer, bool)>,
    conv2: ConvLayer,
    fc: Dense,
}

impl Classifier {
    /// Loads `cls.safetensors` onto `device`, computing in `dtype`.
    pub fn load(path: &Path, device: Device, dtype: Dtype) -> anyhow::Result<Classifier> {
        let w = Weights::open(path, "cls", device, dtype)?;
        let mut blocks = Vec::new();
        while w
            .layers
            .contains_key(&format!("backbone.blocks.{}.dw", blocks.len()))
        {
            let p = format!("backbone.blocks.{}", blocks.len());
            let meta = |l: &str| w.meta(&format!("{p}.{l}"));
            let c_in = meta("expand")?["in"].as_u64().context("in")?;
            let c_out = meta("linear")?["out"].as_u64().context("out")?;
            let unit_stride = meta("dw")?["stride"] == serde_json::json!([1, 1]);
            blocks.push((
                w.conv(&format!("{p}.expand"))?,
                w.conv(&format!("{p}.dw"))?,
                w.se(&format!("{p}.se"))?,
                w.conv(&format!("{p}.linear"))?,
                c_in == c_out && unit_stride,
            ));
        }
        Ok(Classifier {
            dtype,
            conv1: w.conv("backbone.conv1")?,
            blocks,
            conv2: w.conv("backbone.conv2")?,
            fc: w.dense("head.fc")?,
        })
    }

    /// `[N, 2]` probabilities (upright, upside down) of a normalised BGR batch `[N, 3, 48,
    /// 192]` (F32).
    pub fn forward(&self, x: &Tensor) -> anyhow::Result<Tensor> {
        let [n, _, h, w] = check_input("ppocr classifier", x)?;
        if h != 48 || w < 8 {
            bail!(
                "ppocr classifier: input must be 48 pixels high and at least 8 wide, got {h} x {w}"
            );
        }
        let mut t = self.conv1.forward(&as_dtype(x, self.dtype)?)?;
        for (expand, dw, se, linear, residual) in &self.blocks {
            let mut h = dw.forward(&expand.forward(&t)?)?;
            if let Some(se) = se {
                h = se.forward(&h)?;
            }
            let h = linear.forward(&h)?;
            t = if *residual { h.add(&t)? } else { h };
        }
        let t = self.conv2.forward(&t)?;
        let pooled = t.max_pool2d(&ops::Pool2dSpec::new([2, 2]))?;
        let mut g = pooled.adaptive_avg_pool2d([1, 1])?;
        let c = g.dims()[1];
        g.reshape_(&[n, c])?;
        let logits = self.fc.forward(&g)?;
        Ok(as_dtype(&logits, Dtype::F32)?.softmax(1)?)
    }
}

/// One pre-norm SVTR block: attention and an MLP, each added back.
struct SvtrBlock {
    norm1: (Tensor, Tensor, f32),
    qkv: Dense,
    proj: Dense,
    norm2: (Tensor, Tensor, f32),
    fc1: Dense,
    fc2: Dense,
}

/// The PP-OCRv4 text recogniser.
pub struct Recognizer {
    dtype: Dtype,
    conv1: ConvLayer,
    blocks: Vec<LcBlock>,
    neck_conv1: ConvLayer,
    neck_conv2: ConvLayer,
    svtr: Vec<SvtrBlock>,
    norm: (Tensor, Tensor, f32),
    neck_conv3: ConvLayer,
    neck_conv4: ConvLayer,
    neck_conv1x1: ConvLayer,
    heads: usize,
    fc: Dense,
    /// Class `i` (1-based) is `characters[i - 1]`; the last class is a space.
    characters: Vec<String>,
}

impl Recognizer {
    /// Loads `rec.safetensors` onto `device`, computing in `dtype`.
    pub fn load(path: &Path, device: Device, dtype: Dtype) -> anyhow::Result<Recognizer> {
        let w = Weights::open(path, "rec", device, dtype)?;
        let meta = w.file.metadata();
        let structure: Value = serde_json::from_str(
            meta.get("structure")
                .context("the weights' metadata has no `structure`")?,
        )?;
        let characters: Vec<String> = meta
            .get("character")
            .context("the weights' metadata has no `character` list")?
            .split('\n')
            .map(String::from)
            .collect();
        let heads = structure["num_heads"].as_u64().context("num_heads")? as usize;
        let depth = structure["depth"].as_u64().context("depth")? as usize;
        let classes = structure["num_classes"].as_u64().context("num_classes")? as usize;
        if classes != characters.len() + 2 {
            bail!(
                "{classes} classes do not fit {} characters plus blank and space",
                characters.len()
            );
        }
        let convs = |name: &str, act: Act| -> anyhow::Result<ConvLayer> {
            let mut c = w.conv(name)?;
            c.act = act;
            Ok(c)
        };
        let svtr = (0..depth)
            .map(|i| -> anyhow::Result<SvtrBlock> {
                let p = format!("neck.blocks.{i}");
                Ok(SvtrBlock {
                    norm1: w.layer_norm(&format!("{p}.norm1"))?,
                    qkv: w.dense(&format!("{p}.attn.qkv"))?,
                    proj: w.dense(&format!("{p}.attn.proj"))?,
                    norm2: w.layer_norm(&format!("{p}.norm2"))?,
                    fc1: w.dense(&format!("{p}.mlp.fc1"))?,
                    fc2: w.dense(&format!("{p}.mlp.fc2"))?,
                })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Recognizer {
            dtype,
            conv1: convs("backbone.conv1", Act::None)?,
            neck_conv1: convs("neck.conv1", Act::Swish)?,
            neck_conv2: convs("neck.conv2", Act::Swish)?,
            neck_conv3: convs("neck.conv3", Act::Swish)?,
            neck_conv4: convs("neck.conv4", Act::Swish)?,
            neck_conv1x1: convs("neck.conv1x1", Act::Swish)?,
            blocks: lc_blocks(&w)?,
            svtr,
            norm: w.layer_norm("neck.norm")?,
            heads,
            fc: w.dense("head.fc")?,
            characters,
        })
    }

    /// The text of class `id` (0, the blank, has none; the last class is a space).
    pub fn character(&self, id: usize) -> &str {
        match id {
            0 => "",
            i if i <= self.characters.len() => &self.characters[i - 1],
            _ => " ",
        }
    }

    /// The number of classes (blank, characters, space).
    pub fn classes(&self) -> usize {
        self.characters.len() + 2
    }

    /// `[N, T, classes]` per-step probabilities (F32) of a normalised BGR batch `[N, 3, 48,
    /// W]` (F32).
    pub fn forward(&self, x: &Tensor) -> anyhow::Result<Tensor> {
        let [n, _, h, w] = check_input("ppocr recognizer", x)?;
        if h != 48 || w < 8 {
            bail!(
                "ppocr recognizer: input must be 48 pixels high and at least 8 wide, got {h} x {w}"
            );
        }
        let mut t = self.conv1.forward(&as_dtype(x, self.dtype)?)?;
        for block in &self.blocks {
            t = block.forward(&t)?;
        }
        // Average pool 3x2, stride 3x2, rounding the width down: an odd width drops its last
        // column, then the pool is exact 2-column bins over the 3 rows.
        let (c, width) = (t.dims()[1], t.dims()[3]);
        let steps = width / 2;
        if t.dims()[2] != 3 || steps == 0 {
            bail!("ppocr recognizer: the backbone gave {:?}", t.dims());
        }
        let even = t.narrow(3, 0, 2 * steps)?.contiguous()?;
        let pooled = even.adaptive_avg_pool2d([1, steps])?;
        let z = self
            .neck_conv2
            .forward(&self.neck_conv1.forward(&pooled)?)?;
        let dim = z.dims()[1];
        // Tokens [N T, dim].
        let mut tokens = ops::transpose(&z.reshape(&[n, dim, steps])?, &[0, 2, 1])?;
        tokens.reshape_(&[n * steps, dim])?;
        for block in &self.svtr {
            tokens = self.svtr_block(&tokens, block, n, steps)?;
        }
        let (g, b, eps) = &self.norm;
        let tokens = tokens.layer_norm(g, b, *eps)?;
        let mut z = ops::transpose(&tokens.reshape(&[n, steps, dim])?, &[0, 2, 1])?;
        z.reshape_(&[n, dim, 1, steps])?;
        let z = self.neck_conv3.forward(&z)?;
        let mut cat = Tensor::default();
        let c3 = z.dims()[1];
        ops::concat_nchw_channels(&[&pooled, &z], (n, c + c3, 1, steps), &[c, c3], &mut cat)?;
        cat.reshape_(&[n, c + c3, 1, steps])?;
        let z = self.neck_conv1x1.forward(&self.neck_conv4.forward(&cat)?)?;
        let out = z.dims()[1];
        let mut feats = ops::transpose(&z.reshape(&[n, out, steps])?, &[0, 2, 1])?;
        feats.reshape_(&[n * steps, out])?;
        let logits = as_dtype(&self.fc.forward(&feats)?, Dtype::F32)?;
        let mut probs = logits.softmax(1)?;
        probs.reshape_(&[n, steps, self.classes()])?;
        Ok(probs)
    }

    fn svtr_block(
        &self,
        x: &Tensor,
        b: &SvtrBlock,
        n: usize,
        steps: usize,
    ) -> anyhow::Result<Tensor> {
        let dim = x.dims()[1];
        let (g, beta, eps) = &b.norm1;
        let qkv = b.qkv.forward(&x.layer_norm(g, beta, *eps)?)?;
        let mut outs = Vec::with_capacity(n);
        for s in 0..n {
            let rows = qkv.narrow(0, s * steps, steps)?;
            let mut o = Tensor::default();
            ops::flash_attention_forward(
                &rows.narrow(1, 0, dim)?,
                &rows.narrow(1, dim, dim)?,
                &rows.narrow(1, 2 * dim, dim)?,
                None,
                self.heads,
                false,
                &mut o,
            )?;
            outs.push(o);
        }
        let attn = if n == 1 {
            outs.pop().context("one sample")?
        } else {
            let parts: Vec<&Tensor> = outs.iter().collect();
            let mut all = Tensor::default();
            ops::concat_rows(&parts, &mut all)?;
            all.reshape_(&[n * steps, dim])?;
            all
        };
        let x = x.add(&b.proj.forward(&attn)?)?;
        let (g, beta, eps) = &b.norm2;
        let mut hidden = b.fc1.forward(&x.layer_norm(g, beta, *eps)?)?;
        hidden.silu_()?;
        Ok(x.add(&b.fc2.forward(&hidden)?)?)
    }
}
