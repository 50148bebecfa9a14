//! Diffusion element maps: the per-column affine of token rows (AdaLN `modulate`, the
//! residual gate `broadcast_mul`), the sampler steps as one linear combination of
//! same-shaped tensors, and the sinusoidal timestep embedding.

use rayon::prelude::*;

use crate::stream::{streaming, write_blocks, StreamedIter};

/// Elements per parallel task of the sampler steps (as the element-wise maps).
const CHUNK: usize = 1 << 15;

/// `y[l, d] = x[l, d] * a[d] + b[d]` over rows of `D = a.len()`, with `a = 1 + scale` when
/// `one_plus` (AdaLN `modulate`) and `a = scale` otherwise (`broadcast_mul`), `b = shift` or
/// 0; FP32, one rounding of `1 + scale` first as the definition reads. A large `y` is
/// written with streaming stores.
///
/// # Panics
/// If `shift` (when given) or `x` and `y` do not match `scale`'s width.
pub fn row_affine(x: &[f32], scale: &[f32], shift: Option<&[f32]>, one_plus: bool, y: &mut [f32]) {
    let d = scale.len();
    assert!(
        x.len() == y.len()
            && shift.is_none_or(|s| s.len() == d)
            && (d == 0 || x.len().is_multiple_of(d)),
        "row_affine: lengths"
    );
    if d == 0 || x.is_empty() {
        return;
    }
    let a: Vec<f32> = scale
        .iter()
        .map(|&s| if one_plus { 1.0 + s } else { s })
        .collect();
    let b: Vec<f32> = shift.map_or_else(|| vec![0.0; d], <[f32]>::to_vec);
    // Rows batched into tasks of about `CHUNK` elements.
    let rows_per_task = (CHUNK / d).max(1);
    streaming(y.len(), 4, |streaming| {
        y.par_chunks_mut(rows_per_task * d)
            .zip(x.par_chunks(rows_per_task * d))
            .for_each_streamed(streaming, |stream, (y, x)| {
                crate::simd::wide(
                    #[inline(always)]
                    |_| {
                        for (y, x) in y.chunks_mut(d).zip(x.chunks(d)) {
                            write_blocks(
                                stream,
                                y,
                                #[inline(always)]
                                |at, out| {
                                    let end = at + out.len();
                                    let (x, a, b) = (&x[at..end], &a[at..end], &b[at..end]);
                                    for (((o, &v), &a), &b) in out.iter_mut().zip(x).zip(a).zip(b) {
                                        *o = v * a + b;
                                    }
                                },
                            );
                        }
                    },
                )
            });
    });
}

/// The coefficients of one sampler step: `y = cx x + ce e (+ cp p)` and, when `z_ce` is
/// given, the second output `z = x + z_ce e` (DPM++ 2M's `x0`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepCoefficients {
    /// Weight of the current sample `x`.
    pub cx: f32,
    /// Weight of the model output `e`.
    pub ce: f32,
    /// Weight of the third input `p` (DPM++ 2M's previous `x0`); ignored without one.
    pub cp: f32,
    /// `z = x + z_ce e` is written when this is `Some`.
    pub z_ce: Option<f32>,
}

/// One sampler step over same-length slices: `y = cx x + ce e (+ cp p)` and, with
/// `c.z_ce`, `z = x + z_ce e`, FP32 (each output written once; large ones streamed).
///
/// # Panics
/// If the lengths differ, or `z` is given without `c.z_ce` (or the reverse).
pub fn sampler_step(
    x: &[f32],
    e: &[f32],
    p: Option<&[f32]>,
    c: StepCoefficients,
    y: &mut [f32],
    z: Option<&mut [f32]>,
) {
    let n = x.len();
    assert!(
        e.len() == n
            && y.len() == n
            && p.is_none_or(|p| p.len() == n)
            && z.as_ref().is_none_or(|z| z.len() == n)
            && z.is_some() == c.z_ce.is_some(),
        "sampler_step: lengths"
    );
    let outputs = if z.is_some() { 2 } else { 1 };
    let mut z_chunks: Vec<Option<&mut [f32]>> = match z {
        Some(z) => z.chunks_mut(CHUNK).map(Some).collect(),
        None => (0..n.div_ceil(CHUNK)).map(|_| None).collect(),
    };
    streaming(n.saturating_mul(outputs), 4, |streaming| {
        y.par_chunks_mut(CHUNK)
            .zip(x.par_chunks(CHUNK))
            .zip(e.par_chunks(CHUNK))
            .zip(z_chunks.par_iter_mut())
            .enumerate()
            .for_each_streamed(streaming, |stream, (k, (((y, x), e), z))| {
                let p = p.map(|p| &p[k * CHUNK..][..x.len()]);
                crate::simd::wide(
                    #[inline(always)]
                    |_| {
                        write_blocks(
                            stream,
                            y,
                            #[inline(always)]
                            |at, out| {
                                let end = at + out.len();
                                let (x, e) = (&x[at..end], &e[at..end]);
                                match p {
                                    Some(p) => {
                                        let p = &p[at..end];
                                        for (((o, &x), &e), &p) in
                                            out.iter_mut().zip(x).zip(e).zip(p)
                                        {
                                            *o = c.cx * x + c.ce * e + c.cp * p;
                                        }
                                    }
                                    None => {
                                        for ((o, &x), &e) in out.iter_mut().zip(x).zip(e) {
                                            *o = c.cx * x + c.ce * e;
                                        }
                                    }
                                }
                            },
                        );
                        if let (Some(z), Some(ze)) = (z.as_deref_mut(), c.z_ce) {
                            write_blocks(
                                stream,
                                z,
                                #[inline(always)]
                                |at, out| {
                                    let end = at + out.len();
                                    for ((o, &x), &e) in
                                        out.iter_mut().zip(&x[at..end]).zip(&e[at..end])
                                    {
                                        *o = x + ze * e;
                                    }
                                },
                            );
                        }
                    },
                )
            });
    });
}

/// The frequencies of a sinusoidal embedding of `half` pairs: `exp(-ln(max_period) j /
/// half)` for `j < half`, computed in float64 and rounded once.
pub fn timestep_frequencies(half: usize, max_period: f32) -> Vec<f32> {
    let scale = -f64::from(max_period).ln() / half.max(1) as f64;
    (0..half).map(|j| (scale * j as f64).exp() as f32).collect()
}

/// Sinusoidal timestep embedding (diffusers, `flip_sin_to_cos = true`, `shift = 0`): row `i`
/// of `y (N, dim)` is `cos(t_i f_j)` for `j < half`, then `sin(t_i f_j)`, then a zero
/// column when `dim` is odd; `half = dim / 2 = freqs.len()`. The product `t f` is FP32 (as
/// diffusers computes it), the sine and cosine of it exact.
///
/// # Panics
/// If `y` is not `t.len()` rows of `dim` with `dim / 2 == freqs.len()`.
pub fn timestep_embedding(t: &[f32], freqs: &[f32], dim: usize, y: &mut [f32]) {
    let half = freqs.len();
    assert!(
        dim / 2 == half && y.len() == t.len() * dim,
        "timestep_embedding: lengths"
    );
    if dim == 0 {
        return;
    }
    y.par_chunks_mut(dim).zip(t).for_each(|(row, &t)| {
        let (cos, rest) = row.split_at_mut(half);
        let (sin, odd) = rest.split_at_mut(half);
        for ((c, s), &f) in cos.iter_mut().zip(sin.iter_mut()).zip(freqs) {
            let arg = t * f;
            let (sn, cs) = arg.sin_cos();
            *c = cs;
            *s = sn;
        }
        odd.fill(0.0);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampler_step_streams_both_outputs_past_the_threshold() {
        // Past the streaming threshold and not a whole number of chunks or lines.
        let n = (crate::stream::STREAM_MIN_BYTES / 4) + 37;
        let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32).collect();
        let e: Vec<f32> = (0..n).map(|i| (i % 13) as f32 - 6.0).collect();
        let p: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
        let (mut y, mut z) = (vec![0.0; n], vec![0.0; n]);
        let c = StepCoefficients {
            cx: 0.5,
            ce: -0.25,
            cp: 2.0,
            z_ce: Some(-1.5),
        };
        sampler_step(&x, &e, Some(&p), c, &mut y, Some(&mut z));
        for i in [0, 1, CHUNK - 1, CHUNK, n / 2, n - 1] {
            assert_eq!(y[i], 0.5 * x[i] - 0.25 * e[i] + 2.0 * p[i], "y[{i}]");
            assert_eq!(z[i], x[i] - 1.5 * e[i], "z[{i}]");
        }
    }

    #[test]
    fn row_affine_matches_the_definition_on_short_rows() {
        let (x, s, t) = (
            [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0],
            [0.5f32, -1.0, 2.0],
            [1.0f32, 0.0, -1.0],
        );
        let mut y = [0.0; 6];
        row_affine(&x, &s, Some(&t), true, &mut y);
        assert_eq!(y, [2.5, 0.0, 8.0, 7.0, 0.0, 17.0]);
        row_affine(&x, &s, None, false, &mut y);
        assert_eq!(y, [0.5, -2.0, 6.0, 2.0, -5.0, 12.0]);
    }
}
