//! The GPU prefill GEMM with quantized weights.

use brotensor_kernels::quant::gemm::{self as kg, QuantGemm};
use cubecl::prelude::*;
use half::{bf16, f16};

use super::super::{out_handle, with_float, CubeBackend, Narrowed};
use super::kind_of;
use crate::ops::Act;
use crate::{Dtype, Error, Result, Tensor};

/// `y (m, n) = act(x (m, k) . dequant(w)^T + bias)` for many rows (see
/// [`crate::backend::QuantOps::quant_gemm`]): the tiled kernel decodes weight blocks into
/// shared memory per tile. BF16 stored as words runs through F32 (the weight as it is).
pub(super) fn quant_gemm<R: Runtime>(
    be: &CubeBackend<R>,
    w: &Tensor,
    bias: Option<&Tensor>,
    x: &Tensor,
    act: Act,
    y: &mut Tensor,
) -> Result<()> {
    const OP: &str = "quant_gemm";
    if be.words(x.dtype()) {
        let inputs: Vec<&Tensor> = [x].into_iter().chain(bias).collect();
        return be.through_f32(&inputs, &mut [Narrowed::written(y)], |wide, out| {
            quant_gemm(be, w, wide.get(1), &wide[0], act, &mut out[0])
        });
    }
    let kind = kind_of(w.dtype()).ok_or(Error::UnsupportedDtype {
        op: OP,
        dtype: w.dtype(),
        device: be.device,
    })?;
    let spec = QuantGemm {
        kind,
        m: x.rows(),
        n: w.rows(),
        k_blocks: w.cols() / w.dtype().block_size(),
        act: act.code(),
    };
    let (wh, xh, yh) = (out_handle(w), out_handle(x), out_handle(y));
    let bh = bias.map(out_handle);
    with_float!(x.dtype(), |F| kg::launch_quant_gemm::<R, F>(
        &be.client,
        &wh,
        &xh,
        bh.as_ref(),
        &yh,
        spec
    ))
    .map_err(|e| be.launch_error(OP, e))
}
