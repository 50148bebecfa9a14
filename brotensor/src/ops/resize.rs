//! Resampling (C++ `ops/resize.h`): the fixed 2x up-samplers and their gradients,
//! `interp2d` at any size in four modes with half-pixel or corner-aligned coordinates and its
//! gradient, `resample1d` along NCL rows, and RAFT's convex upsampler.
//!
//! Activations are `(N, C*H*W)` (or `[N, C, H, W]`; outputs take the rank of the tensor they
//! come from). Every interpolation here is separable, `Y = A_h X A_w^T` per plane, with the
//! per-axis tables built in float64 on the host from the definitions below; the gradients
//! apply the transposed tables as gathers (deterministic, no atomics) and overwrite their
//! output. F32, F16 and BF16 on every device, FP32 arithmetic.
//!
//! Coordinates (per axis, input length `in`, output `out`): half-pixel `src = (o + 1/2)
//! in / out - 1/2`, corner-aligned `src = o (in - 1) / (out - 1)` (0 when `out = 1`).
//! Nearest rounds `src` half to even, then clamps (so the 2x nearest reads `o / 2`). Bilinear
//! clamps `src` to `[0, in - 1]` and blends `floor(src)` and the next position (clamped).
//! Bicubic uses the cubic convolution kernel with `a = -0.5` (Pillow's) or `a = -0.75`
//! (PyTorch's and OpenCV's) on the unclamped `src`, its four taps clamped to the image, as
//! PyTorch does.

use super::conv::{check_activation, check_nchw, dims4, output_dims};
use super::{
    check_dtypes_match, checked_product, declare, dispatch, input, written, Nchw, ResizeMode,
    ResizeSpec,
};
use crate::backend::AxisTable;
use crate::{Error, Result, Tensor};
use brotensor_cpu::resize::AxisMap;

/// The H and W tables of a resample from `dims` to `out` by `maps`.
fn tables(
    op: &'static str,
    dims: Nchw,
    out: [usize; 2],
    maps: [AxisMap; 2],
) -> Result<(AxisTable, AxisTable)> {
    let shape = |e: String| Error::shape(op, e);
    let rows = AxisTable::new(maps[0], dims.h, out[0]).map_err(|e| shape(format!("H: {e}")))?;
    let cols = AxisTable::new(maps[1], dims.w, out[1]).map_err(|e| shape(format!("W: {e}")))?;
    Ok((rows, cols))
}

/// `y` = the separable resample of `x` (`dims`) to `out` by `maps` (H, W).
pub(super) fn resample(
    op: &'static str,
    x: &Tensor,
    dims: Nchw,
    out: [usize; 2],
    maps: [AxisMap; 2],
    y: &mut Tensor,
) -> Result<()> {
    let be = dispatch(op, &[input("x", x).float(), written("y", y)])?;
    check_activation(op, "x", x, dims)?;
    let out_dims = Nchw::new(dims.n, dims.c, out[0], out[1]);
    check_nchw(op, out_dims)?;
    let (rows, cols) = tables(op, dims, out, maps)?;
    be.out("y", y, &output_dims(x, out_dims), x.dtype())?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.resample(op, (&rows, &cols), x, y)
}

/// `dx` = the adjoint of the resample of an input of `dims` to `out` by `maps`, applied to
/// `dy`, overwritten.
pub(super) fn resample_backward(
    op: &'static str,
    dy: &Tensor,
    dims: Nchw,
    out: [usize; 2],
    maps: [AxisMap; 2],
    dx: &mut Tensor,
) -> Result<()> {
    let be = dispatch(op, &[input("dy", dy).float(), written("dx", dx)])?;
    let out_dims = Nchw::new(dims.n, dims.c, out[0], out[1]);
    check_activation(op, "dy", dy, out_dims)?;
    check_nchw(op, dims)?;
    let (rows, cols) = tables(op, dims, out, maps)?;
    be.out("dx", dx, &output_dims(dy, dims), dy.dtype())?;
    if dx.numel() == 0 {
        return Ok(());
    }
    be.resample_backward(op, (&rows.adjoint(), &cols.adjoint()), out, dy, dx)
}

fn interp(mode: ResizeMode, align_corners: bool) -> [AxisMap; 2] {
    [AxisMap::Interp {
        mode,
        align_corners,
    }; 2]
}

/// Twice the size, checked.
fn doubled(op: &'static str, dims: Nchw) -> Result<[usize; 2]> {
    let two = |v: usize| {
        v.checked_mul(2)
            .ok_or_else(|| Error::shape(op, "2H or 2W overflows"))
    };
    Ok([two(dims.h)?, two(dims.w)?])
}

/// 2x nearest upsample (C++ `upsample_nearest_2x`): `y[n, c, i, j] = x[n, c, i / 2, j /
/// 2]`. `x`: `(N, C*H*W)` for `dims = (N, C, H, W)`; `y` is resized to `(N, C*2H*2W)`.
pub fn upsample_nearest_2x(x: &Tensor, dims: impl Into<Nchw>, y: &mut Tensor) -> Result<()> {
    let op = "upsample_nearest_2x";
    let d: Nchw = dims.into();
    resample(
        op,
        x,
        d,
        doubled(op, d)?,
        interp(ResizeMode::Nearest, false),
        y,
    )
}

/// 2x bilinear upsample with half-pixel coordinates (C++ `upsample_bilinear_2x`, PyTorch's
/// `interpolate(scale_factor=2, mode="bilinear", align_corners=False)`). Shapes as
/// [`upsample_nearest_2x`].
pub fn upsample_bilinear_2x(x: &Tensor, dims: impl Into<Nchw>, y: &mut Tensor) -> Result<()> {
    let op = "upsample_bilinear_2x";
    let d: Nchw = dims.into();
    resample(
        op,
        x,
        d,
        doubled(op, d)?,
        interp(ResizeMode::Bilinear, false),
        y,
    )
}

/// The gradient of [`upsample_nearest_2x`] (C++ `upsample_nearest_2x_backward`): each
/// input pixel sums its 2x2 block of `dy`. `dims` are the input's; `dy`: `(N, C*2H*2W)`;
/// `dx` is resized to `(N, C*H*W)` and overwritten.
pub fn upsample_nearest_2x_backward(
    dy: &Tensor,
    dims: impl Into<Nchw>,
    dx: &mut Tensor,
) -> Result<()> {
    let op = "upsample_nearest_2x_backward";
    let d: Nchw = dims.into();
    resample_backward(
        op,
        dy,
        d,
        doubled(op, d)?,
        interp(ResizeMode::Nearest, false),
        dx,
    )
}

/// The gradient of [`upsample_bilinear_2x`] (C++ `upsample_bilinear_2x_backward`): each
/// input pixel gathers the `dy` of the outputs that blend it, with the forward's weights.
/// Shapes as [`upsample_nearest_2x_backward`].
pub fn upsample_bilinear_2x_backward(
    dy: &Tensor,
    dims: impl Into<Nchw>,
    dx: &mut Tensor,
) -> Result<()> {
    let op = "upsample_bilinear_2x_backward";
    let d: Nchw = dims.into();
    resample_backward(
        op,
        dy,
        d,
        doubled(op, d)?,
        interp(ResizeMode::Bilinear, false),
        dx,
    )
}

/// Resize to any `(H_out, W_out)` with half-pixel coordinates (C++ `interp2d_forward`;
/// modes in the module docs). `x`: `(N, C*H*W)` for `dims = (N, C, H, W)`; `y` is resized
/// to `(N, C*H_out*W_out)`. An empty side must stay empty.
pub fn interp2d_forward(
    x: &Tensor,
    dims: impl Into<Nchw>,
    (h_out, w_out): (usize, usize),
    mode: ResizeMode,
    y: &mut Tensor,
) -> Result<()> {
    let op = "interp2d_forward";
    resample(op, x, dims.into(), [h_out, w_out], interp(mode, false), y)
}

/// The gradient of [`interp2d_forward`] (C++ `interp2d_backward`) for nearest and bilinear;
/// bicubic has none (an error, as in the C++ library). `dy`: `(N, C*H_out*W_out)`; `dx` is
/// resized to `(N, C*H*W)` and overwritten.
pub fn interp2d_backward(
    dy: &Tensor,
    dims: impl Into<Nchw>,
    (h_out, w_out): (usize, usize),
    mode: ResizeMode,
    dx: &mut Tensor,
) -> Result<()> {
    let op = "interp2d_backward";
    declare(op, &[input("dy", dy), written("dx", dx)])?;
    if matches!(mode, ResizeMode::BicubicPillow | ResizeMode::BicubicTorch) {
        return Err(Error::invalid(
            op,
            "bicubic resizing has no backward pass (nearest and bilinear do)",
        ));
    }
    resample_backward(op, dy, dims.into(), [h_out, w_out], interp(mode, false), dx)
}

/// Resize with corner-aligned coordinates (C++ `interp2d_align_corners_forward`, PyTorch's
/// `align_corners=True`), forward only; every mode. Shapes as [`interp2d_forward`].
pub fn interp2d_align_corners_forward(
    x: &Tensor,
    dims: impl Into<Nchw>,
    (h_out, w_out): (usize, usize),
    mode: ResizeMode,
    y: &mut Tensor,
) -> Result<()> {
    let op = "interp2d_align_corners_forward";
    resample(op, x, dims.into(), [h_out, w_out], interp(mode, true), y)
}

/// The mode of a 1-D resample: nearest or linear (bilinear along one axis).
fn one_d(op: &'static str, mode: ResizeMode) -> Result<[AxisMap; 2]> {
    if matches!(mode, ResizeMode::BicubicPillow | ResizeMode::BicubicTorch) {
        return Err(Error::invalid(
            op,
            "resample1d takes ResizeMode::Nearest or ResizeMode::Bilinear (linear)",
        ));
    }
    Ok(interp(mode, false))
}

/// Resamples NCL rows to `l_out` samples with half-pixel coordinates (C++
/// `resample1d_forward`; `mode` Nearest or Bilinear, which is linear here). `x`: `(N,
/// C*L_in)` (or `[N, C, L_in]`) for `dims = (N, C, L_in)`; `y` is resized to `(N,
/// C*L_out)`.
pub fn resample1d_forward(
    x: &Tensor,
    (n, c, l_in): (usize, usize, usize),
    l_out: usize,
    mode: ResizeMode,
    y: &mut Tensor,
) -> Result<()> {
    let op = "resample1d_forward";
    declare(op, &[input("x", x), written("y", y)])?;
    let maps = one_d(op, mode)?;
    resample(op, x, Nchw::new(n, c, 1, l_in), [1, l_out], maps, y)
}

/// The gradient of [`resample1d_forward`] (C++ `resample1d_backward`). `dy`: `(N,
/// C*L_out)`; `dx` is resized to `(N, C*L_in)` and overwritten.
pub fn resample1d_backward(
    dy: &Tensor,
    (n, c, l_in): (usize, usize, usize),
    l_out: usize,
    mode: ResizeMode,
    dx: &mut Tensor,
) -> Result<()> {
    let op = "resample1d_backward";
    declare(op, &[input("dy", dy), written("dx", dx)])?;
    let maps = one_d(op, mode)?;
    resample_backward(op, dy, Nchw::new(n, c, 1, l_in), [1, l_out], maps, dx)
}

/// RAFT's learned convex upsample (C++ `convex_upsample_forward`), inference only: each
/// `scale x scale` block of fine pixels blends the 3x3 coarse neighbourhood of its source
/// (replicated at the border) with softmax weights over the 9 neighbours of `mask`: `y[n,
/// c, k y + sy, k x + sx] = sum_m softmax_m(mask[n, m k^2 + sy k + sx, y, x]) x[n, c, y - 1 +
/// m / 3, x - 1 + m % 3]`. `x`: `(N, C*H*W)` for `dims = (N, C, H, W)`; `mask`: `(N,
/// 9*k*k*H*W)` of `x`'s dtype; `y` is resized to `(N, C*kH*kW)`.
pub fn convex_upsample_forward(
    x: &Tensor,
    mask: &Tensor,
    dims: impl Into<Nchw>,
    scale: usize,
    y: &mut Tensor,
) -> Result<()> {
    let op = "convex_upsample_forward";
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("mask", mask).float(),
            written("y", y),
        ],
    )?;
    check_dtypes_match(op, ("x", x), &[("mask", mask)])?;
    if scale == 0 {
        return Err(Error::shape(op, "scale must be at least 1"));
    }
    let d: Nchw = dims.into();
    check_activation(op, "x", x, d)?;
    let logits = checked_product(op, "9*k*k", &[9, scale, scale])?;
    let per_item = check_nchw(op, Nchw::new(1, logits, d.h, d.w))?;
    checked_product(op, "N*9*k*k*H*W", &[d.n, per_item])?;
    if mask.dims() != [d.n, per_item] && mask.dims() != [d.n, logits, d.h, d.w] {
        return Err(Error::shape(
            op,
            format!(
                "`mask` must be shaped (N, 9*k*k*H*W) = ({}, {per_item}), got {:?}",
                d.n,
                mask.dims()
            ),
        ));
    }
    let out = Nchw::new(
        d.n,
        d.c,
        checked_product(op, "k*H", &[scale, d.h])?,
        checked_product(op, "k*W", &[scale, d.w])?,
    );
    check_nchw(op, out)?;
    be.out("y", y, &output_dims(x, out), x.dtype())?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.convex_upsample(op, (d.n, d.c, d.h, d.w), scale, x, mask, y)
}

impl Tensor {
    /// PyTorch's `interpolate(scale_factor=scale, mode="nearest")` of this `[N, C, H, W]`
    /// tensor: a new `[N, C, scale H, scale W]` tensor with `y[.., i, j] = x[.., i / scale, j
    /// / scale]` (the half-pixel nearest of [`interp2d_forward`] at an integer scale).
    pub fn upsample_nearest2d(&self, scale: usize) -> Result<Tensor> {
        self.upsample2d("upsample_nearest2d", scale, ResizeMode::Nearest)
    }

    /// PyTorch's `interpolate(scale_factor=scale, mode="bilinear", align_corners=False)` of
    /// this `[N, C, H, W]` tensor: a new `[N, C, scale H, scale W]` tensor.
    pub fn upsample_bilinear2d(&self, scale: usize) -> Result<Tensor> {
        self.upsample2d("upsample_bilinear2d", scale, ResizeMode::Bilinear)
    }

    fn upsample2d(&self, op: &'static str, scale: usize, mode: ResizeMode) -> Result<Tensor> {
        let [n, c, h, w] = dims4(op, "self", self)?;
        if scale == 0 {
            return Err(Error::shape(op, "scale must be at least 1"));
        }
        let out = [
            checked_product(op, "scale*H", &[scale, h])?,
            checked_product(op, "scale*W", &[scale, w])?,
        ];
        let mut y = Tensor::default();
        resample(
            op,
            self,
            Nchw::new(n, c, h, w),
            out,
            interp(mode, false),
            &mut y,
        )?;
        Ok(y)
    }

    /// This `[N, C, H, W]` tensor resized by `spec` (size, mode, coordinate mapping; see the
    /// module docs): a new `[N, C, out_h, out_w]` tensor.
    pub fn interpolate(&self, spec: &ResizeSpec) -> Result<Tensor> {
        let op = "interpolate";
        let [n, c, h, w] = dims4(op, "self", self)?;
        let dims = Nchw::new(n, c, h, w);
        spec.out_dims(dims).map_err(|e| Error::shape(op, e))?;
        let mut y = Tensor::default();
        let maps = interp(spec.mode, spec.align_corners);
        resample(op, self, dims, [spec.out_h, spec.out_w], maps, &mut y)?;
        Ok(y)
    }
}
