//! Element-wise FP32 maps. The math of each op is one scalar function (`exp`, `axpby`,
//! `exp_backward`, ...); the maps apply it over slices in parallel chunks.

use rayon::prelude::*;

use crate::simd::{wide, MulAdd};
use crate::stream::{streaming, write_map, write_zip, StreamedIter};

/// Elements per parallel task: large enough that scheduling is noise, small enough that
/// every core gets work on a few-MiB tensor.
const CHUNK: usize = 1 << 15;

/// `out[i] = f(m, x[i])`, `m` the [`MulAdd`] of the vector path; a large `out` is written
/// with streaming stores ([`crate::stream`]). Panics if the lengths differ.
pub fn map_unary(x: &[f32], out: &mut [f32], f: impl Fn(MulAdd, f32) -> f32 + Sync) {
    // Every element fits: the fallback is never taken and the test folds away.
    map_unary_fitted(x, out, |_| true, f, |_| f32::NAN);
}

/// [`map_unary`] for a function whose vector form `fast` holds only where `fits(x)`: each
/// chunk whose elements all fit runs `fast` on the vector path, any other chunk `exact`
/// element by element (a branch-free test per chunk, on data the map reads next anyway).
pub fn map_unary_fitted(
    x: &[f32],
    out: &mut [f32],
    fits: impl Fn(f32) -> bool + Sync,
    fast: impl Fn(MulAdd, f32) -> f32 + Sync,
    exact: impl Fn(f32) -> f32 + Sync,
) {
    assert_eq!(x.len(), out.len(), "map_unary_fitted: length mismatch");
    streaming(out.len(), 4, |streaming| {
        out.par_chunks_mut(CHUNK)
            .zip(x.par_chunks(CHUNK))
            .for_each_streamed(streaming, |stream, (o, x)| {
                wide(
                    #[inline(always)]
                    |m| {
                        if x.iter().fold(true, |all, &v| all & fits(v)) {
                            write_map(
                                stream,
                                o,
                                x,
                                #[inline(always)]
                                |v| fast(m, v),
                            )
                        } else {
                            for (o, &v) in o.iter_mut().zip(x) {
                                *o = exact(v);
                            }
                        }
                    },
                )
            });
    });
}

/// [`map_unary_fitted`] in place.
pub fn map_unary_fitted_inplace(
    y: &mut [f32],
    fits: impl Fn(f32) -> bool + Sync,
    fast: impl Fn(MulAdd, f32) -> f32 + Sync,
    exact: impl Fn(f32) -> f32 + Sync,
) {
    y.par_chunks_mut(CHUNK).for_each(|c| {
        wide(
            #[inline(always)]
            |m| {
                if c.iter().fold(true, |all, &v| all & fits(v)) {
                    for v in c.iter_mut() {
                        *v = fast(m, *v);
                    }
                } else {
                    for v in c.iter_mut() {
                        *v = exact(*v);
                    }
                }
            },
        )
    });
}

/// `y[i] = f(m, y[i])`, in place.
pub fn map_unary_inplace(y: &mut [f32], f: impl Fn(MulAdd, f32) -> f32 + Sync) {
    map_unary_fitted_inplace(y, |_| true, f, |_| f32::NAN);
}

/// `out[i] = f(m, x[i], y[i])`, streaming a large `out` like [`map_unary`]. Panics if the
/// lengths differ.
pub fn map_binary(
    x: &[f32],
    y: &[f32],
    out: &mut [f32],
    f: impl Fn(MulAdd, f32, f32) -> f32 + Sync,
) {
    // Every element fits: the fallback is never taken and the test folds away.
    map_binary_fitted(x, y, out, |_| true, f, |_, _| f32::NAN);
}

/// One operand of [`map_binary_rows`], read row by row over an output of `cols`-wide rows
/// (numpy broadcasting's common shapes, read in place instead of copied to full size).
#[derive(Clone, Copy, Debug)]
pub enum RowOperand<'a> {
    /// Every element: output row `r` reads `v[r * cols..(r + 1) * cols]`.
    Dense(&'a [f32]),
    /// One row of `cols` values, read by every output row.
    Row(&'a [f32]),
    /// One value per output row, repeated along it: row `r` reads `v[r]`.
    PerRow(&'a [f32]),
    /// One value for every element.
    Scalar(f32),
}

/// What one output row reads of an operand.
#[derive(Clone, Copy)]
enum RowValues<'a> {
    Slice(&'a [f32]),
    Value(f32),
}

impl<'a> RowOperand<'a> {
    /// Whether the operand holds what `rows` rows of `cols` read.
    fn fits(&self, rows: usize, cols: usize) -> bool {
        match *self {
            RowOperand::Dense(v) => rows.checked_mul(cols) == Some(v.len()),
            RowOperand::Row(v) => v.len() == cols,
            RowOperand::PerRow(v) => v.len() == rows,
            RowOperand::Scalar(_) => true,
        }
    }

    #[inline(always)]
    fn row(&self, r: usize, cols: usize) -> RowValues<'a> {
        match *self {
            RowOperand::Dense(v) => RowValues::Slice(&v[r * cols..(r + 1) * cols]),
            RowOperand::Row(v) => RowValues::Slice(v),
            RowOperand::PerRow(v) => RowValues::Value(v[r]),
            RowOperand::Scalar(v) => RowValues::Value(v),
        }
    }
}

/// `out[r, c] = f(m, x[r, c], y[r, c])` over `cols`-wide rows of `out`, each operand read as
/// its [`RowOperand`] says, streaming a large `out` like [`map_binary`].
///
/// # Panics
/// If `cols` is 0 while `out` is not empty, `out` is not whole rows, or an operand does not
/// hold what the rows read.
pub fn map_binary_rows(
    x: RowOperand<'_>,
    y: RowOperand<'_>,
    out: &mut [f32],
    cols: usize,
    f: impl Fn(MulAdd, f32, f32) -> f32 + Sync,
) {
    if out.is_empty() {
        return;
    }
    assert!(
        cols > 0 && out.len().is_multiple_of(cols),
        "map_binary_rows: whole rows"
    );
    let rows = out.len() / cols;
    assert!(
        x.fits(rows, cols) && y.fits(rows, cols),
        "map_binary_rows: an operand does not cover the rows"
    );
    let rows_per_job = (CHUNK / cols).max(1);
    streaming(out.len(), 4, |streaming| {
        out.par_chunks_mut(rows_per_job * cols)
            .enumerate()
            .for_each_streamed(streaming, |stream, (job, o)| {
                wide(
                    #[inline(always)]
                    |m| {
                        for (i, orow) in o.chunks_mut(cols).enumerate() {
                            let r = job * rows_per_job + i;
                            match (x.row(r, cols), y.row(r, cols)) {
                                (RowValues::Slice(a), RowValues::Slice(b)) => write_zip(
                                    stream,
                                    orow,
                                    (a, b),
                                    #[inline(always)]
                                    |a, b| f(m, a, b),
                                ),
                                (RowValues::Slice(a), RowValues::Value(b)) => write_map(
                                    stream,
                                    orow,
                                    a,
                                    #[inline(always)]
                                    |a| f(m, a, b),
                                ),
                                (RowValues::Value(a), RowValues::Slice(b)) => write_map(
                                    stream,
                                    orow,
                                    b,
                                    #[inline(always)]
                                    |b| f(m, a, b),
                                ),
                                (RowValues::Value(a), RowValues::Value(b)) => orow.fill(f(m, a, b)),
                            }
                        }
                    },
                )
            });
    });
}

/// [`map_binary`] for a function whose vector form `fast` holds only where `fits(x)` (its
/// first operand): each chunk whose `x` all fit runs `fast` on the vector path, any other
/// chunk `exact` element by element. Panics if the lengths differ.
pub fn map_binary_fitted(
    x: &[f32],
    y: &[f32],
    out: &mut [f32],
    fits: impl Fn(f32) -> bool + Sync,
    fast: impl Fn(MulAdd, f32, f32) -> f32 + Sync,
    exact: impl Fn(f32, f32) -> f32 + Sync,
) {
    assert!(
        x.len() == out.len() && y.len() == out.len(),
        "map_binary: length mismatch"
    );
    streaming(out.len(), 4, |streaming| {
        out.par_chunks_mut(CHUNK)
            .zip(x.par_chunks(CHUNK).zip(y.par_chunks(CHUNK)))
            .for_each_streamed(streaming, |stream, (o, (x, y))| {
                wide(
                    #[inline(always)]
                    |m| {
                        if x.iter().fold(true, |all, &v| all & fits(v)) {
                            write_zip(
                                stream,
                                o,
                                (x, y),
                                #[inline(always)]
                                |a, b| fast(m, a, b),
                            )
                        } else {
                            for (o, (&a, &b)) in o.iter_mut().zip(x.iter().zip(y)) {
                                *o = exact(a, b);
                            }
                        }
                    },
                )
            });
    });
}

/// `x[i] = f(m, x[i], y[i])`, in place on the first operand. Panics if the lengths differ.
pub fn map_binary_inplace(x: &mut [f32], y: &[f32], f: impl Fn(MulAdd, f32, f32) -> f32 + Sync) {
    assert_eq!(x.len(), y.len(), "map_binary_inplace: length mismatch");
    x.par_chunks_mut(CHUNK)
        .zip(y.par_chunks(CHUNK))
        .for_each(|(x, y)| {
            wide(
                #[inline(always)]
                |m| {
                    for (x, &y) in x.iter_mut().zip(y) {
                        *x = f(m, *x, y);
                    }
                },
            )
        });
}

/// `out[i] = value`.
pub fn fill(out: &mut [f32], value: f32) {
    out.par_chunks_mut(CHUNK).for_each(|c| c.fill(value));
}

/// `out[i] = 1` where `x[i] > t`, else `0` (NaN gives 0), widening 16-bit inputs exactly.
pub fn threshold<T: Copy>(x: &[T], t: f32, out: &mut [i8])
where
    f32: From<T>,
{
    out.iter_mut()
        .zip(x)
        .for_each(|(o, &v)| *o = i8::from(f32::from(v) > t));
}

/// `out[r, j] = q[r, j] * scales[r]`: int8 weights of `cols` per row, one scale per row.
pub fn dequant_i8_rows(q: &[i8], scales: &[f32], cols: usize, out: &mut [f32]) {
    let cols = cols.max(1);
    out.par_chunks_mut(cols)
        .zip(q.par_chunks(cols))
        .zip(scales.par_iter())
        .for_each(|((o, q), &sc)| o.iter_mut().zip(q).for_each(|(o, &v)| *o = v as f32 * sc));
}

/// `y (+|*)= v` broadcast over rows of `inner` elements of `y`: with `per_row`, row `r`
/// combines with the one value `v[r % v_len]`; otherwise row `r` combines element-wise with
/// row `r / repeat` of `v` (`v` holding rows of `inner` values). Multiplies when `multiply`,
/// else adds.
pub fn broadcast(
    y: &mut [f32],
    v: &[f32],
    inner: usize,
    per_row: bool,
    v_len: usize,
    repeat: usize,
    multiply: bool,
) {
    let inner = inner.max(1);
    let combine = |x: &mut f32, w: f32| {
        if multiply {
            *x *= w
        } else {
            *x += w
        }
    };
    y.par_chunks_mut(inner).enumerate().for_each(|(r, row)| {
        if per_row {
            let w = v[r % v_len];
            row.iter_mut().for_each(|x| combine(x, w));
        } else {
            let at = r / repeat.max(1) * inner;
            row.iter_mut()
                .zip(&v[at..at + inner])
                .for_each(|(x, &w)| combine(x, w));
        }
    });
}

/// `lo` if `x < lo`, `hi` if `x > hi`, else `x`. Comparisons, not min/max, so NaN passes
/// through and `lo > hi` yields `hi`.
#[inline]
pub fn clamp(x: f32, lo: f32, hi: f32) -> f32 {
    let v = if x < lo { lo } else { x };
    if v > hi {
        hi
    } else {
        v
    }
}

/// `a*x + b*y`.
#[inline]
pub fn axpby(x: f32, y: f32, a: f32, b: f32) -> f32 {
    a * x + b * y
}

/// `e^x` by [`exp_fast`] (vectorizes; relative error below 4e-7; results below
/// `f32::MIN_POSITIVE` flush to zero).
#[inline]
pub fn exp(x: f32) -> f32 {
    exp_fast(x)
}

/// `e^x` without branches or calls, so loops over it vectorize: the argument is split as
/// `n ln2 + r` with `|r| <= ln2/2`, `e^r` is a degree-6 polynomial and `2^n` is built in
/// the exponent bits (relative error below 4e-7, 3 ulp). Overflows to infinity like `exp`; results
/// below `f32::MIN_POSITIVE` flush to zero; NaN stays NaN.
#[inline(always)]
pub fn exp_fast(x: f32) -> f32 {
    exp_with(MulAdd::Split, x)
}

/// [`exp_fast`] with its multiply-adds evaluated as `m` says (fused: fewer instructions on
/// the vector paths that have FMA, within the same error bound).
#[inline(always)]
pub fn exp_with(m: MulAdd, x: f32) -> f32 {
    let x = x.clamp(-88.0, 88.8);
    // -0.0 is the additive identity of every float, so the tail's add folds away.
    exp_reduced(m, x, -0.0, x)
}

/// `e^(x + tail)` for an argument carried in two parts, `tail` small beside `x`: `n` is
/// chosen from their rounded sum (so the reduced argument stays within `ln2/2`), but the
/// sum itself never enters the reduced argument `(x - n ln2) + tail`, so the low part's
/// bits are kept. As [`exp_with`] otherwise; `x + tail` below -88 gives 0.
#[inline(always)]
pub fn exp_with_tail(m: MulAdd, x: f32, tail: f32) -> f32 {
    let x = x.clamp(-88.0, 88.8);
    exp_reduced(m, x, tail, (x + tail).clamp(-88.0, 88.8))
}

/// `e^(x + tail)` with `n = round(s / ln2)`, `s` the clamped `x + tail` (`x` itself for
/// [`exp_with`]) and `x` clamped: `x + tail = n ln2 + r`, `|r| <= ln2/2`, `e^r` a degree-6
/// polynomial, times `2^n`.
#[inline(always)]
fn exp_reduced(m: MulAdd, x: f32, tail: f32, s: f32) -> f32 {
    let (r, two_n) = ln2_reduce(m, x, s);
    let r = r + tail;
    let mut p = 1.0 / 720.0;
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = m.apply(p, r, c);
    }
    p * two_n
}

/// `(x - n ln2, 2^n)` with `n = round(s / ln2)` (`s` in [-88, 88.8], usually `x` itself):
/// `n` through the `1.5 * 2^23` shifter, `ln2` in two parts, `2^n` built in the exponent bits
/// by integer operations only, so loops over it vectorize. `n + 127` lies in [0, 255]: 0
/// gives 0.0 (results flush), 255 infinity.
#[inline(always)]
fn ln2_reduce(m: MulAdd, x: f32, s: f32) -> (f32, f32) {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Round to nearest (exact for |n| < 2^22); the shifter leaves n in t's low bits.
    const SHIFTER: f32 = 12_582_912.0;
    let t = m.apply(s, LOG2E, SHIFTER);
    let n = t - SHIFTER;
    let r = m.apply(-n, LN2_LO, m.apply(-n, LN2_HI, x));
    let n_bits = t.to_bits().wrapping_sub(SHIFTER.to_bits());
    (r, f32::from_bits(n_bits.wrapping_add(127) << 23))
}

/// `tanh |x| = E / (E + 2)` with `E = e^{2|x|} - 1`, and the sign of `x`: one exponential
/// and one division, no branch, so loops over it vectorize. `E` is formed without
/// cancellation: `2|x| = n ln2 + r`, `E = 2^n q + (2^n - 1)` with `q = e^r - 1` a
/// polynomial with no constant term, so near 0 (`n = 0`) `E` is `q` itself and keeps its
/// relative accuracy. Saturates at `|x| = 10`, where tanh is 1 in f32. NaN stays NaN.
#[inline(always)]
pub fn tanh_with(m: MulAdd, x: f32) -> f32 {
    let a = x.abs();
    // Past 10 the result is 1 in f32. `if`, not `min`: a NaN must stay NaN.
    let y = 2.0 * if a > 10.0 { 10.0 } else { a };
    // 0 <= n <= 29.
    let (r, two_n) = ln2_reduce(m, y, y);
    // q = e^r - 1 = r + r^2 (1/2 + r/6 + ... + r^5/5040), |r| <= ln2/2.
    let mut p = 1.0 / 5040.0;
    for c in [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5] {
        p = m.apply(p, r, c);
    }
    let q = m.apply(r * r, p, r);
    let e = m.apply(two_n, q, two_n - 1.0);
    (e / (e + 2.0)).copysign(x)
}

/// `ln x` for any `x`, within about 2 ulp: subnormals are scaled by `2^24` first and go
/// through [`log_with`]; 0 gives -inf, negatives and NaN give NaN, +inf gives +inf. Plain
/// arithmetic that vectorizes; the maps run [`log_with`] alone on chunks where every
/// element [`log_fits`].
#[inline(always)]
pub fn log(x: f32) -> f32 {
    const TWO_24: f32 = 16_777_216.0;
    let tiny = x < f32::MIN_POSITIVE;
    let r = ln_scaled(
        MulAdd::Split,
        if tiny { x * TWO_24 } else { x },
        if tiny { -24 } else { 0 },
    );
    if x > 0.0 && x < f32::INFINITY {
        r
    } else if x == 0.0 {
        f32::NEG_INFINITY
    } else if x == f32::INFINITY {
        x
    } else {
        f32::NAN
    }
}

/// Whether [`log_with`] holds at `x`: a positive normal finite float (false for NaN).
#[inline(always)]
pub fn log_fits(x: f32) -> bool {
    (f32::MIN_POSITIVE..=f32::MAX).contains(&x)
}

/// `ln x` for `x` where [`log_fits`] holds, within about 2 ulp (meaningless elsewhere): `x =
/// 2^k f` with `f` in `[sqrt(1/2), sqrt(2))`, both read from the bits by integer operations
/// only, then `ln x = k ln 2 + 2 atanh(s)`, `s = (f - 1) / (f + 1)` (`f - 1` is exact),
/// atanh as its odd series to `s^9` (`|s| <= 0.172`) with its multiply-adds evaluated as
/// `m` says.
#[inline(always)]
pub fn log_with(m: MulAdd, x: f32) -> f32 {
    ln_scaled(m, x, 0)
}

/// `ln(x) + k0 ln 2` for a positive normal `x` (the scaling of [`log`]'s subnormals folded
/// into the exponent, so it costs no extra rounding).
#[inline(always)]
fn ln_scaled(m: MulAdd, x: f32, k0: i32) -> f32 {
    // Offsetting the bits by sqrt(1/2)'s moves the mantissas below sqrt(1/2) into the
    // next binade down, so the exponent field is k and the mantissa, offset back, is f.
    const SQRT_HALF_BITS: u32 = 0x3f35_04f3;
    let ix = x.to_bits().wrapping_sub(SQRT_HALF_BITS);
    let k = ((ix as i32) >> 23).wrapping_add(k0);
    let f = f32::from_bits((ix & 0x007f_ffff).wrapping_add(SQRT_HALF_BITS));
    let ln_f = 2.0 * atanh_series(m, (f - 1.0) / (f + 1.0));
    m.apply(k as f32, std::f32::consts::LN_2, ln_f)
}

/// `atanh s` as its odd series to `s^9`, multiply-adds as `m` says: within an ulp or two
/// for `|s| <= 0.172`, the range the logarithms reduce to.
#[inline(always)]
pub(crate) fn atanh_series(m: MulAdd, s: f32) -> f32 {
    let s2 = s * s;
    let mut p = 1.0 / 9.0;
    for c in [1.0 / 7.0, 1.0 / 5.0, 1.0 / 3.0] {
        p = m.apply(p, s2, c);
    }
    m.apply(s * s2, p, s)
}

/// `sin x`.
#[inline]
pub fn sin(x: f32) -> f32 {
    x.sin()
}

/// Largest `|x|` whose argument [`sin_cos_with`] reduces exactly enough: `2^13`.
pub const TRIG_FAST_MAX: f32 = 8192.0;

/// Whether [`sin_cos_with`] holds at `x` (`|x| <= TRIG_FAST_MAX`; false for NaN).
#[inline(always)]
pub fn trig_fits(x: f32) -> bool {
    x.abs() <= TRIG_FAST_MAX
}

/// `pi/2` in five f32 parts for [`sin_cos_with`]'s reduction: the first four have at most
/// 11 significant bits each (so their products with `|k| <= 2^13` are exact), the last is
/// the rest rounded; their sum is within `2^-78` of `pi/2`.
const PIO2_PARTS: [f32; 5] = [
    1.570_312_5,
    4.837_513e-4,
    7.549_533_6e-8,
    2.563_283e-12,
    6.123_234e-17,
];

/// `(sin x, cos x)` for `|x| <= TRIG_FAST_MAX` in f32 arithmetic that vectorizes on every
/// tier, within 1.5 ulp (measured over every f32 up to the bound): `k = round(2x / pi)`
/// through the `1.5 * 2^23` shifter (which also leaves `k mod 4` in the low bits), then
/// `r + lo = x - k pi/2` with `pi/2` in five parts (`k` times each of the first four, `|k| <= 2^13`, is exact, and so are
/// the first two subtractions; the third's rounding error and the last two parts go to `lo`).
/// `sin r` (to `r^11`) and `cos r` (to `r^12`) are Taylor polynomials on `|r| <= pi/4`
/// with their multiply-adds evaluated as `m` says; the quadrant picks roles and flips
/// signs by integer operations. NaN and infinities give NaN; beyond the bound the result
/// is meaningless, so callers test [`trig_fits`] first (the maps do per chunk).
#[inline(always)]
pub fn sin_cos_with(m: MulAdd, x: f32) -> (f32, f32) {
    const SHIFTER: f32 = 12_582_912.0;
    let t = m.apply(x, std::f32::consts::FRAC_2_PI, SHIFTER);
    let k = t - SHIFTER;
    // k times each of the first four parts is exact, and so are the first two
    // subtractions (the difference lies on the grid of the second part's last bit). The
    // third rounds; its error is recovered exactly (Fast2Sum where |hi| >= |k P2|; below
    // that both lie on the 2^-34 grid, their difference is exact and the error 0), joins
    // the last two parts in `lo`, and `r + lo` is renormalized.
    let hi = m.apply(-k, PIO2_PARTS[1], m.apply(-k, PIO2_PARTS[0], x));
    let a = m.apply(-k, PIO2_PARTS[2], hi);
    let lo = m.apply(
        -k,
        PIO2_PARTS[4],
        m.apply(-k, PIO2_PARTS[3], m.apply(-k, PIO2_PARTS[2], hi - a)),
    );
    let r = a + lo;
    let lo = lo - (r - a);
    // The shifter puts 2^22 + k in t's low mantissa bits: its two lowest are k mod 4.
    let q = t.to_bits();
    let r2 = r * r;
    const S: [f32; 5] = [
        -1.0 / 39_916_800.0,
        1.0 / 362_880.0,
        -1.0 / 5040.0,
        1.0 / 120.0,
        -1.0 / 6.0,
    ];
    const C: [f32; 6] = [
        1.0 / 479_001_600.0,
        -1.0 / 3_628_800.0,
        1.0 / 40_320.0,
        -1.0 / 720.0,
        1.0 / 24.0,
        -0.5,
    ];
    let mut ps = S[0];
    for c in &S[1..] {
        ps = m.apply(ps, r2, *c);
    }
    let mut pc = C[0];
    for c in &C[1..] {
        pc = m.apply(pc, r2, *c);
    }
    // sin(r + lo) = sin r + lo cos r, cos(r + lo) = cos r - lo sin r, to first order.
    let s = r + m.apply(r * r2, ps, lo);
    let c = m.apply(r2, pc, 1.0) - r * lo;
    // Quadrants 1 and 3 swap the roles; sin is negated in 2 and 3, cos in 1 and 2.
    let (a, b) = if q & 1 != 0 { (c, s) } else { (s, c) };
    let sin = f32::from_bits(a.to_bits() ^ ((q & 2) << 30));
    // sin(-0) is -0; the reduction's `hi - a` gave it +0.
    let sin = if x == 0.0 { x } else { sin };
    let cos = f32::from_bits(b.to_bits() ^ ((q.wrapping_add(1) & 2) << 30));
    (sin, cos)
}

/// `cos x`.
#[inline]
pub fn cos(x: f32) -> f32 {
    x.cos()
}

/// `1 / sqrt(x)`, two correctly rounded operations.
#[inline]
pub fn rsqrt(x: f32) -> f32 {
    1.0 / x.sqrt()
}

/// Round half to even (0.5 -> 0, 1.5 -> 2, -0.5 -> -0).
#[inline]
pub fn round(x: f32) -> f32 {
    x.round_ties_even()
}

/// Gradient of `exp` at the forward input `x`: `dy * e^x` (by [`exp_fast`]).
#[inline]
pub fn exp_backward(x: f32, dy: f32) -> f32 {
    dy * exp_fast(x)
}

/// Gradient of `log` at the forward input `x`: `dy / x`.
#[inline]
pub fn log_backward(x: f32, dy: f32) -> f32 {
    dy / x
}

/// Gradient of `sin` at the forward input `x`: `dy * cos x`.
#[inline]
pub fn sin_backward(x: f32, dy: f32) -> f32 {
    dy * x.cos()
}

/// Gradient of `cos` at the forward input `x`: `-dy * sin x`.
#[inline]
pub fn cos_backward(x: f32, dy: f32) -> f32 {
    -dy * x.sin()
}

/// Gradient of `rsqrt` from the forward *output* `y = x^(-1/2)`: `-0.5 * dy * y^3`.
#[inline]
pub fn rsqrt_backward(y: f32, dy: f32) -> f32 {
    -0.5 * dy * y * y * y
}

#[cfg(test)]
mod tests {
    #[test]
    fn row_broadcasts_match_the_definition() {
        let (rows, cols) = (37, 1500); // more than one job of rows, rows longer than a job
        let dense: Vec<f32> = (0..rows * cols).map(|i| (i % 97) as f32 - 48.0).collect();
        let row: Vec<f32> = (0..cols).map(|c| c as f32 * 0.5).collect();
        let per_row: Vec<f32> = (0..rows).map(|r| 1.0 + r as f32).collect();
        let operands = [
            RowOperand::Dense(&dense),
            RowOperand::Row(&row),
            RowOperand::PerRow(&per_row),
            RowOperand::Scalar(-3.0),
        ];
        let at = |o: RowOperand<'_>, r: usize, c: usize| match o {
            RowOperand::Dense(v) => v[r * cols + c],
            RowOperand::Row(v) => v[c],
            RowOperand::PerRow(v) => v[r],
            RowOperand::Scalar(v) => v,
        };
        for x in operands {
            for y in operands {
                let mut out = vec![0.0f32; rows * cols];
                map_binary_rows(x, y, &mut out, cols, |_, a, b| a - 2.0 * b);
                for r in 0..rows {
                    for c in 0..cols {
                        let want = at(x, r, c) - 2.0 * at(y, r, c);
                        assert_eq!(out[r * cols + c], want, "{x:?} {y:?} at ({r}, {c})");
                    }
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "does not cover")]
    fn a_short_row_operand_is_refused() {
        let mut out = vec![0.0f32; 6];
        map_binary_rows(
            RowOperand::Row(&[1.0, 2.0]),
            RowOperand::Scalar(1.0),
            &mut out,
            3,
            |_, a, b| a + b,
        );
    }

    use super::*;

    #[test]
    fn maps_apply_the_function_at_every_index() {
        let x: Vec<f32> = (0..100_000).map(|i| i as f32 * 0.5).collect();
        let y: Vec<f32> = (0..100_000).map(|i| 1.0 + i as f32).collect();
        let mut out = vec![0.0; x.len()];
        map_binary(&x, &y, &mut out, |_, a, b| a - b);
        for i in [0, 1, 32_767, 32_768, 99_999] {
            assert_eq!(out[i], x[i] - y[i]);
        }
        let mut z = x.clone();
        map_unary_inplace(&mut z, |_, v| v * 2.0);
        assert_eq!(z[77_777], x[77_777] * 2.0);
        map_binary_inplace(&mut z, &y, |_, a, b| a + b);
        assert_eq!(z[5], x[5] * 2.0 + y[5]);
    }

    #[test]
    fn hand_computed_values() {
        assert_eq!(round(0.5), 0.0);
        assert_eq!(round(1.5), 2.0);
        assert_eq!(round(2.5), 2.0);
        assert!(round(-0.5).is_sign_negative() && round(-0.5) == 0.0);
        assert_eq!(clamp(5.0, -1.0, 1.0), 1.0);
        assert_eq!(clamp(-5.0, -1.0, 1.0), -1.0);
        assert!(clamp(f32::NAN, -1.0, 1.0).is_nan());
        assert_eq!(clamp(0.0, 2.0, 1.0), 1.0);
        assert_eq!(rsqrt(4.0), 0.5);
        assert_eq!(rsqrt_backward(0.5, 2.0), -0.125);
        assert_eq!(axpby(2.0, 3.0, 0.5, 2.0), 7.0);
        assert_eq!(log(0.0), f32::NEG_INFINITY);
        assert!(log(-1.0).is_nan());
        assert_eq!(cos_backward(0.0, 1.0), 0.0);
        assert_eq!(exp_backward(0.0, 3.0), 3.0);
    }

    #[test]
    fn fast_exp_and_tanh_track_the_library() {
        let mut worst = 0.0f32;
        for i in -8700..=8800 {
            let x = i as f32 * 0.01 + 0.003;
            let (f, e) = (exp_fast(x), x.exp());
            if e > f32::MIN_POSITIVE && e.is_finite() {
                worst = worst.max(((f - e) / e).abs());
            }
        }
        assert!(worst < 4e-7, "relative error {worst}");
        assert_eq!(exp_fast(100.0), f32::INFINITY);
        assert_eq!(exp_fast(-100.0), 0.0);
        assert!(exp_fast(f32::NAN).is_nan());
        assert_eq!(exp_fast(f32::NEG_INFINITY), 0.0);
        assert_eq!(tanh_with(MulAdd::Split, f32::INFINITY), 1.0);
        assert_eq!(tanh_with(MulAdd::Split, -50.0), -1.0);
    }

    #[test]
    fn ln_is_accurate_across_the_whole_float_range() {
        // Every 4099th bit pattern of the positive floats (subnormals to the largest finite),
        // plus the edges, against the f64 logarithm.
        let mut worst = 0.0f64;
        let mut bits = 1u32;
        while bits < f32::INFINITY.to_bits() {
            let x = f32::from_bits(bits);
            let (want, got) = ((x as f64).ln(), log(x) as f64);
            let err = if want == 0.0 {
                got.abs()
            } else {
                ((got - want) / want).abs()
            };
            worst = worst.max(err);
            bits += 4099;
        }
        for x in [
            1.0f32,
            1.0 + f32::EPSILON,
            1.0 - f32::EPSILON / 2.0,
            2.0,
            0.5,
            f32::MAX,
        ] {
            let want = (x as f64).ln();
            assert!(
                (log(x) as f64 - want).abs() <= 2e-7 * want.abs().max(1e-30),
                "ln({x})"
            );
        }
        assert!(worst < 2.5e-7, "worst relative error {worst}");
        // The vector form on the positive normals, plain and fused (an exhaustive run
        // measured at most 1.97 ulp), and the fitted map: a chunk holding a special value
        // takes `log` throughout, the others `log_with`.
        for path in [MulAdd::Split, MulAdd::Fused] {
            let mut bits = f32::MIN_POSITIVE.to_bits();
            while bits < f32::INFINITY.to_bits() {
                let x = f32::from_bits(bits);
                let want = (x as f64).ln();
                let ulp = ((want as f32).abs().next_up() - (want as f32).abs()) as f64;
                assert!(
                    (log_with(path, x) as f64 - want).abs() <= 2.0 * ulp,
                    "{path:?} ln({x})"
                );
                bits += 40_009;
            }
        }
        let mut x: Vec<f32> = (0..3 * CHUNK).map(|i| 1e-3 + i as f32 * 0.37).collect();
        let specials = [
            0.0,
            -0.0,
            -1.0,
            1e-40,
            f32::INFINITY,
            f32::NAN,
            f32::NEG_INFINITY,
        ];
        for (j, v) in specials.iter().enumerate() {
            x[CHUNK + 100 * j] = *v;
        }
        let mut y = vec![0.0f32; x.len()];
        map_unary_fitted(&x, &mut y, log_fits, log_with, log);
        for (i, (&v, &got)) in x.iter().zip(&y).enumerate() {
            if (CHUNK..2 * CHUNK).contains(&i) {
                let want = log(v);
                assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "{i}: ln({v}) = {got}, want {want}"
                );
            } else {
                let want = (v as f64).ln();
                let ulp = ((want as f32).abs().next_up() - (want as f32).abs()) as f64;
                assert!(
                    (got as f64 - want).abs() <= 2.0 * ulp,
                    "{i}: ln({v}) = {got}"
                );
            }
        }
        assert_eq!(log(0.0), f32::NEG_INFINITY);
        assert_eq!(log(-0.0), f32::NEG_INFINITY);
        assert_eq!(log(f32::INFINITY), f32::INFINITY);
        assert!(log(-1.0).is_nan() && log(f32::NAN).is_nan());
        assert!(log(f32::NEG_INFINITY).is_nan());
    }

    #[test]
    fn fast_sin_and_cos_are_within_one_and_a_half_ulp_up_to_their_bound() {
        // A dense sweep near 0 and across many periods, arguments next to multiples of pi/2
        // (where sin or cos is small and the reduction is tested hardest), and large ones
        // up to the bound; against the f64 functions of the same f32 argument.
        let ulp = |v: f64| ((v as f32).abs().next_up() - (v as f32).abs()) as f64;
        let mut xs: Vec<f32> = (-20_000..=20_000).map(|i| i as f32 * 1.37e-3).collect();
        xs.extend((0..11_000).map(|i| i as f32 * 0.731 + 0.1));
        for k in [1i64, 2, 3, 7, 100, 1_000, 2_000, 3_000, 4_000, 5_000, 5_215] {
            let x = (k as f64 * std::f64::consts::FRAC_PI_2) as f32;
            xs.extend([x, x.next_up(), x.next_down()]);
        }
        xs.extend([TRIG_FAST_MAX, -TRIG_FAST_MAX, 8191.999, 1e-30, 0.0]);
        // (An exhaustive run over every f32 in [0, 2^13] measured at most 1.47 ulp plain and
        // 1.21 fused.)
        for path in [MulAdd::Split, MulAdd::Fused] {
            for &x in &xs {
                let (s, c) = sin_cos_with(path, x);
                let (ws, wc) = ((x as f64).sin(), (x as f64).cos());
                assert!(
                    (s as f64 - ws).abs() <= 1.5 * ulp(ws),
                    "{path:?} sin({x}) = {s}, want {ws}"
                );
                assert!(
                    (c as f64 - wc).abs() <= 1.5 * ulp(wc),
                    "{path:?} cos({x}) = {c}, want {wc}"
                );
            }
        }
        assert!(trig_fits(TRIG_FAST_MAX) && !trig_fits(TRIG_FAST_MAX.next_up()));
        // The reduction's exactness rests on the parts' widths: 11 significant bits (the
        // 13 low mantissa bits zero) in all but the last, and the parts summing to pi/2.
        for p in &PIO2_PARTS[..4] {
            assert_eq!(
                p.to_bits() & 0x1fff,
                0,
                "{p} has more than 11 significant bits"
            );
        }
        // The first four sum exactly in f64; what they leave of pi/2 (its f64 head, exact
        // by Sterbenz, plus its tail 6.123233995736766e-17) is the last part, to f32 precision.
        let head: f64 = PIO2_PARTS[..4].iter().map(|&p| p as f64).sum();
        let rest = (std::f64::consts::FRAC_PI_2 - head) + 6.123_233_995_736_766e-17;
        let last = PIO2_PARTS[4] as f64;
        assert!((rest - last).abs() <= 6e-8 * rest.abs(), "{rest} vs {last}");
        assert!(!trig_fits(f32::NAN) && !trig_fits(f32::INFINITY));
        for path in [MulAdd::Split, MulAdd::Fused] {
            let (s, c) = sin_cos_with(path, -0.0);
            assert_eq!(
                (s.to_bits(), c),
                ((-0.0f32).to_bits(), 1.0),
                "sin(-0) keeps its sign"
            );
        }
        let (s, c) = sin_cos_with(MulAdd::Split, f32::NAN);
        assert!(s.is_nan() && c.is_nan());
    }

    #[test]
    fn fitted_maps_fall_back_per_chunk() {
        // The chunk holding a value that does not fit takes the exact function, the others
        // the fast one (told apart here by their results), in both maps.
        let mut x: Vec<f32> = (0..3 * CHUNK).map(|i| (i % 97) as f32).collect();
        x[CHUNK + 5] = 1000.0;
        let (fits, fast, exact) = (|v: f32| v < 100.0, |_: MulAdd, v: f32| -v, |v: f32| v);
        let mut y = vec![0.0f32; x.len()];
        map_unary_fitted(&x, &mut y, fits, fast, exact);
        let mut z = x.clone();
        map_unary_fitted_inplace(&mut z, fits, fast, exact);
        for (i, &v) in x.iter().enumerate() {
            let want = if (CHUNK..2 * CHUNK).contains(&i) {
                v
            } else {
                -v
            };
            assert_eq!((y[i], z[i]), (want, want), "{i}");
        }
        let mut w = vec![0.0f32; x.len()];
        let ones = vec![1.0f32; x.len()];
        map_binary_fitted(&x, &ones, &mut w, fits, |_, a, b| -a * b, |a, b| a * b);
        assert_eq!(w, y, "binary");
        // With the real pair, far past the bound: the library's value.
        let big = [1.0e30f32, -7.5e22, 0.5];
        let mut out = [0.0f32; 3];
        map_unary_fitted(
            &big,
            &mut out,
            trig_fits,
            |_, v| sin_cos_with(MulAdd::Split, v).0,
            sin,
        );
        assert_eq!(out, big.map(f32::sin));
    }

    #[test]
    fn tanh_is_accurate_in_relative_terms_from_zero_to_saturation() {
        // A dense sweep to past the saturation (10), plus tiny arguments where tanh x = x,
        // on the plain and the fused path (an exhaustive run over every f32 up to 10.5
        // measured at most 2.42 ulp).
        let mut xs: Vec<f32> = (0..=24_000).map(|i| i as f32 * 5e-4 + 1e-5).collect();
        xs.extend([
            1e-30f32,
            1e-7,
            3e-4,
            0.899_999_9,
            0.9,
            0.900_000_1,
            8.99,
            9.0,
            9.5,
            10.0,
            10.5,
        ]);
        for path in [MulAdd::Split, MulAdd::Fused] {
            for &x in &xs {
                for x in [x, -x] {
                    let want = (x as f64).tanh();
                    let got = tanh_with(path, x) as f64;
                    let rel = ((got - want) / want).abs();
                    assert!(rel < 3.6e-7, "{path:?} tanh({x}) = {got}, want {want}");
                }
            }
        }
        assert!(tanh_with(MulAdd::Split, f32::NAN).is_nan());
        assert!(tanh_with(MulAdd::Split, -0.0).to_bits() == (-0.0f32).to_bits());
        assert_eq!(tanh_with(MulAdd::Split, f32::NEG_INFINITY), -1.0);
    }

    #[test]
    fn gradients_match_finite_differences() {
        let h = 1e-3f64;
        for &x in &[0.3f32, 1.1, 2.0] {
            let fd = |f: fn(f32) -> f32| {
                ((f((x as f64 + h) as f32) as f64 - f((x as f64 - h) as f32) as f64) / (2.0 * h))
                    as f32
            };
            assert!((exp_backward(x, 1.0) - fd(exp)).abs() < 1e-2);
            assert!((log_backward(x, 1.0) - fd(log)).abs() < 1e-2);
            assert!((sin_backward(x, 1.0) - fd(sin)).abs() < 1e-2);
            assert!((cos_backward(x, 1.0) - fd(cos)).abs() < 1e-2);
            assert!((rsqrt_backward(rsqrt(x), 1.0) - fd(rsqrt)).abs() < 1e-2);
        }
    }
}
