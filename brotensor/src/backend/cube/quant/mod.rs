//! GPU glue of the quant category: dequantization, the decode GEMV and the prefill GEMM, one
//! file each.

mod dequant;
mod gemm;
mod gemv;

use cubecl::prelude::*;

use super::CubeBackend;
use crate::backend::QuantOps;

impl<R: Runtime> QuantOps for CubeBackend<R> {}
