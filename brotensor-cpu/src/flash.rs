//! CPU reference of the flash category: flash attention forward passes, decode and the KV
//! cache.
//!
//! One blocked online-softmax walk serves every forward variant: a set of query rows of one
//! KV head's query heads goes over the keys in tiles of `KEY_TILE`, keeping a running
//! maximum, sum and FP32 accumulator per row, so no `Lq x Lk` score matrix is ever held.
//! The two products of a tile run as register-blocked micro-kernels (see the `tile` module).
//!
//! - Prefill ([`QUERY_BLOCK`] query rows or more): K is packed transposed per KV head once,
//!   and rayon spreads (KV head, block of [`QUERY_BLOCK`] query rows); causal blocks walk
//!   only the key tiles they may see.
//! - Few query rows (decode): the keys are split into chunks (split-KV), one task per (KV
//!   head, chunk) keeps a partial softmax, and a combine step merges the chunks, so every
//!   core streams its part of the cache.

use rayon::prelude::*;

mod tile;

use tile::{Rows, KEY_TILE};

/// Query rows one prefill task handles.
pub const QUERY_BLOCK: usize = 16;
/// Keys a decode chunk holds at least (a chunk's partial softmax costs one combine).
const MIN_CHUNK: usize = 512;
/// Tasks per thread the split-KV path aims at.
const TASKS_PER_THREAD: usize = 8;

/// Geometry and masking of one attention call over `q (lq, nq*hd)`, `k, v (lk, nkv*hd)`.
///
/// Query head `h` reads KV head `h / (nq / nkv)`. Key `j` is kept for query row `i` when the
/// mask (if any) has `mask[j] > 0.5`, and, with `causal`, when `j <= i + q_offset` (query `i`
/// sits at position `i + q_offset`), and, with `window > 0` (only with `causal`), when
/// `j + window > i + q_offset`. Scores are `q.k * scale`, then `softcap * tanh(s / softcap)`
/// when `softcap > 0`. A row with no kept key is zero.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Attention {
    /// Query rows.
    pub lq: usize,
    /// Key rows.
    pub lk: usize,
    /// Query heads.
    pub nq: usize,
    /// Key/value heads (divides `nq`).
    pub nkv: usize,
    /// Head dimension.
    pub hd: usize,
    /// Keep only keys at or before the query's position.
    pub causal: bool,
    /// Position of query row 0.
    pub q_offset: usize,
    /// Sliding window length (0: unbounded).
    pub window: usize,
    /// Logit soft-cap (0: none).
    pub softcap: f32,
    /// Score scale (usually `1 / sqrt(hd)`).
    pub scale: f32,
}

impl Attention {
    /// The key range `[lo, hi)` query row `i` may attend (before the mask).
    fn key_range(&self, i: usize) -> (usize, usize) {
        if !self.causal {
            return (0, self.lk);
        }
        let pos = i + self.q_offset;
        let hi = (pos + 1).min(self.lk);
        let lo = if self.window > 0 {
            (pos + 1).saturating_sub(self.window)
        } else {
            0
        };
        (lo.min(hi), hi)
    }
}

/// `o (lq, nq*hd)` = attention of `q` over `k`, `v` as [`Attention`] describes; `mask`, when
/// given, holds `lk` values. Lengths: `q` and `o` `lq*nq*hd`, `k` and `v` `lk*nkv*hd`.
///
/// From [`QUERY_BLOCK`] query rows on, one task per (KV head, block of query rows) takes
/// every query head of that KV head's group, so each K/V tile is read once for the whole
/// group; below, the keys are split across tasks and the partial results combined.
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[f32]>,
    a: &Attention,
    o: &mut [f32],
) {
    let (lq, hd, nkv) = (a.lq, a.hd, a.nkv);
    if lq == 0 || hd == 0 || nkv == 0 {
        return;
    }
    if lq < QUERY_BLOCK {
        return split_kv(q, k, v, mask, a, o);
    }
    let kt = pack_keys(k, a);
    let lkp = kt.len() / (nkv * hd);
    // Scratch laid out (nkv, lq, group, hd) so that tasks own disjoint slices; a KV head's
    // `group * hd` values of a query row are then the contiguous columns of that row of `o`.
    let gw = a.nq / nkv * hd;
    let mut groups = vec![0.0f32; nkv * lq * gw];
    groups
        .par_chunks_mut(lq * gw)
        .enumerate()
        .for_each(|(g, out_g)| {
            let kt = &kt[g * hd * lkp..(g + 1) * hd * lkp];
            out_g
                .par_chunks_mut(QUERY_BLOCK * gw)
                .enumerate()
                .for_each(|(b, out)| block(q, kt, v, mask, a, g, b * QUERY_BLOCK, out));
        });
    let d = a.nq * hd;
    o.par_chunks_mut(d).enumerate().for_each(|(i, row)| {
        for g in 0..nkv {
            let src = &groups[(g * lq + i) * gw..(g * lq + i + 1) * gw];
            row[g * gw..(g + 1) * gw].copy_from_slice(src);
        }
    });
}

/// K transposed per KV head, `(nkv, hd, lkp)` with `lkp` = `lk` rounded up to whole
/// [`KEY_TILE`]s (zero past `lk`), so a tile's scores read whole vectors of keys.
fn pack_keys(k: &[f32], a: &Attention) -> Vec<f32> {
    const STEP: usize = 16;
    let (hd, dkv) = (a.hd, a.nkv * a.hd);
    let lkp = a.lk.div_ceil(KEY_TILE) * KEY_TILE;
    let mut kt = vec![0.0f32; a.nkv * hd * lkp];
    kt.par_chunks_mut(hd * lkp).enumerate().for_each(|(g, kt)| {
        for j0 in (0..a.lk).step_by(STEP) {
            let n = STEP.min(a.lk - j0);
            for d in 0..hd {
                let dst = &mut kt[d * lkp + j0..d * lkp + j0 + n];
                for (c, x) in dst.iter_mut().enumerate() {
                    *x = k[(j0 + c) * dkv + g * hd + d];
                }
            }
        }
    });
    kt
}

/// The query rows `(i0 .. i0 + positions)` of KV head `g`'s group, scaled: row
/// `r = ii * group + hh` is query row `i0 + ii` of query head `g * group + hh`.
fn gather_queries(
    q: &[f32],
    a: &Attention,
    g: usize,
    i0: usize,
    positions: usize,
    rows: &mut Rows,
) {
    let (hd, group) = (a.hd, a.nq / a.nkv);
    let dq = a.nq * hd;
    for r in 0..positions * group {
        let (i, h) = (i0 + r / group, g * group + r % group);
        let src = &q[i * dq + h * hd..i * dq + (h + 1) * hd];
        for (x, &y) in rows.query_mut(r).iter_mut().zip(src) {
            *x = y * a.scale;
        }
    }
}

/// One prefill task (KV head `g`, query block from row `i0`) over `kt`, K of head `g`
/// packed by [`pack_keys`]: `out` holds `(rows, group, hd)` for the block's rows and the
/// group's query heads.
#[allow(clippy::too_many_arguments)]
fn block(
    q: &[f32],
    kt: &[f32],
    v: &[f32],
    mask: Option<&[f32]>,
    a: &Attention,
    g: usize,
    i0: usize,
    out: &mut [f32],
) {
    let group = a.nq / a.nkv;
    let positions = out.len() / (group * a.hd);
    let mut rows = Rows::new(positions * group, a.hd, tile::QK_ROWS);
    gather_queries(q, a, g, i0, positions, &mut rows);
    let lo = a.key_range(i0).0;
    let hi = a.key_range(i0 + positions - 1).1;
    let pos = |r: usize| i0 + r / group;
    // Tiles start on multiples of KEY_TILE, so they never read past the packed keys.
    rows.walk_packed(kt, v, a, g, mask, lo / KEY_TILE * KEY_TILE, hi, pos);
    rows.finish(out);
}

/// Attention for fewer than [`QUERY_BLOCK`] query rows: one task per (KV head, chunk of
/// keys) keeps the partial softmax of every query row of the head's group over its chunk;
/// then each row's partials are merged (rescaled to the largest maximum).
fn split_kv(q: &[f32], k: &[f32], v: &[f32], mask: Option<&[f32]>, a: &Attention, o: &mut [f32]) {
    let (lq, hd, nkv) = (a.lq, a.hd, a.nkv);
    let group = a.nq / nkv;
    let lo = a.key_range(0).0;
    let hi = a.key_range(lq - 1).1;
    if hi <= lo {
        return o.fill(0.0);
    }
    let span = hi - lo;
    let wanted = (TASKS_PER_THREAD * rayon::current_num_threads()).div_ceil(nkv);
    let chunk = span.div_ceil(wanted).max(MIN_CHUNK);
    let chunks = span.div_ceil(chunk);
    let rows_n = lq * group;
    // Per (head, chunk): `rows_n` maxima, `rows_n` sums, then `rows_n * hd` accumulators.
    let part = rows_n * (hd + 2);
    let mut parts = vec![0.0f32; nkv * chunks * part];
    parts.par_chunks_mut(part).enumerate().for_each(|(t, dst)| {
        let (g, c) = (t / chunks, t % chunks);
        let c0 = lo + c * chunk;
        let c1 = (c0 + chunk).min(hi);
        let mut rows = Rows::new(rows_n, hd, tile::PV_ROWS);
        gather_queries(q, a, g, 0, lq, &mut rows);
        let pos = |r: usize| r / group;
        rows.walk_rows(k, v, a, g, mask, c0, c1, pos);
        rows.save_partial(dst);
    });
    let d = a.nq * hd;
    o.par_chunks_mut(d).enumerate().for_each(|(i, row)| {
        for g in 0..nkv {
            for hh in 0..group {
                let r = i * group + hh;
                let parts_of =
                    |c: usize| &parts[(g * chunks + c) * part..(g * chunks + c + 1) * part];
                let dst = &mut row[(g * group + hh) * hd..(g * group + hh + 1) * hd];
                tile::combine(chunks, parts_of, rows_n, r, hd, dst);
            }
        }
    });
}

/// Packed variable-length attention: sequence `b` covers query rows
/// `cu_q[b] .. cu_q[b + 1]` and key rows `cu_k[b] .. cu_k[b + 1]`; `geom` gives the heads,
/// head dim, causal flag (per sequence, aligned at each sequence's start) and scale, its
/// `lq`/`lk` are ignored. The caller guarantees the prefix sums are monotone and end at the
/// rows of `q`/`o` and `k`/`v`.
pub fn attention_varlen(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    cu_q: &[i32],
    cu_k: &[i32],
    geom: &Attention,
    o: &mut [f32],
) {
    let (dq, dkv) = (geom.nq * geom.hd, geom.nkv * geom.hd);
    for b in 0..cu_q.len().saturating_sub(1) {
        let (q0, q1) = (cu_q[b] as usize, cu_q[b + 1] as usize);
        let (k0, k1) = (cu_k[b] as usize, cu_k[b + 1] as usize);
        let a = Attention {
            lq: q1 - q0,
            lk: k1 - k0,
            ..*geom
        };
        attention(
            &q[q0 * dq..q1 * dq],
            &k[k0 * dkv..k1 * dkv],
            &v[k0 * dkv..k1 * dkv],
            None,
            &a,
            &mut o[q0 * dq..q1 * dq],
        );
    }
}

/// Copies `new` (rows of `cols` elements) into `cache` from row `at` on.
pub fn cache_append<T: Copy>(new: &[T], at: usize, cols: usize, cache: &mut [T]) {
    cache[at * cols..at * cols + new.len()].copy_from_slice(new);
}

/// The position of the last key with `mask > 0.5` (the decode query's position in a
/// fixed-capacity cache), if any.
pub fn last_valid(mask: &[f32]) -> Option<usize> {
    mask.iter().rposition(|&m| m > 0.5)
}
