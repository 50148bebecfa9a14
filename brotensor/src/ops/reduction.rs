//! Reductions over `x (rows, cols)`.
//!
//! Sums keep `x`'s dtype (FP32 partial sums inside); `argmax_rows` returns F32 values holding
//! the index (the C++ contract), `argmax_rows_i32` I32 indices; `top_k_rows` is F32 only; `rows_count_above` takes F32 or F16. Outputs are
//! resized and overwritten.

use super::{check_float, dispatch, input, written};
use crate::{Dtype, Error, Result, Tensor};

/// `y (rows, 1)`: `y[r] = sum_c x[r, c]` (an empty row sums to 0).
pub fn sum_rows(x: &Tensor, y: &mut Tensor) -> Result<()> {
    let be = dispatch("sum_rows", &[input("x", x).float(), written("y", y)])?;
    be.out("y", y, &[x.rows(), 1], x.dtype())?;
    if x.cols() == 0 {
        return y.zero();
    }
    if x.rows() == 0 {
        return Ok(());
    }
    be.sum_rows(x, y)
}

/// `y (1, cols)`: `y[c] = sum_r x[r, c]` (an empty column sums to 0).
pub fn sum_cols(x: &Tensor, y: &mut Tensor) -> Result<()> {
    let be = dispatch("sum_cols", &[input("x", x).float(), written("y", y)])?;
    be.out("y", y, &[1, x.cols()], x.dtype())?;
    if x.rows() == 0 {
        return y.zero();
    }
    if x.cols() == 0 {
        return Ok(());
    }
    be.sum_cols(x, y)
}

/// `idx (rows, 1)` F32 (the C++ contract: indices as floats): the first column holding each
/// row's maximum (NaN is never chosen; a row with nothing above `-f32::MAX` gives 0). See
/// [`argmax_rows_i32`] for integer indices.
pub fn argmax_rows(x: &Tensor, idx: &mut Tensor) -> Result<()> {
    argmax_rows_as("argmax_rows", x, idx, Dtype::F32)
}

/// [`argmax_rows`] with I32 indices.
pub fn argmax_rows_i32(x: &Tensor, idx: &mut Tensor) -> Result<()> {
    argmax_rows_as("argmax_rows_i32", x, idx, Dtype::I32)
}

fn argmax_rows_as(op: &'static str, x: &Tensor, idx: &mut Tensor, dtype: Dtype) -> Result<()> {
    let be = dispatch(op, &[input("x", x).float(), written("idx", idx)])?;
    be.out("idx", idx, &[x.rows(), 1], dtype)?;
    if x.cols() == 0 {
        return idx.zero();
    }
    if x.rows() == 0 {
        return Ok(());
    }
    be.argmax_rows(x, idx)
}

/// `vals (rows, k)` F32 and `idx (rows, k)` I32: each row's `k` largest values in descending
/// order, equal values by ascending column. `x` must be F32 and `1 <= k <= cols`.
pub fn top_k_rows(x: &Tensor, k: usize, vals: &mut Tensor, idx: &mut Tensor) -> Result<()> {
    let op = "top_k_rows";
    let be = dispatch(
        op,
        &[input("x", x), written("vals", vals), written("idx", idx)],
    )?;
    if x.dtype() != Dtype::F32 {
        return Err(Error::Dtype {
            op,
            operand: "x",
            expected: "expected F32".into(),
            found: x.dtype(),
        });
    }
    if k == 0 {
        return Err(Error::invalid(op, "k must be >= 1"));
    }
    if k > x.cols() {
        return Err(Error::invalid(
            op,
            format!("k = {k} must be <= C (per-row length {})", x.cols()),
        ));
    }
    be.out("vals", vals, &[x.rows(), k], Dtype::F32)?;
    be.out("idx", idx, &[x.rows(), k], Dtype::I32)?;
    if x.rows() == 0 {
        return Ok(());
    }
    be.top_k_rows(x, k, vals, idx)
}

/// `counts (rows, 2)` I32: `(#{x > t_lo}, #{x > t_hi})` per row (strict). `x` F32 or F16.
pub fn rows_count_above(x: &Tensor, t_lo: f32, t_hi: f32, counts: &mut Tensor) -> Result<()> {
    let op = "rows_count_above";
    let be = dispatch(op, &[input("x", x), written("counts", counts)])?;
    if !matches!(x.dtype(), Dtype::F32 | Dtype::F16) {
        return Err(Error::Dtype {
            op,
            operand: "x",
            expected: "X must be FP32 or FP16".into(),
            found: x.dtype(),
        });
    }
    if x.dtype() == Dtype::F16 && be.device().is_gpu() {
        check_float(op, "x", x, be)?;
    }
    be.out("counts", counts, &[x.rows(), 2], Dtype::I32)?;
    if x.cols() == 0 {
        return counts.zero();
    }
    if x.rows() == 0 {
        return Ok(());
    }
    be.rows_count_above(x, t_lo, t_hi, counts)
}
