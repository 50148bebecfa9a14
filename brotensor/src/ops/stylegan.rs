//! StyleGAN3 generator primitives (C++ `ops/stylegan.h`), with the semantics of NVlabs
//! stylegan3's pure-torch `_ref` functions: `modulated_conv2d` (per-sample weight
//! modulation, optional demodulation, a grouped convolution), `upfirdn2d` (zero-insert up,
//! pad or crop, FIR, down, gain), `bias_act` (bias, linear or leaky ReLU, gain, clamp) and the
//! alias-free `filtered_lrelu` built from them, each with its gradient.
//!
//! Activations are NCHW, `(N, C*H*W)` or `[N, C, H, W]`; F32, F16 and BF16 on every device
//! with FP32 accumulation.

use super::conv::{
    check_accumulated, check_activation, check_weight, forward_geometry, output_dims,
};
use super::{
    check_dtypes_match, check_on_device, checked_product, dispatch, input, input_opt, updated,
    updated_opt, written, Conv2dSpec, Nchw,
};
use crate::backend::{Modulation, Upfirdn2d};
use crate::{Error, Result, Tensor};
pub use brotensor_cpu::stylegan::{BiasAct, BiasActivation};

/// The geometry of a modulated convolution: kernel and zero padding per axis `[y, x]`
/// (stride and dilation are 1), whether the weights are demodulated, and the
/// demodulation's epsilon (StyleGAN: 1e-8).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModulatedConv2dSpec {
    /// `[kH, kW]`.
    pub kernel: [usize; 2],
    /// Zero padding `[pad_h, pad_w]` on both sides.
    pub padding: [usize; 2],
    /// Scale each output channel's modulated weights to unit norm.
    pub demodulate: bool,
    /// Added to the squared norm before the square root.
    pub eps: f32,
}

/// The checked sizes of a modulated convolution: the modulation and the grouped
/// convolution over `(1, N C_in, H, W)` with `N` groups.
struct ModConv {
    m: Modulation,
    conv: crate::backend::Conv2d,
    out: Nchw,
}

fn mod_conv(
    op: &'static str,
    (x, w, s): (&Tensor, &Tensor, &Tensor),
    d: Nchw,
    c_out: usize,
    spec: &ModulatedConv2dSpec,
) -> Result<ModConv> {
    super::conv::check_nchw(op, d)?;
    check_activation(op, "x", x, d)?;
    let [kh, kw] = spec.kernel;
    check_weight(op, "w", w, c_out, [d.c, kh, kw])?;
    if s.numel() != checked_product(op, "N*C_in", &[d.n, d.c])? {
        return Err(Error::shape(
            op,
            format!(
                "`s` must be (N, C_in) = ({}, {}), got {:?}",
                d.n,
                d.c,
                s.dims()
            ),
        ));
    }
    check_dtypes_match(op, ("x", x), &[("w", w), ("s", s)])?;
    if !(spec.eps.is_finite() && spec.eps >= 0.0) {
        return Err(Error::invalid(
            op,
            format!("`eps` must be finite and non-negative, got {}", spec.eps),
        ));
    }
    let grouped = Conv2dSpec {
        padding: spec.padding,
        groups: d.n.max(1),
        ..Conv2dSpec::new(spec.kernel)
    };
    let planes = checked_product(op, "N*C_in", &[d.n, d.c])?;
    let rows_out = checked_product(op, "N*C_out", &[d.n, c_out])?;
    let conv = forward_geometry(op, Nchw::new(1, planes, d.h, d.w), rows_out, &grouped)?;
    let out = Nchw::new(d.n, c_out, conv.out[0], conv.out[1]);
    super::conv::check_nchw(op, out)?;
    let taps = checked_product(op, "kH*kW", &spec.kernel)?;
    checked_product(op, "N*C_out*C_in*kH*kW", &[rows_out, d.c, taps])?;
    Ok(ModConv {
        m: Modulation {
            n: d.n,
            c_out,
            c_in: d.c,
            taps,
        },
        conv,
        out,
    })
}

/// The modulated weights `(N C_out, C_in kH kW)` and coefficients of a modulated
/// convolution, on the op's device.
fn modulated_weights(
    op: &'static str,
    be: &super::Dispatched,
    (w, s): (&Tensor, &Tensor),
    mc: &ModConv,
    spec: &ModulatedConv2dSpec,
    dcoef: &mut Tensor,
) -> Result<Tensor> {
    let m = mc.m;
    let mut wmod = Tensor::empty_on(be.device(), m.n * m.c_out, m.row(), w.dtype())?;
    let eps = spec.demodulate.then_some(spec.eps);
    be.modulate_weights(op, w, s, m, eps, &mut wmod, dcoef)?;
    Ok(wmod)
}

/// StyleGAN modulated convolution (C++ `modulated_conv2d_forward`): per sample `n`,
/// `w'[o, i] = w[o, i] s[n, i]`, `dcoef[n, o] = 1 / sqrt(sum_{i,ky,kx} w'^2 + eps)` when
/// `spec.demodulate` (else 1), then `y[n] = conv2d(x[n], w' dcoef[n, o])` with stride 1 and
/// `spec.padding`, run as one grouped convolution with `N` groups.
///
/// `x`: `(N, C_in*H*W)` for `dims = (N, C_in, H, W)`; `w`: OIHW `(C_out, C_in*kH*kW)`; `s`:
/// `(N, C_in)` styles; all one dtype. `dcoef` is resized to `(N, C_out)` (the coefficients
/// the backward pass reads) and `y` to `(N, C_out*H_out*W_out)`, `H_out = H + 2 pad_h - kH +
/// 1`; both overwritten.
#[allow(clippy::too_many_arguments)]
pub fn modulated_conv2d_forward(
    x: &Tensor,
    w: &Tensor,
    s: &Tensor,
    dims: impl Into<Nchw>,
    c_out: usize,
    spec: &ModulatedConv2dSpec,
    dcoef: &mut Tensor,
    y: &mut Tensor,
) -> Result<()> {
    let op = "modulated_conv2d_forward";
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("w", w),
            input("s", s),
            written("dcoef", dcoef),
            written("y", y),
        ],
    )?;
    let d = dims.into();
    let mc = mod_conv(op, (x, w, s), d, c_out, spec)?;
    be.out("dcoef", dcoef, &[d.n, c_out], x.dtype())?;
    be.out("y", y, &output_dims(x, mc.out), x.dtype())?;
    if dcoef.numel() == 0 {
        return Ok(());
    }
    let wmod = modulated_weights(op, &be, (w, s), &mc, spec, dcoef)?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.conv2d_forward(op, &mc.conv, x, &wmod, None, y)
}

/// Gradients of [`modulated_conv2d_forward`] (C++ `modulated_conv2d_backward`), the
/// modulated weights recomputed from `w` and `s`: with `dw''` the grouped convolution's
/// weight gradient, per `(n, o)` `g = sum dw'' w'` and `dw' = dw'' dcoef - g dcoef^3 w'`
/// under demodulation (else `dw''`); `dw[o, i] += sum_n dw'[n, o, i] s[n, i]`
/// (accumulated), `ds[n, i] = sum_{o,ky,kx} dw'[n, o, i] w[o, i]` and `dx[n] =
/// conv2d_backward_input(w' dcoef, dy[n])` (both overwritten).
///
/// `dcoef`: the forward's `(N, C_out)`; `dy`: `y`'s `(N, C_out*H_out*W_out)`; `dx` resized to
/// `x`'s dims; `dw`: `(C_out, C_in*kH*kW)`, pre-sized; `ds` resized to `(N, C_in)`. Sizes and
/// `spec` as the forward call.
#[allow(clippy::too_many_arguments)]
pub fn modulated_conv2d_backward(
    x: &Tensor,
    w: &Tensor,
    s: &Tensor,
    dcoef: &Tensor,
    dy: &Tensor,
    dims: impl Into<Nchw>,
    c_out: usize,
    spec: &ModulatedConv2dSpec,
    dx: &mut Tensor,
    dw: &mut Tensor,
    ds: &mut Tensor,
) -> Result<()> {
    let op = "modulated_conv2d_backward";
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("w", w),
            input("s", s),
            input("dcoef", dcoef),
            input("dy", dy),
            written("dx", dx),
            updated("dw", dw),
            written("ds", ds),
        ],
    )?;
    let d = dims.into();
    let mc = mod_conv(op, (x, w, s), d, c_out, spec)?;
    if dcoef.numel() != d.n * c_out {
        return Err(Error::shape(
            op,
            format!(
                "`dcoef` must be (N, C_out) = ({}, {c_out}), got {:?}",
                d.n,
                dcoef.dims()
            ),
        ));
    }
    check_activation(op, "dy", dy, mc.out)?;
    check_dtypes_match(op, ("x", x), &[("dcoef", dcoef), ("dy", dy)])?;
    check_accumulated(op, "dw", dw, ("x", x), w.numel())?;
    be.out("dx", dx, x.dims(), x.dtype())?;
    be.out("ds", ds, &[d.n, d.c], x.dtype())?;
    if x.numel() == 0 && dy.numel() == 0 && d.n * c_out == 0 {
        return Ok(());
    }
    let m = mc.m;
    let mut scratch_dcoef = Tensor::empty_on(be.device(), d.n, c_out, x.dtype())?;
    let wmod = modulated_weights(op, &be, (w, s), &mc, spec, &mut scratch_dcoef)?;
    let mut dwmod = Tensor::empty_on(be.device(), m.n * m.c_out, m.row(), x.dtype())?;
    super::fill(&mut dwmod, 0.0)?;
    if x.numel() > 0 && dy.numel() > 0 {
        be.conv2d_backward_input(op, &mc.conv, &wmod, dy, None, dx)?;
        be.conv2d_backward_weight(op, &mc.conv, x, dy, &mut dwmod)?;
    } else if dx.numel() > 0 {
        super::fill(dx, 0.0)?;
    }
    be.modulate_weights_backward(op, w, s, dcoef, &dwmod, m, spec.demodulate, dw, ds)
}

/// `upfirdn2d`'s resampling parameters, ordered as stylegan3's `upfirdn2d` takes them: `x`
/// before `y`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Upfirdn2dSpec {
    /// Zero-insert upsampling `[up_x, up_y]` (at least 1).
    pub up: [usize; 2],
    /// Downsampling `[down_x, down_y]` (at least 1).
    pub down: [usize; 2],
    /// `[pad_x0, pad_x1, pad_y0, pad_y1]` added before the FIR; negative values crop.
    pub pad: [i64; 4],
    /// `false`: a true convolution (the filter flipped before correlating); `true`: plain
    /// correlation.
    pub flip_filter: bool,
    /// Output scale (for a 2-D filter, the same as scaling the filter).
    pub gain: f32,
}

impl Upfirdn2dSpec {
    /// No resampling: up and down 1, no padding, a convolution with gain 1.
    pub const IDENTITY: Upfirdn2dSpec = Upfirdn2dSpec {
        up: [1, 1],
        down: [1, 1],
        pad: [0; 4],
        flip_filter: false,
        gain: 1.0,
    };

    /// The geometry on planes of `[h, w]` with a filter of `[fh, fw]` (axes `[y, x]`).
    fn geometry(&self, input: [usize; 2], filter: [usize; 2]) -> Upfirdn2d {
        let [ux, uy] = self.up;
        let [dx, dy] = self.down;
        let [x0, x1, y0, y1] = self.pad;
        Upfirdn2d {
            input,
            filter,
            up: [uy, ux],
            down: [dy, dx],
            pad: [y0, y1, x0, x1],
            flip_filter: self.flip_filter,
            gain: self.gain,
        }
    }
}

/// Checks `f` is a non-empty 2-D filter of `like`'s dtype: its `[fH, fW]`.
fn filter_dims(
    op: &'static str,
    name: &'static str,
    f: &Tensor,
    like: (&'static str, &Tensor),
) -> Result<[usize; 2]> {
    match *f.dims() {
        [fh, fw] if fh > 0 && fw > 0 => {
            check_dtypes_match(op, like, &[(name, f)])?;
            Ok([fh, fw])
        }
        _ => Err(Error::shape(
            op,
            format!(
                "`{name}` must be a non-empty 2-D filter (fH, fW), got {:?}",
                f.dims()
            ),
        )),
    }
}

/// Checks one `upfirdn2d` pass over planes of `d` with the filter `f` (of `like`'s dtype) and
/// gives its geometry and output dims. The activations are checked by the caller.
fn upfirdn_geometry(
    op: &'static str,
    (f_name, f): (&'static str, &Tensor),
    like: (&'static str, &Tensor),
    d: Nchw,
    spec: &Upfirdn2dSpec,
) -> Result<(Upfirdn2d, Nchw)> {
    super::conv::check_nchw(op, d)?;
    let filter = filter_dims(op, f_name, f, like)?;
    if !spec.gain.is_finite() {
        return Err(Error::invalid(
            op,
            format!("`gain` must be finite, got {}", spec.gain),
        ));
    }
    let g = spec.geometry([d.h, d.w], filter);
    let [ho, wo] = g.out_size().map_err(|e| Error::shape(op, e))?;
    let out = Nchw::new(d.n, d.c, ho, wo);
    super::conv::check_nchw(op, out)?;
    Ok((g, out))
}

/// `upfirdn2d` of a checked geometry on the backend.
fn run_upfirdn(
    op: &'static str,
    be: &super::Dispatched,
    g: &Upfirdn2d,
    (x, f): (&Tensor, &Tensor),
    y: &mut Tensor,
) -> Result<()> {
    if y.numel() == 0 {
        return Ok(());
    }
    be.upfirdn2d(op, g, x, f, y)
}

/// Upsample, FIR filter, downsample (C++ `upfirdn2d_forward`, stylegan3's `upfirdn2d`): each
/// `H x W` plane is zero-inserted `up` times per axis, padded by `spec.pad` (negative
/// values crop), correlated with the constant filter `f` (flipped first unless
/// `flip_filter`), every `down`-th sample kept, and scaled by `gain`.
///
/// `x`: `(N, C*H*W)` for `dims = (N, C, H, W)`; `f`: `(fH, fW)` of `x`'s dtype, shared by
/// every channel; `y` is resized to `(N, C*H_out*W_out)` with `H_out = (H up_y + pad_y0 +
/// pad_y1 - fH) / down_y + 1` (`W_out` alike) and overwritten. Errors on factors of 0 and
/// on an axis the filter does not fit after the padding or crop.
pub fn upfirdn2d_forward(
    x: &Tensor,
    f: &Tensor,
    dims: impl Into<Nchw>,
    spec: &Upfirdn2dSpec,
    y: &mut Tensor,
) -> Result<()> {
    let op = "upfirdn2d_forward";
    let be = dispatch(op, &[input("x", x).float(), input("f", f), written("y", y)])?;
    let d = dims.into();
    check_activation(op, "x", x, d)?;
    let (g, out) = upfirdn_geometry(op, ("f", f), ("x", x), d, spec)?;
    be.out("y", y, &output_dims(x, out), x.dtype())?;
    run_upfirdn(op, &be, &g, (x, f), y)
}

/// The input gradient of [`upfirdn2d_forward`] (C++ `upfirdn2d_backward`): `upfirdn2d` is
/// linear in `x`, and its transpose is an `upfirdn2d` of `dy` with up and down exchanged,
/// the filter flip inverted and the padding mapping the output grid back onto the input.
/// `dims` and `spec` are the forward call's; `dy`: `(N, C*H_out*W_out)`; `dx` is resized to
/// `(N, C*H*W)` and overwritten.
pub fn upfirdn2d_backward(
    dy: &Tensor,
    f: &Tensor,
    dims: impl Into<Nchw>,
    spec: &Upfirdn2dSpec,
    dx: &mut Tensor,
) -> Result<()> {
    let op = "upfirdn2d_backward";
    let be = dispatch(
        op,
        &[input("dy", dy).float(), input("f", f), written("dx", dx)],
    )?;
    let d: Nchw = dims.into();
    let (g, out) = upfirdn_geometry(op, ("f", f), ("dy", dy), d, spec)?;
    check_activation(op, "dy", dy, out)?;
    let adjoint = g.adjoint([out.h, out.w]);
    be.out("dx", dx, &output_dims(dy, d), dy.dtype())?;
    run_upfirdn(op, &be, &adjoint, (dy, f), dx)
}

/// Checks a `bias_act` call: `x` of `dims = (N, C, HW)` elements, `b` of `C` values, finite
/// parameters.
fn check_bias_act(
    op: &'static str,
    (x_name, x): (&'static str, &Tensor),
    b: Option<&Tensor>,
    (n, c, hw): (usize, usize, usize),
    p: &BiasAct,
) -> Result<()> {
    let len = checked_product(op, "N*C*HW", &[n, c, hw])?;
    if x.numel() != len {
        return Err(Error::shape(
            op,
            format!(
                "`{x_name}` must hold N*C*HW = {n}*{c}*{hw} values, got {:?}",
                x.dims()
            ),
        ));
    }
    if let Some(b) = b {
        if b.numel() != c {
            return Err(Error::shape(
                op,
                format!("`b` must hold C = {c} values, has {}", b.numel()),
            ));
        }
        check_dtypes_match(op, (x_name, x), &[("b", b)])?;
    }
    let alpha = match p.act {
        BiasActivation::Linear => 0.0,
        BiasActivation::LeakyRelu { alpha } => alpha,
    };
    let clamp_ok = p.clamp.is_none_or(|c| c.is_finite() && c >= 0.0);
    if !p.gain.is_finite() || !alpha.is_finite() || !clamp_ok {
        return Err(Error::invalid(
            op,
            format!("`gain`, `alpha` must be finite and `clamp` finite and >= 0, got {p:?}"),
        ));
    }
    Ok(())
}

/// Fused bias and activation (C++ `bias_act_forward`, stylegan3's `bias_act`): `t = x +
/// b[c]`, `y = gain act(t)`, clipped to `[-clamp, clamp]` when `p.clamp` is set. StyleGAN
/// uses leaky ReLU with `alpha = 0.2` and `gain = sqrt 2`.
///
/// `x`: `N*C*HW` values in `(N, C, HW)` order for `dims = (N, C, HW)`; `b`: `C` values or
/// `None`; `y` is resized to `x`'s dims and overwritten.
pub fn bias_act_forward(
    x: &Tensor,
    b: Option<&Tensor>,
    dims: (usize, usize, usize),
    p: &BiasAct,
    y: &mut Tensor,
) -> Result<()> {
    let op = "bias_act_forward";
    let be = dispatch(
        op,
        &[input("x", x).float(), input_opt("b", b), written("y", y)],
    )?;
    check_bias_act(op, ("x", x), b, dims, p)?;
    be.out("y", y, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    be.bias_act(op, x, None, b, (dims.1, dims.2), *p, y)
}

/// The gradients of [`bias_act_forward`] (C++ `bias_act_backward`), the activation's masks
/// recomputed from `x` and `b`: `dx = dy gain act'(x + b[c])`, zero where the clamp cut the
/// scaled value (`|gain act(t)| > clamp`), overwritten; `db[c] += sum over n and positions
/// of dx` when `db` is given (pre-sized to `C`, accumulated). The leaky slope holds at
/// `t = 0`. Shapes as the forward call; `dy` of `x`'s shape.
#[allow(clippy::too_many_arguments)]
pub fn bias_act_backward(
    dy: &Tensor,
    x: &Tensor,
    b: Option<&Tensor>,
    dims: (usize, usize, usize),
    p: &BiasAct,
    dx: &mut Tensor,
    db: Option<&mut Tensor>,
) -> Result<()> {
    let op = "bias_act_backward";
    let be = dispatch(
        op,
        &[
            input("dy", dy).float(),
            input("x", x),
            input_opt("b", b),
            written("dx", dx),
            updated_opt("db", db.as_deref()),
        ],
    )?;
    check_bias_act(op, ("x", x), b, dims, p)?;
    super::check_same(op, ("dy", dy), ("x", x))?;
    if let Some(db) = db.as_deref() {
        check_accumulated(op, "db", db, ("x", x), dims.1)?;
    }
    be.out("dx", dx, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    be.bias_act(op, x, Some(dy), b, (dims.1, dims.2), *p, dx)?;
    if let Some(db) = db {
        be.conv2d_backward_bias(op, dims, dx, db)?;
    }
    Ok(())
}

/// The filters and resampling of [`filtered_lrelu_forward`], as stylegan3's
/// `filtered_lrelu` takes them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FilteredLreluSpec {
    /// Upsampling factor of the first stage (both axes).
    pub up: usize,
    /// Downsampling factor of the last stage (both axes).
    pub down: usize,
    /// `[pad_x0, pad_x1, pad_y0, pad_y1]` of the up stage (negative crops).
    pub pad: [i64; 4],
    /// The leaky ReLU's gain (StyleGAN: sqrt 2).
    pub gain: f32,
    /// The leaky ReLU's slope (StyleGAN: 0.2).
    pub slope: f32,
    /// Clamp of the activation's output, or none.
    pub clamp: Option<f32>,
}

impl FilteredLreluSpec {
    fn stages(&self) -> (Upfirdn2dSpec, BiasAct, Upfirdn2dSpec) {
        let up = Upfirdn2dSpec {
            up: [self.up, self.up],
            pad: self.pad,
            gain: (self.up * self.up) as f32,
            ..Upfirdn2dSpec::IDENTITY
        };
        let act = BiasAct {
            act: BiasActivation::LeakyRelu { alpha: self.slope },
            gain: self.gain,
            clamp: self.clamp,
        };
        let down = Upfirdn2dSpec {
            down: [self.down, self.down],
            ..Upfirdn2dSpec::IDENTITY
        };
        (up, act, down)
    }
}

/// The forward caches of [`filtered_lrelu_forward`] that its backward pass reads.
#[derive(Debug, Default)]
pub struct FilteredLreluCaches {
    /// The upsampled, filtered tensor (the leaky ReLU's input).
    pub up_buf: Tensor,
    /// The leaky ReLU's output (the down stage's input).
    pub act_buf: Tensor,
}

/// Alias-free leaky ReLU (C++ `filtered_lrelu_forward`, stylegan3's `_filtered_lrelu_ref`):
/// `t = x + b[c]` (a linear `bias_act`), `u = upfirdn2d(t, fu, up, pad, gain = up^2)`,
/// `a = clamp(gain lrelu(u, slope))`, `y = upfirdn2d(a, fd, down)`. A composite of
/// [`bias_act_forward`] and [`upfirdn2d_forward`], whose caches (`up_buf = u`, `act_buf =
/// a`) are kept for the backward pass.
///
/// `x`: `(N, C*H*W)` for `dims = (N, C, H, W)`; `fu`, `fd`: 2-D filters of `x`'s dtype;
/// `b`: `C` values or `None`; `y` is resized to `(N, C*H_out*W_out)`, `W_out = (W up + pad_x0
/// + pad_x1 - (fuW - 1) - (fdW - 1) + down - 1) / down`; everything overwritten.
#[allow(clippy::too_many_arguments)]
pub fn filtered_lrelu_forward(
    x: &Tensor,
    fu: &Tensor,
    fd: &Tensor,
    b: Option<&Tensor>,
    dims: impl Into<Nchw>,
    spec: &FilteredLreluSpec,
    caches: &mut FilteredLreluCaches,
    y: &mut Tensor,
) -> Result<()> {
    let op = "filtered_lrelu_forward";
    super::declare(
        op,
        &[
            input("x", x).float(),
            input("fu", fu),
            input("fd", fd),
            input_opt("b", b),
            written("up_buf", &caches.up_buf),
            written("act_buf", &caches.act_buf),
            written("y", y),
        ],
    )?;
    let d: Nchw = dims.into();
    let (up, act, down) = spec.stages();
    check_activation(op, "x", x, d)?;
    let (_, mid) = upfirdn_geometry(op, ("fu", fu), ("x", x), d, &up)?;
    upfirdn_geometry(op, ("fd", fd), ("x", x), mid, &down)?;
    let plane = d.plane().map_err(|e| Error::shape(op, e))?;
    let mut biased = Tensor::default();
    bias_act_forward(
        x,
        b,
        (d.n, d.c, plane),
        &BiasAct {
            act: BiasActivation::Linear,
            gain: 1.0,
            clamp: None,
        },
        &mut biased,
    )?;
    upfirdn2d_forward(&biased, fu, d, &up, &mut caches.up_buf)?;
    let mid_plane = mid.plane().map_err(|e| Error::shape(op, e))?;
    bias_act_forward(
        &caches.up_buf,
        None,
        (mid.n, mid.c, mid_plane),
        &act,
        &mut caches.act_buf,
    )?;
    upfirdn2d_forward(&caches.act_buf, fd, mid, &down, y)
}

/// The gradients of [`filtered_lrelu_forward`] (C++ `filtered_lrelu_backward`), the forward
/// chain in reverse: the down stage's adjoint, the leaky ReLU's gradient (from `up_buf`),
/// the up stage's adjoint and the linear bias's gradient. `dx` is resized to `x`'s dims and
/// overwritten; `db` (pre-sized to `C`) accumulates when given. `dy`: `y`'s dims; `caches`:
/// the forward's.
#[allow(clippy::too_many_arguments)]
pub fn filtered_lrelu_backward(
    dy: &Tensor,
    x: &Tensor,
    fu: &Tensor,
    fd: &Tensor,
    b: Option<&Tensor>,
    dims: impl Into<Nchw>,
    spec: &FilteredLreluSpec,
    caches: &FilteredLreluCaches,
    dx: &mut Tensor,
    db: Option<&mut Tensor>,
) -> Result<()> {
    let op = "filtered_lrelu_backward";
    let device = super::declare(
        op,
        &[
            input("dy", dy).float(),
            input("x", x),
            input("fu", fu),
            input("fd", fd),
            input_opt("b", b),
            input("up_buf", &caches.up_buf),
            written("dx", dx),
            updated_opt("db", db.as_deref()),
        ],
    )?;
    if let Some(db) = db.as_deref() {
        check_on_device(op, "db", db, device)?;
    }
    let d: Nchw = dims.into();
    let (up, act, down) = spec.stages();
    check_activation(op, "x", x, d)?;
    let (_, mid) = upfirdn_geometry(op, ("fu", fu), ("x", x), d, &up)?;
    check_activation(op, "up_buf", &caches.up_buf, mid)?;
    let (_, out) = upfirdn_geometry(op, ("fd", fd), ("up_buf", &caches.up_buf), mid, &down)?;
    check_activation(op, "dy", dy, out)?;
    let mid_plane = mid.plane().map_err(|e| Error::shape(op, e))?;
    let plane = d.plane().map_err(|e| Error::shape(op, e))?;
    let mut d_act = Tensor::default();
    upfirdn2d_backward(dy, fd, mid, &down, &mut d_act)?;
    let mut d_up = Tensor::default();
    bias_act_backward(
        &d_act,
        &caches.up_buf,
        None,
        (mid.n, mid.c, mid_plane),
        &act,
        &mut d_up,
        None,
    )?;
    let mut d_biased = Tensor::default();
    upfirdn2d_backward(&d_up, fu, d, &up, &mut d_biased)?;
    let linear = BiasAct {
        act: BiasActivation::Linear,
        gain: 1.0,
        clamp: None,
    };
    let d_biased = d_biased.reshape(x.dims())?;
    bias_act_backward(&d_biased, x, b, (d.n, d.c, plane), &linear, dx, db)
}

impl Tensor {
    /// `upfirdn2d` of this `[N, C, H, W]` tensor by the 2-D filter `f` ([`upfirdn2d_forward`]):
    /// a new `[N, C, H_out, W_out]` tensor.
    pub fn upfirdn2d(&self, f: &Tensor, spec: &Upfirdn2dSpec) -> Result<Tensor> {
        let [n, c, h, w] = super::conv::dims4("upfirdn2d", "self", self)?;
        let mut y = Tensor::default();
        upfirdn2d_forward(self, f, Nchw::new(n, c, h, w), spec, &mut y)?;
        Ok(y)
    }

    /// `bias_act` of this `[N, C, ...]` tensor (channels on dim 1; [`bias_act_forward`]): a
    /// new tensor of its dims.
    pub fn bias_act(&self, b: Option<&Tensor>, p: &BiasAct) -> Result<Tensor> {
        let op = "bias_act";
        let dims = self.dims();
        if dims.len() < 2 {
            return Err(Error::shape(
                op,
                format!("`self` must be [N, C, ...] (channels on dim 1), got {dims:?}"),
            ));
        }
        let plane = checked_product(op, "spatial size", &dims[2..])?;
        let mut y = Tensor::default();
        bias_act_forward(self, b, (dims[0], dims[1], plane), p, &mut y)?;
        Ok(y)
    }
}
