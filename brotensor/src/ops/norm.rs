//! Normalizations: LayerNorm (single vector, batched with caches, inference) and RMSNorm.
//!
//! Shape contracts: `x (R, D)` normalized per row; `gamma`, `beta` hold `D` elements in
//! `x`'s dtype. Variance is two-pass (mean, then mean squared deviation; biased). Outputs are
//! resized; `dx` is overwritten; `dgamma`, `dbeta` accumulate and must be pre-sized to
//! `D` elements.

use super::{check_float, dispatch, prepare_out};
use crate::backend::{Backend, LayerNormCaches};
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
        if p.dtype() != x.dtype() {
            return Err(Error::Dtype {
                op,
                operand: name,
                expected: format!("must match `x` ({})", x.dtype()),
                found: p.dtype(),
            });
        }
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
                "`{name}` is {}x{}, expected {}x{}",
                t.rows(),
                t.cols(),
                shape.0,
                shape.1
            ),
        ));
    }
    Ok(())
}

fn layernorm_rows(
    op: &'static str,
    be: &dyn Backend,
    x: &Tensor,
    (gamma, beta): (&Tensor, &Tensor),
    eps: f32,
    y: &mut Tensor,
    caches: Option<(&mut Tensor, &mut Tensor, &mut Tensor)>,
) -> Result<()> {
    check_float(op, "x", x, be)?;
    check_params(op, x, x.cols(), &[("gamma", gamma), ("beta", beta)])?;
    prepare_out(y, be.device(), x.shape(), x.dtype())?;
    let caches = match caches {
        Some((xhat, mean, rstd)) => {
            prepare_out(xhat, be.device(), x.shape(), x.dtype())?;
            prepare_out(mean, be.device(), (x.rows(), 1), Dtype::F32)?;
            prepare_out(rstd, be.device(), (x.rows(), 1), Dtype::F32)?;
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
    y: &mut Tensor,
    xhat: &mut Tensor,
    mean: &mut Tensor,
    rstd: &mut Tensor,
    eps: f32,
) -> Result<()> {
    let op = "layernorm_forward_batched_with_caches";
    let be = dispatch(
        op,
        &[
            ("x", x),
            ("gamma", gamma),
            ("beta", beta),
            ("y", y),
            ("xhat", xhat),
            ("mean", mean),
            ("rstd", rstd),
        ],
    )?;
    layernorm_rows(op, be, x, (gamma, beta), eps, y, Some((xhat, mean, rstd)))
}

/// [`layernorm_forward_batched_with_caches`] without the caches.
pub fn layernorm_forward_inference_batched(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    y: &mut Tensor,
    eps: f32,
) -> Result<()> {
    let op = "layernorm_forward_inference_batched";
    let be = dispatch(op, &[("x", x), ("gamma", gamma), ("beta", beta), ("y", y)])?;
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
            ("dy", dy),
            ("xhat", xhat),
            ("gamma", gamma),
            ("rstd", rstd),
            ("dx", dx),
            ("dgamma", dgamma),
            ("dbeta", dbeta),
        ],
    )?;
    check_float(op, "dy", dy, be)?;
    let (r, d) = dy.shape();
    check_shape(op, "xhat", xhat, (r, d))?;
    check_params(op, dy, d, &[("gamma", gamma)])?;
    if xhat.dtype() != dy.dtype() {
        return Err(Error::Dtype {
            op,
            operand: "xhat",
            expected: format!("must match `dy` ({})", dy.dtype()),
            found: xhat.dtype(),
        });
    }
    if rstd.numel() != r || rstd.dtype() != Dtype::F32 {
        return Err(Error::shape(
            op,
            format!("`rstd` must be F32 with {r} elements (one per row)"),
        ));
    }
    check_grad(op, "dgamma", dgamma, dy, d)?;
    check_grad(op, "dbeta", dbeta, dy, d)?;
    prepare_out(dx, be.device(), (r, d), dy.dtype())?;
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
    y: &mut Tensor,
    xhat: &mut Tensor,
    eps: f32,
) -> Result<(f32, f32)> {
    let op = "layernorm_forward";
    let be = dispatch(
        op,
        &[
            ("x", x),
            ("gamma", gamma),
            ("beta", beta),
            ("y", y),
            ("xhat", xhat),
        ],
    )?;
    let shape = x.shape();
    let mut row = x.try_clone()?;
    row.reshape(1, x.numel())?;
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
    y.reshape(shape.0, shape.1)?;
    xhat.reshape(shape.0, shape.1)?;
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
        &[("dy", dy), ("xhat", xhat), ("gamma", gamma)],
    )?
    .device();
    let flat = |t: &Tensor| -> Result<Tensor> {
        let mut f = t.try_clone()?;
        f.reshape(1, t.numel())?;
        Ok(f)
    };
    let r = Tensor::from_slice_on(device, &[rstd], 1, 1)?;
    let shape = dy.shape();
    layernorm_backward_batched_with_caches(&flat(dy)?, &flat(xhat)?, gamma, &r, dx, dgamma, dbeta)?;
    dx.reshape(shape.0, shape.1)
}

/// `Y = X gamma / sqrt(mean(X^2) + eps)` per row of `X (B, D)`; `Y` is resized.
pub fn rms_norm_forward(x: &Tensor, gamma: &Tensor, eps: f32, y: &mut Tensor) -> Result<()> {
    let op = "rms_norm_forward";
    let be = dispatch(op, &[("x", x), ("gamma", gamma), ("y", y)])?;
    check_float(op, "x", x, be)?;
    check_params(op, x, x.cols(), &[("gamma", gamma)])?;
    prepare_out(y, be.device(), x.shape(), x.dtype())?;
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
            ("x", x),
            ("gamma", gamma),
            ("dy", dy),
            ("dx", dx),
            ("dgamma", dgamma),
        ],
    )?;
    check_float(op, "x", x, be)?;
    check_params(op, x, x.cols(), &[("gamma", gamma)])?;
    check_shape(op, "dy", dy, x.shape())?;
    if dy.dtype() != x.dtype() {
        return Err(Error::Dtype {
            op,
            operand: "dy",
            expected: format!("must match `x` ({})", x.dtype()),
            found: dy.dtype(),
        });
    }
    check_grad(op, "dgamma", dgamma, x, x.cols())?;
    prepare_out(dx, be.device(), x.shape(), x.dtype())?;
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

/// `x` viewed as `(rows, cols)`: a reshaped copy (shapes are metadata; the copy keeps the
/// caller's tensor untouched).
fn regrouped(x: &Tensor, rows: usize, cols: usize) -> Result<Tensor> {
    let mut t = x.try_clone()?;
    t.reshape(rows, cols)?;
    Ok(t)
}

/// PixelNorm per row of `X (N, C)`: `y = x / sqrt(mean(x^2) + eps)`; `Y` is resized. (An
/// RMSNorm with unit scale.)
pub fn pixel_norm_forward(x: &Tensor, eps: f32, y: &mut Tensor) -> Result<()> {
    let op = "pixel_norm_forward";
    let be = dispatch(op, &[("x", x), ("y", y)])?;
    check_float(op, "x", x, be)?;
    let ones = constant(be.device(), x.cols(), 1.0, x.dtype())?;
    rms_norm_forward(x, &ones, eps, y)
}

/// Gradient of [`pixel_norm_forward`] (reads `X`): `dX = r dY - (r^3 s / C) x`,
/// `s = sum(dY x)`; overwritten.
pub fn pixel_norm_backward(x: &Tensor, dy: &Tensor, eps: f32, dx: &mut Tensor) -> Result<()> {
    let op = "pixel_norm_backward";
    let be = dispatch(op, &[("x", x), ("dy", dy), ("dx", dx)])?;
    check_float(op, "x", x, be)?;
    let ones = constant(be.device(), x.cols(), 1.0, x.dtype())?;
    let mut unused = Tensor::zeros_on(be.device(), x.cols(), 1, x.dtype())?;
    rms_norm_backward(x, &ones, dy, eps, dx, &mut unused)
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
    let be = dispatch(op, &[("x", x), ("y", y)])?;
    check_float(op, "x", x, be)?;
    heads(op, x, head_dim, num_heads)?;
    let rows = x.rows() * num_heads;
    let scale = constant(
        be.device(),
        head_dim,
        1.0 / (head_dim as f32).sqrt(),
        x.dtype(),
    )?;
    rms_norm_forward(
        &regrouped(x, rows, head_dim)?,
        &scale,
        eps / head_dim as f32,
        y,
    )?;
    y.reshape(x.rows(), x.cols())
}

/// Gradient of [`l2_norm_forward`] (reads `X`): `dX = n (dY - x (x . dY) n^2)`,
/// `n = 1 / sqrt(sum(x^2) + eps)` per head; overwritten.
pub fn l2_norm_backward(
    x: &Tensor,
    head_dim: usize,
    num_heads: usize,
    eps: f32,
    dy: &Tensor,
    dx: &mut Tensor,
) -> Result<()> {
    let op = "l2_norm_backward";
    let be = dispatch(op, &[("x", x), ("dy", dy), ("dx", dx)])?;
    check_float(op, "x", x, be)?;
    heads(op, x, head_dim, num_heads)?;
    check_shape(op, "dy", dy, x.shape())?;
    let rows = x.rows() * num_heads;
    let scale = constant(
        be.device(),
        head_dim,
        1.0 / (head_dim as f32).sqrt(),
        x.dtype(),
    )?;
    let mut unused = Tensor::zeros_on(be.device(), head_dim, 1, x.dtype())?;
    rms_norm_backward(
        &regrouped(x, rows, head_dim)?,
        &scale,
        &regrouped(dy, rows, head_dim)?,
        eps / head_dim as f32,
        dx,
        &mut unused,
    )?;
    dx.reshape(x.rows(), x.cols())
}
