//! `flash_attention_qkvo_backward`: the backward of attention with its projections, a
//! composite of the linear ops and the attention core's backward.
//!
//! Forward (the C++ `flash_attention_qkvo_forward`): `Q = X Wq^T + bq`,
//! `K = C Wk^T + bk`, `V = C Wv^T + bv` with `C = Ctx` (or `X` when `Ctx` is none),
//! `A = attention(Q, K, V)`, `O = A Wo^T + bo`. Backward: `dA = dO Wo`, the core's backward
//! gives `dQ`, `dK`, `dV` (and the recomputed `A`), then each projection's backward.

use super::core_backward;
use crate::ops::flash_attention::check_key_mask;
use crate::ops::{
    add_inplace, dispatch, input, input_opt, linear_backward_batched, linear_forward_batched,
    matmul, updated, updated_opt, written, written_opt,
};
use crate::{Error, Result, Tensor};

/// The gradients of [`flash_attention_qkvo_backward`]. `dx (Lq, D)` and `dctx (Lk, D_ctx)`
/// are overwritten (resized); `dctx` must be given exactly when `Ctx` is. The parameter
/// gradients accumulate and must be pre-sized in the operands' dtype: `dwq`, `dwo (D, D)`,
/// `dwk`, `dwv (D, D_ctx)`, and `db* (D, 1)` given exactly when the matching bias is.
pub struct QkvoGrads<'a> {
    /// `dX (Lq, D)`, overwritten. Self-attention: `dQ Wq + dK Wk + dV Wv`.
    pub dx: &'a mut Tensor,
    /// `dCtx (Lk, D_ctx)`, overwritten: `dK Wk + dV Wv`.
    pub dctx: Option<&'a mut Tensor>,
    /// `dWq (D, D)`, accumulated.
    pub dwq: &'a mut Tensor,
    /// `dbq (D, 1)`, accumulated.
    pub dbq: Option<&'a mut Tensor>,
    /// `dWk (D, D_ctx)`, accumulated.
    pub dwk: &'a mut Tensor,
    /// `dbk (D, 1)`, accumulated.
    pub dbk: Option<&'a mut Tensor>,
    /// `dWv (D, D_ctx)`, accumulated.
    pub dwv: &'a mut Tensor,
    /// `dbv (D, 1)`, accumulated.
    pub dbv: Option<&'a mut Tensor>,
    /// `dWo (D, D)`, accumulated.
    pub dwo: &'a mut Tensor,
    /// `dbo (D, 1)`, accumulated.
    pub dbo: Option<&'a mut Tensor>,
}

/// Checks a weight's shape and dtype (`like`'s).
fn check_weight(
    op: &'static str,
    name: &'static str,
    w: &Tensor,
    shape: (usize, usize),
    like: &Tensor,
) -> Result<()> {
    if w.shape() != shape {
        return Err(Error::shape(
            op,
            format!("`{name}` is {:?}, {}x{} needed", w.dims(), shape.0, shape.1),
        ));
    }
    super::check_dtypes_match(op, ("x", like), &[(name, w)])
}

/// Checks a pre-sized accumulating gradient: committed, `shape`, `like`'s dtype.
fn check_accumulator(
    op: &'static str,
    name: &'static str,
    g: &Tensor,
    shape: (usize, usize),
    like: &Tensor,
) -> Result<()> {
    g.check_writable(op, name)?;
    if !g.is_committed() {
        return Err(Error::shape(
            op,
            format!("`{name}` must be pre-sized (it accumulates)"),
        ));
    }
    check_weight(op, name, g, shape, like)
}

/// Checks a bias and its gradient: both given or both none, `D` values, `like`'s dtype.
fn check_bias_pair(
    op: &'static str,
    (name, b): (&'static str, Option<&Tensor>),
    (grad_name, g): (&'static str, Option<&Tensor>),
    d: usize,
    like: &Tensor,
) -> Result<()> {
    match (b, g) {
        (None, None) => Ok(()),
        (Some(b), Some(g)) => {
            if b.numel() != d {
                return Err(Error::shape(
                    op,
                    format!("`{name}` has {} values, D = {d} needed", b.numel()),
                ));
            }
            super::check_dtypes_match(op, ("x", like), &[(name, b)])?;
            check_accumulator(op, grad_name, g, (d, 1), like)
        }
        _ => Err(Error::invalid(
            op,
            format!("`{grad_name}` must be given exactly when `{name}` is"),
        )),
    }
}

/// One projection's backward: `dx = dy W` (overwritten), `dW += dy^T x`, `db += sum dy`
/// (into a scratch when the projection has no bias).
fn project_back(
    w: &Tensor,
    x: &Tensor,
    dy: &Tensor,
    dx: &mut Tensor,
    dw: &mut Tensor,
    db: Option<&mut Tensor>,
) -> Result<()> {
    match db {
        Some(db) => linear_backward_batched(w, x, dy, dx, dw, db),
        None => {
            let mut scratch = Tensor::zeros_on(dw.device(), dw.rows(), 1, dw.dtype())?;
            linear_backward_batched(w, x, dy, dx, dw, &mut scratch)
        }
    }
}

/// Backward of `flash_attention_qkvo_forward` (recompute-based: the projections and the
/// attention are re-run from the inputs). `x (Lq, D)`, `ctx (Lk, D_ctx)` or none
/// (self-attention: `Ctx = X`), `wq`, `wo (D, D)`, `wk`, `wv (D, D_ctx)`, optional biases of
/// `D` values, an optional F32 key `mask` of `Lk` values, `num_heads` dividing `D`, `causal`
/// (requires `Lq == Lk`), upstream `d_o (Lq, D)`; every float operand shares `x`'s dtype.
/// Gradients as [`QkvoGrads`] says. CPU: F32; GPU: F32, F16, BF16.
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_qkvo_backward(
    x: &Tensor,
    ctx: Option<&Tensor>,
    wq: &Tensor,
    bq: Option<&Tensor>,
    wk: &Tensor,
    bk: Option<&Tensor>,
    wv: &Tensor,
    bv: Option<&Tensor>,
    wo: &Tensor,
    bo: Option<&Tensor>,
    mask: Option<&Tensor>,
    num_heads: usize,
    causal: bool,
    d_o: &Tensor,
    grads: QkvoGrads<'_>,
) -> Result<()> {
    let op = "flash_attention_qkvo_backward";
    let QkvoGrads {
        dx,
        dctx,
        dwq,
        dbq,
        dwk,
        dbk,
        dwv,
        dbv,
        dwo,
        dbo,
    } = grads;
    dispatch(
        op,
        &[
            input("x", x).float(),
            input_opt("ctx", ctx),
            input("wq", wq),
            input_opt("bq", bq),
            input("wk", wk),
            input_opt("bk", bk),
            input("wv", wv),
            input_opt("bv", bv),
            input("wo", wo),
            input_opt("bo", bo),
            input_opt("mask", mask),
            input("d_o", d_o),
            written("dx", dx),
            written_opt("dctx", dctx.as_deref()),
            updated("dwq", dwq),
            updated_opt("dbq", dbq.as_deref()),
            updated("dwk", dwk),
            updated_opt("dbk", dbk.as_deref()),
            updated("dwv", dwv),
            updated_opt("dbv", dbv.as_deref()),
            updated("dwo", dwo),
            updated_opt("dbo", dbo.as_deref()),
        ],
    )?;
    let (lq, d) = x.shape();
    let c = ctx.unwrap_or(x);
    let (lk, d_ctx) = c.shape();
    if ctx.is_some() != dctx.is_some() {
        return Err(Error::invalid(
            op,
            "`dctx` must be given exactly when `ctx` is",
        ));
    }
    if let Some(ctx) = ctx {
        super::check_dtypes_match(op, ("x", x), &[("ctx", ctx)])?;
    }
    check_weight(op, "wq", wq, (d, d), x)?;
    check_weight(op, "wk", wk, (d, d_ctx), x)?;
    check_weight(op, "wv", wv, (d, d_ctx), x)?;
    check_weight(op, "wo", wo, (d, d), x)?;
    check_weight(op, "d_o", d_o, (lq, d), x)?;
    if num_heads == 0 || d % num_heads != 0 {
        return Err(Error::invalid(
            op,
            format!("num_heads = {num_heads} must divide D = {d}"),
        ));
    }
    if causal && lq != lk {
        return Err(Error::invalid(
            op,
            format!("causal requires Lq == Lk, got Lq = {lq} and Lk = {lk}"),
        ));
    }
    check_key_mask(op, mask, lk)?;
    check_accumulator(op, "dwq", dwq, (d, d), x)?;
    check_accumulator(op, "dwk", dwk, (d, d_ctx), x)?;
    check_accumulator(op, "dwv", dwv, (d, d_ctx), x)?;
    check_accumulator(op, "dwo", dwo, (d, d), x)?;
    check_bias_pair(op, ("bq", bq), ("dbq", dbq.as_deref()), d, x)?;
    check_bias_pair(op, ("bk", bk), ("dbk", dbk.as_deref()), d, x)?;
    check_bias_pair(op, ("bv", bv), ("dbv", dbv.as_deref()), d, x)?;
    check_bias_pair(op, ("bo", bo), ("dbo", dbo.as_deref()), d, x)?;

    // Recompute the projections, then run the core backward on dA = dO Wo.
    let (mut q, mut k, mut v, mut da) = Default::default();
    linear_forward_batched(wq, bq, x, &mut q)?;
    linear_forward_batched(wk, bk, c, &mut k)?;
    linear_forward_batched(wv, bv, c, &mut v)?;
    matmul(d_o, wo, &mut da)?;
    let (mut a, mut dq, mut dk, mut dv) = Default::default();
    core_backward(
        op,
        [&q, &k, &v, &da],
        mask,
        num_heads,
        causal,
        &mut a,
        [&mut dq, &mut dk, &mut dv],
    )?;
    // The projections' backward: dWo from A, then the input projections.
    let mut scratch = Tensor::default();
    project_back(wo, &a, d_o, &mut scratch, dwo, dbo)?;
    project_back(wq, x, &dq, dx, dwq, dbq)?;
    let mut dcv = Tensor::default();
    project_back(wv, c, &dv, &mut dcv, dwv, dbv)?;
    match dctx {
        Some(dctx) => {
            project_back(wk, c, &dk, dctx, dwk, dbk)?;
            add_inplace(dctx, &dcv)
        }
        None => {
            let mut dck = Tensor::default();
            project_back(wk, c, &dk, &mut dck, dwk, dbk)?;
            add_inplace(dx, &dck)?;
            add_inplace(dx, &dcv)
        }
    }
}
