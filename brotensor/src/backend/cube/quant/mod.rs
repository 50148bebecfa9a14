//! GPU glue of the quant category: dequantization, the decode GEMV and the prefill GEMM, one
//! file each.

mod dequant;
mod gemm;
mod gemv;

use brotensor_kernels::quant::blocks as qb;
use cubecl::prelude::*;

use super::CubeBackend;
use crate::backend::QuantOps;
use crate::ops::Act;
use crate::{Dtype, Result, Tensor};

/// The kernels' block type code of a weight block dtype (`None` for any other dtype).
pub(super) fn kind_of(dtype: Dtype) -> Option<u32> {
    Some(match dtype {
        Dtype::Q4_0 => qb::Q4_0,
        Dtype::Q4_1 => qb::Q4_1,
        Dtype::Q5_0 => qb::Q5_0,
        Dtype::Q5_1 => qb::Q5_1,
        Dtype::Q8_0 => qb::Q8_0,
        Dtype::Q2_K => qb::Q2_K,
        Dtype::Q3_K => qb::Q3_K,
        Dtype::Q4_K => qb::Q4_K,
        Dtype::Q5_K => qb::Q5_K,
        Dtype::Q6_K => qb::Q6_K,
        Dtype::IQ4_NL => qb::IQ4_NL,
        Dtype::IQ4_XS => qb::IQ4_XS,
        Dtype::MXFP4 => qb::MXFP4,
        _ => return None,
    })
}

impl<R: Runtime> QuantOps for CubeBackend<R> {
    fn computes_quant(&self, dtype: Dtype) -> bool {
        kind_of(dtype).is_some()
    }

    fn dequantize(&self, w: &Tensor, out: &mut Tensor) -> Result<()> {
        dequant::dequantize(self, w, out)
    }

    fn quant_gemv(
        &self,
        w: &Tensor,
        bias: Option<&Tensor>,
        x: &Tensor,
        act: Act,
        y: &mut Tensor,
    ) -> Result<()> {
        gemv::quant_gemv(self, w, bias, x, act, y)
    }

    fn quant_gemm(
        &self,
        w: &Tensor,
        bias: Option<&Tensor>,
        x: &Tensor,
        act: Act,
        y: &mut Tensor,
    ) -> Result<()> {
        gemm::quant_gemm(self, w, bias, x, act, y)
    }
}
