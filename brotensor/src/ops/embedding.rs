//! The embedding ops: embedding lookups and row gathers/scatters.
//!
//! Matrices are the `(rows, cols)` views of their tensors (leading dims folded into rows).
//! Ids are an I32 tensor of any shape holding `m` ids (the C++ `(M, 1)` index tensor, or
//! a pointer and a count). Every id must lie in `[0, rows)` of the table it indexes: other
//! ids are an `Error` before anything is written. On the CPU the ids are checked on the
//! host; on a GPU a small kernel counts the bad ids on the device and the op reads back 4
//! bytes per 1 Mi ids, which waits for the work queued before it. The kernels guard every
//! index as well.
//!
//! Gathers and scatters copy bits, so they take every dtype with an element size; the
//! accumulating scatters (`scatter_rows_add`, `embedding_lookup_backward`) take a float the
//! device computes in and add in FP32.

use super::{check_dtypes_match, dispatch, input, updated, written};
use crate::ops::Dispatched;
use crate::{Dtype, Error, Result, Tensor};

/// `y (m, x.cols)`: `y[i, :] = x[ids[i], :]` (C++ `embedding_lookup_forward` with
/// `table = x`). `x (rows, cols)` of any dtype with an element size; `ids` I32, each in
/// `[0, rows)`. `y` is resized and takes `x`'s dtype.
pub fn embedding_lookup_forward(table: &Tensor, ids: &Tensor, out: &mut Tensor) -> Result<()> {
    gather(
        "embedding_lookup_forward",
        ("table", table),
        ids,
        ("out", out),
    )
}

/// `y (m, x.cols)`: `y[i, :] = x[idx[i], :]`, the general row gather (the same compute as
/// [`embedding_lookup_forward`]). `x (rows, cols)` of any dtype with an element size; `idx`
/// I32 (`(m, 1)` or any shape of `m` ids), each in `[0, rows)`. `y` is resized and takes
/// `x`'s dtype.
pub fn gather_rows(x: &Tensor, idx: &Tensor, y: &mut Tensor) -> Result<()> {
    gather("gather_rows", ("x", x), idx, ("y", y))
}

fn gather(
    op: &'static str,
    (name, x): (&'static str, &Tensor),
    ids: &Tensor,
    (out_name, y): (&'static str, &mut Tensor),
) -> Result<()> {
    let be = dispatch(
        op,
        &[input(name, x), input("ids", ids), written(out_name, y)],
    )?;
    check_sized(op, name, x)?;
    check_ids(op, be, ids, x.rows())?;
    be.out(out_name, y, &[ids.numel(), x.cols()], x.dtype())?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.gather_rows(x, ids, y)
}

/// `d_table[ids[i], :] += d_out[i, :]`: the table gradient of [`embedding_lookup_forward`],
/// accumulated (a parameter gradient: the caller zeros it); repeated ids add up, in FP32.
/// `d_out (m, cols)` and `d_table (rows, cols)` share a float dtype; `d_table` is written
/// in place and never resized; each id in `[0, rows)`.
pub fn embedding_lookup_backward(d_out: &Tensor, ids: &Tensor, d_table: &mut Tensor) -> Result<()> {
    const OP: &str = "embedding_lookup_backward";
    let be = dispatch(
        OP,
        &[
            updated("d_table", d_table),
            input("d_out", d_out).float(),
            input("ids", ids),
        ],
    )?;
    check_dtypes_match(OP, ("d_out", d_out), &[("d_table", d_table)])?;
    check_rows_of(OP, ("d_out", d_out), ids, d_table)?;
    check_ids(OP, be, ids, d_table.rows())?;
    if d_out.numel() == 0 || d_table.numel() == 0 {
        return Ok(());
    }
    be.scatter_rows_add(d_out, ids, d_table)
}

/// `dx (rows, cols)`: zeroed, then `dx[idx[i], :] += dy[i, :]` (the adjoint of
/// [`gather_rows`]; an input gradient, overwritten); repeated ids add up, in FP32. `dy
/// (m, cols)` a float; `idx` I32 with `m` ids, each in `[0, rows)`; `rows` is the gathered
/// tensor's row count. `dx` is resized and takes `dy`'s dtype.
pub fn scatter_rows_add(dy: &Tensor, idx: &Tensor, rows: usize, dx: &mut Tensor) -> Result<()> {
    const OP: &str = "scatter_rows_add";
    let be = dispatch(
        OP,
        &[
            input("dy", dy).float(),
            input("idx", idx),
            written("dx", dx),
        ],
    )?;
    if dy.rows() != idx.numel() {
        return Err(Error::shape(
            OP,
            format!(
                "`dy` has {} rows but `idx` holds {} ids",
                dy.rows(),
                idx.numel()
            ),
        ));
    }
    check_ids(OP, be, idx, rows)?;
    be.out("dx", dx, &[rows, dy.cols()], dy.dtype())?;
    dx.zero()?;
    if dy.numel() == 0 || dx.numel() == 0 {
        return Ok(());
    }
    be.scatter_rows_add(dy, idx, dx)
}

/// `x[idx[i], :] = y[i, :]` in place; the other rows of `x` keep their contents (the
/// KV-cache append at a device-side index). `y (m, cols)` and `x (rows, cols)` share a
/// dtype with an element size; `x` is never resized; `idx` I32 with `m` ids, each in
/// `[0, rows)`. Repeated ids leave one of their rows (which one is not defined): pass unique
/// ids.
pub fn scatter_rows(y: &Tensor, idx: &Tensor, x: &mut Tensor) -> Result<()> {
    const OP: &str = "scatter_rows";
    let be = dispatch(OP, &[updated("x", x), input("y", y), input("idx", idx)])?;
    check_sized(OP, "y", y)?;
    check_dtypes_match(OP, ("y", y), &[("x", x)])?;
    check_rows_of(OP, ("y", y), idx, x)?;
    check_ids(OP, be, idx, x.rows())?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.scatter_rows(y, idx, x)
}

/// Checks that `src (m, cols)` has one row per id and `dst`'s width.
fn check_rows_of(
    op: &'static str,
    (name, src): (&'static str, &Tensor),
    ids: &Tensor,
    dst: &Tensor,
) -> Result<()> {
    if src.rows() != ids.numel() || src.cols() != dst.cols() {
        return Err(Error::shape(
            op,
            format!(
                "`{name}` is {:?} but must be {}x{} (one row per id, as wide as the table)",
                src.dims(),
                ids.numel(),
                dst.cols()
            ),
        ));
    }
    Ok(())
}

/// Checks that `t`'s dtype has an element size (rows are copied as bits).
pub(crate) fn check_sized(op: &'static str, name: &'static str, t: &Tensor) -> Result<()> {
    if t.dtype().size_bytes().is_none() {
        return Err(Error::Dtype {
            op,
            operand: name,
            expected: "expected a dtype with an element size (not a block dtype)".into(),
            found: t.dtype(),
        });
    }
    Ok(())
}

/// Checks that `ids` is I32 and every id lies in `[0, rows)` (on the ids' device).
fn check_ids(op: &'static str, be: Dispatched, ids: &Tensor, rows: usize) -> Result<()> {
    if ids.dtype() != Dtype::I32 {
        return Err(Error::Dtype {
            op,
            operand: "ids",
            expected: "expected I32 ids".into(),
            found: ids.dtype(),
        });
    }
    if ids.numel() == 0 {
        return Ok(());
    }
    match be.count_bad_ids(op, ids, rows)? {
        0 => Ok(()),
        bad => Err(Error::invalid(
            op,
            format!(
                "{bad} of the {} ids lie outside [0, {rows}) (the table's rows)",
                ids.numel()
            ),
        )),
    }
}
