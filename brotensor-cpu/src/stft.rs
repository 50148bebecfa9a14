//! The short-time Fourier transform, its inverse by windowed overlap-add, and the exact
//! transposes of both (the spectral family's `stft`, `stft_backward`, `istft`,
//! `istft_backward`). A signal is a length-`signal_len` row; its spectrogram is `frames`
//! rows of `n_fft / 2 + 1` interleaved bins. Frame `f` covers padded positions
//! `f hop .. f hop + n_fft`; the window (`win_length` values) sits at offset
//! `(n_fft - win_length) / 2` inside it. With `center`, padded position `p` reads the signal
//! at `p - n_fft / 2` reflected into range (numpy's `reflect`), as `torch.stft` does.

use num_complex::Complex32;
use rayon::prelude::*;

use crate::fft::{c2r_plan, fold_weight, half_spectrum, r2c_plan, rows_per_job};

/// The framing of an STFT (validated by the caller: `hop >= 1`, `1 <= win_length <=
/// n_fft`, and a signal long enough for the framing, see `frames`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StftFrames {
    /// Transform length.
    pub n_fft: usize,
    /// Samples between frame starts.
    pub hop: usize,
    /// Window length, `<= n_fft`.
    pub win_length: usize,
    /// Reflect-pad the signal by `n_fft / 2` on each side.
    pub center: bool,
    /// Scale the forward transform by `1 / sqrt(n_fft)` (the inverse by its reciprocal).
    pub normalized: bool,
    /// Samples of one signal.
    pub signal_len: usize,
    /// Frames of one signal: `1 + signal_len / hop` with `center`, else `1 + (signal_len -
    /// n_fft) / hop`.
    pub frames: usize,
}

impl StftFrames {
    /// Half-spectrum bins of a frame: `n_fft / 2 + 1`.
    pub fn bins(&self) -> usize {
        self.n_fft / 2 + 1
    }

    /// The window's offset inside a frame.
    pub fn pad_lo(&self) -> usize {
        (self.n_fft - self.win_length) / 2
    }

    /// How far the padded signal starts before the signal: `n_fft / 2` with `center`.
    pub fn shift(&self) -> usize {
        if self.center {
            self.n_fft / 2
        } else {
            0
        }
    }

    /// Length of the padded signal the frames index: `signal_len + n_fft` with `center`.
    pub fn padded_len(&self) -> usize {
        if self.center {
            self.signal_len + self.n_fft
        } else {
            self.signal_len
        }
    }

    /// The signal sample padded position `p` reads: `p - shift` reflected into
    /// `0..signal_len` (without reflection when not centred).
    pub fn source(&self, p: usize) -> usize {
        if !self.center {
            return p;
        }
        reflect(p as i64 - self.shift() as i64, self.signal_len)
    }

    /// The forward scale: `1 / sqrt(n_fft)` when normalized, else 1.
    pub fn norm(&self) -> f32 {
        if self.normalized {
            (1.0 / (self.n_fft as f64).sqrt()) as f32
        } else {
            1.0
        }
    }
}

/// `q` reflected into `0..len` (numpy's `reflect`: the edge sample is not repeated), by
/// folding with period `2 (len - 1)`.
pub fn reflect(q: i64, len: usize) -> usize {
    if len <= 1 {
        return 0;
    }
    let period = 2 * (len as i64 - 1);
    let m = q.rem_euclid(period);
    if m < len as i64 {
        m as usize
    } else {
        (period - m) as usize
    }
}

/// The overlap-added squared window of all frames in padded positions, inverted: `1 / e`
/// where `e > 1e-10`, else 0 (samples no frame covers stay 0 in `istft`). Length
/// `padded_len`.
pub fn inverse_envelope(window: &[f32], g: &StftFrames) -> Vec<f32> {
    let mut env = vec![0.0f64; g.padded_len()];
    for f in 0..g.frames {
        let start = f * g.hop + g.pad_lo();
        for (e, &w) in env[start..start + g.win_length].iter_mut().zip(window) {
            *e += f64::from(w) * f64::from(w);
        }
    }
    env.into_iter()
        .map(|e| if e > 1e-10 { (1.0 / e) as f32 } else { 0.0 })
        .collect()
}

/// The real-to-complex transform of `rows` frames of `n_fft` values, each built by
/// `fill(row, buffer)` (the buffer zeroed first), into `rows` spectrogram rows of `out`,
/// bin `k` scaled by `bin_scale(k)`.
fn analyse(
    out: &mut [f32],
    n_fft: usize,
    fill: impl Fn(usize, &mut [f32]) + Sync,
    bin_scale: impl Fn(usize) -> f32 + Sync,
) {
    let bins = n_fft / 2 + 1;
    let plan = r2c_plan(n_fft);
    let rows = rows_per_job(n_fft);
    out.par_chunks_mut(rows * 2 * bins)
        .enumerate()
        .for_each_init(
            || (plan.make_input_vec(), plan.make_scratch_vec()),
            |(input, scratch), (job, out)| {
                for (i, out) in out.chunks_exact_mut(2 * bins).enumerate() {
                    input.fill(0.0);
                    fill(job * rows + i, input);
                    let spectrum: &mut [Complex32] = bytemuck::cast_slice_mut(out);
                    plan.process_with_scratch(input, spectrum, scratch)
                        .expect("buffer lengths come from the plan");
                    for (k, v) in spectrum.iter_mut().enumerate() {
                        *v *= bin_scale(k);
                    }
                }
            },
        );
}

/// The complex-to-real transform (`e^{+i}`, unscaled) of each spectrogram row of `spec`
/// with bin `k` scaled by `bin_scale(k)`, windowed: the window's span of each frame times
/// the window, into `(rows, win_length)` `out`.
fn synthesise(
    spec: &[f32],
    window: &[f32],
    g: &StftFrames,
    bin_scale: impl Fn(usize) -> f32 + Sync,
    out: &mut [f32],
) {
    let (n_fft, win, bins) = (g.n_fft, g.win_length, g.bins());
    let plan = c2r_plan(n_fft);
    let rows = rows_per_job(n_fft);
    let pad_lo = g.pad_lo();
    out.par_chunks_mut(rows * win)
        .zip(spec.par_chunks(rows * 2 * bins))
        .for_each_init(
            || {
                (
                    plan.make_input_vec(),
                    plan.make_output_vec(),
                    plan.make_scratch_vec(),
                )
            },
            |(input, time, scratch), (out, spec)| {
                for (out, row) in out.chunks_exact_mut(win).zip(spec.chunks_exact(2 * bins)) {
                    half_spectrum(bytemuck::cast_slice(row), n_fft, &bin_scale, input);
                    plan.process_with_scratch(input, time, scratch)
                        .expect("buffer lengths come from the plan");
                    for ((o, t), w) in out.iter_mut().zip(&time[pad_lo..]).zip(window) {
                        *o = t * w;
                    }
                }
            },
        );
}

/// `stft` of `signals` rows of `signal` (`(signals, signal_len)`) with `window`
/// (`win_length`) into `spec` (`(signals frames, 2 bins)`, interleaved).
pub fn stft(signal: &[f32], window: &[f32], g: &StftFrames, spec: &mut [f32]) {
    if spec.is_empty() {
        return;
    }
    let (norm, pad_lo) = (g.norm(), g.pad_lo());
    analyse(
        spec,
        g.n_fft,
        |row, buf| {
            let (b, f) = (row / g.frames, row % g.frames);
            let sig = &signal[b * g.signal_len..][..g.signal_len];
            let start = f * g.hop + pad_lo;
            for (j, (d, w)) in buf[pad_lo..pad_lo + g.win_length]
                .iter_mut()
                .zip(window)
                .enumerate()
            {
                *d = sig[g.source(start + j)] * w;
            }
        },
        |_| norm,
    );
}

/// The transpose of [`stft`]: the signal gradient `dsignal` (`(signals, signal_len)`,
/// overwritten) of the spectrogram gradient `dspec`.
pub fn stft_backward(dspec: &[f32], window: &[f32], g: &StftFrames, dsignal: &mut [f32]) {
    let (n_fft, norm) = (g.n_fft, g.norm());
    let rows = dspec.len() / (2 * g.bins());
    let mut frames = vec![0.0f32; rows * g.win_length];
    synthesise(
        dspec,
        window,
        g,
        |k| norm / fold_weight(k, n_fft),
        &mut frames,
    );
    let per_signal = g.frames * g.win_length;
    dsignal
        .par_chunks_mut(g.signal_len)
        .zip(frames.par_chunks(per_signal.max(1)))
        .for_each(|(d, frames)| {
            d.fill(0.0);
            for (f, frame) in frames.chunks_exact(g.win_length).enumerate() {
                let start = f * g.hop + g.pad_lo();
                for (j, v) in frame.iter().enumerate() {
                    d[g.source(start + j)] += v;
                }
            }
        });
}

/// `istft`: windowed overlap-add of the inverse transforms of `spec`'s frames (`(signals
/// frames, 2 bins)`), divided by the window envelope `inv_env` ([`inverse_envelope`]), into
/// `signal` (`(signals, signal_len)`).
pub fn istft(spec: &[f32], window: &[f32], inv_env: &[f32], g: &StftFrames, signal: &mut [f32]) {
    let rows = spec.len() / (2 * g.bins());
    let scale = 1.0 / (g.norm() * g.n_fft as f32);
    let mut frames = vec![0.0f32; rows * g.win_length];
    synthesise(spec, window, g, |_| scale, &mut frames);
    let per_signal = g.frames * g.win_length;
    let shift = g.shift();
    signal
        .par_chunks_mut(g.signal_len)
        .zip(frames.par_chunks(per_signal.max(1)))
        .for_each_init(
            || vec![0.0f32; g.padded_len()],
            |acc, (out, frames)| {
                acc.fill(0.0);
                for (f, frame) in frames.chunks_exact(g.win_length).enumerate() {
                    let start = f * g.hop + g.pad_lo();
                    for (a, v) in acc[start..].iter_mut().zip(frame) {
                        *a += v;
                    }
                }
                for ((o, a), e) in out.iter_mut().zip(&acc[shift..]).zip(&inv_env[shift..]) {
                    *o = a * e;
                }
            },
        );
}

/// The transpose of [`istft`]: the spectrogram gradient `dspec` (`(signals frames, 2
/// bins)`, overwritten) of the signal gradient `dsignal`.
pub fn istft_backward(
    dsignal: &[f32],
    window: &[f32],
    inv_env: &[f32],
    g: &StftFrames,
    dspec: &mut [f32],
) {
    let padded = g.padded_len();
    let shift = g.shift();
    let signals = dsignal.len() / g.signal_len.max(1);
    let mut scaled = vec![0.0f32; signals * padded];
    scaled
        .par_chunks_mut(padded)
        .zip(dsignal.par_chunks(g.signal_len.max(1)))
        .for_each(|(s, d)| {
            for ((s, d), e) in s[shift..].iter_mut().zip(d).zip(&inv_env[shift..]) {
                *s = d * e;
            }
        });
    let n_fft = g.n_fft;
    let scale = 1.0 / (g.norm() * n_fft as f32);
    let pad_lo = g.pad_lo();
    analyse(
        dspec,
        n_fft,
        |row, buf| {
            let (b, f) = (row / g.frames, row % g.frames);
            let start = f * g.hop + pad_lo;
            let src = &scaled[b * padded + start..][..g.win_length];
            for ((d, s), w) in buf[pad_lo..].iter_mut().zip(src).zip(window) {
                *d = s * w;
            }
        },
        |k| fold_weight(k, n_fft) * scale,
    );
    // The imaginary parts of DC and Nyquist never reach istft's output.
    let bins = g.bins();
    for row in dspec.chunks_exact_mut(2 * bins) {
        row[1] = 0.0;
        if n_fft.is_multiple_of(2) {
            row[2 * bins - 1] = 0.0;
        }
    }
}
