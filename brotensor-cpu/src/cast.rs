//! Conversions between FP32 and the 16-bit float formats, round to nearest even, NaN kept
//! NaN and overflow to infinity (the `half` crate's rules), in parallel chunks.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
use crate::simd::{level, Level};
use crate::stream::{copy_bytes, streaming, StreamedIter};

const CHUNK: usize = 1 << 15;

/// A float storage element the CPU converts to and from `f32` a slice at a time: F16 with the
/// F16C instructions where the vector tier has them (else `half`'s conversions), BF16 with
/// integer arithmetic that vectorizes. Every path gives `half`'s bits (round to nearest even,
/// NaN kept NaN, overflow to infinity).
pub trait FloatElem: bytemuck::Pod + Default + Send + Sync + 'static {
    /// Widens `src` into `dst` (exact). Equal lengths.
    fn widen(src: &[Self], dst: &mut [f32]);
    /// Narrows `src` into `dst`, rounding to nearest even. Equal lengths.
    fn narrow(src: &[f32], dst: &mut [Self]);
}

impl FloatElem for f32 {
    fn widen(src: &[Self], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
    fn narrow(src: &[f32], dst: &mut [Self]) {
        dst.copy_from_slice(src);
    }
}

impl FloatElem for f16 {
    #[inline]
    fn widen(src: &[Self], dst: &mut [f32]) {
        assert_eq!(src.len(), dst.len(), "widen: length mismatch");
        #[cfg(target_arch = "x86_64")]
        if level() != Level::Baseline {
            // SAFETY: every tier above the baseline was detected with AVX2 and F16C.
            unsafe { f16c::widen(bytemuck::cast_slice(src), dst) };
            return;
        }
        src.convert_to_f32_slice(dst);
    }
    #[inline]
    fn narrow(src: &[f32], dst: &mut [Self]) {
        assert_eq!(src.len(), dst.len(), "narrow: length mismatch");
        #[cfg(target_arch = "x86_64")]
        if level() != Level::Baseline {
            // SAFETY: as in `widen`.
            unsafe { f16c::narrow(src, bytemuck::cast_slice_mut(dst)) };
            return;
        }
        dst.convert_from_f32_slice(src);
    }
}

impl FloatElem for bf16 {
    #[inline(always)]
    fn widen(src: &[Self], dst: &mut [f32]) {
        assert_eq!(src.len(), dst.len(), "widen: length mismatch");
        for (d, s) in dst.iter_mut().zip(src) {
            *d = bf16_bits_to_f32(s.to_bits());
        }
    }
    #[inline(always)]
    fn narrow(src: &[f32], dst: &mut [Self]) {
        assert_eq!(src.len(), dst.len(), "narrow: length mismatch");
        for (d, s) in dst.iter_mut().zip(src) {
            *d = bf16::from_bits(f32_to_bf16_bits(*s));
        }
    }
}

/// The `f32` of a BF16 value's bits: exact (a NaN comes back quiet, as `half` does it).
#[inline(always)]
fn bf16_bits_to_f32(b: u16) -> f32 {
    let quiet = if b & 0x7FFF > 0x7F80 { 0x0040 } else { 0 };
    f32::from_bits(u32::from(b | quiet) << 16)
}

/// The BF16 bits of `v` rounded to nearest even (overflow to infinity, NaN kept NaN with its
/// quiet bit set), branch-free so that a loop of it vectorizes.
#[inline(always)]
fn f32_to_bf16_bits(v: f32) -> u16 {
    let x = v.to_bits();
    let rounded = (x.wrapping_add(0x7FFF + ((x >> 16) & 1)) >> 16) as u16;
    let nan = ((x >> 16) | 0x0040) as u16;
    if x & 0x7FFF_FFFF > 0x7F80_0000 {
        nan
    } else {
        rounded
    }
}

/// F16 conversions with the F16C instructions, 8 values at a time.
#[cfg(target_arch = "x86_64")]
mod f16c {
    use std::arch::x86_64::{
        __m128i, _mm256_cvtph_ps, _mm256_cvtps_ph, _mm256_loadu_ps, _mm256_storeu_ps,
        _mm_loadu_si128, _mm_storeu_si128, _MM_FROUND_TO_NEAREST_INT,
    };

    use half::f16;

    /// `dst[i] = src[i]` (F16 bits) widened, exactly. Equal lengths.
    ///
    /// # Safety
    /// The CPU must support AVX and F16C.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn widen(src: &[u16], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        let whole = n - n % 8;
        for i in (0..whole).step_by(8) {
            // SAFETY: `i + 8 <= whole <= n`, so both 8-element accesses lie inside their
            // slices; the loads and stores are unaligned ones, and the caller guarantees the
            // features.
            unsafe {
                let h = _mm_loadu_si128(src.as_ptr().add(i).cast::<__m128i>());
                _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
            }
        }
        for (d, &s) in dst[whole..n].iter_mut().zip(&src[whole..n]) {
            *d = f16::from_bits(s).to_f32_const();
        }
    }

    /// `dst[i] = src[i]` rounded to nearest even into F16 bits. Equal lengths.
    ///
    /// # Safety
    /// The CPU must support AVX and F16C.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn narrow(src: &[f32], dst: &mut [u16]) {
        let n = src.len().min(dst.len());
        let whole = n - n % 8;
        for i in (0..whole).step_by(8) {
            // SAFETY: as in `widen`: both 8-element accesses lie inside their slices.
            unsafe {
                let v = _mm256_loadu_ps(src.as_ptr().add(i));
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm_storeu_si128(dst.as_mut_ptr().add(i).cast::<__m128i>(), h);
            }
        }
        for (d, &s) in dst[whole..n].iter_mut().zip(&src[whole..n]) {
            *d = f16::from_f32_const(s).to_bits();
        }
    }
}

/// `out[i] = O::from(x[i])` through `f32` (exact for every pair but the narrowing step, which
/// rounds once); between equal types, a [`copy`]. Panics if the lengths differ.
pub fn convert<I: FloatElem, O: FloatElem>(x: &[I], out: &mut [O]) {
    assert_eq!(x.len(), out.len(), "convert: length mismatch");
    if std::any::TypeId::of::<I>() == std::any::TypeId::of::<O>() {
        copy(bytemuck::cast_slice_mut(out), bytemuck::cast_slice(x));
        return;
    }
    let f32_id = std::any::TypeId::of::<f32>();
    if std::any::TypeId::of::<O>() == f32_id {
        // Widening into F32: straight into `out` (`O` is `f32`, so the cast is the identity).
        out.par_chunks_mut(CHUNK)
            .zip(x.par_chunks(CHUNK))
            .for_each(|(o, x)| I::widen(x, bytemuck::cast_slice_mut(o)));
        return;
    }
    if std::any::TypeId::of::<I>() == f32_id {
        out.par_chunks_mut(CHUNK)
            .zip(x.par_chunks(CHUNK))
            .for_each(|(o, x)| O::narrow(bytemuck::cast_slice(x), o));
        return;
    }
    // Between the 16-bit types: through an F32 block.
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(o, x)| {
            let mut wide = [0.0f32; 512];
            for (o, x) in o.chunks_mut(512).zip(x.chunks(512)) {
                let wide = &mut wide[..x.len()];
                I::widen(x, wide);
                O::narrow(wide, o);
            }
        });
}

/// Bytes per parallel task of [`copy`].
const COPY_CHUNK: usize = 1 << 18;

/// `dst.copy_from_slice(src)` on all cores, with streaming stores when `dst` is large
/// ([`crate::stream`]). Panics if the lengths differ.
pub fn copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy: length mismatch");
    streaming(dst.len(), 1, |streaming| {
        dst.par_chunks_mut(COPY_CHUNK)
            .zip(src.par_chunks(COPY_CHUNK))
            .for_each_streamed(streaming, |stream, (d, s)| copy_bytes(stream, d, s))
    });
}

/// Bytes per parallel task of [`zero`].
const ZERO_CHUNK: usize = 1 << 18;

/// `dst[i] = 0`.
pub fn zero(dst: &mut [u8]) {
    dst.par_chunks_mut(ZERO_CHUNK).for_each(|c| c.fill(0));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_nearest_even_and_keeps_specials() {
        // 1 + 2^-11 lies halfway between two f16 values; even rounding goes down to 1.
        let x = [
            1.0 + 2f32.powi(-11),
            1.0 + 3.0 * 2f32.powi(-11),
            f32::NAN,
            1e6,
            -0.0,
        ];
        let mut h = [f16::ZERO; 5];
        convert(&x, &mut h);
        assert_eq!(h[0], f16::ONE);
        assert_eq!(h[1].to_f32(), 1.0 + 2.0 * 2f32.powi(-10));
        assert!(h[2].is_nan());
        assert!(h[3].is_infinite());
        assert!(h[4].is_sign_negative());
        let mut b = [bf16::ZERO; 5];
        convert(&x, &mut b);
        assert!(b[2].is_nan());
        assert_eq!(b[3].to_f32(), 999_424.0);
    }

    /// Values that probe rounding: every F16 and BF16 value, the midpoints between
    /// neighbours and their one-ulp neighbours, specials, and a sweep of f32 bit patterns.
    fn probes() -> Vec<f32> {
        let mut v = Vec::new();
        for b in 0..=u16::MAX {
            for w in [
                f16::from_bits(b).to_f32_const(),
                bf16::from_bits(b).to_f32(),
            ] {
                let bits = w.to_bits();
                v.extend([w, f32::from_bits(bits.wrapping_add(1))]);
            }
            let (lo, hi) = (
                f16::from_bits(b).to_f32_const(),
                f16::from_bits(b.wrapping_add(1)).to_f32_const(),
            );
            let mid = (lo + hi) / 2.0;
            v.extend([
                mid,
                f32::from_bits(mid.to_bits().wrapping_add(1)),
                f32::from_bits(mid.to_bits().wrapping_sub(1)),
            ]);
            let bits = u32::from(b) << 16 | 0x8000;
            v.extend([
                f32::from_bits(bits),
                f32::from_bits(bits + 1),
                f32::from_bits(bits - 1),
            ]);
        }
        v.extend([
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN_POSITIVE,
            65520.0,
            -65519.99,
        ]);
        v.extend((0..1 << 16).map(|i: u32| f32::from_bits(i.wrapping_mul(0x9E37_79B9))));
        // An odd length: the 8-wide paths leave a tail.
        v.push(1.0);
        v
    }

    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    #[test]
    fn slice_conversions_match_the_scalar_ones_bit_for_bit() {
        // On this CPU's tier (F16C where it has it); the scalar references are `half`'s
        // software conversions.
        let x = probes();
        let mut h = vec![f16::ZERO; x.len()];
        f16::narrow(&x, &mut h);
        for (i, (&v, got)) in x.iter().zip(&h).enumerate() {
            let want = f16::from_f32_const(v);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "f16 narrow {i}: {v:e} gave {:#06x}, want {:#06x}",
                got.to_bits(),
                want.to_bits()
            );
        }
        let mut b = vec![bf16::ZERO; x.len()];
        bf16::narrow(&x, &mut b);
        for (&v, got) in x.iter().zip(&b) {
            assert_eq!(
                got.to_bits(),
                bf16::from_f32(v).to_bits(),
                "bf16 narrow {v:e}"
            );
        }
        let all: Vec<u16> = (0..=u16::MAX).chain([7, 8, 9]).collect();
        let hs: Vec<f16> = all.iter().map(|&b| f16::from_bits(b)).collect();
        let bs: Vec<bf16> = all.iter().map(|&b| bf16::from_bits(b)).collect();
        let mut w = vec![0.0f32; all.len()];
        f16::widen(&hs, &mut w);
        for (s, &got) in hs.iter().zip(&w) {
            assert!(
                same(got, s.to_f32_const()),
                "f16 widen {:#06x}",
                s.to_bits()
            );
        }
        bf16::widen(&bs, &mut w);
        for (s, &got) in bs.iter().zip(&w) {
            assert_eq!(
                got.to_bits(),
                s.to_f32().to_bits(),
                "bf16 widen {:#06x}",
                s.to_bits()
            );
        }
    }
}
