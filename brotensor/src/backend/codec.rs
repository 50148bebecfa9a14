//! The codec category: the quantization bottlenecks of neural audio codecs (vector
//! quantization against a codebook, finite scalar quantization). FP32 only; both backward
//! passes are straight-through copies, done by the ops with the strided copy.

use super::{missing, OnDevice};
use crate::{Result, Tensor};

/// Codec quantizers. Callers guarantee dense operands on this device with the dtypes and
/// shapes each method states, at least one row, and committed, sized outputs.
pub(crate) trait CodecOps: OnDevice {
    /// Vector-quantization encode: `x (N, D)` F32 and `codebook (K, D)` F32 (`K, D >= 1`);
    /// `indices` (`N` I32) gets each row's nearest codeword by squared distance (lowest index
    /// on ties) and `quantized (N, D)` F32 that codeword.
    fn vq_encode(
        &self,
        name: &'static str,
        _x: &Tensor,
        _codebook: &Tensor,
        _indices: &mut Tensor,
        _quantized: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// Finite scalar quantization: `x (N, D)` F32 on `levels` (`D` I32, each >= 2, their
    /// product within `i32`); `quantized (N, D)` F32 and `packed` (`N` I32), as
    /// `brotensor_cpu::codec::fsq_quantize`.
    fn fsq_quantize(
        &self,
        name: &'static str,
        _x: &Tensor,
        _levels: &Tensor,
        _quantized: &mut Tensor,
        _packed: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }
}
