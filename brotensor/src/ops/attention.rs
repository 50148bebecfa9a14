//! Attention without the flash kernels (C++ `ops/attention.h`): single-head and multi-head
//! self attention with their backward passes, cross attention, additive-bias and decomposed
//! relative-position attention, the slot and causal mask builders, and the token moments of
//! an attention map.
//!
//! Conventions (every op):
//! - Projections are `Y = X W^T (+ b)` with `W (out, in)`; head `h` of a `(L, D)` projection
//!   is columns `h hd .. (h + 1) hd` (`hd = D / num_heads`; `num_heads` must divide `D`).
//! - Per-head caches: `Qh`, `Kh`, `Vh` are `(num_heads L, hd)` with head `h` in rows
//!   `h L .. (h + 1) L`; `Attnh` is `(num_heads Lq, Lk)`; `Yconcat` is `(Lq, D)` (before the
//!   output projection and its bias).
//! - Scores are `scale Q_h K_h^T`, `scale = 1 / sqrt(hd)` unless the op takes a `scale`.
//! - A mask is an F32 tensor of one value per key (1 valid, 0 invalid: below 0.5 is
//!   invalid). Invalid keys get probability 0 (out of the denominator); a fully masked row
//!   is all zeros. Where the contract gates queries (self attention, and cross attention
//!   with `Lq == Lk`), an invalid query row has a zero `Attnh` row and a zero output row.
//! - Backward: weight and bias gradients accumulate into caller-sized tensors; input
//!   gradients (`dX`, `dCtx`) are overwritten.
//! - Every op is a composite of the batched matrix product, the masked row softmax and the
//!   element-wise ops, plus this category's small kernels (masks, row gating, the
//!   relative-position bias, window partitioning); it runs wherever those do: FP32 on the
//!   CPU, F32/F16/BF16 on the GPU (FP32 accumulation).

mod engine;
mod infer;
mod masks;
mod train;

pub use infer::*;
pub use masks::*;
pub use train::*;

use crate::Tensor;

/// The four projection weights of an attention block: `wq (D, D)`, `wk (D, D_kv)`,
/// `wv (D, D_kv)`, `wo (D, D)` (`D_kv = D` for self attention).
#[derive(Clone, Copy)]
pub struct Projections<'a> {
    /// Query projection `(D, D)`.
    pub wq: &'a Tensor,
    /// Key projection `(D, D_kv)`.
    pub wk: &'a Tensor,
    /// Value projection `(D, D_kv)`.
    pub wv: &'a Tensor,
    /// Output projection `(D, D)`.
    pub wo: &'a Tensor,
}

/// Optional projection biases, each of `D` elements (any shape), added row-wise after its
/// projection (`bo` after `wo`). `Default` is no biases.
#[derive(Clone, Copy, Default)]
pub struct ProjectionBiases<'a> {
    /// Added to `Q`.
    pub bq: Option<&'a Tensor>,
    /// Added to `K`.
    pub bk: Option<&'a Tensor>,
    /// Added to `V`.
    pub bv: Option<&'a Tensor>,
    /// Added to the output.
    pub bo: Option<&'a Tensor>,
}

/// The caches a training forward writes and its backward reads (each resized by the
/// forward). Multi-head: `q (nh Lq, hd)`, `k`, `v (nh Lk, hd)`, `attn (nh Lq, Lk)`,
/// `y (Lq, D)`; single head (`attention_forward`): `Q`, `K`, `V (N, D)`, `Attn (N, N)`,
/// `Y_pre_Wo (N, D)`.
#[derive(Default)]
pub struct AttentionCaches {
    /// Projected queries, per head (`Qh`).
    pub q: Tensor,
    /// Projected keys, per head (`Kh`).
    pub k: Tensor,
    /// Projected values, per head (`Vh`).
    pub v: Tensor,
    /// Post-softmax attention weights, per head (`Attnh`).
    pub attn: Tensor,
    /// The heads' outputs concatenated, before the output projection (`Yconcat`).
    pub y: Tensor,
}

/// The weight gradients of a backward pass, shaped like [`Projections`]; they accumulate,
/// so each must be pre-sized (and usually zeroed) by the caller.
pub struct ProjectionGrads<'a> {
    /// `dWq (D, D)`.
    pub dwq: &'a mut Tensor,
    /// `dWk (D, D_kv)`.
    pub dwk: &'a mut Tensor,
    /// `dWv (D, D_kv)`.
    pub dwv: &'a mut Tensor,
    /// `dWo (D, D)`.
    pub dwo: &'a mut Tensor,
}

/// Optional bias gradients of [`mha_backward`], each `(D, 1)` pre-sized; they accumulate.
/// Pass the ones whose bias the forward had. `Default` is none.
#[derive(Default)]
pub struct BiasGrads<'a> {
    /// `dbq`.
    pub dbq: Option<&'a mut Tensor>,
    /// `dbk`.
    pub dbk: Option<&'a mut Tensor>,
    /// `dbv`.
    pub dbv: Option<&'a mut Tensor>,
    /// `dbo`.
    pub dbo: Option<&'a mut Tensor>,
}

/// INT8 weight-only projections of [`self_attention_bias_int8w_fp16`]: each weight is I8
/// `(D, D)` with F32 per-row dequantization scales `(D, 1)` (the
/// [`quantize_int8_per_row_host`](crate::ops::quantize_int8_per_row_host) convention).
#[derive(Clone, Copy)]
pub struct Int8Projections<'a> {
    /// `Wq` I8.
    pub wq: &'a Tensor,
    /// `Wq`'s row scales.
    pub sq: &'a Tensor,
    /// `Wk` I8.
    pub wk: &'a Tensor,
    /// `Wk`'s row scales.
    pub sk: &'a Tensor,
    /// `Wv` I8.
    pub wv: &'a Tensor,
    /// `Wv`'s row scales.
    pub sv: &'a Tensor,
    /// `Wo` I8.
    pub wo: &'a Tensor,
    /// `Wo`'s row scales.
    pub so: &'a Tensor,
}
