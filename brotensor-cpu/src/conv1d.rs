//! The 1-D (NCL) ops of the convolution family that are not a 2-D convolution with one row:
//! padding of the length axis (zero, reflect, replicate) and its adjoint, and the streaming
//! step of a causal depthwise convolution against a rolling state. Rows are `(N*C, L)`:
//! element `l` of channel `c` of signal `n` at `(n*C + c)*L + l`.

use rayon::prelude::*;

/// How [`pad1d_forward`] fills the samples outside the signal.
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

    /// The input sample output sample `j` of a row padded by `left` reads, or `None` for a
    /// zero. Callers have passed [`PadMode::check`].
    #[inline(always)]
    fn source(self, j: usize, len: usize, left: usize) -> Option<usize> {
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

/// `y` = each row of `x` (rows of `len`) padded by `left` and `right` samples (rows of
/// `len + left + right`), overwritten.
///
/// # Panics
/// If the lengths do not match that shape or `mode.check` fails.
pub fn pad1d_forward(
    x: &[f32],
    len: usize,
    left: usize,
    right: usize,
    mode: PadMode,
    y: &mut [f32],
) {
    mode.check(len, left, right)
        .expect("pad1d: checked by the op");
    let out_len = len + left + right;
    let rows = y.len() / out_len.max(1);
    assert!(
        y.len() == rows * out_len && x.len() == rows * len,
        "pad1d_forward: lengths"
    );
    if out_len == 0 {
        return;
    }
    y.par_chunks_mut(out_len).enumerate().for_each(|(r, out)| {
        let src = &x[r * len..][..len];
        for (j, o) in out.iter_mut().enumerate() {
            *o = mode.source(j, len, left).map_or(0.0, |i| src[i]);
        }
    });
}

/// `dx`, the adjoint of [`pad1d_forward`]: each input sample sums the gradients of the
/// output samples that read it. Overwrites `dx`.
///
/// # Panics
/// As [`pad1d_forward`], with `dy` in the place of `y`.
pub fn pad1d_backward(
    dy: &[f32],
    len: usize,
    left: usize,
    right: usize,
    mode: PadMode,
    dx: &mut [f32],
) {
    mode.check(len, left, right)
        .expect("pad1d: checked by the op");
    let out_len = len + left + right;
    let rows = dy.len() / out_len.max(1);
    assert!(
        dy.len() == rows * out_len && dx.len() == rows * len,
        "pad1d_backward: lengths"
    );
    if len == 0 {
        return;
    }
    dx.par_chunks_mut(len).enumerate().for_each(|(r, grad)| {
        grad.fill(0.0);
        let src = &dy[r * out_len..][..out_len];
        for (j, &g) in src.iter().enumerate() {
            if let Some(i) = mode.source(j, len, left) {
                grad[i] += g;
            }
        }
    });
}

/// One step of a causal depthwise convolution with a rolling state: for each of the `n *
/// channels` rows `(n, c)`, with `buf = state ++ x` (`S = (k - 1) dilation` state samples,
/// then `steps` new ones), `y[t] = bias[c] + sum_kl w[c, kl] buf[t + kl dilation]` for
/// `t < steps`, and `state` becomes the last `S` samples of `buf`. `x`, `y`: rows of
/// `steps`; `w`: `(channels, k)`; `bias`: `channels`; `state`: rows of `S`.
///
/// # Panics
/// If a length does not match that shape, or `k` or `dilation` is 0.
pub fn causal_conv1d_update(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    (n, channels, steps, k, dilation): (usize, usize, usize, usize, usize),
    state: &mut [f32],
    y: &mut [f32],
) {
    assert!(
        k > 0 && dilation > 0,
        "causal_conv1d_update: k and dilation"
    );
    let s = (k - 1)
        .checked_mul(dilation)
        .expect("causal_conv1d_update: state length");
    let rows = n.checked_mul(channels);
    let len = |per_row: usize| rows.and_then(|r| r.checked_mul(per_row));
    assert!(
        len(steps) == Some(x.len())
            && y.len() == x.len()
            && channels.checked_mul(k) == Some(w.len())
            && bias.is_none_or(|b| b.len() == channels)
            && len(s) == Some(state.len()),
        "causal_conv1d_update: lengths"
    );
    if x.is_empty() {
        return;
    }
    // Per row, `buf = state ++ x` read in place: sample `i` is `state[i]` below `s`.
    let state_rows: Vec<&mut [f32]> = if s == 0 {
        (0..x.len() / steps).map(|_| &mut [][..]).collect()
    } else {
        state.chunks_exact_mut(s).collect()
    };
    state_rows
        .into_par_iter()
        .zip(y.par_chunks_mut(steps))
        .zip(x.par_chunks(steps))
        .enumerate()
        .for_each(|(r, ((st, out), xr))| {
            let c = r % channels;
            let taps = &w[c * k..][..k];
            let b = bias.map_or(0.0, |b| b[c]);
            let buf = |i: usize| if i < s { st[i] } else { xr[i - s] };
            for (t, o) in out.iter_mut().enumerate() {
                let mut acc = b;
                for (kl, &wv) in taps.iter().enumerate() {
                    acc += wv * buf(t + kl * dilation);
                }
                *o = acc;
            }
            // The new state: the last `s` samples of `buf`.
            if steps >= s {
                st.copy_from_slice(&xr[steps - s..]);
            } else {
                st.copy_within(steps.., 0);
                st[s - steps..].copy_from_slice(xr);
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

    #[test]
    fn pad1d_and_its_adjoint_match_the_definition() {
        for mode in [PadMode::Zero, PadMode::Reflect, PadMode::Replicate] {
            for (len, left, right) in [(5, 2, 3), (4, 0, 3), (6, 5, 1), (3, 0, 0), (1, 0, 0)] {
                if mode.check(len, left, right).is_err() {
                    continue;
                }
                let rows = 3;
                let x = values(rows * len, 17);
                let out_len = len + left + right;
                let mut y = vec![f32::NAN; rows * out_len];
                pad1d_forward(&x, len, left, right, mode, &mut y);
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
                pad1d_backward(&dy, len, left, right, mode, &mut dx);
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

    #[test]
    fn pad_modes_refuse_what_they_cannot_pad() {
        assert!(PadMode::Reflect.check(3, 3, 0).is_err());
        assert!(PadMode::Reflect.check(3, 2, 2).is_ok());
        assert!(PadMode::Replicate.check(0, 1, 0).is_err());
        assert!(PadMode::Zero.check(0, 4, 4).is_ok());
        assert_eq!(PadMode::from_code(3), None);
    }

    /// Steps of the update against one causal convolution of the whole signal (zeros before
    /// it), in float64: split into steps of 3, 1 and 4 samples, the outputs concatenate to
    /// it and the state carries between them.
    #[test]
    fn streaming_steps_reproduce_the_whole_causal_convolution() {
        let (n, channels, k, dilation) = (2, 3, 3, 2);
        let total = 8;
        let x = values(n * channels * total, 5);
        let w = values(channels * k, 8);
        let b = values(channels, 13);
        let s = (k - 1) * dilation;
        let mut state = vec![0.0f32; n * channels * s];
        let mut got = vec![Vec::new(); n * channels];
        let mut at = 0;
        for steps in [3, 1, 4] {
            let xs: Vec<f32> = (0..n * channels)
                .flat_map(|r| x[r * total + at..][..steps].to_vec())
                .collect();
            let mut y = vec![f32::NAN; xs.len()];
            causal_conv1d_update(
                &xs,
                &w,
                Some(&b),
                (n, channels, steps, k, dilation),
                &mut state,
                &mut y,
            );
            for (r, out) in got.iter_mut().enumerate() {
                out.extend_from_slice(&y[r * steps..][..steps]);
            }
            at += steps;
        }
        for (r, out) in got.iter().enumerate() {
            let c = r % channels;
            for (t, &g) in out.iter().enumerate() {
                let mut want = f64::from(b[c]);
                for kl in 0..k {
                    // Tap kl reads sample t - (k - 1 - kl) dilation (zero before the signal).
                    let back = (k - 1 - kl) * dilation;
                    if t >= back {
                        want += f64::from(w[c * k + kl]) * f64::from(x[r * total + t - back]);
                    }
                }
                assert!(
                    (f64::from(g) - want).abs() <= 1e-6,
                    "row {r} t {t}: {g} vs {want}"
                );
            }
        }
    }
}
