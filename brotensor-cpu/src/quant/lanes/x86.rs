//! The x86-64 tiers' sixteen lanes: AVX-512 in one register, AVX2 in two.

use std::arch::x86_64::*;

use super::{sixteen, Lanes};

/// The f16 at `b[at..at + 2]`.
///
/// # Safety
/// The CPU must have F16C.
#[inline(always)]
pub(super) unsafe fn f16(b: &[u8], at: usize) -> f32 {
    let v = u16::from_le_bytes([b[at], b[at + 1]]) as i32;
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(v)))
}

/// The two f16 at `b[at..at + 4]`.
///
/// # Safety
/// The CPU must have F16C.
#[inline(always)]
pub(super) unsafe fn f16_pair(b: &[u8], at: usize) -> [f32; 2] {
    let v = i32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128(v));
    [_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v))]
}

/// AVX-512 F + BW (with AVX2, FMA, F16C): one register holds the sixteen lanes.
#[derive(Clone, Copy)]
pub(in crate::quant) struct Avx512;

impl Lanes for Avx512 {
    type F = __m512;
    type I = __m512i;
    type Linear = __m512;
    type Table = __m512;
    /// Two accumulators a row: 16 of the 32 registers.
    const ROWS_PER_PASS: usize = 8;
    const TWO_ACC_ROWS: usize = 8;

    #[inline(always)]
    unsafe fn enter<R>(f: impl FnOnce() -> R) -> R {
        crate::simd::with_avx512(f)
    }
    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> __m512 {
        _mm512_set1_ps(v)
    }
    #[inline(always)]
    unsafe fn load(x: *const f32) -> __m512 {
        _mm512_loadu_ps(x)
    }
    #[inline(always)]
    unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        _mm512_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        _mm512_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sum(a: __m512) -> f32 {
        _mm512_reduce_add_ps(a)
    }
    #[inline(always)]
    unsafe fn to_f32(q: __m512i) -> __m512 {
        _mm512_cvtepi32_ps(q)
    }
    #[inline(always)]
    unsafe fn bytes(b: &[u8], at: usize) -> __m512i {
        _mm512_cvtepu8_epi32(_mm_loadu_si128(sixteen(b, at).cast()))
    }
    #[inline(always)]
    unsafe fn signed_bytes(b: &[u8], at: usize) -> __m512i {
        _mm512_cvtepi8_epi32(_mm_loadu_si128(sixteen(b, at).cast()))
    }
    #[inline(always)]
    unsafe fn and(q: __m512i, m: i32) -> __m512i {
        _mm512_and_si512(q, _mm512_set1_epi32(m))
    }
    #[inline(always)]
    unsafe fn or(a: __m512i, b: __m512i) -> __m512i {
        _mm512_or_si512(a, b)
    }
    #[inline(always)]
    unsafe fn shr(q: __m512i, n: u32) -> __m512i {
        _mm512_srlv_epi32(q, _mm512_set1_epi32(n as i32))
    }
    #[inline(always)]
    unsafe fn shl(q: __m512i, n: u32) -> __m512i {
        _mm512_sllv_epi32(q, _mm512_set1_epi32(n as i32))
    }
    #[inline(always)]
    unsafe fn sub(q: __m512i, v: i32) -> __m512i {
        _mm512_sub_epi32(q, _mm512_set1_epi32(v))
    }
    #[inline(always)]
    unsafe fn or_where_bits(q: __m512i, bits: u16, v: i32) -> __m512i {
        _mm512_mask_or_epi32(q, bits, q, _mm512_set1_epi32(v))
    }
    #[inline(always)]
    unsafe fn or_where_bit(q: __m512i, qh: __m512i, bit: u32, v: i32) -> __m512i {
        let k = _mm512_test_epi32_mask(qh, _mm512_set1_epi32(1 << bit));
        _mm512_mask_or_epi32(q, k, q, _mm512_set1_epi32(v))
    }
    #[inline(always)]
    unsafe fn linear_table(d: __m512, c: __m512) -> __m512 {
        let q = _mm512_setr_ps(
            0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0,
        );
        _mm512_fmadd_ps(q, d, c)
    }
    #[inline(always)]
    unsafe fn linear(q: __m512i, t: __m512) -> __m512 {
        // One permute in place of a conversion and a multiply-add.
        _mm512_permutexvar_ps(q, t)
    }
    #[inline(always)]
    unsafe fn table(values: &[i8; 16], d: __m512) -> __m512 {
        let v = _mm512_cvtepi8_epi32(_mm_loadu_si128(values.as_ptr().cast()));
        _mm512_mul_ps(_mm512_cvtepi32_ps(v), d)
    }
    #[inline(always)]
    unsafe fn lookup(q: __m512i, t: __m512) -> __m512 {
        _mm512_permutexvar_ps(q, t)
    }
}

/// AVX2 + FMA + F16C: two registers hold the sixteen lanes (`[0]` lanes 0-7, `[1]` 8-15).
#[derive(Clone, Copy)]
pub(in crate::quant) struct Avx2;

/// `$body` on each of the two halves of `$a` (bound to `$x`), or of `$a` and `$b` (bound to
/// `$x`, `$y`): written out twice, no closure, so the intrinsics inline into the tier's code.
macro_rules! halves {
    ($a:expr, |$x:ident| $body:expr) => {{
        let [a0, a1] = $a;
        [
            {
                let $x = a0;
                $body
            },
            {
                let $x = a1;
                $body
            },
        ]
    }};
    ($a:expr, $b:expr, |$x:ident, $y:ident| $body:expr) => {{
        let ([a0, a1], [b0, b1]) = ($a, $b);
        [
            {
                let ($x, $y) = (a0, b0);
                $body
            },
            {
                let ($x, $y) = (a1, b1);
                $body
            },
        ]
    }};
}

/// Lane `j` holds `1 << j` (lanes 0-15 over the two halves).
#[inline(always)]
unsafe fn lane_bits() -> [__m256i; 2] {
    [
        _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128),
        _mm256_setr_epi32(256, 512, 1024, 2048, 4096, 8192, 16384, 32768),
    ]
}

impl Lanes for Avx2 {
    type F = [__m256; 2];
    type I = [__m256i; 2];
    /// `(d, c)`: [`Lanes::linear`] converts and multiply-adds (two instructions; a 16-entry
    /// table costs four on AVX2).
    type Linear = (__m256, __m256);
    /// Entries 0-7 and 8-15.
    type Table = [__m256; 2];
    /// Up to two rows with two accumulators, five with one: the accumulators take 10 of the
    /// 16 registers, one decoded sixteen 2 and its scale and offset 2 (the kernels decode a
    /// block sixteen elements at a time for this), so kinds that keep more constants (bit
    /// masks, codebooks) can still spill one at five rows. Measured on Zen 3 for Q4_1 and
    /// Q8_0: five rows in one pass beat four plus one by 10-30%.
    const ROWS_PER_PASS: usize = 5;
    const TWO_ACC_ROWS: usize = 2;

    #[inline(always)]
    unsafe fn enter<R>(f: impl FnOnce() -> R) -> R {
        crate::simd::with_avx2(f)
    }
    #[inline(always)]
    unsafe fn zero() -> [__m256; 2] {
        [_mm256_setzero_ps(); 2]
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> [__m256; 2] {
        [_mm256_set1_ps(v); 2]
    }
    #[inline(always)]
    unsafe fn load(x: *const f32) -> [__m256; 2] {
        [_mm256_loadu_ps(x), _mm256_loadu_ps(x.add(8))]
    }
    #[inline(always)]
    unsafe fn fma(a: [__m256; 2], b: [__m256; 2], c: [__m256; 2]) -> [__m256; 2] {
        [
            _mm256_fmadd_ps(a[0], b[0], c[0]),
            _mm256_fmadd_ps(a[1], b[1], c[1]),
        ]
    }
    #[inline(always)]
    unsafe fn fma_rows<const M: usize, const A: usize>(
        acc: &mut [[[__m256; 2]; A]; M],
        a: usize,
        v: [__m256; 2],
        x: *const f32,
        k: usize,
    ) {
        for (h, v) in v.into_iter().enumerate() {
            for (i, acc) in acc.iter_mut().enumerate() {
                let x = _mm256_loadu_ps(x.add(i * k + 8 * h));
                acc[a][h] = _mm256_fmadd_ps(v, x, acc[a][h]);
            }
        }
    }
    #[inline(always)]
    unsafe fn mul(a: [__m256; 2], b: [__m256; 2]) -> [__m256; 2] {
        halves!(a, b, |a, b| _mm256_mul_ps(a, b))
    }
    #[inline(always)]
    unsafe fn add(a: [__m256; 2], b: [__m256; 2]) -> [__m256; 2] {
        halves!(a, b, |a, b| _mm256_add_ps(a, b))
    }
    #[inline(always)]
    unsafe fn sum(a: [__m256; 2]) -> f32 {
        let v = _mm256_add_ps(a[0], a[1]);
        let v = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
        _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)))
    }
    #[inline(always)]
    unsafe fn to_f32(q: [__m256i; 2]) -> [__m256; 2] {
        halves!(q, |q| _mm256_cvtepi32_ps(q))
    }
    #[inline(always)]
    unsafe fn bytes(b: &[u8], at: usize) -> [__m256i; 2] {
        let p = sixteen(b, at);
        [
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.cast())),
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(8).cast())),
        ]
    }
    #[inline(always)]
    unsafe fn signed_bytes(b: &[u8], at: usize) -> [__m256i; 2] {
        let p = sixteen(b, at);
        [
            _mm256_cvtepi8_epi32(_mm_loadl_epi64(p.cast())),
            _mm256_cvtepi8_epi32(_mm_loadl_epi64(p.add(8).cast())),
        ]
    }
    #[inline(always)]
    unsafe fn and(q: [__m256i; 2], m: i32) -> [__m256i; 2] {
        halves!(q, |q| _mm256_and_si256(q, _mm256_set1_epi32(m)))
    }
    #[inline(always)]
    unsafe fn or(a: [__m256i; 2], b: [__m256i; 2]) -> [__m256i; 2] {
        halves!(a, b, |a, b| _mm256_or_si256(a, b))
    }
    #[inline(always)]
    unsafe fn shr(q: [__m256i; 2], n: u32) -> [__m256i; 2] {
        halves!(q, |q| _mm256_srlv_epi32(q, _mm256_set1_epi32(n as i32)))
    }
    #[inline(always)]
    unsafe fn shl(q: [__m256i; 2], n: u32) -> [__m256i; 2] {
        halves!(q, |q| _mm256_sllv_epi32(q, _mm256_set1_epi32(n as i32)))
    }
    #[inline(always)]
    unsafe fn sub(q: [__m256i; 2], v: i32) -> [__m256i; 2] {
        halves!(q, |q| _mm256_sub_epi32(q, _mm256_set1_epi32(v)))
    }
    #[inline(always)]
    unsafe fn or_where_bits(q: [__m256i; 2], bits: u16, v: i32) -> [__m256i; 2] {
        let b = _mm256_set1_epi32(bits as i32);
        halves!(q, lane_bits(), |q, l| {
            let set = _mm256_cmpeq_epi32(_mm256_and_si256(b, l), l);
            _mm256_or_si256(q, _mm256_and_si256(set, _mm256_set1_epi32(v)))
        })
    }
    #[inline(always)]
    unsafe fn or_where_bit(q: [__m256i; 2], qh: [__m256i; 2], bit: u32, v: i32) -> [__m256i; 2] {
        let l = _mm256_set1_epi32(1 << bit);
        halves!(q, qh, |q, h| {
            let set = _mm256_cmpeq_epi32(_mm256_and_si256(h, l), l);
            _mm256_or_si256(q, _mm256_and_si256(set, _mm256_set1_epi32(v)))
        })
    }
    #[inline(always)]
    unsafe fn linear_table(d: [__m256; 2], c: [__m256; 2]) -> (__m256, __m256) {
        (d[0], c[0])
    }
    #[inline(always)]
    unsafe fn linear(q: [__m256i; 2], (d, c): (__m256, __m256)) -> [__m256; 2] {
        halves!(q, |q| _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), d, c))
    }
    #[inline(always)]
    unsafe fn table(values: &[i8; 16], d: [__m256; 2]) -> [__m256; 2] {
        let v = _mm_loadu_si128(values.as_ptr().cast());
        [
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d[0]),
            _mm256_mul_ps(
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v, v))),
                d[0],
            ),
        ]
    }
    #[inline(always)]
    unsafe fn lookup(q: [__m256i; 2], t: [__m256; 2]) -> [__m256; 2] {
        // Entries `q & 7` of both halves of the table; bit 3 (moved to the sign) picks one.
        halves!(q, |q| {
            let lo = _mm256_permutevar8x32_ps(t[0], q);
            let hi = _mm256_permutevar8x32_ps(t[1], q);
            _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32::<28>(q)))
        })
    }
}
