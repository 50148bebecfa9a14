//! Fused losses over row-major FP32 matrices: masked softmax cross-entropy over column
//! segments ("heads"), binary cross-entropy with logits, and the squared error. Losses are
//! sums (no mean); gradients are unscaled and overwritten. An entry is valid when its mask
//! is at least 0.5.

use rayon::prelude::*;

use crate::elementwise::{atanh_series, exp_with, log};
use crate::norm::softmax_exps;
use crate::reduction::{piece_sum, sum, sum_zip, sum_zip3};
use crate::simd::{wide, MulAdd};
use crate::stream::{streaming, write_blocks, write_map, Stream, StreamedIter, Streaming};

/// The smallest probability a log is taken of.
const P_FLOOR: f32 = 1e-12;

/// `sum (a[i] - b[i])^2`: FP32 lanes within [`PIECE`](crate::reduction::PIECE)s summed in parallel, the pieces added
/// in order in f64 ([`piece_sum`]), so the result is the same for a given length whatever
/// the thread count. Panics if the lengths differ.
pub fn squared_error_sum(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "squared_error_sum: lengths");
    piece_sum(a.len(), |r| {
        wide(
            #[inline(always)]
            |_| {
                sum_zip(
                    &a[r.clone()],
                    &b[r.clone()],
                    #[inline(always)]
                    |x, y| (x - y) * (x - y),
                )
            },
        )
    })
}

/// One segment: `probs` = masked softmax of `logits`, `dlogits = probs - target` on valid
/// entries (0 on masked ones), returns `sum_{valid, t > 0} -t log(max(p, 1e-12))`.
pub fn xent_segment(
    logits: &[f32],
    target: &[f32],
    mask: Option<&[f32]>,
    probs: &mut [f32],
    dlogits: &mut [f32],
) -> f32 {
    let n = logits.len();
    assert!(
        target.len() == n && probs.len() == n && dlogits.len() == n,
        "xent_segment: lengths"
    );
    xent_segment_in(
        logits,
        target,
        mask,
        (probs, dlogits),
        &mut vec![0.0; n],
        Stream::PLAIN,
    )
}

/// [`xent_segment`] with `scratch` (the segment's length) for the softmax's exponentials,
/// writing `probs` and `dlogits` (by streaming stores when `stream` is on) and the loss in
/// three passes over the row in cache.
fn xent_segment_in(
    logits: &[f32],
    target: &[f32],
    mask: Option<&[f32]>,
    (probs, dlogits): (&mut [f32], &mut [f32]),
    scratch: &mut [f32],
    stream: Stream,
) -> f32 {
    wide(
        #[inline(always)]
        |m| {
            let inv = softmax_exps(m, logits, mask, scratch, std::ptr::null());
            let e = &*scratch;
            write_map(
                stream,
                probs,
                e,
                #[inline(always)]
                |v| v * inv,
            );
            write_blocks(
                stream,
                dlogits,
                #[inline(always)]
                |at, out| {
                    let end = at + out.len();
                    let (e, t) = (&e[at..end], &target[at..end]);
                    match mask {
                        None => {
                            for (o, (&v, &t)) in out.iter_mut().zip(e.iter().zip(t)) {
                                *o = v * inv - t;
                            }
                        }
                        Some(mk) => {
                            let k = &mk[at..end];
                            for (j, o) in out.iter_mut().enumerate() {
                                *o = if k[j] >= 0.5 { e[j] * inv - t[j] } else { 0.0 };
                            }
                        }
                    }
                },
            );
            // The valid entries with t > 0 add -t ln(max(p, 1e-12)).
            let term = |t: f32, v: f32| {
                if t > 0.0 {
                    -t * log((v * inv).max(P_FLOOR))
                } else {
                    0.0
                }
            };
            match mask {
                None => sum_zip(target, e, term),
                Some(mk) => sum_zip3(
                    target,
                    e,
                    mk,
                    |t, v, k| {
                        if k >= 0.5 {
                            term(t, v)
                        } else {
                            0.0
                        }
                    },
                ),
            }
        },
    )
}

/// [`xent_batched`] one head at a time, so that the losses come out per row and head:
/// `loss[row * heads + h]` for the `heads = offsets.len() - 1` heads of `offsets`.
#[allow(clippy::too_many_arguments)]
pub fn xent_heads(
    logits: &[f32],
    target: &[f32],
    mask: Option<&[f32]>,
    (rows, cols): (usize, usize),
    offsets: &[usize],
    probs: &mut [f32],
    dlogits: &mut [f32],
    loss: &mut [f32],
) {
    let heads = offsets.len().saturating_sub(1);
    let mut per_head = vec![0.0f32; rows * heads];
    for h in 0..heads {
        let mut one = vec![0.0f32; rows];
        xent_batched(
            logits,
            target,
            mask,
            cols,
            &offsets[h..h + 2],
            probs,
            dlogits,
            &mut one,
        );
        for (r, v) in one.into_iter().enumerate() {
            per_head[r * heads + h] = v;
        }
    }
    loss.copy_from_slice(&per_head);
}

/// Per row of `(rows, cols)`, [`xent_segment`] on each head's columns
/// `[offsets[h], offsets[h + 1])`; `loss[row] = sum over heads`. Columns outside every head
/// are left untouched. `offsets` must be non-decreasing and end within `cols`.
#[allow(clippy::too_many_arguments)]
pub fn xent_batched(
    logits: &[f32],
    target: &[f32],
    mask: Option<&[f32]>,
    cols: usize,
    offsets: &[usize],
    probs: &mut [f32],
    dlogits: &mut [f32],
    loss: &mut [f32],
) {
    if cols == 0 {
        loss.fill(0.0);
        return;
    }
    streaming(probs.len(), 4, |streaming| {
        loss_rows(
            streaming,
            cols,
            (probs, dlogits, loss),
            |stream, r, p, d, scratch| {
                let row = r * cols..(r + 1) * cols;
                let (lg, tg) = (&logits[row.clone()], &target[row.clone()]);
                let mk = mask.map(|m| &m[row]);
                offsets
                    .windows(2)
                    .map(|w| {
                        let seg = w[0]..w[1];
                        xent_segment_in(
                            &lg[seg.clone()],
                            &tg[seg.clone()],
                            mk.map(|m| &m[seg.clone()]),
                            (&mut p[seg.clone()], &mut d[seg.clone()]),
                            &mut scratch[seg],
                            stream,
                        )
                    })
                    .sum()
            },
        )
    });
}

/// Runs `row(stream, r, probs_row, dlogits_row, scratch)` for each `cols`-wide row in parallel
/// and stores what it returns as `loss[r]`; `scratch` is a per-job buffer of `cols` floats.
fn loss_rows(
    streaming: Streaming<'_>,
    cols: usize,
    (probs, dlogits, loss): (&mut [f32], &mut [f32], &mut [f32]),
    row: impl Fn(Stream<'_>, usize, &mut [f32], &mut [f32], &mut [f32]) -> f32 + Sync,
) {
    probs
        .par_chunks_mut(cols)
        .zip(dlogits.par_chunks_mut(cols))
        .zip(loss.par_iter_mut())
        .enumerate()
        .for_each_streamed_init(
            streaming,
            || vec![0.0f32; cols],
            |stream, scratch, (r, ((p, d), l))| *l = row(stream, r, p, d, scratch),
        );
}

/// `ln(1 + e)` for `e` in `[0, 1]` in plain arithmetic that vectorizes, accurate in relative
/// terms down to the smallest `e` (within about 2 ulp): `1 + e = 2^k f` with `f` near 1,
/// `ln f = 2 atanh(s)`, `s = (f - 1) / (f + 1)` formed from `e` itself so no bits of a small
/// `e` are lost, and atanh as its odd series to `s^9` (`|s| <= 0.172`). NaN stays NaN.
#[inline(always)]
pub fn log1p_unit(e: f32) -> f32 {
    const LN_2: f32 = std::f32::consts::LN_2;
    // Up to sqrt(2) - 1 take f = 1 + e; above, f = (1 + e) / 2 and add ln 2.
    let high = e > std::f32::consts::SQRT_2 - 1.0;
    let s = if high {
        (e - 1.0) / (e + 3.0)
    } else {
        e / (e + 2.0)
    };
    2.0 * atanh_series(MulAdd::Split, s) + if high { LN_2 } else { 0.0 }
}

/// One BCE entry with positive weight `w`: `(sigmoid z, its dlogit, its loss term)`, all
/// from the one exponential `e^-|z|`.
#[inline(always)]
fn bce_entry(m: MulAdd, w: f32, z: f32, y: f32) -> (f32, f32, f32) {
    let e = exp_with(m, -z.abs());
    let inv = 1.0 / (1.0 + e);
    let s = if z >= 0.0 { inv } else { e * inv };
    let l1p = log1p_unit(e);
    let term = w * y * ((-z).max(0.0) + l1p) + (1.0 - y) * (z.max(0.0) + l1p);
    (s, s * (w * y + 1.0 - y) - w * y, term)
}

/// Binary cross-entropy with logits per row of `(rows, cols)`, positive weight `w`:
/// `probs = sigmoid(z)`, `dlogits = s (w y + 1 - y) - w y`, `loss[row] = sum (w y
/// softplus(-z) + (1 - y) softplus(z))`; masked entries give 0 and add nothing. One
/// exponential `e^-|z|` per entry gives the sigmoid and both softplus terms.
#[allow(clippy::too_many_arguments)]
pub fn bce_with_logits(
    logits: &[f32],
    target: &[f32],
    mask: Option<&[f32]>,
    cols: usize,
    pos_weight: f32,
    probs: &mut [f32],
    dlogits: &mut [f32],
    loss: &mut [f32],
) {
    if cols == 0 {
        loss.fill(0.0);
        return;
    }
    let w = pos_weight;
    loss_rows(
        Streaming::PLAIN,
        cols,
        (probs, dlogits, loss),
        |_, r, p, d, terms| {
            let row = r * cols..(r + 1) * cols;
            let (z, y) = (&logits[row.clone()], &target[row.clone()]);
            wide(
                #[inline(always)]
                |m| {
                    let outs = p.iter_mut().zip(d.iter_mut()).zip(terms.iter_mut());
                    match mask {
                        None => {
                            for (((p, d), t), (&z, &y)) in outs.zip(z.iter().zip(y)) {
                                (*p, *d, *t) = bce_entry(m, w, z, y);
                            }
                        }
                        Some(mk) => {
                            let ins = z.iter().zip(y).zip(&mk[row]);
                            for (((p, d), t), ((&z, &y), &k)) in outs.zip(ins) {
                                let (ps, ds, ts) = bce_entry(m, w, z, y);
                                let on = k >= 0.5;
                                *p = if on { ps } else { 0.0 };
                                *d = if on { ds } else { 0.0 };
                                *t = if on { ts } else { 0.0 };
                            }
                        }
                    }
                    sum(terms)
                },
            )
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squared_error_sum_matches_float64_across_parts() {
        use crate::reduction::PIECE;
        // Three parts and a ragged tail; values whose squares differ by orders of magnitude.
        let n = 2 * PIECE + 12_345;
        let a: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 2003) as f32 * 0.01 - 10.0)
            .collect();
        let b: Vec<f32> = (0..n)
            .map(|i| ((i * 104_729) % 997) as f32 * 1e-3)
            .collect();
        let want: f64 = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
            .sum();
        let got = squared_error_sum(&a, &b);
        assert!((got - want).abs() <= 1e-5 * want, "got {got}, want {want}");
        assert_eq!(squared_error_sum(&[], &[]), 0.0);
        assert_eq!(squared_error_sum(&[3.0], &[1.0]), 4.0);
    }

    #[test]
    fn cross_entropy_hand_values() {
        let logits = [0.0, (3.0f32).ln()];
        let target = [0.0, 1.0];
        let (mut p, mut d) = ([0.0; 2], [0.0; 2]);
        let loss = xent_segment(&logits, &target, None, &mut p, &mut d);
        assert!((p[1] - 0.75).abs() < 1e-6);
        assert!((loss - (-(0.75f32).ln())).abs() < 1e-6);
        assert!((d[0] - 0.25).abs() < 1e-6 && (d[1] + 0.25).abs() < 1e-6);
        // Masked: the entry gets nothing and a fully masked segment costs nothing.
        let loss = xent_segment(&logits, &target, Some(&[1.0, 0.0]), &mut p, &mut d);
        assert_eq!((p, d, loss), ([1.0, 0.0], [1.0, 0.0], 0.0));
    }

    #[test]
    fn bce_matches_its_definition() {
        let (z, y, w) = (0.7f32, 1.0f32, 2.0f32);
        let (mut p, mut d, mut l) = ([0.0], [0.0], [0.0]);
        bce_with_logits(&[z], &[y], None, 1, w, &mut p, &mut d, &mut l);
        let s = 1.0 / (1.0 + (-z as f64).exp());
        let want = -(w as f64) * s.ln();
        assert!((l[0] as f64 - want).abs() < 1e-6);
        assert!((d[0] as f64 - (s * w as f64 - w as f64)).abs() < 1e-6);
        // The softplus terms and the sigmoid stay finite and exact at extreme logits:
        // softplus(-100) >= 0 (y = 1, z = 100), softplus(100) = 100 (y = 0, z = 100),
        // sigmoid(-100) finite.
        assert!(bce_entry(MulAdd::Split, 1.0, 100.0, 1.0).2 >= 0.0);
        assert_eq!(bce_entry(MulAdd::Split, 1.0, 100.0, 0.0).2, 100.0);
        assert!(bce_entry(MulAdd::Split, 1.0, -100.0, 0.0).0.is_finite());
    }

    #[test]
    fn log1p_unit_is_accurate_in_relative_terms() {
        let mut es: Vec<f32> = (0..=100_000).map(|i| i as f32 * 1e-5).collect();
        es.extend([1e-30f32, 1e-12, 3e-8, 0.414_213_5, 0.414_213_6, 1.0]);
        for e in es {
            let want = (e as f64).ln_1p();
            let got = log1p_unit(e) as f64;
            let err = if want == 0.0 {
                got.abs()
            } else {
                ((got - want) / want).abs()
            };
            assert!(err < 2.5e-7, "log1p({e}) = {got}, want {want}");
        }
        assert!(log1p_unit(f32::NAN).is_nan());
    }

    #[test]
    fn bce_rows_match_float64_with_masks_and_extreme_logits() {
        let z = [-90.0f32, -8.0, -0.3, 0.0, 0.2, 5.0, 40.0, 1.5];
        let y = [1.0f32, 0.0, 0.3, 1.0, 0.0, 1.0, 0.0, 0.9];
        let mask = [1.0f32, 1.0, 1.0, 1.0, 0.2, 1.0, 1.0, 1.0];
        let w = 1.7f32;
        let (mut p, mut d, mut l) = ([0.0; 8], [0.0; 8], [0.0; 2]);
        bce_with_logits(&z, &y, Some(&mask), 4, w, &mut p, &mut d, &mut l);
        let mut want = [0.0f64; 2];
        for j in 0..8 {
            let (zd, yd, wd) = (z[j] as f64, y[j] as f64, w as f64);
            if mask[j] < 0.5 {
                assert_eq!((p[j], d[j]), (0.0, 0.0));
                continue;
            }
            let s = 1.0 / (1.0 + (-zd).exp());
            let sp = |v: f64| v.max(0.0) + (-v.abs()).exp().ln_1p();
            want[j / 4] += wd * yd * sp(-zd) + (1.0 - yd) * sp(zd);
            assert!((p[j] as f64 - s).abs() <= 1e-6 * s.max(1e-30), "p[{j}]");
            let dw = s * (wd * yd + 1.0 - yd) - wd * yd;
            assert!((d[j] as f64 - dw).abs() < 1e-6, "d[{j}]");
        }
        for r in 0..2 {
            assert!(
                (l[r] as f64 - want[r]).abs() < 1e-5 * want[r].abs().max(1.0),
                "row {r}"
            );
        }
    }
}
