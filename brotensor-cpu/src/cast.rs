//! Conversions between FP32 and the 16-bit float formats, round to nearest even, NaN kept
//! NaN and overflow to infinity (the `half` crate's rules), in parallel chunks.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;

use crate::stream::{copy_bytes, streaming, StreamedIter};

const CHUNK: usize = 1 << 15;

/// A float storage element the CPU converts to and from `f32` a slice at a time (the 16-bit
/// types use `half`'s slice conversions, which use the F16C instructions where present).
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
    fn widen(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    fn narrow(src: &[f32], dst: &mut [Self]) {
        dst.convert_from_f32_slice(src);
    }
}

impl FloatElem for bf16 {
    fn widen(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    fn narrow(src: &[f32], dst: &mut [Self]) {
        dst.convert_from_f32_slice(src);
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
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each_init(
            || vec![0.0f32; CHUNK],
            |wide, (o, x)| {
                let wide = &mut wide[..x.len()];
                I::widen(x, wide);
                O::narrow(wide, o);
            },
        );
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
}
