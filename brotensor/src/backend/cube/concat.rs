//! GPU glue of the concat category.

use brotensor_kernels::concat::launch_copy_blocks;
use cubecl::prelude::*;

use super::{out_handle, CubeBackend};
use brotensor_kernels::concat::Blocks;

use crate::backend::ConcatOps;
use crate::{Error, Result, Tensor};

/// The element width the word kernels move (1, 2 or 4 bytes) and the factor that turns
/// element counts into counts of it: 64- and 128-bit elements move as 2 or 4 32-bit words.
pub(super) fn word_width(op: &'static str, t: &Tensor) -> Result<(usize, usize)> {
    match t.dtype().size_bytes() {
        Some(w @ (8 | 16)) => Ok((4, w / 4)),
        Some(w @ (1 | 2 | 4)) => Ok((w, 1)),
        _ => Err(Error::invalid(
            op,
            format!("{} has no element size", t.dtype()),
        )),
    }
}

/// `n * k`, checked.
pub(super) fn scaled(op: &'static str, n: usize, k: usize) -> Result<usize> {
    n.checked_mul(k)
        .ok_or_else(|| Error::invalid(op, "element offsets overflow"))
}

impl<R: Runtime> ConcatOps for CubeBackend<R> {
    fn copy_d2d_strided(&self, src: &Tensor, b: Blocks, dst: &mut Tensor) -> Result<()> {
        const OP: &str = "copy_d2d_strided";
        let (w, k) = word_width(OP, src)?;
        let words = Blocks {
            src_off: scaled(OP, b.src_off, k)?,
            src_pitch: scaled(OP, b.src_pitch, k)?,
            dst_off: scaled(OP, b.dst_off, k)?,
            dst_pitch: scaled(OP, b.dst_pitch, k)?,
            width: scaled(OP, b.width, k)?,
            height: b.height,
        };
        let (sh, dh) = (out_handle(src), out_handle(dst));
        launch_copy_blocks(&self.client, &sh, &dh, words, w).map_err(|e| self.launch_error(OP, e))
    }
}
