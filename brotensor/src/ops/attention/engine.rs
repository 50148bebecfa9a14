//! The attention engine every op of the category composes: validation, head split and
//! merge (permuted views copied densely), the per-head batched products, the masked
//! softmax, and the backward pass through them.

use crate::ops::{input, input_opt, Dispatched, Operand};
use std::borrow::Cow;

use super::super::{
    add_inplace, check_dtypes_match, check_float, copy_into, prepare_out, scale_inplace, sum_cols,
    Act,
};
use super::{AttentionCaches, ProjectionBiases, Projections};
use crate::backend::{Broadcast, Gemm, Src};
use crate::{Dtype, Error, Result, Tensor};

/// An attention problem after validation: `groups` independent sequences (windows) of `Lq`
/// queries of width `D` and `Lk` keys, `heads` heads of `hd` columns.
pub(super) struct Setup<'a> {
    pub(super) op: &'static str,
    pub(super) be: Dispatched,
    pub(super) groups: usize,
    pub(super) heads: usize,
    pub(super) hd: usize,
    pub(super) lq: usize,
    pub(super) lk: usize,
    pub(super) d: usize,
    pub(super) scale: f32,
    /// The F32 key mask, `Lk` elements.
    pub(super) mask: Option<&'a Tensor>,
    /// Whether invalid keys also gate query rows (zero `Attnh` and output rows).
    pub(super) gate_query: bool,
}

/// A pre-softmax term added to the scaled scores.
pub(super) enum Extra<'a> {
    /// Nothing.
    None,
    /// `(heads Lq, Lk)` F32 bias, one row per head and query.
    PerHead(&'a Tensor),
    /// `(Lq, Lk)` F32 bias shared by every head.
    Shared(&'a Tensor),
    /// The decomposed relative-position bias of a `grid` of tokens.
    RelPos {
        rel_h: &'a Tensor,
        rel_w: &'a Tensor,
        grid: (usize, usize),
    },
}

/// `hd = d / heads`, or an error when `heads` is 0 or does not divide `d`.
pub(super) fn head_dim(op: &'static str, d: usize, heads: usize) -> Result<usize> {
    if heads == 0 || !d.is_multiple_of(heads) {
        return Err(Error::invalid(
            op,
            format!("num_heads {heads} must be positive and divide D = {d}"),
        ));
    }
    Ok(d / heads)
}

/// Checks that `t` is `rows x cols`.
pub(super) fn check_shape(
    op: &'static str,
    name: &'static str,
    t: &Tensor,
    (rows, cols): (usize, usize),
) -> Result<()> {
    if t.shape() != (rows, cols) {
        return Err(Error::shape(
            op,
            format!("`{name}` is {:?} but must be {rows}x{cols}", t.dims()),
        ));
    }
    Ok(())
}

/// Checks the float input `x`, the weights (shapes from `d` and `d_kv`, `x`'s dtype), the
/// biases (`d` elements, float) and the mask (F32, `lk` elements).
pub(super) fn check_block(
    op: &'static str,
    be: Dispatched,
    x: &Tensor,
    w: &Projections<'_>,
    b: &ProjectionBiases<'_>,
    (d_kv, lk): (usize, usize),
    mask: Option<&Tensor>,
) -> Result<()> {
    check_float(op, "x", x, be)?;
    let d = x.cols();
    check_shape(op, "wq", w.wq, (d, d))?;
    check_shape(op, "wk", w.wk, (d, d_kv))?;
    check_shape(op, "wv", w.wv, (d, d_kv))?;
    check_shape(op, "wo", w.wo, (d, d))?;
    check_dtypes_match(
        op,
        ("x", x),
        &[("wq", w.wq), ("wk", w.wk), ("wv", w.wv), ("wo", w.wo)],
    )?;
    for (name, t) in [("bq", b.bq), ("bk", b.bk), ("bv", b.bv), ("bo", b.bo)] {
        if let Some(t) = t {
            check_bias(op, name, t, d)?;
        }
    }
    check_mask(op, mask, lk)
}

/// Checks that `t` holds floats (it is converted to the op's dtype).
pub(super) fn check_float_operand(op: &'static str, name: &'static str, t: &Tensor) -> Result<()> {
    if !t.dtype().is_float() {
        return Err(Error::Dtype {
            op,
            operand: name,
            expected: "expected F32, F16 or BF16".into(),
            found: t.dtype(),
        });
    }
    Ok(())
}

/// Checks a float vector of `d` elements.
fn check_bias(op: &'static str, name: &'static str, t: &Tensor, d: usize) -> Result<()> {
    check_float_operand(op, name, t)?;
    if t.numel() != d {
        return Err(Error::shape(
            op,
            format!("`{name}` has {} elements but D = {d}", t.numel()),
        ));
    }
    Ok(())
}

/// Checks an optional F32 tensor of `len` elements.
pub(super) fn check_f32_len(
    op: &'static str,
    name: &'static str,
    t: Option<&Tensor>,
    len: usize,
) -> Result<()> {
    let Some(t) = t else { return Ok(()) };
    if t.dtype() != Dtype::F32 {
        return Err(Error::Dtype {
            op,
            operand: name,
            expected: "must be F32".into(),
            found: t.dtype(),
        });
    }
    if t.numel() != len {
        return Err(Error::shape(
            op,
            format!("`{name}` has {} elements but needs {len}", t.numel()),
        ));
    }
    Ok(())
}

/// Checks the key mask: F32, one value per key.
pub(super) fn check_mask(op: &'static str, mask: Option<&Tensor>, lk: usize) -> Result<()> {
    check_f32_len(op, "mask", mask, lk)
}

/// `t` in `dtype`: itself, or a converted copy.
pub(super) fn in_dtype(t: &Tensor, dtype: Dtype) -> Result<Cow<'_, Tensor>> {
    if t.dtype() == dtype {
        Ok(Cow::Borrowed(t))
    } else {
        Ok(Cow::Owned(t.to_dtype(dtype)?))
    }
}

/// `c = op(a) . op(b)` (or `+=`) for `batch` products of `m x k` by `k x n`, stored one
/// after another; `c` must be committed and sized. An empty inner dimension gives zeros.
#[allow(clippy::too_many_arguments)]
pub(super) fn bmm(
    s: &Setup<'_>,
    a: &Tensor,
    b: &Tensor,
    c: &mut Tensor,
    (m, n, k): (usize, usize, usize),
    batch: usize,
    (trans_a, trans_b): (bool, bool),
    accumulate: bool,
) -> Result<()> {
    if c.numel() == 0 {
        return Ok(());
    }
    if k == 0 {
        return if accumulate { Ok(()) } else { c.zero() };
    }
    let g = Gemm {
        m,
        n,
        k,
        trans_a,
        trans_b,
        accumulate,
        batch,
        strides: (m * k, k * n, m * n),
        act: Act::None,
    };
    s.be.gemm(s.op, a, b, None, c, g)
}

/// A new `(rows, cols)` tensor of `dtype` on the op's device.
pub(super) fn scratch(s: &Setup<'_>, rows: usize, cols: usize, dtype: Dtype) -> Result<Tensor> {
    Tensor::empty_on(s.be.device(), rows, cols, dtype)
}

/// `out (groups heads L, hd)` = the heads of `t (groups L, heads hd)`: group `g`'s head `h`
/// in rows `(g heads + h) L ..`.
pub(super) fn split_heads(s: &Setup<'_>, t: &Tensor, out: &mut Tensor) -> Result<()> {
    let l = t.rows() / s.groups;
    let view = t
        .reshape(&[s.groups, l, s.heads, s.hd])?
        .permute(&[0, 2, 1, 3])?;
    copy_into(&view, out)?;
    out.reshape_(&[s.groups * s.heads * l, s.hd])
}

/// `out (groups L, heads hd)` = the heads of `t (groups heads L, hd)` side by side.
pub(super) fn merge_heads(s: &Setup<'_>, t: &Tensor, out: &mut Tensor) -> Result<()> {
    let l = t.rows() / (s.groups * s.heads);
    let view = t
        .reshape(&[s.groups, s.heads, l, s.hd])?
        .permute(&[0, 2, 1, 3])?;
    copy_into(&view, out)?;
    out.reshape_(&[s.groups * l, s.heads * s.hd])
}

/// `y (L, D) = x W^T + b` (the projection of one block input).
pub(super) fn project(w: &Tensor, b: Option<&Tensor>, x: &Tensor, y: &mut Tensor) -> Result<()> {
    super::super::linear_forward_batched(w, b, x, y)
}

/// Zeroes the rows of `y` whose query is invalid, when the op gates queries.
pub(super) fn gate_rows(s: &Setup<'_>, y: &mut Tensor, cols: usize) -> Result<()> {
    match s.mask {
        Some(mask) if s.gate_query && y.numel() > 0 => s.be.mask_rows(s.op, y, cols, mask),
        _ => Ok(()),
    }
}

/// The attention core from projected `q (Lq, D)`, `k`, `v (Lk, D)`: fills every cache
/// (`c.y` is `Yconcat`).
pub(super) fn attend(
    s: &Setup<'_>,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    extra: Extra<'_>,
    c: &mut AttentionCaches,
) -> Result<()> {
    let dtype = q.dtype();
    let dev = s.be.device();
    split_heads(s, q, &mut c.q)?;
    split_heads(s, k, &mut c.k)?;
    split_heads(s, v, &mut c.v)?;
    let (nh, lq, lk, hd) = (s.groups * s.heads, s.lq, s.lk, s.hd);
    let mut scores = scratch(s, nh * lq, lk, dtype)?;
    bmm(
        s,
        &c.q,
        &c.k,
        &mut scores,
        (lq, lk, hd),
        nh,
        (false, true),
        false,
    )?;
    scale_inplace(&mut scores, s.scale)?;
    match extra {
        Extra::None => {}
        Extra::PerHead(bias) => {
            let bias = in_dtype(bias, dtype)?.reshaped(nh * lq, lk)?;
            add_inplace(&mut scores, &bias)?;
        }
        Extra::Shared(bias) => {
            if scores.numel() > 0 {
                let bias = in_dtype(bias, dtype)?;
                let plane = lq * lk;
                let b = Broadcast {
                    inner: plane,
                    v_len: plane,
                    per_row: false,
                    repeat: usize::MAX,
                    multiply: false,
                };
                s.be.broadcast(s.op, &mut scores, &bias, b)?;
            }
        }
        Extra::RelPos { rel_h, rel_w, grid } => {
            if scores.numel() > 0 {
                let (rh, rw) = (in_dtype(rel_h, dtype)?, in_dtype(rel_w, dtype)?);
                s.be.rel_pos_bias(s.op, &c.q, &rh, &rw, &mut scores, grid)?;
            }
        }
    }
    prepare_out(s.op, "attn", &mut c.attn, dev, &[nh * lq, lk], dtype)?;
    if scores.numel() > 0 {
        s.be.softmax(Src::Tensor(&scores), s.mask, &mut c.attn, lk)?;
    }
    gate_rows(s, &mut c.attn, lk)?;
    let mut yh = scratch(s, nh * lq, hd, dtype)?;
    bmm(
        s,
        &c.attn,
        &c.v,
        &mut yh,
        (lq, hd, lk),
        nh,
        (false, false),
        false,
    )?;
    merge_heads(s, &yh, &mut c.y)
}

/// `o (Lq, D) = y Wo^T + bo`, invalid query rows zeroed where the op gates them.
pub(super) fn output(
    s: &Setup<'_>,
    wo: &Tensor,
    bo: Option<&Tensor>,
    y: &Tensor,
    o: &mut Tensor,
) -> Result<()> {
    project(wo, bo, y, o)?;
    gate_rows(s, o, s.d)
}

/// Gradients of the attention core: from `dy (Lq, D)` (the gradient of `Yconcat`) and the
/// caches, the gradients of the projected `q (Lq, D)`, `k`, `v (Lk, D)` (overwritten).
pub(super) fn attend_backward(
    s: &Setup<'_>,
    dy: &Tensor,
    c: &AttentionCaches,
    dq: &mut Tensor,
    dk: &mut Tensor,
    dv: &mut Tensor,
) -> Result<()> {
    let dtype = dy.dtype();
    let (nh, lq, lk, hd) = (s.groups * s.heads, s.lq, s.lk, s.hd);
    let mut dyh = Tensor::default();
    split_heads(s, dy, &mut dyh)?;
    let mut dattn = scratch(s, nh * lq, lk, dtype)?;
    bmm(
        s,
        &dyh,
        &c.v,
        &mut dattn,
        (lq, lk, hd),
        nh,
        (false, true),
        false,
    )?;
    let mut dvh = scratch(s, nh * lk, hd, dtype)?;
    bmm(
        s,
        &c.attn,
        &dyh,
        &mut dvh,
        (lk, hd, lq),
        nh,
        (true, false),
        false,
    )?;
    let mut ds = scratch(s, nh * lq, lk, dtype)?;
    if ds.numel() > 0 {
        s.be.softmax_backward(&c.attn, &dattn, &mut ds, lk)?;
    }
    scale_inplace(&mut ds, s.scale)?;
    let mut dqh = scratch(s, nh * lq, hd, dtype)?;
    bmm(
        s,
        &ds,
        &c.k,
        &mut dqh,
        (lq, hd, lk),
        nh,
        (false, false),
        false,
    )?;
    let mut dkh = scratch(s, nh * lk, hd, dtype)?;
    bmm(
        s,
        &ds,
        &c.q,
        &mut dkh,
        (lk, hd, lq),
        nh,
        (true, false),
        false,
    )?;
    merge_heads(s, &dqh, dq)?;
    merge_heads(s, &dkh, dk)?;
    merge_heads(s, &dvh, dv)
}

/// Backward of one projection `y = x W^T + b` given `dy`: `dx (=|+=) dy W`,
/// `dw += dy^T x`, `db += sum_rows dy`.
pub(super) fn project_backward(
    s: &Setup<'_>,
    (x, w, dy): (&Tensor, &Tensor, &Tensor),
    dx: &mut Tensor,
    accumulate_dx: bool,
    dw: &mut Tensor,
    db: Option<&mut Tensor>,
) -> Result<()> {
    let (rows, out, inp) = (x.rows(), w.rows(), w.cols());
    bmm(
        s,
        dy,
        w,
        dx,
        (rows, inp, out),
        1,
        (false, false),
        accumulate_dx,
    )?;
    bmm(s, dy, x, dw, (out, inp, rows), 1, (true, false), true)?;
    if let Some(db) = db {
        let mut sums = Tensor::default();
        sum_cols(dy, &mut sums)?;
        let sums = sums.reshaped(db.rows(), db.cols())?;
        add_inplace(db, &sums)?;
    }
    Ok(())
}

/// Checks that a caller-sized gradient is committed, writable, `shape` and `dtype`.
pub(super) fn check_grad(
    op: &'static str,
    name: &'static str,
    t: &Tensor,
    shape: (usize, usize),
    dtype: Dtype,
) -> Result<()> {
    t.check_writable(op, name)?;
    if !t.is_committed() || t.shape() != shape {
        return Err(Error::shape(
            op,
            format!(
                "`{name}` must be pre-sized to {}x{} (it accumulates), got {:?}",
                shape.0,
                shape.1,
                t.dims()
            ),
        ));
    }
    if t.dtype() != dtype {
        return Err(Error::Dtype {
            op,
            operand: name,
            expected: format!("must match the operands ({dtype})"),
            found: t.dtype(),
        });
    }
    Ok(())
}

/// Checks a bias gradient: committed, writable, `d` elements, `dtype`.
pub(super) fn check_bias_grad(
    op: &'static str,
    name: &'static str,
    t: &Tensor,
    d: usize,
    dtype: Dtype,
) -> Result<()> {
    check_grad(op, name, t, (t.rows(), t.cols()), dtype)?;
    if t.numel() != d {
        return Err(Error::shape(
            op,
            format!("`{name}` has {} elements but D = {d}", t.numel()),
        ));
    }
    Ok(())
}

/// Checks the forward caches against the problem's sizes and dtype.
pub(super) fn check_caches(s: &Setup<'_>, c: &AttentionCaches, dtype: Dtype) -> Result<()> {
    let op = s.op;
    let (nh, lq, lk, hd) = (s.heads, s.lq, s.lk, s.hd);
    check_shape(op, "q cache", &c.q, (nh * lq, hd))?;
    check_shape(op, "k cache", &c.k, (nh * lk, hd))?;
    check_shape(op, "v cache", &c.v, (nh * lk, hd))?;
    check_shape(op, "attn cache", &c.attn, (nh * lq, lk))?;
    check_shape(op, "y cache", &c.y, (lq, s.d))?;
    for (name, t) in [
        ("q cache", &c.q),
        ("k cache", &c.k),
        ("v cache", &c.v),
        ("attn cache", &c.attn),
        ("y cache", &c.y),
    ] {
        if t.dtype() != dtype {
            return Err(Error::Dtype {
                op,
                operand: name,
                expected: format!("must match `x` ({dtype})"),
                found: t.dtype(),
            });
        }
    }
    Ok(())
}

impl<'a> Projections<'a> {
    /// The four weights as declared inputs of `op`'s dispatch.
    pub(super) fn operands(&self) -> [Operand<'a>; 4] {
        [
            input("wq", self.wq),
            input("wk", self.wk),
            input("wv", self.wv),
            input("wo", self.wo),
        ]
    }
}

impl<'a> ProjectionBiases<'a> {
    /// The biases that are present, as declared inputs of `op`'s dispatch.
    pub(super) fn operands(&self) -> [Operand<'a>; 4] {
        [
            input_opt("bq", self.bq),
            input_opt("bk", self.bk),
            input_opt("bv", self.bv),
            input_opt("bo", self.bo),
        ]
    }
}
