//! The quant category: GGUF block-quantized weights decoded and multiplied where they live.

use super::{missing, OnDevice};
use crate::ops::Act;
use crate::{Dtype, Result, Tensor};

/// Backend methods of the quant category. Callers (`crate::ops::quant`) guarantee operands on
/// this device, `w (n, k)` dense, committed, of a block dtype for which
/// [`QuantOps::computes_quant`] is true, with `k` a whole number of blocks; float activations
/// the device computes in; outputs committed and sized.
pub(crate) trait QuantOps: OnDevice {
    /// Whether the quantized ops take weights of the block dtype `dtype` on this device.
    fn computes_quant(&self, _dtype: Dtype) -> bool {
        false
    }
    /// `out (n, k)` (F32, F16 or BF16, a dtype the device converts to): `w` decoded.
    fn dequantize(&self, _w: &Tensor, _out: &mut Tensor) -> Result<()> {
        Err(missing("dequantize", self))
    }
    /// `y (m, n) = act(x (m, k) . dequant(w)^T + bias)` for few rows (`m <=
    /// ops::QUANT_GEMV_MAX_ROWS`, decode): every weight byte read once for all rows; `bias`
    /// `n` elements of `x`'s dtype; FP32 accumulation; `y` in `x`'s dtype.
    fn quant_gemv(
        &self,
        _w: &Tensor,
        _bias: Option<&Tensor>,
        _x: &Tensor,
        _act: Act,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing("quant_gemv", self))
    }
    /// [`QuantOps::quant_gemv`] for many rows (prefill): blocks decoded into tiles reused
    /// across rows, never into a whole dequantized weight.
    fn quant_gemm(
        &self,
        _w: &Tensor,
        _bias: Option<&Tensor>,
        _x: &Tensor,
        _act: Act,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing("quant_gemm", self))
    }
}
