//! The projected flash attention ops: composites of the linear ops (`X W^T + b`, dense or
//! INT8 weight-only) and [`super::flash_attention_forward`].
//!
//! Shapes: `X (Lq, D)`, `Ctx (Lk, D_ctx)`, `Wq, Wo (D, D)`, `Wk, Wv (D, D_ctx)`, biases of
//! `D` values; an INT8 weight is I8 `(D, in)` with an F32 scale per row (`(D, 1)`), its
//! activations F16 or BF16 (GPU only, as the C++).

use crate::ops::{
    check_dtypes_match, declare, input, input_opt, linear_forward_batched,
    linear_forward_batched_int8w_fp16, written, Operand,
};
use crate::{Error, Result, Tensor};

/// One projection `y = x W^T + b`: a dense float weight, or an INT8 weight with per-row
/// scales.
#[derive(Clone, Copy)]
enum Weight<'a> {
    Dense(&'a Tensor),
    Int8(&'a Tensor, &'a Tensor),
}

impl<'w> Weight<'w> {
    fn tensor(&self) -> &Tensor {
        match self {
            Weight::Dense(w) | Weight::Int8(w, _) => w,
        }
    }

    /// Checks the weight is `(rows, cols)` (and, dense, in `x`'s dtype).
    fn check(
        &self,
        op: &'static str,
        name: &'static str,
        x: &Tensor,
        rows: usize,
        cols: usize,
    ) -> Result<()> {
        let w = self.tensor();
        if w.shape() != (rows, cols) {
            return Err(Error::shape(
                op,
                format!("`{name}` is {:?} but must be {rows}x{cols}", w.dims()),
            ));
        }
        if let Weight::Dense(w) = self {
            check_dtypes_match(op, ("x", x), &[(name, w)])?;
        }
        Ok(())
    }

    /// The weight (and its scales) as declared inputs named `w` and `s`.
    fn operands(self, w: &'static str, s: &'static str) -> [Operand<'w>; 2] {
        match self {
            Weight::Dense(t) => [input(w, t), input_opt(s, None)],
            Weight::Int8(t, scales) => [input(w, t), input(s, scales)],
        }
    }

    fn apply(&self, bias: Option<&Tensor>, x: &Tensor, y: &mut Tensor) -> Result<()> {
        match *self {
            Weight::Dense(w) => linear_forward_batched(w, bias, x, y),
            Weight::Int8(w, s) => linear_forward_batched_int8w_fp16(w, s, bias, x, y),
        }
    }
}

/// `K = ctx Wk^T + bk`, `V = ctx Wv^T + bv`, with `Wk`, `Wv` both `(D, D_ctx)`.
fn project_kv(
    op: &'static str,
    ctx: &Tensor,
    (wk, bk): (Weight<'_>, Option<&Tensor>),
    (wv, bv): (Weight<'_>, Option<&Tensor>),
    k_out: &mut Tensor,
    v_out: &mut Tensor,
) -> Result<()> {
    let d = wk.tensor().rows();
    wk.check(op, "wk", ctx, d, ctx.cols())?;
    wv.check(op, "wv", ctx, d, ctx.cols())?;
    wk.apply(bk, ctx, k_out)?;
    wv.apply(bv, ctx, v_out)
}

/// `O = attention(X Wq^T + bq, K, V) Wo^T + bo`.
#[allow(clippy::too_many_arguments)]
fn q_with_kv(
    op: &'static str,
    x: &Tensor,
    k: &Tensor,
    v: &Tensor,
    (wq, bq): (Weight<'_>, Option<&Tensor>),
    (wo, bo): (Weight<'_>, Option<&Tensor>),
    mask: Option<&Tensor>,
    (num_heads, causal): (usize, bool),
    o: &mut Tensor,
) -> Result<()> {
    let mut operands = vec![input("x", x), input("k", k), input("v", v)];
    operands.extend(wq.operands("wq", "sq"));
    operands.push(input_opt("bq", bq));
    operands.extend(wo.operands("wo", "so"));
    operands.extend([
        input_opt("bo", bo),
        input_opt("mask", mask),
        written("o", o),
    ]);
    declare(op, &operands)?;
    let d = x.cols();
    wq.check(op, "wq", x, d, d)?;
    wo.check(op, "wo", x, d, d)?;
    let mut qp = Tensor::default();
    wq.apply(bq, x, &mut qp)?;
    let mut attn = Tensor::default();
    super::flash_attention_forward(&qp, k, v, mask, num_heads, causal, &mut attn)?;
    wo.apply(bo, &attn, o)
}

/// Projects `ctx (Lk, D_ctx)` into `K_out, V_out (Lk, D)`: `K = ctx Wk^T + bk`,
/// `V = ctx Wv^T + bv`, with `Wk, Wv (D, D_ctx)` and optional biases of `D` values (the
/// K/V stage of [`flash_attention_qkvo_forward`]).
pub fn flash_attention_project_kv(
    ctx: &Tensor,
    wk: &Tensor,
    bk: Option<&Tensor>,
    wv: &Tensor,
    bv: Option<&Tensor>,
    k_out: &mut Tensor,
    v_out: &mut Tensor,
) -> Result<()> {
    let op = "flash_attention_project_kv";
    declare(
        op,
        &[
            input("ctx", ctx),
            input("wk", wk),
            input_opt("bk", bk),
            input("wv", wv),
            input_opt("bv", bv),
            written("k_out", k_out),
            written("v_out", v_out),
        ],
    )?;
    project_kv(
        op,
        ctx,
        (Weight::Dense(wk), bk),
        (Weight::Dense(wv), bv),
        k_out,
        v_out,
    )
}

/// `O (Lq, D)` = attention of `X Wq^T + bq` over pre-projected `K, V (Lk, D)` (from
/// [`flash_attention_project_kv`]), then `· Wo^T + bo`. `Wq, Wo (D, D)`; mask and causal as
/// [`super::flash_attention_forward`].
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_q_with_kv_cached_forward(
    x: &Tensor,
    k: &Tensor,
    v: &Tensor,
    wq: &Tensor,
    bq: Option<&Tensor>,
    wo: &Tensor,
    bo: Option<&Tensor>,
    mask: Option<&Tensor>,
    num_heads: usize,
    causal: bool,
    o: &mut Tensor,
) -> Result<()> {
    let op = "flash_attention_q_with_kv_cached_forward";
    let (q, out) = ((Weight::Dense(wq), bq), (Weight::Dense(wo), bo));
    q_with_kv(op, x, k, v, q, out, mask, (num_heads, causal), o)
}

/// Attention with its projections: `Q = X Wq^T + bq`, `K, V` from `Ctx (Lk, D_ctx)` (or from
/// `X` when `ctx` is `None`: self-attention), then [`super::flash_attention_forward`] and
/// `O = · Wo^T + bo`, `O (Lq, D)`. `Wq, Wo (D, D)`, `Wk, Wv (D, D_ctx)`.
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_qkvo_forward(
    x: &Tensor,
    ctx: Option<&Tensor>,
    (wq, bq): (&Tensor, Option<&Tensor>),
    (wk, bk): (&Tensor, Option<&Tensor>),
    (wv, bv): (&Tensor, Option<&Tensor>),
    (wo, bo): (&Tensor, Option<&Tensor>),
    mask: Option<&Tensor>,
    num_heads: usize,
    causal: bool,
    o: &mut Tensor,
) -> Result<()> {
    let op = "flash_attention_qkvo_forward";
    let mut operands = vec![input("x", x), input_opt("ctx", ctx)];
    operands.extend(Weight::Dense(wq).operands("wq", "sq"));
    operands.push(input_opt("bq", bq));
    operands.extend(Weight::Dense(wk).operands("wk", "sk"));
    operands.push(input_opt("bk", bk));
    operands.extend(Weight::Dense(wv).operands("wv", "sv"));
    operands.push(input_opt("bv", bv));
    operands.extend(Weight::Dense(wo).operands("wo", "so"));
    operands.push(input_opt("bo", bo));
    operands.extend([input_opt("mask", mask), written("o", o)]);
    declare(op, &operands)?;
    let (mut k, mut v) = (Tensor::default(), Tensor::default());
    let kv = ((Weight::Dense(wk), bk), (Weight::Dense(wv), bv));
    project_kv(op, ctx.unwrap_or(x), kv.0, kv.1, &mut k, &mut v)?;
    let (q, out) = ((Weight::Dense(wq), bq), (Weight::Dense(wo), bo));
    q_with_kv(op, x, &k, &v, q, out, mask, (num_heads, causal), o)
}

/// [`flash_attention_project_kv`] with INT8 weights: `Wk, Wv` I8 `(D, D_ctx)` with F32
/// per-row scales `sk, sv (D, 1)`; `ctx`, biases and outputs F16 or BF16 (GPU).
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_project_kv_int8w_fp16(
    ctx: &Tensor,
    (wk, sk, bk): (&Tensor, &Tensor, Option<&Tensor>),
    (wv, sv, bv): (&Tensor, &Tensor, Option<&Tensor>),
    k_out: &mut Tensor,
    v_out: &mut Tensor,
) -> Result<()> {
    let op = "flash_attention_project_kv_int8w_fp16";
    declare(
        op,
        &[
            input("ctx", ctx),
            input("wk", wk),
            input("sk", sk),
            input_opt("bk", bk),
            input("wv", wv),
            input("sv", sv),
            input_opt("bv", bv),
            written("k_out", k_out),
            written("v_out", v_out),
        ],
    )?;
    project_kv(
        op,
        ctx,
        (Weight::Int8(wk, sk), bk),
        (Weight::Int8(wv, sv), bv),
        k_out,
        v_out,
    )
}

/// [`flash_attention_q_with_kv_cached_forward`] with INT8 weights `Wq, Wo` I8 `(D, D)` and
/// F32 per-row scales `sq, so`; activations F16 or BF16 (GPU).
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_q_with_kv_cached_int8w_fp16(
    x: &Tensor,
    k: &Tensor,
    v: &Tensor,
    (wq, sq, bq): (&Tensor, &Tensor, Option<&Tensor>),
    (wo, so, bo): (&Tensor, &Tensor, Option<&Tensor>),
    mask: Option<&Tensor>,
    num_heads: usize,
    causal: bool,
    o: &mut Tensor,
) -> Result<()> {
    let op = "flash_attention_q_with_kv_cached_int8w_fp16";
    let (q, out) = ((Weight::Int8(wq, sq), bq), (Weight::Int8(wo, so), bo));
    q_with_kv(op, x, k, v, q, out, mask, (num_heads, causal), o)
}

/// [`flash_attention_qkvo_forward`] with INT8 weights: each `W*` I8 with F32 per-row scales
/// `s*`; activations F16 or BF16 (GPU).
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_qkvo_int8w_fp16(
    x: &Tensor,
    ctx: Option<&Tensor>,
    (wq, sq, bq): (&Tensor, &Tensor, Option<&Tensor>),
    (wk, sk, bk): (&Tensor, &Tensor, Option<&Tensor>),
    (wv, sv, bv): (&Tensor, &Tensor, Option<&Tensor>),
    (wo, so, bo): (&Tensor, &Tensor, Option<&Tensor>),
    mask: Option<&Tensor>,
    num_heads: usize,
    causal: bool,
    o: &mut Tensor,
) -> Result<()> {
    let op = "flash_attention_qkvo_int8w_fp16";
    let mut operands = vec![input("x", x), input_opt("ctx", ctx)];
    operands.extend(Weight::Int8(wq, sq).operands("wq", "sq"));
    operands.push(input_opt("bq", bq));
    operands.extend(Weight::Int8(wk, sk).operands("wk", "sk"));
    operands.push(input_opt("bk", bk));
    operands.extend(Weight::Int8(wv, sv).operands("wv", "sv"));
    operands.push(input_opt("bv", bv));
    operands.extend(Weight::Int8(wo, so).operands("wo", "so"));
    operands.push(input_opt("bo", bo));
    operands.extend([input_opt("mask", mask), written("o", o)]);
    declare(op, &operands)?;
    let (mut k, mut v) = (Tensor::default(), Tensor::default());
    let kv = ((Weight::Int8(wk, sk), bk), (Weight::Int8(wv, sv), bv));
    project_kv(op, ctx.unwrap_or(x), kv.0, kv.1, &mut k, &mut v)?;
    let (q, out) = ((Weight::Int8(wq, sq), bq), (Weight::Int8(wo, so), bo));
    q_with_kv(op, x, &k, &v, q, out, mask, (num_heads, causal), o)
}
