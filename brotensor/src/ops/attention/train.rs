//! The training ops: forward passes that keep their caches, and their backward passes.

use std::borrow::Cow;

use super::super::{
    check_dtypes_match, checked_product, dispatch, input_opt, prepare_out, updated, updated_opt,
    written, written_opt, Operand,
};
use super::engine::{
    attend, attend_backward, check_bias_grad, check_block, check_caches, check_f32_len,
    check_float_operand, check_grad, check_shape, head_dim, output, project, project_backward,
    Extra, Setup,
};
use super::{AttentionCaches, BiasGrads, ProjectionBiases, ProjectionGrads, Projections};
use crate::{Error, Result, Tensor};

/// Which query rows an invalid key mask entry also gates.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Gate {
    /// Self attention: the mask gates queries too.
    Queries,
    /// Cross attention: queries are gated only when `Lq == Lk` (the C++ rule).
    WhenSquare,
    /// Keys only.
    KeysOnly,
}

/// One forward attention problem, before validation.
pub(super) struct Forward<'a> {
    pub(super) op: &'static str,
    pub(super) x: &'a Tensor,
    /// Keys and values come from here (`None`: from `x`).
    pub(super) ctx: Option<&'a Tensor>,
    pub(super) w: Projections<'a>,
    pub(super) b: ProjectionBiases<'a>,
    pub(super) mask: Option<&'a Tensor>,
    pub(super) heads: usize,
    /// Independent sequences (windows) stacked in `x`'s rows.
    pub(super) groups: usize,
    /// The score scale (`None`: `1 / sqrt(hd)`).
    pub(super) scale: Option<f32>,
    pub(super) gate: Gate,
}

impl<'a> Forward<'a> {
    /// Self attention over `x` with the standard scale and query gating.
    pub(super) fn selfish(
        op: &'static str,
        x: &'a Tensor,
        w: Projections<'a>,
        b: ProjectionBiases<'a>,
        mask: Option<&'a Tensor>,
        heads: usize,
    ) -> Self {
        Forward {
            op,
            x,
            ctx: None,
            w,
            b,
            mask,
            heads,
            groups: 1,
            scale: None,
            gate: Gate::Queries,
        }
    }
}

fn extra_operands<'a>(extra: &Extra<'a>) -> [(&'static str, Option<&'a Tensor>); 2] {
    match *extra {
        Extra::None => [("", None), ("", None)],
        Extra::PerHead(t) => [("attn_bias", Some(t)), ("", None)],
        Extra::Shared(t) => [("attn_logit_bias", Some(t)), ("", None)],
        Extra::RelPos { rel_h, rel_w, .. } => {
            [("rel_pos_h", Some(rel_h)), ("rel_pos_w", Some(rel_w))]
        }
    }
}

/// Validates and runs a forward pass: fills `c` and `o (Lq, D)`.
pub(super) fn run_forward(
    f: &Forward<'_>,
    extra: Extra<'_>,
    c: &mut AttentionCaches,
    o: &mut Tensor,
) -> Result<()> {
    let op = f.op;
    let kv = f.ctx.unwrap_or(f.x);
    let mut list = vec![
        ("x", Some(f.x)),
        ("ctx", f.ctx),
        ("wq", Some(f.w.wq)),
        ("wk", Some(f.w.wk)),
        ("wv", Some(f.w.wv)),
        ("wo", Some(f.w.wo)),
        ("bq", f.b.bq),
        ("bk", f.b.bk),
        ("bv", f.b.bv),
        ("bo", f.b.bo),
        ("mask", f.mask),
    ];
    list.extend(extra_operands(&extra));
    let mut all: Vec<Operand<'_>> = list.iter().map(|&(n, t)| input_opt(n, t)).collect();
    all.extend([
        written("q cache", &c.q),
        written("k cache", &c.k),
        written("v cache", &c.v),
        written("attn cache", &c.attn),
        written("y cache", &c.y),
        written("o", o),
    ]);
    let be = dispatch(op, &all)?;
    let groups = f.groups.max(1);
    let (lq, d) = (f.x.rows() / groups, f.x.cols());
    let (lk, d_kv) = (kv.rows() / groups, kv.cols());
    if let Some(ctx) = f.ctx {
        check_dtypes_match(op, ("x", f.x), &[("ctx", ctx)])?;
    }
    check_block(op, be, f.x, &f.w, &f.b, (d_kv, lk), f.mask)?;
    let hd = head_dim(op, d, f.heads)?;
    let scores = checked_product(
        op,
        "groups * num_heads * Lq * Lk",
        &[groups, f.heads, lq, lk],
    )?;
    match extra {
        Extra::None => {}
        Extra::PerHead(t) => check_f32_len(op, "attn_bias", Some(t), scores)?,
        Extra::Shared(t) => {
            let plane = checked_product(op, "Lq * Lk", &[lq, lk])?;
            check_f32_len(op, "attn_logit_bias", Some(t), plane)?
        }
        Extra::RelPos { rel_h, rel_w, grid } => {
            if checked_product(op, "grid_h * grid_w", &[grid.0, grid.1])? != lq {
                return Err(Error::shape(
                    op,
                    format!("`x` has {lq} rows but the grid is {} x {}", grid.0, grid.1),
                ));
            }
            for (name, t, g) in [("rel_pos_h", rel_h, grid.0), ("rel_pos_w", rel_w, grid.1)] {
                check_float_operand(op, name, t)?;
                let rows = checked_product(op, "2 * grid", &[2, g])?;
                check_shape(op, name, t, (rows.saturating_sub(1), hd))?;
            }
        }
    }
    let gate_query = match f.gate {
        Gate::Queries => true,
        Gate::WhenSquare => lq == lk,
        Gate::KeysOnly => false,
    };
    let s = Setup {
        op,
        be,
        groups,
        heads: f.heads,
        hd,
        lq,
        lk,
        d,
        scale: f.scale.unwrap_or(1.0 / (hd.max(1) as f32).sqrt()),
        mask: f.mask,
        gate_query,
    };
    let (mut q, mut k, mut v) = (Tensor::default(), Tensor::default(), Tensor::default());
    project(f.w.wq, f.b.bq, f.x, &mut q)?;
    project(f.w.wk, f.b.bk, kv, &mut k)?;
    project(f.w.wv, f.b.bv, kv, &mut v)?;
    attend(&s, &q, &k, &v, extra, c)?;
    output(&s, f.w.wo, f.b.bo, &c.y, o)
}

/// One backward attention problem, before validation.
pub(super) struct Backward<'a> {
    pub(super) op: &'static str,
    pub(super) d_o: &'a Tensor,
    pub(super) x: &'a Tensor,
    pub(super) ctx: Option<&'a Tensor>,
    pub(super) c: &'a AttentionCaches,
    pub(super) w: Projections<'a>,
    pub(super) mask: Option<&'a Tensor>,
    pub(super) heads: usize,
    pub(super) gate: Gate,
}

/// Validates and runs a backward pass: `dx` (and `dctx` for cross attention) overwritten,
/// the weight and bias gradients accumulated.
pub(super) fn run_backward(
    bw: &Backward<'_>,
    dx: &mut Tensor,
    dctx: Option<&mut Tensor>,
    g: ProjectionGrads<'_>,
    bg: BiasGrads<'_>,
) -> Result<()> {
    let op = bw.op;
    let kv = bw.ctx.unwrap_or(bw.x);
    let list = [
        ("d_o", Some(bw.d_o)),
        ("x", Some(bw.x)),
        ("ctx", bw.ctx),
        ("q cache", Some(&bw.c.q)),
        ("k cache", Some(&bw.c.k)),
        ("v cache", Some(&bw.c.v)),
        ("attn cache", Some(&bw.c.attn)),
        ("y cache", Some(&bw.c.y)),
        ("wq", Some(bw.w.wq)),
        ("wk", Some(bw.w.wk)),
        ("wv", Some(bw.w.wv)),
        ("wo", Some(bw.w.wo)),
        ("mask", bw.mask),
    ];
    let mut all: Vec<Operand<'_>> = list.iter().map(|&(n, t)| input_opt(n, t)).collect();
    all.extend([
        written("dx", dx),
        written_opt("dctx", dctx.as_deref()),
        updated("dwq", g.dwq),
        updated("dwk", g.dwk),
        updated("dwv", g.dwv),
        updated("dwo", g.dwo),
        updated_opt("dbq", bg.dbq.as_deref()),
        updated_opt("dbk", bg.dbk.as_deref()),
        updated_opt("dbv", bg.dbv.as_deref()),
        updated_opt("dbo", bg.dbo.as_deref()),
    ]);
    let be = dispatch(op, &all)?;
    let (lq, d) = bw.x.shape();
    let (lk, d_kv) = kv.shape();
    let dtype = bw.x.dtype();
    if let Some(ctx) = bw.ctx {
        check_dtypes_match(op, ("x", bw.x), &[("ctx", ctx)])?;
    }
    check_block(
        op,
        be,
        bw.x,
        &bw.w,
        &ProjectionBiases::default(),
        (d_kv, lk),
        bw.mask,
    )?;
    let hd = head_dim(op, d, bw.heads)?;
    checked_product(op, "num_heads * Lq * Lk", &[bw.heads, lq, lk])?;
    check_shape(op, "d_o", bw.d_o, (lq, d))?;
    check_dtypes_match(op, ("x", bw.x), &[("d_o", bw.d_o)])?;
    check_grad(op, "dwq", g.dwq, (d, d), dtype)?;
    check_grad(op, "dwk", g.dwk, (d, d_kv), dtype)?;
    check_grad(op, "dwv", g.dwv, (d, d_kv), dtype)?;
    check_grad(op, "dwo", g.dwo, (d, d), dtype)?;
    for (name, t) in [
        ("dbq", &bg.dbq),
        ("dbk", &bg.dbk),
        ("dbv", &bg.dbv),
        ("dbo", &bg.dbo),
    ] {
        if let Some(t) = t {
            check_bias_grad(op, name, t, d, dtype)?;
        }
    }
    let gate_query = match bw.gate {
        Gate::Queries => true,
        Gate::WhenSquare => lq == lk,
        Gate::KeysOnly => false,
    };
    let s = Setup {
        op,
        be,
        groups: 1,
        heads: bw.heads,
        hd,
        lq,
        lk,
        d,
        scale: 1.0 / (hd.max(1) as f32).sqrt(),
        mask: bw.mask,
        gate_query,
    };
    check_caches(&s, bw.c, dtype)?;
    let dev = be.device();
    // The gradient of the gated output: invalid query rows pass nothing back.
    let d_o: Cow<'_, Tensor> = match bw.mask {
        Some(mask) if gate_query && bw.d_o.numel() > 0 => {
            let mut t = bw.d_o.try_clone()?;
            be.mask_rows(op, &mut t, d, mask)?;
            Cow::Owned(t)
        }
        _ => Cow::Borrowed(bw.d_o),
    };
    let BiasGrads { dbq, dbk, dbv, dbo } = bg;
    let mut dy = Tensor::empty_on(dev, lq, d, dtype)?;
    project_backward(&s, (&bw.c.y, bw.w.wo, &d_o), &mut dy, false, g.dwo, dbo)?;
    let (mut dq, mut dk, mut dv) = (Tensor::default(), Tensor::default(), Tensor::default());
    attend_backward(&s, &dy, bw.c, &mut dq, &mut dk, &mut dv)?;
    prepare_out(op, "dx", dx, dev, &[lq, d], dtype)?;
    project_backward(&s, (bw.x, bw.w.wq, &dq), dx, false, g.dwq, dbq)?;
    let (target, fresh) = match dctx {
        Some(dctx) => {
            prepare_out(op, "dctx", dctx, dev, &[lk, d_kv], dtype)?;
            (dctx, true)
        }
        None => (dx, false),
    };
    project_backward(&s, (kv, bw.w.wk, &dk), target, !fresh, g.dwk, dbk)?;
    project_backward(&s, (kv, bw.w.wv, &dv), target, true, g.dwv, dbv)
}

/// Single-head self-attention (C++ `attention_forward`): `x (N, D)`, square weights, no
/// biases, scale `1 / sqrt(D)`, an optional F32 `mask` of `N` (gates keys and queries).
/// Caches `Q`, `K`, `V (N, D)`, `Attn (N, N)`, `Y_pre_Wo (N, D)` in `c`; `o (N, D)`.
pub fn attention_forward(
    x: &Tensor,
    w: Projections<'_>,
    mask: Option<&Tensor>,
    c: &mut AttentionCaches,
    o: &mut Tensor,
) -> Result<()> {
    let f = Forward::selfish(
        "attention_forward",
        x,
        w,
        ProjectionBiases::default(),
        mask,
        1,
    );
    run_forward(&f, Extra::None, c, o)
}

/// Backward of [`attention_forward`]: `d_o (N, D)` upstream, `c` the forward caches;
/// `dx (N, D)` overwritten, the `g` weight gradients `(D, D)` accumulated.
pub fn attention_backward(
    d_o: &Tensor,
    x: &Tensor,
    c: &AttentionCaches,
    w: Projections<'_>,
    mask: Option<&Tensor>,
    dx: &mut Tensor,
    g: ProjectionGrads<'_>,
) -> Result<()> {
    let bw = Backward {
        op: "attention_backward",
        d_o,
        x,
        ctx: None,
        c,
        w,
        mask,
        heads: 1,
        gate: Gate::Queries,
    };
    run_backward(&bw, dx, None, g, BiasGrads::default())
}

/// Multi-head self-attention (C++ `mha_forward`): `x (K, D)`, square weights, optional
/// biases `b` (D elements each), an optional F32 `mask` of `K` (gates keys and queries),
/// `num_heads` dividing `D`. Fills the caches `c` (`Qh`, `Kh`, `Vh (nh K, hd)`,
/// `Attnh (nh K, K)`, `Yconcat (K, D)` without `bo`) and `o (K, D)`.
pub fn mha_forward(
    x: &Tensor,
    w: Projections<'_>,
    b: ProjectionBiases<'_>,
    mask: Option<&Tensor>,
    num_heads: usize,
    c: &mut AttentionCaches,
    o: &mut Tensor,
) -> Result<()> {
    let f = Forward::selfish("mha_forward", x, w, b, mask, num_heads);
    run_forward(&f, Extra::None, c, o)
}

/// Backward of [`mha_forward`]: `dx (K, D)` overwritten; the weight gradients `g` and the
/// bias gradients present in `bg` (`D` elements each, for the biases the forward had)
/// accumulate.
#[allow(clippy::too_many_arguments)]
pub fn mha_backward(
    d_o: &Tensor,
    x: &Tensor,
    c: &AttentionCaches,
    w: Projections<'_>,
    mask: Option<&Tensor>,
    num_heads: usize,
    dx: &mut Tensor,
    g: ProjectionGrads<'_>,
    bg: BiasGrads<'_>,
) -> Result<()> {
    let bw = Backward {
        op: "mha_backward",
        d_o,
        x,
        ctx: None,
        c,
        w,
        mask,
        heads: num_heads,
        gate: Gate::Queries,
    };
    run_backward(&bw, dx, None, g, bg)
}

/// Training cross-attention forward (C++ `cross_attention_forward_train`): queries from
/// `x (Lq, D)`, keys and values from `ctx (Lk, D_ctx)` (`wk`, `wv` are `(D, D_ctx)`), an
/// optional F32 key `mask` of `Lk` (it gates queries too when `Lq == Lk`). Caches
/// `Qh (nh Lq, hd)`, `Kh`, `Vh (nh Lk, hd)`, `Attnh (nh Lq, Lk)`, `Yconcat (Lq, D)`;
/// `o (Lq, D)`.
pub fn cross_attention_forward_train(
    x: &Tensor,
    ctx: &Tensor,
    w: Projections<'_>,
    mask: Option<&Tensor>,
    num_heads: usize,
    c: &mut AttentionCaches,
    o: &mut Tensor,
) -> Result<()> {
    let f = Forward {
        op: "cross_attention_forward_train",
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
    run_forward(&f, Extra::None, c, o)
}

/// Backward of [`cross_attention_forward_train`]: `dx (Lq, D)` and `dctx (Lk, D_ctx)`
/// overwritten, the weight gradients `g` accumulated.
#[allow(clippy::too_many_arguments)]
pub fn cross_attention_backward(
    d_o: &Tensor,
    x: &Tensor,
    ctx: &Tensor,
    c: &AttentionCaches,
    w: Projections<'_>,
    mask: Option<&Tensor>,
    num_heads: usize,
    dx: &mut Tensor,
    dctx: &mut Tensor,
    g: ProjectionGrads<'_>,
) -> Result<()> {
    let bw = Backward {
        op: "cross_attention_backward",
        d_o,
        x,
        ctx: Some(ctx),
        c,
        w,
        mask,
        heads: num_heads,
        gate: Gate::WhenSquare,
    };
    run_backward(&bw, dx, Some(dctx), g, BiasGrads::default())
}

/// Training self-attention forward (C++ `self_attention_forward_train`): [`mha_forward`]
/// without biases.
pub fn self_attention_forward_train(
    x: &Tensor,
    w: Projections<'_>,
    mask: Option<&Tensor>,
    num_heads: usize,
    c: &mut AttentionCaches,
    o: &mut Tensor,
) -> Result<()> {
    let f = Forward::selfish(
        "self_attention_forward_train",
        x,
        w,
        ProjectionBiases::default(),
        mask,
        num_heads,
    );
    run_forward(&f, Extra::None, c, o)
}

/// Backward of [`self_attention_forward_train`]: [`mha_backward`] without bias gradients.
#[allow(clippy::too_many_arguments)]
pub fn self_attention_backward(
    d_o: &Tensor,
    x: &Tensor,
    c: &AttentionCaches,
    w: Projections<'_>,
    mask: Option<&Tensor>,
    num_heads: usize,
    dx: &mut Tensor,
    g: ProjectionGrads<'_>,
) -> Result<()> {
    let bw = Backward {
        op: "self_attention_backward",
        d_o,
        x,
        ctx: None,
        c,
        w,
        mask,
        heads: num_heads,
        gate: Gate::Queries,
    };
    run_backward(&bw, dx, None, g, BiasGrads::default())
}
