//! The flash category: flash attention forward passes, decode and the KV cache.

use super::{missing, OnDevice};
use crate::{Result, Tensor};

/// Heads and masking of one flash attention call over `q (lq, nq*hd)` and
/// `k, v (>= lk, nkv*hd)` (`lq`, `hd` come from the tensors).
///
/// Query head `h` reads KV head `h / (nq / nkv)`. Key `j` is kept for query row `i` when the
/// mask (if any) has `mask[j] > 0.5`; with `causal`, when `j <= i + q_offset`; with
/// `window > 0` (only with `causal`), when `j + window > i + q_offset`. With
/// `offset_from_mask`, `q_offset` is the index of the mask's last kept key instead (the
/// fixed-capacity decode). Scores are `q.k / sqrt(hd)`, then `softcap * tanh(s / softcap)`
/// when `softcap > 0`. A row with no kept key is zero.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct FlashSpec {
    /// The public op's name, for error messages.
    pub op: &'static str,
    /// Query heads.
    pub nq: usize,
    /// Key/value heads (divides `nq`).
    pub nkv: usize,
    /// Keys read: rows `[0, lk)` of `k` and `v` (a decode reads a prefix of its cache).
    pub lk: usize,
    /// Causal masking, aligned by `q_offset`.
    pub causal: bool,
    /// Position of query row 0.
    pub q_offset: usize,
    /// Sliding window (0: unbounded).
    pub window: usize,
    /// Logit soft-cap (0: none).
    pub softcap: f32,
    /// Take `q_offset` from the mask's last kept key.
    pub offset_from_mask: bool,
}

/// The prefix sums of a packed variable-length batch: the I32 tensors (on the op's device)
/// and their host copies, validated (monotone, starting at 0, ending at the rows), with the
/// longest query sequence.
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
pub(crate) struct SeqLens<'a> {
    /// `cu_seqlens_q` (batch + 1 values).
    pub q: &'a Tensor,
    /// `cu_seqlens_k` (batch + 1 values).
    pub k: &'a Tensor,
    /// `q`'s values.
    pub q_host: &'a [i32],
    /// `k`'s values.
    pub k_host: &'a [i32],
    /// The longest query sequence.
    pub max_q: usize,
}

/// Backend methods of the flash category (each with a default body returning
/// `Error::NotImplemented` through [`super::missing`]). Callers (the public functions in
/// `crate::ops`) validate shapes, dtypes and devices first: `q`, `k`, `v` and `o` share a
/// float dtype the device computes in, `o` is committed and sized `(lq, nq*hd)`, a mask is
/// F32 with `lk` values.
pub(crate) trait FlashAttentionOps: OnDevice {
    /// `o` = attention of `q` over `k`, `v` as `spec` describes.
    fn flash_attention(
        &self,
        _q: &Tensor,
        _k: &Tensor,
        _v: &Tensor,
        _mask: Option<&Tensor>,
        _spec: &FlashSpec,
        _o: &mut Tensor,
    ) -> Result<()> {
        Err(missing("flash_attention", self))
    }
    /// Packed variable-length attention (no GQA, no mask; causal per sequence, aligned at
    /// each sequence's start).
    fn flash_attention_varlen(
        &self,
        _q: &Tensor,
        _k: &Tensor,
        _v: &Tensor,
        _seqs: &SeqLens<'_>,
        _spec: &FlashSpec,
        _o: &mut Tensor,
    ) -> Result<()> {
        Err(missing("flash_attention_varlen_forward", self))
    }
    /// Copies `k_new`, `v_new` into rows `cur_len ..` of the caches (same dtype and
    /// columns, rows checked to fit).
    fn kv_cache_append(
        &self,
        _k_new: &Tensor,
        _v_new: &Tensor,
        _cur_len: usize,
        _k_cache: &mut Tensor,
        _v_cache: &mut Tensor,
    ) -> Result<()> {
        Err(missing("kv_cache_append", self))
    }
}
