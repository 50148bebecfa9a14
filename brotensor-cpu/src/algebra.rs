//! The tensor-algebra reference: element-wise maps, single-axis reductions and structural
//! moves over plain slices, generic over the element (f32, f64, i64, complex).
//!
//! The scalar functions here carry the numpy semantics the GPU kernels follow (NaN rules,
//! negative bases in `power`, Smith's complex division); the slice functions document the
//! lengths they rely on and panic on the slice bounds when they are broken, never UB.

use num_complex::Complex;
use num_traits::Float;
use rayon::prelude::*;

use crate::simd::wide;

/// Elements per rayon task of the maps.
const CHUNK: usize = 1 << 14;

/// `out[i] = f(x[i])`. Panics unless `out.len() == x.len()`.
pub fn map1<T: Copy + Send + Sync, U: Copy + Send + Sync>(
    x: &[T],
    out: &mut [U],
    f: impl Fn(T) -> U + Sync,
) {
    assert_eq!(x.len(), out.len(), "map1: operand lengths");
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(o, x)| o.iter_mut().zip(x).for_each(|(o, &x)| *o = f(x)));
}

/// `out[i] = f(x[i], y[i])`. Panics unless the three lengths match.
pub fn map2<T: Copy + Send + Sync>(x: &[T], y: &[T], out: &mut [T], f: impl Fn(T, T) -> T + Sync) {
    assert!(
        x.len() == out.len() && y.len() == out.len(),
        "map2: operand lengths"
    );
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK).zip(y.par_chunks(CHUNK)))
        .for_each(|(o, (x, y))| {
            for ((o, &x), &y) in o.iter_mut().zip(x).zip(y) {
                *o = f(x, y);
            }
        });
}

/// `out[i] = f(x[i], y[i], z[i])`. Panics unless the four lengths match.
pub fn map3<T: Copy + Send + Sync>(
    x: &[T],
    y: &[T],
    z: &[T],
    out: &mut [T],
    f: impl Fn(T, T, T) -> T + Sync,
) {
    assert!(
        x.len() == out.len() && y.len() == out.len() && z.len() == out.len(),
        "map3: operand lengths"
    );
    out.par_iter_mut()
        .with_min_len(CHUNK)
        .enumerate()
        .for_each(|(i, o)| *o = f(x[i], y[i], z[i]));
}

/// numpy's `maximum`: NaN when either operand is.
pub fn maximum<T: Float>(x: T, y: T) -> T {
    if x.is_nan() || x > y {
        x
    } else {
        y
    }
}

/// numpy's `minimum`: NaN when either operand is.
pub fn minimum<T: Float>(x: T, y: T) -> T {
    if x.is_nan() || x < y {
        x
    } else {
        y
    }
}

/// numpy's `sign`: -1, 1, the zero itself, or NaN.
pub fn sign<T: Float>(x: T) -> T {
    if x > T::zero() {
        T::one()
    } else if x < T::zero() {
        -T::one()
    } else {
        x
    }
}

/// numpy's `power` on reals: `x^0 = 1` and `1^y = 1` even for NaN, a negative base takes
/// integral exponents only, and `0^y` keeps the base's sign for odd integral `y`.
pub fn power<T: Float>(x: T, y: T) -> T {
    if y == T::zero() || x == T::one() {
        return T::one();
    }
    if x < T::zero() && y.floor() != y {
        return T::nan();
    }
    x.powf(y)
}

/// `1` where `c`, else `0`.
pub fn indicator<T: Float>(c: bool) -> T {
    if c {
        T::one()
    } else {
        T::zero()
    }
}

/// `(a + bi) / (c + di)` by Smith's method on operands scaled by powers of two: the ratio
/// of the divisor's smaller part to its larger keeps every intermediate in range, and parts
/// beyond `2^32` (f32) or `2^256` (f64) are first scaled toward 1, so `2 / (1e38 + 1e38i)`
/// in f32 and `2 / (1e308 + 1e308i)` in f64 are finite and right. A zero divisor gives the
/// infinities and NaNs of dividing each part by zero.
pub fn complex_div<T: Float>(x: Complex<T>, y: Complex<T>) -> Complex<T> {
    let big = scale_threshold::<T>();
    let small = T::one() / big;
    // Scales a pair toward 1 by `small` or `big`; returns the factor that undoes it.
    let scale = |p: &mut (T, T), undo_big: T, undo_small: T| {
        let m = p.0.abs().max(p.1.abs());
        if m > big {
            *p = (p.0 * small, p.1 * small);
            undo_big
        } else if m < small && m > T::zero() {
            *p = (p.0 * big, p.1 * big);
            undo_small
        } else {
            T::one()
        }
    };
    let mut num = (x.re, x.im);
    let mut den = (y.re, y.im);
    let f_num = scale(&mut num, big, small);
    let f_den = scale(&mut den, small, big);
    let q = smith(num, den);
    Complex::new(q.0 * f_num * f_den, q.1 * f_num * f_den)
}

/// `2^32` for f32, `2^256` for f64: parts beyond it (or below its inverse) are scaled.
fn scale_threshold<T: Float>() -> T {
    let b = T::from(4_294_967_296.0f64).expect("2^32 is a float");
    if std::mem::size_of::<T>() > 4 {
        let b2 = b * b;
        let b4 = b2 * b2;
        b4 * b4
    } else {
        b
    }
}

/// Smith's division of `(a, b)` by `(c, d)`.
fn smith<T: Float>((a, b): (T, T), (c, d): (T, T)) -> (T, T) {
    if c.abs() >= d.abs() {
        if c == T::zero() && d == T::zero() {
            return (a / c.abs(), b / c.abs());
        }
        let r = d / c;
        let den = c + d * r;
        ((a + b * r) / den, (b - a * r) / den)
    } else {
        let r = c / d;
        let den = c * r + d;
        ((a * r + b) / den, (b * r - a) / den)
    }
}

/// `(a + bi)(c + di) = (ac - bd) + (ad + bc)i`, the textbook formula (as numpy).
pub fn complex_mul<T: Float>(x: Complex<T>, y: Complex<T>) -> Complex<T> {
    Complex::new(x.re * y.re - x.im * y.im, x.re * y.im + x.im * y.re)
}

/// `e^z = e^a (cos b + i sin b)` (a real `z` stays real).
pub fn complex_exp<T: Float>(z: Complex<T>) -> Complex<T> {
    let e = z.re.exp();
    if z.im == T::zero() {
        return Complex::new(e, z.im);
    }
    Complex::new(e * z.im.cos(), e * z.im.sin())
}

/// The principal logarithm `ln|z| + i atan2(b, a)`, `arg` in `[-pi, pi]`.
pub fn complex_ln<T: Float>(z: Complex<T>) -> Complex<T> {
    Complex::new(z.re.hypot(z.im).ln(), z.im.atan2(z.re))
}

/// `sin z = sin a cosh b + i cos a sinh b`.
pub fn complex_sin<T: Float>(z: Complex<T>) -> Complex<T> {
    Complex::new(z.re.sin() * z.im.cosh(), z.re.cos() * z.im.sinh())
}

/// `cos z = cos a cosh b - i sin a sinh b`.
pub fn complex_cos<T: Float>(z: Complex<T>) -> Complex<T> {
    Complex::new(z.re.cos() * z.im.cosh(), -(z.re.sin() * z.im.sinh()))
}

/// `tanh z` by Kahan's formula: with `t = tan b`, `s = sinh a`, `rho = cosh a`, `beta = 1 +
/// t^2`, `tanh z = (beta rho s + i t) / (1 + beta s^2)`; past `|a| = 22` the real part is
/// `+-1` to the last bit and the imaginary part `4 sin b cos b e^(-2|a|)`.
pub fn complex_tanh<T: Float>(z: Complex<T>) -> Complex<T> {
    let (a, b) = (z.re, z.im);
    let two = T::one() + T::one();
    if a.abs() > T::from(22.0).expect("22 fits") {
        let im = two * two * b.sin() * b.cos() * (-(two * a.abs())).exp();
        return Complex::new(T::one().copysign(a), im);
    }
    let t = b.tan();
    let beta = T::one() + t * t;
    let (s, rho) = (a.sinh(), a.cosh());
    let den = T::one() + beta * s * s;
    Complex::new(beta * rho * s / den, t / den)
}

/// `1 / sqrt z` with the principal square root (`re >= 0`, the imaginary part's sign
/// following `b`'s), the reciprocal by [`complex_div`].
pub fn complex_rsqrt<T: Float>(z: Complex<T>) -> Complex<T> {
    let (a, b) = (z.re, z.im);
    let two = T::one() + T::one();
    let modulus = a.hypot(b);
    let root = if a >= T::zero() {
        let x = ((modulus + a) / two).sqrt();
        let y = if x > T::zero() {
            b / (two * x)
        } else {
            T::zero()
        };
        Complex::new(x, y)
    } else {
        let t = ((modulus - a) / two).sqrt();
        Complex::new(b.abs() / (two * t), t.copysign(b))
    };
    complex_div(Complex::new(T::one(), T::zero()), root)
}

/// Columns one task of [`reduce_axis`] carries down the axis (a slice the compiler keeps in
/// vector registers and L1).
const COLUMN_TILE: usize = 256;

/// Independent accumulators of a row reduction (the compiler turns them into vector lanes).
const LANES: usize = 16;

/// Reduces `x`, seen as `[outer, n, inner]`, over its middle axis into `out` (`[outer,
/// inner]`), starting from `identity`; `f` must be associative and commutative up to
/// rounding (sum, product, max, min): rows are reduced in `LANES` interleaved partial
/// results, columns tile by tile down the axis, in parallel. Panics unless `x.len() == outer
/// n inner` and `out.len() == outer inner`.
pub fn reduce_axis<T: Copy + Send + Sync>(
    x: &[T],
    (outer, n, inner): (usize, usize, usize),
    out: &mut [T],
    identity: T,
    f: impl Fn(T, T) -> T + Sync,
) {
    assert_eq!(x.len(), outer * n * inner, "reduce_axis: input length");
    assert_eq!(out.len(), outer * inner, "reduce_axis: output length");
    if inner == 0 || outer == 0 {
        return;
    }
    if inner == 1 {
        // Each output is a contiguous row of `n`.
        out.par_iter_mut()
            .with_min_len((1 << 14) / n.max(1) + 1)
            .enumerate()
            .for_each(|(o, y)| {
                let row = &x[o * n..][..n];
                *y = wide(
                    #[inline(always)]
                    |_| {
                        let mut acc = [identity; LANES];
                        let mut chunks = row.chunks_exact(LANES);
                        for c in &mut chunks {
                            for j in 0..LANES {
                                acc[j] = f(acc[j], c[j]);
                            }
                        }
                        let mut r = identity;
                        for &v in chunks.remainder() {
                            r = f(r, v);
                        }
                        for &v in &acc {
                            r = f(r, v);
                        }
                        r
                    },
                );
            });
        return;
    }
    let parts = (rayon::current_num_threads() * 4).min(n).max(1);
    if outer < parts {
        // Few outputs rows: bands of the axis reduce whole rows (contiguous reads) into
        // partial rows, folded in band order.
        let band = n.div_ceil(parts);
        for (o, y) in out.chunks_mut(inner).enumerate() {
            let partials: Vec<Vec<T>> = (0..parts)
                .into_par_iter()
                .map(|p| {
                    let mut acc = vec![identity; inner];
                    for k in p * band..n.min((p + 1) * band) {
                        let row = &x[(o * n + k) * inner..][..inner];
                        for (a, &v) in acc.iter_mut().zip(row) {
                            *a = f(*a, v);
                        }
                    }
                    acc
                })
                .collect();
            y.fill(identity);
            for part in partials {
                for (a, v) in y.iter_mut().zip(part) {
                    *a = f(*a, v);
                }
            }
        }
        return;
    }
    // Tiles of columns, each carried down the axis.
    out.par_chunks_mut(inner).enumerate().for_each(|(o, row)| {
        row.par_chunks_mut(COLUMN_TILE)
            .enumerate()
            .for_each(|(t, tile)| {
                tile.fill(identity);
                let start = t * COLUMN_TILE;
                wide(
                    #[inline(always)]
                    |_| {
                        for k in 0..n {
                            let src = &x[(o * n + k) * inner + start..][..tile.len()];
                            for (acc, &v) in tile.iter_mut().zip(src) {
                                *acc = f(*acc, v);
                            }
                        }
                    },
                );
            });
    });
}

/// Row-major coordinates of element `e` over `dims`, into `coords`.
fn coords_of(mut e: usize, dims: &[usize], coords: &mut [usize]) {
    for d in (0..dims.len()).rev() {
        coords[d] = e % dims[d];
        e /= dims[d];
    }
}

/// One dim of a pad: `low` and `high` may be negative (crop), `interior` elements go
/// between neighbours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PadSpec {
    /// Elements before the first (negative: cut from the front).
    pub low: i64,
    /// Elements after the last (negative: cut from the back).
    pub high: i64,
    /// Elements between each pair of neighbours.
    pub interior: u64,
}

/// The output dim of padding `n` elements by `p`, `None` when it is negative or does not fit
/// in `usize`.
pub fn pad_dim(n: usize, p: PadSpec) -> Option<usize> {
    let n = n as i128;
    // `(n - 1) * interior` reaches 2^128 for the largest `n` and `interior`: checked.
    let stretched = if n == 0 {
        Some(0)
    } else {
        (n - 1)
            .checked_mul(p.interior as i128)
            .and_then(|s| s.checked_add(n))
    };
    let padded = stretched?
        .checked_add(p.low as i128)?
        .checked_add(p.high as i128)?;
    usize::try_from(padded).ok()
}

/// StableHLO pad with zeros: output coordinate `c` of a dim holds input coordinate
/// `(c - low) / (interior + 1)` when that divides exactly and lies in the input, else
/// `zero`. Panics unless `x.len()` is the product of `dims`, `pads.len() == dims.len()`, and
/// `out.len()` is the product of the padded dims ([`pad_dim`]).
pub fn pad<T: Copy + Send + Sync>(
    x: &[T],
    dims: &[usize],
    pads: &[PadSpec],
    zero: T,
    out: &mut [T],
) {
    assert_eq!(dims.len(), pads.len(), "pad: one spec per dim");
    let out_dims: Vec<usize> = dims
        .iter()
        .zip(pads)
        .map(|(&n, &p)| pad_dim(n, p).expect("pad: a valid output dim"))
        .collect();
    assert_eq!(
        out.len(),
        out_dims.iter().product::<usize>(),
        "pad: output length"
    );
    assert_eq!(x.len(), dims.iter().product::<usize>(), "pad: input length");
    let rank = dims.len();
    out.par_iter_mut()
        .with_min_len(4096)
        .enumerate()
        .for_each_init(
            || vec![0usize; rank],
            |coords, (e, o)| {
                coords_of(e, &out_dims, coords);
                let mut from = 0usize;
                for d in 0..rank {
                    let t = coords[d] as i128 - pads[d].low as i128;
                    let step = pads[d].interior as i128 + 1;
                    if t < 0 || t % step != 0 || t / step >= dims[d] as i128 {
                        *o = zero;
                        return;
                    }
                    from = from * dims[d] + (t / step) as usize;
                }
                *o = x[from];
            },
        );
}

/// Writes the dense `src` (row-major over `dims`) into `out` at `offset + sum(c_d
/// strides_d)`; positions must be distinct. A destination whose last stride is 1 is
/// copied row by row. Panics when a position is outside `out` or `src` is not `dims`'
/// product long.
pub fn place<T: Copy>(src: &[T], dims: &[usize], strides: &[usize], offset: usize, out: &mut [T]) {
    assert_eq!(
        src.len(),
        dims.iter().product::<usize>(),
        "place: source length"
    );
    if src.is_empty() {
        return;
    }
    let rank = dims.len();
    let run = if strides.last() == Some(&1) {
        dims[rank - 1]
    } else {
        1
    };
    let outer = &dims[..if run > 1 { rank - 1 } else { rank }];
    let mut coords = vec![0usize; outer.len()];
    for (r, chunk) in src.chunks(run).enumerate() {
        coords_of(r, outer, &mut coords);
        let to = offset
            + coords
                .iter()
                .zip(strides)
                .map(|(c, s)| c * s)
                .sum::<usize>();
        out[to..to + chunk.len()].copy_from_slice(chunk);
    }
}

/// Keeps the lower (`lower`) or upper triangle, relative to diagonal `k`, of every
/// `rows x cols` matrix of `x` (row-major, matrices consecutive), zeroing the rest. Panics
/// unless `out.len() == x.len()`, a multiple of `rows cols`.
pub fn triangle<T: Copy + Send + Sync>(
    x: &[T],
    (rows, cols): (usize, usize),
    k: i64,
    lower: bool,
    zero: T,
    out: &mut [T],
) {
    assert_eq!(x.len(), out.len(), "triangle: lengths");
    out.par_iter_mut()
        .with_min_len(4096)
        .zip(x)
        .enumerate()
        .for_each(|(e, (o, &v))| {
            let c = (e % cols) as i128;
            let r = ((e / cols) % rows) as i128;
            let keep = if lower {
                c - r <= k as i128
            } else {
                c - r >= k as i128
            };
            *o = if keep { v } else { zero };
        });
}

/// A gather or scatter geometry: per walked dim, the stride into `bases` and the stride
/// into the operand; `bases[b]` is entry `b`'s operand element (`None`: skipped, scatter
/// only).
#[derive(Clone, Copy, Debug)]
pub struct IndexMap<'a> {
    /// The dims walked (the gather's output, the scatter's updates).
    pub dims: &'a [usize],
    /// Per dim, the stride into `bases`.
    pub batch_strides: &'a [usize],
    /// Per dim, the stride into the operand.
    pub window_strides: &'a [usize],
    /// Each batch entry's base element in the operand.
    pub bases: &'a [Option<usize>],
    /// Whether windows of entries with different bases are disjoint (every window is one
    /// element wide along each dim an index moves): then only equal bases share targets.
    pub exclusive: bool,
}

impl IndexMap<'_> {
    /// The operand element of walked element `e`, `None` when its entry is skipped.
    fn target(&self, e: usize, coords: &mut [usize]) -> Option<usize> {
        coords_of(e, self.dims, coords);
        let dot = |s: &[usize]| coords.iter().zip(s).map(|(c, s)| c * s).sum::<usize>();
        self.bases[dot(self.batch_strides)].map(|b| b + dot(self.window_strides))
    }
}

/// `out[e] = src[target(e)]` over `map.dims`. Where the last walked dim is a window dim of
/// operand stride 1, whole runs are copied (with streaming stores for a large output, the
/// next run's source prefetched while one is copied).
/// Panics on a skipped entry or an index outside `src`, or unless `out` holds the product
/// of `map.dims`.
pub fn gather<T: bytemuck::Pod + Send + Sync>(src: &[T], map: &IndexMap<'_>, out: &mut [T]) {
    use crate::stream::{copy_bytes_ahead, streaming, StreamedIter};
    assert_eq!(
        out.len(),
        map.dims.iter().product::<usize>(),
        "gather: output length"
    );
    let rank = map.dims.len();
    let last = rank.wrapping_sub(1);
    let contiguous = rank > 0 && map.window_strides[last] == 1 && map.batch_strides[last] == 0;
    let run = if contiguous { map.dims[last].max(1) } else { 1 };
    let bytes = std::mem::size_of::<T>();
    let out_len = out.len();
    streaming(out_len, bytes, |s| {
        out.par_chunks_mut(run)
            .with_min_len((4096 / run).max(1))
            .enumerate()
            .for_each_streamed_init(
                s,
                || vec![0usize; rank],
                |stream, coords, (r, o)| {
                    let at = map
                        .target(r * run, coords)
                        .expect("gather: no skipped entry");
                    let n = o.len();
                    // The next run's source, prefetched while this one is copied.
                    let following = (r + 1) * run;
                    let next = (stream.prefetches() && contiguous && following < out_len)
                        .then(|| map.target(following, coords))
                        .flatten()
                        .and_then(|b| src.get(b..))
                        .map_or(&[][..], |t| &t[..n.min(t.len())]);
                    copy_bytes_ahead(
                        stream,
                        bytemuck::cast_slice_mut(o),
                        bytemuck::cast_slice(&src[at..at + n]),
                        bytemuck::cast_slice(next),
                    );
                },
            );
    });
}

/// `out[target(e)] = add(out[target(e)], updates[e])` for every update `e` in row-major
/// order (deterministic), skipping entries without a base. Panics on a target outside `out`
/// or unless `updates` holds the product of `map.dims`.
pub fn scatter_add<T: Copy>(
    updates: &[T],
    map: &IndexMap<'_>,
    out: &mut [T],
    add: impl Fn(T, T) -> T,
) {
    assert_eq!(
        updates.len(),
        map.dims.iter().product::<usize>(),
        "scatter: updates length"
    );
    let mut coords = vec![0usize; map.dims.len()];
    for (e, &u) in updates.iter().enumerate() {
        if let Some(t) = map.target(e, &mut coords) {
            out[t] = add(out[t], u);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smith_division_stays_finite_near_the_largest_values() {
        let q = complex_div(Complex::new(2.0f32, 0.0), Complex::new(1e38, 1e38));
        assert!(
            (q.re - 1e-38).abs() < 1e-44 && (q.im + 1e-38).abs() < 1e-44,
            "{q:?}"
        );
        let q = complex_div(Complex::new(2.0f64, 0.0), Complex::new(1e308, 1e308));
        assert!(
            (q.re - 1e-308).abs() < 1e-320 && (q.im + 1e-308).abs() < 1e-320,
            "{q:?}"
        );
        let q = complex_div(Complex::new(1e308f64, 1e308), Complex::new(1e308, 1e308));
        assert_eq!((q.re, q.im), (1.0, 0.0));
        let q = complex_div(Complex::new(1.0f64, 1.0), Complex::new(0.0, 0.0));
        assert!(q.re.is_infinite() && q.im.is_infinite());
    }

    #[test]
    fn pad_crops_and_interleaves() {
        let x = [1, 2, 3, 4];
        let p = |low, high, interior| PadSpec {
            low,
            high,
            interior,
        };
        let run = |s: PadSpec| {
            let mut out = vec![-1; pad_dim(4, s).unwrap()];
            pad(&x, &[4], &[s], 0, &mut out);
            out
        };
        assert_eq!(run(p(-1, 0, 0)), [2, 3, 4]);
        assert_eq!(run(p(-1, 0, 1)), [0, 2, 0, 3, 0, 4]);
        assert_eq!(run(p(2, 1, 0)), [0, 0, 1, 2, 3, 4, 0]);
        let s = p(i64::MIN, i64::MAX, 0);
        assert_eq!(pad_dim(2, s), Some(1));
        let mut out = vec![-1];
        pad(&[7, 8], &[2], &[s], 0, &mut out);
        assert_eq!(out, [0]);
        assert_eq!(pad_dim(2, p(-3, 0, 0)), None);
    }

    #[test]
    fn numpy_semantics_of_the_scalar_functions() {
        assert!(maximum(f64::NAN, 1.0).is_nan() && maximum(1.0, f64::NAN).is_nan());
        assert!(minimum(f32::NAN, 1.0).is_nan() && minimum(1.0, f32::NAN).is_nan());
        assert_eq!(power(-2.0f64, 3.0), -8.0);
        assert!(power(-2.0f64, 0.5).is_nan());
        assert_eq!(power(f64::NAN, 0.0), 1.0);
        assert_eq!(power(1.0, f64::NAN), 1.0);
        assert_eq!(sign(-0.0f64).to_bits(), (-0.0f64).to_bits());
        assert!(sign(f32::NAN).is_nan());
    }

    #[test]
    fn scatter_accumulates_overlaps_and_skips() {
        let bases = [Some(1), Some(1), None, Some(3)];
        let map = IndexMap {
            dims: &[4],
            batch_strides: &[1],
            window_strides: &[0],
            bases: &bases,
            exclusive: true,
        };
        let mut out = [1, 10, 100, 1000];
        scatter_add(&[2, 3, 99, 5], &map, &mut out, |a, b| a + b);
        assert_eq!(out, [1, 15, 100, 1005]);
    }

    #[test]
    fn large_row_gathers_stream_and_prefetch_every_row_right() {
        // A 16 MiB output turns streaming on, so every row takes the prefetching copy; rows
        // of 1027 elements start at every offset within a line.
        let (rows, cols) = (4096usize, 1027usize);
        let src: Vec<u32> = (0..(rows * cols) as u32).collect();
        let order: Vec<usize> = (0..rows).map(|r| (r * 1999 + 7) % rows).collect();
        let bases: Vec<Option<usize>> = order.iter().map(|&r| Some(r * cols)).collect();
        let map = IndexMap {
            dims: &[rows, cols],
            batch_strides: &[1, 0],
            window_strides: &[0, 1],
            bases: &bases,
            exclusive: true,
        };
        let mut out = vec![u32::MAX; rows * cols];
        gather(&src, &map, &mut out);
        for (i, row) in out.chunks(cols).enumerate() {
            assert_eq!(row, &src[order[i] * cols..][..cols], "row {i}");
        }
    }
}
