//! Pooling (C++ `ops/pooling.h`): 2-D max pooling with the winner's index and its
//! gradient, adaptive and 2x average pooling and their gradients, and the masked mean over
//! the rows of a matrix.
//!
//! Activations are `(N, C*H*W)` (or `[N, C, H, W]`; outputs take the rank of the tensor
//! they come from). The average pools are separable resamples (see [`super::resize`]): the
//! 2x one is the adaptive one with `H/2 x W/2` outputs. Every gradient is a gather
//! (deterministic, no atomics) and overwrites its output. F32, F16 and BF16 on every device,
//! FP32 compares and sums; max-pool indices are I32.

use super::conv::{check_activation, check_nchw, dims4, output_dims};
use super::resize::{resample, resample_backward};
use super::{checked_product, dispatch, input, input_opt, written, Nchw, Pool2dSpec};
use crate::backend::MaxPool2d;
use crate::{Dtype, Error, Result, Tensor};
use brotensor_cpu::resize::AxisMap;

/// The max-pool geometry of `spec` on `dims`, checked.
fn max_pool_geometry(op: &'static str, dims: Nchw, spec: &Pool2dSpec) -> Result<MaxPool2d> {
    let out = spec
        .out_size([dims.h, dims.w])
        .map_err(|e| Error::shape(op, e))?;
    check_nchw(op, Nchw::new(dims.n, dims.c, out[0], out[1]))?;
    Ok(MaxPool2d {
        input: [dims.h, dims.w],
        out,
        kernel: spec.kernel,
        stride: spec.stride,
        padding: spec.padding,
        dilation: spec.dilation,
    })
}

/// 2-D max pooling (C++ `max_pool2d_forward`): each output is the largest input of its
/// window (padding counts as -inf; the first of equal values in row-major window order) and
/// `idx` its position `h*W + w` in the channel plane, or -inf and -1 for a window entirely in
/// the padding. `spec` gives window, stride, padding, dilation and `ceil_mode`; the C++
/// op's geometry is `Pool2dSpec { kernel, stride, padding, dilation: [1, 1], ceil_mode:
/// false }`, with the output `(H + 2 pad - k) / stride + 1`. `x`: `(N, C*H*W)` for `dims =
/// (N, C, H, W)`; `y` is resized to `(N, C*H_out*W_out)`, `idx` to the same dims in I32.
pub fn max_pool2d_forward(
    x: &Tensor,
    dims: impl Into<Nchw>,
    spec: &Pool2dSpec,
    y: &mut Tensor,
    idx: &mut Tensor,
) -> Result<()> {
    let op = "max_pool2d_forward";
    let be = dispatch(
        op,
        &[input("x", x).float(), written("y", y), written("idx", idx)],
    )?;
    let d: Nchw = dims.into();
    check_activation(op, "x", x, d)?;
    let g = max_pool_geometry(op, d, spec)?;
    let out = Nchw::new(d.n, d.c, g.out[0], g.out[1]);
    let out_dims = output_dims(x, out);
    be.out("y", y, &out_dims, x.dtype())?;
    be.out("idx", idx, &out_dims, Dtype::I32)?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.max_pool2d(op, &g, x, y, idx)
}

/// The gradient of [`max_pool2d_forward`] (C++ `max_pool2d_backward`): each input pixel
/// sums the `dy` of the outputs whose `idx` names it (collisions of overlapping windows
/// summed). Unlike the C++ op, which scatters by index, this takes the forward's `spec`:
/// each input pixel gathers from the outputs whose window covers it, so the sum is
/// deterministic with no atomics. `dy`, `idx`: `(N, C*H_out*W_out)` (`idx` I32, from the
/// forward); `dx` is resized to `(N, C*H*W)` and overwritten.
pub fn max_pool2d_backward(
    dy: &Tensor,
    idx: &Tensor,
    dims: impl Into<Nchw>,
    spec: &Pool2dSpec,
    dx: &mut Tensor,
) -> Result<()> {
    let op = "max_pool2d_backward";
    let be = dispatch(
        op,
        &[
            input("dy", dy).float(),
            input("idx", idx),
            written("dx", dx),
        ],
    )?;
    if idx.dtype() != Dtype::I32 {
        return Err(Error::Dtype {
            op,
            operand: "idx",
            expected: "I32 indices from max_pool2d_forward".into(),
            found: idx.dtype(),
        });
    }
    let d: Nchw = dims.into();
    let g = max_pool_geometry(op, d, spec)?;
    let out = Nchw::new(d.n, d.c, g.out[0], g.out[1]);
    check_activation(op, "dy", dy, out)?;
    check_activation(op, "idx", idx, out)?;
    check_nchw(op, d)?;
    be.out("dx", dx, &output_dims(dy, d), dy.dtype())?;
    if dx.numel() == 0 {
        return Ok(());
    }
    be.max_pool2d_backward(op, &g, dy, idx, dx)
}

/// Adaptive average pooling to `(H_out, W_out)` (C++ `adaptive_avg_pool2d_forward`,
/// PyTorch's regions: output `o` of an axis averages inputs `floor(o in / out)` to
/// `ceil((o + 1) in / out)`). `x`: `(N, C*H*W)` for `dims = (N, C, H, W)`; `y` is resized to
/// `(N, C*H_out*W_out)`.
pub fn adaptive_avg_pool2d_forward(
    x: &Tensor,
    dims: impl Into<Nchw>,
    (h_out, w_out): (usize, usize),
    y: &mut Tensor,
) -> Result<()> {
    let op = "adaptive_avg_pool2d_forward";
    let maps = [AxisMap::AdaptiveAverage; 2];
    resample(op, x, dims.into(), [h_out, w_out], maps, y)
}

/// The gradient of [`adaptive_avg_pool2d_forward`] (C++ `adaptive_avg_pool2d_backward`):
/// each input pixel gathers `dy / region size` from every region holding it. `dy`: `(N,
/// C*H_out*W_out)`; `dx` is resized to `(N, C*H*W)` and overwritten.
pub fn adaptive_avg_pool2d_backward(
    dy: &Tensor,
    dims: impl Into<Nchw>,
    (h_out, w_out): (usize, usize),
    dx: &mut Tensor,
) -> Result<()> {
    let op = "adaptive_avg_pool2d_backward";
    let maps = [AxisMap::AdaptiveAverage; 2];
    resample_backward(op, dy, dims.into(), [h_out, w_out], maps, dx)
}

/// Half of even `H` and `W`, or the error naming the odd one.
pub(super) fn halved(op: &'static str, dims: Nchw) -> Result<[usize; 2]> {
    if !dims.h.is_multiple_of(2) || !dims.w.is_multiple_of(2) {
        return Err(Error::shape(
            op,
            format!("H and W must be even, got {} x {}", dims.h, dims.w),
        ));
    }
    Ok([dims.h / 2, dims.w / 2])
}

/// 2x average downsample (C++ `downsample_avg_2x`): each output is the mean of its 2x2
/// block; `H` and `W` even. `x`: `(N, C*H*W)` for `dims = (N, C, H, W)`; `y` is resized to
/// `(N, C*H/2*W/2)`.
pub fn downsample_avg_2x(x: &Tensor, dims: impl Into<Nchw>, y: &mut Tensor) -> Result<()> {
    let op = "downsample_avg_2x";
    let d: Nchw = dims.into();
    let out = halved(op, d)?;
    resample(op, x, d, out, [AxisMap::AdaptiveAverage; 2], y)
}

/// The gradient of [`downsample_avg_2x`] (C++ `downsample_avg_2x_backward`): each pixel of
/// the 2x2 block `(i, j)` gets a quarter of `dy[n, c, i, j]`. `dims` are the input's; `dx` is resized to `(N,
/// C*H*W)` and overwritten.
pub fn downsample_avg_2x_backward(
    dy: &Tensor,
    dims: impl Into<Nchw>,
    dx: &mut Tensor,
) -> Result<()> {
    let op = "downsample_avg_2x_backward";
    let d: Nchw = dims.into();
    let out = halved(op, d)?;
    resample_backward(op, dy, d, out, [AxisMap::AdaptiveAverage; 2], dx)
}

/// Checks an optional mask of `k` F32 values.
fn check_mask(op: &'static str, mask: Option<&Tensor>, k: usize) -> Result<()> {
    let Some(m) = mask else { return Ok(()) };
    if m.dtype() != Dtype::F32 {
        return Err(Error::Dtype {
            op,
            operand: "mask",
            expected: "an F32 mask (1 valid, 0 not)".into(),
            found: m.dtype(),
        });
    }
    if m.numel() != k {
        return Err(Error::shape(
            op,
            format!("`mask` must hold K = {k} values, has {}", m.numel()),
        ));
    }
    Ok(())
}

/// The mean over the valid rows of `x` (C++ `masked_mean_pool_forward`): `y[j] = sum over
/// valid k of x[k, j] / count`, all zero when no row is valid. `x`: `(K, D)`; `mask`: `K`
/// F32 values, row `k` valid where `mask[k] >= 0.5` (the C++ code's reading of its "1 valid /
/// 0 invalid" mask), or every row when `None`; `y` is resized to `(D, 1)`.
pub fn masked_mean_pool_forward(x: &Tensor, mask: Option<&Tensor>, y: &mut Tensor) -> Result<()> {
    let op = "masked_mean_pool_forward";
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input_opt("mask", mask),
            written("y", y),
        ],
    )?;
    if x.rank() != 2 {
        return Err(Error::shape(
            op,
            format!("`x` must be a (K, D) matrix, got {:?}", x.dims()),
        ));
    }
    let (k, d) = x.shape();
    check_mask(op, mask, k)?;
    be.out("y", y, &[d, 1], x.dtype())?;
    if d == 0 {
        return Ok(());
    }
    be.masked_mean_pool(op, (k, d), false, x, mask, y)
}

/// The gradient of [`masked_mean_pool_forward`] (C++ `masked_mean_pool_backward`): valid
/// rows get `dy / count`, the others 0 (all 0 when no row is valid). `dy`: `D` values (`(D,
/// 1)`); `mask` as the forward; `dx` is resized to `(K, D)` and overwritten.
pub fn masked_mean_pool_backward(
    dy: &Tensor,
    mask: Option<&Tensor>,
    k: usize,
    dx: &mut Tensor,
) -> Result<()> {
    let op = "masked_mean_pool_backward";
    let be = dispatch(
        op,
        &[
            input("dy", dy).float(),
            input_opt("mask", mask),
            written("dx", dx),
        ],
    )?;
    let d = dy.numel();
    check_mask(op, mask, k)?;
    checked_product(op, "K*D", &[k, d])?;
    be.out("dx", dx, &[k, d], dy.dtype())?;
    if dx.numel() == 0 {
        return Ok(());
    }
    be.masked_mean_pool(op, (k, d), true, dy, mask, dx)
}

impl Tensor {
    /// [`max_pool2d_forward`] of this `[N, C, H, W]` tensor: a new `[N, C, H_out, W_out]`
    /// tensor (the indices dropped; [`Tensor::max_pool2d_with_indices`] keeps them).
    pub fn max_pool2d(&self, spec: &Pool2dSpec) -> Result<Tensor> {
        Ok(self.max_pool2d_with_indices(spec)?.0)
    }

    /// [`max_pool2d_forward`] of this `[N, C, H, W]` tensor: the pooled `[N, C, H_out,
    /// W_out]` tensor and its I32 indices.
    pub fn max_pool2d_with_indices(&self, spec: &Pool2dSpec) -> Result<(Tensor, Tensor)> {
        let [n, c, h, w] = dims4("max_pool2d", "self", self)?;
        let (mut y, mut idx) = (Tensor::default(), Tensor::default());
        max_pool2d_forward(self, (n, c, h, w), spec, &mut y, &mut idx)?;
        Ok((y, idx))
    }

    /// [`adaptive_avg_pool2d_forward`] of this `[N, C, H, W]` tensor to `[out_h, out_w]`: a
    /// new `[N, C, out_h, out_w]` tensor.
    pub fn adaptive_avg_pool2d(&self, [out_h, out_w]: [usize; 2]) -> Result<Tensor> {
        let [n, c, h, w] = dims4("adaptive_avg_pool2d", "self", self)?;
        let mut y = Tensor::default();
        adaptive_avg_pool2d_forward(self, (n, c, h, w), (out_h, out_w), &mut y)?;
        Ok(y)
    }
}
