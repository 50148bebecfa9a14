//! Tensor algebra (StableHLO semantics, row-major): element-wise maps of F32/F64 and of the
//! complex dtypes C64/C128, structural and indexing ops over N-d tensors, and single-axis
//! reductions with keepdims. Every op runs on every device; F64, I64 and C128 where
//! [`supports_dtype`](crate::supports_dtype) says the device has 64-bit types.
//!
//! Shape contracts: element-wise operands have identical dims (broadcast explicitly with
//! [`broadcast_in_dim`]); structural ops take any rank 0 to 8 and any layout (views are read
//! where they lie). `add`, `sub`, `mul`, `div`, `exp`, `log`, `sin`, `cos`, `tanh` and
//! `rsqrt` of [`crate::ops::elementwise`] take F64, C64 and C128 too, through the same
//! kernels (complex functions on numpy's principal branches).

use crate::layout::show_dims;
use crate::ops::Dispatched;
use crate::{Dtype, Error, Result, Tensor};

mod convert;
mod index;
mod map;
mod reduce;
mod shape;

pub use convert::*;
pub use index::*;
pub use map::*;
pub use reduce::*;
pub use shape::*;

/// The dtypes of the structural ops (whole elements of 4, 8 or 16 bytes), which
/// [`convert`] takes in any pair.
pub(crate) const CONVERTIBLE: [Dtype; 6] = STRUCTURAL;

/// The dtypes of the structural ops (whole elements of 4, 8 or 16 bytes).
const STRUCTURAL: [Dtype; 6] = [
    Dtype::F32,
    Dtype::F64,
    Dtype::I32,
    Dtype::I64,
    Dtype::C64,
    Dtype::C128,
];

/// Errors unless `t`'s dtype is one of `allowed` and the backend computes it.
fn check_dtype(
    op: &'static str,
    name: &'static str,
    t: &Tensor,
    allowed: &[Dtype],
    be: Dispatched,
) -> Result<()> {
    if !allowed.contains(&t.dtype()) {
        let list: Vec<String> = allowed.iter().map(|d| d.to_string()).collect();
        return Err(Error::Dtype {
            op,
            operand: name,
            expected: format!("expected one of {}", list.join(", ")),
            found: t.dtype(),
        });
    }
    if t.dtype() != Dtype::I32 && !be.supports(t.dtype()) {
        return Err(Error::UnsupportedDtype {
            op,
            dtype: t.dtype(),
            device: be.device(),
        });
    }
    Ok(())
}

/// Errors unless every operand has the first one's dims and dtype.
fn check_alike(op: &'static str, operands: &[(&'static str, &Tensor)]) -> Result<()> {
    let (first_name, first) = operands[0];
    for (name, t) in &operands[1..] {
        if t.dims() != first.dims() {
            return Err(Error::shape(
                op,
                format!(
                    "`{name}` is {} but `{first_name}` is {} (broadcast explicitly with broadcast_in_dim)",
                    show_dims(t.dims(), "x"),
                    show_dims(first.dims(), "x")
                ),
            ));
        }
        super::check_dtypes_match(op, (first_name, first), &[(name, t)])?;
    }
    Ok(())
}

/// A dense copy of the view `v` into a new tensor (never sharing `v`'s storage).
fn materialise(v: &Tensor) -> Result<Tensor> {
    let mut out = Tensor::default();
    super::copy_into(v, &mut out)?;
    Ok(out)
}

/// Errors unless `axis < rank`.
fn check_axis(op: &'static str, axis: usize, rank: usize) -> Result<()> {
    if axis >= rank {
        return Err(Error::shape(
            op,
            format!("axis {axis} is out of range for rank {rank}"),
        ));
    }
    Ok(())
}

/// Row-major strides of `dims`.
fn row_major(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1].saturating_mul(dims[d + 1]);
    }
    s
}
