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
