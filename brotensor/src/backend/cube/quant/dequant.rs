//! GPU dequantization of every weight block type.

use brotensor_kernels::quant::dequant as kd;
use cubecl::prelude::*;

use super::super::{float_launch, out_handle, CubeBackend};
use super::kind_of;
use crate::{Error, Result, Tensor};

/// `out` (F32, F16 or BF16, shaped like `w`): the blocks of `w` decoded; BF16 stored as
/// words is decoded to F32 and rounded to nearest even by the cast.
pub(super) fn dequantize<R: Runtime>(
    be: &CubeBackend<R>,
    w: &Tensor,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "dequantize";
    let kind = kind_of(w.dtype()).ok_or(Error::UnsupportedDtype {
        op: OP,
        dtype: w.dtype(),
        device: be.device,
    })?;
    let blocks = w.numel() / w.dtype().block_size();
    let (wh, oh) = (out_handle(w), out_handle(out));
    be.float_op(OP, out.dtype()).written(&mut [out]).run(
        |_, o| dequantize(be, w, &mut o[0]),
        float_launch!(|F| kd::launch_dequantize::<R, F>(&be.client, &wh, &oh, kind, blocks)),
    )
}
