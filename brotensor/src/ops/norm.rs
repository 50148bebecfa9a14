//! Normalizations: LayerNorm (single vector, batched with caches, inference) and RMSNorm.
//!
//! Shape contracts: `x (R, D)` normalized per row; `gamma`, `beta` hold `D` elements in
//! `x`'s dtype. Variance is two-pass (mean, then mean squared deviation; biased). Outputs are
//! resized; `dx` is overwritten; `dgamma`, `dbeta` accumulate and must be pre-sized to
//! `D` elements.

use super::Nchw;
use super::{check_float, dispatch, input, updated, written};
use crate::backend::LayerNormCaches;
use crate::ops::Dispatched;
use crate::{Dtype, Error, Result, Tensor};

fn check_params(
    op: &'static str,
    x: &Tensor,
    d: usize,
    params: &[(&'static str, &Tensor)],
) -> Result<()> {
    for (name, p) in params {
        if p.numel() != d {
            return Err(Error::shape(
                op,
                format!("`{name}` has {} elements, rows have {d}", p.numel()),
            ));
        }
        super::check_dtypes_match(op, ("x", x), &[(name, p)])?;
    }
    Ok(())
}

fn check_grad(
    op: &'static str,
    name: &'static str,
    g: &Tensor,
    x: &Tensor,
    d: usize,
) -> Result<()> {
    super::check_on_device(op, name, g, x.device())?;
    g.check_writable(op, name)?;
    if !g.is_committed() || g.numel() != d {
        return Err(Error::shape(
            op,
            format!("`{name}` must be pre-sized to {d} elements (it accumulates)"),
        ));
    }
    check_params(op, x, d, &[(name, g)])
}

fn check_shape(
    op: &'static str,
    name: &'static str,
    t: &Tensor,
    shape: (usize, usize),
) -> Result<()> {
    if t.shape() != shape {
        return Err(Error::shape(
            op,
            format!(
                "`{name}` is {:?}, expected {}x{}",
                t.dims(),
                shape.0,
                shape.1
            ),
        ));
    }
    Ok(())
}

fn layernorm_rows(
    op: &'static str,
    be: Dispatched,
    x: &Tensor,
    (gamma, beta): (&Tensor, &Tensor),
    eps: f32,
    y: &mut Tensor,
    caches: Option<(&mut Tensor, &mut Tensor, &mut Tensor)>,
) -> Result<()> {
    check_float(op, "x", x, be)?;
    check_params(op, x, x.cols(), &[("gamma", gamma), ("beta", beta)])?;
    be.out("y", y, x.dims(), x.dtype())?;
    let caches = match caches {
        Some((xhat, mean, rstd)) => {
            be.out("xhat", xhat, x.dims(), x.dtype())?;
            be.out("mean", mean, &[x.rows(), 1], Dtype::F32)?;
            be.out("rstd", rstd, &[x.rows(), 1], Dtype::F32)?;
            Some(LayerNormCaches { xhat, mean, rstd })
        }
        None => None,
    };
    if x.numel() == 0 {
        return Ok(());
    }
    be.layernorm(x, gamma, beta, eps, y, caches)
}

/// `Y = gamma (X - mean) rstd + beta` per row of `X (R, D)`, writing `Xhat (R, D)` and F32
/// `Mean (R, 1)`, `Rstd (R, 1)` for the backward.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_forward_batched_with_caches(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    eps: f32,
    y: &mut Tensor,
    xhat: &mut Tensor,
    mean: &mut Tensor,
    rstd: &mut Tensor,
) -> Result<()> {
    let op = "layernorm_forward_batched_with_caches";
    let be = dispatch(
        op,
        &[
            input("x", x),
            input("gamma", gamma),
            input("beta", beta),
            written("y", y),
            written("xhat", xhat),
            written("mean", mean),
            written("rstd", rstd),
        ],
    )?;
    layernorm_rows(op, be, x, (gamma, beta), eps, y, Some((xhat, mean, rstd)))
}

/// [`layernorm_forward_batched_with_caches`] without the caches.
pub fn layernorm_forward_inference_batched(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    eps: f32,
    y: &mut Tensor,
) -> Result<()> {
    let op = "layernorm_forward_inference_batched";
    let be = dispatch(
        op,
        &[
            input("x", x),
            input("gamma", gamma),
            input("beta", beta),
            written("y", y),
        ],
    )?;
    layernorm_rows(op, be, x, (gamma, beta), eps, y, None)
}

/// Gradients of the batched LayerNorm from its caches: `dX (R, D)` overwritten,
/// `dGamma += sum_r dY Xhat`, `dBeta += sum_r dY` (`D` elements each, pre-sized).
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward_batched_with_caches(
    dy: &Tensor,
    xhat: &Tensor,
    gamma: &Tensor,
    rstd: &Tensor,
    dx: &mut Tensor,
    dgamma: &mut Tensor,
    dbeta: &mut Tensor,
) -> Result<()> {
    let op = "layernorm_backward_batched_with_caches";
    let be = dispatch(
        op,
        &[
            input("dy", dy).float(),
            input("xhat", xhat),
            input("gamma", gamma),
            input("rstd", rstd),
            written("dx", dx),
            updated("dgamma", dgamma),
            updated("dbeta", dbeta),
        ],
    )?;
    let (r, d) = dy.shape();
    check_shape(op, "xhat", xhat, (r, d))?;
    check_params(op, dy, d, &[("gamma", gamma)])?;
    super::check_dtypes_match(op, ("dy", dy), &[("xhat", xhat)])?;
    if rstd.numel() != r || rstd.dtype() != Dtype::F32 {
        return Err(Error::shape(
            op,
            format!("`rstd` must be F32 with {r} elements (one per row)"),
        ));
    }
    check_grad(op, "dgamma", dgamma, dy, d)?;
    check_grad(op, "dbeta", dbeta, dy, d)?;
    be.out("dx", dx, &[r, d], dy.dtype())?;
    if dy.numel() == 0 {
        return Ok(());
    }
    be.layernorm_backward(dy, xhat, gamma, rstd, dx, dgamma, dbeta)
}

/// LayerNorm of all of `x` as one vector (the C++ single-vector form): `y`, `xhat` resized
/// to `x`; returns `(mean, rstd)` (both 0 for an empty `x`). Reading them back synchronizes.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_forward(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    eps: f32,
    y: &mut Tensor,
    xhat: &mut Tensor,
) -> Result<(f32, f32)> {
    let op = "layernorm_forward";
    let be = dispatch(
        op,
        &[
            input("x", x),
            input("gamma", gamma),
            input("beta", beta),
            written("y", y),
            written("xhat", xhat),
        ],
    )?;
    let shape = x.shape();
    let row = x.reshaped(1, x.numel())?;
    let (mut mean, mut rstd) = (Tensor::default(), Tensor::default());
    layernorm_rows(
        op,
        be,
        &row,
        (gamma, beta),
        eps,
        y,
        Some((xhat, &mut mean, &mut rstd)),
    )?;
    y.reshape_(&[shape.0, shape.1])?;
    xhat.reshape_(&[shape.0, shape.1])?;
    if x.numel() == 0 {
        return Ok((0.0, 0.0));
    }
    Ok((mean.to_vec::<f32>()?[0], rstd.to_vec::<f32>()?[0]))
}

/// Gradients of [`layernorm_forward`] from `xhat` and the scalar `rstd`: `dx` overwritten,
/// `dgamma`, `dbeta` (`n` elements) accumulate.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward(
    dy: &Tensor,
    xhat: &Tensor,
    gamma: &Tensor,
    rstd: f32,
    dx: &mut Tensor,
    dgamma: &mut Tensor,
    dbeta: &mut Tensor,
) -> Result<()> {
    let device = dispatch(
        "layernorm_backward",
        &[
            input("dy", dy),
            input("xhat", xhat),
            input("gamma", gamma),
            written("dx", dx),
            updated("dgamma", dgamma),
            updated("dbeta", dbeta),
        ],
    )?
    .device();
    let flat = |t| Tensor::reshaped(t, 1, t.numel());
    let r = Tensor::from_slice_on(device, &[rstd], 1, 1)?;
    let shape = dy.shape();
    layernorm_backward_batched_with_caches(&flat(dy)?, &flat(xhat)?, gamma, &r, dx, dgamma, dbeta)?;
    dx.reshape_(&[shape.0, shape.1])
}

/// `Y = X gamma / sqrt(mean(X^2) + eps)` per row of `X (B, D)`; `Y` is resized.
pub fn rms_norm_forward(x: &Tensor, gamma: &Tensor, eps: f32, y: &mut Tensor) -> Result<()> {
    let op = "rms_norm_forward";
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("gamma", gamma),
            written("y", y),
        ],
    )?;
    check_params(op, x, x.cols(), &[("gamma", gamma)])?;
    be.out("y", y, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    be.rms_norm(x, gamma, eps, y)
}

/// Gradients of [`rms_norm_forward`] (statistics recomputed from `X`): `dX` overwritten,
/// `dGamma += sum_b dY X rrms` (pre-sized, `D` elements).
pub fn rms_norm_backward(
    x: &Tensor,
    gamma: &Tensor,
    dy: &Tensor,
    eps: f32,
    dx: &mut Tensor,
    dgamma: &mut Tensor,
) -> Result<()> {
    let op = "rms_norm_backward";
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("gamma", gamma),
            input("dy", dy),
            written("dx", dx),
            updated("dgamma", dgamma),
        ],
    )?;
    check_params(op, x, x.cols(), &[("gamma", gamma)])?;
    check_shape(op, "dy", dy, x.shape())?;
    super::check_dtypes_match(op, ("x", x), &[("dy", dy)])?;
    check_grad(op, "dgamma", dgamma, x, x.cols())?;
    rms_backward_rows(be, (x, gamma, dy), eps, dx, Some(dgamma))
}

/// The shared tail of the RMSNorm-based backward passes, after their checks: sizes `dx` and
/// runs the backend (`dgamma` accumulated when given).
fn rms_backward_rows(
    be: crate::ops::Dispatched,
    (x, gamma, dy): (&Tensor, &Tensor, &Tensor),
    eps: f32,
    dx: &mut Tensor,
    dgamma: Option<&mut Tensor>,
) -> Result<()> {
    be.out("dx", dx, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    be.rms_norm_backward(x, gamma, dy, eps, dx, dgamma)
}

/// A tensor of `n` copies of `value` on `device` in `dtype`.
fn constant(device: crate::Device, n: usize, value: f32, dtype: Dtype) -> Result<Tensor> {
    let mut t = Tensor::empty_on(device, n, 1, dtype)?;
    super::fill(&mut t, value)?;
    Ok(t)
}

/// PixelNorm per row of `X (N, C)`: `y = x / sqrt(mean(x^2) + eps)`; `Y` is resized. (An
/// RMSNorm with unit scale.)
pub fn pixel_norm_forward(x: &Tensor, eps: f32, y: &mut Tensor) -> Result<()> {
    let op = "pixel_norm_forward";
    let be = dispatch(op, &[input("x", x).float(), written("y", y)])?;
    let ones = constant(be.device(), x.cols(), 1.0, x.dtype())?;
    rms_norm_forward(x, &ones, eps, y)
}

/// Gradient of [`pixel_norm_forward`] (reads `X`): `dX = r dY - (r^3 s / C) x`,
/// `s = sum(dY x)`; overwritten.
pub fn pixel_norm_backward(x: &Tensor, dy: &Tensor, eps: f32, dx: &mut Tensor) -> Result<()> {
    let op = "pixel_norm_backward";
    let be = dispatch(
        op,
        &[input("x", x).float(), input("dy", dy), written("dx", dx)],
    )?;
    check_shape(op, "dy", dy, x.shape())?;
    super::check_dtypes_match(op, ("x", x), &[("dy", dy)])?;
    let ones = constant(be.device(), x.cols(), 1.0, x.dtype())?;
    rms_backward_rows(be, (x, &ones, dy), eps, dx, None)
}

fn heads(op: &'static str, x: &Tensor, head_dim: usize, num_heads: usize) -> Result<()> {
    if head_dim == 0 || num_heads == 0 {
        return Err(Error::invalid(
            op,
            "head_dim and num_heads must be positive",
        ));
    }
    if head_dim.checked_mul(num_heads) != Some(x.cols()) {
        return Err(Error::shape(
            op,
            format!(
                "X.cols = {} != num_heads * head_dim = {num_heads} * {head_dim}",
                x.cols()
            ),
        ));
    }
    Ok(())
}

/// Per-head L2 normalization of `X (L, H * hd)`: each head slice becomes
/// `x / sqrt(sum(x^2) + eps)`; `Y` is resized. (An RMSNorm over `(L H, hd)` rows with scale
/// `1 / sqrt(hd)` and `eps / hd`, which is the same function.)
pub fn l2_norm_forward(
    x: &Tensor,
    head_dim: usize,
    num_heads: usize,
    eps: f32,
    y: &mut Tensor,
) -> Result<()> {
    let op = "l2_norm_forward";
    let be = dispatch(op, &[input("x", x).float(), written("y", y)])?;
    heads(op, x, head_dim, num_heads)?;
    let rows = x.rows() * num_heads;
    let scale = constant(
        be.device(),
        head_dim,
        1.0 / (head_dim as f32).sqrt(),
        x.dtype(),
    )?;
    rms_norm_forward(
        &x.reshaped(rows, head_dim)?,
        &scale,
        eps / head_dim as f32,
        y,
    )?;
    y.reshape_(&[x.rows(), x.cols()])
}

/// Gradient of [`l2_norm_forward`] (reads `X`): `dX = n (dY - x (x . dY) n^2)`,
/// `n = 1 / sqrt(sum(x^2) + eps)` per head; overwritten.
pub fn l2_norm_backward(
    x: &Tensor,
    dy: &Tensor,
    head_dim: usize,
    num_heads: usize,
    eps: f32,
    dx: &mut Tensor,
) -> Result<()> {
    let op = "l2_norm_backward";
    let be = dispatch(
        op,
        &[input("x", x).float(), input("dy", dy), written("dx", dx)],
    )?;
    heads(op, x, head_dim, num_heads)?;
    check_shape(op, "dy", dy, x.shape())?;
    let rows = x.rows() * num_heads;
    let scale = constant(
        be.device(),
        head_dim,
        1.0 / (head_dim as f32).sqrt(),
        x.dtype(),
    )?;
    super::check_dtypes_match(op, ("x", x), &[("dy", dy)])?;
    let (xr, dyr) = (x.reshaped(rows, head_dim)?, dy.reshaped(rows, head_dim)?);
    rms_backward_rows(be, (&xr, &scale, &dyr), eps / head_dim as f32, dx, None)?;
    dx.reshape_(&[x.rows(), x.cols()])
}

/// Checks an NCHW tensor `(N, C*H*W)` against `dims` and returns `(n, c, hw)`.
fn nchw(op: &'static str, x: &Tensor, dims: Nchw) -> Result<(usize, usize, usize)> {
    let hw = dims.plane().map_err(|e| Error::shape(op, e))?;
    let chw = dims.per_item().map_err(|e| Error::shape(op, e))?;
    if x.rows() != dims.n || x.cols() != chw {
        return Err(Error::shape(
            op,
            format!(
                "X must be shaped (N, C*H*W) = ({}, {chw}) for {dims:?}, got {:?}",
                dims.n,
                x.dims()
            ),
        ));
    }
    Ok((dims.n, dims.c, hw))
}

fn check_channels(
    op: &'static str,
    x: &Tensor,
    c: usize,
    params: &[(&'static str, &Tensor)],
) -> Result<()> {
    check_params(op, x, c, params)
}

/// GroupNorm of `X (N, C*H*W)` (NCHW samples): each sample's `num_groups` contiguous groups
/// of `C / num_groups` channels are normalized (two-pass, biased variance), then
/// `y = xhat gamma[c] + beta[c]`. `Y` is resized. `dims` is `(N, C, H, W)`: an [`Nchw`] or a
/// tuple.
#[allow(clippy::too_many_arguments)]
pub fn group_norm_forward(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    dims: impl Into<Nchw>,
    num_groups: usize,
    eps: f32,
    y: &mut Tensor,
) -> Result<()> {
    let op = "group_norm_forward";
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("gamma", gamma),
            input("beta", beta),
            written("y", y),
        ],
    )?;
    let (n, c, hw) = nchw(op, x, dims.into())?;
    if num_groups == 0 || c % num_groups != 0 {
        return Err(Error::invalid(
            op,
            format!("num_groups {num_groups} must divide C = {c}"),
        ));
    }
    check_channels(op, x, c, &[("gamma", gamma), ("beta", beta)])?;
    be.out("y", y, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    let _ = n;
    be.group_norm(x, gamma, beta, (num_groups, hw), eps, false, y)
}

/// Gradients of [`group_norm_forward`] (statistics recomputed from `X`): `dX` overwritten,
/// `dGamma[c] += sum dY xhat`, `dBeta[c] += sum dY` over samples and positions (pre-sized,
/// `C` elements). `dims` is `(N, C, H, W)`: an [`Nchw`] or a tuple.
#[allow(clippy::too_many_arguments)]
pub fn group_norm_backward(
    x: &Tensor,
    gamma: &Tensor,
    dy: &Tensor,
    dims: impl Into<Nchw>,
    num_groups: usize,
    eps: f32,
    dx: &mut Tensor,
    dgamma: &mut Tensor,
    dbeta: &mut Tensor,
) -> Result<()> {
    let op = "group_norm_backward";
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("gamma", gamma),
            input("dy", dy),
            written("dx", dx),
            updated("dgamma", dgamma),
            updated("dbeta", dbeta),
        ],
    )?;
    let (n, c, hw) = nchw(op, x, dims.into())?;
    if num_groups == 0 || c % num_groups != 0 {
        return Err(Error::invalid(
            op,
            format!("num_groups {num_groups} must divide C = {c}"),
        ));
    }
    check_channels(op, x, c, &[("gamma", gamma)])?;
    check_shape(op, "dy", dy, x.shape())?;
    check_params(op, x, dy.numel(), &[("dy", dy)])?;
    check_grad(op, "dgamma", dgamma, x, c)?;
    check_grad(op, "dbeta", dbeta, x, c)?;
    be.out("dx", dx, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    // dX and the per-(sample, channel) sums in one kernel; then the sums over samples.
    let dev = be.device();
    let mut part_g = Tensor::empty_on(dev, n, c, x.dtype())?;
    let mut part_b = Tensor::empty_on(dev, n, c, x.dtype())?;
    let parts = (&mut part_g, &mut part_b);
    be.group_norm_backward(x, gamma, dy, (num_groups, hw), eps, dx, parts)?;
    let over_samples = |p: &Tensor| -> Result<Tensor> {
        let mut out = Tensor::empty_on(dev, c, 1, x.dtype())?;
        be.sum_cols(p, &mut out)?;
        Ok(out)
    };
    let (dg, db) = (over_samples(&part_g)?, over_samples(&part_b)?);
    accumulate_into(dgamma, &dg)?;
    accumulate_into(dbeta, &db)
}

/// `acc += v` for a `(C, 1)` `v` and a caller-shaped `acc` of `C` elements.
fn accumulate_into(acc: &mut Tensor, v: &Tensor) -> Result<()> {
    let (rows, cols) = acc.shape();
    super::add_inplace(acc, &v.reshaped(rows, cols)?)
}

fn check_f32(op: &'static str, tensors: &[(&'static str, &Tensor)]) -> Result<()> {
    for (name, t) in tensors {
        if t.dtype() != Dtype::F32 {
            return Err(Error::Dtype {
                op,
                operand: name,
                expected: "batch norm training is FP32".into(),
                found: t.dtype(),
            });
        }
    }
    Ok(())
}

/// BatchNorm training forward over `X (N, C*H*W)`: per-channel mean and biased variance over
/// the `M = N*H*W` values (two-pass); `y = (x - mean) rstd gamma + beta`; `saved_mean`,
/// `saved_rstd` resized to `(C, 1)`; the running statistics update in place:
/// `running = (1 - momentum) running + momentum stat`, with the unbiased variance
/// (`var * M / (M - 1)`). FP32. `dims` is `(N, C, H, W)`: an [`Nchw`] or a tuple.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_forward(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    dims: impl Into<Nchw>,
    eps: f32,
    momentum: f32,
    running_mean: &mut Tensor,
    running_var: &mut Tensor,
    y: &mut Tensor,
    saved_mean: &mut Tensor,
    saved_rstd: &mut Tensor,
) -> Result<()> {
    let op = "batch_norm_forward";
    let be = dispatch(
        op,
        &[
            input("x", x),
            input("gamma", gamma),
            input("beta", beta),
            updated("running_mean", running_mean),
            updated("running_var", running_var),
            written("y", y),
            written("saved_mean", saved_mean),
            written("saved_rstd", saved_rstd),
        ],
    )?;
    check_f32(
        op,
        &[
            ("x", x),
            ("gamma", gamma),
            ("beta", beta),
            ("running_mean", running_mean),
            ("running_var", running_var),
        ],
    )?;
    let (n, c, hw) = nchw(op, x, dims.into())?;
    check_channels(
        op,
        x,
        c,
        &[
            ("gamma", gamma),
            ("beta", beta),
            ("running_mean", running_mean),
            ("running_var", running_var),
        ],
    )?;
    be.out("y", y, x.dims(), Dtype::F32)?;
    be.out("saved_mean", saved_mean, &[c, 1], Dtype::F32)?;
    be.out("saved_rstd", saved_rstd, &[c, 1], Dtype::F32)?;
    let m = n * hw;
    if m == 0 || c == 0 {
        return Ok(());
    }
    let stats = crate::backend::BatchNormStats {
        running_mean,
        running_var,
        saved_mean,
        saved_rstd,
    };
    be.batch_norm_train(x, gamma, beta, (n, hw), (eps, momentum), stats, y)
}

/// BatchNorm inference: `y = x a + b` per channel with `a = gamma / sqrt(running_var + eps)`
/// and `b = beta - running_mean a`; F32, F16 or BF16 (parameters in `X`'s dtype). `dims` is
/// `(N, C, H, W)`: an [`Nchw`] or a tuple.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_inference(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    dims: impl Into<Nchw>,
    eps: f32,
    y: &mut Tensor,
) -> Result<()> {
    let op = "batch_norm_inference";
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("gamma", gamma),
            input("beta", beta),
            input("running_mean", running_mean),
            input("running_var", running_var),
            written("y", y),
        ],
    )?;
    let (_, c, hw) = nchw(op, x, dims.into())?;
    check_channels(
        op,
        x,
        c,
        &[
            ("gamma", gamma),
            ("beta", beta),
            ("running_mean", running_mean),
            ("running_var", running_var),
        ],
    )?;
    be.out("y", y, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    let params = (gamma, beta, running_mean, running_var);
    be.batch_norm_inference(x, params, hw, eps, y)
}

/// BatchNorm gradients from the saved statistics: `dX = rstd (dY gamma - (gamma sum dY +
/// xhat gamma sum(dY xhat)) / M)` overwritten; `dGamma += sum dY xhat`, `dBeta += sum dY`
/// per channel (pre-sized, `C` elements). FP32. `dims` is `(N, C, H, W)`: an [`Nchw`] or a
/// tuple.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_backward(
    x: &Tensor,
    gamma: &Tensor,
    saved_mean: &Tensor,
    saved_rstd: &Tensor,
    dy: &Tensor,
    dims: impl Into<Nchw>,
    dx: &mut Tensor,
    dgamma: &mut Tensor,
    dbeta: &mut Tensor,
) -> Result<()> {
    let op = "batch_norm_backward";
    let be = dispatch(
        op,
        &[
            input("x", x),
            input("gamma", gamma),
            input("saved_mean", saved_mean),
            input("saved_rstd", saved_rstd),
            input("dy", dy),
            written("dx", dx),
            updated("dgamma", dgamma),
            updated("dbeta", dbeta),
        ],
    )?;
    check_f32(
        op,
        &[
            ("x", x),
            ("gamma", gamma),
            ("saved_mean", saved_mean),
            ("saved_rstd", saved_rstd),
            ("dy", dy),
        ],
    )?;
    let (n, c, hw) = nchw(op, x, dims.into())?;
    check_channels(
        op,
        x,
        c,
        &[
            ("gamma", gamma),
            ("saved_mean", saved_mean),
            ("saved_rstd", saved_rstd),
        ],
    )?;
    check_shape(op, "dy", dy, x.shape())?;
    check_grad(op, "dgamma", dgamma, x, c)?;
    check_grad(op, "dbeta", dbeta, x, c)?;
    be.out("dx", dx, x.dims(), Dtype::F32)?;
    let m = n * hw;
    if m == 0 || c == 0 {
        return Ok(());
    }
    be.batch_norm_backward(
        x,
        gamma,
        (saved_mean, saved_rstd),
        dy,
        (n, hw),
        dx,
        dgamma,
        dbeta,
    )
}

/// [`layernorm_forward_inference_batched`] under its C++ 16-bit name: `X` must be F16 or BF16.
pub fn layernorm_forward_inference_batched_fp16(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    eps: f32,
    y: &mut Tensor,
) -> Result<()> {
    let op = "layernorm_forward_inference_batched_fp16";
    let be = dispatch(
        op,
        &[
            input("x", x),
            input("gamma", gamma),
            input("beta", beta),
            written("y", y),
        ],
    )?;
    if !matches!(x.dtype(), Dtype::F16 | Dtype::BF16) {
        return Err(Error::Dtype {
            op,
            operand: "x",
            expected: "must be F16 or BF16".into(),
            found: x.dtype(),
        });
    }
    layernorm_rows(op, be, x, (gamma, beta), eps, y, None)
}

/// Normalizes each pixel's channel vector of `X (N, C*H*W)` (NCHW): `y = x / max(||x_c||,
/// eps)` with the norm over the `C` channels at one position (`eps` is a floor on the norm,
/// not an addend); `Y` is resized. `dims` is `(N, C, H, W)`: an [`Nchw`] or a tuple.
pub fn l2_normalize_nchw_forward(
    x: &Tensor,
    dims: impl Into<Nchw>,
    eps: f32,
    y: &mut Tensor,
) -> Result<()> {
    let op = "l2_normalize_nchw_forward";
    let be = dispatch(op, &[input("x", x).float(), written("y", y)])?;
    let (n, c, hw) = nchw(op, x, dims.into())?;
    be.out("y", y, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    let dev = be.device();
    // FP32 inside on 16-bit paths: squares of F16 values overflow past a norm of ~256, and
    // the floor 1 / eps is beyond F16's range for eps below ~1.5e-5.
    let wide_x = if x.dtype() == Dtype::F32 {
        std::borrow::Cow::Borrowed(x)
    } else {
        std::borrow::Cow::Owned(x.to_dtype(Dtype::F32)?)
    };
    let x32: &Tensor = &wide_x;
    // Per sample, the channel sums of squares are ones(1, C) . (x^2)(C, HW): one batched product.
    let sq = super::mul(x32, x32)?;
    let ones = Tensor::from_slice_on(dev, &vec![1.0f32; c], 1, c)?;
    let mut ss = Tensor::empty_on(dev, n, hw, Dtype::F32)?;
    let g = crate::backend::Gemm {
        m: 1,
        n: hw,
        k: c,
        trans_a: false,
        trans_b: false,
        accumulate: false,
        batch: n,
        strides: (0, c * hw, hw),
        act: super::Act::None,
    };
    be.gemm(op, &ones, &sq, None, &mut ss, g)?;
    let mut inv = super::rsqrt(&ss)?;
    super::clamp(&mut inv, 0.0, if eps > 0.0 { 1.0 / eps } else { f32::MAX })?;
    let b = crate::backend::Broadcast {
        inner: hw,
        v_len: n * hw,
        per_row: false,
        repeat: c,
        multiply: true,
    };
    if x.dtype() == Dtype::F32 {
        super::cast(x, y, Dtype::F32)?;
        return be.broadcast(op, y, &inv, b);
    }
    let mut y32 = wide_x.into_owned();
    be.broadcast(op, &mut y32, &inv, b)?;
    super::cast(&y32, y, x.dtype())
}
