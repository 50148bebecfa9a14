//! Matrix products and linear layers (row-major, FP32 accumulation on every device).
//!
//! Shape contracts follow the C++ original: `matmul` is `C (M, N) = A (M, K) . B (K, N)`;
//! `linear_forward` is `y (out, 1) = W (out, in) . x (in, 1) + b (out, 1)`; the batched
//! forms are `Y (B, out) = X (B, in) . W^T + bias`. Parameter gradients (`dA`, `dB` of
//! `matmul_backward`, `dW`, `db`) accumulate into caller-sized tensors; input gradients
//! (`dx`) are overwritten.

use crate::ops::Dispatched;
use std::borrow::Cow;

use super::{check_dtypes_match, checked_product, dispatch, input, input_opt, updated, written};
use crate::backend::{Broadcast, Gemm};
use crate::{Error, Result, Tensor};

/// A plain product; `product` fills in the dimensions from the operands.
pub(super) const NN: Gemm = Gemm {
    m: 0,
    n: 0,
    k: 0,
    trans_a: false,
    trans_b: false,
    accumulate: false,
    batch: 1,
    strides: (0, 0, 0),
    act: Act::None,
};

pub(super) fn shape_error(op: &'static str, what: String) -> Error {
    Error::shape(op, what)
}

pub(super) fn dims(t: &Tensor) -> String {
    format!("{:?}", t.dims())
}

/// Checks that a caller-sized gradient has the shape it accumulates into.
fn check_sized(
    op: &'static str,
    name: &'static str,
    t: &Tensor,
    shape: (usize, usize),
    like: &Tensor,
) -> Result<()> {
    super::check_on_device(op, name, t, like.device())?;
    t.check_writable(op, name)?;
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
    be: Dispatched,
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    c: &mut Tensor,
    g: Gemm,
) -> Result<()> {
    c.check_writable(op, "c")?;
    if c.numel() == 0 {
        return Ok(());
    }
    let (m, k) = if g.trans_a {
        (a.cols(), a.rows())
    } else {
        a.shape()
    };
    if k == 0 {
        return if g.accumulate { Ok(()) } else { c.zero() };
    }
    let n = c.cols();
    let g = Gemm {
        m,
        n,
        k,
        strides: (m * k, k * n, m * n),
        ..g
    };
    be.gemm(op, a, b, None, c, g)
}

/// `c += a^T b` for `a (K, M)`, `b (K, N)` and a sized `c (M, N)` (views are made dense
/// first), on a resolved backend.
pub(super) fn gemm_accumulate_at_b(
    be: Dispatched,
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    c: &mut Tensor,
) -> Result<()> {
    let (a, b) = (a.contiguous()?, b.contiguous()?);
    product(
        be,
        op,
        &a,
        &b,
        c,
        Gemm {
            trans_a: true,
            accumulate: true,
            ..NN
        },
    )
}

/// `C (M, N) = A (M, K) . B (K, N)`; `C` is resized to `A`'s dtype. `K == 0` gives zeros.
pub fn matmul(a: &Tensor, b: &Tensor, c: &mut Tensor) -> Result<()> {
    let op = "matmul";
    let be = dispatch(op, &[input("a", a).float(), input("b", b), written("c", c)])?;
    check_dtypes_match(op, ("a", a), &[("b", b)])?;
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
    be.out("c", c, &[a.rows(), b.cols()], a.dtype())?;
    product(be, op, a, b, c, NN)
}

/// `A (.., M, K) . B (.., K, N)` with numpy's broadcasting of the batch dims (the dims before
/// the last two; missing ones count as 1): the product behind [`Tensor::matmul`] when `B`
/// has batch dims. One batched GEMM: an operand whose batch dims are all 1 is shared by every
/// batch entry (stride 0), one with the full batch is read in place, and only an operand
/// broadcast along some batch dims but not others is copied out first. The result has the
/// broadcast batch dims, then `(M, N)`, in `A`'s dtype.
pub(crate) fn matmul_broadcast(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let op = "matmul";
    let be = dispatch(op, &[input("a", a).float(), input("b", b)])?;
    check_dtypes_match(op, ("a", a), &[("b", b)])?;
    let (ad, bd) = (a.dims(), b.dims());
    if ad.len() < 2 || bd.len() < 2 {
        return Err(shape_error(
            op,
            format!("`a` is {ad:?} and `b` is {bd:?}: both need rank 2 or more"),
        ));
    }
    let (m, k) = (ad[ad.len() - 2], ad[ad.len() - 1]);
    let (kb, n) = (bd[bd.len() - 2], bd[bd.len() - 1]);
    if k != kb {
        return Err(shape_error(
            op,
            format!("`a` is {ad:?} and `b` is {bd:?}: inner dimensions differ ({k} vs {kb})"),
        ));
    }
    let batch_dims = crate::layout::broadcast_dims(op, &ad[..ad.len() - 2], &bd[..bd.len() - 2])
        .map_err(|_| {
            shape_error(
                op,
                format!("`a` is {ad:?} and `b` is {bd:?}: their batch dims do not broadcast"),
            )
        })?;
    let batch = checked_product(op, "the batch dims", &batch_dims)?;
    let mn = checked_product(op, "M * N", &[m, n])?;
    let mut out_dims = batch_dims.clone();
    out_dims.extend([m, n]);
    let mut c = Tensor::default();
    be.out("c", &mut c, &out_dims, a.dtype())?;
    if c.numel() == 0 {
        return Ok(c);
    }
    if k == 0 {
        c.zero()?;
        return Ok(c);
    }
    let (a_in, stride_a) = batch_operand(op, a, &batch_dims)?;
    let (b_in, stride_b) = batch_operand(op, b, &batch_dims)?;
    let g = Gemm {
        m,
        n,
        k,
        batch,
        strides: (stride_a, stride_b, mn),
        ..NN
    };
    be.gemm(op, &a_in, &b_in, None, &mut c, g)?;
    Ok(c)
}

/// One operand of [`matmul_broadcast`] and its batch stride: itself with stride 0 when its
/// batch dims are all 1 (shared), itself with its matrix size when they are the full
/// `batch_dims`, else a dense copy broadcast to them.
fn batch_operand<'t>(
    op: &'static str,
    t: &'t Tensor,
    batch_dims: &[usize],
) -> Result<(Cow<'t, Tensor>, usize)> {
    let dims = t.dims();
    let (own, matrix) = dims.split_at(dims.len() - 2);
    let size = checked_product(op, "a matrix's size", matrix)?;
    if own.iter().all(|&d| d == 1) {
        return Ok((Cow::Borrowed(t), 0));
    }
    let padded_len = batch_dims.len() - own.len();
    if batch_dims[..padded_len].iter().all(|&d| d == 1) && &batch_dims[padded_len..] == own {
        return Ok((Cow::Borrowed(t), size));
    }
    let mut full = batch_dims.to_vec();
    full.extend_from_slice(matrix);
    Ok((Cow::Owned(t.broadcast_to(&full)?.contiguous()?), size))
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
        &[
            input("a", a).float(),
            input("b", b),
            input("dc", dc),
            updated("da", da),
            updated("db", db),
        ],
    )?;
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
    check_dtypes_match(op, ("a", a), &[("b", b), ("dc", dc)])?;
    check_sized(op, "da", da, (m, k), a)?;
    check_sized(op, "db", db, (k, n), a)?;
    let acc = |trans_a, trans_b| Gemm {
        trans_a,
        trans_b,
        accumulate: true,
        ..NN
    };
    product(be, op, dc, b, da, acc(false, true))?;
    product(be, op, a, dc, db, acc(true, false))
}

/// `v` as an `(n, 1)` column, borrowed.
fn as_column(v: &Tensor) -> Result<Tensor> {
    v.reshaped(v.numel(), 1)
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
    let be = dispatch(
        op,
        &[
            input("w", w).float(),
            input("b", b),
            input("x", x),
            written("y", y),
        ],
    )?;
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
    check_dtypes_match(op, ("w", w), &[("b", b), ("x", x)])?;
    be.out("y", y, &[w.rows(), 1], w.dtype())?;
    product(be, op, w, &as_column(x)?, y, NN)?;
    if y.numel() > 0 {
        be.broadcast(
            op,
            y,
            b,
            Broadcast {
                inner: 1,
                v_len: b.numel(),
                per_row: true,
                repeat: usize::MAX,
                multiply: false,
            },
        )?;
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
            input("w", w).float(),
            input("x", x),
            input("dy", dy),
            written("dx", dx),
            updated("dw", dw),
            written("db", db),
        ],
    )?;
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
    check_dtypes_match(op, ("w", w), &[("x", x), ("dy", dy)])?;
    check_sized(op, "dw", dw, w.shape(), w)?;
    check_sized(op, "db", db, (w.rows(), 1), w)?;
    let (x, dy) = (as_column(x)?, as_column(dy)?);
    be.out("dx", dx, &[w.cols(), 1], w.dtype())?;
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
    let be = dispatch(
        op,
        &[
            input("w", w),
            input_opt("bias", bias),
            input("x", x).float(),
            written("y", y),
        ],
    )?;
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
    be.out("y", y, &[x.rows(), w.rows()], x.dtype())?;
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
        let b = in_dtype(b, x.dtype())?;
        be.broadcast(
            op,
            y,
            &b,
            Broadcast {
                inner: y.cols(),
                v_len: b.numel(),
                per_row: false,
                repeat: usize::MAX,
                multiply: false,
            },
        )?;
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
            input("w", w).float(),
            input("x", x),
            input("dy", dy),
            written("dx", dx),
            updated("dw", dw),
            written("db", db),
        ],
    )?;
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
    check_dtypes_match(op, ("w", w), &[("x", x), ("dy", dy)])?;
    check_sized(op, "dw", dw, (out, inp), w)?;
    check_sized(op, "db", db, (out, 1), w)?;
    be.out("dx", dx, &[batch, inp], w.dtype())?;
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
    col_sums.reshape_(&[out, 1])?;
    super::add_inplace(db, &col_sums)
}

// The epilogue activation is defined beside the CPU GEMM that applies it, so that the
// backends share the one enum.
pub use brotensor_cpu::linear::Act;

/// The shape of a batched `A . B^T` product ([`matmul_abt`]): `batch` products of
/// `A[z] (m, k)` and `B[z] (n, k)` into `C[z] (m, n)`, entries `stride_*` elements apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbtSpec {
    /// Independent products.
    pub batch: usize,
    /// Rows of `A[z]` and `C[z]`.
    pub m: usize,
    /// Rows of `B[z]`, columns of `C[z]`.
    pub n: usize,
    /// The shared inner dimension.
    pub k: usize,
    /// Elements between consecutive `A[z]`.
    pub stride_a: usize,
    /// Elements between consecutive `B[z]`.
    pub stride_b: usize,
    /// Elements between consecutive `C[z]`.
    pub stride_c: usize,
}

pub(super) fn check_16bit(
    op: &'static str,
    name: &'static str,
    t: &Tensor,
    like: Option<&Tensor>,
) -> Result<()> {
    let ok = match like {
        Some(l) => t.dtype() == l.dtype(),
        None => matches!(t.dtype(), crate::Dtype::F16 | crate::Dtype::BF16),
    };
    if !ok {
        return Err(Error::Dtype {
            op,
            operand: name,
            expected: match like {
                Some(l) => format!("must match `a` ({})", l.dtype()),
                None => "must be F16 or BF16".into(),
            },
            found: t.dtype(),
        });
    }
    Ok(())
}

/// Runs a 16-bit product on any device: the CPU reference computes it in F32 on widened
/// copies and narrows the result into `c` (its allocation is kept).
pub(super) fn product_16bit(
    be: Dispatched,
    op: &'static str,
    (a, b, bias): (&Tensor, &Tensor, Option<&Tensor>),
    c: &mut Tensor,
    g: Gemm,
) -> Result<()> {
    c.check_writable(op, "c")?;
    if be.supports(a.dtype()) {
        return be.gemm(op, a, b, bias, c, g);
    }
    let f32_of = |t: &Tensor| t.to_dtype(crate::Dtype::F32);
    let wide_bias = bias.map(f32_of).transpose()?;
    // All of `c` is widened: strided batches may leave parts of it unwritten, and those
    // must come back unchanged.
    let mut wide_c = f32_of(c)?;
    be.gemm(
        op,
        &f32_of(a)?,
        &f32_of(b)?,
        wide_bias.as_ref(),
        &mut wide_c,
        g,
    )?;
    super::cast(&wide_c, c, a.dtype())
}

/// `C[z] = act(A[z] . B[z]^T + bias)` for `z < batch` (C++ `matmul_abt`): F16 or BF16
/// operands, FP32 accumulation. `C` is not resized: the caller sizes it, and every tensor
/// must hold the elements its strides reach. `bias` has `n` elements.
pub fn matmul_abt(
    a: &Tensor,
    b: &Tensor,
    c: &mut Tensor,
    spec: AbtSpec,
    bias: Option<&Tensor>,
    act: Act,
) -> Result<()> {
    let op = "matmul_abt";
    let be = dispatch(
        op,
        &[
            input("a", a),
            input("b", b),
            written("c", c),
            input_opt("bias", bias),
        ],
    )?;
    check_16bit(op, "a", a, None)?;
    check_16bit(op, "b", b, Some(a))?;
    check_16bit(op, "c", c, Some(a))?;
    if let Some(bias) = bias {
        check_16bit(op, "bias", bias, Some(a))?;
        if bias.numel() != spec.n {
            return Err(shape_error(
                op,
                format!("`bias` has {} elements, n = {}", bias.numel(), spec.n),
            ));
        }
    }
    let AbtSpec {
        batch,
        m,
        n,
        k,
        stride_a,
        stride_b,
        stride_c,
    } = spec;
    let (mk, nk, mn) = (
        checked_product(op, "m * k", &[m, k])?,
        checked_product(op, "n * k", &[n, k])?,
        checked_product(op, "m * n", &[m, n])?,
    );
    if batch == 0 || mn == 0 {
        return Ok(());
    }
    if batch > 1 && stride_c < mn {
        return Err(shape_error(
            op,
            format!("stride_c {stride_c} < m * n = {mn}: the {batch} outputs C[z] would overlap"),
        ));
    }
    let reach = |stride: usize, one: usize| {
        stride
            .checked_mul(batch - 1)
            .and_then(|s| s.checked_add(one))
            .ok_or_else(|| shape_error(op, format!("batch {batch} x stride {stride} overflows")))
    };
    for (name, t, need) in [
        ("a", a, reach(stride_a, mk)?),
        ("b", b, reach(stride_b, nk)?),
        ("c", &*c, reach(stride_c, mn)?),
    ] {
        if t.numel() < need {
            return Err(shape_error(
                op,
                format!(
                    "`{name}` holds {} elements, the batch reaches {need}",
                    t.numel()
                ),
            ));
        }
    }
    if k == 0 {
        // No products: C = act(bias) (or act(0)); run with a zero inner dimension is not a
        // kernel case, so express it as a product with one zero column.
        let zeros_a = Tensor::zeros_on(be.device(), m, 1, a.dtype())?;
        let zeros_b = Tensor::zeros_on(be.device(), n, 1, a.dtype())?;
        let g = Gemm {
            m,
            n,
            k: 1,
            trans_b: true,
            batch,
            strides: (0, 0, stride_c),
            act,
            ..NN
        };
        return product_16bit(be, op, (&zeros_a, &zeros_b, bias), c, g);
    }
    let g = Gemm {
        m,
        n,
        k,
        trans_b: true,
        batch,
        strides: (stride_a, stride_b, stride_c),
        act,
        ..NN
    };
    product_16bit(be, op, (a, b, bias), c, g)
}

/// `Y (B, out) = act(X (B, in) . W^T + bias)` with every operand F16 or BF16 in one dtype
/// (C++ `linear_forward_batched_fp16` / `_act`); FP32 accumulation; `Y` is resized.
pub fn linear_forward_batched_fp16_act(
    w: &Tensor,
    bias: Option<&Tensor>,
    x: &Tensor,
    y: &mut Tensor,
    act: Act,
) -> Result<()> {
    let op = "linear_forward_batched_fp16";
    let be = dispatch(
        op,
        &[
            input("w", w),
            input_opt("bias", bias),
            input("x", x),
            written("y", y),
        ],
    )?;
    check_16bit(op, "w", w, None)?;
    check_16bit(op, "x", x, Some(w))?;
    if let Some(b) = bias {
        check_16bit(op, "bias", b, Some(w))?;
        if b.numel() != w.rows() {
            return Err(shape_error(
                op,
                format!(
                    "`bias` has {} elements, `w` has {} rows",
                    b.numel(),
                    w.rows()
                ),
            ));
        }
    }
    if x.cols() != w.cols() {
        return Err(shape_error(
            op,
            format!("`x` is {} but `w` is {}", dims(x), dims(w)),
        ));
    }
    let (batch, out, inp) = (x.rows(), w.rows(), w.cols());
    be.out("y", y, &[batch, out], x.dtype())?;
    if y.numel() == 0 {
        return Ok(());
    }
    if inp == 0 {
        let spec = AbtSpec {
            batch: 1,
            m: batch,
            n: out,
            k: 0,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
        };
        return matmul_abt(x, w, y, spec, bias, act);
    }
    let g = Gemm {
        m: batch,
        n: out,
        k: inp,
        trans_b: true,
        strides: (0, 0, 0),
        act,
        ..NN
    };
    product_16bit(be, op, (x, w, bias), y, g)
}

/// [`linear_forward_batched_fp16_act`] without an activation.
pub fn linear_forward_batched_fp16(
    w: &Tensor,
    bias: Option<&Tensor>,
    x: &Tensor,
    y: &mut Tensor,
) -> Result<()> {
    linear_forward_batched_fp16_act(w, bias, x, y, Act::None)
}
