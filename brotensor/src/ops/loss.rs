//! Softmax forward and backward (the loss category's softmax slots).
//!
//! `softmax_forward` and `softmax_backward` treat their tensor as one flat vector (the C++
//! contract); `softmax_rows_forward` works row by row. An optional F32 mask (one value per
//! softmax entry) drops entries whose mask is below 0.5: they get probability 0, and a fully
//! masked vector is all zeros rather than NaN.

use super::{check_float, check_same, dispatch, prepare_out};
use crate::backend::Src;
use crate::{Dtype, Error, Result, Tensor};

/// `y = softmax` of each `cols`-wide row of `x`, which holds `rows * cols` elements; `y` is
/// resized to `x`'s shape and dtype.
pub fn softmax_rows_forward(x: &Tensor, y: &mut Tensor, rows: usize, cols: usize) -> Result<()> {
    let op = "softmax_rows_forward";
    let be = dispatch(op, &[("x", x), ("y", y)])?;
    check_float(op, "x", x, be)?;
    check_rows(op, x, rows, cols)?;
    prepare_out(y, be.device(), x.shape(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    be.softmax(Src::Tensor(x), None, y, cols)
}

impl Tensor {
    /// [`softmax_rows_forward`] in place.
    pub fn softmax_rows_(&mut self, rows: usize, cols: usize) -> Result<()> {
        let op = "softmax_rows_";
        let be = dispatch(op, &[("x", self)])?;
        check_float(op, "x", self, be)?;
        check_rows(op, self, rows, cols)?;
        if self.numel() == 0 {
            return Ok(());
        }
        be.softmax(Src::Out, None, self, cols)
    }
}

fn check_rows(op: &'static str, x: &Tensor, rows: usize, cols: usize) -> Result<()> {
    if rows.checked_mul(cols) != Some(x.numel()) {
        return Err(Error::shape(
            op,
            format!(
                "rows * cols = {rows} * {cols} but `x` has {} elements",
                x.numel()
            ),
        ));
    }
    Ok(())
}

/// `probs = softmax(logits)` over all elements as one vector, with an optional `mask` of the
/// same element count (F32); `probs` is resized to `logits`.
pub fn softmax_forward(logits: &Tensor, probs: &mut Tensor, mask: Option<&Tensor>) -> Result<()> {
    let op = "softmax_forward";
    let none = Tensor::default();
    let be = dispatch(
        op,
        &[
            ("logits", logits),
            ("probs", probs),
            ("mask", mask.unwrap_or(&none)),
        ],
    )?;
    check_float(op, "logits", logits, be)?;
    if let Some(m) = mask {
        if m.numel() != logits.numel() {
            return Err(Error::shape(
                op,
                format!(
                    "`mask` has {} elements, `logits` {}",
                    m.numel(),
                    logits.numel()
                ),
            ));
        }
        if m.dtype() != Dtype::F32 {
            return Err(Error::Dtype {
                op,
                operand: "mask",
                expected: "masks are F32".into(),
                found: m.dtype(),
            });
        }
    }
    prepare_out(probs, be.device(), logits.shape(), logits.dtype())?;
    if logits.numel() == 0 {
        return Ok(());
    }
    be.softmax(Src::Tensor(logits), mask, probs, logits.numel())
}

/// `dlogits = p (dp - sum(dp p))` over all elements as one vector (the softmax gradient from
/// its output `probs`); `dlogits` is overwritten (resized to `probs`).
pub fn softmax_backward(probs: &Tensor, dprobs: &Tensor, dlogits: &mut Tensor) -> Result<()> {
    let op = "softmax_backward";
    let be = dispatch(
        op,
        &[("probs", probs), ("dprobs", dprobs), ("dlogits", dlogits)],
    )?;
    check_float(op, "probs", probs, be)?;
    check_same(op, ("dprobs", dprobs), ("probs", probs))?;
    prepare_out(dlogits, be.device(), probs.shape(), probs.dtype())?;
    if probs.numel() == 0 {
        return Ok(());
    }
    be.softmax_backward(probs, dprobs, dlogits, probs.numel())
}

/// Checks that `pred` and `target` are F32 tensors of one element count (the losses are FP32
/// by design).
fn check_pair(op: &'static str, pred: &Tensor, target: &Tensor) -> Result<()> {
    for (name, t) in [("pred", pred), ("target", target)] {
        if t.dtype() != Dtype::F32 {
            return Err(Error::Dtype {
                op,
                operand: name,
                expected: "loss ops are FP32".into(),
                found: t.dtype(),
            });
        }
    }
    if pred.numel() != target.numel() {
        return Err(Error::shape(
            op,
            format!(
                "`pred` has {} elements, `target` {}",
                pred.numel(),
                target.numel()
            ),
        ));
    }
    Ok(())
}

/// `pred - target` as a tensor shaped like `pred`.
fn difference(pred: &Tensor, target: &Tensor) -> Result<Tensor> {
    let mut t = target.try_clone()?;
    t.reshape(pred.rows(), pred.cols())?;
    super::sub(pred, &t)
}

/// `mean((pred - target)^2)` over all elements (0 for none). Reading the result synchronizes.
pub fn mse_vec_forward(pred: &Tensor, target: &Tensor) -> Result<f32> {
    let op = "mse_vec_forward";
    dispatch(op, &[("pred", pred), ("target", target)])?;
    check_pair(op, pred, target)?;
    let n = pred.numel();
    if n == 0 {
        return Ok(0.0);
    }
    let d = difference(pred, target)?;
    let mut sq = super::mul(&d, &d)?;
    sq.reshape(1, n)?;
    let mut total = Tensor::default();
    super::sum_rows(&sq, &mut total)?;
    Ok(total.to_vec::<f32>()?[0] / n as f32)
}

/// `dpred = 2 (pred - target) / n`, overwritten (resized to `pred`).
pub fn mse_vec_backward(pred: &Tensor, target: &Tensor, dpred: &mut Tensor) -> Result<()> {
    let op = "mse_vec_backward";
    dispatch(op, &[("pred", pred), ("target", target), ("dpred", dpred)])?;
    check_pair(op, pred, target)?;
    let mut t = target.try_clone()?;
    t.reshape(pred.rows(), pred.cols())?;
    super::sub_out(pred, &t, dpred)?;
    if pred.numel() > 0 {
        dpred.mul_scalar_(2.0 / pred.numel() as f32)?;
    }
    Ok(())
}

/// `(0.5 d^2, d)` with `d = pred - target`: the scalar loss and its gradient (host values).
pub fn mse_scalar(pred: f32, target: f32) -> Result<(f32, f32)> {
    let d = pred - target;
    Ok((0.5 * d * d, d))
}

/// Per sample of `pred (B, 1)`: `dpred = d` and `loss = 0.5 d^2`, `d = pred - target`, both
/// overwritten (`loss` resized to `(B, 1)` F32). No `1/B` scaling.
pub fn mse_vec_per_sample(
    pred: &Tensor,
    target: &Tensor,
    dpred: &mut Tensor,
    loss: &mut Tensor,
) -> Result<()> {
    let op = "mse_vec_per_sample";
    dispatch(
        op,
        &[
            ("pred", pred),
            ("target", target),
            ("dpred", dpred),
            ("loss", loss),
        ],
    )?;
    check_pair(op, pred, target)?;
    let mut t = target.try_clone()?;
    t.reshape(pred.rows(), pred.cols())?;
    super::sub_out(pred, &t, dpred)?;
    super::mul_out(dpred, dpred, loss)?;
    if loss.numel() > 0 {
        loss.mul_scalar_(0.5)?;
    }
    loss.reshape(pred.numel(), 1)
}
