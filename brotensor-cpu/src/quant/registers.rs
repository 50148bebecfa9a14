//! The register-decoding [`gemv`](super::gemv) kernels of the common block kinds (Q4_0,
//! Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4), written once over the
//! sixteen-lane operations of [`Lanes`] and run on the AVX-512, AVX2 or NEON tier: each block's
//! quants are unpacked, converted and scaled to FP32 in registers, 16 elements at a time (no
//! decoded buffer), and fused multiply-added with FP32 activations into two sixteen-lane
//! accumulators per activation row (one on AVX2 and NEON past two rows), for up to
//! `Lanes::ROWS_PER_PASS` rows at once (each block is
//! decoded once per pass). 4-bit quants go through a 16-entry table of their (sub-)block's
//! values: one permute on AVX-512, a conversion and a multiply-add (linear tables) or two
//! permutes and a blend (codebooks) on AVX2, a conversion and a multiply-add or one
//! four-register byte lookup (codebooks) on NEON.
//!
//! The weights are the values `decode::block` gives, except where ggml rounds twice for
//! `d q + min` (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K): one fused multiply-add here, at most one ulp
//! apart.

use super::decode::{e8m0_half, q3k_scales, scale_min_k4, IQ4_VALUES, MXFP4_VALUES};
use super::lanes::Lanes;
#[cfg(target_arch = "aarch64")]
use super::lanes::Neon;
#[cfg(target_arch = "x86_64")]
use super::lanes::{Avx2, Avx512};
use super::Block;
#[cfg(target_arch = "x86_64")]
use crate::simd::{level, Level};

/// Runs the kernel of `kind` on the tier [`level`] picks, if it has one there:
/// `t[r * m + i] = w[r] . x[i]` for the rows of `w` (whole rows of `row_bytes > 0`) and the
/// `1 <= m <= GEMV_MAX_ROWS` rows of `x`. Returns whether it ran (`t` is untouched if not).
pub(super) fn rows(
    kind: Block,
    w: &[u8],
    row_bytes: usize,
    x: &[f32],
    m: usize,
    t: &mut [f32],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    match level() {
        Level::Avx512 => on::<Avx512>(kind, w, row_bytes, x, m, t),
        Level::Avx2 => on::<Avx2>(kind, w, row_bytes, x, m, t),
        Level::Baseline => false,
    }
    #[cfg(target_arch = "aarch64")]
    match crate::simd::tier() {
        crate::simd::Tier::Neon => on::<Neon>(kind, w, row_bytes, x, m, t),
        _ => false,
    }
}

/// [`rows`] on the tier `V`, which the caller has checked this CPU runs.
fn on<V: Lanes>(
    kind: Block,
    w: &[u8],
    row_bytes: usize,
    x: &[f32],
    m: usize,
    t: &mut [f32],
) -> bool {
    let run = match kind {
        Block::Q4_0 => run::<V, Q4_0>,
        Block::Q4_1 => run::<V, Q4_1>,
        Block::Q5_0 => run::<V, Q5<false>>,
        Block::Q5_1 => run::<V, Q5<true>>,
        Block::Q8_0 => run::<V, Q8_0>,
        Block::Q2_K => run::<V, Q2K>,
        Block::Q3_K => run::<V, Q3K>,
        Block::Q4_K => run::<V, Q4K>,
        Block::Q5_K => run::<V, Q5K>,
        Block::Q6_K => run::<V, Q6K>,
        Block::IQ4_NL => run::<V, Iq4Nl>,
        Block::IQ4_XS => run::<V, Iq4Xs>,
        Block::MXFP4 => run::<V, Mxfp4>,
        _ => return false,
    };
    // SAFETY: `rows` picks `V` from the tier detected on this CPU (`level` checked every
    // feature of an x86-64 tier; NEON is in every AArch64 CPU's baseline).
    unsafe { run(w, row_bytes, x, m, t) };
    true
}

/// One block layout: its size and how its elements come out as FP32 lanes.
trait Kind {
    /// Elements per block.
    const ELEMS: usize;
    /// Bytes per block.
    const SIZE: usize;
    /// Whether [`Kind::block`] takes [`Kind::scales`]: then [`dot`] converts them for a run
    /// of blocks ahead of the quants, and the block loop broadcasts them from memory (a
    /// load) rather than converting them per block (measured on AVX2: Q4_0 twice as fast).
    /// Every 32-element kind does this; the 256-element ones convert theirs per block.
    const SCALES: bool = true;
    /// The scale and offset of the block `b` (`SIZE` bytes) where [`Kind::SCALES`]: by
    /// default the f16 at its start and no offset.
    ///
    /// # Safety
    /// As [`Kind::block`].
    #[inline(always)]
    unsafe fn scales<V: Lanes>(b: &[u8]) -> [f32; 2] {
        [V::half(b, 0), 0.0]
    }
    /// Calls `f(at, v)` for every 16 elements of the block `b` (`SIZE` bytes) in order, with
    /// its [`Kind::scales`] `s` (zeros unless [`Kind::SCALES`]): `v` holds elements
    /// `at..at + 16`. Sixteen at a time, not 32: handed both halves at once, the compiler
    /// kept all four decoded AVX2 registers live across the five-row pass's multiply-adds
    /// and spilled accumulators.
    ///
    /// # Safety
    /// The CPU must run the instructions of `V`.
    unsafe fn block<V: Lanes>(b: &[u8], s: &[f32; 2], f: impl FnMut(usize, V::F));
}

/// Blocks per run of [`Kind::scales`] in [`dot`].
const SCALE_RUN: usize = 32;

/// Checks the lengths and runs [`dot`] in passes of at most [`Lanes::ROWS_PER_PASS`]
/// activation rows, inside the tier's features.
///
/// # Safety
/// The CPU must run the instructions of `V`.
unsafe fn run<V: Lanes, K: Kind>(w: &[u8], row_bytes: usize, x: &[f32], m: usize, t: &mut [f32]) {
    let k = row_bytes / K::SIZE * K::ELEMS;
    assert!(
        row_bytes.is_multiple_of(K::SIZE)
            && w.len().is_multiple_of(row_bytes)
            && (1..=super::GEMV_MAX_ROWS).contains(&m)
            && t.len() == w.len() / row_bytes * m
            && x.len() == m * k,
        "gemv: lengths"
    );
    let pass = V::ROWS_PER_PASS;
    V::enter(
        #[inline(always)]
        || {
            // Balanced passes: 6 rows on a 5-row tier run as 3 + 3, not 5 + 1.
            let passes = m.div_ceil(pass);
            let mut i = 0;
            for left in (1..=passes).rev() {
                let g = (m - i).div_ceil(left);
                let xs = &x[i * k..(i + g) * k];
                let two = g <= V::TWO_ACC_ROWS;
                match (g, two) {
                    (1, _) => dot::<V, K, 1, 2>(w, row_bytes, xs, t, i, m),
                    (2, true) => dot::<V, K, 2, 2>(w, row_bytes, xs, t, i, m),
                    (2, false) => dot::<V, K, 2, 1>(w, row_bytes, xs, t, i, m),
                    (3, true) => dot::<V, K, 3, 2>(w, row_bytes, xs, t, i, m),
                    (3, false) => dot::<V, K, 3, 1>(w, row_bytes, xs, t, i, m),
                    (4, true) => dot::<V, K, 4, 2>(w, row_bytes, xs, t, i, m),
                    (4, false) => dot::<V, K, 4, 1>(w, row_bytes, xs, t, i, m),
                    (5, true) => dot::<V, K, 5, 2>(w, row_bytes, xs, t, i, m),
                    (5, false) => dot::<V, K, 5, 1>(w, row_bytes, xs, t, i, m),
                    (6, _) => dot::<V, K, 6, 2>(w, row_bytes, xs, t, i, m),
                    (7, _) => dot::<V, K, 7, 2>(w, row_bytes, xs, t, i, m),
                    (8, _) => dot::<V, K, 8, 2>(w, row_bytes, xs, t, i, m),
                    // `1 <= g <= pass <= GEMV_MAX_ROWS` (checked above).
                    _ => unreachable!("gemv: a pass of {g} rows"),
                }
                i += g;
            }
        },
    )
}

/// `t[r * m + col + i] = w[r] . x[i]` for the `M` activation rows of `x` (each `k` long,
/// `k` the elements of a row of `w`), with `A` (1 or 2) sixteen-lane accumulators per row;
/// the lengths are checked by [`run`].
///
/// # Safety
/// The CPU must run the instructions of `V`.
#[inline(always)]
unsafe fn dot<V: Lanes, K: Kind, const M: usize, const A: usize>(
    w: &[u8],
    row_bytes: usize,
    x: &[f32],
    t: &mut [f32],
    col: usize,
    m: usize,
) {
    let k = x.len() / M;
    let blocks = row_bytes / K::SIZE;
    for (row, out) in w.chunks_exact(row_bytes).zip(t.chunks_exact_mut(m)) {
        let mut acc = [[V::zero(); A]; M];
        // In bounds: row i's block b spans `i * k + b * ELEMS..+ELEMS` and `at + 16 <= ELEMS`.
        let x = |b: usize, at: usize| x.as_ptr().add(b * K::ELEMS + at);
        // SAFETY: `b < blocks`, so the block's bytes are in the row. Indices rather than
        // iterators: with these the compiler kept the loop's state in memory (a store and a
        // reload a block) and checked bounds it could not see.
        let block = |b: usize| row.get_unchecked(b * K::SIZE..(b + 1) * K::SIZE);
        // Zeros where the kind takes no scales (then runs are one block long).
        let mut scales = [[0.0; 2]; SCALE_RUN];
        let mut b = 0;
        while b < blocks {
            let n = if K::SCALES {
                (blocks - b).min(SCALE_RUN)
            } else {
                1
            };
            if K::SCALES {
                for (j, s) in scales[..n].iter_mut().enumerate() {
                    *s = K::scales::<V>(block(b + j));
                }
            }
            for (j, s) in scales[..n].iter().enumerate() {
                let b = b + j;
                K::block::<V>(
                    block(b),
                    s,
                    #[inline(always)]
                    |at, v| fma::<V, M, A>(&mut acc, at, x(b, at), k, v),
                );
            }
            b += n;
        }
        for (o, a) in out[col..col + M].iter_mut().zip(acc) {
            *o = V::sum(if A == 2 { V::add(a[0], a[1]) } else { a[0] });
        }
    }
}

/// `acc[i][a] += v . x[i k..i k + 16]` for every activation row `i`, with `a` the row's first
/// accumulator for the first sixteen of 32 elements (`at % 32 == 0`), its last for the
/// second.
///
/// # Safety
/// The CPU must run the instructions of `V`; `x[(M - 1) k + 16]` must be in bounds.
#[inline(always)]
unsafe fn fma<V: Lanes, const M: usize, const A: usize>(
    acc: &mut [[V::F; A]; M],
    at: usize,
    x: *const f32,
    k: usize,
    v: V::F,
) {
    let a = if at.is_multiple_of(32) { 0 } else { A - 1 };
    V::fma_rows(acc, a, v, x, k);
}

/// Nibble `h` (0 low, 1 high) of the 16 bytes `b[at..at + 16]`.
#[inline(always)]
unsafe fn nibble<V: Lanes>(b: &[u8], at: usize, h: usize) -> V::I {
    let q = V::bytes(b, at);
    if h == 0 {
        V::and(q, 0xF)
    } else {
        V::shr(q, 4)
    }
}

/// `q d` in FP32.
#[inline(always)]
unsafe fn scaled<V: Lanes>(q: V::I, d: V::F) -> V::F {
    V::mul(V::to_f32(q), d)
}

/// `q d + c` in FP32, one rounding.
#[inline(always)]
unsafe fn affine<V: Lanes>(q: V::I, d: V::F, c: V::F) -> V::F {
    V::fma(V::to_f32(q), d, c)
}

struct Q4_0;

impl Kind for Q4_0 {
    const ELEMS: usize = 32;
    const SIZE: usize = 18;
    #[inline(always)]
    unsafe fn scales<V: Lanes>(b: &[u8]) -> [f32; 2] {
        // (q - 8) d, exactly as decoded: -8 d is exact, q d - 8 d rounds once.
        let d = V::half(b, 0);
        [d, -8.0 * d]
    }
    #[inline(always)]
    unsafe fn block<V: Lanes>(b: &[u8], s: &[f32; 2], mut f: impl FnMut(usize, V::F)) {
        let t = V::linear_table(V::splat(s[0]), V::splat(s[1]));
        for h in 0..2 {
            f(16 * h, V::linear(nibble::<V>(b, 2, h), t));
        }
    }
}

struct Q4_1;

impl Kind for Q4_1 {
    const ELEMS: usize = 32;
    const SIZE: usize = 20;
    #[inline(always)]
    unsafe fn scales<V: Lanes>(b: &[u8]) -> [f32; 2] {
        V::half_pair(b, 0)
    }
    #[inline(always)]
    unsafe fn block<V: Lanes>(b: &[u8], s: &[f32; 2], mut f: impl FnMut(usize, V::F)) {
        let t = V::linear_table(V::splat(s[0]), V::splat(s[1]));
        for h in 0..2 {
            f(16 * h, V::linear(nibble::<V>(b, 4, h), t));
        }
    }
}

/// Q5_1 when `ONE`, else Q5_0.
struct Q5<const ONE: bool>;

impl<const ONE: bool> Kind for Q5<ONE> {
    const ELEMS: usize = 32;
    const SIZE: usize = if ONE { 24 } else { 22 };
    #[inline(always)]
    unsafe fn scales<V: Lanes>(b: &[u8]) -> [f32; 2] {
        if ONE {
            V::half_pair(b, 0)
        } else {
            // (q - 16) d, exact as for Q4_0.
            let d = V::half(b, 0);
            [d, -16.0 * d]
        }
    }
    #[inline(always)]
    unsafe fn block<V: Lanes>(b: &[u8], s: &[f32; 2], mut f: impl FnMut(usize, V::F)) {
        let (d, c) = (V::splat(s[0]), V::splat(s[1]));
        let at = if ONE { 4 } else { 2 };
        // Bit j of `qh` is the fifth bit of element j.
        let qh = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        for h in 0..2 {
            let q = V::or_where_bits(nibble::<V>(b, at + 4, h), (qh >> (16 * h)) as u16, 16);
            f(16 * h, affine::<V>(q, d, c));
        }
    }
}

struct Q8_0;

impl Kind for Q8_0 {
    const ELEMS: usize = 32;
    const SIZE: usize = 34;
    #[inline(always)]
    unsafe fn block<V: Lanes>(b: &[u8], s: &[f32; 2], mut f: impl FnMut(usize, V::F)) {
        let d = V::splat(s[0]);
        for h in 0..2 {
            f(16 * h, scaled::<V>(V::signed_bytes(b, 2 + 16 * h), d));
        }
    }
}

struct Q2K;

impl Kind for Q2K {
    const ELEMS: usize = 256;
    const SIZE: usize = 84;
    const SCALES: bool = false;
    #[inline(always)]
    unsafe fn block<V: Lanes>(b: &[u8], _: &[f32; 2], mut f: impl FnMut(usize, V::F)) {
        let dm = V::half_pair(b, 80);
        for n in 0..2 {
            for j in 0..4 {
                for h in 0..2 {
                    f(128 * n + 32 * j + 16 * h, q2k::<V>(b, dm, n, j, h));
                }
            }
        }
    }
}

/// Q2_K elements `16 h..16 h + 16` of quarter `j` of the 128 elements `n`: bits `2j, 2j + 1`
/// of the 16 quant bytes at `16 + 32 n + 16 h`, times the low nibble of their scale byte
/// `8 n + 2 j + h` (times `d`), less its high nibble (times `min`), one rounding.
#[inline(always)]
unsafe fn q2k<V: Lanes>(b: &[u8], [d, min]: [f32; 2], n: usize, j: usize, h: usize) -> V::F {
    let sc = b[8 * n + 2 * j + h];
    let q = V::and(V::shr(V::bytes(b, 16 + 32 * n + 16 * h), 2 * j as u32), 3);
    let t = V::linear_table(
        V::splat(d * (sc & 0xF) as f32),
        V::splat(-(min * (sc >> 4) as f32)),
    );
    V::linear(q, t)
}

struct Q3K;

impl Kind for Q3K {
    const ELEMS: usize = 256;
    const SIZE: usize = 110;
    const SCALES: bool = false;
    #[inline(always)]
    unsafe fn block<V: Lanes>(b: &[u8], _: &[f32; 2], mut f: impl FnMut(usize, V::F)) {
        let d = V::half(b, 108);
        let scales = q3k_scales(&b[96..108]);
        for n in 0..2 {
            for j in 0..4 {
                for h in 0..2 {
                    let s = d * (scales[8 * n + 2 * j + h] as i32 - 32) as f32;
                    f(128 * n + 32 * j + 16 * h, q3k::<V>(b, s, n, j, h));
                }
            }
        }
    }
}

/// Q3_K elements `16 h..16 h + 16` of quarter `j` of the 128 elements `n`: bits `2j, 2j + 1`
/// of the 16 quant bytes at `32 + 32 n + 16 h`, less 4 unless bit `4 n + j` of the mask
/// bytes at `16 h` is set, times `ds` (`d` times the sub-block's scale), as decoded.
#[inline(always)]
unsafe fn q3k<V: Lanes>(b: &[u8], ds: f32, n: usize, j: usize, h: usize) -> V::F {
    let low = V::and(V::shr(V::bytes(b, 32 + 32 * n + 16 * h), 2 * j as u32), 3);
    let q = V::or_where_bit(low, V::bytes(b, 16 * h), (4 * n + j) as u32, 4);
    scaled::<V>(V::sub(q, 4), V::splat(ds))
}

struct Q4K;

impl Kind for Q4K {
    const ELEMS: usize = 256;
    const SIZE: usize = 144;
    const SCALES: bool = false;
    #[inline(always)]
    unsafe fn block<V: Lanes>(b: &[u8], _: &[f32; 2], mut f: impl FnMut(usize, V::F)) {
        let [d, min] = V::half_pair(b, 0);
        let scales = &b[4..16];
        // Sub-block s takes nibble s % 2 of the 32 bytes at 16 + 32 (s / 2).
        for s in 0..8 {
            let (sc, mn) = scale_min_k4(s, scales);
            let dl = V::splat(d * sc as f32);
            let t = V::linear_table(dl, V::splat(-(min * mn as f32)));
            for h in 0..2 {
                let q = nibble::<V>(b, 16 + 32 * (s / 2) + 16 * h, s % 2);
                f(32 * s + 16 * h, V::linear(q, t));
            }
        }
    }
}

struct Q5K;

impl Kind for Q5K {
    const ELEMS: usize = 256;
    const SIZE: usize = 176;
    const SCALES: bool = false;
    #[inline(always)]
    unsafe fn block<V: Lanes>(b: &[u8], _: &[f32; 2], mut f: impl FnMut(usize, V::F)) {
        let [d, min] = V::half_pair(b, 0);
        let scales = &b[4..16];
        // As Q4_K, nibble s % 2 of the 32 bytes at 48 + 32 (s / 2) for sub-block s; bit s of
        // the 32 bytes at 16 is the fifth bit of its elements.
        for s in 0..8 {
            let (sc, mn) = scale_min_k4(s, scales);
            let dl = V::splat(d * sc as f32);
            let ml = V::splat(-(min * mn as f32));
            for h in 0..2 {
                let low = nibble::<V>(b, 48 + 32 * (s / 2) + 16 * h, s % 2);
                let q = V::or_where_bit(low, V::bytes(b, 16 + 16 * h), s as u32, 16);
                f(32 * s + 16 * h, affine::<V>(q, dl, ml));
            }
        }
    }
}

struct Q6K;

impl Kind for Q6K {
    const ELEMS: usize = 256;
    const SIZE: usize = 210;
    const SCALES: bool = false;
    #[inline(always)]
    unsafe fn block<V: Lanes>(b: &[u8], _: &[f32; 2], mut f: impl FnMut(usize, V::F)) {
        let d = V::half(b, 208);
        for n in 0..2 {
            for j in 0..4 {
                let (ql, qh, sc) = (64 * n, 128 + 32 * n, 192 + 8 * n + 2 * j);
                for l in [0, 16] {
                    let (q, s) = q6k::<V>(b, ql, qh, sc, j, l);
                    // (d s) q, as decoded.
                    f(128 * n + 32 * j + l, scaled::<V>(q, V::splat(d * s)));
                }
            }
        }
    }
}

/// Q6_K elements `l..l + 16` of quarter `j` of the 128 elements with low bits at `ql`, high
/// bits at `qh`, scales at `sc`: the quants minus 32 and their int8 scale. Quarter `j` takes
/// nibble `j / 2` of the bytes at `ql + 32 (j % 2)` and bits `2j, 2j + 1` of those at `qh`.
#[inline(always)]
unsafe fn q6k<V: Lanes>(
    b: &[u8],
    ql: usize,
    qh: usize,
    sc: usize,
    j: usize,
    l: usize,
) -> (V::I, f32) {
    let low = nibble::<V>(b, ql + 32 * (j % 2) + l, j / 2);
    let high = V::and(V::shr(V::bytes(b, qh + l), 2 * j as u32), 3);
    let q = V::or(low, V::shl(high, 4));
    (V::sub(q, 32), b[sc + l / 16] as i8 as f32)
}

struct Iq4Nl;

impl Kind for Iq4Nl {
    const ELEMS: usize = 32;
    const SIZE: usize = 18;
    #[inline(always)]
    unsafe fn block<V: Lanes>(b: &[u8], s: &[f32; 2], mut f: impl FnMut(usize, V::F)) {
        let t = V::table(&IQ4_VALUES, V::splat(s[0]));
        for h in 0..2 {
            f(16 * h, V::lookup(nibble::<V>(b, 2, h), t));
        }
    }
}

struct Iq4Xs;

impl Kind for Iq4Xs {
    const ELEMS: usize = 256;
    const SIZE: usize = 136;
    const SCALES: bool = false;
    #[inline(always)]
    unsafe fn block<V: Lanes>(b: &[u8], _: &[f32; 2], mut f: impl FnMut(usize, V::F)) {
        let d = V::half(b, 0);
        let scales_h = u16::from_le_bytes([b[2], b[3]]);
        for ib in 0..8 {
            // 32 elements with one 6-bit scale: low nibbles of 16 bytes, then high.
            let low = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF;
            let high = ((scales_h >> (2 * ib)) & 3) as u8;
            let dl = d * ((low | (high << 4)) as i32 - 32) as f32;
            let t = V::table(&IQ4_VALUES, V::splat(dl));
            for h in 0..2 {
                f(
                    32 * ib + 16 * h,
                    V::lookup(nibble::<V>(b, 8 + 16 * ib, h), t),
                );
            }
        }
    }
}

struct Mxfp4;

impl Kind for Mxfp4 {
    const ELEMS: usize = 32;
    const SIZE: usize = 17;
    #[inline(always)]
    unsafe fn scales<V: Lanes>(b: &[u8]) -> [f32; 2] {
        [e8m0_half(b[0]), 0.0]
    }
    #[inline(always)]
    unsafe fn block<V: Lanes>(b: &[u8], s: &[f32; 2], mut f: impl FnMut(usize, V::F)) {
        let t = V::table(&MXFP4_VALUES, V::splat(s[0]));
        for h in 0..2 {
            f(16 * h, V::lookup(nibble::<V>(b, 1, h), t));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{blocks, check, floats, KINDS};
    use super::*;

    /// A tier's kernels: its name, whether this CPU (capped by BROTENSOR_CPU_TIER) runs it,
    /// and its entry.
    type Tier = (
        &'static str,
        bool,
        fn(Block, &[u8], usize, &[f32], usize, &mut [f32]) -> bool,
    );

    #[cfg(target_arch = "x86_64")]
    fn tiers() -> Vec<Tier> {
        vec![
            ("avx2", level() >= Level::Avx2, on::<Avx2>),
            ("avx512", level() >= Level::Avx512, on::<Avx512>),
        ]
    }

    #[cfg(target_arch = "aarch64")]
    fn tiers() -> Vec<Tier> {
        let neon = crate::simd::tier() == crate::simd::Tier::Neon;
        vec![("neon", neon, on::<Neon>)]
    }

    /// Every kind on every tier this CPU runs (the AVX-512 one only where it has AVX-512:
    /// the test says when it could not run one).
    #[test]
    fn every_kernel_on_every_tier_matches_the_decoded_float64_product() {
        let (n, k) = (7, 512);
        for (name, runs, kernel) in tiers() {
            if !runs {
                eprintln!("quant registers: the {name} tier was NOT tested (this CPU or BROTENSOR_CPU_TIER does not run it)");
                continue;
            }
            // Every kind but the activation-side Q8_1 and Q8_K.
            for kind in KINDS
                .into_iter()
                .filter(|k| !matches!(k, Block::Q8_1 | Block::Q8_K))
            {
                let w = blocks(kind, n, k);
                for m in 1..=super::super::GEMV_MAX_ROWS {
                    let x = floats(m * k, m as u64);
                    let mut t = vec![f32::NAN; n * m];
                    assert!(
                        kernel(kind, &w, w.len() / n, &x, m, &mut t),
                        "{name} {kind:?}"
                    );
                    check(kind, &w, &x, m, &t);
                }
            }
        }
    }
}
