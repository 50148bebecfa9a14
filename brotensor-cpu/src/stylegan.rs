//! StyleGAN primitives (the semantics of NVlabs stylegan3's pure-torch `_ref` functions):
//! the per-sample weight modulation of `modulated_conv2d` and its gradient, `upfirdn2d`
//! (zero-insert up, pad or crop, FIR, down, gain) and `bias_act` (bias, linear or leaky
//! ReLU, gain, clamp) with its gradient. The convolutions themselves are the grouped
//! convolution of [`crate::conv`].

use rayon::prelude::*;

use crate::stream::{streaming, write_map, StreamedIter};

/// The activation of [`bias_act`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BiasActivation {
    /// `t`.
    Linear,
    /// `t` where `t > 0`, else `alpha t`.
    LeakyRelu {
        /// The negative slope (StyleGAN: 0.2).
        alpha: f32,
    },
}

/// `bias_act`'s parameters: `y = clamp(gain * act(x + b[c]), -clamp, clamp)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BiasAct {
    /// The activation.
    pub act: BiasActivation,
    /// The output scale.
    pub gain: f32,
    /// The symmetric clamp of the scaled output, or none.
    pub clamp: Option<f32>,
}

impl BiasAct {
    /// `gain * act(t)`, before the clamp.
    #[inline(always)]
    fn scaled(self, t: f32) -> f32 {
        let a = match self.act {
            BiasActivation::Linear => t,
            BiasActivation::LeakyRelu { alpha } => {
                if t > 0.0 {
                    t
                } else {
                    t * alpha
                }
            }
        };
        a * self.gain
    }

    /// The forward value of the biased input `t`.
    #[inline(always)]
    pub fn forward(self, t: f32) -> f32 {
        let y = self.scaled(t);
        match self.clamp {
            Some(c) => y.clamp(-c, c),
            None => y,
        }
    }

    /// The gradient through the biased input `t`: `dy gain act'(t)`, zero where the clamp
    /// cut the scaled value (`|gain act(t)| > clamp`). The leaky slope holds at `t = 0`.
    #[inline(always)]
    pub fn backward(self, t: f32, dy: f32) -> f32 {
        if let Some(c) = self.clamp {
            if self.scaled(t).abs() > c {
                return 0.0;
            }
        }
        let slope = match self.act {
            BiasActivation::Linear => 1.0,
            BiasActivation::LeakyRelu { alpha } => {
                if t > 0.0 {
                    1.0
                } else {
                    alpha
                }
            }
        };
        dy * self.gain * slope
    }
}

/// `y = act(x + b[c])` per [`BiasAct`] over `(N, C, plane)`; `b` holds `C` values or is
/// `None` (then `C` is `channels`). `y` overwritten.
///
/// # Panics
/// If the lengths disagree.
pub fn bias_act(
    x: &[f32],
    b: Option<&[f32]>,
    channels: usize,
    plane: usize,
    p: BiasAct,
    y: &mut [f32],
) {
    assert!(
        x.len() == y.len()
            && b.is_none_or(|b| b.len() == channels)
            && (plane == 0 || channels == 0 || x.len().is_multiple_of(channels * plane)),
        "bias_act: lengths"
    );
    if plane == 0 || channels == 0 {
        return;
    }
    // One branch-free form for every parameter set (linear: slope 1; no clamp: infinite
    // bounds), so the loop vectorizes; large outputs are written with streaming stores.
    let alpha = match p.act {
        BiasActivation::Linear => 1.0,
        BiasActivation::LeakyRelu { alpha } => alpha,
    };
    let bound = p.clamp.unwrap_or(f32::INFINITY);
    let gain = p.gain;
    streaming(y.len(), 4, |streaming| {
        y.par_chunks_mut(plane)
            .zip(x.par_chunks(plane))
            .enumerate()
            .for_each_streamed(streaming, |stream, (q, (y, x))| {
                let bias = b.map_or(0.0, |b| b[q % channels]);
                crate::simd::wide(
                    #[inline(always)]
                    |_| {
                        write_map(
                            stream,
                            y,
                            x,
                            #[inline(always)]
                            |v| {
                                let t = v + bias;
                                let a = if t > 0.0 { t } else { t * alpha };
                                // Selects, not `f32::clamp` (whose bound check stays in
                                // the loop); NaN passes through as there.
                                let y = a * gain;
                                let y = if y > bound { bound } else { y };
                                if y < -bound {
                                    -bound
                                } else {
                                    y
                                }
                            },
                        )
                    },
                )
            });
    });
}

/// [`bias_act`]'s input gradient: `dx = dy gain act'(x + b[c])`, zero where the clamp cut
/// the value; overwritten. (The bias gradient is the per-channel sum of `dx`.)
///
/// # Panics
/// If the lengths disagree.
pub fn bias_act_backward(
    dy: &[f32],
    x: &[f32],
    b: Option<&[f32]>,
    channels: usize,
    plane: usize,
    p: BiasAct,
    dx: &mut [f32],
) {
    assert!(
        x.len() == dx.len()
            && dy.len() == dx.len()
            && b.is_none_or(|b| b.len() == channels)
            && (plane == 0 || channels == 0 || x.len().is_multiple_of(channels * plane)),
        "bias_act_backward: lengths"
    );
    if plane == 0 || channels == 0 {
        return;
    }
    dx.par_chunks_mut(plane)
        .zip(x.par_chunks(plane).zip(dy.par_chunks(plane)))
        .enumerate()
        .for_each(|(q, (dx, (x, dy)))| {
            let bias = b.map_or(0.0, |b| b[q % channels]);
            crate::simd::wide(
                #[inline(always)]
                |_| {
                    for ((d, &v), &g) in dx.iter_mut().zip(x).zip(dy) {
                        *d = p.backward(v + bias, g);
                    }
                },
            )
        });
}

/// The sizes of a weight modulation: `n` samples, `c_out` output channels, `c_in` input
/// channels, `taps = kH * kW`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Modulation {
    /// Samples.
    pub n: usize,
    /// Output channels (weight rows).
    pub c_out: usize,
    /// Input channels.
    pub c_in: usize,
    /// Taps per input channel, `kH * kW`.
    pub taps: usize,
}

impl Modulation {
    /// Elements of one weight row, `c_in * taps`.
    pub fn row(self) -> usize {
        self.c_in * self.taps
    }
}

/// The per-sample weights of `modulated_conv2d`: `w'[n, o, i, k] = w[o, i, k] s[n, i]`,
/// `dcoef[n, o] = 1 / sqrt(sum_{i,k} w'^2 + eps)` when `demod_eps` is given (else 1), and
/// `wmod = w' dcoef`, the `(N C_out, C_in taps)` weight of the grouped convolution.
///
/// # Panics
/// If `w` is not `(c_out, c_in taps)`, `s` `(n, c_in)`, `wmod` `(n c_out, c_in taps)` or
/// `dcoef` `(n, c_out)`.
pub fn modulate_weights(
    w: &[f32],
    s: &[f32],
    m: Modulation,
    demod_eps: Option<f32>,
    wmod: &mut [f32],
    dcoef: &mut [f32],
) {
    let row = m.row();
    assert!(
        w.len() == m.c_out * row
            && s.len() == m.n * m.c_in
            && wmod.len() == m.n * w.len()
            && dcoef.len() == m.n * m.c_out,
        "modulate_weights: lengths"
    );
    if row == 0 {
        // Empty rows: the sum of squares is 0.
        dcoef.fill(demod_eps.map_or(1.0, |eps| 1.0 / eps.sqrt()));
        return;
    }
    wmod.par_chunks_mut(row)
        .zip(dcoef.par_iter_mut())
        .enumerate()
        .for_each(|(r, (out, d))| {
            let (n, o) = (r / m.c_out, r % m.c_out);
            let (w, s) = (&w[o * row..][..row], &s[n * m.c_in..][..m.c_in]);
            for ((out, w), &s) in out.chunks_mut(m.taps).zip(w.chunks(m.taps)).zip(s) {
                for (o, &w) in out.iter_mut().zip(w) {
                    *o = w * s;
                }
            }
            *d = match demod_eps {
                Some(eps) => 1.0 / (out.iter().map(|v| v * v).sum::<f32>() + eps).sqrt(),
                None => 1.0,
            };
            if demod_eps.is_some() {
                for o in out.iter_mut() {
                    *o *= *d;
                }
            }
        });
}

/// The gradient of [`modulate_weights`] from `dwmod`, the gradient of the grouped
/// convolution's weight: per `(n, o)`, `g = sum dwmod w'`, `dw' = dwmod dcoef - g dcoef^3
/// w'` with demodulation (else `dwmod`); then `dw[o, i, k] += sum_n dw'[n, o, i, k] s[n, i]`
/// (accumulated) and `ds[n, i] = sum_{o,k} dw'[n, o, i, k] w[o, i, k]` (overwritten).
///
/// # Panics
/// If the lengths disagree with [`modulate_weights`]'s.
#[allow(clippy::too_many_arguments)]
pub fn modulate_weights_backward(
    w: &[f32],
    s: &[f32],
    dcoef: &[f32],
    dwmod: &[f32],
    m: Modulation,
    demodulate: bool,
    dw: &mut [f32],
    ds: &mut [f32],
) {
    let row = m.row();
    assert!(
        w.len() == m.c_out * row
            && s.len() == m.n * m.c_in
            && dwmod.len() == m.n * w.len()
            && dcoef.len() == m.n * m.c_out
            && dw.len() == w.len()
            && ds.len() == s.len(),
        "modulate_weights_backward: lengths"
    );
    if row == 0 || m.n == 0 {
        ds.fill(0.0);
        return;
    }
    // dw' per (n, o) row.
    let mut dwp = vec![0.0f32; dwmod.len()];
    dwp.par_chunks_mut(row)
        .zip(dwmod.par_chunks(row))
        .enumerate()
        .for_each(|(r, (out, dwm))| {
            let (n, o) = (r / m.c_out, r % m.c_out);
            let (w, s) = (&w[o * row..][..row], &s[n * m.c_in..][..m.c_in]);
            let wp = |j: usize| w[j] * s[j / m.taps];
            if demodulate {
                let d = dcoef[r];
                let g: f32 = (0..row).map(|j| dwm[j] * wp(j)).sum();
                let k = g * d * d * d;
                for (j, o) in out.iter_mut().enumerate() {
                    *o = dwm[j] * d - k * wp(j);
                }
            } else {
                out.copy_from_slice(dwm);
            }
        });
    let per_sample = m.c_out * row;
    dw.par_chunks_mut(row).enumerate().for_each(|(o, dw)| {
        for (j, dw) in dw.iter_mut().enumerate() {
            let i = j / m.taps;
            let sum: f32 = (0..m.n)
                .map(|n| dwp[n * per_sample + o * row + j] * s[n * m.c_in + i])
                .sum();
            *dw += sum;
        }
    });
    ds.par_chunks_mut(m.c_in).enumerate().for_each(|(n, ds)| {
        for (i, ds) in ds.iter_mut().enumerate() {
            let mut sum = 0.0f32;
            for o in 0..m.c_out {
                let at = o * row + i * m.taps;
                let (d, w) = (&dwp[n * per_sample + at..][..m.taps], &w[at..][..m.taps]);
                sum += d.iter().zip(w).map(|(a, b)| a * b).sum::<f32>();
            }
            *ds = sum;
        }
    });
}

/// The geometry of `upfirdn2d` on one plane: zero-insert upsampling by `up`, padding
/// `pad = [y0, y1, x0, x1]` (negative values crop), correlation with the `fH x fW` filter
/// (flipped first unless `flip_filter`, i.e. a true convolution by default), keeping every
/// `down`-th output, and a gain. Every field is per axis `[y, x]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Upfirdn2d {
    /// Input plane `[H, W]`.
    pub input: [usize; 2],
    /// Filter `[fH, fW]`.
    pub filter: [usize; 2],
    /// Upsampling factors (at least 1).
    pub up: [usize; 2],
    /// Downsampling factors (at least 1).
    pub down: [usize; 2],
    /// `[y0, y1, x0, x1]`: added before and after each axis; negative crops.
    pub pad: [i64; 4],
    /// Correlate with the filter as stored (`true`) or flipped (`false`, a convolution).
    pub flip_filter: bool,
    /// Output scale.
    pub gain: f32,
}

impl Upfirdn2d {
    /// The output plane `[H_out, W_out]`: `(in up + pad0 + pad1 - f) / down + 1` per axis,
    /// or why there is none (a factor of 0, an axis the filter does not fit, an overflow).
    pub fn out_size(&self) -> Result<[usize; 2], String> {
        let mut out = [0; 2];
        for a in 0..2 {
            let name = ["y", "x"][a];
            if self.up[a] == 0 || self.down[a] == 0 || self.filter[a] == 0 {
                return Err(format!(
                    "axis {name}: up {}, down {} and the filter size {} must be at least 1",
                    self.up[a], self.down[a], self.filter[a]
                ));
            }
            let upsampled = i64::try_from(self.input[a])
                .ok()
                .and_then(|v| v.checked_mul(i64::try_from(self.up[a]).ok()?))
                .and_then(|v| {
                    v.checked_add(self.pad[2 * a])?
                        .checked_add(self.pad[2 * a + 1])
                })
                .ok_or_else(|| format!("axis {name}: the padded size overflows"))?;
            let f = self.filter[a] as i64;
            if upsampled < f {
                return Err(format!(
                    "axis {name}: the upsampled, padded size {upsampled} is smaller than the \
                     filter ({f})"
                ));
            }
            out[a] = ((upsampled - f) / self.down[a] as i64 + 1) as usize;
        }
        Ok(out)
    }

    /// The correlation filter: `f` times `gain`, flipped on both axes unless `flip_filter`.
    pub fn taps(&self, f: &[f32]) -> Vec<f32> {
        let [fh, fw] = self.filter;
        let mut t = vec![0.0; fh * fw];
        for i in 0..fh {
            for j in 0..fw {
                let (si, sj) = if self.flip_filter {
                    (i, j)
                } else {
                    (fh - 1 - i, fw - 1 - j)
                };
                t[i * fw + j] = f[si * fw + sj] * self.gain;
            }
        }
        t
    }

    /// The geometry of the input gradient: an upfirdn2d of `dy` with up and down exchanged,
    /// the filter flip inverted and the padding that maps the output grid back onto the
    /// input (the transpose of this one), for an output of `out`.
    pub fn adjoint(&self, out: [usize; 2]) -> Upfirdn2d {
        let [fh, fw] = self.filter.map(|v| v as i64);
        let [h, w] = self.input.map(|v| v as i64);
        let [uy, ux] = self.up.map(|v| v as i64);
        let [dy, dx] = self.down.map(|v| v as i64);
        let [ho, wo] = out.map(|v| v as i64);
        let [py0, _, px0, _] = self.pad;
        Upfirdn2d {
            input: out,
            filter: self.filter,
            up: self.down,
            down: self.up,
            pad: [
                fh - py0 - 1,
                h * uy - ho * dy + py0 - uy + 1,
                fw - px0 - 1,
                w * ux - wo * dx + px0 - ux + 1,
            ],
            flip_filter: !self.flip_filter,
            gain: self.gain,
        }
    }
}

/// Where one filter column's taps meet input samples along a row: the outputs `ox0, ox0 +
/// step, ...` (`count` of them) read the padded source columns `s0, s0 + sstep, ...`.
#[derive(Clone, Copy, Debug)]
struct ColumnTap {
    ox0: usize,
    s0: usize,
    count: usize,
}

/// The column plan of `g` for `wo` outputs: per filter column, where its taps meet input
/// samples (or `None`); the output stride `step` (the outputs sharing a phase, one class
/// per `ox0 < step`) and source stride `sstep`; the padded row's width and the offset of
/// source column 0 in it.
struct ColumnPlan {
    taps: Vec<Option<ColumnTap>>,
    step: usize,
    sstep: usize,
    width: usize,
    offset: usize,
}

fn column_plan(g: &Upfirdn2d, wo: usize) -> ColumnPlan {
    let (ux, dx) = (g.up[1] as i64, g.down[1] as i64);
    let (w, fw, px0) = (g.input[1] as i64, g.filter[1] as i64, g.pad[2]);
    let gcd = |mut a: i64, mut b: i64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let d = gcd(ux, dx);
    let (step, sstep) = (ux / d, dx / d);
    let raw: Vec<Option<(i64, i64, i64)>> = (0..fw)
        .map(|j| {
            let ox0 =
                (0..step.min(wo as i64)).find(|&ox| (ox * dx + j - px0).rem_euclid(ux) == 0)?;
            let count = (wo as i64 - ox0 + step - 1) / step;
            Some((ox0, (ox0 * dx + j - px0).div_euclid(ux), count))
        })
        .collect();
    let lo = raw
        .iter()
        .flatten()
        .map(|&(_, s0, _)| s0)
        .min()
        .unwrap_or(0)
        .min(0);
    // One chunk of slack past the last sample read: the chunked loop reads whole chunks.
    let hi = raw
        .iter()
        .flatten()
        .map(|&(_, s0, count)| s0 + (count - 1 + CHUNK as i64) * sstep + 1)
        .max()
        .unwrap_or(0)
        .max(w);
    let offset = -lo;
    let taps = raw
        .into_iter()
        .map(|t| {
            t.map(|(ox0, s0, count)| ColumnTap {
                ox0: ox0 as usize,
                s0: (s0 + offset) as usize,
                count: count as usize,
            })
        })
        .collect();
    ColumnPlan {
        taps,
        step: step as usize,
        sstep: sstep as usize,
        width: (hi - lo) as usize,
        offset: offset as usize,
    }
}

/// Outputs computed together: one vector register's accumulators on AVX-512.
const CHUNK: usize = 16;

/// `out[m] = sum over taps (t, at) of t * src[at + m sstep]` for every `m`, a chunk of
/// outputs at a time with its accumulators in registers. `src` holds a chunk of slack past
/// the last sample of every tap.
#[inline(always)]
fn tap_sums(src: &[f32], taps: &[(f32, usize)], sstep: usize, out: &mut [f32]) {
    for (c, out) in out.chunks_mut(CHUNK).enumerate() {
        let m0 = c * CHUNK;
        let mut acc = [0.0f32; CHUNK];
        if sstep == 1 {
            for &(t, at) in taps {
                let s = &src[at + m0..][..CHUNK];
                for (a, &v) in acc.iter_mut().zip(s) {
                    *a += t * v;
                }
            }
        } else {
            for &(t, at) in taps {
                let s = &src[at + m0 * sstep..];
                for (k, a) in acc.iter_mut().enumerate() {
                    *a += t * s[k * sstep];
                }
            }
        }
        out.copy_from_slice(&acc[..out.len()]);
    }
}

/// `upfirdn2d` of every `H x W` plane of `x` into the `H_out x W_out` planes of `y`
/// (overwritten) by the geometry `g` (whose `out_size` must hold) and the `fH x fW`
/// filter `f`. FP32 accumulation; only the taps that meet an input sample are summed
/// (polyphase: the zero-inserted rows and columns are skipped). The plane's rows are copied
/// once into zero-padded rows; each output row is computed per column phase, a chunk of
/// outputs at a time over every tap of that phase, branch-free.
///
/// # Panics
/// If the lengths disagree with `g`.
pub fn upfirdn2d(x: &[f32], f: &[f32], g: &Upfirdn2d, y: &mut [f32]) {
    let [h, w] = g.input;
    let [fh, fw] = g.filter;
    let [ho, wo] = g.out_size().expect("upfirdn2d: geometry");
    let (plane, out_plane) = (h * w, ho * wo);
    assert!(
        f.len() == fh * fw
            && (plane == 0 || x.len().is_multiple_of(plane))
            && y.len() == x.len().checked_div(plane).unwrap_or(0) * out_plane,
        "upfirdn2d: lengths"
    );
    if y.is_empty() {
        return;
    }
    let taps = g.taps(f);
    let (uy, dy, py0) = (g.up[0] as i64, g.down[0] as i64, g.pad[0]);
    let plan = column_plan(g, wo);
    let pw = plan.width;
    y.par_chunks_mut(out_plane)
        .zip(x.par_chunks(plane))
        .for_each_init(
            || (Vec::new(), Vec::new(), Vec::new()),
            |(padded, phase_taps, out), (y, x)| {
                // The plane's rows inside zero-padded rows of `pw`, plus one row of slack.
                padded.clear();
                padded.resize((h + 1) * pw, 0.0f32);
                for (dst, src) in padded.chunks_mut(pw).zip(x.chunks(w)) {
                    dst[plan.offset..plan.offset + w].copy_from_slice(src);
                }
                let padded = &padded[..];
                crate::simd::wide(
                    #[inline(always)]
                    |_| {
                        for (oy, yrow) in y.chunks_mut(wo).enumerate() {
                            let base = oy as i64 * dy - py0;
                            for phase in 0..plan.step.min(wo) {
                                // Every (row, column) tap of this output phase.
                                phase_taps.clear();
                                let mut count = (wo - phase).div_ceil(plan.step);
                                let mut i = (-base).rem_euclid(uy);
                                let mut sy = (base + i).div_euclid(uy);
                                while i < fh as i64 && sy < h as i64 {
                                    if sy >= 0 {
                                        let trow = &taps[i as usize * fw..][..fw];
                                        for (tap, &t) in plan.taps.iter().zip(trow) {
                                            if let Some(c) = tap.filter(|c| c.ox0 == phase) {
                                                phase_taps.push((t, sy as usize * pw + c.s0));
                                                count = c.count;
                                            }
                                        }
                                    }
                                    i += uy;
                                    sy += 1;
                                }
                                out.clear();
                                out.resize(count, 0.0f32);
                                tap_sums(padded, phase_taps, plan.sstep, out);
                                for (o, &v) in
                                    yrow[phase..].iter_mut().step_by(plan.step).zip(&out[..])
                                {
                                    *o = v;
                                }
                            }
                        }
                    },
                )
            },
        );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaky_relu_gradient_takes_the_slope_at_zero_and_the_clamp_kills_it() {
        let p = BiasAct {
            act: BiasActivation::LeakyRelu { alpha: 0.2 },
            gain: 2.0,
            clamp: Some(1.0),
        };
        assert_eq!(p.backward(0.0, 1.0), 0.4);
        assert_eq!(p.backward(0.5, 1.0), 2.0); // |2 * 0.5| = 1: on the clamp, kept
        assert_eq!(p.backward(0.51, 1.0), 0.0);
        assert_eq!(p.forward(3.0), 1.0);
        assert_eq!(p.forward(-3.0), -1.0);
    }

    #[test]
    fn upfirdn2d_out_size_refuses_zero_factors_and_too_small_inputs() {
        let g = Upfirdn2d {
            input: [4, 4],
            filter: [3, 3],
            up: [1, 1],
            down: [1, 1],
            pad: [0, 0, -2, 0],
            flip_filter: false,
            gain: 1.0,
        };
        assert!(g.out_size().is_err());
        assert_eq!(Upfirdn2d { pad: [0; 4], ..g }.out_size(), Ok([2, 2]));
        assert!(Upfirdn2d { up: [0, 1], ..g }.out_size().is_err());
    }
}
