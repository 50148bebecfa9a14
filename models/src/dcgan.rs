//! A DCGAN face generator (the `gan-face-generate` 1.1.1 wheel's `netG`, trained on
//! DigiFace-1M): 100 standard-normal numbers per image to a 64 x 64 RGB face.
//!
//! The network is PyTorch's DCGAN tutorial generator with 64 base feature maps: five 4 x 4
//! transposed convolutions without bias (`100 -> 512` at stride 1 without padding, giving
//! 4 x 4; then `512 -> 256 -> 128 -> 64 -> 3` at stride 2 padding 1, doubling the size each
//! time), the first four followed by an inference batch norm (epsilon 1e-5) and a ReLU, the
//! last by a tanh, so pixels lie in `[-1, 1]`.
//!
//! Each batch norm is folded into the transposed convolution in front of it at load time (in
//! float64, rounded once to the model's dtype): output channel `o` of the weight `[C_in,
//! C_out, 4, 4]` is scaled by `gamma[o] / sqrt(var[o] + eps)` and gets the bias `beta[o] -
//! mean[o] gamma[o] / sqrt(var[o] + eps)`. The forward is then five `conv_transpose2d` calls
//! with ReLUs and a tanh.

use std::path::Path;

use anyhow::{bail, Context};
use brotensor::io::safetensors::{self as st, SafeTensors};
use brotensor::ops::{self, Conv2dSpec};
use brotensor::{Device, Dtype, Tensor};

/// The length of one latent vector.
pub const LATENT: usize = 100;
/// The side of a generated image.
pub const SIDE: usize = 64;
/// The output channels of the five layers.
const CHANNELS: [usize; 5] = [512, 256, 128, 64, 3];
/// The batch norms' epsilon (PyTorch's default).
const BN_EPS: f64 = 1e-5;
/// Checkpoint index of each transposed convolution (`main.<i>.weight`) and of the batch norm
/// after it (`main.<i + 1>.*`), in PyTorch's `Sequential` numbering.
const LAYER_INDEX: [usize; 5] = [0, 3, 6, 9, 12];

/// One transposed convolution with its folded batch norm.
struct Layer {
    /// `[C_in, C_out, 4, 4]`.
    w: Tensor,
    /// `C_out` values, or none for the last layer.
    b: Option<Tensor>,
    spec: Conv2dSpec,
}

/// The loaded generator on one device, computing in its dtype (F32, or F16 / BF16 on GPUs).
pub struct DcGan {
    device: Device,
    dtype: Dtype,
    layers: Vec<Layer>,
}

/// The F32 values of `name`, checked to have exactly `dims`.
fn host(file: &SafeTensors, name: &str, dims: &[usize]) -> anyhow::Result<Vec<f32>> {
    let view = file.get(name)?;
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

/// Scales output channel `o` of a transposed-convolution weight `[C_in, C_out, k, k]` by
/// `scale[o]`, in float64.
fn scale_output_channels(w: &mut [f32], c_out: usize, taps: usize, scale: &[f64]) {
    for (i, v) in w.iter_mut().enumerate() {
        let o = (i / taps) % c_out;
        *v = (f64::from(*v) * scale[o]) as f32;
    }
}

impl DcGan {
    /// Loads the converted checkpoint (`generator.safetensors`: the state dict under its
    /// PyTorch names) onto `device`, computing in `dtype`.
    pub fn load(path: &Path, device: Device, dtype: Dtype) -> anyhow::Result<DcGan> {
        if !brotensor::supports_dtype(device, dtype)?
            || (device == Device::Cpu && dtype != Dtype::F32)
        {
            bail!("{device} does not compute in {dtype}");
        }
        let file =
            SafeTensors::open(path).with_context(|| format!("opening {}", path.display()))?;
        let mut layers = Vec::with_capacity(CHANNELS.len());
        let mut c_in = LATENT;
        for (l, (&c_out, &index)) in CHANNELS.iter().zip(&LAYER_INDEX).enumerate() {
            let dims = [c_in, c_out, 4, 4];
            let mut w = host(&file, &format!("main.{index}.weight"), &dims)?;
            let b = if l + 1 < CHANNELS.len() {
                let part = |p: &str| host(&file, &format!("main.{}.{p}", index + 1), &[c_out]);
                let (gamma, beta) = (part("weight")?, part("bias")?);
                let (mean, var) = (part("running_mean")?, part("running_var")?);
                let scale: Vec<f64> = (0..c_out)
                    .map(|o| f64::from(gamma[o]) / (f64::from(var[o]) + BN_EPS).sqrt())
                    .collect();
                scale_output_channels(&mut w, c_out, 16, &scale);
                let bias: Vec<f32> = (0..c_out)
                    .map(|o| (f64::from(beta[o]) - f64::from(mean[o]) * scale[o]) as f32)
                    .collect();
                Some(Tensor::from_slice_nd_on(device, &bias, &[c_out])?.to_dtype(dtype)?)
            } else {
                None
            };
            let mut spec = Conv2dSpec::new([4, 4]);
            if l > 0 {
                spec.stride = [2, 2];
                spec.padding = [1, 1];
            }
            layers.push(Layer {
                w: Tensor::from_slice_nd_on(device, &w, &dims)?.to_dtype(dtype)?,
                b,
                spec,
            });
            c_in = c_out;
        }
        Ok(DcGan {
            device,
            dtype,
            layers,
        })
    }

    /// The device the model runs on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The dtype the model computes in.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// `batch` latent vectors `[batch, 100]` (F32) on the model's device: standard normals
    /// from brotensor's counter-based generator with key `seed`, so a seed gives the same
    /// faces on every device.
    pub fn noise(&self, batch: usize, seed: u64) -> anyhow::Result<Tensor> {
        let mut z = Tensor::zeros_nd_on(self.device, &[batch, LATENT], Dtype::F32)?;
        ops::randn(seed, 0, &mut z)?;
        Ok(z)
    }

    /// The faces `[B, 3, 64, 64]` (F32, RGB in `[-1, 1]`) of the latent vectors `z [B, 100]`
    /// (F32, on the model's device).
    pub fn generate(&self, z: &Tensor) -> anyhow::Result<Tensor> {
        if z.dims().len() != 2 || z.dims()[1] != LATENT {
            bail!("dcgan: z must be [B, {LATENT}], got {:?}", z.dims());
        }
        let batch = z.dims()[0];
        let mut x = z.reshape(&[batch, LATENT, 1, 1])?;
        if self.dtype != Dtype::F32 {
            x = x.to_dtype(self.dtype)?;
        }
        for (l, layer) in self.layers.iter().enumerate() {
            x = x.conv_transpose2d(&layer.w, layer.b.as_ref(), &layer.spec, [0, 0])?;
            if l + 1 < self.layers.len() {
                x.relu_()?;
            } else {
                x.tanh_()?;
            }
        }
        if self.dtype != Dtype::F32 {
            x = x.to_dtype(Dtype::F32)?;
        }
        Ok(x)
    }
}

/// Lays out faces `[B, 3, 64, 64]` (values in `[-1, 1]`) as a `[3, H, W]` grid image with
/// values in `[0, 1]`, `cols` faces per row and a 2-pixel white border around each, ready
/// for `brotensor::io::image::save_png`.
pub fn grid(faces: &Tensor, cols: usize) -> anyhow::Result<Tensor> {
    let dims = faces.dims();
    if dims.len() != 4 || dims[1] != 3 || dims[2] != SIDE || dims[3] != SIDE {
        bail!("dcgan grid: faces must be [B, 3, {SIDE}, {SIDE}], got {dims:?}");
    }
    let (batch, cols) = (dims[0], cols.max(1));
    let rows = batch.div_ceil(cols);
    const PAD: usize = 2;
    let cell = SIDE + PAD;
    let (h, w) = (rows * cell + PAD, cols.min(batch.max(1)) * cell + PAD);
    let px = faces.to_vec::<f32>()?;
    let mut out = vec![1.0f32; 3 * h * w];
    for b in 0..batch {
        let (top, left) = (PAD + (b / cols) * cell, PAD + (b % cols) * cell);
        for c in 0..3 {
            for y in 0..SIDE {
                let src = &px[((b * 3 + c) * SIDE + y) * SIDE..][..SIDE];
                let dst = &mut out[(c * h + top + y) * w + left..][..SIDE];
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = ((s + 1.0) * 0.5).clamp(0.0, 1.0);
                }
            }
        }
    }
    Ok(Tensor::from_slice_nd_on(Device::Cpu, &out, &[3, h, w])?)
}
