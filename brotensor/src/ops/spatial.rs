//! NCHW spatial layout (C++ `ops/spatial.h`): 2-D padding and its gradient, crops,
//! neighbourhood unfold, SAM windows, NCHW <-> token sequences, the 2x2 patch merger, the
//! DC-AE channel-to-space upsampler and DiT's unpatchify.
//!
//! Activations are `(N, C*H*W)` (or `[N, C, H, W]`; outputs take the rank of the tensor
//! they come from). Padding (zero, reflect, replicate) is the one-tap case of `unfold2d`'s
//! kernel, and its gradient a gather. The pure rearrangements (crop, windows, sequences,
//! patch merge, unpatchify) are views of the input (`reshape`, `permute`, `narrow`)
//! materialised by the one strided copy ([`super::copy_into`]), on every device and dtype.

use super::conv::{check_activation, check_nchw, dims4, output_dims};
use super::pooling::halved;
use super::{checked_product, copy_into, declare, dispatch, input, written, Nchw, PadMode};
use crate::backend::Unfold2d;
use crate::{Error, Result, Tensor};

/// `[top, bottom, left, right]` of a 2-D padding as the per-axis `before` and `after`.
fn pads_of([top, bottom, left, right]: [usize; 4]) -> ([usize; 2], [usize; 2]) {
    ([top, left], [bottom, right])
}

/// The padding of `dims` by `pads` in `mode`, checked, with its padded dims.
fn padding(
    op: &'static str,
    dims: Nchw,
    pads: [usize; 4],
    mode: PadMode,
) -> Result<(Unfold2d, Nchw)> {
    let (before, after) = pads_of(pads);
    let g = Unfold2d::padding([dims.h, dims.w], before, after, mode);
    let [hp, wp] = g.out_size().map_err(|e| Error::shape(op, e))?;
    let out = Nchw::new(dims.n, dims.c, hp, wp);
    check_nchw(op, out)?;
    Ok((g, out))
}

/// Pads the H and W axes of NCHW (C++ `pad2d_forward`, PyTorch's `F.pad` with four pads):
/// `pads = [top, bottom, left, right]`, filled by `mode` (zeros; reflect, the edge not
/// repeated, each pad below its axis; replicate, the edge repeated). `x`: `(N, C*H*W)` for
/// `dims = (N, C, H, W)`; `y` is resized to `(N, C*(H+top+bottom)*(W+left+right))`.
pub fn pad2d_forward(
    x: &Tensor,
    dims: impl Into<Nchw>,
    pads: [usize; 4],
    mode: PadMode,
    y: &mut Tensor,
) -> Result<()> {
    pad_planes("pad2d_forward", x, dims.into(), pads, mode, y)
}

/// `y` = the planes of `x` (`d`) padded by `pads` in `mode`, named `op` in errors: the 2-D
/// padding, and the 1-D one on one-row planes (`ops::pad1d_forward`).
pub(super) fn pad_planes(
    op: &'static str,
    x: &Tensor,
    d: Nchw,
    pads: [usize; 4],
    mode: PadMode,
    y: &mut Tensor,
) -> Result<()> {
    let be = dispatch(op, &[input("x", x).float(), written("y", y)])?;
    let (g, out) = padding(op, d, pads, mode)?;
    check_activation(op, "x", x, d)?;
    be.out("y", y, &output_dims(x, out), x.dtype())?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.unfold2d(op, &g, [out.h, out.w], x, y)
}

/// The gradient of [`pad2d_forward`] (C++ `pad2d_backward`): each input pixel sums the
/// `dy` of the padded pixels that read it (reflect and replicate fold several into one).
/// `dy`: the padded `(N, C*H_p*W_p)`; `dx` is resized to `(N, C*H*W)` and overwritten.
pub fn pad2d_backward(
    dy: &Tensor,
    dims: impl Into<Nchw>,
    pads: [usize; 4],
    mode: PadMode,
    dx: &mut Tensor,
) -> Result<()> {
    pad_planes_backward("pad2d_backward", dy, dims.into(), pads, mode, dx)
}

/// The adjoint of [`pad_planes`]: `dx` from the padded `dy`, overwritten.
pub(super) fn pad_planes_backward(
    op: &'static str,
    dy: &Tensor,
    d: Nchw,
    pads: [usize; 4],
    mode: PadMode,
    dx: &mut Tensor,
) -> Result<()> {
    let be = dispatch(op, &[input("dy", dy).float(), written("dx", dx)])?;
    let (g, out) = padding(op, d, pads, mode)?;
    check_activation(op, "dy", dy, out)?;
    check_nchw(op, d)?;
    be.out("dx", dx, &output_dims(dy, d), dy.dtype())?;
    if dx.numel() == 0 {
        return Ok(());
    }
    be.pad2d_backward(op, &g, dy, dx)
}

/// Checks a crop of `out` at `origin` inside `dims`.
fn crop(op: &'static str, dims: Nchw, origin: [usize; 2], out: [usize; 2]) -> Result<()> {
    for (axis, (o, (len, size))) in ["H", "W"].into_iter().zip(
        origin
            .into_iter()
            .zip(out.into_iter().zip([dims.h, dims.w])),
    ) {
        if o.checked_add(len).is_none_or(|end| end > size) {
            return Err(Error::shape(
                op,
                format!("the crop {o}..{o}+{len} leaves {axis} = {size}"),
            ));
        }
    }
    check_nchw(op, Nchw::new(dims.n, dims.c, out[0], out[1]))?;
    Ok(())
}

/// Crops NCHW (C++ `slice2d_forward`): `y[n, c, i, j] = x[n, c, h0 + i, w0 + j]` for the
/// `(H_out, W_out)` window at `(h0, w0)`, which must lie inside `H x W`. A view of `x`
/// (`narrow` twice) copied densely. `x`: `(N, C*H*W)` for `dims = (N, C, H, W)`; `y` is
/// resized to `(N, C*H_out*W_out)`.
pub fn slice2d_forward(
    x: &Tensor,
    dims: impl Into<Nchw>,
    (h0, w0): (usize, usize),
    (h_out, w_out): (usize, usize),
    y: &mut Tensor,
) -> Result<()> {
    let op = "slice2d_forward";
    declare(op, &[input("x", x), written("y", y)])?;
    let d: Nchw = dims.into();
    check_activation(op, "x", x, d)?;
    crop(op, d, [h0, w0], [h_out, w_out])?;
    let view = x
        .contiguous()?
        .reshape(&d.dims())?
        .narrow(2, h0, h_out)?
        .narrow(3, w0, w_out)?;
    let out = Nchw::new(d.n, d.c, h_out, w_out);
    materialise(&view, &output_dims(x, out), y)
}

/// The gradient of [`slice2d_forward`] (C++ `slice2d_backward`): `dy` placed at `(h0, w0)`
/// in a zero `H x W` plane (the zero [`pad2d_forward`] of `dy`). `dy`: `(N, C*H_out*W_out)`;
/// `dx` is resized to `(N, C*H*W)` and overwritten.
pub fn slice2d_backward(
    dy: &Tensor,
    dims: impl Into<Nchw>,
    (h0, w0): (usize, usize),
    (h_out, w_out): (usize, usize),
    dx: &mut Tensor,
) -> Result<()> {
    let op = "slice2d_backward";
    declare(op, &[input("dy", dy), written("dx", dx)])?;
    let d: Nchw = dims.into();
    crop(op, d, [h0, w0], [h_out, w_out])?;
    let pads = [h0, d.h - h0 - h_out, w0, d.w - w0 - w_out];
    pad2d_forward(dy, (d.n, d.c, h_out, w_out), pads, PadMode::Zero, dx)
}

/// Neighbourhood unfold that keeps the spatial grid (C++ `unfold2d_forward`; not
/// `torch.nn.Unfold`'s column layout): `y[n, c, ky kW + kx, oy, ox] = x[n, c, oy sh - top +
/// ky, ox sw - left + kx]`, positions outside the image filled by `mode`. The output height
/// is `(H + top + bottom - kH) / sh + 1` (and the width alike). `x`: `(N, C*H*W)` for `dims = (N, C, H,
/// W)`; `pads = [top, bottom, left, right]`; `y` is resized to `(N, C*kH*kW*H_out*W_out)`.
/// Forward only.
pub fn unfold2d_forward(
    x: &Tensor,
    dims: impl Into<Nchw>,
    kernel: [usize; 2],
    stride: [usize; 2],
    pads: [usize; 4],
    mode: PadMode,
    y: &mut Tensor,
) -> Result<()> {
    let op = "unfold2d_forward";
    let be = dispatch(op, &[input("x", x).float(), written("y", y)])?;
    let d: Nchw = dims.into();
    check_activation(op, "x", x, d)?;
    let (before, after) = pads_of(pads);
    let g = Unfold2d {
        input: [d.h, d.w],
        kernel,
        stride,
        before,
        after,
        mode,
    };
    let out = g.out_size().map_err(|e| Error::shape(op, e))?;
    let per_item = checked_product(
        op,
        "C*kH*kW*H_out*W_out",
        &[d.c, kernel[0], kernel[1], out[0], out[1]],
    )?;
    checked_product(op, "N*C*kH*kW*H_out*W_out", &[d.n, per_item])?;
    be.out("y", y, &[d.n, per_item], x.dtype())?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.unfold2d(op, &g, out, x, y)
}

/// Windows per axis of `dims` by `window`, or the error when they do not tile it.
fn windows(op: &'static str, dims: Nchw, window: usize) -> Result<[usize; 2]> {
    if window == 0 || !dims.h.is_multiple_of(window) || !dims.w.is_multiple_of(window) {
        return Err(Error::shape(
            op,
            format!(
                "H x W = {} x {} must be tiled by windows of {window} (pad2d first)",
                dims.h, dims.w
            ),
        ));
    }
    Ok([dims.h / window, dims.w / window])
}

/// `view` (a view of an input) written densely into `y`, then viewed as `dims`.
fn materialise(view: &Tensor, dims: &[usize], y: &mut Tensor) -> Result<()> {
    copy_into(view, y)?;
    y.reshape_(dims)
}

/// SAM window partition (C++ `window_partition_forward`): the `H x W` plane split into
/// `window x window` tiles stacked along the batch, row `n*nh*nw + i*nw + j` holding tile
/// `(i, j)` of image `n` as `(C, window, window)`. `x`: `(N, C*H*W)` for `dims = (N, C, H,
/// W)`, `H` and `W` multiples of `window`; `y` is resized to `(N*nh*nw, C*window*window)`.
/// [`window_reverse_forward`] is its inverse and adjoint.
pub fn window_partition_forward(
    x: &Tensor,
    dims: impl Into<Nchw>,
    window: usize,
    y: &mut Tensor,
) -> Result<()> {
    let op = "window_partition_forward";
    declare(op, &[input("x", x), written("y", y)])?;
    let d: Nchw = dims.into();
    check_activation(op, "x", x, d)?;
    let [nh, nw] = windows(op, d, window)?;
    let view = x
        .contiguous()?
        .reshape(&[d.n, d.c, nh, window, nw, window])?
        .permute(&[0, 2, 4, 1, 3, 5])?;
    let rows = checked_product(op, "N*nh*nw", &[d.n, nh, nw])?;
    materialise(&view, &[rows, d.c * window * window], y)
}

/// The inverse of [`window_partition_forward`] (C++ `window_reverse_forward`), also its
/// adjoint. `x`: `(N*nh*nw, C*window*window)`; `y` is resized to `(N, C*H*W)`.
pub fn window_reverse_forward(
    x: &Tensor,
    dims: impl Into<Nchw>,
    window: usize,
    y: &mut Tensor,
) -> Result<()> {
    let op = "window_reverse_forward";
    declare(op, &[input("x", x), written("y", y)])?;
    let d: Nchw = dims.into();
    let [nh, nw] = windows(op, d, window)?;
    let rows = checked_product(op, "N*nh*nw", &[d.n, nh, nw])?;
    let cols = checked_product(op, "C*window*window", &[d.c, window, window])?;
    if x.dims() != [rows, cols] {
        return Err(Error::shape(
            op,
            format!(
                "`x` must be shaped (N*nh*nw, C*window*window) = ({rows}, {cols}), got {:?}",
                x.dims()
            ),
        ));
    }
    let view = x
        .contiguous()?
        .reshape(&[d.n, nh, nw, d.c, window, window])?
        .permute(&[0, 3, 1, 4, 2, 5])?;
    materialise(
        &view,
        &[d.n, d.per_item().map_err(|e| Error::shape(op, e))?],
        y,
    )
}

/// NCHW to a token sequence (C++ `nchw_to_sequence`): `y[n*H*W + h*W + w, c] = x[n, c, h,
/// w]`. `x`: `(N, C*H*W)` for `dims = (N, C, H, W)`; `y` is resized to `(N*H*W, C)`.
pub fn nchw_to_sequence(x: &Tensor, dims: impl Into<Nchw>, y: &mut Tensor) -> Result<()> {
    let op = "nchw_to_sequence";
    declare(op, &[input("x", x), written("y", y)])?;
    let d: Nchw = dims.into();
    check_activation(op, "x", x, d)?;
    let plane = d.plane().map_err(|e| Error::shape(op, e))?;
    let view = x
        .contiguous()?
        .reshape(&[d.n, d.c, plane])?
        .permute(&[0, 2, 1])?;
    let rows = checked_product(op, "N*H*W", &[d.n, plane])?;
    materialise(&view, &[rows, d.c], y)
}

/// A token sequence to NCHW (C++ `sequence_to_nchw`), the inverse of [`nchw_to_sequence`].
/// `x`: `(N*H*W, C)`; `y` is resized to `(N, C*H*W)`.
pub fn sequence_to_nchw(x: &Tensor, dims: impl Into<Nchw>, y: &mut Tensor) -> Result<()> {
    let op = "sequence_to_nchw";
    declare(op, &[input("x", x), written("y", y)])?;
    let d: Nchw = dims.into();
    let plane = d.plane().map_err(|e| Error::shape(op, e))?;
    let rows = checked_product(op, "N*H*W", &[d.n, plane])?;
    if x.dims() != [rows, d.c] {
        return Err(Error::shape(
            op,
            format!(
                "`x` must be shaped (N*H*W, C) = ({rows}, {}), got {:?}",
                d.c,
                x.dims()
            ),
        ));
    }
    let view = x
        .contiguous()?
        .reshape(&[d.n, plane, d.c])?
        .permute(&[0, 2, 1])?;
    materialise(
        &view,
        &[d.n, d.per_item().map_err(|e| Error::shape(op, e))?],
        y,
    )
}

/// The Qwen-VL 2x2 patch merger (C++ `spatial_merge_2x2_forward`): each 2x2 block stacked
/// into the channels, `y[n, c_out, i, j] = x[n, c, 2i + dh, 2j + dw]` with `c_out = (2 dh +
/// dw) C + c` (block-major, Qwen-VL) or, with `channel_major`, `c_out = 4c + 2 dh + dw`
/// (PyTorch's `pixel_unshuffle(2)`). `x`: `(N, C*H*W)` for `dims = (N, C, H, W)`, `H`, `W`
/// even; `y` is resized to `(N, 4C*H/2*W/2)`.
pub fn spatial_merge_2x2_forward(
    x: &Tensor,
    dims: impl Into<Nchw>,
    channel_major: bool,
    y: &mut Tensor,
) -> Result<()> {
    let op = "spatial_merge_2x2_forward";
    declare(op, &[input("x", x), written("y", y)])?;
    let d: Nchw = dims.into();
    check_activation(op, "x", x, d)?;
    let [ho, wo] = halved(op, d)?;
    let perm: [usize; 6] = if channel_major {
        [0, 1, 3, 5, 2, 4]
    } else {
        [0, 3, 5, 1, 2, 4]
    };
    let view = x
        .contiguous()?
        .reshape(&[d.n, d.c, ho, 2, wo, 2])?
        .permute(&perm)?;
    let out = Nchw::new(d.n, checked_product(op, "4*C", &[4, d.c])?, ho, wo);
    materialise(&view, &output_dims(x, out), y)
}

/// DC-AE's up-shortcut (C++ `pixel_shuffle_upsample_2x_forward`): the channels repeated
/// `r = 4 C_out / C_in` times, then a 2x pixel shuffle: `y[n, co, 2h + i, 2w + j] = x[n, (4
/// co + 2i + j) / r, h, w]`. `x`: `(N, C_in*H*W)` for `dims = (N, C_in, H, W)`; `C_in` must
/// divide `4 C_out`; `y` is resized to `(N, C_out*2H*2W)`.
pub fn pixel_shuffle_upsample_2x_forward(
    x: &Tensor,
    dims: impl Into<Nchw>,
    c_out: usize,
    y: &mut Tensor,
) -> Result<()> {
    let op = "pixel_shuffle_upsample_2x_forward";
    let be = dispatch(op, &[input("x", x).float(), written("y", y)])?;
    let d: Nchw = dims.into();
    check_activation(op, "x", x, d)?;
    let four = checked_product(op, "4*C_out", &[4, c_out])?;
    if d.c == 0 || c_out == 0 || four % d.c != 0 {
        return Err(Error::shape(
            op,
            format!("C_in = {} must divide 4*C_out = {four} (both nonzero)", d.c),
        ));
    }
    let out = Nchw::new(
        d.n,
        c_out,
        checked_product(op, "2H", &[2, d.h])?,
        checked_product(op, "2W", &[2, d.w])?,
    );
    check_nchw(op, out)?;
    be.out("y", y, &output_dims(x, out), x.dtype())?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.pixel_shuffle_upsample_2x(op, (d.n, d.c, d.h, d.w), c_out, x, y)
}

/// DiT's unpatchify (C++ `patch_unpack_forward`): `hp x wp` tokens of `P x P x C_total`
/// values to one `(C_keep, hp P, wp P)` image, the trailing `C_total - C_keep` channels
/// dropped: `y[c, i P + py, j P + px] = tokens[i wp + j, col]` with `col = (py P + px)
/// C_total + c`, or with `channel_major` `c P^2 + py P + px`. `tokens`: `(hp*wp,
/// P*P*C_total)`; `y` is resized to `(1, C_keep*hp*P*wp*P)`.
pub fn patch_unpack_forward(
    tokens: &Tensor,
    (hp, wp): (usize, usize),
    p: usize,
    (c_total, c_keep): (usize, usize),
    channel_major: bool,
    y: &mut Tensor,
) -> Result<()> {
    let op = "patch_unpack_forward";
    declare(op, &[input("tokens", tokens), written("y", y)])?;
    if p == 0 || c_keep == 0 || c_keep > c_total {
        return Err(Error::shape(
            op,
            format!("need P >= 1 and 1 <= C_keep <= C_total, got P = {p}, C_keep = {c_keep}, C_total = {c_total}"),
        ));
    }
    let rows = checked_product(op, "hp*wp", &[hp, wp])?;
    let cols = checked_product(op, "P*P*C_total", &[p, p, c_total])?;
    if tokens.dims() != [rows, cols] {
        return Err(Error::shape(
            op,
            format!(
                "`tokens` must be shaped (hp*wp, P*P*C_total) = ({rows}, {cols}), got {:?}",
                tokens.dims()
            ),
        ));
    }
    let t = tokens.contiguous()?;
    let view = if channel_major {
        t.reshape(&[hp, wp, c_total, p, p])?
            .permute(&[2, 0, 3, 1, 4])?
    } else {
        t.reshape(&[hp, wp, p, p, c_total])?
            .permute(&[4, 0, 2, 1, 3])?
    };
    let view = view.narrow(0, 0, c_keep)?;
    let len = checked_product(op, "C_keep*H*W", &[c_keep, hp, p, wp, p])?;
    materialise(&view, &[1, len], y)
}

impl Tensor {
    /// [`pad2d_forward`] of this `[N, C, H, W]` tensor by `[top, bottom, left, right]`: a
    /// new `[N, C, H + top + bottom, W + left + right]` tensor.
    pub fn pad2d(&self, pads: [usize; 4], mode: PadMode) -> Result<Tensor> {
        let [n, c, h, w] = dims4("pad2d", "self", self)?;
        let mut y = Tensor::default();
        pad2d_forward(self, (n, c, h, w), pads, mode, &mut y)?;
        Ok(y)
    }

    /// PyTorch's `pixel_shuffle(r)` of this `[N, C r^2, H, W]` tensor: a new `[N, C, r H, r
    /// W]` tensor, `y[n, c, r h + i, r w + j] = x[n, c r^2 + r i + j, h, w]` (a permuted view
    /// copied densely).
    pub fn pixel_shuffle(&self, r: usize) -> Result<Tensor> {
        let op = "pixel_shuffle";
        let [n, cr, h, w] = dims4(op, "self", self)?;
        let rr = checked_product(op, "r*r", &[r, r])?;
        if r == 0 || cr % rr != 0 {
            return Err(Error::shape(
                op,
                format!("the channels {cr} must be a multiple of r^2 = {rr} (r >= 1)"),
            ));
        }
        let c = cr / rr;
        let out = [
            n,
            c,
            checked_product(op, "r*H", &[r, h])?,
            checked_product(op, "r*W", &[r, w])?,
        ];
        let view = self
            .contiguous()?
            .reshape(&[n, c, r, r, h, w])?
            .permute(&[0, 1, 4, 2, 5, 3])?;
        let mut y = Tensor::default();
        materialise(&view, &out, &mut y)?;
        Ok(y)
    }

    /// PyTorch's `pixel_unshuffle(r)`, the inverse of [`Tensor::pixel_shuffle`]: this `[N,
    /// C, r H, r W]` tensor to a new `[N, C r^2, H, W]` one.
    pub fn pixel_unshuffle(&self, r: usize) -> Result<Tensor> {
        let op = "pixel_unshuffle";
        let [n, c, hr, wr] = dims4(op, "self", self)?;
        if r == 0 || hr % r != 0 || wr % r != 0 {
            return Err(Error::shape(
                op,
                format!("H x W = {hr} x {wr} must be multiples of r = {r} (r >= 1)"),
            ));
        }
        let (h, w) = (hr / r, wr / r);
        let view = self
            .contiguous()?
            .reshape(&[n, c, h, r, w, r])?
            .permute(&[0, 1, 3, 5, 2, 4])?;
        let mut y = Tensor::default();
        materialise(
            &view,
            &[n, checked_product(op, "C*r*r", &[c, r, r])?, h, w],
            &mut y,
        )?;
        Ok(y)
    }
}
