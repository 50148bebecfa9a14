//! The GPU decode GEMV with quantized weights.

use brotensor_kernels::quant::gemv::{self as kg, QuantGemvSpec};
use cubecl::prelude::*;

use super::super::{float_launch, out_handle, CubeBackend};
use super::kind_of;
use crate::ops::Act;
use crate::{Error, Result, Tensor};

/// `y (m, n) = act(x (m, k) . dequant(w)^T + bias)` for `m <= 8` (see
/// [`crate::backend::QuantOps::quant_gemv`]); BF16 stored as words runs through F32 copies
/// of `x`, `bias` and `y` (the weight is read as blocks either way).
pub(super) fn quant_gemv<R: Runtime>(
    be: &CubeBackend<R>,
    w: &Tensor,
    bias: Option<&Tensor>,
    x: &Tensor,
    act: Act,
    y: &mut Tensor,
) -> Result<()> {
    const OP: &str = "quant_gemv";
    let kind = kind_of(w.dtype()).ok_or(Error::UnsupportedDtype {
        op: OP,
        dtype: w.dtype(),
        device: be.device,
    })?;
    let spec = QuantGemvSpec {
        m: x.rows(),
        n: w.rows(),
        k: w.cols(),
        kind,
        bias: bias.is_some(),
        act: act.code(),
    };
    let (wh, xh, yh) = (out_handle(w), out_handle(x), out_handle(y));
    let bh = bias.map(out_handle);
    let inputs: Vec<&Tensor> = [x].into_iter().chain(bias).collect();
    be.float_op(OP, x.dtype())
        .inputs(&inputs)
        .written(&mut [y])
        .run(
            |wide, o| quant_gemv(be, w, wide.get(1), &wide[0], act, &mut o[0]),
            float_launch!(|F| kg::launch_quant_gemv::<R, F>(
                &be.client,
                &wh,
                &xh,
                bh.as_ref(),
                &yh,
                spec
            )),
        )
}
