//! GPU dequantization of every weight block type.

use brotensor_kernels::quant::dequant as kd;
use cubecl::prelude::*;
use half::{bf16, f16};

use super::super::{out_handle, with_float, CubeBackend};
use super::kind_of;
use crate::backend::ElementwiseOps;
use crate::{Dtype, Error, Result, Tensor};

/// `out` (F32, F16 or BF16, shaped like `w`): the blocks of `w` decoded; BF16 stored as
/// words is decoded to F32 and rounded to nearest even by the cast.
pub(super) fn dequantize<R: Runtime>(
    be: &CubeBackend<R>,
    w: &Tensor,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "dequantize";
    if be.words(out.dtype()) {
        let mut wide = Tensor::empty_on(be.device, out.rows(), out.cols(), Dtype::F32)?;
        dequantize(be, w, &mut wide)?;
        return be.cast(&wide, out);
    }
    let kind = kind_of(w.dtype()).ok_or(Error::UnsupportedDtype {
        op: OP,
        dtype: w.dtype(),
        device: be.device,
    })?;
    let blocks = w.numel() / w.dtype().block_size();
    let (wh, oh) = (out_handle(w), out_handle(out));
    with_float!(out.dtype(), |F| kd::launch_dequantize::<R, F>(
        &be.client, &wh, &oh, kind, blocks
    ))
    .map_err(|e| be.launch_error(OP, e))
}
