//! CPU reference of the flash category: flash attention forward passes, decode and the KV
//! cache.
//!
//! One blocked online-softmax core ([`attention`]) serves every forward variant: a block of
//! [`QUERY_BLOCK`] query rows of one head walks the keys in tiles of [`KEY_TILE`], keeping a
//! running maximum, sum and FP32 accumulator per row, so no `Lq x Lk` score matrix is ever
//! held. Work is spread over (head, query block) with rayon; the inner loops are plain
//! slice loops compiled for the widest vector unit (see [`crate::simd::wide`]).

use rayon::prelude::*;

use crate::simd::wide;

/// Query rows one task handles.
pub const QUERY_BLOCK: usize = 16;
/// Keys scored at a time per row.
pub const KEY_TILE: usize = 64;

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
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[f32]>,
    a: &Attention,
    o: &mut [f32],
) {
    let (lq, hd, nq) = (a.lq, a.hd, a.nq);
    if lq == 0 || hd == 0 || nq == 0 {
        return;
    }
    // Head-major scratch (nq, lq, hd) so that tasks own disjoint slices; then one pass
    // interleaves the heads into `o`.
    let mut heads = vec![0.0f32; nq * lq * hd];
    heads
        .par_chunks_mut(lq * hd)
        .enumerate()
        .for_each(|(h, out_h)| {
            out_h
                .par_chunks_mut(QUERY_BLOCK * hd)
                .enumerate()
                .for_each(|(b, out)| block(q, k, v, mask, a, h, b * QUERY_BLOCK, out));
        });
    let d = nq * hd;
    o.par_chunks_mut(d).enumerate().for_each(|(i, row)| {
        for h in 0..nq {
            let src = &heads[(h * lq + i) * hd..(h * lq + i + 1) * hd];
            row[h * hd..(h + 1) * hd].copy_from_slice(src);
        }
    });
}

/// One (head, query block): rows `i0 .. i0 + out.len() / hd` of head `h` into `out`.
#[allow(clippy::too_many_arguments)]
fn block(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[f32]>,
    a: &Attention,
    h: usize,
    i0: usize,
    out: &mut [f32],
) {
    let hd = a.hd;
    let rows = out.len() / hd;
    let (dq, dkv) = (a.nq * hd, a.nkv * hd);
    let kvh = h / (a.nq / a.nkv);
    let mut qs = vec![0.0f32; rows * hd];
    for r in 0..rows {
        let src = &q[(i0 + r) * dq + h * hd..(i0 + r) * dq + (h + 1) * hd];
        qs[r * hd..(r + 1) * hd].copy_from_slice(src);
    }
    let mut m = vec![f32::NEG_INFINITY; rows];
    let mut l = vec![0.0f32; rows];
    let mut s = [0.0f32; KEY_TILE];
    // The union of the rows' key ranges.
    let lo = a.key_range(i0).0;
    let hi = a.key_range(i0 + rows - 1).1;
    wide(
        #[inline(always)]
        |_| {
            let mut j0 = lo;
            while j0 < hi {
                let j1 = (j0 + KEY_TILE).min(hi);
                for r in 0..rows {
                    let (rlo, rhi) = a.key_range(i0 + r);
                    let (t0, t1) = (j0.max(rlo), j1.min(rhi));
                    if t0 >= t1 {
                        continue;
                    }
                    let qr = &qs[r * hd..(r + 1) * hd];
                    let mut tile_max = f32::NEG_INFINITY;
                    for j in t0..t1 {
                        let sj = &mut s[j - j0];
                        if mask.is_some_and(|mk| mk[j] <= 0.5) {
                            *sj = f32::NEG_INFINITY;
                            continue;
                        }
                        let kr = &k[j * dkv + kvh * hd..j * dkv + (kvh + 1) * hd];
                        let mut x = dot(qr, kr) * a.scale;
                        if a.softcap > 0.0 {
                            x = a.softcap * (x / a.softcap).tanh();
                        }
                        *sj = x;
                        tile_max = tile_max.max(x);
                    }
                    if tile_max == f32::NEG_INFINITY {
                        continue;
                    }
                    let m_new = m[r].max(tile_max);
                    let alpha = (m[r] - m_new).exp();
                    let acc = &mut out[r * hd..(r + 1) * hd];
                    if alpha != 1.0 {
                        for x in acc.iter_mut() {
                            *x *= alpha;
                        }
                    }
                    let mut sum = 0.0f32;
                    for j in t0..t1 {
                        let sj = s[j - j0];
                        if sj == f32::NEG_INFINITY {
                            continue;
                        }
                        let p = (sj - m_new).exp();
                        sum += p;
                        let vr = &v[j * dkv + kvh * hd..j * dkv + (kvh + 1) * hd];
                        for (x, &y) in acc.iter_mut().zip(vr) {
                            *x += p * y;
                        }
                    }
                    l[r] = l[r] * alpha + sum;
                    m[r] = m_new;
                }
                j0 = j1;
            }
        },
    );
    for r in 0..rows {
        let acc = &mut out[r * hd..(r + 1) * hd];
        let inv = if l[r] > 0.0 { 1.0 / l[r] } else { 0.0 };
        for x in acc.iter_mut() {
            *x *= inv;
        }
    }
}

/// `sum_i a[i] b[i]` with eight independent partial sums (so the loop vectorizes).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for t in 0..8 {
            acc[t] += x[t] * y[t];
        }
    }
    let mut total = 0.0f32;
    for (x, y) in ta.iter().zip(tb) {
        total += x * y;
    }
    acc.iter().sum::<f32>() + total
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
