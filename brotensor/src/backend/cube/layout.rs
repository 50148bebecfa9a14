//! Layout glue: a view's elements gathered densely by the strided-gather kernel.

use brotensor_kernels::strided::{launch_strided_gather, GatherLayout};
use cubecl::prelude::*;

use super::{gpu, CubeBackend};
use crate::backend::Storage;
use crate::layout::Layout;
use crate::{Dtype, Error, Result};

/// [`crate::backend::Backend::strided_copy`] on device buffers.
pub(super) fn strided_copy<R: Runtime>(
    be: &CubeBackend<R>,
    op: &'static str,
    src: &Storage,
    layout: &Layout,
    dtype: Dtype,
    dst: &mut Storage,
) -> Result<()> {
    let width = crate::backend::gather_width(op, dtype)?;
    // Size-1 dims dropped and adjacent dims that step as one fused: fewer ranks, so fewer
    // JIT specialisations of the gather kernel (a dense block of any shape is rank 1).
    let (mut dims, mut strides) = brotensor_cpu::strided::simplify(layout.dims(), layout.strides());
    let mut offset = layout.offset();
    // 64- and 128-bit elements move as 2 or 4 32-bit words: one more dim, in words.
    if width > 4 {
        let words = width / 4;
        let too_large = || Error::invalid(op, "the layout's word indices overflow");
        for s in strides.iter_mut() {
            *s = s.checked_mul(words as isize).ok_or_else(too_large)?;
        }
        dims.push(words);
        strides.push(1);
        offset = offset.checked_mul(words).ok_or_else(too_large)?;
    }
    let gather = GatherLayout {
        dims: &dims,
        strides: &strides,
        offset,
    };
    launch_strided_gather(&be.client, gpu(src), gather, width.min(4), gpu(dst))
        .map_err(|e| be.launch_error(op, e))
}
