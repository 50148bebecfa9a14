//! The linear category: one general matrix product (batched, transposes, accumulation, a
//! fused bias and activation), from which the public matmul / linear ops are composed.

use super::OnDevice;
use crate::{Error, Result, Tensor};

pub(crate) use brotensor_cpu::linear::Gemm;

/// Callers guarantee: operands on this device in one float dtype the device computes in;
/// every batch entry the dimensions and strides reach lies inside its tensor; `C` committed.
pub(crate) trait LinearOps: OnDevice {
    /// The matrix product, with an optional bias of `n` elements added to every row.
    fn gemm(
        &self,
        name: &'static str,
        _a: &Tensor,
        _b: &Tensor,
        _bias: Option<&Tensor>,
        _c: &mut Tensor,
        _g: Gemm,
    ) -> Result<()> {
        Err(Error::NotImplemented {
            op: name,
            device: self.device(),
        })
    }
}
