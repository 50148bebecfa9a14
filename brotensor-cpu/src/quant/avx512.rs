//! The AVX-512 [`gemv`](super::gemv) kernels of the common block kinds (Q4_0, Q4_1, Q5_0,
//! Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4): each block's quants are unpacked, converted and scaled to
//! FP32 in registers, 32 elements at a time (no decoded buffer), and fused multiply-added
//! with FP32 activations into two accumulators per activation row, all `m <= 8` rows at once
//! (each block is decoded once per call). 4-bit quants and codes index a 16-entry table of their
//! (sub-)block's values with one permute, in place of a conversion and a multiply-add.
//!
//! The weights are the values `decode::block` gives, except where ggml rounds twice for
//! `d q + min` (Q4_1, Q5_1, Q4_K, Q5_K): one fused multiply-add here, at most one ulp apart.

use std::arch::x86_64::*;

use super::decode::{e8m0_half, h, scale_min_k4, IQ4_VALUES, MXFP4_VALUES};
use super::Block;

/// Runs the AVX-512 kernel of `kind` if it has one and the CPU has AVX-512 (F, BW) and F16C:
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
    use std::arch::is_x86_feature_detected as has;
    if !(has!("avx512f") && has!("avx512bw") && has!("f16c") && has!("fma")) {
        return false;
    }
    let run = match kind {
        Block::Q4_0 => run::<Q4_0>,
        Block::Q4_1 => run::<Q4_1>,
        Block::Q5_0 => run::<Q5<false>>,
        Block::Q5_1 => run::<Q5<true>>,
        Block::Q8_0 => run::<Q8_0>,
        Block::Q4_K => run::<Q4K>,
        Block::Q5_K => run::<Q5K>,
        Block::Q6_K => run::<Q6K>,
        Block::IQ4_NL => run::<Iq4Nl>,
        Block::IQ4_XS => run::<Iq4Xs>,
        Block::MXFP4 => run::<Mxfp4>,
        _ => return false,
    };
    // SAFETY: the features `run` enables were detected above.
    unsafe { run(w, row_bytes, x, m, t) };
    true
}

/// One block layout: its size and how its elements come out as FP32 vectors.
trait Kind {
    /// Elements per block.
    const ELEMS: usize;
    /// Bytes per block.
    const SIZE: usize;
    /// Whether [`Kind::block`] takes [`Kind::scales`]: then [`dot`] converts them for a run
    /// of blocks ahead of the quants, and the block loop broadcasts them from memory (a
    /// load) rather than converting f16 in wide registers (a gain where a block has two).
    const SCALES: bool = false;
    /// The scale and offset of the block `b` (`SIZE` bytes) where [`Kind::SCALES`].
    ///
    /// # Safety
    /// As [`Kind::block`].
    #[inline(always)]
    unsafe fn scales(_b: &[u8]) -> [f32; 2] {
        [0.0; 2]
    }
    /// Calls `f(at, [v, u])` for every 32 elements of the block `b` (`SIZE` bytes), with its
    /// [`Kind::scales`] `s` (zeros unless [`Kind::SCALES`]): `v` holds elements
    /// `at..at + 16`, `u` elements `at + 16..at + 32`.
    ///
    /// # Safety
    /// The CPU must have the features [`run`] enables.
    unsafe fn block(b: &[u8], s: &[f32; 2], f: impl FnMut(usize, [__m512; 2]));
}

/// Blocks per run of [`Kind::scales`] in [`dot`].
const SCALE_RUN: usize = 32;

/// Checks the lengths and runs [`dot`] for the constant `m`.
///
/// # Safety
/// The CPU must support every feature enabled here.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn run<K: Kind>(w: &[u8], row_bytes: usize, x: &[f32], m: usize, t: &mut [f32]) {
    let k = row_bytes / K::SIZE * K::ELEMS;
    assert!(
        row_bytes.is_multiple_of(K::SIZE)
            && w.len().is_multiple_of(row_bytes)
            && t.len() == w.len() / row_bytes * m
            && x.len() == m * k,
        "gemv: lengths"
    );
    match m {
        1 => dot::<K, 1>(w, row_bytes, x, t),
        2 => dot::<K, 2>(w, row_bytes, x, t),
        3 => dot::<K, 3>(w, row_bytes, x, t),
        4 => dot::<K, 4>(w, row_bytes, x, t),
        5 => dot::<K, 5>(w, row_bytes, x, t),
        6 => dot::<K, 6>(w, row_bytes, x, t),
        7 => dot::<K, 7>(w, row_bytes, x, t),
        8 => dot::<K, 8>(w, row_bytes, x, t),
        _ => panic!("gemv: {m} rows"),
    }
}

/// [`rows`] for `M` activation rows; the lengths are checked by [`run`].
///
/// # Safety
/// As [`Kind::block`]; `x` must hold `M` rows of the rows' `k` elements.
#[inline(always)]
unsafe fn dot<K: Kind, const M: usize>(w: &[u8], row_bytes: usize, x: &[f32], t: &mut [f32]) {
    let k = x.len() / M;
    for (row, out) in w.chunks_exact(row_bytes).zip(t.chunks_exact_mut(M)) {
        let mut acc = [[_mm512_setzero_ps(); 2]; M];
        // In bounds: row i's block b spans `i * k + b * ELEMS..+ELEMS` and `at + 32 <= ELEMS`.
        let x = |b: usize, at: usize| x.as_ptr().add(b * K::ELEMS + at);
        if K::SCALES {
            for (r, run) in row.chunks(SCALE_RUN * K::SIZE).enumerate() {
                let mut scales = [[0.0; 2]; SCALE_RUN];
                for (s, blk) in scales.iter_mut().zip(run.chunks_exact(K::SIZE)) {
                    *s = K::scales(blk);
                }
                for (b, (blk, s)) in run.chunks_exact(K::SIZE).zip(&scales).enumerate() {
                    let b = r * SCALE_RUN + b;
                    K::block(
                        blk,
                        s,
                        #[inline(always)]
                        |at, v| fma(&mut acc, x(b, at), k, v),
                    );
                }
            }
        } else {
            for (b, blk) in row.chunks_exact(K::SIZE).enumerate() {
                K::block(
                    blk,
                    &[0.0; 2],
                    #[inline(always)]
                    |at, v| fma(&mut acc, x(b, at), k, v),
                );
            }
        }
        for (o, a) in out.iter_mut().zip(acc) {
            *o = _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1]));
        }
    }
}

/// `acc[i] += v . x[i k..i k + 32]` (two 16-lane halves) for every activation row `i`.
///
/// # Safety
/// As [`Kind::block`]; `x[(M - 1) k + 32]` must be in bounds.
#[inline(always)]
unsafe fn fma<const M: usize>(acc: &mut [[__m512; 2]; M], x: *const f32, k: usize, v: [__m512; 2]) {
    for (i, acc) in acc.iter_mut().enumerate() {
        let x = x.add(i * k);
        acc[0] = _mm512_fmadd_ps(v[0], _mm512_loadu_ps(x), acc[0]);
        acc[1] = _mm512_fmadd_ps(v[1], _mm512_loadu_ps(x.add(16)), acc[1]);
    }
}

/// The f16 at `b[at..at + 2]` in every lane.
#[inline(always)]
unsafe fn splat_f16(b: &[u8], at: usize) -> __m512 {
    _mm512_cvtph_ps(_mm256_set1_epi16(
        u16::from_le_bytes([b[at], b[at + 1]]) as i16
    ))
}

/// `*v` in every lane, broadcast from memory.
#[inline(always)]
unsafe fn splat(v: &f32) -> __m512 {
    _mm512_broadcastss_ps(_mm_load_ss(v))
}

/// The two f16 at `b[at..at + 4]`.
#[inline(always)]
unsafe fn f16_pair(b: &[u8], at: usize) -> [f32; 2] {
    let v = i32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128(v));
    [_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v))]
}

/// The 16 bytes `b[at..at + 16]`, zero-extended to 32-bit lanes.
#[inline(always)]
unsafe fn bytes(b: &[u8], at: usize) -> __m512i {
    let b = &b[at..at + 16];
    _mm512_cvtepu8_epi32(_mm_loadu_si128(b.as_ptr().cast()))
}

/// The 16 bytes `b[at..at + 16]`, sign-extended to 32-bit lanes.
#[inline(always)]
unsafe fn signed_bytes(b: &[u8], at: usize) -> __m512i {
    let b = &b[at..at + 16];
    _mm512_cvtepi8_epi32(_mm_loadu_si128(b.as_ptr().cast()))
}

/// The low and high nibbles of 32-bit lanes that hold a byte each.
#[inline(always)]
unsafe fn nibbles(q: __m512i) -> [__m512i; 2] {
    [
        _mm512_and_si512(q, _mm512_set1_epi32(0xF)),
        _mm512_srli_epi32::<4>(q),
    ]
}

/// `q d` in FP32.
#[inline(always)]
unsafe fn scaled(q: __m512i, d: __m512) -> __m512 {
    _mm512_mul_ps(_mm512_cvtepi32_ps(q), d)
}

/// The 16 values `q d + c` of 4-bit quants `q = 0..16` (one rounding each), a table for
/// [`lookup`].
#[inline(always)]
unsafe fn table16(d: __m512, c: __m512) -> __m512 {
    let q = _mm512_setr_ps(
        0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0,
    );
    _mm512_fmadd_ps(q, d, c)
}

/// `table[q & 15]` in every lane: one permute in place of a conversion and a multiply-add.
#[inline(always)]
unsafe fn lookup(q: __m512i, table: __m512) -> __m512 {
    _mm512_permutexvar_ps(q, table)
}

/// `q d + c` in FP32, one rounding.
#[inline(always)]
unsafe fn affine(q: __m512i, d: __m512, c: __m512) -> __m512 {
    _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), d, c)
}

struct Q4_0;

impl Kind for Q4_0 {
    const ELEMS: usize = 32;
    const SIZE: usize = 18;
    #[inline(always)]
    unsafe fn block(b: &[u8], _: &[f32; 2], mut f: impl FnMut(usize, [__m512; 2])) {
        // (q - 8) d, exactly as decoded: -8 d is exact, q d - 8 d rounds once.
        let d = splat_f16(b, 0);
        let t = table16(d, _mm512_mul_ps(d, _mm512_set1_ps(-8.0)));
        let q = bytes(b, 2);
        f(0, [lookup(q, t), lookup(_mm512_srli_epi32::<4>(q), t)]);
    }
}

struct Q4_1;

impl Kind for Q4_1 {
    const ELEMS: usize = 32;
    const SIZE: usize = 20;
    const SCALES: bool = true;
    #[inline(always)]
    unsafe fn scales(b: &[u8]) -> [f32; 2] {
        f16_pair(b, 0)
    }
    #[inline(always)]
    unsafe fn block(b: &[u8], s: &[f32; 2], mut f: impl FnMut(usize, [__m512; 2])) {
        let t = table16(splat(&s[0]), splat(&s[1]));
        let q = bytes(b, 4);
        f(0, [lookup(q, t), lookup(_mm512_srli_epi32::<4>(q), t)]);
    }
}

/// Q5_1 when `ONE`, else Q5_0.
struct Q5<const ONE: bool>;

impl<const ONE: bool> Kind for Q5<ONE> {
    const ELEMS: usize = 32;
    const SIZE: usize = if ONE { 24 } else { 22 };
    const SCALES: bool = ONE;
    #[inline(always)]
    unsafe fn scales(b: &[u8]) -> [f32; 2] {
        f16_pair(b, 0)
    }
    #[inline(always)]
    unsafe fn block(b: &[u8], s: &[f32; 2], mut f: impl FnMut(usize, [__m512; 2])) {
        let (d, c) = if ONE {
            (splat(&s[0]), splat(&s[1]))
        } else {
            // (q - 16) d, exact as for Q4_0.
            let d = splat_f16(b, 0);
            (d, _mm512_mul_ps(d, _mm512_set1_ps(-16.0)))
        };
        let at = if ONE { 4 } else { 2 };
        // Bit j of `qh` is the fifth bit of element j.
        let qh = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let [lo, hi] = nibbles(bytes(b, at + 4));
        let sixteen = _mm512_set1_epi32(16);
        let lo = _mm512_mask_or_epi32(lo, qh as u16, lo, sixteen);
        let hi = _mm512_mask_or_epi32(hi, (qh >> 16) as u16, hi, sixteen);
        f(0, [affine(lo, d, c), affine(hi, d, c)]);
    }
}

struct Q8_0;

impl Kind for Q8_0 {
    const ELEMS: usize = 32;
    const SIZE: usize = 34;
    #[inline(always)]
    unsafe fn block(b: &[u8], _: &[f32; 2], mut f: impl FnMut(usize, [__m512; 2])) {
        let d = splat_f16(b, 0);
        f(
            0,
            [
                scaled(signed_bytes(b, 2), d),
                scaled(signed_bytes(b, 18), d),
            ],
        );
    }
}

struct Q4K;

impl Kind for Q4K {
    const ELEMS: usize = 256;
    const SIZE: usize = 144;
    #[inline(always)]
    unsafe fn block(b: &[u8], _: &[f32; 2], mut f: impl FnMut(usize, [__m512; 2])) {
        let (d, min) = (h(b, 0), h(b, 2));
        let scales = &b[4..16];
        for j in 0..4 {
            // Sub-block 2j takes the low nibbles of the 32 bytes at 16 + 32j, 2j + 1 the high.
            let [lo0, hi0] = nibbles(bytes(b, 16 + 32 * j));
            let [lo1, hi1] = nibbles(bytes(b, 32 + 32 * j));
            for (s, q) in [(2 * j, [lo0, lo1]), (2 * j + 1, [hi0, hi1])] {
                let (sc, mn) = scale_min_k4(s, scales);
                let dl = _mm512_set1_ps(d * sc as f32);
                let t = table16(dl, _mm512_set1_ps(-(min * mn as f32)));
                f(32 * s, [lookup(q[0], t), lookup(q[1], t)]);
            }
        }
    }
}

struct Q5K;

impl Kind for Q5K {
    const ELEMS: usize = 256;
    const SIZE: usize = 176;
    #[inline(always)]
    unsafe fn block(b: &[u8], _: &[f32; 2], mut f: impl FnMut(usize, [__m512; 2])) {
        let (d, min) = (h(b, 0), h(b, 2));
        let scales = &b[4..16];
        // Bit s of the 32 bytes at 16 is the fifth bit of sub-block s's element.
        let qh = [bytes(b, 16), bytes(b, 32)];
        for j in 0..4 {
            // As Q4_K, the low nibbles at 48 + 32j for sub-block 2j, the high ones for 2j + 1.
            let [lo0, hi0] = nibbles(bytes(b, 48 + 32 * j));
            let [lo1, hi1] = nibbles(bytes(b, 64 + 32 * j));
            for (s, q) in [(2 * j, [lo0, lo1]), (2 * j + 1, [hi0, hi1])] {
                let (sc, mn) = scale_min_k4(s, scales);
                let dl = _mm512_set1_ps(d * sc as f32);
                let ml = _mm512_set1_ps(-(min * mn as f32));
                let (q0, q1) = (fifth(q[0], qh[0], s), fifth(q[1], qh[1], s));
                f(32 * s, [affine(q0, dl, ml), affine(q1, dl, ml)]);
            }
        }
    }
}

/// `q` with 16 added in the lanes whose `qh` has bit `bit` set.
#[inline(always)]
unsafe fn fifth(q: __m512i, qh: __m512i, bit: usize) -> __m512i {
    let k = _mm512_test_epi32_mask(qh, _mm512_set1_epi32(1 << bit));
    _mm512_mask_or_epi32(q, k, q, _mm512_set1_epi32(16))
}

struct Q6K;

impl Kind for Q6K {
    const ELEMS: usize = 256;
    const SIZE: usize = 210;
    #[inline(always)]
    unsafe fn block(b: &[u8], _: &[f32; 2], mut f: impl FnMut(usize, [__m512; 2])) {
        let d = h(b, 208);
        for n in 0..2 {
            for j in 0..4 {
                let (ql, qh, sc) = (64 * n, 128 + 32 * n, 192 + 8 * n + 2 * j);
                let (q0, s0) = q6k(b, ql, qh, sc, j, 0);
                let (q1, s1) = q6k(b, ql, qh, sc, j, 16);
                // (d s) q, as decoded.
                let (s0, s1) = (_mm512_set1_ps(d * s0), _mm512_set1_ps(d * s1));
                f(128 * n + 32 * j, [scaled(q0, s0), scaled(q1, s1)]);
            }
        }
    }
}

/// Q6_K elements `l..l + 16` of quarter `j` of the 128 elements with low bits at `ql`, high
/// bits at `qh`, scales at `sc`: the quants minus 32 and their int8 scale. Quarter `j` takes
/// nibble `j / 2` of the bytes at `ql + 32 (j % 2)` and bits `2j, 2j + 1` of those at `qh`.
#[inline(always)]
unsafe fn q6k(b: &[u8], ql: usize, qh: usize, sc: usize, j: usize, l: usize) -> (__m512i, f32) {
    let low = nibbles(bytes(b, ql + 32 * (j % 2) + l))[j / 2];
    let high = _mm512_and_si512(
        _mm512_srlv_epi32(bytes(b, qh + l), _mm512_set1_epi32(2 * j as i32)),
        _mm512_set1_epi32(3),
    );
    let q = _mm512_or_si512(low, _mm512_slli_epi32::<4>(high));
    (
        _mm512_sub_epi32(q, _mm512_set1_epi32(32)),
        b[sc + l / 16] as i8 as f32,
    )
}

struct Iq4Nl;

impl Kind for Iq4Nl {
    const ELEMS: usize = 32;
    const SIZE: usize = 18;
    #[inline(always)]
    unsafe fn block(b: &[u8], _: &[f32; 2], mut f: impl FnMut(usize, [__m512; 2])) {
        let t = codebook(&IQ4_VALUES, splat_f16(b, 0));
        let q = bytes(b, 2);
        f(0, [lookup(q, t), lookup(_mm512_srli_epi32::<4>(q), t)]);
    }
}

/// The 16 int8 `values` as FP32 times `d`, a table for [`lookup`].
#[inline(always)]
unsafe fn codebook(values: &[i8; 16], d: __m512) -> __m512 {
    scaled(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(values.as_ptr().cast())),
        d,
    )
}

struct Iq4Xs;

impl Kind for Iq4Xs {
    const ELEMS: usize = 256;
    const SIZE: usize = 136;
    #[inline(always)]
    unsafe fn block(b: &[u8], _: &[f32; 2], mut f: impl FnMut(usize, [__m512; 2])) {
        let d = h(b, 0);
        let scales_h = u16::from_le_bytes([b[2], b[3]]);
        for ib in 0..8 {
            // 32 elements with one 6-bit scale: low nibbles of 16 bytes, then high.
            let low = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF;
            let high = ((scales_h >> (2 * ib)) & 3) as u8;
            let dl = d * ((low | (high << 4)) as i32 - 32) as f32;
            let t = codebook(&IQ4_VALUES, _mm512_set1_ps(dl));
            let q = bytes(b, 8 + 16 * ib);
            f(
                32 * ib,
                [lookup(q, t), lookup(_mm512_srli_epi32::<4>(q), t)],
            );
        }
    }
}

struct Mxfp4;

impl Kind for Mxfp4 {
    const ELEMS: usize = 32;
    const SIZE: usize = 17;
    #[inline(always)]
    unsafe fn block(b: &[u8], _: &[f32; 2], mut f: impl FnMut(usize, [__m512; 2])) {
        let t = codebook(&MXFP4_VALUES, _mm512_set1_ps(e8m0_half(b[0])));
        let q = bytes(b, 1);
        f(0, [lookup(q, t), lookup(_mm512_srli_epi32::<4>(q), t)]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{blocks, check, floats};
    use super::*;

    #[test]
    fn every_kernel_matches_the_decoded_float64_product() {
        let (n, k) = (7, 512);
        for kind in [
            Block::Q4_0,
            Block::Q4_1,
            Block::Q5_0,
            Block::Q5_1,
            Block::Q8_0,
            Block::Q4_K,
            Block::Q5_K,
            Block::Q6_K,
            Block::IQ4_NL,
            Block::IQ4_XS,
            Block::MXFP4,
        ] {
            let w = blocks(kind, n, k);
            for m in 1..=8 {
                let x = floats(m * k, m as u64);
                let mut t = vec![f32::NAN; n * m];
                if !rows(kind, &w, w.len() / n, &x, m, &mut t) {
                    return; // No AVX-512 here.
                }
                check(kind, &w, &x, m, &t);
            }
        }
    }
}
