//! The image-space category: the separable resample (every interpolation and average pool)
//! and its adjoint, the two non-separable upsamplers, unfold / padding and the padding's
//! adjoint, max pooling with indices and its gradient, the masked row mean, and image
//! input. Planes are NCHW `H x W` blocks, `planes = N*C` of them.

use super::OnDevice;
use crate::{Error, Result, Tensor};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) use brotensor_cpu::pad::PadMode;
pub(crate) use brotensor_cpu::pad::Unfold2d;
pub(crate) use brotensor_cpu::pooling::MaxPool2d;
pub(crate) use brotensor_cpu::resize::{AxisAdjoint, AxisTable};

fn missing(op: &'static str, be: &(impl OnDevice + ?Sized)) -> Error {
    Error::NotImplemented {
        op,
        device: be.device(),
    }
}

/// Image-space ops. Callers guarantee: tensors on this device, dense, of the lengths the
/// geometry gives, float inputs in one dtype (masks F32, indices I32), outputs committed
/// and sized.
pub(crate) trait ImageSpaceOps: OnDevice {
    /// `y = A_h x A_w^T` per plane (`rows`, `cols`: the tables of H and W), overwritten.
    fn resample(
        &self,
        name: &'static str,
        _tables: (&AxisTable, &AxisTable),
        _x: &Tensor,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `dx = A_h^T dy A_w` per plane (the transposed tables, and the output `[H_out,
    /// W_out]` `dy` has), overwritten.
    fn resample_backward(
        &self,
        name: &'static str,
        _tables: (&AxisAdjoint, &AxisAdjoint),
        _out: [usize; 2],
        _dy: &Tensor,
        _dx: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// RAFT's convex upsample by `k`; `dims` = `(N, C, H, W)` of `x`, `mask` `(N, 9 k^2, H,
    /// W)`.
    fn convex_upsample(
        &self,
        name: &'static str,
        _dims: (usize, usize, usize, usize),
        _k: usize,
        _x: &Tensor,
        _mask: &Tensor,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// The DC-AE 2x channel-to-space upsample of `x` (`dims` = `(N, C_in, H, W)`) to
    /// `c_out` channels.
    fn pixel_shuffle_upsample_2x(
        &self,
        name: &'static str,
        _dims: (usize, usize, usize, usize),
        _c_out: usize,
        _x: &Tensor,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// The unfold `g` (output `out`, checked) of every plane of `x`, overwritten.
    fn unfold2d(
        &self,
        name: &'static str,
        _g: &Unfold2d,
        _out: [usize; 2],
        _x: &Tensor,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// The adjoint of the padding `g` (a one-tap unfold) of every plane, overwritten.
    fn pad2d_backward(
        &self,
        name: &'static str,
        _g: &Unfold2d,
        _dy: &Tensor,
        _dx: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// Max pool `g` of every plane: `y` and the I32 `idx`, overwritten.
    fn max_pool2d(
        &self,
        name: &'static str,
        _g: &MaxPool2d,
        _x: &Tensor,
        _y: &mut Tensor,
        _idx: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// The gradient of max pool `g` from `dy` and the forward's `idx`, overwritten.
    fn max_pool2d_backward(
        &self,
        name: &'static str,
        _g: &MaxPool2d,
        _dy: &Tensor,
        _idx: &Tensor,
        _dx: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// The masked mean over the `k_rows` rows of `src` (`(K, D)`) into `dst` (`D`), or with
    /// `backward` its gradient (`dst` `(K, D)` from `src` `D`); `mask`: `K` F32 values.
    fn masked_mean_pool(
        &self,
        name: &'static str,
        _sizes: (usize, usize),
        _backward: bool,
        _src: &Tensor,
        _mask: Option<&Tensor>,
        _dst: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `y = (x - mean[c]) / std[c]` over `(N, C, plane)`.
    fn image_normalize(
        &self,
        name: &'static str,
        _plane: usize,
        _x: &Tensor,
        _mean: &Tensor,
        _std: &Tensor,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// Host bytes `(N, H*W, C)` (interleaved) to F32 `(N, C, H*W)` as `b * scale + bias`.
    fn image_u8_to_nchw(
        &self,
        name: &'static str,
        _bytes: &[u8],
        _sizes: (usize, usize, usize),
        _scale_bias: (f32, f32),
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }
}
