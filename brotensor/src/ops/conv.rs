//! Convolutions (C++ `ops/conv.h`, `ops/conv1d.h`): the 2-D convolution over NCHW and its
//! gradients, the transposed convolution, the 1-D forms of both over NCL, the padding of the
//! length axis and the streaming step of a causal depthwise convolution.
//!
//! Layouts follow the C++ contract. Activations are `(N, C*H*W)` (or, as tensors of the
//! idiomatic methods, `[N, C, H, W]`; outputs take the rank of the tensor they come from);
//! a convolution's weight is OIHW `(C_out, C_in/groups*kH*kW)` (or `[C_out, C_in/groups, kH,
//! kW]`), a transposed convolution's input-channel-major `(C_in, C_out/groups*kH*kW)`; a bias
//! holds `C_out` values. The forward passes and the input gradients overwrite their output;
//! the weight and bias gradients accumulate into tensors the caller sized (and zeroed).
//! Every product is FP32-accumulated; F32, F16 and BF16 on every device.
//!
//! The 1-D convolution is the 2-D one with `H = kH = 1`, and the transposed convolution is
//! the adjoint of the forward one: its forward pass is a convolution's input gradient, its
//! input gradient a convolution, its weight gradient a convolution's weight gradient with
//! the roles of input and output exchanged. One set of kernels serves all of them.

use super::{
    check_dtypes_match, check_on_device, checked_product, dispatch, input, input_opt, updated,
    written, Conv1dSpec, Conv2dSpec, Conv3dSpec, Dispatched, Nchw,
};
pub use brotensor_cpu::pad::PadMode;

use crate::backend::{Conv2d, Conv3d};
use crate::{Error, Result, Tensor};

/// The forward convolution of `x` dims into `c_out` channels by `spec`, checked.
pub(super) fn forward_geometry(
    op: &'static str,
    x: Nchw,
    c_out: usize,
    spec: &Conv2dSpec,
) -> Result<Conv2d> {
    Conv2d::new(x, c_out, *spec).map_err(|e| Error::shape(op, e))
}

/// The forward convolution whose input gradient is the transposed convolution of an `x` of
/// `dims` into `c_out` channels: it maps the transposed output `(N, c_out, H_out, W_out)`
/// back to `dims`' `(N, C_in, H, W)` grid.
fn transposed_geometry(
    op: &'static str,
    dims: Nchw,
    c_out: usize,
    spec: &Conv2dSpec,
    output_padding: [usize; 2],
) -> Result<Conv2d> {
    let shape = |e: String| Error::shape(op, e);
    spec.check_channels(dims.c, c_out).map_err(shape)?;
    let [ho, wo] = spec
        .transposed_out_size([dims.h, dims.w], output_padding)
        .map_err(shape)?;
    let out = Nchw::new(dims.n, c_out, ho, wo);
    Conv2d::with_out(out, dims.c, *spec, [dims.h, dims.w]).map_err(shape)
}

/// Checks that an activation of `dims` has a size: `C*H*W` first, then the batch (an empty
/// batch must not hide an overflowing entry, whose row length the 2-D layout holds).
pub(super) fn check_nchw(op: &'static str, dims: Nchw) -> Result<usize> {
    dims.numel().map_err(|e| Error::shape(op, e))
}

/// Checks that `t` holds an activation of `dims`: shaped `(N, C*H*W)` or `[N, C, H, W]`,
/// or with one row (`H = 1`, NCL) `[N, C, W]`.
pub(super) fn check_activation(
    op: &'static str,
    name: &'static str,
    t: &Tensor,
    dims: Nchw,
) -> Result<()> {
    let flat = dims.per_item().map_err(|e| Error::shape(op, e))?;
    let full = dims.dims();
    let ok = t.dims() == [dims.n, flat]
        || t.dims() == full
        || (dims.h == 1 && t.dims() == [dims.n, dims.c, dims.w]);
    if !ok {
        let rows = if dims.h == 1 {
            format!(
                "(N, C*L) = ({}, {flat}) or [N, C, L] = {:?}",
                dims.n,
                [dims.n, dims.c, dims.w]
            )
        } else {
            format!(
                "(N, C*H*W) = ({}, {flat}) or [N, C, H, W] = {full:?}",
                dims.n
            )
        };
        return Err(Error::shape(
            op,
            format!("`{name}` must be shaped {rows}, got {:?}", t.dims()),
        ));
    }
    Ok(())
}

/// Checks a weight of `rows` rows of `channels * kH * kW`: shaped `(rows, per_row)` or
/// `[rows, channels, kH, kW]`, or with a one-row kernel `[rows, channels, kW]`.
pub(super) fn check_weight(
    op: &'static str,
    name: &'static str,
    w: &Tensor,
    rows: usize,
    [channels, kh, kw]: [usize; 3],
) -> Result<()> {
    let per_row = checked_product(op, "weight row", &[channels, kh, kw])?;
    let ok = w.dims() == [rows, per_row]
        || w.dims() == [rows, channels, kh, kw]
        || (kh == 1 && w.dims() == [rows, channels, kw]);
    if !ok {
        return Err(Error::shape(
            op,
            format!(
                "`{name}` must be shaped ({rows}, {per_row}) or [{rows}, {channels}, {kh}, {kw}], \
                 got {:?}",
                w.dims()
            ),
        ));
    }
    Ok(())
}

/// Checks an optional bias: `c` values of `like`'s dtype.
fn check_bias(op: &'static str, bias: Option<&Tensor>, c: usize, like: &Tensor) -> Result<()> {
    let Some(b) = bias else { return Ok(()) };
    if b.numel() != c {
        return Err(Error::shape(
            op,
            format!("`bias` must hold C_out = {c} values, has {}", b.numel()),
        ));
    }
    check_dtypes_match(op, ("x", like), &[("bias", b)])
}

/// Checks an accumulated gradient: committed, of `like`'s dtype and of `dims`' element count.
pub(super) fn check_accumulated(
    op: &'static str,
    name: &'static str,
    g: &Tensor,
    like: (&'static str, &Tensor),
    len: usize,
) -> Result<()> {
    check_on_device(op, name, g, like.1.device())?;
    if !g.is_committed() || g.numel() != len {
        return Err(Error::shape(
            op,
            format!(
                "`{name}` must be pre-sized to {len} elements (it accumulates), has {}",
                g.numel()
            ),
        ));
    }
    check_dtypes_match(op, like, &[(name, g)])
}

/// The dims of an output of `dims` in the layout of `like`: 4-D and 3-D (NCL) as `like`,
/// else `(N, C*H*W)`. The products were checked by the geometry.
pub(super) fn output_dims(like: &Tensor, d: Nchw) -> Vec<usize> {
    match like.dims().len() {
        4 => d.dims().to_vec(),
        3 => vec![d.n, d.c, d.w],
        _ => vec![d.n, d.c * d.h * d.w],
    }
}

/// The dims of a convolution's output (`y`, or `dy` for the gradients).
fn y_dims(conv: &Conv2d) -> Nchw {
    Nchw::new(conv.x.n, conv.c_out, conv.out[0], conv.out[1])
}

/// How an op builds its convolution from its arguments, after the device rule.
type Geometry<'a> = Box<dyn FnOnce(&'static str) -> Result<Conv2d> + 'a>;

/// A forward convolution as op `op` (`conv2d_forward`, `conv1d_forward`).
fn convolve(
    op: &'static str,
    (x, w, bias): (&Tensor, &Tensor, Option<&Tensor>),
    geometry: Geometry<'_>,
    y: &mut Tensor,
) -> Result<()> {
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("w", w).float(),
            input_opt("bias", bias),
            written("y", y),
        ],
    )?;
    forward(op, &be, &geometry(op)?, (x, w, bias), ("x", "y"), y)
}

/// Checks the operands of a forward convolution by `conv` (input and output under `names`)
/// and runs it.
fn forward(
    op: &'static str,
    be: &Dispatched,
    conv: &Conv2d,
    (x, w, bias): (&Tensor, &Tensor, Option<&Tensor>),
    names: (&'static str, &'static str),
    y: &mut Tensor,
) -> Result<()> {
    let [kh, kw] = conv.spec.kernel;
    check_activation(op, names.0, x, conv.x)?;
    check_weight(op, "w", w, conv.c_out, [conv.group_in(), kh, kw])?;
    check_dtypes_match(op, (names.0, x), &[("w", w)])?;
    check_bias(op, bias, conv.c_out, x)?;
    be.out(names.1, y, &output_dims(x, y_dims(conv)), x.dtype())?;
    if conv.lens[2] == 0 {
        return Ok(());
    }
    be.conv2d_forward(op, conv, x, w, bias, y)
}

/// A convolution's input gradient as op `op` (`conv2d_backward_input`,
/// `conv1d_backward_input`).
fn convolve_backward_input(
    op: &'static str,
    (w, dy): (&Tensor, &Tensor),
    geometry: Geometry<'_>,
    dx: &mut Tensor,
) -> Result<()> {
    let be = dispatch(
        op,
        &[
            input("w", w).float(),
            input("dy", dy).float(),
            written("dx", dx),
        ],
    )?;
    adjoint(op, &be, &geometry(op)?, (w, dy, None), ("dy", "dx"), dx)
}

/// Checks the operands of the input-gradient pass of `conv` (`dy` named `names.0`, written
/// to `names.1`) and runs it, adding `bias` per channel of the result.
fn adjoint(
    op: &'static str,
    be: &Dispatched,
    conv: &Conv2d,
    (w, dy, bias): (&Tensor, &Tensor, Option<&Tensor>),
    names: (&'static str, &'static str),
    dx: &mut Tensor,
) -> Result<()> {
    let [kh, kw] = conv.spec.kernel;
    check_activation(op, names.0, dy, y_dims(conv))?;
    check_weight(op, "w", w, conv.c_out, [conv.group_in(), kh, kw])?;
    check_dtypes_match(op, (names.0, dy), &[("w", w)])?;
    check_bias(op, bias, conv.x.c, dy)?;
    be.out(names.1, dx, &output_dims(dy, conv.x), dy.dtype())?;
    if conv.lens[0] == 0 {
        return Ok(());
    }
    be.conv2d_backward_input(op, conv, w, dy, bias, dx)
}

/// A convolution's weight gradient as op `op` (`conv2d_backward_weight`,
/// `conv1d_backward_weight`).
fn convolve_backward_weight(
    op: &'static str,
    (x, dy): (&Tensor, &Tensor),
    geometry: Geometry<'_>,
    dw: &mut Tensor,
) -> Result<()> {
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("dy", dy).float(),
            updated("dw", dw),
        ],
    )?;
    weight_grad(op, &be, &geometry(op)?, (x, dy), ("x", "dy"), dw)
}

/// Checks the operands of the weight gradient of `conv` (its input and its output's
/// gradient, named `names`) and runs it.
fn weight_grad(
    op: &'static str,
    be: &Dispatched,
    conv: &Conv2d,
    (x, dy): (&Tensor, &Tensor),
    names: (&'static str, &'static str),
    dw: &mut Tensor,
) -> Result<()> {
    check_activation(op, names.0, x, conv.x)?;
    check_activation(op, names.1, dy, y_dims(conv))?;
    check_dtypes_match(op, (names.0, x), &[(names.1, dy)])?;
    check_accumulated(op, "dw", dw, (names.0, x), conv.lens[1])?;
    if conv.lens[0] == 0 || conv.lens[1] == 0 || conv.lens[2] == 0 {
        return Ok(());
    }
    be.conv2d_backward_weight(op, conv, x, dy, dw)
}

/// A bias gradient as op `op`: `db[c] += sum of dy[n, c]` for `dy` of `out`'s dims.
fn bias_grad(op: &'static str, dy: &Tensor, out: Nchw, db: &mut Tensor) -> Result<()> {
    let be = dispatch(op, &[input("dy", dy).float(), updated("db", db)])?;
    check_activation(op, "dy", dy, out)?;
    check_accumulated(op, "db", db, ("dy", dy), out.c)?;
    let pixels = out.plane().map_err(|e| Error::shape(op, e))?;
    if dy.numel() == 0 || out.c == 0 {
        return Ok(());
    }
    be.conv2d_backward_bias(op, (out.n, out.c, pixels), dy, db)
}

/// A transposed convolution as op `op`: the input-gradient pass of `geometry`'s convolution
/// on `x`, plus the bias.
fn transpose(
    op: &'static str,
    (x, w, bias): (&Tensor, &Tensor, Option<&Tensor>),
    geometry: Geometry<'_>,
    y: &mut Tensor,
) -> Result<()> {
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("w", w).float(),
            input_opt("bias", bias),
            written("y", y),
        ],
    )?;
    adjoint(op, &be, &geometry(op)?, (w, x, bias), ("x", "y"), y)
}

/// A transposed convolution's input gradient as op `op`: the forward pass of its
/// convolution on `dy`.
fn transpose_backward_input(
    op: &'static str,
    (w, dy): (&Tensor, &Tensor),
    geometry: Geometry<'_>,
    dx: &mut Tensor,
) -> Result<()> {
    let be = dispatch(
        op,
        &[
            input("w", w).float(),
            input("dy", dy).float(),
            written("dx", dx),
        ],
    )?;
    forward(op, &be, &geometry(op)?, (dy, w, None), ("dy", "dx"), dx)
}

/// A transposed convolution's weight gradient as op `op`: its convolution reads the
/// transposed output (`dy`) and produces `x`'s grid, so the roles exchange.
fn transpose_backward_weight(
    op: &'static str,
    (x, dy): (&Tensor, &Tensor),
    geometry: Geometry<'_>,
    dw: &mut Tensor,
) -> Result<()> {
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("dy", dy).float(),
            updated("dw", dw),
        ],
    )?;
    weight_grad(op, &be, &geometry(op)?, (dy, x), ("dy", "x"), dw)
}

/// The geometry of a convolution of an `x` of `dims` into `c_out` channels.
fn conv2d<'a>(dims: Nchw, c_out: usize, spec: &'a Conv2dSpec) -> Geometry<'a> {
    Box::new(move |op| forward_geometry(op, dims, c_out, spec))
}

/// The geometry whose input gradient is the transposed convolution of an `x` of `dims`.
fn conv_t2d<'a>(
    dims: Nchw,
    c_out: usize,
    spec: &'a Conv2dSpec,
    output_padding: [usize; 2],
) -> Geometry<'a> {
    Box::new(move |op| transposed_geometry(op, dims, c_out, spec, output_padding))
}

/// 2-D convolution over NCHW (C++ `conv2d_forward`): `y[n, o] = bias[o] + sum over the
/// group's input channels and the taps of x * w`, with the per-axis stride, zero padding and
/// dilation of `spec`, and `groups` (depthwise when `groups = C_in = C_out`).
///
/// `x`: `(N, C_in*H*W)` for `dims = (N, C_in, H, W)`; `w`: `(C_out, C_in/groups*kH*kW)`;
/// `bias`: `C_out` values or `None`; `y` is resized to `(N, C_out*H_out*W_out)` (or
/// `[N, C_out, H_out, W_out]` for a 4-D `x`), `H_out = (H + 2 pad - dil (kH - 1) - 1) /
/// stride + 1`, and overwritten.
pub fn conv2d_forward(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    dims: impl Into<Nchw>,
    c_out: usize,
    spec: &Conv2dSpec,
    y: &mut Tensor,
) -> Result<()> {
    let geometry = conv2d(dims.into(), c_out, spec);
    convolve("conv2d_forward", (x, w, bias), geometry, y)
}

/// The input gradient of [`conv2d_forward`] (C++ `conv2d_backward_input`): `dx[n, c, i, j]`
/// sums `dy * w` over the taps and the group's output channels that read input pixel
/// `(i, j)`. `w`: the forward weight; `dy`: `(N, C_out*H_out*W_out)`; `dx` is resized to
/// `x`'s `(N, C_in*H*W)` (4-D for a 4-D `dy`) and overwritten. Sizes as the forward call.
pub fn conv2d_backward_input(
    w: &Tensor,
    dy: &Tensor,
    dims: impl Into<Nchw>,
    c_out: usize,
    spec: &Conv2dSpec,
    dx: &mut Tensor,
) -> Result<()> {
    let geometry = conv2d(dims.into(), c_out, spec);
    convolve_backward_input("conv2d_backward_input", (w, dy), geometry, dx)
}

/// The weight gradient of [`conv2d_forward`] (C++ `conv2d_backward_weight`): `dw[o, ci, ky,
/// kx] += sum over n and output pixels of dy[n, o] * x[n, g C_in/groups + ci]` at the pixel
/// tap `(ky, kx)` reads (zero in the padding). `x`: the forward input; `dy`: `(N,
/// C_out*H_out*W_out)`; `dw`: `(C_out, C_in/groups*kH*kW)`, pre-sized, accumulated.
pub fn conv2d_backward_weight(
    x: &Tensor,
    dy: &Tensor,
    dims: impl Into<Nchw>,
    c_out: usize,
    spec: &Conv2dSpec,
    dw: &mut Tensor,
) -> Result<()> {
    let geometry = conv2d(dims.into(), c_out, spec);
    convolve_backward_weight("conv2d_backward_weight", (x, dy), geometry, dw)
}

/// The bias gradient of [`conv2d_forward`] (C++ `conv2d_backward_bias`): `db[c] += sum over
/// n and pixels of dy[n, c]`. `dy`: `(N, C_out*H_out*W_out)` for `out = (N, C_out, H_out,
/// W_out)`; `db`: `C_out` values, pre-sized, accumulated.
pub fn conv2d_backward_bias(dy: &Tensor, out: impl Into<Nchw>, db: &mut Tensor) -> Result<()> {
    bias_grad("conv2d_backward_bias", dy, out.into(), db)
}

/// 2-D transposed convolution over NCHW (C++ `conv_transpose2d_forward`), the adjoint of
/// [`conv2d_forward`] plus a bias: each input pixel `x[n, ci, i, j]` adds `x * w[ci, o, ky,
/// kx]` into output pixel `(i s - pad + ky dil, j s - pad + kx dil)` of the group's output
/// channels. `x`: `(N, C_in*H*W)` for `dims = (N, C_in, H, W)`; `w`:
/// `(C_in, C_out/groups*kH*kW)` (input-channel-major); `bias`: `C_out` values or `None`; `y`
/// is resized to `(N, C_out*H_out*W_out)` with `H_out = (H - 1) s - 2 pad + dil (kH - 1) +
/// output_padding + 1` (each `output_padding` below its stride or dilation) and overwritten.
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose2d_forward(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    dims: impl Into<Nchw>,
    c_out: usize,
    spec: &Conv2dSpec,
    output_padding: [usize; 2],
    y: &mut Tensor,
) -> Result<()> {
    let geometry = conv_t2d(dims.into(), c_out, spec, output_padding);
    transpose("conv_transpose2d_forward", (x, w, bias), geometry, y)
}

/// The input gradient of [`conv_transpose2d_forward`] (C++
/// `conv_transpose2d_backward_input`): a plain convolution of `dy` by the same weight.
/// `dy`: `(N, C_out*H_out*W_out)`; `dx` is resized to `(N, C_in*H*W)` and overwritten.
/// Sizes as the forward call.
pub fn conv_transpose2d_backward_input(
    w: &Tensor,
    dy: &Tensor,
    dims: impl Into<Nchw>,
    c_out: usize,
    spec: &Conv2dSpec,
    output_padding: [usize; 2],
    dx: &mut Tensor,
) -> Result<()> {
    let geometry = conv_t2d(dims.into(), c_out, spec, output_padding);
    transpose_backward_input("conv_transpose2d_backward_input", (w, dy), geometry, dx)
}

/// The weight gradient of [`conv_transpose2d_forward`] (C++
/// `conv_transpose2d_backward_weight`): `dw[ci, o, ky, kx] += sum over n and input pixels of
/// x[n, ci] * dy[n, o]` at the output pixel the tap reaches. `dw`: `(C_in,
/// C_out/groups*kH*kW)`, pre-sized, accumulated. Sizes as the forward call.
pub fn conv_transpose2d_backward_weight(
    x: &Tensor,
    dy: &Tensor,
    dims: impl Into<Nchw>,
    c_out: usize,
    spec: &Conv2dSpec,
    output_padding: [usize; 2],
    dw: &mut Tensor,
) -> Result<()> {
    let geometry = conv_t2d(dims.into(), c_out, spec, output_padding);
    transpose_backward_weight("conv_transpose2d_backward_weight", (x, dy), geometry, dw)
}

/// The bias gradient of [`conv_transpose2d_forward`] (C++ `conv_transpose2d_backward_bias`):
/// as [`conv2d_backward_bias`], for `out = (N, C_out, H_out, W_out)`.
pub fn conv_transpose2d_backward_bias(
    dy: &Tensor,
    out: impl Into<Nchw>,
    db: &mut Tensor,
) -> Result<()> {
    bias_grad("conv_transpose2d_backward_bias", dy, out.into(), db)
}

/// W8A16 2-D convolution (C++ `conv2d_int8w_fp16_forward`): [`conv2d_forward`] with an I8
/// OIHW weight `w_int8 (C_out, C_in/groups*kH*kW)` and F32 per-output-channel `scales`
/// `(C_out, 1)`, dequantized on the device into `x`'s dtype; `x`, `bias` and `y` are F16 or
/// BF16; FP32 accumulation. Sizes as [`conv2d_forward`].
#[allow(clippy::too_many_arguments)]
pub fn conv2d_int8w_fp16_forward(
    x: &Tensor,
    w_int8: &Tensor,
    scales: &Tensor,
    bias: Option<&Tensor>,
    dims: impl Into<Nchw>,
    c_out: usize,
    spec: &Conv2dSpec,
    y: &mut Tensor,
) -> Result<()> {
    let op = "conv2d_int8w_fp16_forward";
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("w_int8", w_int8),
            input("scales", scales),
            input_opt("bias", bias),
            written("y", y),
        ],
    )?;
    let conv = forward_geometry(op, dims.into(), c_out, spec)?;
    let [kh, kw] = conv.spec.kernel;
    check_weight(op, "w_int8", w_int8, c_out, [conv.group_in(), kh, kw])?;
    let flat = w_int8.reshaped(conv.c_out, conv.group_in() * kh * kw)?;
    let w16 = super::quant::int8_weight_as(op, be, &flat, scales, x)?;
    forward(op, &be, &conv, (x, &w16, bias), ("x", "y"), y)
}

/// Deformable 2-D convolution, DCNv2 (C++ `deform_conv2d_forward`, torchvision's
/// `deform_conv2d`), forward only: tap `(ky, kx)` of output pixel `(oy, ox)` samples input
/// channel `ci` bilinearly (zero outside the image) at row `oy s - pad + ky dil + dy` and
/// column `ox s - pad + kx dil + dx`, with `(dy, dx)` the offsets of `ci`'s deform group for
/// that tap and pixel, times the tap's `mask` value when given; the samples reduce as a
/// convolution's patches.
///
/// `x`: `(N, C_in*H*W)` for `dims = (N, C_in, H, W)`; `offset`: `(N,
/// deform_groups*2*kH*kW*H_out*W_out)`, channel `g*2*kH*kW + 2*(ky*kW + kx)` the row
/// offset, the next the column offset; `mask`: `(N, deform_groups*kH*kW*H_out*W_out)` or
/// `None`; `w`: `(C_out, C_in/groups*kH*kW)`; `bias`: `C_out` values or `None`; `y` resized
/// to `(N, C_out*H_out*W_out)` (the conv2d formula) and overwritten. `deform_groups` divides
/// `C_in`.
#[allow(clippy::too_many_arguments)]
pub fn deform_conv2d_forward(
    x: &Tensor,
    offset: &Tensor,
    mask: Option<&Tensor>,
    w: &Tensor,
    bias: Option<&Tensor>,
    dims: impl Into<Nchw>,
    c_out: usize,
    spec: &Conv2dSpec,
    deform_groups: usize,
    y: &mut Tensor,
) -> Result<()> {
    let op = "deform_conv2d_forward";
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("offset", offset).float(),
            input_opt("mask", mask),
            input("w", w).float(),
            input_opt("bias", bias),
            written("y", y),
        ],
    )?;
    let conv = forward_geometry(op, dims.into(), c_out, spec)?;
    if deform_groups == 0 || !conv.x.c.is_multiple_of(deform_groups) {
        return Err(Error::shape(
            op,
            format!(
                "deform_groups = {deform_groups} must divide C_in = {}",
                conv.x.c
            ),
        ));
    }
    let [kh, kw] = conv.spec.kernel;
    check_activation(op, "x", x, conv.x)?;
    check_weight(op, "w", w, conv.c_out, [conv.group_in(), kh, kw])?;
    check_bias(op, bias, conv.c_out, x)?;
    let taps = checked_product(op, "deform_groups*kH*kW", &[deform_groups, kh, kw])?;
    for (name, t, per_tap) in [("offset", Some(offset), 2), ("mask", mask, 1)] {
        let Some(t) = t else { continue };
        let channels = checked_product(op, "offset channels", &[taps, per_tap])?;
        check_activation(
            op,
            name,
            t,
            Nchw::new(conv.x.n, channels, conv.out[0], conv.out[1]),
        )
        .map_err(|_| {
            Error::shape(
                op,
                format!(
                    "`{name}` must hold deform_groups*{}kH*kW = {channels} channels of H_out*W_out = {:?} per batch entry, got {:?}",
                    if per_tap == 2 { "2*" } else { "" },
                    conv.out,
                    t.dims()
                ),
            )
        })?;
        check_dtypes_match(op, ("x", x), &[(name, t)])?;
    }
    check_dtypes_match(op, ("x", x), &[("w", w)])?;
    be.out("y", y, &output_dims(x, y_dims(&conv)), x.dtype())?;
    if conv.lens[2] == 0 {
        return Ok(());
    }
    be.deform_conv2d_forward(op, &conv, deform_groups, x, offset, mask, w, bias, y)
}

/// Checks a 3-D convolution's operands: `x (N, C_in*D*H*W)` or 5-D, the weight `(C_out,
/// C_in/groups*kD*kH*kW)` or 5-D, the bias.
fn check_3d(
    op: &'static str,
    conv: &Conv3d,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
) -> Result<()> {
    let [d, h, wd] = conv.input;
    let (n, c) = (conv.n, conv.c_in);
    let per = checked_product(op, "C*D*H*W", &[c, d, h, wd])?;
    if x.dims() != [n, per] && x.dims() != [n, c, d, h, wd] {
        return Err(Error::shape(
            op,
            format!(
                "`x` must be shaped (N, C*D*H*W) or [N, C, D, H, W] = {:?}, got {:?}",
                [n, c, d, h, wd],
                x.dims()
            ),
        ));
    }
    let [kd, kh, kw] = conv.spec.kernel;
    let cg = c / conv.spec.groups;
    let row = checked_product(op, "C_in/groups*kD*kH*kW", &[cg, kd, kh, kw])?;
    if w.dims() != [conv.c_out, row] && w.dims() != [conv.c_out, cg, kd, kh, kw] {
        return Err(Error::shape(
            op,
            format!(
                "`w` must be shaped ({}, {row}) or {:?}, got {:?}",
                conv.c_out,
                [conv.c_out, cg, kd, kh, kw],
                w.dims()
            ),
        ));
    }
    check_bias(op, bias, conv.c_out, x)
}

/// The dims of a 3-D convolution's output in `x`'s layout (5-D for a 5-D `x`).
fn output_dims_3d(x: &Tensor, conv: &Conv3d) -> Vec<usize> {
    let [d, h, w] = conv.out;
    if x.dims().len() == 5 {
        vec![conv.n, conv.c_out, d, h, w]
    } else {
        vec![conv.n, conv.c_out * d * h * w]
    }
}

/// 3-D convolution over NCDHW (C++ `conv3d_forward`), forward only: `y[n, o] = bias[o] + sum
/// over the group's input channels and the taps of x * w`, per-axis stride, zero padding and
/// dilation of `spec` (depth, height, width), and `groups`. `x`: `(N, C_in*D*H*W)` (or 5-D)
/// for `dims = (N, C_in, D, H, W)`; `w`: `(C_out, C_in/groups*kD*kH*kW)`; `bias`: `C_out`
/// values or `None`; `y` is resized to `(N, C_out*D_out*H_out*W_out)` (5-D for a 5-D `x`)
/// and overwritten.
pub fn conv3d_forward(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    dims: (usize, usize, usize, usize, usize),
    c_out: usize,
    spec: &Conv3dSpec,
    y: &mut Tensor,
) -> Result<()> {
    let op = "conv3d_forward";
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("w", w).float(),
            input_opt("bias", bias),
            written("y", y),
        ],
    )?;
    let conv = conv3d_geometry(op, dims, c_out, spec)?;
    check_dtypes_match(op, ("x", x), &[("w", w)])?;
    forward_3d(op, &be, &conv, (x, w, bias), y)
}

fn conv3d_geometry(
    op: &'static str,
    (n, c, d, h, w): (usize, usize, usize, usize, usize),
    c_out: usize,
    spec: &Conv3dSpec,
) -> Result<Conv3d> {
    Conv3d::new(n, c, [d, h, w], c_out, *spec).map_err(|e| Error::shape(op, e))
}

fn forward_3d(
    op: &'static str,
    be: &Dispatched,
    conv: &Conv3d,
    (x, w, bias): (&Tensor, &Tensor, Option<&Tensor>),
    y: &mut Tensor,
) -> Result<()> {
    check_3d(op, conv, x, w, bias)?;
    be.out("y", y, &output_dims_3d(x, conv), x.dtype())?;
    if conv.lens[2] == 0 {
        return Ok(());
    }
    be.conv3d_forward(op, conv, x, w, bias, y)
}

/// W8A16 3-D convolution (C++ `conv3d_int8w_fp16_forward`, the Qwen-VL patch embedding):
/// [`conv3d_forward`] with an I8 weight `w_int8 (C_out, C_in/groups*kD*kH*kW)` and F32
/// per-output-channel `scales`, dequantized on the device into `x`'s dtype; `x`, `bias`, `y`
/// F16 or BF16; FP32 accumulation.
#[allow(clippy::too_many_arguments)]
pub fn conv3d_int8w_fp16_forward(
    x: &Tensor,
    w_int8: &Tensor,
    scales: &Tensor,
    bias: Option<&Tensor>,
    dims: (usize, usize, usize, usize, usize),
    c_out: usize,
    spec: &Conv3dSpec,
    y: &mut Tensor,
) -> Result<()> {
    let op = "conv3d_int8w_fp16_forward";
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("w_int8", w_int8),
            input("scales", scales),
            input_opt("bias", bias),
            written("y", y),
        ],
    )?;
    let conv = conv3d_geometry(op, dims, c_out, spec)?;
    check_3d(op, &conv, x, w_int8, None)?;
    let [kd, kh, kw] = conv.spec.kernel;
    let row = conv.c_in / conv.spec.groups * kd * kh * kw;
    let flat = w_int8.reshaped(conv.c_out, row)?;
    let w16 = super::quant::int8_weight_as(op, be, &flat, scales, x)?;
    forward_3d(op, &be, &conv, (x, &w16, bias), y)
}

/// NCL dims `(n, c, l)` as NCHW with one row.
fn ncl((n, c, l): (usize, usize, usize)) -> Nchw {
    Nchw::new(n, c, 1, l)
}

/// The 2-D geometry of a 1-D convolution (one row, a one-row kernel).
fn conv1d<'a>(dims: (usize, usize, usize), c_out: usize, spec: &'a Conv1dSpec) -> Geometry<'a> {
    Box::new(move |op| forward_geometry(op, ncl(dims), c_out, &as_2d(spec)))
}

/// The 2-D spec of a 1-D one: a height of one row and a one-row kernel.
fn as_2d(spec: &Conv1dSpec) -> Conv2dSpec {
    Conv2dSpec {
        kernel: [1, spec.kernel[0]],
        stride: [1, spec.stride[0]],
        padding: [0, spec.padding[0]],
        dilation: [1, spec.dilation[0]],
        groups: spec.groups,
    }
}

/// 1-D convolution over NCL (C++ `conv1d`: [`conv2d_forward`] with `H = kH = 1`). `x`:
/// `(N, C_in*L)` (or `[N, C_in, L]`) for `dims = (N, C_in, L)`; `w`: `(C_out,
/// C_in/groups*kL)`; `bias`: `C_out` values or `None`; `y` is resized to `(N, C_out*L_out)`
/// (or 3-D), `L_out = (L + 2 pad - dil (kL - 1) - 1) / stride + 1`, and overwritten.
pub fn conv1d_forward(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    dims: (usize, usize, usize),
    c_out: usize,
    spec: &Conv1dSpec,
    y: &mut Tensor,
) -> Result<()> {
    convolve("conv1d_forward", (x, w, bias), conv1d(dims, c_out, spec), y)
}

/// The input gradient of [`conv1d_forward`] (C++ `conv1d_backward_input`), overwriting `dx`.
pub fn conv1d_backward_input(
    w: &Tensor,
    dy: &Tensor,
    dims: (usize, usize, usize),
    c_out: usize,
    spec: &Conv1dSpec,
    dx: &mut Tensor,
) -> Result<()> {
    let geometry = conv1d(dims, c_out, spec);
    convolve_backward_input("conv1d_backward_input", (w, dy), geometry, dx)
}

/// The weight gradient of [`conv1d_forward`] (C++ `conv1d_backward_weight`): `dw (C_out,
/// C_in/groups*kL)`, pre-sized, accumulated.
pub fn conv1d_backward_weight(
    x: &Tensor,
    dy: &Tensor,
    dims: (usize, usize, usize),
    c_out: usize,
    spec: &Conv1dSpec,
    dw: &mut Tensor,
) -> Result<()> {
    let geometry = conv1d(dims, c_out, spec);
    convolve_backward_weight("conv1d_backward_weight", (x, dy), geometry, dw)
}

/// The bias gradient of [`conv1d_forward`] (C++ `conv1d_backward_bias`): `db[c] += sum of
/// dy[n, c, :]` for `out = (N, C_out, L_out)`; `db` pre-sized, accumulated.
pub fn conv1d_backward_bias(
    dy: &Tensor,
    out: (usize, usize, usize),
    db: &mut Tensor,
) -> Result<()> {
    bias_grad("conv1d_backward_bias", dy, ncl(out), db)
}

/// The geometry whose input gradient is the transposed 1-D convolution of an `x` of `dims`.
fn conv_t1d<'a>(
    dims: (usize, usize, usize),
    c_out: usize,
    spec: &'a Conv1dSpec,
    output_padding: usize,
) -> Geometry<'a> {
    Box::new(move |op| transposed_geometry(op, ncl(dims), c_out, &as_2d(spec), [0, output_padding]))
}

/// 1-D transposed convolution over NCL (C++ `conv_transpose1d_forward`): each `x[n, ci, l]`
/// adds `x * w[ci, o, kl]` into output sample `l stride - pad + kl dil` of the group's output
/// channels. `x`: `(N, C_in*L)`; `w`: `(C_in, C_out/groups*kL)`; `bias`: `C_out` values or
/// `None`; `y` is resized to `(N, C_out*L_out)`, `L_out = (L - 1) stride - 2 pad + dil (kL -
/// 1) + output_padding + 1`, and overwritten.
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose1d_forward(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    dims: (usize, usize, usize),
    c_out: usize,
    spec: &Conv1dSpec,
    output_padding: usize,
    y: &mut Tensor,
) -> Result<()> {
    let geometry = conv_t1d(dims, c_out, spec, output_padding);
    transpose("conv_transpose1d_forward", (x, w, bias), geometry, y)
}

/// The input gradient of [`conv_transpose1d_forward`] (C++
/// `conv_transpose1d_backward_input`): a plain 1-D convolution of `dy`, overwriting `dx`.
pub fn conv_transpose1d_backward_input(
    w: &Tensor,
    dy: &Tensor,
    dims: (usize, usize, usize),
    c_out: usize,
    spec: &Conv1dSpec,
    output_padding: usize,
    dx: &mut Tensor,
) -> Result<()> {
    let geometry = conv_t1d(dims, c_out, spec, output_padding);
    transpose_backward_input("conv_transpose1d_backward_input", (w, dy), geometry, dx)
}

/// The weight gradient of [`conv_transpose1d_forward`] (C++
/// `conv_transpose1d_backward_weight`): `dw (C_in, C_out/groups*kL)`, pre-sized,
/// accumulated.
pub fn conv_transpose1d_backward_weight(
    x: &Tensor,
    dy: &Tensor,
    dims: (usize, usize, usize),
    c_out: usize,
    spec: &Conv1dSpec,
    output_padding: usize,
    dw: &mut Tensor,
) -> Result<()> {
    let geometry = conv_t1d(dims, c_out, spec, output_padding);
    transpose_backward_weight("conv_transpose1d_backward_weight", (x, dy), geometry, dw)
}

/// The bias gradient of [`conv_transpose1d_forward`] (C++
/// `conv_transpose1d_backward_bias`), for `out = (N, C_out, L_out)`; accumulated.
pub fn conv_transpose1d_backward_bias(
    dy: &Tensor,
    out: (usize, usize, usize),
    db: &mut Tensor,
) -> Result<()> {
    bias_grad("conv_transpose1d_backward_bias", dy, ncl(out), db)
}

/// Pads the length axis of NCL rows (C++ `pad1d_forward`): `y[n, c]` is `x[n, c]` with
/// `pad_left` samples before and `pad_right` after, filled by `mode` (zeros; reflect, the
/// edge not repeated, each pad below `L`; replicate, the edge sample repeated). `x`: `(N,
/// C*L)` (or `[N, C, L]`) for `dims = (N, C, L)`; `y` is resized to `(N, C*(L + pads))`
/// (or 3-D) and overwritten.
pub fn pad1d_forward(
    x: &Tensor,
    dims: (usize, usize, usize),
    (pad_left, pad_right): (usize, usize),
    mode: PadMode,
    y: &mut Tensor,
) -> Result<()> {
    let pads = [0, 0, pad_left, pad_right];
    super::spatial::pad_planes("pad1d_forward", x, ncl(dims), pads, mode, y)
}

/// The adjoint of [`pad1d_forward`] (C++ `pad1d_backward`): each input sample sums the
/// gradients of the output samples that read it. `dy`: `(N, C*(L + pads))`; `dx` is resized
/// to `(N, C*L)` (or 3-D) and overwritten. Sizes and mode as the forward call.
pub fn pad1d_backward(
    dy: &Tensor,
    dims: (usize, usize, usize),
    (pad_left, pad_right): (usize, usize),
    mode: PadMode,
    dx: &mut Tensor,
) -> Result<()> {
    let pads = [0, 0, pad_left, pad_right];
    super::spatial::pad_planes_backward("pad1d_backward", dy, ncl(dims), pads, mode, dx)
}

/// One streaming step of a causal depthwise 1-D convolution (C++ `causal_conv1d_update`):
/// with `buf = state[n, c] ++ x[n, c]`, `y[n, c, t] = bias[c] + sum_kl w[c, kl] buf[t + kl
/// dilation]` for the `L_step` new samples, and `state` becomes the last `(kL - 1) dilation`
/// samples of `buf`, so successive calls compute one causal convolution over the
/// concatenated input (zero the state before the first). `x`: `(N, C*L_step)` for `dims =
/// (N, C, L_step)`; `w`: `(C, kL)`; `bias`: `C` values or `None`; `state`: `(N,
/// C*(kL-1)*dilation)`, pre-sized, read and overwritten; `y` resized like `x`.
#[allow(clippy::too_many_arguments)]
pub fn causal_conv1d_update(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    dims: (usize, usize, usize),
    kernel: usize,
    dilation: usize,
    state: &mut Tensor,
    y: &mut Tensor,
) -> Result<()> {
    let op = "causal_conv1d_update";
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("w", w).float(),
            input_opt("bias", bias),
            updated("state", state),
            written("y", y),
        ],
    )?;
    let (n, c, steps) = dims;
    if kernel == 0 || dilation == 0 {
        return Err(Error::shape(
            op,
            format!("kernel {kernel} and dilation {dilation} must be at least 1"),
        ));
    }
    let s = checked_product(op, "(kL - 1) * dilation", &[kernel - 1, dilation])?;
    check_activation(op, "x", x, ncl(dims))?;
    check_weight(op, "w", w, c, [1, 1, kernel])?;
    check_dtypes_match(op, ("x", x), &[("w", w)])?;
    check_bias(op, bias, c, x)?;
    let state_len = checked_product(op, "N*C*(kL-1)*dilation", &[n, c, s])?;
    check_accumulated(op, "state", state, ("x", x), state_len)?;
    be.out("y", y, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    be.causal_conv1d_update(op, x, w, bias, (n, c, steps, kernel, dilation), state, y)
}

/// The four dims of a 4-D tensor, or an error naming it.
pub(super) fn dims4(op: &'static str, name: &'static str, t: &Tensor) -> Result<[usize; 4]> {
    <[usize; 4]>::try_from(t.dims())
        .map_err(|_| Error::shape(op, format!("`{name}` must be 4-D, got {:?}", t.dims())))
}

/// The three dims of a 3-D tensor, or an error naming it.
fn dims3(op: &'static str, name: &'static str, t: &Tensor) -> Result<[usize; 3]> {
    <[usize; 3]>::try_from(t.dims())
        .map_err(|_| Error::shape(op, format!("`{name}` must be 3-D, got {:?}", t.dims())))
}

/// Checks that a weight's kernel dims are the spec's.
fn check_kernel(op: &'static str, found: &[usize], spec: &[usize]) -> Result<()> {
    if found != spec {
        return Err(Error::shape(
            op,
            format!("the weight's kernel {found:?} differs from the spec's {spec:?}"),
        ));
    }
    Ok(())
}

impl Tensor {
    /// [`conv2d_forward`] of this `[N, C_in, H, W]` tensor by a `[C_out, C_in/groups, kH, kW]`
    /// weight (its kernel must be `spec.kernel`) and an optional `C_out` bias: a new
    /// `[N, C_out, H_out, W_out]` tensor.
    pub fn conv2d(&self, w: &Tensor, bias: Option<&Tensor>, spec: &Conv2dSpec) -> Result<Tensor> {
        let op = "conv2d";
        let [n, c, h, width] = dims4(op, "self", self)?;
        let [c_out, _, kh, kw] = dims4(op, "w", w)?;
        check_kernel(op, &[kh, kw], &spec.kernel)?;
        let mut y = Tensor::default();
        conv2d_forward(self, w, bias, (n, c, h, width), c_out, spec, &mut y)?;
        Ok(y)
    }

    /// [`conv_transpose2d_forward`] of this `[N, C_in, H, W]` tensor by a `[C_in,
    /// C_out/groups, kH, kW]` weight (its kernel must be `spec.kernel`) and an optional
    /// `C_out` bias: a new `[N, C_out, H_out, W_out]` tensor.
    pub fn conv_transpose2d(
        &self,
        w: &Tensor,
        bias: Option<&Tensor>,
        spec: &Conv2dSpec,
        output_padding: [usize; 2],
    ) -> Result<Tensor> {
        let op = "conv_transpose2d";
        let [n, c, h, width] = dims4(op, "self", self)?;
        let [_, per_group, kh, kw] = dims4(op, "w", w)?;
        check_kernel(op, &[kh, kw], &spec.kernel)?;
        let c_out = per_group
            .checked_mul(spec.groups)
            .ok_or_else(|| Error::shape(op, "C_out/groups * groups overflows"))?;
        let mut y = Tensor::default();
        let dims = (n, c, h, width);
        conv_transpose2d_forward(self, w, bias, dims, c_out, spec, output_padding, &mut y)?;
        Ok(y)
    }

    /// [`conv1d_forward`] of this `[N, C_in, L]` tensor by a `[C_out, C_in/groups, kL]`
    /// weight (its kernel must be `spec.kernel`) and an optional `C_out` bias: a new
    /// `[N, C_out, L_out]` tensor.
    pub fn conv1d(&self, w: &Tensor, bias: Option<&Tensor>, spec: &Conv1dSpec) -> Result<Tensor> {
        let op = "conv1d";
        let [n, c, l] = dims3(op, "self", self)?;
        let [c_out, _, kl] = dims3(op, "w", w)?;
        check_kernel(op, &[kl], &spec.kernel)?;
        let mut y = Tensor::default();
        conv1d_forward(self, w, bias, (n, c, l), c_out, spec, &mut y)?;
        Ok(y)
    }
}
