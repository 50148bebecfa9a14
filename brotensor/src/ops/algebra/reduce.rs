//! Single-axis reductions with keepdims.

use super::super::{dispatch, input, written};
use crate::backend::ReduceOp;
use crate::{Dtype, Result, Tensor};

use super::*;

/// Defines a single-axis reduction with keepdims.
macro_rules! reductions {
    ($($doc:literal: $name:ident, $out:ident => $op:ident, [$($dtype:ident),*];)*) => {$(
        #[doc = concat!($doc, " over `axis`, keeping it with length 1 (dtypes: ", $(stringify!($dtype), " ",)* ").")]
        pub fn $name(x: &Tensor, axis: usize) -> Result<Tensor> {
            let mut out = Tensor::default();
            $out(x, axis, &mut out)?;
            Ok(out)
        }

        #[doc = concat!("[`", stringify!($name), "`] into `out` (resized; keeps its allocation when it fits).")]
        pub fn $out(x: &Tensor, axis: usize, out: &mut Tensor) -> Result<()> {
            reduce(stringify!($name), ReduceOp::$op, &[$(Dtype::$dtype),*], x, axis, out)
        }
    )*};
}

reductions! {
    "The sum (integers wrap)": reduce_sum, reduce_sum_out => Sum, [F32, F64, I64, C64, C128];
    "The product (integers wrap)": reduce_prod, reduce_prod_out => Prod, [F32, F64, I64, C64, C128];
    "The largest element, NaN if any is (-inf over an empty axis)": reduce_max, reduce_max_out => Max, [F32, F64];
    "The smallest element, NaN if any is (+inf over an empty axis)": reduce_min, reduce_min_out => Min, [F32, F64];
}

fn reduce(
    op: &'static str,
    rop: ReduceOp,
    allowed: &[Dtype],
    x: &Tensor,
    axis: usize,
    out: &mut Tensor,
) -> Result<()> {
    let be = dispatch(op, &[input("x", x), written("out", out)])?;
    check_dtype(op, "x", x, allowed, be)?;
    check_axis(op, axis, x.rank())?;
    let d = x.dims();
    let outer = crate::layout::dims_product(&d[..axis]);
    let inner = crate::layout::dims_product(&d[axis + 1..]);
    let n = d[axis];
    let mut dims = d.to_vec();
    dims[axis] = 1;
    be.out("out", out, &dims, x.dtype())?;
    if out.numel() == 0 {
        return Ok(());
    }
    if n == 0 {
        return fill_identity(rop, out);
    }
    be.reduce_axis(op, rop, x, (outer, n, inner), out)
}

/// Writes a reduction's identity into every element of `out` (the result over an empty
/// axis): 0, 1, -inf or +inf.
fn fill_identity(op: ReduceOp, out: &mut Tensor) -> Result<()> {
    let v = match op {
        ReduceOp::Sum => 0.0f64,
        ReduceOp::Prod => 1.0,
        ReduceOp::Max => f64::NEG_INFINITY,
        ReduceOp::Min => f64::INFINITY,
    };
    let n = out.numel();
    let dims = out.dims().to_vec();
    let device = out.device();
    let filled = match out.dtype() {
        Dtype::F32 => Tensor::from_slice_nd_on(device, &vec![v as f32; n], &dims)?,
        Dtype::F64 => Tensor::from_slice_nd_on(device, &vec![v; n], &dims)?,
        Dtype::I64 => Tensor::from_slice_nd_on(device, &vec![v as i64; n], &dims)?,
        Dtype::C64 => {
            Tensor::from_slice_nd_on(device, &vec![crate::Complex::new(v as f32, 0.0); n], &dims)?
        }
        _ => Tensor::from_slice_nd_on(device, &vec![crate::Complex::new(v, 0.0); n], &dims)?,
    };
    super::super::copy_into(&filled, out)
}
