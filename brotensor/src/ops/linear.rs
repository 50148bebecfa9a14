//! Matrix products and linear layers (row-major, FP32 accumulation on every device).
//!
//! Shape contracts follow the C++ original: `matmul` is `C (M, N) = A (M, K) . B (K, N)`;
//! `linear_forward` is `y (out, 1) = W (out, in) . x (in, 1) + b (out, 1)`; the batched
//! forms are `Y (B, out) = X (B, in) . W^T + bias`. Parameter gradients (`dA`, `dB` of
//! `matmul_backward`, `dW`, `db`) accumulate into caller-sized tensors; input gradients
//! (`dx`) are overwritten.

use std::borrow::Cow;

use super::{check_float, dispatch, prepare_out};
use crate::backend::{Backend, Gemm};
use crate::{Error, Result, Tensor};

const NN: Gemm = Gemm {
    trans_a: false,
    trans_b: false,
    accumulate: false,
};

fn shape_error(op: &'static str, what: String) -> Error {
    Error::shape(op, what)
}

fn dims(t: &Tensor) -> String {
    format!("{}x{}", t.rows(), t.cols())
}

/// Checks that a caller-sized gradient has the shape it accumulates into.
fn check_sized(
    op: &'static str,
    name: &'static str,
    t: &Tensor,
    shape: (usize, usize),
    like: &Tensor,
) -> Result<()> {
    if !t.is_committed() || t.shape() != shape {
        return Err(shape_error(
            op,
            format!(
                "`{name}` must be pre-sized to {}x{} (it accumulates), got {}",
                shape.0,
                shape.1,
                if t.is_committed() {
                    dims(t)
                } else {
                    "an uncommitted tensor".into()
                }
            ),
        ));
    }
    if t.dtype() != like.dtype() {
        return Err(Error::Dtype {
            op,
            operand: name,
            expected: format!("must match the operands ({})", like.dtype()),
            found: t.dtype(),
        });
    }
    Ok(())
}

/// `c = a . b` (or `+=`) on a resolved backend, zeroing `c` for an empty inner dimension.
fn product(
    be: &dyn Backend,
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    c: &mut Tensor,
    g: Gemm,
) -> Result<()> {
    if c.numel() == 0 {
        return Ok(());
    }
    let k = if g.trans_a { a.rows() } else { a.cols() };
    if k == 0 {
        return if g.accumulate { Ok(()) } else { c.zero() };
    }
    be.gemm(op, a, b, c, g)
}

/// `C (M, N) = A (M, K) . B (K, N)`; `C` is resized to `A`'s dtype. `K == 0` gives zeros.
pub fn matmul(a: &Tensor, b: &Tensor, c: &mut Tensor) -> Result<()> {
    let op = "matmul";
    let be = dispatch(op, &[("a", a), ("b", b), ("c", c)])?;
    check_float(op, "a", a, be)?;
    if b.dtype() != a.dtype() {
        return Err(Error::Dtype {
            op,
            operand: "b",
            expected: format!("must match `a` ({})", a.dtype()),
            found: b.dtype(),
        });
    }
    if a.cols() != b.rows() {
        return Err(shape_error(
            op,
            format!(
                "`a` is {} and `b` is {}: inner dimensions differ",
                dims(a),
                dims(b)
            ),
        ));
    }
    prepare_out(c, be.device(), (a.rows(), b.cols()), a.dtype())?;
    product(be, op, a, b, c, NN)
}

/// `dA += dC . B^T` and `dB += A^T . dC` for `C = A . B`; `dA (M, K)` and `dB (K, N)` must
/// be pre-sized (they accumulate).
pub fn matmul_backward(
    a: &Tensor,
    b: &Tensor,
    dc: &Tensor,
    da: &mut Tensor,
    db: &mut Tensor,
) -> Result<()> {
    let op = "matmul_backward";
    let be = dispatch(
        op,
        &[("a", a), ("b", b), ("dc", dc), ("da", da), ("db", db)],
    )?;
    check_float(op, "a", a, be)?;
    let (m, k, n) = (a.rows(), a.cols(), b.cols());
    if b.rows() != k || dc.shape() != (m, n) {
        return Err(shape_error(
            op,
            format!(
                "`a` {}, `b` {}, `dc` {} do not chain",
                dims(a),
                dims(b),
                dims(dc)
            ),
        ));
    }
    for (name, t) in [("b", b), ("dc", dc)] {
        if t.dtype() != a.dtype() {
            return Err(Error::Dtype {
                op,
                operand: name,
                expected: format!("must match `a` ({})", a.dtype()),
                found: t.dtype(),
            });
        }
    }
    check_sized(op, "da", da, (m, k), a)?;
    check_sized(op, "db", db, (k, n), a)?;
    let acc = |trans_a, trans_b| Gemm {
        trans_a,
        trans_b,
        accumulate: true,
    };
    product(be, op, dc, b, da, acc(false, true))?;
    product(be, op, a, dc, db, acc(true, false))
}

/// `v` as an `(n, 1)` column: itself when it already is one, else a reshaped copy.
fn as_column(v: &Tensor) -> Result<Cow<'_, Tensor>> {
    if v.cols() == 1 {
        return Ok(Cow::Borrowed(v));
    }
    let mut c = v.try_clone()?;
    c.reshape(v.numel(), 1)?;
    Ok(Cow::Owned(c))
}

fn same_dtype(
    op: &'static str,
    like: (&'static str, &Tensor),
    others: &[(&'static str, &Tensor)],
) -> Result<()> {
    for (name, t) in others {
        if t.dtype() != like.1.dtype() {
            return Err(Error::Dtype {
                op,
                operand: name,
                expected: format!("must match `{}` ({})", like.0, like.1.dtype()),
                found: t.dtype(),
            });
        }
    }
    Ok(())
}

/// `t` in `dtype`: itself, or a converted copy.
fn in_dtype(t: &Tensor, dtype: crate::Dtype) -> Result<Cow<'_, Tensor>> {
    if t.dtype() == dtype {
        Ok(Cow::Borrowed(t))
    } else {
        Ok(Cow::Owned(t.to_dtype(dtype)?))
    }
}

/// `y (out, 1) = W (out, in) . x (in, 1) + b (out, 1)`; `y` is resized.
pub fn linear_forward(w: &Tensor, b: &Tensor, x: &Tensor, y: &mut Tensor) -> Result<()> {
    let op = "linear_forward";
    let be = dispatch(op, &[("w", w), ("b", b), ("x", x), ("y", y)])?;
    check_float(op, "w", w, be)?;
    if x.numel() != w.cols() || b.numel() != w.rows() {
        return Err(shape_error(
            op,
            format!(
                "`w` is {} so `x` needs {} and `b` {} elements, got {} and {}",
                dims(w),
                w.cols(),
                w.rows(),
                x.numel(),
                b.numel()
            ),
        ));
    }
    same_dtype(op, ("w", w), &[("b", b), ("x", x)])?;
    prepare_out(y, be.device(), (w.rows(), 1), w.dtype())?;
    product(be, op, w, &*as_column(x)?, y, NN)?;
    if y.numel() > 0 {
        be.broadcast_add(op, y, b, true)?;
    }
    Ok(())
}

/// `dx (in, 1) = W^T . dy` (overwritten), `dW += dy . x^T`, `db += dy` for
/// [`linear_forward`]; `dW (out, in)` and `db (out, 1)` must be pre-sized.
pub fn linear_backward(
    w: &Tensor,
    x: &Tensor,
    dy: &Tensor,
    dx: &mut Tensor,
    dw: &mut Tensor,
    db: &mut Tensor,
) -> Result<()> {
    let op = "linear_backward";
    let be = dispatch(
        op,
        &[
            ("w", w),
            ("x", x),
            ("dy", dy),
            ("dx", dx),
            ("dw", dw),
            ("db", db),
        ],
    )?;
    check_float(op, "w", w, be)?;
    if x.numel() != w.cols() || dy.numel() != w.rows() {
        return Err(shape_error(
            op,
            format!(
                "`w` is {} but `x` has {} and `dy` {} elements",
                dims(w),
                x.numel(),
                dy.numel()
            ),
        ));
    }
    same_dtype(op, ("w", w), &[("x", x), ("dy", dy)])?;
    check_sized(op, "dw", dw, w.shape(), w)?;
    check_sized(op, "db", db, (w.rows(), 1), w)?;
    let (x, dy) = (as_column(x)?, as_column(dy)?);
    prepare_out(dx, be.device(), (w.cols(), 1), w.dtype())?;
    product(
        be,
        op,
        w,
        &dy,
        dx,
        Gemm {
            trans_a: true,
            ..NN
        },
    )?;
    product(
        be,
        op,
        &dy,
        &x,
        dw,
        Gemm {
            trans_b: true,
            accumulate: true,
            ..NN
        },
    )?;
    super::add_inplace(db, &dy)
}

/// `Y (B, out) = X (B, in) . W^T + bias`, with `W (out, in)` and an optional `bias` of `out`
/// elements. `W` and `bias` may be any float dtype (they are converted to `X`'s); `Y` is
/// resized to `X`'s dtype.
pub fn linear_forward_batched(
    w: &Tensor,
    bias: Option<&Tensor>,
    x: &Tensor,
    y: &mut Tensor,
) -> Result<()> {
    let op = "linear_forward_batched";
    let none = Tensor::default();
    let be = dispatch(
        op,
        &[
            ("w", w),
            ("bias", bias.unwrap_or(&none)),
            ("x", x),
            ("y", y),
        ],
    )?;
    check_float(op, "x", x, be)?;
    for (name, t) in [("w", Some(w)), ("bias", bias)] {
        if let Some(t) = t.filter(|t| !t.dtype().is_float()) {
            return Err(Error::Dtype {
                op,
                operand: name,
                expected: "expected F32, F16 or BF16".into(),
                found: t.dtype(),
            });
        }
    }
    if x.cols() != w.cols() {
        return Err(shape_error(
            op,
            format!(
                "`x` is {} but `w` is {}: `x` needs {} columns",
                dims(x),
                dims(w),
                w.cols()
            ),
        ));
    }
    if let Some(b) = bias.filter(|b| b.numel() != w.rows()) {
        return Err(shape_error(
            op,
            format!(
                "`bias` has {} elements, `w` has {} rows",
                b.numel(),
                w.rows()
            ),
        ));
    }
    let w = in_dtype(w, x.dtype())?;
    prepare_out(y, be.device(), (x.rows(), w.rows()), x.dtype())?;
    product(
        be,
        op,
        x,
        &w,
        y,
        Gemm {
            trans_b: true,
            ..NN
        },
    )?;
    if let Some(b) = bias.filter(|_| y.numel() > 0) {
        be.broadcast_add(op, y, &*in_dtype(b, x.dtype())?, false)?;
    }
    Ok(())
}

/// `dX (B, in) = dY . W` (overwritten), `dW += dY^T . X`, `db += sum_b dY` for
/// [`linear_forward_batched`]; `dW (out, in)` and `db (out, 1)` must be pre-sized, and every
/// operand shares one float dtype.
pub fn linear_backward_batched(
    w: &Tensor,
    x: &Tensor,
    dy: &Tensor,
    dx: &mut Tensor,
    dw: &mut Tensor,
    db: &mut Tensor,
) -> Result<()> {
    let op = "linear_backward_batched";
    let be = dispatch(
        op,
        &[
            ("w", w),
            ("x", x),
            ("dy", dy),
            ("dx", dx),
            ("dw", dw),
            ("db", db),
        ],
    )?;
    check_float(op, "w", w, be)?;
    let (batch, out, inp) = (x.rows(), w.rows(), w.cols());
    if x.cols() != inp || dy.shape() != (batch, out) {
        return Err(shape_error(
            op,
            format!(
                "`w` {}, `x` {}, `dy` {} do not chain",
                dims(w),
                dims(x),
                dims(dy)
            ),
        ));
    }
    same_dtype(op, ("w", w), &[("x", x), ("dy", dy)])?;
    check_sized(op, "dw", dw, (out, inp), w)?;
    check_sized(op, "db", db, (out, 1), w)?;
    prepare_out(dx, be.device(), (batch, inp), w.dtype())?;
    product(be, op, dy, w, dx, NN)?;
    product(
        be,
        op,
        dy,
        x,
        dw,
        Gemm {
            trans_a: true,
            accumulate: true,
            ..NN
        },
    )?;
    let mut col_sums = Tensor::default();
    super::sum_cols(dy, &mut col_sums)?;
    col_sums.reshape(out, 1)?;
    super::add_inplace(db, &col_sums)
}
