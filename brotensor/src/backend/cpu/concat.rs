//! CPU glue of the concat category.

use brotensor_cpu::concat as cat;

use super::{host, host_mut, CpuBackend};
use brotensor_kernels::concat::Blocks;

use crate::backend::ConcatOps;
use crate::{Result, Tensor};

/// Calls `$body` with `$T` bound to a plain type of `$width` bytes (1, 2, 4, 8 or 16; the
/// 16-byte C128 as two u64): elements moved as bits.
macro_rules! by_width {
    ($width:expr, |$T:ident| $body:expr) => {
        match $width {
            1 => {
                type $T = u8;
                $body
            }
            2 => {
                type $T = u16;
                $body
            }
            4 => {
                type $T = u32;
                $body
            }
            8 => {
                type $T = u64;
                $body
            }
            _ => {
                type $T = [u64; 2];
                $body
            }
        }
    };
}
pub(super) use by_width;

/// The dense bytes of a committed CPU tensor.
pub(super) fn bytes(t: &Tensor) -> &[u8] {
    let storage = t.storage().expect("ops pass committed operands");
    &host(storage).bytes()[..t.storage_bytes()]
}

/// The dense bytes of a committed, writable CPU tensor.
pub(super) fn bytes_mut(t: &mut Tensor) -> &mut [u8] {
    let n = t.storage_bytes();
    let storage = t.storage_mut().expect("ops pass writable outputs");
    &mut host_mut(storage).bytes_mut()[..n]
}

/// The element width of a tensor's dtype (callers checked it has one).
pub(super) fn width(t: &Tensor) -> usize {
    t.dtype().size_bytes().expect("ops check for a sized dtype")
}

impl ConcatOps for CpuBackend {
    fn copy_d2d_strided(&self, src: &Tensor, b: Blocks, dst: &mut Tensor) -> Result<()> {
        let w = width(src);
        let s = bytes(src);
        by_width!(w, |T| cat::copy_blocks::<T>(
            bytemuck::cast_slice(s),
            (b.src_off, b.src_pitch),
            bytemuck::cast_slice_mut(bytes_mut(dst)),
            (b.dst_off, b.dst_pitch),
            (b.width, b.height),
        ));
        Ok(())
    }
}
