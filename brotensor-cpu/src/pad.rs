//! Padding and neighbourhood gathers over NCHW planes: `unfold2d` (each output pixel's
//! `kH x kW` window, the spatial grid kept) with zero, reflect or replicate borders, of
//! which 2-D and 1-D padding are the one-tap case, and the adjoint of that padding as a
//! gather (each input pixel sums the padded pixels that read it, in a fixed order).

use rayon::prelude::*;

use crate::simd::wide;
use crate::stream::{streaming, write_blocks, StreamedIter};

/// How padding fills the positions outside the signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PadMode {
    /// Zeros (the C++ mode 0).
    Zero,
    /// The signal mirrored about its end samples, which are not repeated: `x[1], x[0] |
    /// x[0], x[1], ...` becomes `x[2], x[1] | x[0], x[1], ...` (mode 1; each pad below L).
    Reflect,
    /// The end sample repeated (mode 2; the signal must not be empty).
    Replicate,
}

impl PadMode {
    /// The mode of C++ code `code` (0, 1, 2), or `None`.
    pub fn from_code(code: i32) -> Option<Self> {
        match code {
            0 => Some(PadMode::Zero),
            1 => Some(PadMode::Reflect),
            2 => Some(PadMode::Replicate),
            _ => None,
        }
    }

    /// Errors when this mode cannot pad a signal of `len` samples by `left` and `right`:
    /// reflect needs each pad below `len`, replicate a sample to repeat.
    pub fn check(self, len: usize, left: usize, right: usize) -> Result<(), String> {
        match self {
            PadMode::Reflect if left >= len || right >= len => Err(format!(
                "reflect padding needs each pad below the length: pads {left} and {right}, length {len}"
            )),
            PadMode::Replicate if len == 0 && (left > 0 || right > 0) => {
                Err("replicate padding of an empty signal has no sample to repeat".into())
            }
            _ => Ok(()),
        }
    }

    /// The input sample that padded position `j` of a signal of `len` padded by `left`
    /// reads, or `None` for a zero. Callers have passed [`PadMode::check`] for pads that
    /// reach `j`.
    #[inline(always)]
    pub fn source(self, j: usize, len: usize, left: usize) -> Option<usize> {
        if j >= left && j - left < len {
            return Some(j - left);
        }
        match self {
            PadMode::Zero => None,
            // Before the signal: mirrored about sample 0; after it: about sample len - 1.
            PadMode::Reflect if j < left => Some(left - j),
            PadMode::Reflect => Some(2 * (len - 1) + left - j),
            PadMode::Replicate if j < left => Some(0),
            PadMode::Replicate => Some(len - 1),
        }
    }
}

/// The geometry of an unfold (or, with a 1x1 window and stride 1, a padding) of one plane:
/// per axis `[h, w]` the input size, the window, the stride and the padding before and
/// after, and the border mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unfold2d {
    /// Input `[H, W]`.
    pub input: [usize; 2],
    /// Window `[kH, kW]`.
    pub kernel: [usize; 2],
    /// Stride.
    pub stride: [usize; 2],
    /// Padding before (top, left).
    pub before: [usize; 2],
    /// Padding after (bottom, right).
    pub after: [usize; 2],
    /// The border.
    pub mode: PadMode,
}

impl Unfold2d {
    /// A padding of `input` by `before` and `after`: the one-tap unfold.
    pub fn padding(
        input: [usize; 2],
        before: [usize; 2],
        after: [usize; 2],
        mode: PadMode,
    ) -> Self {
        Unfold2d {
            input,
            kernel: [1, 1],
            stride: [1, 1],
            before,
            after,
            mode,
        }
    }

    /// The output `[H_out, W_out]`: `(in + before + after - k) / stride + 1` per axis (0
    /// for an axis that is empty even padded). Errors when a window or stride is 0, the
    /// mode cannot pad an axis, a sum overflows or the window does not fit the padded input.
    pub fn out_size(&self) -> Result<[usize; 2], String> {
        let mut out = [0; 2];
        for (a, out) in out.iter_mut().enumerate() {
            let (k, s) = (self.kernel[a], self.stride[a]);
            if k == 0 || s == 0 {
                return Err(format!("axis {a}: window and stride must be at least 1"));
            }
            self.mode
                .check(self.input[a], self.before[a], self.after[a])
                .map_err(|e| format!("axis {a}: {e}"))?;
            let padded = self.input[a]
                .checked_add(self.before[a])
                .and_then(|v| v.checked_add(self.after[a]))
                .ok_or_else(|| format!("axis {a}: the padded size overflows"))?;
            if padded == 0 {
                // An empty axis stays empty (a padding of nothing by nothing).
                *out = 0;
                continue;
            }
            if padded < k {
                return Err(format!(
                    "axis {a}: the window {k} is larger than the padded input {padded}"
                ));
            }
            *out = (padded - k) / s + 1;
        }
        Ok(out)
    }

    /// For each window tap `t` along axis `a` and output position `o`, the input position
    /// read (`u32::MAX` for a zero): `kernel[a] * out[a]` entries.
    fn sources(&self, a: usize, out: usize) -> Vec<u32> {
        let mut v = Vec::with_capacity(self.kernel[a] * out);
        for t in 0..self.kernel[a] {
            for o in 0..out {
                let j = o * self.stride[a] + t;
                v.push(
                    self.mode
                        .source(j, self.input[a], self.before[a])
                        .map_or(u32::MAX, |i| i as u32),
                );
            }
        }
        v
    }
}

/// `y[p, ky kW + kx, oy, ox] = x[p, src(oy sy + ky), src(ox sx + kx)]` over padded
/// coordinates, `src` by the mode (a zero where it has none). `x`: planes of `H x W`; `y`:
/// planes of `kH kW H_out W_out`, overwritten. `out` is [`Unfold2d::out_size`].
///
/// # Panics
/// If the lengths do not hold the same number of planes.
pub fn unfold2d_forward(x: &[f32], g: &Unfold2d, out: [usize; 2], y: &mut [f32]) {
    let ([h, w], [ho, wo], [kh, kw]) = (g.input, out, g.kernel);
    let (plane_in, plane_out) = (h * w, kh * kw * ho * wo);
    if plane_out == 0 {
        return;
    }
    let planes = y.len() / plane_out;
    assert!(
        y.len() == planes * plane_out && x.len() == planes * plane_in,
        "unfold2d_forward: lengths"
    );
    let (rows, cols) = (g.sources(0, ho), g.sources(1, wo));
    streaming(y.len(), 4, |streaming| {
        y.par_chunks_mut(wo)
            .enumerate()
            .for_each_streamed(streaming, |stream, (r, line)| {
                // Row r: plane p, tap (ky, kx), output row oy.
                let (pk, oy) = (r / ho, r % ho);
                let (p, k) = (pk / (kh * kw), pk % (kh * kw));
                let (ky, kx) = (k / kw, k % kw);
                let src_row = rows[ky * ho + oy];
                let row =
                    (src_row != u32::MAX).then(|| &x[p * plane_in + src_row as usize * w..][..w]);
                let map = &cols[kx * wo..][..wo];
                // With stride 1 the outputs that read inside the row read a contiguous run
                // of it: one copy; the border outputs go through the map.
                let inside = match (row, g.stride[1]) {
                    (Some(_), 1) => {
                        let lo = g.before[1].saturating_sub(kx).min(wo);
                        lo..(g.before[1] + w).saturating_sub(kx).min(wo).max(lo)
                    }
                    _ => 0..0,
                };
                wide(
                    #[inline(always)]
                    |_| {
                        write_blocks(
                            stream,
                            line,
                            #[inline(always)]
                            |at, out| {
                                let end = at + out.len();
                                let Some(row) = row else {
                                    out.fill(0.0);
                                    return;
                                };
                                let lo = inside.start.clamp(at, end);
                                let hi = inside.end.clamp(lo, end);
                                let border = |o: usize| {
                                    let c = map[o];
                                    if c == u32::MAX {
                                        0.0
                                    } else {
                                        row[c as usize]
                                    }
                                };
                                for o in at..lo {
                                    out[o - at] = border(o);
                                }
                                if hi > lo {
                                    let s0 = lo + kx - g.before[1];
                                    out[lo - at..hi - at].copy_from_slice(&row[s0..s0 + hi - lo]);
                                }
                                for o in hi..end {
                                    out[o - at] = border(o);
                                }
                            },
                        )
                    },
                )
            })
    });
}

/// The adjoint of the padding `g` (a one-tap [`Unfold2d`]): `dx[p, i, j]` = the sum of
/// `dy[p, a, b]` over the padded pixels `(a, b)` that read `(i, j)`, rows then columns
/// ascending; overwritten. `dy`: planes of the padded size.
///
/// # Panics
/// If the lengths do not hold the same number of planes.
pub fn pad2d_backward(dy: &[f32], g: &Unfold2d, dx: &mut [f32]) {
    let [h, w] = g.input;
    let [hp, wp] = [h + g.before[0] + g.after[0], w + g.before[1] + g.after[1]];
    let (plane_in, plane_out) = (h * w, hp * wp);
    if plane_in == 0 {
        return;
    }
    let planes = dx.len() / plane_in;
    assert!(
        dx.len() == planes * plane_in && dy.len() == planes * plane_out,
        "pad2d_backward: lengths"
    );
    // Per axis: the padded positions that read each input position, ascending.
    let readers = |a: usize, len: usize, padded: usize| {
        let mut r = vec![Vec::new(); len];
        for j in 0..padded {
            if let Some(i) = g.mode.source(j, len, g.before[a]) {
                r[i].push(j);
            }
        }
        r
    };
    let (rows, cols) = (readers(0, h, hp), readers(1, w, wp));
    // The columns read only by their own padded column: a run in the middle of the row.
    let single = |j: usize| cols[j].len() == 1;
    let first = (0..w).find(|&j| single(j)).unwrap_or(w);
    let end = (first..w).find(|&j| !single(j)).unwrap_or(w);
    let simple = if (end..w).all(|j| !single(j)) {
        first..end
    } else {
        0..0
    };
    dx.par_chunks_mut(w).enumerate().for_each(|(r, line)| {
        let (p, i) = (r / h, r % h);
        let src = &dy[p * plane_out..][..plane_out];
        if let [a] = rows[i][..] {
            let row = &src[a * wp..][..wp];
            let left = g.before[1];
            line[simple.clone()].copy_from_slice(&row[simple.start + left..simple.end + left]);
            for (j, o) in line.iter_mut().enumerate() {
                if !simple.contains(&j) {
                    *o = cols[j].iter().map(|&b| row[b]).sum();
                }
            }
            return;
        }
        for (o, readers) in line.iter_mut().zip(&cols) {
            let mut acc = 0.0f32;
            for &a in &rows[i] {
                for &b in readers {
                    acc += src[a * wp + b];
                }
            }
            *o = acc;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 20) as f32 / 2048.0
                    - 1.0
            })
            .collect()
    }

    /// The padded signal by its definition, in float64: index arithmetic in i64 with the
    /// mirror written as numpy's `reflect` and `edge` modes describe it.
    fn padded(x: &[f32], left: usize, right: usize, mode: PadMode) -> Vec<f64> {
        let n = x.len() as i64;
        (-(left as i64)..n + right as i64)
            .map(|i| {
                let j = match mode {
                    PadMode::Zero if i < 0 || i >= n => return 0.0,
                    PadMode::Zero => i,
                    PadMode::Reflect if i < 0 => -i,
                    PadMode::Reflect if i >= n => 2 * (n - 1) - i,
                    PadMode::Reflect => i,
                    PadMode::Replicate => i.clamp(0, n - 1),
                };
                f64::from(x[j as usize])
            })
            .collect()
    }

    /// One-row planes: the 1-D padding and its adjoint against the definition.
    #[test]
    fn row_padding_and_its_adjoint_match_the_definition() {
        for mode in [PadMode::Zero, PadMode::Reflect, PadMode::Replicate] {
            for (len, left, right) in [(5, 2, 3), (4, 0, 3), (6, 5, 1), (3, 0, 0), (1, 0, 0)] {
                if mode.check(len, left, right).is_err() {
                    continue;
                }
                let rows = 3;
                let g = Unfold2d::padding([1, len], [0, left], [0, right], mode);
                let out = g.out_size().unwrap();
                let x = values(rows * len, 17);
                let out_len = len + left + right;
                assert_eq!(out, [1, out_len]);
                let mut y = vec![f32::NAN; rows * out_len];
                unfold2d_forward(&x, &g, out, &mut y);
                for r in 0..rows {
                    let want = padded(&x[r * len..][..len], left, right, mode);
                    let got = &y[r * out_len..][..out_len];
                    for (g, w) in got.iter().zip(&want) {
                        assert_eq!(f64::from(*g), *w, "{mode:?} {len} {left} {right}");
                    }
                }
                // The adjoint: <pad(x), dy> = <x, pad_backward(dy)> for every x, so each
                // dx[i] is dy dotted with the padding of the one-hot e_i.
                let dy = values(rows * out_len, 91);
                let mut dx = vec![f32::NAN; rows * len];
                pad2d_backward(&dy, &g, &mut dx);
                for r in 0..rows {
                    for i in 0..len {
                        let mut e = vec![0.0f32; len];
                        e[i] = 1.0;
                        let want: f64 = padded(&e, left, right, mode)
                            .iter()
                            .zip(&dy[r * out_len..][..out_len])
                            .map(|(p, &g)| p * f64::from(g))
                            .sum();
                        let got = f64::from(dx[r * len + i]);
                        assert!(
                            (got - want).abs() <= 1e-6 * want.abs().max(1.0),
                            "{mode:?} dx[{i}] = {got}, want {want}"
                        );
                    }
                }
            }
        }
    }

    /// A padding past the streaming threshold (streamed stores) against the definition.
    #[test]
    fn streamed_padding_matches_the_definition() {
        let (planes, h, w) = (5, 1024, 1000);
        let x: Vec<f32> = (0..planes * h * w).map(|i| (i % 1009) as f32).collect();
        for mode in [PadMode::Zero, PadMode::Reflect, PadMode::Replicate] {
            let g = Unfold2d::padding([h, w], [2, 3], [1, 5], mode);
            let out = g.out_size().unwrap();
            let mut y = vec![f32::NAN; planes * out[0] * out[1]];
            assert!(crate::stream::should_stream(y.len(), 4));
            unfold2d_forward(&x, &g, out, &mut y);
            for (i, &v) in y.iter().enumerate().step_by(31) {
                let (p, r, c) = (i / (out[0] * out[1]), i / out[1] % out[0], i % out[1]);
                let want = match (mode.source(r, h, 2), mode.source(c, w, 3)) {
                    (Some(a), Some(b)) => x[(p * h + a) * w + b],
                    _ => 0.0,
                };
                assert_eq!(v, want, "{mode:?} at {i}");
            }
        }
    }

    #[test]
    fn pad_modes_refuse_what_they_cannot_pad() {
        assert!(PadMode::Reflect.check(3, 3, 0).is_err());
        assert!(PadMode::Reflect.check(3, 2, 2).is_ok());
        assert!(PadMode::Replicate.check(0, 1, 0).is_err());
        assert!(PadMode::Zero.check(0, 4, 4).is_ok());
        assert_eq!(PadMode::from_code(3), None);
        let g = Unfold2d::padding([3, 4], [0, 4], [0, 0], PadMode::Reflect);
        assert!(g.out_size().unwrap_err().contains("axis 1"));
        let mut big = Unfold2d::padding([3, 4], [0, usize::MAX], [0, 1], PadMode::Zero);
        assert!(big.out_size().unwrap_err().contains("overflows"));
        big.before = [0, 0];
        big.kernel = [5, 1];
        assert!(big.out_size().unwrap_err().contains("larger"));
    }
}
