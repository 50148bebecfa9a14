//! Image input: per-channel normalisation of NCHW planes, and decoded HWC bytes to
//! scaled FP32 NCHW.

use rayon::prelude::*;

/// `y[n, c] = (x[n, c] - mean[c]) / std[c]` over planes of `plane` elements; `x`, `y`:
/// `(n, c, plane)`, `y` overwritten. A zero `std[c]` divides by zero (IEEE: inf or NaN).
///
/// # Panics
/// If a length does not match those shapes.
pub fn image_normalize(x: &[f32], mean: &[f32], std: &[f32], plane: usize, y: &mut [f32]) {
    let c = mean.len();
    assert!(
        std.len() == c
            && y.len() == x.len()
            && (c == 0 || plane == 0 || x.len().is_multiple_of(c * plane)),
        "image_normalize: lengths"
    );
    if plane == 0 || c == 0 {
        return;
    }
    y.par_chunks_mut(plane)
        .zip(x.par_chunks(plane))
        .enumerate()
        .for_each(|(p, (out, src))| {
            let (m, s) = (mean[p % c], std[p % c]);
            for (o, &v) in out.iter_mut().zip(src) {
                *o = (v - m) / s;
            }
        });
}

/// `y[n, ch, i] = src[(n * pixels + i) * c + ch] * scale + bias`: interleaved bytes of `c`
/// channels per pixel (`pixels` pixels per image) to channel planes; `y` overwritten.
///
/// # Panics
/// If the lengths differ or `src` is not whole pixels.
pub fn image_u8_to_nchw(src: &[u8], c: usize, pixels: usize, scale: f32, bias: f32, y: &mut [f32]) {
    assert!(
        y.len() == src.len() && (c == 0 || pixels == 0 || src.len().is_multiple_of(c * pixels)),
        "image_u8_to_nchw: lengths"
    );
    if y.is_empty() {
        return;
    }
    y.par_chunks_mut(pixels).enumerate().for_each(|(p, out)| {
        let (n, ch) = (p / c, p % c);
        let img = &src[n * pixels * c..][..pixels * c];
        for (i, o) in out.iter_mut().enumerate() {
            *o = f32::from(img[i * c + ch]) * scale + bias;
        }
    });
}
