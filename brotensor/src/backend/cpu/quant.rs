//! CPU glue of the quant category: the host decoder and the block-reading products of
//! `brotensor_cpu::quant` (FP32 activations and accumulation).

use brotensor_cpu::quant as q;
use half::{bf16, f16};

use super::concat::bytes;
use super::dtype_policy::{is_half, through_f32, Narrowed};
use super::CpuBackend;
use crate::backend::QuantOps;
use crate::ops::{Act, QUANT_WEIGHT_DTYPES};
use crate::{Dtype, Result, Tensor};

/// The block format of a weight the ops checked.
fn block(w: &Tensor) -> q::Block {
    w.dtype().block().expect("ops pass block-dtype weights")
}

impl QuantOps for CpuBackend {
    fn computes_quant(&self, dtype: Dtype) -> bool {
        QUANT_WEIGHT_DTYPES.contains(&dtype)
    }

    fn dequantize(&self, w: &Tensor, out: &mut Tensor) -> Result<()> {
        let (kind, src) = (block(w), bytes(w));
        match out.dtype() {
            Dtype::F16 => q::dequantize_to::<f16>(kind, src, out.host_mut()),
            Dtype::BF16 => q::dequantize_to::<bf16>(kind, src, out.host_mut()),
            _ => q::dequantize_to::<f32>(kind, src, out.host_mut()),
        }
        Ok(())
    }

    fn quant_gemv(
        &self,
        w: &Tensor,
        bias: Option<&Tensor>,
        x: &Tensor,
        act: Act,
        y: &mut Tensor,
    ) -> Result<()> {
        if is_half(x.dtype()) {
            // FP32 activations and accumulation; the weight blocks are read as they are.
            let inputs: Vec<&Tensor> = std::iter::once(x).chain(bias).collect();
            return through_f32(&inputs, &mut [Narrowed::written(y)], |i, o| {
                self.quant_gemv(w, i.get(1), &i[0], act, &mut o[0])
            });
        }
        let bias = bias.map(|b| b.host::<f32>());
        let (n, k) = w.shape();
        q::gemv(block(w), bytes(w), n, k, x.host(), bias, act, y.host_mut());
        Ok(())
    }

    fn quant_gemm(
        &self,
        w: &Tensor,
        bias: Option<&Tensor>,
        x: &Tensor,
        act: Act,
        y: &mut Tensor,
    ) -> Result<()> {
        if is_half(x.dtype()) {
            let inputs: Vec<&Tensor> = std::iter::once(x).chain(bias).collect();
            return through_f32(&inputs, &mut [Narrowed::written(y)], |i, o| {
                self.quant_gemm(w, i.get(1), &i[0], act, &mut o[0])
            });
        }
        let bias = bias.map(|b| b.host::<f32>());
        let (n, k) = w.shape();
        q::gemm(block(w), bytes(w), n, k, x.host(), bias, act, y.host_mut());
        Ok(())
    }
}
