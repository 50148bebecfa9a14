//! The fused losses (FP32 by design, as in the C++ original).

use super::OnDevice;
use crate::{Error, Result, Tensor};

/// Operands of a fused loss over `(rows, cols)` F32 tensors on one device.
pub(crate) struct LossIo<'a> {
    pub(crate) logits: &'a Tensor,
    pub(crate) target: &'a Tensor,
    /// Per-element mask (valid when at least 0.5).
    pub(crate) mask: Option<&'a Tensor>,
    pub(crate) probs: &'a mut Tensor,
    pub(crate) dlogits: &'a mut Tensor,
    /// `(rows, heads)` for cross-entropy, `(rows, 1)` for BCE.
    pub(crate) loss: &'a mut Tensor,
}

/// Callers guarantee F32 operands of matching element counts, outputs committed and sized,
/// and head offsets non-decreasing within `cols`.
pub(crate) trait LossOps: OnDevice {
    /// Masked softmax cross-entropy per row and head `[offsets[h], offsets[h + 1])`.
    fn xent(&self, _io: LossIo<'_>, _offsets: &[usize]) -> Result<()> {
        Err(Error::NotImplemented {
            op: "softmax_xent",
            device: self.device(),
        })
    }

    /// Binary cross-entropy with logits per row.
    fn bce(&self, _io: LossIo<'_>, _pos_weight: f32) -> Result<()> {
        Err(Error::NotImplemented {
            op: "bce_with_logits_fused_batched",
            device: self.device(),
        })
    }

    /// `sum (pred - target)^2` over every element (FP32 partial sums, added in f64).
    fn squared_error_sum(&self, _pred: &Tensor, _target: &Tensor) -> Result<f64> {
        Err(Error::NotImplemented {
            op: "mse_vec_forward",
            device: self.device(),
        })
    }
}
