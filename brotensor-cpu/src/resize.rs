//! Separable resampling of NCHW planes: every resize and average pool of the image-space
//! families (`interp2d` in its four modes with either coordinate mapping, the fixed 2x
//! up- and down-samplers, `resample1d`, `adaptive_avg_pool2d`) is `Y = A_h X A_w^T` per
//! plane, with one small matrix per axis. [`AxisTable`] holds such a matrix by output row
//! (`taps` entries of input index and weight each), built in float64 from the op's
//! definition; [`AxisAdjoint`] holds its transpose by input row (CSR), which the backward
//! passes gather through, so they write each gradient element once, in a fixed order, with
//! no scatter. The GPU kernels read the same tables, uploaded.
//!
//! Also here: the RAFT convex upsampler and the DC-AE channel-to-space upsampler, the two
//! resizes that are not separable.

use rayon::prelude::*;

use crate::simd::wide;
use crate::spatial::ResizeMode;
use crate::stream::{streaming, write_blocks, StreamedIter};

/// How one axis maps output positions to input positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AxisMap {
    /// Interpolation in `mode`; `align_corners` maps the end pixels' centres onto each other
    /// (`src = o (in - 1) / (out - 1)`), else half-pixel centres (`src = (o + 1/2) in / out -
    /// 1/2`).
    Interp {
        /// The interpolation.
        mode: ResizeMode,
        /// The coordinate mapping.
        align_corners: bool,
    },
    /// PyTorch's adaptive average pool: output `o` averages inputs `floor(o in / out)` up to
    /// `ceil((o + 1) in / out)` (exclusive).
    AdaptiveAverage,
}

/// One axis of a separable resample, by output position: output `o` is `sum_t
/// weight[o taps + t] x[index[o taps + t]]` (unused taps have weight 0 and a valid index).
#[derive(Clone, Debug, PartialEq)]
pub struct AxisTable {
    /// Input length.
    pub len_in: usize,
    /// Output length.
    pub len_out: usize,
    /// Entries per output position.
    pub taps: usize,
    /// Input positions, `len_out * taps`.
    pub index: Vec<u32>,
    /// Weights, `len_out * taps`.
    pub weight: Vec<f32>,
}

/// The transpose of an [`AxisTable`], by input position: input `i`'s entries are
/// `start[i]..start[i + 1]` of `index` (output positions, ascending) and `weight`.
#[derive(Clone, Debug, PartialEq)]
pub struct AxisAdjoint {
    /// Row starts, `len_in + 1` values.
    pub start: Vec<u32>,
    /// Output positions.
    pub index: Vec<u32>,
    /// Weights.
    pub weight: Vec<f32>,
}

/// `x` rounded to the nearest integer, ties to the even one.
fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - x.signum()
    } else {
        r
    }
}

/// The cubic convolution kernel with parameter `a` at distance `d`.
fn cubic(d: f64, a: f64) -> f64 {
    let d = d.abs();
    if d <= 1.0 {
        ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
    } else if d < 2.0 {
        ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a
    } else {
        0.0
    }
}

impl AxisTable {
    /// The table of `map` from `len_in` to `len_out` positions. Errors when exactly one of
    /// the lengths is 0 or an index does not fit in 32 bits.
    pub fn new(map: AxisMap, len_in: usize, len_out: usize) -> Result<Self, String> {
        if (len_in == 0) != (len_out == 0) {
            return Err(format!(
                "cannot resample {len_in} positions to {len_out} (an empty side stays empty)"
            ));
        }
        if u32::try_from(len_in.max(len_out)).is_err() {
            return Err(format!(
                "{} positions do not fit the 32-bit tables",
                len_in.max(len_out)
            ));
        }
        let (fi, fo) = (len_in as f64, len_out as f64);
        let last = len_in.saturating_sub(1) as f64;
        let clamp = |i: f64| i.clamp(0.0, last) as u32;
        let source = |o: usize, align: bool| {
            if align {
                if len_out > 1 {
                    o as f64 * last / (fo - 1.0)
                } else {
                    0.0
                }
            } else {
                (o as f64 + 0.5) * fi / fo - 0.5
            }
        };
        let taps = match map {
            AxisMap::Interp { mode, .. } => match mode {
                ResizeMode::Nearest => 1,
                ResizeMode::Bilinear => 2,
                ResizeMode::BicubicPillow | ResizeMode::BicubicTorch => 4,
            },
            // The longest region: ceil(in / out) + 1 bounds every region's length.
            AxisMap::AdaptiveAverage => (0..len_out)
                .map(|o| (((o + 1) * len_in).div_ceil(len_out)) - (o * len_in / len_out))
                .max()
                .unwrap_or(1),
        };
        let mut index = Vec::with_capacity(len_out * taps);
        let mut weight = Vec::with_capacity(len_out * taps);
        for o in 0..len_out {
            match map {
                AxisMap::Interp {
                    mode,
                    align_corners,
                } => {
                    let src = source(o, align_corners);
                    match mode {
                        ResizeMode::Nearest => {
                            index.push(clamp(round_half_even(src)));
                            weight.push(1.0);
                        }
                        ResizeMode::Bilinear => {
                            let s = src.clamp(0.0, last);
                            let i0 = s.floor();
                            let f = s - i0;
                            index.extend([clamp(i0), clamp(i0 + 1.0)]);
                            weight.extend([(1.0 - f) as f32, f as f32]);
                        }
                        ResizeMode::BicubicPillow | ResizeMode::BicubicTorch => {
                            let a = if mode == ResizeMode::BicubicPillow {
                                -0.5
                            } else {
                                -0.75
                            };
                            let i0 = src.floor();
                            let t = src - i0;
                            for k in -1..3 {
                                index.push(clamp(i0 + k as f64));
                                weight.push(cubic(t - k as f64, a) as f32);
                            }
                        }
                    }
                }
                AxisMap::AdaptiveAverage => {
                    let (start, end) = (o * len_in / len_out, ((o + 1) * len_in).div_ceil(len_out));
                    let w = 1.0 / (end - start) as f64;
                    for t in 0..taps {
                        let inside = start + t < end;
                        index.push(if inside { start + t } else { start } as u32);
                        weight.push(if inside { w as f32 } else { 0.0 });
                    }
                }
            }
        }
        Ok(AxisTable {
            len_in,
            len_out,
            taps,
            index,
            weight,
        })
    }

    /// The transpose, by input position; entries of one input keep the outputs' order, and
    /// repeated (output, input) pairs (clamped taps) are merged into one weight.
    pub fn adjoint(&self) -> AxisAdjoint {
        let mut rows: Vec<Vec<(u32, f32)>> = vec![Vec::new(); self.len_in];
        for o in 0..self.len_out {
            for t in 0..self.taps {
                let k = o * self.taps + t;
                let w = self.weight[k];
                if w == 0.0 {
                    continue;
                }
                let row = &mut rows[self.index[k] as usize];
                match row.last_mut() {
                    Some((last, acc)) if *last == o as u32 => *acc += w,
                    _ => row.push((o as u32, w)),
                }
            }
        }
        let mut start = Vec::with_capacity(self.len_in + 1);
        let (mut index, mut weight) = (Vec::new(), Vec::new());
        start.push(0);
        for row in rows {
            for (o, w) in row {
                index.push(o);
                weight.push(w);
            }
            start.push(index.len() as u32);
        }
        AxisAdjoint {
            start,
            index,
            weight,
        }
    }
}

/// How a column pass reads its line: the shapes the common tables take, each with a loop
/// the compiler vectorises, and the general gather.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Columns {
    /// Output `o` is `w line[o / 2]` (nearest at twice the size; the 2x average pool's
    /// gradient, with `w = 1/2`).
    Spread2(f32),
    /// Output `o` sums `weight[o T + t] line[o T + t]` over `t < T` (consecutive blocks:
    /// the 2x average pool, the 2x nearest gradient).
    Blocks(usize),
    /// Bilinear at twice the size (half-pixel): output `2j` is `l[j-1] / 4 + 3 l[j] / 4`,
    /// `2j + 1` is `3 l[j] / 4 + l[j+1] / 4`, the two ends copy the end values.
    Linear2,
    /// Anything else.
    Gather,
}

/// Output `o` of [`Columns::Linear2`] over `line` (at least 2 values).
#[inline(always)]
fn linear2(line: &[f32], o: usize) -> f32 {
    let (n, j) = (line.len(), o / 2);
    if o == 0 {
        line[0]
    } else if o == 2 * n - 1 {
        line[n - 1]
    } else if o.is_multiple_of(2) {
        0.25 * line[j - 1] + 0.75 * line[j]
    } else {
        0.75 * line[j] + 0.25 * line[j + 1]
    }
}

impl Columns {
    /// The shape of a pass whose output `o` reads `(index, weight)` entries `entries(o)`.
    fn of(len_out: usize, entries: impl Fn(usize) -> Vec<(u32, f32)>) -> Self {
        let table: Vec<Vec<(u32, f32)>> = (0..len_out).map(entries).collect();
        let w = table.first().and_then(|e| e.first()).map_or(1.0, |e| e.1);
        let spread = table
            .iter()
            .enumerate()
            .all(|(o, e)| e.len() == 1 && e[0] == ((o / 2) as u32, w));
        if spread {
            return Columns::Spread2(w);
        }
        let t = table.first().map_or(1, |e| e.len().max(1));
        let blocks = table.iter().enumerate().all(|(o, e)| {
            e.len() == t
                && e.iter()
                    .enumerate()
                    .all(|(k, &(i, _))| i as usize == o * t + k)
        });
        if blocks {
            return Columns::Blocks(t);
        }
        let n = len_out / 2;
        let linear = len_out.is_multiple_of(2)
            && n >= 2
            && table.iter().enumerate().all(|(o, e)| {
                let j = (o / 2) as u32;
                let want: &[(u32, f32)] = if o == 0 {
                    &[(0, 1.0)]
                } else if o == len_out - 1 {
                    &[(n as u32 - 1, 1.0)]
                } else if o % 2 == 0 {
                    &[(j - 1, 0.25), (j, 0.75)]
                } else {
                    &[(j, 0.75), (j + 1, 0.25)]
                };
                e[..] == *want
            });
        if linear {
            return Columns::Linear2;
        }
        Columns::Gather
    }
}

/// Where a column pass finds each output's entries: `taps` per output at `o taps` (a
/// forward table), or between row starts (a transposed one).
#[derive(Clone, Copy)]
enum Entries<'a> {
    Taps {
        taps: usize,
        index: &'a [u32],
        weight: &'a [f32],
    },
    Rows {
        start: &'a [u32],
        index: &'a [u32],
        weight: &'a [f32],
    },
}

/// `sum_t weight[o T + t] line[index[o T + t]]` with `T` known at compile time.
#[inline(always)]
fn gather_fixed<const T: usize>(line: &[f32], o: usize, index: &[u32], weight: &[f32]) -> f32 {
    let (i, w) = (&index[o * T..o * T + T], &weight[o * T..o * T + T]);
    let mut acc = 0.0f32;
    for t in 0..T {
        acc += w[t] * line[i[t] as usize];
    }
    acc
}

/// `out[k]` = output `at + k` of the column pass: its entries' weights times `line`.
#[inline(always)]
fn column_pass(kind: Columns, line: &[f32], at: usize, out: &mut [f32], entries: Entries) {
    match (kind, entries) {
        (Columns::Spread2(w), _) => {
            // Whole pairs from an even position: each source value written twice.
            let (head, rest) = out.split_at_mut((at % 2).min(out.len()));
            if let Some(o) = head.first_mut() {
                *o = w * line[at / 2];
            }
            let first = at.div_ceil(2);
            let (pairs, tail) = rest.split_at_mut(rest.len() / 2 * 2);
            for (pair, &v) in pairs.chunks_exact_mut(2).zip(&line[first..]) {
                pair[0] = w * v;
                pair[1] = w * v;
            }
            if let Some(o) = tail.first_mut() {
                *o = w * line[first + pairs.len() / 2];
            }
        }
        (Columns::Linear2, _) => {
            // Whole interior pairs (2j, 2j + 1), 1 <= j <= n - 2, vectorised; the rest one
            // by one.
            let (n, end) = (line.len(), at + out.len());
            let (j_lo, j_hi) = (at.div_ceil(2).max(1), (end / 2).min(n - 1));
            let (p_lo, p_hi) = if j_lo < j_hi {
                (2 * j_lo, 2 * j_hi)
            } else {
                (end, end)
            };
            for o in at..p_lo.min(end) {
                out[o - at] = linear2(line, o);
            }
            if p_lo < p_hi {
                let pairs = &mut out[p_lo - at..p_hi - at];
                for (pair, win) in pairs.chunks_exact_mut(2).zip(line[j_lo - 1..].windows(3)) {
                    pair[0] = 0.25 * win[0] + 0.75 * win[1];
                    pair[1] = 0.75 * win[1] + 0.25 * win[2];
                }
            }
            for o in p_hi.max(at)..end {
                out[o - at] = linear2(line, o);
            }
        }
        (Columns::Blocks(t), Entries::Taps { weight, .. } | Entries::Rows { weight, .. }) => {
            let src = &line[at * t..(at + out.len()) * t];
            let w = &weight[at * t..(at + out.len()) * t];
            for ((o, s), w) in out
                .iter_mut()
                .zip(src.chunks_exact(t))
                .zip(w.chunks_exact(t))
            {
                *o = s.iter().zip(w).map(|(a, b)| a * b).sum();
            }
        }
        (
            Columns::Gather,
            Entries::Taps {
                taps,
                index,
                weight,
            },
        ) => {
            let each = |f: fn(&[f32], usize, &[u32], &[f32]) -> f32, out: &mut [f32]| {
                for (k, o) in out.iter_mut().enumerate() {
                    *o = f(line, at + k, index, weight);
                }
            };
            match taps {
                1 => each(gather_fixed::<1>, out),
                2 => each(gather_fixed::<2>, out),
                4 => each(gather_fixed::<4>, out),
                _ => {
                    for (k, o) in out.iter_mut().enumerate() {
                        let e = (at + k) * taps..(at + k + 1) * taps;
                        *o = index[e.clone()]
                            .iter()
                            .zip(&weight[e])
                            .map(|(&i, &w)| w * line[i as usize])
                            .sum();
                    }
                }
            }
        }
        (
            Columns::Gather,
            Entries::Rows {
                start,
                index,
                weight,
            },
        ) => {
            for (k, o) in out.iter_mut().enumerate() {
                let e = start[at + k] as usize..start[at + k + 1] as usize;
                *o = index[e.clone()]
                    .iter()
                    .zip(&weight[e])
                    .map(|(&i, &w)| w * line[i as usize])
                    .sum();
            }
        }
    }
}

/// `line += w * row`.
#[inline(always)]
fn blend(line: &mut [f32], w: f32, row: &[f32]) {
    for (l, &v) in line.iter_mut().zip(row) {
        *l += w * v;
    }
}

/// `y = A_h x A_w^T` for each of the planes of `x` (`rows.len_in x cols.len_in` each) into
/// `y` (`rows.len_out x cols.len_out` each), overwritten, FP32-accumulated. Large outputs are
/// written with streaming stores.
///
/// # Panics
/// If the lengths of `x` and `y` do not hold the same number of such planes.
pub fn resample_forward(x: &[f32], rows: &AxisTable, cols: &AxisTable, y: &mut [f32]) {
    let (plane_in, plane_out) = (rows.len_in * cols.len_in, rows.len_out * cols.len_out);
    if plane_out == 0 {
        return;
    }
    let planes = y.len() / plane_out;
    assert!(
        y.len() == planes * plane_out && x.len() == planes * plane_in,
        "resample_forward: lengths"
    );
    let (w_in, w_out, ct) = (cols.len_in, cols.len_out, cols.taps);
    let entries = |o: usize| -> Vec<(u32, f32)> {
        (0..ct)
            .map(|t| (cols.index[o * ct + t], cols.weight[o * ct + t]))
            .filter(|e| e.1 != 0.0)
            .collect()
    };
    // The block shape reads the weights with the table's own stride: only when no tap was
    // dropped as a zero.
    let kind = match Columns::of(w_out, entries) {
        Columns::Blocks(t) if t != ct => Columns::Gather,
        k => k,
    };
    let table = Entries::Taps {
        taps: ct,
        index: &cols.index,
        weight: &cols.weight,
    };
    streaming(y.len(), 4, |streaming| {
        y.par_chunks_mut(w_out).enumerate().for_each_streamed_init(
            streaming,
            || vec![0.0f32; w_in],
            |stream, line, (r, out)| {
                let (p, oh) = (r / rows.len_out, r % rows.len_out);
                let src = &x[p * plane_in..][..plane_in];
                wide(
                    #[inline(always)]
                    |_| {
                        // The input rows blended into one line, then resampled along W.
                        line.fill(0.0);
                        for t in 0..rows.taps {
                            let w = rows.weight[oh * rows.taps + t];
                            if w != 0.0 {
                                let i = rows.index[oh * rows.taps + t] as usize;
                                blend(line, w, &src[i * w_in..][..w_in]);
                            }
                        }
                        write_blocks(
                            stream,
                            out,
                            #[inline(always)]
                            |at, o| column_pass(kind, line, at, o, table),
                        );
                    },
                )
            },
        )
    });
}

/// `dx = A_h^T dy A_w` per plane (the adjoint of [`resample_forward`] with the same
/// tables' transposes), overwritten; each element a gather in a fixed order.
///
/// # Panics
/// If the lengths of `dy` and `dx` do not hold the same number of planes.
pub fn resample_backward(
    dy: &[f32],
    (rows, cols): (&AxisAdjoint, &AxisAdjoint),
    (h_out, w_out): (usize, usize),
    dx: &mut [f32],
) {
    let (h_in, w_in) = (rows.start.len() - 1, cols.start.len() - 1);
    let (plane_in, plane_out) = (h_in * w_in, h_out * w_out);
    if plane_in == 0 {
        return;
    }
    let planes = dx.len() / plane_in;
    assert!(
        dx.len() == planes * plane_in && dy.len() == planes * plane_out,
        "resample_backward: lengths"
    );
    let range = |j: usize| cols.start[j] as usize..cols.start[j + 1] as usize;
    let entries = |j: usize| -> Vec<(u32, f32)> {
        range(j).map(|e| (cols.index[e], cols.weight[e])).collect()
    };
    // The block shape reads weights by position: valid when every row holds the same count
    // (then entry e of input j is at j T + e), which `Columns::of` checks.
    let kind = Columns::of(w_in, entries);
    let table = Entries::Rows {
        start: &cols.start,
        index: &cols.index,
        weight: &cols.weight,
    };
    streaming(dx.len(), 4, |streaming| {
        dx.par_chunks_mut(w_in).enumerate().for_each_streamed_init(
            streaming,
            || vec![0.0f32; w_out],
            |stream, line, (r, out)| {
                let (p, i) = (r / h_in, r % h_in);
                let src = &dy[p * plane_out..][..plane_out];
                wide(
                    #[inline(always)]
                    |_| {
                        line.fill(0.0);
                        for e in rows.start[i] as usize..rows.start[i + 1] as usize {
                            let o = rows.index[e] as usize;
                            blend(line, rows.weight[e], &src[o * w_out..][..w_out]);
                        }
                        write_blocks(
                            stream,
                            out,
                            #[inline(always)]
                            |at, o| column_pass(kind, line, at, o, table),
                        );
                    },
                )
            },
        )
    });
}

/// RAFT's convex upsampler: `y[n, c, k y + sy, k x + sx] = sum_m softmax_m(mask[n, m k^2 +
/// sy k + sx, y, x]) x[n, c, y - 1 + m / 3, x - 1 + m % 3]` over the 3x3 neighbourhood `m`
/// (coordinates clamped to the image). `x`: `(n, c, h, w)`; `mask`: `(n, 9 k^2, h, w)`;
/// `y`: `(n, c, k h, k w)`, overwritten. The softmax runs in float64.
///
/// # Panics
/// If a length does not match those shapes.
pub fn convex_upsample(
    x: &[f32],
    mask: &[f32],
    (n, c, h, w): (usize, usize, usize, usize),
    k: usize,
    y: &mut [f32],
) {
    let (plane, kk) = (h * w, k * k);
    assert!(
        x.len() == n * c * plane && mask.len() == n * 9 * kk * plane && y.len() == x.len() * kk,
        "convex_upsample: lengths"
    );
    if y.is_empty() {
        return;
    }
    let wide = k * w;
    y.par_chunks_mut(wide).enumerate().for_each(|(r, out)| {
        // Row `r` of the output: image (n, ch), fine row fy.
        let (img, fy) = (r / (k * h), r % (k * h));
        let (b, ch) = (img / c, img % c);
        let (cy, sy) = (fy / k, fy % k);
        let src = &x[(b * c + ch) * plane..][..plane];
        let m_base = &mask[b * 9 * kk * plane..][..9 * kk * plane];
        for (fx, o) in out.iter_mut().enumerate() {
            let (cx, sx) = (fx / k, fx % k);
            let logit = |m: usize| f64::from(m_base[(m * kk + sy * k + sx) * plane + cy * w + cx]);
            let top = (0..9).map(logit).fold(f64::NEG_INFINITY, f64::max);
            let (mut num, mut den) = (0.0f64, 0.0f64);
            for m in 0..9 {
                let e = (logit(m) - top).exp();
                let ny = (cy + m / 3).saturating_sub(1).min(h - 1);
                let nx = (cx + m % 3).saturating_sub(1).min(w - 1);
                num += e * f64::from(src[ny * w + nx]);
                den += e;
            }
            *o = (num / den) as f32;
        }
    });
}

/// The DC-AE up-shortcut: channels repeated `repeats = 4 c_out / c_in` times, then a 2x
/// pixel shuffle: `y[n, co, 2h + i, 2w + j] = x[n, (4 co + 2 i + j) / repeats, h, w]`. `x`:
/// `(n, c_in, h, w)`; `y`: `(n, c_out, 2h, 2w)`, overwritten. `c_in` divides `4 c_out`.
///
/// # Panics
/// If a length does not match those shapes or `c_in` does not divide `4 c_out`.
pub fn pixel_shuffle_upsample_2x(
    x: &[f32],
    (n, c_in, h, w): (usize, usize, usize, usize),
    c_out: usize,
    y: &mut [f32],
) {
    assert!(
        c_in > 0 && (4 * c_out).is_multiple_of(c_in),
        "pixel_shuffle_upsample_2x: channels"
    );
    let plane = h * w;
    assert!(
        x.len() == n * c_in * plane && y.len() == n * c_out * 4 * plane,
        "pixel_shuffle_upsample_2x: lengths"
    );
    if y.is_empty() {
        return;
    }
    let repeats = 4 * c_out / c_in;
    y.par_chunks_mut(2 * w).enumerate().for_each(|(r, out)| {
        let (img, fy) = (r / (2 * h), r % (2 * h));
        let (b, co) = (img / c_out, img % c_out);
        let (hy, i) = (fy / 2, fy % 2);
        for (fx, o) in out.iter_mut().enumerate() {
            let src_c = (4 * co + 2 * i + fx % 2) / repeats;
            *o = x[(b * c_in + src_c) * plane + hy * w + fx / 2];
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outputs past the streaming threshold take the streamed path: its lines must land
    /// where the plain path puts them (nearest 2x exactly; bilinear 2x against the tables).
    #[test]
    fn streamed_outputs_match_the_definition() {
        let (planes, h, w) = (4, 512, 1024);
        let x: Vec<f32> = (0..planes * h * w).map(|i| (i % 977) as f32).collect();
        let near = AxisMap::Interp {
            mode: ResizeMode::Nearest,
            align_corners: false,
        };
        let (rows, cols) = (
            AxisTable::new(near, h, 2 * h).unwrap(),
            AxisTable::new(near, w, 2 * w).unwrap(),
        );
        let mut y = vec![f32::NAN; 4 * x.len()];
        assert!(crate::stream::should_stream(y.len(), 4));
        resample_forward(&x, &rows, &cols, &mut y);
        for (i, &v) in y.iter().enumerate().step_by(97) {
            let (p, r, c) = (i / (4 * h * w), i / (2 * w) % (2 * h), i % (2 * w));
            assert_eq!(v, x[(p * h + r / 2) * w + c / 2], "nearest at {i}");
        }
        let lin = AxisMap::Interp {
            mode: ResizeMode::Bilinear,
            align_corners: false,
        };
        let (rows, cols) = (
            AxisTable::new(lin, h, 2 * h).unwrap(),
            AxisTable::new(lin, w, 2 * w).unwrap(),
        );
        resample_forward(&x, &rows, &cols, &mut y);
        for (i, &v) in y.iter().enumerate().step_by(101) {
            let (p, r, c) = (i / (4 * h * w), i / (2 * w) % (2 * h), i % (2 * w));
            let mut want = 0.0f64;
            for a in 0..2 {
                for b in 0..2 {
                    let (ri, ci) = (
                        rows.index[2 * r + a] as usize,
                        cols.index[2 * c + b] as usize,
                    );
                    want += f64::from(rows.weight[2 * r + a])
                        * f64::from(cols.weight[2 * c + b])
                        * f64::from(x[(p * h + ri) * w + ci]);
                }
            }
            assert!(
                (f64::from(v) - want).abs() <= 1e-3,
                "bilinear at {i}: {v} vs {want}"
            );
        }
    }

    /// The 2x bilinear pass from every start and length against the table's gather.
    #[test]
    fn linear2_pass_matches_the_gather_from_any_position() {
        let lin = AxisMap::Interp {
            mode: ResizeMode::Bilinear,
            align_corners: false,
        };
        for n in 2..9 {
            let t = AxisTable::new(lin, n, 2 * n).unwrap();
            let entries = |o: usize| -> Vec<(u32, f32)> {
                (0..2)
                    .map(|k| (t.index[2 * o + k], t.weight[2 * o + k]))
                    .filter(|e| e.1 != 0.0)
                    .collect()
            };
            assert_eq!(Columns::of(2 * n, entries), Columns::Linear2, "n = {n}");
            let line: Vec<f32> = (0..n).map(|v| (v * v) as f32 - 3.5).collect();
            let table = Entries::Taps {
                taps: 2,
                index: &t.index,
                weight: &t.weight,
            };
            for at in 0..2 * n {
                for len in 0..=2 * n - at {
                    let (mut fast, mut slow) = (vec![f32::NAN; len], vec![f32::NAN; len]);
                    column_pass(Columns::Linear2, &line, at, &mut fast, table);
                    column_pass(Columns::Gather, &line, at, &mut slow, table);
                    assert_eq!(fast, slow, "n {n} at {at} len {len}");
                }
            }
        }
    }

    /// The spread pass from every start and length (streamed lines start anywhere).
    #[test]
    fn spread_pass_from_any_position() {
        let line: Vec<f32> = (0..20).map(|v| v as f32).collect();
        let t = Entries::Taps {
            taps: 1,
            index: &[],
            weight: &[],
        };
        for at in 0..12 {
            for len in 0..(40 - 2 * at).min(17) {
                let mut out = vec![f32::NAN; len];
                column_pass(Columns::Spread2(0.5), &line, at, &mut out, t);
                for (k, &v) in out.iter().enumerate() {
                    assert_eq!(v, 0.5 * line[(at + k) / 2], "at {at} len {len} k {k}");
                }
            }
        }
    }

    #[test]
    fn ties_round_to_even() {
        let got: Vec<f64> = [-0.5, 0.5, 1.5, 2.5, 2.4, -1.5, 3.0]
            .into_iter()
            .map(round_half_even)
            .collect();
        assert_eq!(got, [0.0, 0.0, 2.0, 2.0, 2.0, -2.0, 3.0]);
    }

    #[test]
    fn tables_sum_to_one_and_adjoints_transpose() {
        for map in [
            AxisMap::AdaptiveAverage,
            AxisMap::Interp {
                mode: ResizeMode::BicubicTorch,
                align_corners: false,
            },
            AxisMap::Interp {
                mode: ResizeMode::Bilinear,
                align_corners: true,
            },
        ] {
            for (i, o) in [(5, 3), (3, 7), (1, 4), (6, 6)] {
                let t = AxisTable::new(map, i, o).unwrap();
                for r in 0..o {
                    let s: f32 = t.weight[r * t.taps..][..t.taps].iter().sum();
                    assert!((s - 1.0).abs() < 1e-6, "{map:?} {i}->{o} row {r}: {s}");
                }
                let adj = t.adjoint();
                let mut dense = vec![0.0f32; i * o];
                for r in 0..o {
                    for k in 0..t.taps {
                        dense[r * i + t.index[r * t.taps + k] as usize] += t.weight[r * t.taps + k];
                    }
                }
                for c in 0..i {
                    for e in adj.start[c] as usize..adj.start[c + 1] as usize {
                        let r = adj.index[e] as usize;
                        assert_eq!(dense[r * i + c], adj.weight[e]);
                        dense[r * i + c] = 0.0;
                    }
                }
                assert!(dense.iter().all(|&v| v == 0.0), "{map:?}: entries missed");
            }
        }
        assert!(AxisTable::new(AxisMap::AdaptiveAverage, 0, 3).is_err());
    }
}
