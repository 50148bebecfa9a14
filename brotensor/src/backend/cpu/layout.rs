//! Layout glue: a view's elements gathered densely by [`strided::gather`].

use brotensor_cpu::strided;

use super::{host, host_mut};
use crate::backend::Storage;
use crate::layout::Layout;
use crate::{Dtype, Error, Result};

/// [`crate::backend::Backend::strided_copy`] on host buffers.
pub(super) fn strided_copy(
    op: &'static str,
    src: &Storage,
    layout: &Layout,
    dtype: Dtype,
    dst: &mut Storage,
) -> Result<()> {
    let width = crate::backend::gather_width(op, dtype)?;
    let (dims, strides, offset) = (layout.dims(), layout.strides(), layout.offset());
    let (src, dst) = (host(src).bytes(), host_mut(dst).bytes_mut());
    let n = layout.numel();
    let inside = strided::span(dims, strides, offset)
        .is_none_or(|(lo, hi)| lo >= 0 && (hi as usize) < src.len() / width);
    if !inside || dst.len() / width < n {
        return Err(Error::invalid(op, "the layout reaches outside its storage"));
    }
    macro_rules! go {
        ($t:ty) => {
            strided::gather::<$t>(
                bytemuck::cast_slice(src),
                dims,
                strides,
                offset,
                &mut bytemuck::cast_slice_mut(dst)[..n],
            )
        };
    }
    match width {
        1 => go!(u8),
        2 => go!(u16),
        4 => go!(u32),
        8 => go!(u64),
        _ => go!([u64; 2]),
    }
    Ok(())
}
