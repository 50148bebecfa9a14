//! The complex element ops of the spectral family, on interleaved `[re, im]` pairs of f32
//! (the C++ layout of a complex tensor, and the memory of a C64 one): products and their
//! gradients, magnitudes, phases and the polar form. One complex element per step, rows
//! of pairs split over rayon.

use num_complex::Complex32;
use rayon::prelude::*;

/// Complex elements per rayon job.
const CHUNK: usize = 1 << 13;

/// `slice` of interleaved pairs as complex numbers (`num-complex` is `[re, im]` in memory).
fn pairs(slice: &[f32]) -> &[Complex32] {
    bytemuck::cast_slice(slice)
}

/// [`pairs`], mutable.
fn pairs_mut(slice: &mut [f32]) -> &mut [Complex32] {
    bytemuck::cast_slice_mut(slice)
}

/// `y = a b` per complex element (`a`, `b`, `y` interleaved, one length).
pub fn complex_mul(a: &[f32], b: &[f32], y: &mut [f32]) {
    let (a, b) = (pairs(a), pairs(b));
    pairs_mut(y)
        .par_chunks_mut(CHUNK)
        .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
        .for_each(|(y, (a, b))| {
            for ((y, a), b) in y.iter_mut().zip(a).zip(b) {
                *y = Complex32::new(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re);
            }
        });
}

/// The gradient of `y = a b`: `da += dy conj(b)`, `db += dy conj(a)` (accumulated).
pub fn complex_mul_backward(a: &[f32], b: &[f32], dy: &[f32], da: &mut [f32], db: &mut [f32]) {
    let (a, b, dy) = (pairs(a), pairs(b), pairs(dy));
    pairs_mut(da)
        .par_chunks_mut(CHUNK)
        .zip(pairs_mut(db).par_chunks_mut(CHUNK))
        .zip(
            a.par_chunks(CHUNK)
                .zip(b.par_chunks(CHUNK))
                .zip(dy.par_chunks(CHUNK)),
        )
        .for_each(|((da, db), ((a, b), dy))| {
            for i in 0..da.len() {
                let g = dy[i];
                da[i] += Complex32::new(
                    g.re * b[i].re + g.im * b[i].im,
                    g.im * b[i].re - g.re * b[i].im,
                );
                db[i] += Complex32::new(
                    g.re * a[i].re + g.im * a[i].im,
                    g.im * a[i].re - g.re * a[i].im,
                );
            }
        });
}

/// `y = |z| = sqrt(re^2 + im^2)` per complex element (`y` real, half `z`'s length).
pub fn complex_abs(z: &[f32], y: &mut [f32]) {
    let z = pairs(z);
    y.par_chunks_mut(CHUNK)
        .zip(z.par_chunks(CHUNK))
        .for_each(|(y, z)| {
            for (y, z) in y.iter_mut().zip(z) {
                *y = (z.re * z.re + z.im * z.im).sqrt();
            }
        });
}

/// The gradient of `y = |z|`: `dz = dy z / |z|`, 0 where `|z| = 0` (overwritten).
pub fn complex_abs_backward(z: &[f32], dy: &[f32], dz: &mut [f32]) {
    let z = pairs(z);
    pairs_mut(dz)
        .par_chunks_mut(CHUNK)
        .zip(z.par_chunks(CHUNK).zip(dy.par_chunks(CHUNK)))
        .for_each(|(dz, (z, dy))| {
            for ((dz, z), &g) in dz.iter_mut().zip(z).zip(dy) {
                let r = (z.re * z.re + z.im * z.im).sqrt();
                *dz = if r > 0.0 {
                    Complex32::new(g * z.re / r, g * z.im / r)
                } else {
                    Complex32::new(0.0, 0.0)
                };
            }
        });
}

/// `y = atan2(im, re)` per complex element, radians in `[-pi, pi]` (`y` real); the origin
/// (either zero's sign) has phase 0.
pub fn complex_angle(z: &[f32], y: &mut [f32]) {
    let z = pairs(z);
    y.par_chunks_mut(CHUNK)
        .zip(z.par_chunks(CHUNK))
        .for_each(|(y, z)| {
            for (y, z) in y.iter_mut().zip(z) {
                *y = if z.re == 0.0 && z.im == 0.0 {
                    0.0
                } else {
                    z.im.atan2(z.re)
                };
            }
        });
}

/// `y = mag e^{i phase}` = `(mag cos phase, mag sin phase)` per element (`y` interleaved,
/// twice `mag`'s length).
pub fn complex_from_polar(mag: &[f32], phase: &[f32], y: &mut [f32]) {
    pairs_mut(y)
        .par_chunks_mut(CHUNK)
        .zip(mag.par_chunks(CHUNK).zip(phase.par_chunks(CHUNK)))
        .for_each(|(y, (m, p))| {
            for ((y, &m), &p) in y.iter_mut().zip(m).zip(p) {
                let (s, c) = p.sin_cos();
                *y = Complex32::new(m * c, m * s);
            }
        });
}
