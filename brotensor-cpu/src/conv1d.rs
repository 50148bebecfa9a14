//! The 1-D (NCL) op of the convolution family that is not a 2-D convolution with one row:
//! the streaming step of a causal depthwise convolution against a rolling state. Rows are
//! `(N*C, L)`: element `l` of channel `c` of signal `n` at `(n*C + c)*L + l`. (The padding
//! of the length axis is [`crate::pad`]'s 2-D padding of one-row planes.)

use rayon::prelude::*;

pub use crate::pad::PadMode;

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
