//! The GPU prefill GEMM with quantized weights.

use cubecl::prelude::*;

use super::super::CubeBackend;
use crate::ops::Act;
use crate::{Result, Tensor};

/// `y (m, n) = act(x (m, k) . dequant(w)^T + bias)` for many rows (see
/// [`crate::backend::QuantOps::quant_gemm`]); not on the GPU yet.
pub(super) fn quant_gemm<R: Runtime>(
    be: &CubeBackend<R>,
    _w: &Tensor,
    _bias: Option<&Tensor>,
    _x: &Tensor,
    _act: Act,
    _y: &mut Tensor,
) -> Result<()> {
    Err(crate::backend::missing("quant_gemm", be))
}
