//! The flash_attention ops: flash attention forward passes, decode and the KV cache.
//!
//! Every op here runs one tiled online-softmax core (FP32 scores and accumulators, never an
//! `Lq x Lk` score matrix) over pre-projected `Q (Lq, nq*hd)` and `K, V (Lk, nkv*hd)`; the
//! projected forms (`_qkvo_`, `_project_kv`, `_q_with_kv_cached_`, the INT8-weight variants)
//! are composites of the linear ops and this core (in its `projected` submodule).
//!
//! Common rules: scale `1 / sqrt(hd)`; an optional F32 key `mask` of `Lk` values drops key
//! `k` where `mask[k] <= 0.5`; a query row with no kept key gives a zero output row; GQA
//! query head `h` reads KV head `h / (nq / nkv)` from the shared K/V (never copied). Dtypes:
//! F32, F16 and BF16 on every device (FP32 math inside; the CPU widens 16-bit operands into
//! F32 scratch). Outputs are resized and overwritten.

mod projected;

pub use projected::*;

use super::{check_dtypes_match, declare, dispatch, input, input_opt, updated, written};
use crate::backend::{FlashSpec, SeqLens};
use crate::ops::Dispatched;
use crate::{Dtype, Error, Result, Tensor};

/// The shared checks of the attention core: devices, dtypes, `K`/`V` shapes, the head split
/// (`nkv` divides `nq`, `nq` divides `Q`'s columns, `K` has `nkv` heads of the same size) and
/// the mask (F32, `mask_len` values). Sizes `o` like `q`; returns the backend and head dim.
#[allow(clippy::too_many_arguments)]
fn check_core(
    op: &'static str,
    q: &Tensor,
    [(kn, k), (vn, v)]: [(&'static str, &Tensor); 2],
    mask: Option<&Tensor>,
    mask_len: usize,
    (nq, nkv): (usize, usize),
    o: &mut Tensor,
) -> Result<(Dispatched, usize)> {
    let be = dispatch(
        op,
        &[
            input("q", q).float(),
            input(kn, k),
            input(vn, v),
            input_opt("mask", mask),
            written("o", o),
        ],
    )?;
    check_dtypes_match(op, ("q", q), &[("k", k), ("v", v)])?;
    if k.shape() != v.shape() {
        return Err(Error::shape(
            op,
            format!("`k` is {:?} but `v` is {:?}", k.dims(), v.dims()),
        ));
    }
    if nq == 0 || nkv == 0 {
        return Err(Error::invalid(op, "head counts must be >= 1"));
    }
    if !nq.is_multiple_of(nkv) {
        return Err(Error::invalid(
            op,
            format!("num_kv_heads = {nkv} does not divide num_q_heads = {nq}"),
        ));
    }
    if !q.cols().is_multiple_of(nq) {
        return Err(Error::shape(
            op,
            format!("num_heads = {nq} does not divide D = {}", q.cols()),
        ));
    }
    let hd = q.cols() / nq;
    if hd == 0 || k.cols() != nkv * hd {
        return Err(Error::shape(
            op,
            format!(
                "`k` has {} columns but {nkv} KV heads of head_dim {hd} need {}",
                k.cols(),
                nkv * hd
            ),
        ));
    }
    check_key_mask(op, mask, mask_len)?;
    be.out("o", o, &[q.rows(), q.cols()], q.dtype())?;
    Ok((be, hd))
}

/// Checks an optional key mask (the forward core's and the backward's): F32 with
/// `mask_len` values.
pub(super) fn check_key_mask(
    op: &'static str,
    mask: Option<&Tensor>,
    mask_len: usize,
) -> Result<()> {
    let Some(m) = mask else { return Ok(()) };
    if m.dtype() != Dtype::F32 {
        return Err(Error::Dtype {
            op,
            operand: "mask",
            expected: "must be F32".into(),
            found: m.dtype(),
        });
    }
    if m.numel() != mask_len {
        return Err(Error::shape(
            op,
            format!("`mask` has {} values but needs {mask_len}", m.numel()),
        ));
    }
    Ok(())
}

/// A plain (non-causal-offset, no cap) core spec over `lk` keys.
fn spec(op: &'static str, nq: usize, nkv: usize, lk: usize, causal: bool) -> FlashSpec {
    FlashSpec {
        op,
        nq,
        nkv,
        lk,
        causal,
        q_offset: 0,
        window: 0,
        softcap: 0.0,
        offset_from_mask: false,
    }
}

/// Runs the core unless there is nothing to compute (no query rows; no keys gives zeros).
fn run(
    be: Dispatched,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    mask: Option<&Tensor>,
    spec: &FlashSpec,
    o: &mut Tensor,
) -> Result<()> {
    if q.rows() == 0 {
        return Ok(());
    }
    if spec.lk == 0 {
        return o.zero();
    }
    be.flash_attention(q, k, v, mask, spec, o)
}

/// `O (Lq, D)` = multi-head attention of `Q (Lq, D)` over `K, V (Lk, D)`, `D = num_heads *
/// hd`. `causal` keeps key `k` for query `q` only when `k <= q` and requires `Lq == Lk`; it
/// combines with the optional F32 key `mask` (`Lk` values, `<= 0.5` drops the key).
pub fn flash_attention_forward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    num_heads: usize,
    causal: bool,
    o: &mut Tensor,
) -> Result<()> {
    let op = "flash_attention_forward";
    let (be, _) = check_core(
        op,
        q,
        [("k", k), ("v", v)],
        mask,
        k.rows(),
        (num_heads, num_heads),
        o,
    )?;
    if causal && q.rows() != k.rows() {
        return Err(Error::shape(
            op,
            format!(
                "causal needs Lq == Lk (Lq = {}, Lk = {})",
                q.rows(),
                k.rows()
            ),
        ));
    }
    let s = spec(op, num_heads, num_heads, k.rows(), causal);
    run(be, (q, k, v), mask, &s, o)
}

/// Grouped-query attention: `Q (Lq, nq*hd)`, `K, V (Lk, nkv*hd)` with `nkv` dividing `nq`;
/// `O (Lq, nq*hd)`. Requires `Lk >= Lq`; `causal` (top-left, as
/// [`flash_attention_forward`]) additionally `Lq == Lk`; `causal == false` is bidirectional.
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_gqa_forward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    num_q_heads: usize,
    num_kv_heads: usize,
    causal: bool,
    o: &mut Tensor,
) -> Result<()> {
    let op = "flash_attention_gqa_forward";
    let heads = (num_q_heads, num_kv_heads);
    let (be, _) = check_core(op, q, [("k", k), ("v", v)], mask, k.rows(), heads, o)?;
    if k.rows() < q.rows() {
        return Err(Error::shape(
            op,
            format!("needs Lk >= Lq (Lq = {}, Lk = {})", q.rows(), k.rows()),
        ));
    }
    if causal && q.rows() != k.rows() {
        return Err(Error::shape(
            op,
            format!(
                "causal needs Lq == Lk (Lq = {}, Lk = {})",
                q.rows(),
                k.rows()
            ),
        ));
    }
    let s = spec(op, num_q_heads, num_kv_heads, k.rows(), causal);
    run(be, (q, k, v), mask, &s, o)
}

/// Sliding-window causal attention: the `Lq` queries are the last `Lq` positions of the `Lk`
/// keys (query `r` sits at `p = r + Lk - Lq`) and attend keys `[max(0, p - window + 1), p]`;
/// `window == 0` is unbounded. `Q (Lq, num_heads*hd)`; `K, V (Lk, nkv*hd)` with the KV heads
/// taken from `K`'s columns (GQA). Requires `Lk >= Lq`.
pub fn flash_attention_windowed_forward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    num_heads: usize,
    window: usize,
    o: &mut Tensor,
) -> Result<()> {
    let op = "flash_attention_windowed_forward";
    let hd = if num_heads > 0 && q.cols().is_multiple_of(num_heads) {
        q.cols() / num_heads
    } else {
        0
    };
    // Unknown head dim: the core reports the head split; else K's columns give the KV heads.
    let nkv = if hd > 0 && k.cols().is_multiple_of(hd) {
        k.cols() / hd
    } else {
        num_heads
    };
    let (be, _) = check_core(
        op,
        q,
        [("k", k), ("v", v)],
        mask,
        k.rows(),
        (num_heads, nkv),
        o,
    )?;
    if k.rows() < q.rows() {
        return Err(Error::shape(
            op,
            format!("needs Lk >= Lq (Lq = {}, Lk = {})", q.rows(), k.rows()),
        ));
    }
    let s = FlashSpec {
        q_offset: k.rows() - q.rows(),
        window,
        ..spec(op, num_heads, nkv, k.rows(), true)
    };
    run(be, (q, k, v), mask, &s, o)
}

/// Reads and checks a prefix-sum operand: I32, `batch + 1` values, starting at 0, never
/// decreasing, ending at `rows`. Returns the values and the longest sequence.
pub(super) fn seqlens(
    op: &'static str,
    name: &'static str,
    cu: &Tensor,
    rows: usize,
) -> Result<(Vec<i32>, usize)> {
    if cu.dtype() != Dtype::I32 {
        return Err(Error::Dtype {
            op,
            operand: name,
            expected: "must be I32".into(),
            found: cu.dtype(),
        });
    }
    if cu.numel() == 0 {
        return Err(Error::shape(
            op,
            format!("`{name}` needs batch + 1 >= 1 values"),
        ));
    }
    let vals = cu.to_vec::<i32>()?;
    if vals[0] != 0 {
        return Err(Error::invalid(op, format!("`{name}` must start at 0")));
    }
    let mut longest = 0usize;
    for w in vals.windows(2) {
        if w[1] < w[0] {
            return Err(Error::invalid(
                op,
                format!("`{name}` is not monotone ({} then {})", w[0], w[1]),
            ));
        }
        longest = longest.max((w[1] - w[0]) as usize);
    }
    let last = *vals.last().unwrap_or(&0);
    if last as usize != rows {
        return Err(Error::invalid(
            op,
            format!("`{name}` ends at {last} but the packed tensor has {rows} rows"),
        ));
    }
    Ok((vals, longest))
}

/// Packed variable-length attention: sequence `b` takes query rows
/// `cu_seqlens_q[b] .. cu_seqlens_q[b+1]` and key rows `cu_seqlens_k[b] .. cu_seqlens_k[b+1]`
/// (I32 prefix sums of `batch + 1` values, on the op's device; `batch` is their length minus
/// one). `Q (total_q, num_heads*head_dim)`, `K, V (total_k, same)`, no GQA; `causal` keeps
/// key `k` for query `q` of a sequence when `k - k_start <= q - q_start`. `max_seqlen_q` and
/// `max_seqlen_k` must bound the longest sequences. The prefix sums are read back once and
/// checked (start at 0, monotone, end at the rows), so a bad one is an error, never a stray
/// read; on a GPU that read waits for queued work.
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_varlen_forward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    cu_seqlens_q: &Tensor,
    cu_seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    num_heads: usize,
    head_dim: usize,
    causal: bool,
    o: &mut Tensor,
) -> Result<()> {
    let op = "flash_attention_varlen_forward";
    declare(
        op,
        &[
            input("q", q),
            input("k", k),
            input("v", v),
            input("cu_seqlens_q", cu_seqlens_q),
            input("cu_seqlens_k", cu_seqlens_k),
            written("o", o),
        ],
    )?;
    let heads = (num_heads, num_heads);
    let (be, hd) = check_core(op, q, [("k", k), ("v", v)], None, 0, heads, o)?;
    if hd != head_dim {
        return Err(Error::shape(
            op,
            format!(
                "`q` has {} columns, not num_heads * head_dim = {num_heads} * {head_dim}",
                q.cols()
            ),
        ));
    }
    let (cq, lq) = seqlens(op, "cu_seqlens_q", cu_seqlens_q, q.rows())?;
    let (ck, lk) = seqlens(op, "cu_seqlens_k", cu_seqlens_k, k.rows())?;
    if cq.len() != ck.len() {
        return Err(Error::shape(
            op,
            format!(
                "`cu_seqlens_q` has {} values, `cu_seqlens_k` {}",
                cq.len(),
                ck.len()
            ),
        ));
    }
    if lq > max_seqlen_q || lk > max_seqlen_k {
        return Err(Error::invalid(
            op,
            format!(
                "the longest sequences ({lq} queries, {lk} keys) exceed max_seqlen_q = \
                 {max_seqlen_q} / max_seqlen_k = {max_seqlen_k}"
            ),
        ));
    }
    if q.rows() == 0 {
        return Ok(());
    }
    // Sequences with no keys give zero rows; the backends skip them.
    o.zero()?;
    let seqs = SeqLens {
        q: cu_seqlens_q,
        k: cu_seqlens_k,
        q_host: &cq,
        k_host: &ck,
        max_q: lq,
    };
    be.flash_attention_varlen(
        q,
        k,
        v,
        &seqs,
        &spec(op, num_heads, num_heads, k.rows(), causal),
        o,
    )
}

/// Checks a soft-cap value: finite and `>= 0` (0 disables it).
fn check_softcap(op: &'static str, softcap: f32) -> Result<()> {
    if !(softcap.is_finite() && softcap >= 0.0) {
        return Err(Error::invalid(
            op,
            format!("attn_softcap = {softcap} must be finite and >= 0"),
        ));
    }
    Ok(())
}

/// Causal attention of `Q (Lq, nq*hd)` over rows `[0, valid_len)` of the caches
/// `K_cache, V_cache (Lmax, nkv*hd)`: query `i` sits at `p = valid_len - Lq + i` and attends
/// keys `[0, p]`, or `[max(0, p - window + 1), p]` with `window > 0`. `attn_softcap > 0`
/// replaces each scaled score `s` by `cap * tanh(s / cap)` before masking. Requires
/// `Lq <= valid_len <= Lmax`. Long caches with few queries split the keys across cubes on
/// GPUs (split-KV) and combine the partial softmaxes.
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_decode(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    valid_len: usize,
    num_q_heads: usize,
    num_kv_heads: usize,
    attn_softcap: f32,
    window: usize,
    o: &mut Tensor,
) -> Result<()> {
    let op = "flash_attention_decode";
    let heads = (num_q_heads, num_kv_heads);
    let (be, _) = check_core(
        op,
        q,
        [("k_cache", k_cache), ("v_cache", v_cache)],
        None,
        0,
        heads,
        o,
    )?;
    check_softcap(op, attn_softcap)?;
    if valid_len > k_cache.rows() {
        return Err(Error::shape(
            op,
            format!(
                "valid_len = {valid_len} exceeds the cache's {} rows",
                k_cache.rows()
            ),
        ));
    }
    if valid_len < q.rows() {
        return Err(Error::shape(
            op,
            format!("valid_len = {valid_len} is below Lq = {}", q.rows()),
        ));
    }
    let s = FlashSpec {
        q_offset: valid_len - q.rows(),
        window,
        softcap: attn_softcap,
        ..spec(op, num_q_heads, num_kv_heads, valid_len, true)
    };
    run(be, (q, k_cache, v_cache), None, &s, o)
}

/// Single-query decode over a fixed-capacity cache: `Q (1, nq*hd)`, `K_cache, V_cache (Lmax,
/// nkv*hd)`, F32 `mask` of `Lmax` values (`<= 0.5` drops the key). The query's position `p`
/// is the last kept key; with `window > 0` only keys in `[p - window + 1, p]` stay. Soft-cap
/// as [`flash_attention_decode`]. A mask with no kept key gives a zero row.
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_decode_masked(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    mask: &Tensor,
    num_q_heads: usize,
    num_kv_heads: usize,
    attn_softcap: f32,
    window: usize,
    o: &mut Tensor,
) -> Result<()> {
    let op = "flash_attention_decode_masked";
    let heads = (num_q_heads, num_kv_heads);
    let (be, _) = check_core(
        op,
        q,
        [("k_cache", k_cache), ("v_cache", v_cache)],
        Some(mask),
        k_cache.rows(),
        heads,
        o,
    )?;
    check_softcap(op, attn_softcap)?;
    if q.rows() != 1 {
        return Err(Error::shape(
            op,
            format!("takes one query row, `q` has {}", q.rows()),
        ));
    }
    let s = FlashSpec {
        window,
        softcap: attn_softcap,
        offset_from_mask: true,
        ..spec(op, num_q_heads, num_kv_heads, k_cache.rows(), true)
    };
    run(be, (q, k_cache, v_cache), Some(mask), &s, o)
}

/// Copies `K_new, V_new (L_new, D)` into rows `[cur_len, cur_len + L_new)` of the pre-sized
/// caches `K_cache, V_cache (L_max, D)` (same dtype; never resized). Errors when
/// `cur_len + L_new > L_max`.
pub fn kv_cache_append(
    k_new: &Tensor,
    v_new: &Tensor,
    cur_len: usize,
    k_cache: &mut Tensor,
    v_cache: &mut Tensor,
) -> Result<()> {
    let op = "kv_cache_append";
    for (name, t) in [("k_cache", &*k_cache), ("v_cache", &*v_cache)] {
        if !t.is_committed() {
            return Err(Error::invalid(op, format!("`{name}` must be pre-sized")));
        }
        t.check_writable(op, name)?;
    }
    let be = dispatch(
        op,
        &[
            input("k_new", k_new).float(),
            input("v_new", v_new),
            updated("k_cache", k_cache),
            updated("v_cache", v_cache),
        ],
    )?;
    let caches = [
        ("v_new", v_new),
        ("k_cache", &*k_cache),
        ("v_cache", &*v_cache),
    ];
    check_dtypes_match(op, ("k_new", k_new), &caches)?;
    if v_new.shape() != k_new.shape() || v_cache.shape() != k_cache.shape() {
        return Err(Error::shape(
            op,
            "`k_new`/`v_new` and `k_cache`/`v_cache` must match in shape",
        ));
    }
    if k_new.cols() != k_cache.cols() {
        return Err(Error::shape(
            op,
            format!(
                "the new rows have {} columns, the cache {}",
                k_new.cols(),
                k_cache.cols()
            ),
        ));
    }
    let end = cur_len.checked_add(k_new.rows());
    if end.is_none_or(|e| e > k_cache.rows()) {
        return Err(Error::shape(
            op,
            format!(
                "cur_len {cur_len} + L_new {} overflows the cache's {} rows",
                k_new.rows(),
                k_cache.rows()
            ),
        ));
    }
    if k_new.numel() == 0 {
        return Ok(());
    }
    be.kv_cache_append(k_new, v_new, cur_len, k_cache, v_cache)
}
