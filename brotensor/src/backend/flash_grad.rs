//! The flash_grad category: flash attention backward passes.

use brotensor_cpu::flash_grad::FlashBwdGeometry;

use super::{missing, OnDevice};
use crate::{Result, Tensor};

/// Backend methods of the flash_grad category (each with a default body returning
/// `Error::NotImplemented` through [`super::missing`]). Callers (the public functions in
/// `crate::ops`) validate shapes, dtypes and devices first: `inputs` are `Q (rows_q, width)`,
/// `K`, `V (rows_k, width)`, `dO (rows_q, width)` of one float dtype the device computes in,
/// `width = heads * head_dim`, the mask is F32 with `rows_k` values, and the outputs are
/// committed and sized like the matching inputs in the inputs' dtype.
pub(crate) trait FlashAttentionGradOps: OnDevice {
    /// `[O, dQ, dK, dV]` of one attention over all rows (`O` is the recomputed forward
    /// output; the gradients are overwritten). Causal requires `rows_q == rows_k`.
    fn flash_attention_backward(
        &self,
        _inputs: [&Tensor; 4],
        _mask: Option<&Tensor>,
        _geometry: FlashBwdGeometry,
        _outputs: [&mut Tensor; 4],
    ) -> Result<()> {
        Err(missing("flash_attention_backward", self))
    }

    /// `[dQ, dK, dV]` of packed variable-length attention: `cu` are the I32 prefix-sum
    /// tensors (`batch + 1` values), `cu_host` the same values, validated (start at 0,
    /// nondecreasing, end at `rows_q` / `rows_k`).
    fn flash_attention_varlen_backward(
        &self,
        _inputs: [&Tensor; 4],
        _cu: [&Tensor; 2],
        _cu_host: [&[usize]; 2],
        _geometry: FlashBwdGeometry,
        _outputs: [&mut Tensor; 3],
    ) -> Result<()> {
        Err(missing("flash_attention_varlen_backward", self))
    }
}
