//! The GPU prefill GEMM with quantized weights.

use brotensor_kernels::quant::gemm::{self as kg, QuantGemm};
use cubecl::prelude::*;

use super::super::{float_launch, out_handle, CubeBackend};
use super::kind_of;
use crate::ops::Act;
use crate::{Error, Result, Tensor};

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
    let inputs: Vec<&Tensor> = [x].into_iter().chain(bias).collect();
    be.float_op(OP, x.dtype())
        .inputs(&inputs)
        .written(&mut [y])
        .run(
            |wide, o| quant_gemm(be, w, wide.get(1), &wide[0], act, &mut o[0]),
            float_launch!(|F| kg::launch_quant_gemm::<R, F>(
                &be.client,
                &wh,
                &xh,
                bh.as_ref(),
                &yh,
                spec
            )),
        )
}
