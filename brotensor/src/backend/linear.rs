//! The linear category: one general matrix product (batched, transposes, accumulation, a
//! fused bias and activation), from which the public matmul / linear ops are composed.

use super::OnDevice;
use crate::{Error, Result, Tensor};

/// `C[z] = act(op(A[z]) . op(B[z]) (+ C[z]) + bias)` for `z < batch`: `op(A)` is `m x k`,
/// `op(B)` is `k x n`; stored operands are read transposed when asked; batch entries sit
/// `strides` elements apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Gemm {
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) trans_a: bool,
    pub(crate) trans_b: bool,
    pub(crate) accumulate: bool,
    pub(crate) batch: usize,
    pub(crate) strides: (usize, usize, usize),
    /// The C++ epilogue code: 0 none, 1 relu, 2 tanh-GELU, 3 erf-GELU, 4 SiLU, 5 quick-GELU.
    pub(crate) act: u32,
}

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
