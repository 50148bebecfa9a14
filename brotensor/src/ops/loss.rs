//! Softmax forward and backward (the loss category's softmax slots).
//!
//! `softmax_forward` and `softmax_backward` treat their tensor as one flat vector (the C++
//! contract); `softmax_rows_forward` works row by row. An optional F32 mask (one value per
//! softmax entry) drops entries whose mask is below 0.5: they get probability 0, and a fully
//! masked vector is all zeros rather than NaN.

use super::{check_same, dispatch, input, input_opt, updated, written, Operand};
use crate::backend::Src;
use crate::{Dtype, Error, Result, Tensor};

/// `y = softmax` of each row of `x` (the last dim; every leading dim folds into rows); `y`
/// is resized to `x`'s dims and dtype.
pub fn softmax_rows_forward(x: &Tensor, y: &mut Tensor) -> Result<()> {
    let op = "softmax_rows_forward";
    let be = dispatch(op, &[input("x", x).float(), written("y", y)])?;
    be.out("y", y, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    be.softmax(Src::Tensor(x), None, y, x.cols())
}

/// [`softmax_rows_forward`] into a new tensor.
pub fn softmax_rows(x: &Tensor) -> Result<Tensor> {
    let mut y = Tensor::default();
    softmax_rows_forward(x, &mut y)?;
    Ok(y)
}

impl Tensor {
    /// [`softmax_rows_forward`] in place (each row of the last dim).
    pub fn softmax_rows_(&mut self) -> Result<()> {
        let op = "softmax_rows_";
        let be = super::dispatch(op, &[updated("x", self).float()])?;
        if self.numel() == 0 {
            return Ok(());
        }
        let cols = self.cols();
        be.softmax(Src::Out, None, self, cols)
    }
}

/// `probs = softmax(logits)` over all elements as one vector, with an optional `mask` of the
/// same element count (F32); `probs` is resized to `logits`.
pub fn softmax_forward(logits: &Tensor, mask: Option<&Tensor>, probs: &mut Tensor) -> Result<()> {
    let op = "softmax_forward";
    let be = dispatch(
        op,
        &[
            input("logits", logits).float(),
            input_opt("mask", mask),
            written("probs", probs),
        ],
    )?;
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
    be.out("probs", probs, logits.dims(), logits.dtype())?;
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
        &[
            input("probs", probs).float(),
            input("dprobs", dprobs),
            written("dlogits", dlogits),
        ],
    )?;
    check_same(op, ("dprobs", dprobs), ("probs", probs))?;
    be.out("dlogits", dlogits, probs.dims(), probs.dtype())?;
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

/// `mean((pred - target)^2)` over all elements (0 for none). Reading the result synchronizes.
pub fn mse_vec_forward(pred: &Tensor, target: &Tensor) -> Result<f32> {
    let op = "mse_vec_forward";
    let be = dispatch(op, &[input("pred", pred), input("target", target)])?;
    check_pair(op, pred, target)?;
    let n = pred.numel();
    if n == 0 {
        return Ok(0.0);
    }
    Ok((be.squared_error_sum(pred, target)? / n as f64) as f32)
}

/// `dpred = 2 (pred - target) / n`, overwritten (resized to `pred`).
pub fn mse_vec_backward(pred: &Tensor, target: &Tensor, dpred: &mut Tensor) -> Result<()> {
    let op = "mse_vec_backward";
    dispatch(
        op,
        &[
            input("pred", pred),
            input("target", target),
            written("dpred", dpred),
        ],
    )?;
    check_pair(op, pred, target)?;
    super::sub_out(pred, &target.reshaped(pred.rows(), pred.cols())?, dpred)?;
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
            input("pred", pred),
            input("target", target),
            written("dpred", dpred),
            written("loss", loss),
        ],
    )?;
    check_pair(op, pred, target)?;
    super::sub_out(pred, &target.reshaped(pred.rows(), pred.cols())?, dpred)?;
    super::mul_out(dpred, dpred, loss)?;
    if loss.numel() > 0 {
        loss.mul_scalar_(0.5)?;
    }
    loss.reshape_(&[pred.numel(), 1])
}

/// Checks F32 loss operands against `logits` and sizes the outputs; returns the backend.
fn prepare_loss(
    op: &'static str,
    logits: &Tensor,
    target: &Tensor,
    mask: Option<&Tensor>,
    outs: [&mut Tensor; 3],
    loss_shape: (usize, usize),
    more: &[Operand<'_>],
) -> Result<crate::ops::Dispatched> {
    let [probs, dlogits, loss] = outs;
    let mut operands = vec![
        input("logits", logits),
        input("target", target),
        input_opt("mask", mask),
        written("probs", probs),
        written("dlogits", dlogits),
        written("loss", loss),
    ];
    operands.extend_from_slice(more);
    let be = dispatch(op, &operands)?;
    for (name, t) in [
        ("logits", Some(logits)),
        ("target", Some(target)),
        ("mask", mask),
    ] {
        let Some(t) = t else { continue };
        if t.dtype() != Dtype::F32 {
            return Err(Error::Dtype {
                op,
                operand: name,
                expected: "loss ops are FP32".into(),
                found: t.dtype(),
            });
        }
        if t.numel() != logits.numel() {
            return Err(Error::shape(
                op,
                format!(
                    "`{name}` has {} elements, `logits` {}",
                    t.numel(),
                    logits.numel()
                ),
            ));
        }
    }
    be.out("probs", probs, logits.dims(), Dtype::F32)?;
    be.out("dlogits", dlogits, logits.dims(), Dtype::F32)?;
    be.out("loss", loss, &[loss_shape.0, loss_shape.1], Dtype::F32)?;
    Ok(be)
}

/// `logits` as a 1-row matrix (the flat softmax of the unbatched losses).
fn flat(t: &Tensor) -> Result<Tensor> {
    t.reshaped(1, t.numel())
}

/// Masked softmax cross-entropy over all of `logits` as one vector: `probs` = softmax,
/// `dlogits = probs - target` (0 where masked), both resized to `logits`; returns
/// `sum_{valid, t > 0} -t log(max(p, 1e-12))` (a sum, not a mean). Reading it synchronizes.
pub fn softmax_xent(
    logits: &Tensor,
    target: &Tensor,
    mask: Option<&Tensor>,
    probs: &mut Tensor,
    dlogits: &mut Tensor,
) -> Result<f32> {
    flat_xent("softmax_xent", logits, target, mask, probs, dlogits)
}

/// [`softmax_xent`] under its C++ name (the same arguments in the same order).
pub fn softmax_xent_fused(
    logits: &Tensor,
    target: &Tensor,
    mask: Option<&Tensor>,
    probs: &mut Tensor,
    dlogits: &mut Tensor,
) -> Result<f32> {
    flat_xent("softmax_xent_fused", logits, target, mask, probs, dlogits)
}

fn flat_xent(
    op: &'static str,
    logits: &Tensor,
    target: &Tensor,
    mask: Option<&Tensor>,
    probs: &mut Tensor,
    dlogits: &mut Tensor,
) -> Result<f32> {
    let mut loss = Tensor::default();
    let be = prepare_loss(
        op,
        logits,
        target,
        mask,
        [probs, dlogits, &mut loss],
        (1, 1),
        &[],
    )?;
    let n = logits.numel();
    if n == 0 {
        return Ok(0.0);
    }
    let shape = logits.shape();
    let (fl, ft) = (flat(logits)?, flat(target)?);
    let fm = mask.map(flat).transpose()?;
    probs.reshape_(&[1, n])?;
    dlogits.reshape_(&[1, n])?;
    let io = crate::backend::LossIo {
        logits: &fl,
        target: &ft,
        mask: fm.as_ref(),
        probs,
        dlogits,
        loss: &mut loss,
    };
    be.xent(io, &[0, n])?;
    probs.reshape_(&[shape.0, shape.1])?;
    dlogits.reshape_(&[shape.0, shape.1])?;
    Ok(loss.to_vec::<f32>()?[0])
}

/// [`softmax_xent`] on host slices of one length (C++ `softmax_xent_segment`, which always
/// runs on the CPU).
pub fn softmax_xent_segment(
    logits: &[f32],
    target: &[f32],
    probs: &mut [f32],
    dlogits: &mut [f32],
    mask: Option<&[f32]>,
) -> Result<f32> {
    let n = logits.len();
    if target.len() != n
        || probs.len() != n
        || dlogits.len() != n
        || mask.is_some_and(|m| m.len() != n)
    {
        return Err(Error::shape(
            "softmax_xent_segment",
            "every slice must have logits' length",
        ));
    }
    Ok(brotensor_cpu::loss::xent_segment(
        logits, target, mask, probs, dlogits,
    ))
}

/// Per row of `logits (B, L)` and per head `[head_offsets[h], head_offsets[h + 1])`: the
/// masked softmax cross-entropy of that segment; `probs`, `dlogits` resized to `(B, L)`
/// (columns outside every head are left as they were), `loss_per_sample (B, 1)` = the sum
/// over heads. `mask` is per element. `head_offsets` must be non-decreasing and end within L.
#[allow(clippy::too_many_arguments)]
pub fn softmax_xent_fused_batched(
    logits: &Tensor,
    target: &Tensor,
    mask: Option<&Tensor>,
    head_offsets: &[usize],
    probs: &mut Tensor,
    dlogits: &mut Tensor,
    loss_per_sample: &mut Tensor,
) -> Result<()> {
    let op = "softmax_xent_fused_batched";
    let (b, l) = logits.shape();
    let mut per_head = Tensor::default();
    let heads = head_offsets.len().saturating_sub(1);
    let be = prepare_loss(
        op,
        logits,
        target,
        mask,
        [probs, dlogits, &mut per_head],
        (b, heads.max(1)),
        &[written("loss_per_sample", loss_per_sample)],
    )?;
    if head_offsets.windows(2).any(|w| w[0] > w[1]) || head_offsets.last().is_some_and(|&e| e > l) {
        return Err(Error::invalid(
            op,
            format!("head offsets {head_offsets:?} must be non-decreasing and end within {l}"),
        ));
    }
    be.out("loss_per_sample", loss_per_sample, &[b, 1], Dtype::F32)?;
    // No logits (zero rows, heads or columns): every head's sum is over nothing. The
    // backends never see the inputs then, which may be uncommitted (empty) tensors.
    if b == 0 || heads == 0 || l == 0 {
        return loss_per_sample.zero();
    }
    let io = crate::backend::LossIo {
        logits,
        target,
        mask,
        probs,
        dlogits,
        loss: &mut per_head,
    };
    be.xent(io, head_offsets)?;
    super::sum_rows(&per_head, loss_per_sample)
}

/// Binary cross-entropy with logits per row of `(B, L)` with positive weight `pos_weight`:
/// `probs = sigmoid(z)`, `dlogits = s (w y + 1 - y) - w y`, `loss_per_sample (B, 1)` = the
/// sum over the row of `w y softplus(-z) + (1 - y) softplus(z)`; masked entries give 0.
#[allow(clippy::too_many_arguments)]
pub fn bce_with_logits_fused_batched(
    logits: &Tensor,
    target: &Tensor,
    mask: Option<&Tensor>,
    pos_weight: f32,
    probs: &mut Tensor,
    dlogits: &mut Tensor,
    loss_per_sample: &mut Tensor,
) -> Result<()> {
    let op = "bce_with_logits_fused_batched";
    let be = prepare_loss(
        op,
        logits,
        target,
        mask,
        [probs, dlogits, loss_per_sample],
        (logits.rows(), 1),
        &[],
    )?;
    if logits.rows() == 0 {
        return Ok(());
    }
    if logits.cols() == 0 {
        return loss_per_sample.zero();
    }
    let io = crate::backend::LossIo {
        logits,
        target,
        mask,
        probs,
        dlogits,
        loss: loss_per_sample,
    };
    be.bce(io, pos_weight)
}
