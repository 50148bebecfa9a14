//! Row-wise softmax and normalizations over row-major `(rows, cols)` FP32 matrices. Variance
//! is always two-pass: the mean first, then the mean of squared deviations.

use rayon::prelude::*;

use crate::activation::silu_with;
use crate::elementwise::exp_with;
use crate::reduction::{
    max_with_floor, piece_sum, rows_with_column_sums, sum, sum_map, sum_zip, sum_zip3, PIECE,
};
use crate::simd::{prefetch, wide, MulAdd};
use crate::stream::{streaming, write_blocks, write_map, write_zip, Stream, StreamedIter};

/// A masked entry's logit floor (the C++ original starts its running max here).
const MASKED_MAX: f32 = -1e30;

/// Floats in a 64-byte cache line: the step at which the row loops prefetch.
const LINE: usize = 16;

/// Where row `i + 1` of the `cols`-wide rows in `all` starts (past the end for the last
/// row, which is harmless: only [`prefetch`] reads it). Rayon hands each thread a run of
/// consecutive rows, so the next row in memory is usually the thread's next, and fetching
/// its lines during this row's math hides their load.
fn next_row(all: &[f32], i: usize, cols: usize) -> *const f32 {
    all.as_ptr().wrapping_add((i + 1) * cols)
}

/// Softmax of each row of `x` into `y`. With a `mask` (one value per column), entries whose
/// mask is below 0.5 get probability 0; a fully masked row is all zeros. The exponentials
/// go to a per-task row of scratch, so `y` is written once (by streaming stores when large).
pub fn softmax_rows(x: &[f32], cols: usize, mask: Option<&[f32]>, y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "softmax_rows: lengths");
    if cols == 0 {
        return;
    }
    if is_long(x.len() / cols, cols) {
        for (y, x) in y.chunks_mut(cols).zip(x.chunks(cols)) {
            softmax_long_row(x, mask, y);
        }
        return;
    }
    streaming(y.len(), 4, |streaming| {
        y.par_chunks_mut(cols)
            .zip(x.par_chunks(cols))
            .enumerate()
            .for_each_streamed_init(
                streaming,
                || vec![0.0f32; cols],
                |stream, e, (i, (y, row))| {
                    let next = next_row(x, i, cols);
                    wide(
                        #[inline(always)]
                        |madd| softmax_row(madd, row, mask, e, y, stream, next),
                    )
                },
            );
    });
}

/// Whether `rows` rows of `cols` are better split within each row (fewer rows than
/// threads, each spanning at least two pieces): a flat softmax over a whole tensor, or one
/// token's logits over a large vocabulary, is one row.
fn is_long(rows: usize, cols: usize) -> bool {
    rows < rayon::current_num_threads() && cols >= 2 * PIECE
}

/// [`softmax_rows`] for one long row, split into pieces across threads: the max, then the
/// exponentials into `y` with their sum, then `y` scaled in place.
fn softmax_long_row(x: &[f32], mask: Option<&[f32]>, y: &mut [f32]) {
    let piece_mask = |k: usize, len: usize| mask.map(|m| &m[k * PIECE..k * PIECE + len]);
    let max = x
        .par_chunks(PIECE)
        .enumerate()
        .map(|(k, xs)| {
            wide(
                #[inline(always)]
                |_| masked_max(xs, piece_mask(k, xs.len())),
            )
        })
        .reduce(|| MASKED_MAX, f32::max);
    let parts: Vec<f32> = y
        .par_chunks_mut(PIECE)
        .zip(x.par_chunks(PIECE))
        .enumerate()
        .map(|(k, (ys, xs))| {
            wide(
                #[inline(always)]
                |madd| masked_exps(madd, xs, piece_mask(k, xs.len()), max, ys),
            )
        })
        .collect();
    let s: f32 = parts.iter().sum();
    let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
    y.par_chunks_mut(PIECE).for_each(|ys| {
        wide(
            #[inline(always)]
            |_| {
                for v in ys.iter_mut() {
                    *v *= inv;
                }
            },
        )
    });
}

/// The largest of [`MASKED_MAX`] and the entries of `row` whose mask is at least 0.5 (every
/// entry without a mask).
#[inline(always)]
fn masked_max(row: &[f32], mask: Option<&[f32]>) -> f32 {
    match mask {
        None => max_with_floor(row, MASKED_MAX),
        Some(m) => row.iter().zip(m).fold(
            MASKED_MAX,
            |a, (&v, &k)| {
                if k >= 0.5 && v > a {
                    v
                } else {
                    a
                }
            },
        ),
    }
}

/// `e = exp(row - max)` (0 where masked) and its sum.
#[inline(always)]
fn masked_exps(madd: MulAdd, row: &[f32], mask: Option<&[f32]>, max: f32, e: &mut [f32]) -> f32 {
    match mask {
        None => {
            for (o, &v) in e.iter_mut().zip(row) {
                *o = exp_with(madd, v - max);
            }
        }
        Some(m) => {
            for ((o, &v), &k) in e.iter_mut().zip(row).zip(m) {
                *o = if k >= 0.5 {
                    exp_with(madd, v - max)
                } else {
                    0.0
                };
            }
        }
    }
    sum(e)
}

/// One row of [`softmax_rows`] into `y`, with `e` (the row's length) as scratch for the
/// exponentials and `next` the start of a row to prefetch meanwhile (any address). Inline
/// into a [`wide`] body.
#[inline(always)]
fn softmax_row(
    madd: MulAdd,
    row: &[f32],
    mask: Option<&[f32]>,
    e: &mut [f32],
    y: &mut [f32],
    stream: Stream,
    next: *const f32,
) {
    let inv = softmax_exps(madd, row, mask, e, next);
    write_map(
        stream,
        y,
        e,
        #[inline(always)]
        |v| v * inv,
    );
}

/// The unnormalized half of a row's softmax: `e = exp(row - max)` (0 where masked) and the
/// scale `1 / sum e` (0 when nothing is valid) that turns `e` into the probabilities.
/// Prefetches the row at `next` meanwhile (any address). Inline into a [`wide`] body.
#[inline(always)]
pub(crate) fn softmax_exps(
    madd: MulAdd,
    row: &[f32],
    mask: Option<&[f32]>,
    e: &mut [f32],
    next: *const f32,
) -> f32 {
    let max = masked_max(row, mask);
    let s = match mask {
        None => exp_shifted_sum(madd, row, max, e, next),
        Some(_) => masked_exps(madd, row, mask, max, e),
    };
    if s > 0.0 {
        1.0 / s
    } else {
        0.0
    }
}

/// Independent sums in [`exp_shifted_sum`]; a multiple of the 16 floats in a cache line.
const EXP_LANES: usize = 32;

/// `y = exp(x - max)`, returning `sum y` in [`EXP_LANES`] FP32 lanes, while prefetching
/// the row at `next` (of the same length) so that its load overlaps this row's math.
#[inline(always)]
fn exp_shifted_sum(m: MulAdd, x: &[f32], max: f32, y: &mut [f32], next: *const f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::level() == crate::simd::Level::Avx512 {
        // SAFETY: `level` detected every feature the function enables on this CPU.
        return unsafe { exp_shifted_sum_avx512(x, max, y, next) };
    }
    exp_shifted_sum_portable(m, x, max, y, next)
}

/// [`exp_shifted_sum`] in plain arithmetic that LLVM vectorizes for any tier.
#[inline(always)]
fn exp_shifted_sum_portable(
    m: MulAdd,
    x: &[f32],
    max: f32,
    y: &mut [f32],
    next: *const f32,
) -> f32 {
    let mut lanes = [0.0f32; EXP_LANES];
    let mut cy = y.chunks_exact_mut(EXP_LANES);
    let cx = x.chunks_exact(EXP_LANES);
    let tail = cx.remainder();
    for (c, (o, v)) in (&mut cy).zip(cx).enumerate() {
        let ahead = next.wrapping_add(c * EXP_LANES);
        prefetch(ahead);
        prefetch(ahead.wrapping_add(LINE));
        for k in 0..EXP_LANES {
            o[k] = exp_with(m, v[k] - max);
            lanes[k] += o[k];
        }
    }
    let mut s = lanes.iter().sum::<f32>();
    for (o, &v) in cy.into_remainder().iter_mut().zip(tail) {
        *o = exp_with(m, v - max);
        s += *o;
    }
    s
}

/// [`exp_shifted_sum`] in AVX-512 instructions: `2^n` applied by `vscalefps` and `n` rounded
/// by `vrndscaleps`, about a quarter fewer instructions than the portable form, which LLVM
/// cannot derive from it. Same range reduction and polynomial as
/// [`exp_with`](crate::elementwise::exp_with); results may differ from it in the last bit,
/// and arguments below -104 (where `e^x` is below the smallest subnormal) give 0. NaN stays
/// NaN.
///
/// # Safety
/// The CPU must have AVX-512 F, VL, BW and DQ, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
unsafe fn exp_shifted_sum_avx512(x: &[f32], max: f32, y: &mut [f32], next: *const f32) -> f32 {
    use std::arch::x86_64::*;
    const LANES: usize = 16;
    let shift = _mm512_set1_ps(max);
    let floor = _mm512_set1_ps(-104.0);
    let log2e = _mm512_set1_ps(std::f32::consts::LOG2_E);
    let ln2_hi = _mm512_set1_ps(0.693_145_75);
    let ln2_lo = _mm512_set1_ps(1.428_606_8e-6);
    let coef = [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ]
    .map(|c| _mm512_set1_ps(c));
    // e^(v - max) for 16 lanes: v - max = n ln2 + r, |r| <= ln2/2, e^r by Horner, times 2^n.
    let exp16 = |v: __m512| {
        // max(floor, v) keeps a NaN `v` (the second operand wins on NaN).
        let v = _mm512_max_ps(floor, _mm512_sub_ps(v, shift));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(v, log2e),
        );
        let r = _mm512_fnmadd_ps(n, ln2_lo, _mm512_fnmadd_ps(n, ln2_hi, v));
        let mut p = coef[0];
        for &c in &coef[1..] {
            p = _mm512_fmadd_ps(p, r, c);
        }
        _mm512_scalef_ps(p, n)
    };
    let mut sums = [_mm512_setzero_ps(); EXP_LANES / LANES];
    let mut cy = y.chunks_exact_mut(EXP_LANES);
    let cx = x.chunks_exact(EXP_LANES);
    let tail = cx.remainder();
    for (c, (o, v)) in (&mut cy).zip(cx).enumerate() {
        let ahead = next.wrapping_add(c * EXP_LANES);
        prefetch(ahead);
        prefetch(ahead.wrapping_add(LINE));
        for (h, sum) in sums.iter_mut().enumerate() {
            // SAFETY: `o` and `v` hold EXP_LANES = 2 * LANES floats (chunks_exact), so the 16
            // floats at `h * LANES` are in bounds for the unaligned load and store.
            let e = unsafe {
                let e = exp16(_mm512_loadu_ps(v.as_ptr().add(h * LANES)));
                _mm512_storeu_ps(o.as_mut_ptr().add(h * LANES), e);
                e
            };
            *sum = _mm512_add_ps(*sum, e);
        }
    }
    let mut s = _mm512_reduce_add_ps(_mm512_add_ps(sums[0], sums[1]));
    for (o, &v) in cy.into_remainder().iter_mut().zip(tail) {
        *o = exp_with(MulAdd::Fused, v - max);
        s += *o;
    }
    s
}

/// `dl = p * (dp - sum(dp * p))` per row: the softmax gradient from its output `p`.
pub fn softmax_rows_backward(p: &[f32], dp: &[f32], cols: usize, dl: &mut [f32]) {
    assert!(
        p.len() == dp.len() && p.len() == dl.len(),
        "softmax_rows_backward: lengths"
    );
    if cols == 0 {
        return;
    }
    if is_long(p.len() / cols, cols) {
        streaming(dl.len(), 4, |streaming| {
            for (dl, (p, dp)) in dl.chunks_mut(cols).zip(p.chunks(cols).zip(dp.chunks(cols))) {
                let s = piece_sum(cols, |r| {
                    wide(
                        #[inline(always)]
                        |_| sum_zip(&p[r.clone()], &dp[r], |a, b| a * b),
                    )
                }) as f32;
                dl.par_chunks_mut(PIECE)
                    .zip(p.par_chunks(PIECE).zip(dp.par_chunks(PIECE)))
                    .for_each_streamed(streaming, |stream, (dl, pair)| {
                        wide(
                            #[inline(always)]
                            |_| {
                                write_zip(
                                    stream,
                                    dl,
                                    pair,
                                    #[inline(always)]
                                    |pv, dv| pv * (dv - s),
                                )
                            },
                        )
                    });
            }
        });
        return;
    }
    streaming(dl.len(), 4, |streaming| {
        dl.par_chunks_mut(cols)
            .zip(p.par_chunks(cols).zip(dp.par_chunks(cols)))
            .enumerate()
            .for_each_streamed(streaming, |stream, (i, (dl, (p_row, dp_row)))| {
                let (next_p, next_dp) = (next_row(p, i, cols), next_row(dp, i, cols));
                let (p, dp) = (p_row, dp_row);
                wide(
                    #[inline(always)]
                    |_| {
                        let s = sum_zip(p, dp, |a, b| a * b);
                        write_blocks(
                            stream,
                            dl,
                            #[inline(always)]
                            |at, out| {
                                prefetch(next_p.wrapping_add(at));
                                prefetch(next_dp.wrapping_add(at));
                                let end = at + out.len();
                                for (o, (&pv, &dv)) in
                                    out.iter_mut().zip(p[at..end].iter().zip(&dp[at..end]))
                                {
                                    *o = pv * (dv - s);
                                }
                            },
                        );
                    },
                )
            });
    });
}

/// Per-row statistics of a layer norm: `(mean, rstd)` with a two-pass biased variance.
#[inline(always)]
pub fn mean_rstd(row: &[f32], eps: f32) -> (f32, f32) {
    let n = row.len() as f32;
    let mean = sum(row) / n;
    let var = sum_map(row, |v| (v - mean) * (v - mean)) / n;
    (mean, 1.0 / (var + eps).sqrt())
}

/// LayerNorm of each row: `y = gamma * (x - mean) * rstd + beta`, with the per-row
/// `xhat`, `mean` and `rstd` written when given. `gamma`, `beta` have `cols` elements.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_rows(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
    y: &mut [f32],
    xhat: Option<&mut [f32]>,
    mut mean: Option<&mut [f32]>,
    mut rstd: Option<&mut [f32]>,
) {
    let cols = gamma.len();
    assert!(
        beta.len() == cols && x.len() == y.len(),
        "layernorm_rows: lengths"
    );
    if cols == 0 {
        return;
    }
    let rows = x.len() / cols;
    // One pass per row while it is in cache: statistics, then the normalized output.
    let stats: Vec<(f32, f32)> = streaming(y.len(), 4, |streaming| {
        y.par_chunks_mut(cols)
            .zip(x.par_chunks(cols))
            .enumerate()
            .map_streamed(streaming, |stream, (i, (y, row))| {
                let next = next_row(x, i, cols);
                let x = row;
                wide(
                    #[inline(always)]
                    |madd| {
                        let (m, r) = mean_rstd(x, eps);
                        write_blocks(
                            stream,
                            y,
                            #[inline(always)]
                            |at, out| {
                                prefetch(next.wrapping_add(at));
                                let end = at + out.len();
                                let (x, g, b) = (&x[at..end], &gamma[at..end], &beta[at..end]);
                                for (j, o) in out.iter_mut().enumerate() {
                                    *o = madd.apply(g[j], (x[j] - m) * r, b[j]);
                                }
                            },
                        );
                        (m, r)
                    },
                )
            })
            .collect()
    });
    if let Some(xh) = xhat {
        streaming(xh.len(), 4, |streaming| {
            xh.par_chunks_mut(cols)
                .zip(x.par_chunks(cols))
                .zip(&stats)
                .for_each_streamed(streaming, |stream, ((o, x), &(m, r))| {
                    wide(
                        #[inline(always)]
                        |_| {
                            write_map(
                                stream,
                                o,
                                x,
                                #[inline(always)]
                                |v| (v - m) * r,
                            )
                        },
                    )
                });
        });
    }
    for i in 0..rows {
        if let Some(m) = mean.as_deref_mut() {
            m[i] = stats[i].0;
        }
        if let Some(r) = rstd.as_deref_mut() {
            r[i] = stats[i].1;
        }
    }
}

/// GroupNorm of `x (N, C*HW)` (NCHW samples): each sample holds `groups` contiguous groups of
/// `C / groups` channels (`m = C / groups * HW` elements each), normalized with a two-pass
/// biased variance, then `y = xhat gamma[c] + beta[c]`, passed through SiLU when `silu` (the
/// diffusion resblock's norm + activation in one pass). `gamma`, `beta` hold `C` values.
/// Panics unless the lengths agree.
pub fn group_norm_rows(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    (groups, hw): (usize, usize),
    eps: f32,
    silu: bool,
    y: &mut [f32],
) {
    let cpg = gamma.len() / groups.max(1);
    let m = cpg * hw;
    assert!(
        m > 0 && beta.len() == gamma.len() && cpg * groups == gamma.len() && x.len() == y.len(),
        "group_norm_rows: lengths"
    );
    y.par_chunks_mut(m)
        .zip(x.par_chunks(m))
        .enumerate()
        .for_each(|(row, (y, x))| {
            let c0 = (row % groups) * cpg;
            wide(
                #[inline(always)]
                |madd| {
                    let (mean, r) = mean_rstd(x, eps);
                    for (ch, (y, x)) in y.chunks_mut(hw).zip(x.chunks(hw)).enumerate() {
                        let (g, b) = (gamma[c0 + ch] * r, beta[c0 + ch]);
                        if silu {
                            for (y, &v) in y.iter_mut().zip(x) {
                                *y = silu_with(madd, madd.apply(v - mean, g, b));
                            }
                        } else {
                            for (y, &v) in y.iter_mut().zip(x) {
                                *y = madd.apply(v - mean, g, b);
                            }
                        }
                    }
                },
            )
        });
}

/// [`group_norm_rows`]'s gradient, statistics recomputed from `x`: per group,
/// `dx = rstd/m (m d - sum d - xhat sum(d xhat))` with `d = dy gamma[c]` (overwritten), and
/// per (sample, channel) `part_g = sum dy xhat` and `part_b = sum dy` (`N * C` values each),
/// whose sums over samples are `gamma`'s and `beta`'s gradients. Panics unless the lengths
/// agree.
#[allow(clippy::too_many_arguments)]
pub fn group_norm_rows_backward(
    x: &[f32],
    gamma: &[f32],
    dy: &[f32],
    (groups, hw): (usize, usize),
    eps: f32,
    dx: &mut [f32],
    (part_g, part_b): (&mut [f32], &mut [f32]),
) {
    let cpg = gamma.len() / groups.max(1);
    let m = cpg * hw;
    let n = x.len();
    assert!(
        m > 0
            && cpg * groups == gamma.len()
            && [dy.len(), dx.len()] == [n; 2]
            && [part_g.len(), part_b.len()] == [n / hw; 2],
        "group_norm_rows_backward: lengths"
    );
    let mf = m as f32;
    dx.par_chunks_mut(m)
        .zip(part_g.par_chunks_mut(cpg).zip(part_b.par_chunks_mut(cpg)))
        .zip(x.par_chunks(m).zip(dy.par_chunks(m)))
        .enumerate()
        .for_each(|(row, ((dx, (pg, pb)), (x, dy)))| {
            let c0 = (row % groups) * cpg;
            let gammas = &gamma[c0..c0 + cpg];
            wide(
                #[inline(always)]
                |_| {
                    let (mean, r) = mean_rstd(x, eps);
                    let (mut s1, mut s2) = (0.0f32, 0.0f32);
                    let sums = pg.iter_mut().zip(pb.iter_mut());
                    for ((&gc, (pg, pb)), (x, dy)) in
                        gammas.iter().zip(sums).zip(x.chunks(hw).zip(dy.chunks(hw)))
                    {
                        // Per channel: sum dy and sum dy xhat; the group's sums from them.
                        *pb = sum(dy);
                        *pg = r * sum_zip(
                            x,
                            dy,
                            #[inline(always)]
                            |v, g| g * (v - mean),
                        );
                        s1 += gc * *pb;
                        s2 += gc * *pg;
                    }
                    let k = r / mf;
                    for ((&gc, dx), (x, dy)) in gammas
                        .iter()
                        .zip(dx.chunks_mut(hw))
                        .zip(x.chunks(hw).zip(dy.chunks(hw)))
                    {
                        for (dx, (&v, &g)) in dx.iter_mut().zip(x.iter().zip(dy)) {
                            let xh = (v - mean) * r;
                            *dx = k * (mf * g * gc - s1 - xh * s2);
                        }
                    }
                },
            )
        });
}

/// BatchNorm inference over `x (N, C*HW)`: `y = x a + b` per channel with
/// `a = gamma / sqrt(running_var + eps)` and `b = beta - running_mean a`; the per-channel
/// slices hold `C` values. A large `y` is streamed. Panics unless the lengths agree.
pub fn batch_norm_inference(
    x: &[f32],
    (gamma, beta): (&[f32], &[f32]),
    (running_mean, running_var): (&[f32], &[f32]),
    hw: usize,
    eps: f32,
    y: &mut [f32],
) {
    let c = gamma.len();
    assert!(
        c > 0
            && hw > 0
            && [beta.len(), running_mean.len(), running_var.len()] == [c; 3]
            && x.len() == y.len()
            && x.len().is_multiple_of(c * hw),
        "batch_norm_inference: lengths"
    );
    streaming(y.len(), 4, |streaming| {
        y.par_chunks_mut(hw)
            .zip(x.par_chunks(hw))
            .enumerate()
            .for_each_streamed(streaming, |stream, (i, (y, x))| {
                let ch = i % c;
                let a = gamma[ch] / (running_var[ch] + eps).sqrt();
                let b = beta[ch] - running_mean[ch] * a;
                wide(
                    #[inline(always)]
                    |madd| {
                        write_map(
                            stream,
                            y,
                            x,
                            #[inline(always)]
                            |v| madd.apply(v, a, b),
                        )
                    },
                )
            });
    });
}

/// The per-channel statistics of a BatchNorm training step, `C` values each.
pub struct BatchNormStats<'a> {
    /// Running mean, blended with the batch mean (`(1 - momentum) old + momentum new`).
    pub running_mean: &'a mut [f32],
    /// Running variance, blended with the unbiased batch variance.
    pub running_var: &'a mut [f32],
    /// The batch mean (written).
    pub saved_mean: &'a mut [f32],
    /// `1 / sqrt(var + eps)` of the batch (written).
    pub saved_rstd: &'a mut [f32],
}

/// Sums `f(value, dy value)` over channel `ch`'s `N*HW` values of two `(N, C*HW)` tensors,
/// each sample's run in 32 vector lanes.
fn channel_sum(
    x: &[f32],
    dy: &[f32],
    (c, hw): (usize, usize),
    ch: usize,
    f: impl Fn(f32, f32) -> f32,
) -> f32 {
    wide(
        #[inline(always)]
        |_| {
            let mut total = 0.0f32;
            for (xs, ds) in x.chunks(c * hw).zip(dy.chunks(c * hw)) {
                let run = ch * hw..(ch + 1) * hw;
                total += sum_zip(&xs[run.clone()], &ds[run], &f);
            }
            total
        },
    )
}

/// BatchNorm training forward over `x (N, C*HW)`: per channel, the mean and biased variance
/// of its `M = N*HW` values (two-pass), `y = (x - mean) rstd gamma + beta`, and `stats`
/// (the running variance takes the unbiased `var M / (M - 1)` when `M > 1`). `gamma`,
/// `beta` hold `C` values. Panics unless the lengths agree.
pub fn batch_norm_train(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    (n, hw): (usize, usize),
    (eps, momentum): (f32, f32),
    stats: BatchNormStats<'_>,
    y: &mut [f32],
) {
    let c = gamma.len();
    let m = n * hw;
    assert!(
        m > 0 && c > 0 && x.len() == n * c * hw && y.len() == x.len() && beta.len() == c,
        "batch_norm_train: lengths"
    );
    let mf = m as f32;
    let moments: Vec<(f32, f32)> = (0..c)
        .into_par_iter()
        .map(|ch| {
            let mean = channel_sum(
                x,
                x,
                (c, hw),
                ch,
                #[inline(always)]
                |v, _| v,
            ) / mf;
            let var = channel_sum(
                x,
                x,
                (c, hw),
                ch,
                #[inline(always)]
                |v, _| (v - mean) * (v - mean),
            ) / mf;
            (mean, var)
        })
        .collect();
    for (ch, &(mean, var)) in moments.iter().enumerate() {
        let unbiased = if m > 1 { var * mf / (mf - 1.0) } else { var };
        let blend = |old: f32, new: f32| (1.0 - momentum) * old + momentum * new;
        stats.running_mean[ch] = blend(stats.running_mean[ch], mean);
        stats.running_var[ch] = blend(stats.running_var[ch], unbiased);
        stats.saved_mean[ch] = mean;
        stats.saved_rstd[ch] = 1.0 / (var + eps).sqrt();
    }
    let rstd = &*stats.saved_rstd;
    y.par_chunks_mut(hw)
        .zip(x.par_chunks(hw))
        .enumerate()
        .for_each(|(i, (y, x))| {
            let ch = i % c;
            let (mean, g, b) = (moments[ch].0, gamma[ch] * rstd[ch], beta[ch]);
            wide(
                #[inline(always)]
                |_| {
                    for (y, &v) in y.iter_mut().zip(x) {
                        *y = (v - mean) * g + b;
                    }
                },
            )
        });
}

/// BatchNorm backward over `x (N, C*HW)` from the saved statistics: `dx = rstd gamma (dy -
/// (sum dy + xhat sum(dy xhat)) / M)` (overwritten); `dgamma += sum dy xhat`,
/// `dbeta += sum dy` per channel. Panics unless the lengths agree.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_backward(
    x: &[f32],
    gamma: &[f32],
    (saved_mean, saved_rstd): (&[f32], &[f32]),
    dy: &[f32],
    (n, hw): (usize, usize),
    dx: &mut [f32],
    dgamma: &mut [f32],
    dbeta: &mut [f32],
) {
    let c = gamma.len();
    let m = n * hw;
    assert!(
        m > 0
            && x.len() == n * c * hw
            && [dy.len(), dx.len()] == [x.len(); 2]
            && [
                saved_mean.len(),
                saved_rstd.len(),
                dgamma.len(),
                dbeta.len()
            ] == [c; 4],
        "batch_norm_backward: lengths"
    );
    let sums: Vec<(f32, f32)> = (0..c)
        .into_par_iter()
        .map(|ch| {
            let (mean, r) = (saved_mean[ch], saved_rstd[ch]);
            let s_dy = channel_sum(
                x,
                dy,
                (c, hw),
                ch,
                #[inline(always)]
                |_, d| d,
            );
            let s_dyx = channel_sum(
                x,
                dy,
                (c, hw),
                ch,
                #[inline(always)]
                |v, d| d * (v - mean) * r,
            );
            (s_dy, s_dyx)
        })
        .collect();
    let inv_m = 1.0 / m as f32;
    dx.par_chunks_mut(hw)
        .zip(x.par_chunks(hw).zip(dy.par_chunks(hw)))
        .enumerate()
        .for_each(|(i, (dx, (x, dy)))| {
            let ch = i % c;
            let (mean, r, (s_dy, s_dyx)) = (saved_mean[ch], saved_rstd[ch], sums[ch]);
            let k = r * gamma[ch];
            wide(
                #[inline(always)]
                |_| {
                    for ((o, &v), &d) in dx.iter_mut().zip(x).zip(dy) {
                        let xh = (v - mean) * r;
                        *o = k * (d - (s_dy + xh * s_dyx) * inv_m);
                    }
                },
            )
        });
    for (ch, &(s_dy, s_dyx)) in sums.iter().enumerate() {
        dgamma[ch] += s_dyx;
        dbeta[ch] += s_dy;
    }
}

/// LayerNorm backward per row from the caches: `dx = rstd/n (n dxh - sum dxh - xhat sum(dxh
/// xhat))` with `dxh = dy * gamma` (overwritten); `dgamma += sum_r dy xhat`,
/// `dbeta += sum_r dy`.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_rows_backward(
    dy: &[f32],
    xhat: &[f32],
    gamma: &[f32],
    rstd: &[f32],
    dx: &mut [f32],
    dgamma: &mut [f32],
    dbeta: &mut [f32],
) {
    let cols = gamma.len();
    if cols == 0 {
        return;
    }
    let n = cols as f32;
    // dx row by row, dgamma (dy xhat) and dbeta (dy) summed in the same pass.
    let sums = streaming(dx.len(), 4, |streaming| {
        rows_with_column_sums(
            streaming,
            dx,
            cols,
            2 * cols,
            #[inline(always)]
            |stream, i, dx, acc| {
                let (dy, xh, r) = (row_of(dy, cols, i), row_of(xhat, cols, i), rstd[i]);
                let s1 = sum_zip(dy, gamma, |d, g| d * g);
                let s2 = sum_zip3(dy, gamma, xh, |d, g, h| d * g * h);
                write_blocks(
                    stream,
                    dx,
                    #[inline(always)]
                    |at, out| {
                        let end = at + out.len();
                        let (dy, g, xh) = (&dy[at..end], &gamma[at..end], &xh[at..end]);
                        for (j, o) in out.iter_mut().enumerate() {
                            *o = r / n * (n * dy[j] * g[j] - s1 - xh[j] * s2);
                        }
                    },
                );
                let (dg, db) = acc.split_at_mut(cols);
                for j in 0..cols {
                    dg[j] += dy[j] * xh[j];
                    db[j] += dy[j];
                }
            },
        )
    });
    for (o, v) in dgamma.iter_mut().zip(&sums[..cols]) {
        *o += v;
    }
    for (o, v) in dbeta.iter_mut().zip(&sums[cols..]) {
        *o += v;
    }
}

/// Row `r` of the `cols`-wide rows in `t`.
#[inline(always)]
fn row_of(t: &[f32], cols: usize, r: usize) -> &[f32] {
    &t[r * cols..(r + 1) * cols]
}

/// `1 / sqrt(mean(x^2) + eps)` of a row.
#[inline(always)]
pub fn rrms(row: &[f32], eps: f32) -> f32 {
    let ss = sum_map(row, |v| v * v);
    1.0 / (ss / row.len() as f32 + eps).sqrt()
}

/// RMSNorm of each row: `y = x * gamma * rrms(x)`.
pub fn rms_norm_rows(x: &[f32], gamma: &[f32], eps: f32, y: &mut [f32]) {
    let cols = gamma.len();
    if cols == 0 {
        return;
    }
    streaming(y.len(), 4, |streaming| {
        y.par_chunks_mut(cols)
            .zip(x.par_chunks(cols))
            .enumerate()
            .for_each_streamed(streaming, |stream, (i, (y, row))| {
                let next = next_row(x, i, cols);
                let x = row;
                wide(
                    #[inline(always)]
                    |_| {
                        let r = rrms(x, eps);
                        write_blocks(
                            stream,
                            y,
                            #[inline(always)]
                            |at, out| {
                                prefetch(next.wrapping_add(at));
                                let end = at + out.len();
                                for (o, (&v, &g)) in
                                    out.iter_mut().zip(x[at..end].iter().zip(&gamma[at..end]))
                                {
                                    *o = v * g * r;
                                }
                            },
                        );
                    },
                )
            });
    });
}

/// One row of the RMSNorm gradient: `dx = r (gamma dy - x c)`, `c = r^2 / D * sum(x dy
/// gamma)`, written by streaming stores; returns the row's `r`.
#[inline(always)]
fn rms_dx_row(
    stream: Stream,
    (x, dy, gamma): (&[f32], &[f32], &[f32]),
    eps: f32,
    dx: &mut [f32],
) -> f32 {
    let r = rrms(x, eps);
    let s = sum_zip3(x, dy, gamma, |a, b, g| a * b * g);
    let c = r * r / gamma.len() as f32 * s;
    write_blocks(
        stream,
        dx,
        #[inline(always)]
        |at, out| {
            let end = at + out.len();
            let (x, dy, g) = (&x[at..end], &dy[at..end], &gamma[at..end]);
            for (j, o) in out.iter_mut().enumerate() {
                *o = r * (g[j] * dy[j] - x[j] * c);
            }
        },
    );
    r
}

/// RMSNorm backward (statistics recomputed from `x`): `dx = r (gamma dy - x c)`,
/// `c = r^2 / D * sum(x dy gamma)`, overwritten; `dgamma += sum_r dy x r` when given (the
/// unit-scale norms built on this one, PixelNorm and L2, have no parameter to train).
pub fn rms_norm_rows_backward(
    x: &[f32],
    gamma: &[f32],
    dy: &[f32],
    eps: f32,
    dx: &mut [f32],
    dgamma: Option<&mut [f32]>,
) {
    let cols = gamma.len();
    if cols == 0 {
        return;
    }
    let Some(dgamma) = dgamma else {
        streaming(dx.len(), 4, |streaming| {
            dx.par_chunks_mut(cols)
                .enumerate()
                .for_each_streamed(streaming, |stream, (i, dx)| {
                    wide(
                        #[inline(always)]
                        |_| {
                            let rows = (row_of(x, cols, i), row_of(dy, cols, i), gamma);
                            rms_dx_row(stream, rows, eps, dx);
                        },
                    )
                });
        });
        return;
    };
    // dx row by row, dgamma (dy x rrms) summed in the same pass.
    let sums = streaming(dx.len(), 4, |streaming| {
        rows_with_column_sums(
            streaming,
            dx,
            cols,
            cols,
            #[inline(always)]
            |stream, i, dx, acc| {
                let (x, dy) = (row_of(x, cols, i), row_of(dy, cols, i));
                let r = rms_dx_row(stream, (x, dy, gamma), eps, dx);
                for j in 0..cols {
                    acc[j] += dy[j] * x[j] * r;
                }
            },
        )
    });
    for (o, v) in dgamma.iter_mut().zip(&sums) {
        *o += v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_hand_values_and_masks() {
        let x = [0.0, (2.0f32).ln(), 5.0, 1.0];
        let mut y = [0.0; 4];
        softmax_rows(&x, 2, None, &mut y);
        assert!((y[0] - 1.0 / 3.0).abs() < 1e-6 && (y[1] - 2.0 / 3.0).abs() < 1e-6);
        softmax_rows(&x, 2, Some(&[1.0, 0.2]), &mut y);
        assert_eq!(y, [1.0, 0.0, 1.0, 0.0]);
        softmax_rows(&x, 2, Some(&[0.0, 0.4]), &mut y);
        assert_eq!(y, [0.0; 4]);
    }

    #[test]
    fn rows_split_across_threads_match_f64() {
        // In a pool of 4 threads, so that the long-row path runs whatever the machine has.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap();
        pool.install(check_rows_split_across_threads);
    }

    /// One row of 3 pieces plus a tail on the long-row path: forward with and without a
    /// mask, and backward, against float64.
    fn check_rows_split_across_threads() {
        let cols = 3 * PIECE + 123;
        assert!(is_long(1, cols));
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 7919) % 2003) as f32 * 0.01 - 10.0)
            .collect();
        let mask: Vec<f32> = (0..cols)
            .map(|i| if i % 7 == 3 { 0.0 } else { 1.0 })
            .collect();
        for m in [None, Some(&mask[..])] {
            let mut y = vec![f32::NAN; cols];
            softmax_rows(&x, cols, m, &mut y);
            let keep = |i: usize| m.is_none_or(|m| m[i] >= 0.5);
            let max = (0..cols)
                .filter(|&i| keep(i))
                .map(|i| x[i] as f64)
                .fold(f64::MIN, f64::max);
            let total: f64 = (0..cols)
                .filter(|&i| keep(i))
                .map(|i| (x[i] as f64 - max).exp())
                .sum();
            for i in 0..cols {
                let want = if keep(i) {
                    (x[i] as f64 - max).exp() / total
                } else {
                    0.0
                };
                assert!(
                    (y[i] as f64 - want).abs() <= 5e-6 * want + 1e-12,
                    "{i}: {} vs {want}",
                    y[i]
                );
            }
            let dp: Vec<f32> = (0..cols).map(|i| (i % 11) as f32 - 5.0).collect();
            let mut dl = vec![f32::NAN; cols];
            softmax_rows_backward(&y, &dp, cols, &mut dl);
            let s: f64 = (0..cols).map(|i| y[i] as f64 * dp[i] as f64).sum();
            for i in 0..cols {
                let want = y[i] as f64 * (dp[i] as f64 - s);
                assert!(
                    (dl[i] as f64 - want).abs() <= 1e-5 * want.abs() + 1e-9,
                    "d{i}"
                );
            }
        }
    }

    #[test]
    fn softmax_long_rows_match_f64() {
        // 3 rows of 100: the 32-lane chunks, their tail and the next-row prefetch all run.
        let (rows, cols) = (3, 100);
        let x: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37) % 101) as f32 * 0.21 - 9.0)
            .collect();
        let mut y = vec![0.0; x.len()];
        softmax_rows(&x, cols, None, &mut y);
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let m = row.iter().fold(f64::MIN, |a, &v| a.max(v as f64));
            let z: f64 = row.iter().map(|&v| (v as f64 - m).exp()).sum();
            for j in 0..cols {
                let want = (row[j] as f64 - m).exp() / z;
                let got = y[r * cols + j] as f64;
                assert!(
                    (got - want).abs() <= 1e-6 * want.max(1e-3),
                    "({r}, {j}): {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn the_avx512_exponentials_match_the_portable_ones() {
        #[cfg(target_arch = "x86_64")]
        {
            if crate::simd::level() != crate::simd::Level::Avx512 {
                eprintln!("SKIPPED: this CPU has no AVX-512; only the portable path exists here");
                return;
            }
            let mut row: Vec<f32> = (0..4133)
                .map(|i| ((i * 37) % 200) as f32 * 0.9 - 120.0)
                .collect();
            row[5] = f32::NEG_INFINITY;
            row[40] = -1e30;
            for len in [0, 1, 31, 32, 33, 100, 4133] {
                let x = &row[..len];
                let max = max_with_floor(x, MASKED_MAX);
                let (mut fast, mut plain) = (vec![0.0f32; len], vec![0.0f32; len]);
                // SAFETY: `level` detected AVX-512 above.
                let s_fast = unsafe { exp_shifted_sum_avx512(x, max, &mut fast, std::ptr::null()) };
                let s_plain = crate::simd::wide(|m| {
                    exp_shifted_sum_portable(m, x, max, &mut plain, std::ptr::null())
                });
                assert!(
                    (s_fast - s_plain).abs() <= 1e-6 * s_plain.abs(),
                    "len {len}"
                );
                for (j, (&a, &b)) in fast.iter().zip(&plain).enumerate() {
                    let want = ((x[j] - max) as f64).exp();
                    // Both within the polynomial's error of e^x; below the normal range the
                    // portable form flushes to 0 and this one keeps subnormals.
                    assert!(
                        (a as f64 - want).abs() <= 4e-7 * want + 1.2e-38,
                        "len {len} at {j}: {a}"
                    );
                    assert!(
                        (a - b).abs() <= 1e-6 * b + 1.2e-38,
                        "len {len} at {j}: {a} vs {b}"
                    );
                }
            }
            let nan = [1.0f32, f32::NAN, 2.0];
            let mut out = [0.0f32; 3];
            // SAFETY: as above.
            let s = unsafe { exp_shifted_sum_avx512(&nan, 2.0, &mut out, std::ptr::null()) };
            assert!(s.is_nan() && out[1].is_nan(), "NaN must propagate");
            let wide_nan: Vec<f32> = (0..64)
                .map(|i| if i == 17 { f32::NAN } else { 0.5 })
                .collect();
            let mut out = vec![0.0f32; 64];
            // SAFETY: as above.
            let s = unsafe { exp_shifted_sum_avx512(&wide_nan, 0.5, &mut out, std::ptr::null()) };
            assert!(
                s.is_nan() && out[17].is_nan(),
                "NaN must propagate in the vector body"
            );
        }
    }

    #[test]
    fn layernorm_is_stable_far_from_zero() {
        // Rows near 65504 with small steps: E[x^2] - E[x]^2 would cancel to garbage.
        for &offset in &[0.0f32, 395.25, 65504.0] {
            let row: Vec<f32> = (1..=8).map(|j| offset + j as f32 * 0.1).collect();
            let (m, r) = mean_rstd(&row, 1e-5);
            let md = row.iter().map(|&v| v as f64).sum::<f64>() / 8.0;
            let vd = row.iter().map(|&v| (v as f64 - md).powi(2)).sum::<f64>() / 8.0;
            let rd = 1.0 / (vd + 1e-5).sqrt();
            assert!((m as f64 - md).abs() < 1e-2, "{offset}");
            assert!(((r as f64 - rd) / rd).abs() < 0.05, "{offset}: {r} vs {rd}");
        }
    }

    #[test]
    fn backward_passes_match_finite_differences() {
        let (rows, cols) = (2, 5);
        let x: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7) % 11) as f32 * 0.3 - 1.4)
            .collect();
        let gamma: Vec<f32> = (0..cols).map(|j| 0.5 + j as f32 * 0.2).collect();
        let beta = vec![0.1; cols];
        let dy: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 3) % 7) as f32 * 0.25 - 0.7)
            .collect();
        let loss = |x: &[f32], rms: bool| -> f64 {
            let mut y = vec![0.0; x.len()];
            if rms {
                rms_norm_rows(x, &gamma, 1e-5, &mut y);
            } else {
                layernorm_rows(x, &gamma, &beta, 1e-5, &mut y, None, None, None);
            }
            y.iter().zip(&dy).map(|(a, b)| (a * b) as f64).sum()
        };
        for rms in [false, true] {
            let mut dx = vec![0.0; x.len()];
            if rms {
                let mut dg = vec![0.0; cols];
                rms_norm_rows_backward(&x, &gamma, &dy, 1e-5, &mut dx, Some(&mut dg));
                // Without a parameter gradient, dx is the same to the bit.
                let mut dx_only = vec![0.0; x.len()];
                rms_norm_rows_backward(&x, &gamma, &dy, 1e-5, &mut dx_only, None);
                assert_eq!(dx, dx_only);
            } else {
                let (mut xh, mut m, mut r) = (vec![0.0; x.len()], vec![0.0; rows], vec![0.0; rows]);
                let mut y = vec![0.0; x.len()];
                layernorm_rows(
                    &x,
                    &gamma,
                    &beta,
                    1e-5,
                    &mut y,
                    Some(&mut xh),
                    Some(&mut m),
                    Some(&mut r),
                );
                layernorm_rows_backward(
                    &dy,
                    &xh,
                    &gamma,
                    &r,
                    &mut dx,
                    &mut vec![0.0; cols],
                    &mut vec![0.0; cols],
                );
            }
            for i in 0..x.len() {
                let (mut xp, mut xm) = (x.clone(), x.clone());
                xp[i] += 1e-2;
                xm[i] -= 1e-2;
                let fd = (loss(&xp, rms) - loss(&xm, rms)) / 2e-2;
                assert!(
                    (dx[i] as f64 - fd).abs() < 2e-2,
                    "rms={rms} i={i}: {} vs {fd}",
                    dx[i]
                );
            }
        }
    }
}
