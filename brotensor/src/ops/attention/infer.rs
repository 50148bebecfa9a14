//! The inference ops: cross and self attention without exposed caches, the head-averaged
//! attention map, additive-bias attention (also with INT8 weights), and SAM's decomposed
//! relative-position attention, global and windowed.

use super::super::{
    check_float, checked_product, dispatch, input, input_opt, scale_inplace, sum_cols, written,
};
use super::engine::{check_shape, Extra};
use super::train::{run_forward, Forward, Gate};
use super::{AttentionCaches, Int8Projections, ProjectionBiases, Projections};
use crate::{Dtype, Error, Result, Tensor};

/// Cross attention (C++ `cross_attention_forward`): queries from `x (Lq, D)`, keys and
/// values from `ctx (Lk, D_ctx)` (same dtype), `wq`, `wo (D, D)`, `wk`, `wv (D, D_ctx)`, an
/// optional F32 key `mask` of `Lk` (gating queries too when `Lq == Lk`), `num_heads`
/// dividing `D`; `o (Lq, D)` in `x`'s dtype. The same math in every dtype (the scores are
/// materialised; the C++ FP16 path is a flash kernel).
pub fn cross_attention_forward(
    x: &Tensor,
    ctx: &Tensor,
    w: Projections<'_>,
    mask: Option<&Tensor>,
    num_heads: usize,
    o: &mut Tensor,
) -> Result<()> {
    let f = Forward {
        op: "cross_attention_forward",
        x,
        ctx: Some(ctx),
        w,
        b: ProjectionBiases::default(),
        mask,
        heads: num_heads,
        groups: 1,
        scale: None,
        gate: Gate::WhenSquare,
    };
    run_forward(&f, Extra::None, &mut AttentionCaches::default(), o)
}

/// [`cross_attention_forward`] with an optional F32 pre-softmax `attn_logit_bias (Lq, Lk)`
/// added to every head's scaled scores, keys masked but queries never gated, and
/// `attn_avg (Lq, Lk)`, the softmax weights averaged over the heads, in `x`'s dtype (C++
/// `cross_attention_forward_with_attn`, FP16 there; any float dtype the device computes
/// in here).
#[allow(clippy::too_many_arguments)]
pub fn cross_attention_forward_with_attn(
    x: &Tensor,
    ctx: &Tensor,
    w: Projections<'_>,
    mask: Option<&Tensor>,
    attn_logit_bias: Option<&Tensor>,
    num_heads: usize,
    o: &mut Tensor,
    attn_avg: &mut Tensor,
) -> Result<()> {
    let op = "cross_attention_forward_with_attn";
    let mut all = vec![input("x", x), input("ctx", ctx)];
    all.extend(w.operands());
    all.extend([
        input_opt("mask", mask),
        input_opt("attn_logit_bias", attn_logit_bias),
        written("o", o),
        written("attn_avg", attn_avg),
    ]);
    dispatch(op, &all)?;
    let f = Forward {
        op,
        x,
        ctx: Some(ctx),
        w,
        b: ProjectionBiases::default(),
        mask,
        heads: num_heads,
        groups: 1,
        scale: None,
        gate: Gate::KeysOnly,
    };
    let extra = attn_logit_bias.map_or(Extra::None, Extra::Shared);
    let mut c = AttentionCaches::default();
    run_forward(&f, extra, &mut c, o)?;
    let (lq, lk) = (x.rows(), ctx.rows());
    let planes = c.attn.reshaped(num_heads, lq * lk)?;
    sum_cols(&planes, attn_avg)?;
    attn_avg.reshape_(&[lq, lk])?;
    scale_inplace(attn_avg, 1.0 / num_heads as f32)
}

/// Self attention (C++ `self_attention_forward`): [`cross_attention_forward`] with
/// `ctx = x`; `x`, `o (L, D)`, square weights, optional F32 `mask` of `L`.
pub fn self_attention_forward(
    x: &Tensor,
    w: Projections<'_>,
    mask: Option<&Tensor>,
    num_heads: usize,
    o: &mut Tensor,
) -> Result<()> {
    let f = Forward::selfish(
        "self_attention_forward",
        x,
        w,
        ProjectionBiases::default(),
        mask,
        num_heads,
    );
    run_forward(&f, Extra::None, &mut AttentionCaches::default(), o)
}

/// Multi-head self attention with an additive pre-softmax bias (C++
/// `self_attention_bias_forward`, the T5 / ALiBi / Swin primitive): per head
/// `S[q, k] = scale Q_h[q] . K_h[k] + attn_bias[h L + q, k]`. `x`, `o (L, D)`, square
/// weights in `x`'s dtype, optional projection biases `b`, an optional F32 key `mask` of
/// `L` (gating queries too), an optional F32 `attn_bias (num_heads L, L)`.
#[allow(clippy::too_many_arguments)]
pub fn self_attention_bias_forward(
    x: &Tensor,
    w: Projections<'_>,
    b: ProjectionBiases<'_>,
    mask: Option<&Tensor>,
    attn_bias: Option<&Tensor>,
    num_heads: usize,
    scale: f32,
    o: &mut Tensor,
) -> Result<()> {
    let mut f = Forward::selfish("self_attention_bias_forward", x, w, b, mask, num_heads);
    f.scale = Some(scale);
    let extra = attn_bias.map_or(Extra::None, Extra::PerHead);
    run_forward(&f, extra, &mut AttentionCaches::default(), o)
}

/// [`self_attention_bias_forward`] with INT8 weight-only projections (C++
/// `self_attention_bias_int8w_fp16`): `x`, `o (L, D)` F16 or BF16 (GPU only), each weight
/// I8 `(D, D)` with F32 row scales `(D, 1)`, dequantized on the device; FP32 accumulation.
#[allow(clippy::too_many_arguments)]
pub fn self_attention_bias_int8w_fp16(
    x: &Tensor,
    w: Int8Projections<'_>,
    mask: Option<&Tensor>,
    attn_bias: Option<&Tensor>,
    num_heads: usize,
    scale: f32,
    o: &mut Tensor,
) -> Result<()> {
    let op = "self_attention_bias_int8w_fp16";
    let pairs = [
        ("wq", w.wq, "sq", w.sq),
        ("wk", w.wk, "sk", w.sk),
        ("wv", w.wv, "sv", w.sv),
        ("wo", w.wo, "so", w.so),
    ];
    let mut all = vec![input("x", x)];
    for (wn, wt, sn, st) in pairs {
        all.extend([input(wn, wt), input(sn, st)]);
    }
    all.extend([
        input_opt("mask", mask),
        input_opt("attn_bias", attn_bias),
        written("o", o),
    ]);
    let be = dispatch(op, &all)?;
    if !matches!(x.dtype(), Dtype::F16 | Dtype::BF16) {
        return Err(Error::Dtype {
            op,
            operand: "x",
            expected: "must be F16 or BF16".into(),
            found: x.dtype(),
        });
    }
    check_float(op, "x", x, be)?;
    let d = x.cols();
    let mut dequant = Vec::with_capacity(4);
    for (wn, wt, sn, st) in pairs {
        if wt.dtype() != Dtype::I8 {
            return Err(Error::Dtype {
                op,
                operand: wn,
                expected: "must be I8".into(),
                found: wt.dtype(),
            });
        }
        check_shape(op, wn, wt, (d, d))?;
        if st.dtype() != Dtype::F32 || st.numel() != d {
            return Err(Error::shape(
                op,
                format!("`{sn}` must be F32 with one value per row of `{wn}` ({d})"),
            ));
        }
        let mut wide = Tensor::empty_on(be.device(), d, d, Dtype::F32)?;
        if wt.numel() > 0 {
            be.dequant_i8_rows(wt, st, &mut wide)?;
        }
        dequant.push(wide.to_dtype(x.dtype())?);
    }
    let p = Projections {
        wq: &dequant[0],
        wk: &dequant[1],
        wv: &dequant[2],
        wo: &dequant[3],
    };
    let mut f = Forward::selfish(op, x, p, ProjectionBiases::default(), mask, num_heads);
    f.scale = Some(scale);
    let extra = attn_bias.map_or(Extra::None, Extra::PerHead);
    run_forward(&f, extra, &mut AttentionCaches::default(), o)
}

/// Multi-head self attention with SAM's decomposed 2D relative-position bias (C++
/// `self_attention_decomposed_rel_pos_forward`): token `t` of `x (grid_h grid_w, D)` sits at
/// `(t / grid_w, t % grid_w)`; per head, with `r_q` the projected (unscaled) query,
/// `S[q, k] = scale Q[q] . K[k] + bias[q, k]` where
/// `bias[q, k] = r_q . rel_pos_h[qy - ky + grid_h - 1] + r_q . rel_pos_w[qx - kx + grid_w - 1]`.
/// `rel_pos_h (2 grid_h - 1, hd)`, `rel_pos_w (2 grid_w - 1, hd)`; optional biases `b`; no
/// mask; `o (L, D)` in `x`'s dtype.
#[allow(clippy::too_many_arguments)]
pub fn self_attention_decomposed_rel_pos_forward(
    x: &Tensor,
    w: Projections<'_>,
    b: ProjectionBiases<'_>,
    rel_pos_h: &Tensor,
    rel_pos_w: &Tensor,
    num_heads: usize,
    (grid_h, grid_w): (usize, usize),
    scale: f32,
    o: &mut Tensor,
) -> Result<()> {
    let op = "self_attention_decomposed_rel_pos_forward";
    let mut f = Forward::selfish(op, x, w, b, None, num_heads);
    f.scale = Some(scale);
    let extra = Extra::RelPos {
        rel_h: rel_pos_h,
        rel_w: rel_pos_w,
        grid: (grid_h, grid_w),
    };
    run_forward(&f, extra, &mut AttentionCaches::default(), o)
}

/// Windowed [`self_attention_decomposed_rel_pos_forward`] (C++
/// `self_attention_decomposed_rel_pos_windowed_forward`, SAM's windowed encoder block): the
/// `grid_h x grid_w` token grid of `x (grid_h grid_w, D)` is zero-padded at the bottom and
/// right to multiples of `window`, cut into `window x window` windows that each attend
/// independently (padding tokens included, as in SAM), and cropped back into
/// `o (grid_h grid_w, D)`. `rel_pos_h`, `rel_pos_w` are `(2 window - 1, hd)`. An empty grid
/// gives an empty `o`.
#[allow(clippy::too_many_arguments)]
pub fn self_attention_decomposed_rel_pos_windowed_forward(
    x: &Tensor,
    w: Projections<'_>,
    b: ProjectionBiases<'_>,
    rel_pos_h: &Tensor,
    rel_pos_w: &Tensor,
    num_heads: usize,
    (grid_h, grid_w): (usize, usize),
    window: usize,
    scale: f32,
    o: &mut Tensor,
) -> Result<()> {
    let op = "self_attention_decomposed_rel_pos_windowed_forward";
    let mut all = vec![input("x", x)];
    all.extend(w.operands());
    all.extend(b.operands());
    all.extend([
        input("rel_pos_h", rel_pos_h),
        input("rel_pos_w", rel_pos_w),
        written("o", o),
    ]);
    let be = dispatch(op, &all)?;
    check_float(op, "x", x, be)?;
    if window == 0 {
        return Err(Error::invalid(op, "window must be positive"));
    }
    let tokens = checked_product(op, "grid_h * grid_w", &[grid_h, grid_w])?;
    if x.rows() != tokens {
        return Err(Error::shape(
            op,
            format!(
                "`x` has {} rows but grid_h * grid_w = {grid_h} * {grid_w} = {tokens}",
                x.rows()
            ),
        ));
    }
    let d = x.cols();
    if tokens == 0 {
        // No window has a token: nothing attends.
        return be.out("o", o, &[0, d], x.dtype());
    }
    let (nwy, nwx) = (grid_h.div_ceil(window), grid_w.div_ceil(window));
    let groups = checked_product(op, "windows", &[nwy, nwx])?;
    let rows = checked_product(op, "windows * window^2", &[groups, window, window])?;
    let mut xw = Tensor::empty_on(be.device(), rows, d, x.dtype())?;
    if xw.numel() > 0 {
        be.window_rows(op, x, &mut xw, (grid_h, grid_w, window), true)?;
    }
    let mut f = Forward::selfish(op, &xw, w, b, None, num_heads);
    f.scale = Some(scale);
    f.groups = groups;
    let extra = Extra::RelPos {
        rel_h: rel_pos_h,
        rel_w: rel_pos_w,
        grid: (window, window),
    };
    let mut ow = Tensor::default();
    run_forward(&f, extra, &mut AttentionCaches::default(), &mut ow)?;
    be.out("o", o, &[tokens, d], x.dtype())?;
    if o.numel() > 0 {
        be.window_rows(op, &ow, o, (grid_h, grid_w, window), false)?;
    }
    Ok(())
}
