//! The tile step of the CPU flash core: the running softmax state of a set of query rows,
//! and the register-blocked micro-kernels that advance it by one tile of keys.
//!
//! A tile is [`KEY_TILE`] keys. Its scores `S = Q K^T` come either from K packed transposed
//! (`(hd, keys)`: [`QK_ROWS`] query rows times 64 keys held in sixteen 16-wide
//! accumulators, one broadcast query value and four key vectors per step of the head
//! dimension), or, for a handful of rows, from dot products with K's rows as stored. The
//! online-softmax update then masks, soft-caps, exponentiates (by [`exp_with`], vectorized)
//! and rescales, and `O += P V` streams V's rows as vectors into [`PV_ROWS`] rows times 64
//! columns of accumulators. Every loop runs inside [`wide`], as its docs ask.

use super::Attention;
use crate::elementwise::{exp_with, tanh_with};
use crate::simd::{wide, MulAdd};

/// Keys per tile.
pub(super) const KEY_TILE: usize = 64;
/// Query rows of the score micro-kernel; rows are padded to a multiple of it when K is
/// packed.
pub(super) const QK_ROWS: usize = 4;
/// Keys of the score micro-kernel (four vectors of 16). Four rows of four vectors, not
/// eight of two: with eight rows LLVM vectorizes across the rows (a chain of dependent
/// 8-wide FMAs per key) instead of along the keys.
const QK_KEYS: usize = 64;
/// Query rows of the `P V` micro-kernel; every row count is padded to a multiple of it.
pub(super) const PV_ROWS: usize = 4;
/// Head-dim columns of the `P V` micro-kernel (four vectors of 16).
const PV_COLS: usize = 64;
/// Vector width the reductions split into.
const LANES: usize = 16;

/// The running softmax state of `n` query rows (padded to `np`; padded rows stay zero):
/// scaled queries, row maxima `m`, sums `l`, unnormalized outputs `acc` and one tile of
/// scores / probabilities `s (np, KEY_TILE)`.
pub(super) struct Rows {
    n: usize,
    np: usize,
    hd: usize,
    q: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
    acc: Vec<f32>,
    s: Vec<f32>,
}

impl Rows {
    /// `n` rows of head dim `hd`, padded to a multiple of `pad` (a multiple of
    /// [`PV_ROWS`]).
    pub(super) fn new(n: usize, hd: usize, pad: usize) -> Self {
        let np = n.div_ceil(pad) * pad;
        Self {
            n,
            np,
            hd,
            q: vec![0.0; np * hd],
            m: vec![f32::NEG_INFINITY; np],
            l: vec![0.0; np],
            acc: vec![0.0; np * hd],
            s: vec![0.0; np * KEY_TILE],
        }
    }

    /// Row `r`'s query, to be filled (already scaled).
    pub(super) fn query_mut(&mut self, r: usize) -> &mut [f32] {
        &mut self.q[r * self.hd..(r + 1) * self.hd]
    }

    /// Walks the tiles `[start, hi)` of KV head `g` (`start` a multiple of [`KEY_TILE`])
    /// with `kt`, that head's keys packed `(hd, lkp)`, `lkp` a multiple of [`KEY_TILE`];
    /// `pos(r)` is row `r`'s query row. Requires `np` a multiple of [`QK_ROWS`].
    #[allow(clippy::too_many_arguments)]
    pub(super) fn walk_packed(
        &mut self,
        kt: &[f32],
        v: &[f32],
        a: &Attention,
        g: usize,
        mask: Option<&[f32]>,
        start: usize,
        hi: usize,
        pos: impl Fn(usize) -> usize,
    ) {
        let hd = self.hd;
        let lkp = kt.len() / hd;
        // Each block of QK_ROWS queries transposed to (hd, QK_ROWS): one broadcast per step.
        let mut qt = vec![0.0f32; self.np * hd];
        for (b, dst) in qt.chunks_exact_mut(QK_ROWS * hd).enumerate() {
            for r in 0..QK_ROWS {
                for d in 0..hd {
                    dst[d * QK_ROWS + r] = self.q[(b * QK_ROWS + r) * hd + d];
                }
            }
        }
        wide(
            #[inline(always)]
            |fma| {
                let mut j0 = start;
                while j0 < hi {
                    let tn = KEY_TILE.min(hi - j0);
                    for (b, qb) in qt.chunks_exact(QK_ROWS * hd).enumerate() {
                        let s = &mut self.s[b * QK_ROWS * KEY_TILE..(b + 1) * QK_ROWS * KEY_TILE];
                        for kb in (0..KEY_TILE).step_by(QK_KEYS) {
                            scores_packed(fma, qb, kt, lkp, j0 + kb, s, kb);
                        }
                    }
                    self.update(fma, a, mask, j0, tn, &pos);
                    self.add_pv(fma, v, a.nkv * hd, g * hd, j0, tn);
                    j0 += KEY_TILE;
                }
            },
        );
    }

    /// Walks keys `[c0, c1)` of KV head `g` reading `k (lk, nkv*hd)` as stored (one dot
    /// product per row and key); `pos(r)` is row `r`'s query row.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn walk_rows(
        &mut self,
        k: &[f32],
        v: &[f32],
        a: &Attention,
        g: usize,
        mask: Option<&[f32]>,
        c0: usize,
        c1: usize,
        pos: impl Fn(usize) -> usize,
    ) {
        let hd = self.hd;
        let dkv = a.nkv * hd;
        wide(
            #[inline(always)]
            |fma| {
                let mut j0 = c0;
                while j0 < c1 {
                    let tn = KEY_TILE.min(c1 - j0);
                    for c in 0..tn {
                        let kr = &k[(j0 + c) * dkv + g * hd..(j0 + c) * dkv + (g + 1) * hd];
                        for r in 0..self.n {
                            self.s[r * KEY_TILE + c] = dot(fma, &self.q[r * hd..(r + 1) * hd], kr);
                        }
                    }
                    self.update(fma, a, mask, j0, tn, &pos);
                    self.add_pv(fma, v, dkv, g * hd, j0, tn);
                    j0 += tn;
                }
            },
        );
    }

    /// The online-softmax step over the tile's scores (keys `j0 .. j0 + tn`): masks the keys
    /// a row may not see, soft-caps, turns scores into `e^(s - m_new)` (zero where masked)
    /// and rescales the row's sum and accumulator to the new maximum. Rows that see no key
    /// of the tile get all-zero probabilities and keep their state.
    #[inline(always)]
    fn update(
        &mut self,
        fma: MulAdd,
        a: &Attention,
        mask: Option<&[f32]>,
        j0: usize,
        tn: usize,
        pos: &impl Fn(usize) -> usize,
    ) {
        let hd = self.hd;
        for r in 0..self.np {
            let srow: &mut [f32; KEY_TILE] = (&mut self.s[r * KEY_TILE..(r + 1) * KEY_TILE])
                .try_into()
                .expect("one tile row");
            let (rlo, rhi) = if r < self.n {
                a.key_range(pos(r))
            } else {
                (0, 0)
            };
            let t0 = rlo.clamp(j0, j0 + tn) - j0;
            let t1 = rhi.clamp(j0, j0 + tn) - j0;
            if t0 >= t1 {
                srow.fill(0.0);
                continue;
            }
            if a.softcap > 0.0 {
                for x in srow.iter_mut() {
                    *x = a.softcap * tanh_with(fma, *x / a.softcap);
                }
            }
            for x in srow[..t0].iter_mut() {
                *x = f32::NEG_INFINITY;
            }
            for x in srow[t1..].iter_mut() {
                *x = f32::NEG_INFINITY;
            }
            if let Some(mk) = mask {
                for (x, &w) in srow[t0..t1].iter_mut().zip(&mk[j0 + t0..j0 + t1]) {
                    if w <= 0.5 {
                        *x = f32::NEG_INFINITY;
                    }
                }
            }
            // A select rather than `f32::max`, so that the lanes vectorize.
            let mut lanes = [f32::NEG_INFINITY; LANES];
            for ch in srow.chunks_exact(LANES) {
                let ch: &[f32; LANES] = ch.try_into().expect("one chunk");
                for i in 0..LANES {
                    lanes[i] = if ch[i] > lanes[i] { ch[i] } else { lanes[i] };
                }
            }
            let tile_max = lanes.iter().fold(f32::NEG_INFINITY, |x, &y| x.max(y));
            if tile_max == f32::NEG_INFINITY {
                srow.fill(0.0);
                continue;
            }
            let m_new = self.m[r].max(tile_max);
            let alpha = (self.m[r] - m_new).exp();
            // e^(-inf) is exactly zero through exp_with's clamp and flush.
            let mut sums = [0.0f32; LANES];
            for ch in srow.chunks_exact_mut(LANES) {
                let ch: &mut [f32; LANES] = ch.try_into().expect("one chunk");
                for i in 0..LANES {
                    let p = exp_with(fma, ch[i] - m_new);
                    ch[i] = p;
                    sums[i] += p;
                }
            }
            self.l[r] = self.l[r] * alpha + hsum(sums);
            self.m[r] = m_new;
            if alpha != 1.0 {
                for x in self.acc[r * hd..(r + 1) * hd].iter_mut() {
                    *x *= alpha;
                }
            }
        }
    }

    /// `acc += P V` for the tile's `tn` keys from `j0`, V's row `j` read at
    /// `v[j * dkv + voff ..][..hd]`.
    #[inline(always)]
    fn add_pv(&mut self, fma: MulAdd, v: &[f32], dkv: usize, voff: usize, j0: usize, tn: usize) {
        let hd = self.hd;
        let vt = &v[j0 * dkv + voff..];
        for rb in (0..self.np).step_by(PV_ROWS) {
            let p = &self.s[rb * KEY_TILE..(rb + PV_ROWS) * KEY_TILE];
            let acc = &mut self.acc[rb * hd..(rb + PV_ROWS) * hd];
            let mut col = 0;
            while col + PV_COLS <= hd {
                pv::<PV_COLS>(fma, p, acc, hd, col, vt, dkv, tn);
                col += PV_COLS;
            }
            while col + LANES <= hd {
                pv::<LANES>(fma, p, acc, hd, col, vt, dkv, tn);
                col += LANES;
            }
            while col < hd {
                pv::<1>(fma, p, acc, hd, col, vt, dkv, tn);
                col += 1;
            }
        }
    }

    /// Writes the `n` normalized rows (`acc / l`, zero where no key was seen) to `out`.
    pub(super) fn finish(&self, out: &mut [f32]) {
        let hd = self.hd;
        for (r, dst) in out.chunks_exact_mut(hd).enumerate().take(self.n) {
            let inv = if self.l[r] > 0.0 {
                1.0 / self.l[r]
            } else {
                0.0
            };
            for (x, &y) in dst.iter_mut().zip(&self.acc[r * hd..(r + 1) * hd]) {
                *x = y * inv;
            }
        }
    }

    /// Writes the partial state for [`combine`]: `n` maxima, `n` sums, `n * hd` accumulators.
    pub(super) fn save_partial(&self, dst: &mut [f32]) {
        let (n, hd) = (self.n, self.hd);
        dst[..n].copy_from_slice(&self.m[..n]);
        dst[n..2 * n].copy_from_slice(&self.l[..n]);
        dst[2 * n..2 * n + n * hd].copy_from_slice(&self.acc[..n * hd]);
    }
}

/// Row `r` of `n` merged over `chunks` partials (as [`Rows::save_partial`] wrote them):
/// each chunk's sum and accumulator rescaled to the largest maximum, then normalized into
/// `dst` (`hd` values; zero when no chunk saw a key).
pub(super) fn combine<'a>(
    chunks: usize,
    part: impl Fn(usize) -> &'a [f32],
    n: usize,
    r: usize,
    hd: usize,
    dst: &mut [f32],
) {
    dst.fill(0.0);
    let mx = (0..chunks)
        .map(|c| part(c)[r])
        .fold(f32::NEG_INFINITY, f32::max);
    if mx == f32::NEG_INFINITY {
        return;
    }
    let mut l = 0.0f32;
    for c in 0..chunks {
        let p = part(c);
        let w = (p[r] - mx).exp();
        if w == 0.0 {
            continue;
        }
        l += w * p[n + r];
        for (x, &y) in dst.iter_mut().zip(&p[2 * n + r * hd..2 * n + (r + 1) * hd]) {
            *x += w * y;
        }
    }
    let inv = if l > 0.0 { 1.0 / l } else { 0.0 };
    for x in dst.iter_mut() {
        *x *= inv;
    }
}

/// Scores of [`QK_ROWS`] query rows (`qt`, transposed `(hd, QK_ROWS)`) against the
/// [`QK_KEYS`] packed keys from `j` (`kt (hd, lkp)`), into columns `kb ..` of the rows of
/// `s (QK_ROWS, KEY_TILE)`.
#[inline(always)]
fn scores_packed(
    fma: MulAdd,
    qt: &[f32],
    kt: &[f32],
    lkp: usize,
    j: usize,
    s: &mut [f32],
    kb: usize,
) {
    let mut acc = [[0.0f32; QK_KEYS]; QK_ROWS];
    for (d, qd) in qt.chunks_exact(QK_ROWS).enumerate() {
        let kr: &[f32; QK_KEYS] = kt[d * lkp + j..d * lkp + j + QK_KEYS]
            .try_into()
            .expect("packed keys");
        let qd: &[f32; QK_ROWS] = qd.try_into().expect("query column");
        for (ar, &qv) in acc.iter_mut().zip(qd) {
            for x in 0..QK_KEYS {
                ar[x] = fma.apply(qv, kr[x], ar[x]);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        s[r * KEY_TILE + kb..r * KEY_TILE + kb + QK_KEYS].copy_from_slice(row);
    }
}

/// `acc[r][col .. col + W] += sum_c p[r][c] * v_c[col .. col + W]` for the [`PV_ROWS`] rows
/// of `p (PV_ROWS, KEY_TILE)` and `acc (PV_ROWS, hd)`, over keys `c < tn` with `v_c =
/// vt[c * dkv ..]`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn pv<const W: usize>(
    fma: MulAdd,
    p: &[f32],
    acc: &mut [f32],
    hd: usize,
    col: usize,
    vt: &[f32],
    dkv: usize,
    tn: usize,
) {
    let mut o = [[0.0f32; W]; PV_ROWS];
    for (r, or) in o.iter_mut().enumerate() {
        or.copy_from_slice(&acc[r * hd + col..r * hd + col + W]);
    }
    for c in 0..tn {
        let vr: &[f32; W] = vt[c * dkv + col..c * dkv + col + W]
            .try_into()
            .expect("V row");
        for (r, or) in o.iter_mut().enumerate() {
            let pr = p[r * KEY_TILE + c];
            for x in 0..W {
                or[x] = fma.apply(pr, vr[x], or[x]);
            }
        }
    }
    for (r, or) in o.iter().enumerate() {
        acc[r * hd + col..r * hd + col + W].copy_from_slice(or);
    }
}

/// `x . y` over 16-wide partial sums (`x`, `y` of equal length).
#[inline(always)]
fn dot(fma: MulAdd, x: &[f32], y: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    let (xc, yc) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let mut tail = 0.0f32;
    for (a, b) in xc.remainder().iter().zip(yc.remainder()) {
        tail = fma.apply(*a, *b, tail);
    }
    for (a, b) in xc.zip(yc) {
        let a: &[f32; LANES] = a.try_into().expect("one chunk");
        let b: &[f32; LANES] = b.try_into().expect("one chunk");
        for i in 0..LANES {
            lanes[i] = fma.apply(a[i], b[i], lanes[i]);
        }
    }
    hsum(lanes) + tail
}

/// The sum of 16 lanes as a tree (vectorizes into shuffles).
#[inline(always)]
fn hsum(mut v: [f32; LANES]) -> f32 {
    let mut w = LANES / 2;
    while w > 0 {
        for i in 0..w {
            v[i] += v[i + w];
        }
        w /= 2;
    }
    v[0]
}
