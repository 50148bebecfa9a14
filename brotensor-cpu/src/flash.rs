//! CPU reference of the flash category: flash attention forward passes, decode and the KV
//! cache.
//!
//! One blocked online-softmax core ([`attention`]) serves every forward variant: a block of
//! [`QUERY_BLOCK`] query rows of one KV head's query heads walks the keys in tiles of
//! [`KEY_TILE`], keeping a running maximum, sum and FP32 accumulator per row, so no
//! `Lq x Lk` score matrix is ever held. Work is spread over (KV head, query block) with
//! rayon; the inner loops are plain slice loops compiled for the widest vector unit (see
//! [`crate::simd::wide`]).

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
///
/// One task per (KV head, block of [`QUERY_BLOCK`] query rows) takes every query head of
/// that KV head's group, so each K/V tile is read once for the whole group.
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
    // Scratch laid out (nkv, lq, group, hd) so that tasks own disjoint slices; a KV head's
    // `group * hd` values of a query row are then the contiguous columns of that row of `o`.
    let gw = a.nq / nkv * hd;
    let mut groups = vec![0.0f32; nkv * lq * gw];
    groups
        .par_chunks_mut(lq * gw)
        .enumerate()
        .for_each(|(g, out_g)| {
            out_g
                .par_chunks_mut(QUERY_BLOCK * gw)
                .enumerate()
                .for_each(|(b, out)| block(q, k, v, mask, a, g, b * QUERY_BLOCK, out));
        });
    let d = a.nq * hd;
    o.par_chunks_mut(d).enumerate().for_each(|(i, row)| {
        for g in 0..nkv {
            let src = &groups[(g * lq + i) * gw..(g * lq + i + 1) * gw];
            row[g * gw..(g + 1) * gw].copy_from_slice(src);
        }
    });
}

/// One (KV head `g`, query block from row `i0`): `out` holds `(rows, group, hd)` for the
/// block's rows and the group's query heads.
#[allow(clippy::too_many_arguments)]
fn block(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[f32]>,
    a: &Attention,
    g: usize,
    i0: usize,
    out: &mut [f32],
) {
    let hd = a.hd;
    let group = a.nq / a.nkv;
    let (dq, dkv) = (a.nq * hd, a.nkv * hd);
    let positions = out.len() / (group * hd);
    // Row `r = ii * group + hh`: query row `i0 + ii`, query head `g * group + hh`, scaled.
    let rows = positions * group;
    let mut qs = vec![0.0f32; rows * hd];
    for (r, dst) in qs.chunks_exact_mut(hd).enumerate() {
        let (i, h) = (i0 + r / group, g * group + r % group);
        for (x, &y) in dst
            .iter_mut()
            .zip(&q[i * dq + h * hd..i * dq + (h + 1) * hd])
        {
            *x = y * a.scale;
        }
    }
    let mut m = vec![f32::NEG_INFINITY; rows];
    let mut l = vec![0.0f32; rows];
    // The key tile transposed (hd, KEY_TILE): scores vectorize along the keys.
    let mut kt = vec![0.0f32; hd * KEY_TILE];
    let mut s = [0.0f32; KEY_TILE];
    let lo = a.key_range(i0).0;
    let hi = a.key_range(i0 + positions - 1).1;
    wide(
        #[inline(always)]
        |_| {
            let mut j0 = lo;
            while j0 < hi {
                let j1 = (j0 + KEY_TILE).min(hi);
                let tn = j1 - j0;
                for c in 0..tn {
                    let row = &k[(j0 + c) * dkv + g * hd..(j0 + c) * dkv + (g + 1) * hd];
                    for (d, &x) in row.iter().enumerate() {
                        kt[d * KEY_TILE + c] = x;
                    }
                }
                for r in 0..rows {
                    let (rlo, rhi) = a.key_range(i0 + r / group);
                    let (t0, t1) = (j0.max(rlo), j1.min(rhi));
                    if t0 >= t1 {
                        continue;
                    }
                    let st = &mut s[..tn];
                    st.fill(0.0);
                    for (d, &qd) in qs[r * hd..(r + 1) * hd].iter().enumerate() {
                        for (x, &y) in st.iter_mut().zip(&kt[d * KEY_TILE..d * KEY_TILE + tn]) {
                            *x += qd * y;
                        }
                    }
                    let mut tile_max = f32::NEG_INFINITY;
                    for (c, x) in st.iter_mut().enumerate() {
                        let j = j0 + c;
                        if j < t0 || j >= t1 || mask.is_some_and(|mk| mk[j] <= 0.5) {
                            *x = f32::NEG_INFINITY;
                            continue;
                        }
                        if a.softcap > 0.0 {
                            *x = a.softcap * (*x / a.softcap).tanh();
                        }
                        tile_max = tile_max.max(*x);
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
                    for (c, &sc) in st.iter().enumerate() {
                        if sc == f32::NEG_INFINITY {
                            continue;
                        }
                        let p = (sc - m_new).exp();
                        sum += p;
                        let j = j0 + c;
                        let vr = &v[j * dkv + g * hd..j * dkv + (g + 1) * hd];
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
        let inv = if l[r] > 0.0 { 1.0 / l[r] } else { 0.0 };
        for x in out[r * hd..(r + 1) * hd].iter_mut() {
            *x *= inv;
        }
    }
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
