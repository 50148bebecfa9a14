//! The FP32 vector registers the packed product's register tile is written in, one type
//! per tier: AVX-512 (16 lanes), AVX2 + FMA (8), NEON (4) and the target's baseline
//! (4 lanes in a plain array, which LLVM vectorizes for SSE2; multiply then add).
//!
//! Every method is `unsafe`: the CPU must run the tier's instructions, which holds inside
//! [`Vector::enter`] (the product runs nowhere else), and pointers must address `LANES`
//! readable (or writable) floats.

/// One tier's vector of `LANES` FP32 values.
pub(super) trait Vector {
    /// The register type.
    type V: Copy;
    /// FP32 lanes per register.
    const LANES: usize;

    /// Runs `f` inlined into a function compiled for this tier.
    ///
    /// # Safety
    /// The CPU must run this tier's instructions.
    unsafe fn enter<R>(f: impl FnOnce() -> R) -> R;
    /// Zeros.
    unsafe fn zero() -> Self::V;
    /// `v` in every lane.
    unsafe fn splat(v: f32) -> Self::V;
    /// The `LANES` floats at `p` (unaligned).
    unsafe fn load(p: *const f32) -> Self::V;
    /// Stores the lanes at `p` (unaligned).
    unsafe fn store(p: *mut f32, v: Self::V);
    /// `a b + c` (fused where the tier has FMA).
    unsafe fn mul_add(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `a + b`.
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    /// The sum of the lanes.
    unsafe fn sum(v: Self::V) -> f32;
}

#[cfg(target_arch = "x86_64")]
pub(super) use x86::{Avx2, Avx512};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Vector;

    /// AVX-512 F (with AVX2, FMA): 16 lanes.
    #[derive(Clone, Copy)]
    pub(in crate::packed) struct Avx512;

    impl Vector for Avx512 {
        type V = __m512;
        const LANES: usize = 16;

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
        unsafe fn load(p: *const f32) -> __m512 {
            _mm512_loadu_ps(p)
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: __m512) {
            _mm512_storeu_ps(p, v)
        }
        #[inline(always)]
        unsafe fn mul_add(a: __m512, b: __m512, c: __m512) -> __m512 {
            _mm512_fmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn add(a: __m512, b: __m512) -> __m512 {
            _mm512_add_ps(a, b)
        }
        #[inline(always)]
        unsafe fn sum(v: __m512) -> f32 {
            _mm512_reduce_add_ps(v)
        }
    }

    /// AVX2 + FMA: 8 lanes.
    #[derive(Clone, Copy)]
    pub(in crate::packed) struct Avx2;

    impl Vector for Avx2 {
        type V = __m256;
        const LANES: usize = 8;

        #[inline(always)]
        unsafe fn enter<R>(f: impl FnOnce() -> R) -> R {
            crate::simd::with_avx2(f)
        }
        #[inline(always)]
        unsafe fn zero() -> __m256 {
            _mm256_setzero_ps()
        }
        #[inline(always)]
        unsafe fn splat(v: f32) -> __m256 {
            _mm256_set1_ps(v)
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> __m256 {
            _mm256_loadu_ps(p)
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: __m256) {
            _mm256_storeu_ps(p, v)
        }
        #[inline(always)]
        unsafe fn mul_add(a: __m256, b: __m256, c: __m256) -> __m256 {
            _mm256_fmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn add(a: __m256, b: __m256) -> __m256 {
            _mm256_add_ps(a, b)
        }
        #[inline(always)]
        unsafe fn sum(v: __m256) -> f32 {
            let q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let h = _mm_add_ps(q, _mm_movehl_ps(q, q));
            _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)))
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(super) use neon::Neon;

#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;

    use super::Vector;

    /// NEON (Advanced SIMD, in the AArch64 baseline): 4 lanes.
    #[derive(Clone, Copy)]
    pub(in crate::packed) struct Neon;

    impl Vector for Neon {
        type V = float32x4_t;
        const LANES: usize = 4;

        #[inline(always)]
        unsafe fn enter<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        #[inline(always)]
        unsafe fn zero() -> float32x4_t {
            vdupq_n_f32(0.0)
        }
        #[inline(always)]
        unsafe fn splat(v: f32) -> float32x4_t {
            vdupq_n_f32(v)
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> float32x4_t {
            vld1q_f32(p)
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: float32x4_t) {
            vst1q_f32(p, v)
        }
        #[inline(always)]
        unsafe fn mul_add(a: float32x4_t, b: float32x4_t, c: float32x4_t) -> float32x4_t {
            vfmaq_f32(c, a, b)
        }
        #[inline(always)]
        unsafe fn add(a: float32x4_t, b: float32x4_t) -> float32x4_t {
            vaddq_f32(a, b)
        }
        #[inline(always)]
        unsafe fn sum(v: float32x4_t) -> f32 {
            vaddvq_f32(v)
        }
    }
}

/// The baseline: four lanes in an array (SSE2 registers once LLVM vectorizes them), a
/// multiply then an add (the baseline has no FMA instruction).
#[derive(Clone, Copy)]
pub(super) struct Portable;

impl Vector for Portable {
    type V = [f32; 4];
    const LANES: usize = 4;

    #[inline(always)]
    unsafe fn enter<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
    #[inline(always)]
    unsafe fn zero() -> [f32; 4] {
        [0.0; 4]
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> [f32; 4] {
        [v; 4]
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> [f32; 4] {
        p.cast::<[f32; 4]>().read_unaligned()
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: [f32; 4]) {
        p.cast::<[f32; 4]>().write_unaligned(v)
    }
    #[inline(always)]
    unsafe fn mul_add(a: [f32; 4], b: [f32; 4], c: [f32; 4]) -> [f32; 4] {
        [0, 1, 2, 3].map(|i| a[i] * b[i] + c[i])
    }
    #[inline(always)]
    unsafe fn add(a: [f32; 4], b: [f32; 4]) -> [f32; 4] {
        [0, 1, 2, 3].map(|i| a[i] + b[i])
    }
    #[inline(always)]
    unsafe fn sum(v: [f32; 4]) -> f32 {
        (v[0] + v[2]) + (v[1] + v[3])
    }
}
