//! Max pooling over NCHW planes with the winner's index, its gradient as a gather, and the
//! masked mean over the rows of a `(K, D)` matrix. (The average pools are separable
//! resamples: see [`crate::resize`].)

use rayon::prelude::*;

/// The window geometry of a 2-D max pool on one plane: input and output sizes, and per axis
/// `[h, w]` the window, stride, padding (on both sides) and dilation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxPool2d {
    /// Input `[H, W]`.
    pub input: [usize; 2],
    /// Output `[H_out, W_out]`.
    pub out: [usize; 2],
    /// Window.
    pub kernel: [usize; 2],
    /// Stride.
    pub stride: [usize; 2],
    /// Padding.
    pub padding: [usize; 2],
    /// Dilation.
    pub dilation: [usize; 2],
}

impl MaxPool2d {
    /// The range of outputs along axis `a` whose window can cover input position `i`.
    pub fn covering(&self, a: usize, i: usize) -> std::ops::Range<usize> {
        let (s, p, reach) = (
            self.stride[a],
            self.padding[a],
            (self.kernel[a] - 1) * self.dilation[a],
        );
        let pos = i + p;
        let first = pos.saturating_sub(reach).div_ceil(s);
        let last = (pos / s + 1).min(self.out[a]);
        first.min(last)..last
    }
}

/// Keeps `(v, i)` in `(best, at)` when `v > best`, without a branch (random data would
/// mispredict half the comparisons).
#[inline(always)]
fn take(best: &mut f32, at: &mut usize, v: f32, i: usize) {
    let gt = v > *best;
    let keep = (gt as usize).wrapping_neg();
    *at = (i & keep) | (*at & !keep);
    *best = if gt { v } else { *best };
}

/// `y[p, oh, ow]` = the largest input in the window of `(oh, ow)` (padding is -inf), and
/// `idx` = its position `h W + w` in the plane (the first of equal values in row-major window
/// order), or -1 with `y = -inf` for a window that lies entirely in the padding. NaN is
/// not ordered: the window's first input is kept unless a later one compares greater. `x`: planes of `H x W`; `y`, `idx`: planes of `H_out x W_out`, overwritten.
///
/// # Panics
/// If the lengths do not hold the same number of planes.
pub fn max_pool2d_forward(x: &[f32], g: &MaxPool2d, y: &mut [f32], idx: &mut [i32]) {
    let ([h, w], [ho, wo]) = (g.input, g.out);
    let (plane_in, plane_out) = (h * w, ho * wo);
    if plane_out == 0 {
        return;
    }
    let planes = y.len() / plane_out;
    assert!(
        y.len() == planes * plane_out && idx.len() == y.len() && x.len() == planes * plane_in,
        "max_pool2d_forward: lengths"
    );
    // Without padding or dilation, and with every window inside the input (no ceil-mode
    // overhang), no tap needs a bounds test.
    let inside = g.padding == [0, 0]
        && g.dilation == [1, 1]
        && (ho - 1) * g.stride[0] + g.kernel[0] <= h
        && (wo - 1) * g.stride[1] + g.kernel[1] <= w;
    y.par_chunks_mut(wo)
        .zip(idx.par_chunks_mut(wo))
        .enumerate()
        .for_each(|(r, (yr, ir))| {
            let (p, oh) = (r / ho, r % ho);
            let src = &x[p * plane_in..][..plane_in];
            if inside && g.kernel == [2, 2] {
                // The common 2x2 window: two rows, four loads per output.
                let top = oh * g.stride[0];
                let (r0, r1) = (&src[top * w..][..w], &src[(top + 1) * w..][..w]);
                for (ow, (yv, iv)) in yr.iter_mut().zip(ir.iter_mut()).enumerate() {
                    let l = ow * g.stride[1];
                    let at0 = top * w + l;
                    let (mut best, mut at) = (r0[l], at0);
                    take(&mut best, &mut at, r0[l + 1], at0 + 1);
                    take(&mut best, &mut at, r1[l], at0 + w);
                    take(&mut best, &mut at, r1[l + 1], at0 + w + 1);
                    *yv = best;
                    *iv = at as i32;
                }
                return;
            }
            if inside {
                let top = oh * g.stride[0];
                for (ow, (yv, iv)) in yr.iter_mut().zip(ir.iter_mut()).enumerate() {
                    let left = ow * g.stride[1];
                    let (mut best, mut at) = (src[top * w + left], top * w + left);
                    for kh in 0..g.kernel[0] {
                        let base = (top + kh) * w + left;
                        for (kw, &v) in src[base..base + g.kernel[1]].iter().enumerate() {
                            take(&mut best, &mut at, v, base + kw);
                        }
                    }
                    *yv = best;
                    *iv = at as i32;
                }
                return;
            }
            for (ow, (yv, iv)) in yr.iter_mut().zip(ir.iter_mut()).enumerate() {
                let (mut best, mut at) = (f32::NEG_INFINITY, -1i32);
                for kh in 0..g.kernel[0] {
                    let ih = (oh * g.stride[0] + kh * g.dilation[0]).wrapping_sub(g.padding[0]);
                    if ih >= h {
                        continue;
                    }
                    for kw in 0..g.kernel[1] {
                        let iw = (ow * g.stride[1] + kw * g.dilation[1]).wrapping_sub(g.padding[1]);
                        if iw >= w {
                            continue;
                        }
                        let v = src[ih * w + iw];
                        if at < 0 || v > best {
                            best = v;
                            at = (ih * w + iw) as i32;
                        }
                    }
                }
                *yv = best;
                *iv = at;
            }
        });
}

/// `dx[p, i]` = the sum of `dy[p, o]` over the outputs `o` whose window covers `i` and whose
/// `idx[p, o]` is `i` (gathered in row-major output order), overwritten.
///
/// # Panics
/// If the lengths do not hold the same number of planes.
pub fn max_pool2d_backward(dy: &[f32], idx: &[i32], g: &MaxPool2d, dx: &mut [f32]) {
    let ([h, w], [ho, wo]) = (g.input, g.out);
    let (plane_in, plane_out) = (h * w, ho * wo);
    if plane_in == 0 {
        return;
    }
    let planes = dx.len() / plane_in;
    assert!(
        dx.len() == planes * plane_in && dy.len() == planes * plane_out && idx.len() == dy.len(),
        "max_pool2d_backward: lengths"
    );
    dx.par_chunks_mut(w).enumerate().for_each(|(r, out)| {
        let (p, ih) = (r / h, r % h);
        let (g_dy, g_idx) = (
            &dy[p * plane_out..][..plane_out],
            &idx[p * plane_out..][..plane_out],
        );
        for (iw, o) in out.iter_mut().enumerate() {
            let me = (ih * w + iw) as i32;
            let mut acc = 0.0f32;
            for oh in g.covering(0, ih) {
                for ow in g.covering(1, iw) {
                    let o = oh * wo + ow;
                    // A select, not a branch: which outputs picked this pixel is data.
                    acc += if g_idx[o] == me { g_dy[o] } else { 0.0 };
                }
            }
            *o = acc;
        }
    });
}

/// Whether row `k` of a masked mean pool counts: every row without a mask, else where
/// `mask[k] >= 0.5`.
#[inline]
pub fn mask_valid(mask: Option<&[f32]>, k: usize) -> bool {
    mask.is_none_or(|m| m[k] >= 0.5)
}

/// `y[j]` = the mean of `x[k, j]` over the valid rows `k` of `x` (`(k_rows, d)`), or 0 when
/// no row is valid; overwritten. `mask`: `k_rows` values (see [`mask_valid`]).
///
/// # Panics
/// If a length does not match.
pub fn masked_mean_pool_forward(x: &[f32], mask: Option<&[f32]>, d: usize, y: &mut [f32]) {
    assert!(y.len() == d, "masked_mean_pool_forward: lengths");
    if d == 0 {
        return;
    }
    let k_rows = x.len() / d;
    assert!(
        x.len() == k_rows * d && mask.is_none_or(|m| m.len() == k_rows),
        "masked_mean_pool_forward: lengths"
    );
    let valid: Vec<usize> = (0..k_rows).filter(|&k| mask_valid(mask, k)).collect();
    y.fill(0.0);
    if valid.is_empty() {
        return;
    }
    for &k in &valid {
        for (o, &v) in y.iter_mut().zip(&x[k * d..][..d]) {
            *o += v;
        }
    }
    let inv = 1.0 / valid.len() as f32;
    y.iter_mut().for_each(|o| *o *= inv);
}

/// `dx[k, j] = dy[j] / valid` for the valid rows, 0 elsewhere (all 0 when no row is
/// valid); overwritten. `dx`: `(k_rows, d)`.
///
/// # Panics
/// If a length does not match.
pub fn masked_mean_pool_backward(dy: &[f32], mask: Option<&[f32]>, dx: &mut [f32]) {
    let d = dy.len();
    if d == 0 {
        return;
    }
    let k_rows = dx.len() / d;
    assert!(
        dx.len() == k_rows * d && mask.is_none_or(|m| m.len() == k_rows),
        "masked_mean_pool_backward: lengths"
    );
    let valid = (0..k_rows).filter(|&k| mask_valid(mask, k)).count();
    let inv = if valid > 0 { 1.0 / valid as f32 } else { 0.0 };
    dx.par_chunks_mut(d).enumerate().for_each(|(k, row)| {
        if mask_valid(mask, k) && valid > 0 {
            for (o, &g) in row.iter_mut().zip(dy) {
                *o = g * inv;
            }
        } else {
            row.fill(0.0);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covering_ranges_hold_every_window_that_reads_a_pixel() {
        for (k, s, p, d, len) in [
            (3, 1, 1, 1, 7),
            (2, 3, 0, 1, 9),
            (3, 2, 2, 2, 8),
            (4, 1, 3, 1, 2),
        ] {
            let out = (len + 2 * p - (k - 1) * d - 1) / s + 1;
            let g = MaxPool2d {
                input: [len, len],
                out: [out, out],
                kernel: [k, k],
                stride: [s, s],
                padding: [p, p],
                dilation: [d, d],
            };
            for i in 0..len {
                let want: Vec<usize> = (0..out)
                    .filter(|&o| (0..k).any(|t| o * s + t * d == i + p))
                    .collect();
                let got = g.covering(0, i);
                assert!(
                    want.iter().all(|o| got.contains(o)),
                    "{k} {s} {p} {d}: pixel {i}: {want:?} not in {got:?}"
                );
            }
        }
    }
}
