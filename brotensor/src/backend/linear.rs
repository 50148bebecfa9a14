//! The linear category: one general matrix product and a broadcast bias add, from which the
//! public matmul / linear ops (forward and backward) are composed.

use super::OnDevice;
use crate::{Error, Result, Tensor};

/// `C = op(A) . op(B)`, or `C += ...`: the stored operands are read transposed when asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Gemm {
    pub(crate) trans_a: bool,
    pub(crate) trans_b: bool,
    pub(crate) accumulate: bool,
}

/// Callers guarantee: operands on this device in one float dtype the device computes in;
/// shapes that chain (`op(A)` is `m x k`, `op(B)` is `k x n`, `C` is `m x n`, committed).
pub(crate) trait LinearOps: OnDevice {
    /// The matrix product.
    fn gemm(
        &self,
        name: &'static str,
        _a: &Tensor,
        _b: &Tensor,
        _c: &mut Tensor,
        _g: Gemm,
    ) -> Result<()> {
        Err(Error::NotImplemented {
            op: name,
            device: self.device(),
        })
    }

    /// `y[i] += v[i % cols]` (`per_row == false`: a bias per column) or `y[r, :] += v[r]`.
    fn broadcast_add(
        &self,
        name: &'static str,
        _y: &mut Tensor,
        _v: &Tensor,
        _per_row: bool,
    ) -> Result<()> {
        Err(Error::NotImplemented {
            op: name,
            device: self.device(),
        })
    }
}
