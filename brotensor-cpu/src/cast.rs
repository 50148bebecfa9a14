//! Conversions between FP32 and the 16-bit float formats, round to nearest even, NaN kept
//! NaN and overflow to infinity (the `half` crate's rules), in parallel chunks.

use half::{bf16, f16};
use rayon::prelude::*;

const CHUNK: usize = 1 << 15;

/// A float storage element the CPU can convert to and from `f32`.
pub trait FloatElem: Copy + Send + Sync + 'static {
    /// Widens to `f32` (exact).
    fn to_f32(self) -> f32;
    /// Narrows from `f32`, rounding to nearest even.
    fn from_f32(v: f32) -> Self;
}

impl FloatElem for f32 {
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl FloatElem for f16 {
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl FloatElem for bf16 {
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

/// `out[i] = O::from(x[i])` through `f32` (exact for every pair but the narrowing step, which
/// rounds once). Panics if the lengths differ.
pub fn convert<I: FloatElem, O: FloatElem>(x: &[I], out: &mut [O]) {
    assert_eq!(x.len(), out.len(), "convert: length mismatch");
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(o, x)| {
            o.iter_mut()
                .zip(x)
                .for_each(|(o, &x)| *o = O::from_f32(x.to_f32()))
        });
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
