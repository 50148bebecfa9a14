//! Layout ops: materialising any view densely ([`copy_into`], the `_out` form of
//! [`Tensor::contiguous`]). The views themselves are methods of [`Tensor`] (see
//! `Tensor::permute`, `Tensor::slice`, `Tensor::broadcast_to`, ...).

use super::{declare, input, written};
use crate::{Error, Result, Tensor};

/// Writes `src`'s elements into `dst` densely in row-major order of `src.dims()` (the `_out`
/// form of [`Tensor::contiguous`]): `dst` is resized to `src`'s dims and dtype and keeps its
/// allocation when it fits. Works for every layout and dtype; block dtypes only as dense
/// tensors.
/// (C++ `copy_d2d` on one device.)
pub fn copy_into(src: &Tensor, dst: &mut Tensor) -> Result<()> {
    const OP: &str = "copy_into";
    let be = super::Dispatched::on(OP, declare(OP, &[input("src", src), written("dst", dst)])?)?;
    let layout = *src.layout();
    let base = src
        .base_storage()
        .ok_or_else(|| Error::invalid(OP, "`src` has no storage"))?;
    // `dst` may share storage with `src` only if it is `src` itself, which a `&mut` excludes.
    be.out("dst", dst, src.dims(), src.dtype())?;
    if src.numel() == 0 {
        return Ok(());
    }
    let out = dst
        .storage_mut()
        .expect("prepare_out made `dst` committed, dense and unshared");
    if layout.is_dense() {
        return be.copy(base, out, src.storage_bytes());
    }
    be.strided_copy(OP, base, &layout, src.dtype(), out)
}
