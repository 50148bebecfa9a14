//! The concat category: row and channel concatenation, splits and strided device copies.

use brotensor_kernels::concat::Blocks;

use super::{missing, OnDevice};
use crate::{Result, Tensor};

/// Backend methods of the concat category (each with a default body returning
/// `Error::NotImplemented` through [`super::missing`]). Callers (the public functions in
/// `crate::ops`) validate shapes, dtypes and devices first. Every op of the category is a
/// block copy.
pub(crate) trait ConcatOps: OnDevice {
    /// The block copy `blocks` (in elements of the common dtype, which has a size) from
    /// `src` into `dst`, bits unchanged; the rest of `dst` untouched. Callers checked that
    /// both sides lie inside their tensors and that the pitches are at least the width.
    fn copy_d2d_strided(&self, _src: &Tensor, _blocks: Blocks, _dst: &mut Tensor) -> Result<()> {
        Err(missing("copy_d2d_strided", self))
    }
}
