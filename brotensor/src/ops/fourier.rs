//! Fourier transforms and the short-time transform of the spectral family (C++
//! `ops/spectral.h`): `fft`, `ifft`, `rfft`, `irfft`, the real transforms' adjoints, `stft`,
//! `istft` and their transposes. Every length `>= 1` (mixed radix, Bluestein for large
//! primes). numpy's "backward" norm: the forward transforms are unscaled, the inverses scaled
//! by `1 / n`. Each row of the last dim is one signal. A complex operand is an F32 tensor of
//! interleaved `[re, im]` pairs `(.., 2n)` or a C64 tensor `(.., n)`, taken as it is; a
//! complex output takes its input's form (`fft`, `ifft`) or is F32 interleaved (`rfft`,
//! `irfft_backward`, `stft`, `istft_backward`, as in C++). FP32 on every device.
//!
//! ```
//! # fn main() -> brotensor::Result<()> {
//! use brotensor::{ops, Tensor};
//! let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], 1, 4)?;
//! let mut spectrum = Tensor::default();
//! ops::rfft(&x, &mut spectrum)?; // 3 bins: 10, -2 + 2i, -2
//! assert_eq!(spectrum.to_vec::<f32>()?, [10.0, 0.0, -2.0, 2.0, -2.0, 0.0]);
//! let mut back = Tensor::default();
//! ops::irfft(&spectrum, 4, &mut back)?;
//! assert_eq!(back.to_vec::<f32>()?, [1.0, 2.0, 3.0, 4.0]);
//! # Ok(())
//! # }
//! ```

use brotensor_cpu::stft::StftFrames;

use super::spectral::real_dims;
use super::{check_dtype, checked_product, dispatch, input, written};
use crate::backend::{StftPass, Transform};
use crate::{Dtype, Error, Result, Tensor};

/// `dims` with the last replaced by `last`.
fn with_last(dims: &[usize], last: usize) -> Vec<usize> {
    let mut d = dims.to_vec();
    if let Some(l) = d.last_mut() {
        *l = last;
    }
    d
}

/// `(rows, n)` of dims whose last is the transform axis: the product of the leading dims and
/// the last, which must be `>= 1`.
fn rows_of(op: &'static str, name: &'static str, dims: &[usize]) -> Result<(usize, usize)> {
    match dims.split_last() {
        Some((&n, lead)) if n >= 1 => Ok((checked_product(op, "rows", lead)?, n)),
        _ => Err(Error::shape(
            op,
            format!("{name} needs a last dim (the signal) of length >= 1, got dims {dims:?}"),
        )),
    }
}

/// The complex transform `fft` or `ifft` of `x` into `y`.
fn complex_transform(op: &'static str, t: Transform, x: &Tensor, y: &mut Tensor) -> Result<()> {
    let be = dispatch(op, &[input("x", x), written("y", y)])?;
    let real = real_dims(op, "x", x)?;
    let (rows, n) = rows_of(op, "x", &real)?;
    be.out("y", y, x.dims(), x.dtype())?;
    if rows == 0 {
        return Ok(());
    }
    be.fft(op, t, x, y, n, rows)
}

/// The discrete Fourier transform of each row (C++ `fft`): `y[k] = sum_t x[t] e^{-2 pi i k
/// t / n}`, unscaled. `x` complex `(.., n)` (F32 `(.., 2n)` or C64); `y` is resized like `x`.
/// Its gradient is `n ifft(dy)`.
pub fn fft(x: &Tensor, y: &mut Tensor) -> Result<()> {
    complex_transform("fft", Transform::Fft, x, y)
}

/// The inverse transform of each row (C++ `ifft`): `y[t] = 1/n sum_k x[k] e^{+2 pi i k t /
/// n}`. Shapes as [`fft`]. Its gradient is `fft(dy) / n`.
pub fn ifft(x: &Tensor, y: &mut Tensor) -> Result<()> {
    complex_transform("ifft", Transform::Ifft, x, y)
}

/// Errors unless the complex operand `x` has `n / 2 + 1` bins in its last dim; its real dims.
fn half_spectrum(op: &'static str, name: &'static str, x: &Tensor, n: usize) -> Result<Vec<usize>> {
    if n == 0 {
        return Err(Error::invalid(op, "the signal length must be >= 1, got 0"));
    }
    let real = real_dims(op, name, x)?;
    match real.last() {
        Some(&c) if c == n / 2 + 1 => Ok(real),
        _ => Err(Error::shape(
            op,
            format!(
                "{name} must hold n / 2 + 1 = {} complex bins in its last dim for length n = {n}, got complex dims {real:?}",
                n / 2 + 1
            ),
        )),
    }
}

/// A transform from real rows `x` to half spectra `y` (`Rfft`, `IrfftBackward`).
fn real_to_half(op: &'static str, t: Transform, x: &Tensor, y: &mut Tensor) -> Result<()> {
    let be = dispatch(op, &[input("x", x), written("y", y)])?;
    check_dtype(op, "x", x, Dtype::F32)?;
    let (rows, n) = rows_of(op, "x", x.dims())?;
    be.out("y", y, &with_last(x.dims(), 2 * (n / 2 + 1)), Dtype::F32)?;
    if rows == 0 {
        return Ok(());
    }
    be.fft(op, t, x, y, n, rows)
}

/// A transform from half spectra `x` to real rows `y` of length `n` (`Irfft`,
/// `RfftBackward`).
fn half_to_real(
    op: &'static str,
    t: Transform,
    x: &Tensor,
    n: usize,
    y: &mut Tensor,
) -> Result<()> {
    let be = dispatch(op, &[input("x", x), written("y", y)])?;
    let real = half_spectrum(op, "x", x, n)?;
    let (rows, _) = rows_of(op, "x", &real)?;
    be.out("y", y, &with_last(&real, n), Dtype::F32)?;
    if rows == 0 {
        return Ok(());
    }
    be.fft(op, t, x, y, n, rows)
}

/// The transform of real rows (C++ `rfft`): bins `0 ..= n / 2` of [`fft`] of each row. `x`
/// F32 `(.., n)`; `y` is resized to F32 `(.., 2 (n / 2 + 1))`, interleaved.
pub fn rfft(x: &Tensor, y: &mut Tensor) -> Result<()> {
    real_to_half("rfft", Transform::Rfft, x, y)
}

/// The inverse of [`rfft`] (C++ `irfft`): the real rows of length `n` whose half spectra are
/// the rows of `x`, scaled by `1 / n`. `x` complex with `n / 2 + 1` bins (F32 `(.., 2 (n / 2
/// + 1))` or C64); `n` is explicit (the bin count leaves it ambiguous); `y` is resized to
///   F32 `(.., n)`. The imaginary parts of DC and (even `n`) Nyquist are ignored, as numpy does.
pub fn irfft(x: &Tensor, n: usize, y: &mut Tensor) -> Result<()> {
    half_to_real("irfft", Transform::Irfft, x, n, y)
}

/// The adjoint of [`rfft`] (C++ `rfft_backward`): `dx[t] = Re sum_k dy[k] e^{+2 pi i k t /
/// n}` over the `n / 2 + 1` bins of each row of `dy` (the true adjoint, as the C++ code and
/// its tests compute: no bin weighting). `dy` complex as [`irfft`]'s `x`; `dx` is resized to
/// F32 `(.., n)` and overwritten.
pub fn rfft_backward(dy: &Tensor, n: usize, dx: &mut Tensor) -> Result<()> {
    half_to_real("rfft_backward", Transform::RfftBackward, dy, n, dx)
}

/// The adjoint of [`irfft`] (C++ `irfft_backward`): `dx[k] = w_k / n rfft(dy)[k]` with
/// `w_k` 1 for DC and (even `n`) Nyquist and 2 for the other bins, whose imaginary parts
/// are 0. `dy` F32 `(.., n)`; `dx` is resized to F32 `(.., 2 (n / 2 + 1))` and overwritten.
pub fn irfft_backward(dy: &Tensor, dx: &mut Tensor) -> Result<()> {
    real_to_half("irfft_backward", Transform::IrfftBackward, dy, dx)
}

/// The framing of a short-time Fourier transform ([`stft`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StftSpec {
    /// Transform length of each frame (`>= 1`); a frame has `n_fft / 2 + 1` bins.
    pub n_fft: usize,
    /// Samples between frame starts (`>= 1`).
    pub hop_length: usize,
    /// Length of the window, `1 ..= n_fft`, centred in each frame.
    pub win_length: usize,
    /// Reflect-pad each signal by `n_fft / 2` on both sides (as `torch.stft(center=True)`):
    /// `1 + len / hop_length` frames, and the signal must be longer than `n_fft / 2`.
    /// Without it `1 + (len - n_fft) / hop_length` frames, and `len >= n_fft`.
    pub center: bool,
    /// Scale the spectrogram by `1 / sqrt(n_fft)` (and `istft` by `sqrt(n_fft)`).
    pub normalized: bool,
}

impl StftSpec {
    /// `n_fft` and `hop_length` with torch's defaults for the rest: a window of `n_fft`,
    /// centred frames, not normalized.
    pub fn new(n_fft: usize, hop_length: usize) -> Self {
        StftSpec {
            n_fft,
            hop_length,
            win_length: n_fft,
            center: true,
            normalized: false,
        }
    }

    /// Frames of a signal of `len` samples, with the framing checked.
    pub fn frames(&self, len: usize) -> Result<usize> {
        self.geometry("stft", len).map(|g| g.frames)
    }

    /// The checked framing of signals of `len` samples.
    fn geometry(&self, op: &'static str, len: usize) -> Result<StftFrames> {
        let StftSpec {
            n_fft,
            hop_length: hop,
            win_length,
            center,
            normalized,
        } = *self;
        if n_fft == 0 || hop == 0 {
            return Err(Error::invalid(
                op,
                format!("n_fft and hop_length must be >= 1, got n_fft {n_fft}, hop_length {hop}"),
            ));
        }
        if win_length == 0 || win_length > n_fft {
            return Err(Error::invalid(
                op,
                format!("win_length must be in 1 ..= n_fft = {n_fft}, got {win_length}"),
            ));
        }
        let frames = if center {
            if len <= n_fft / 2 {
                return Err(Error::shape(
                    op,
                    format!(
                        "center reflect-pads by n_fft / 2 = {}, which must be shorter than the signal length {len}",
                        n_fft / 2
                    ),
                ));
            }
            len.checked_add(n_fft)
                .ok_or_else(|| Error::shape(op, "signal length + n_fft overflows usize"))?;
            1 + len / hop
        } else {
            if len < n_fft {
                return Err(Error::shape(
                    op,
                    format!("without center the signal length {len} must be >= n_fft = {n_fft}"),
                ));
            }
            1 + (len - n_fft) / hop
        };
        Ok(StftFrames {
            n_fft,
            hop,
            win_length,
            center,
            normalized,
            signal_len: len,
            frames,
        })
    }
}

/// The periodic Hann window of `len` samples (`torch.hann_window(len)`, scipy's
/// `get_window('hann', len)`): `0.5 - 0.5 cos(2 pi t / len)`, an F32 `(len)` tensor on the
/// CPU. With `periodic = false` the symmetric window (`/ (len - 1)`; `[1]` for `len = 1`).
pub fn hann_window(len: usize, periodic: bool) -> Result<Tensor> {
    let denom = if periodic { len } else { len.saturating_sub(1) };
    let values: Vec<f32> = (0..len)
        .map(|t| {
            if denom == 0 {
                1.0
            } else {
                let phase = 2.0 * std::f64::consts::PI * t as f64 / denom as f64;
                (0.5 - 0.5 * phase.cos()) as f32
            }
        })
        .collect();
    Tensor::from_slice_nd_on(crate::Device::Cpu, &values, &[len])
}

/// Errors unless `window` is F32 holding `win_length` values as `(win_length)` or `(1,
/// win_length)`.
fn check_window(op: &'static str, window: &Tensor, win_length: usize) -> Result<()> {
    check_dtype(op, "window", window, Dtype::F32)?;
    match window.dims() {
        [w] | [1, w] if *w == win_length => Ok(()),
        dims => Err(Error::shape(
            op,
            format!("window must be ({win_length}) or (1, {win_length}) (win_length values), got dims {dims:?}"),
        )),
    }
}

/// The spectrogram dims `(signals frames, 2 bins)` of `g`, checked.
fn spectrogram_dims(op: &'static str, signals: usize, g: &StftFrames) -> Result<[usize; 2]> {
    Ok([
        checked_product(op, "signals * frames", &[signals, g.frames])?,
        2 * g.bins(),
    ])
}

/// The short-time Fourier transform (C++ `stft`): frame `f` of each signal takes the padded
/// signal's `n_fft` samples from `f hop_length`, multiplies the central `win_length` of them
/// by `window` (zeros elsewhere) and keeps bins `0 ..= n_fft / 2` of their [`fft`]. `signal`
/// F32 `(N, len)` (or `(len)`: one signal); `window` F32 `(win_length)` or `(1,
/// win_length)`; `spectrogram` is resized to F32 `(N frames, 2 (n_fft / 2 + 1))`,
/// interleaved, each signal's frames in order.
pub fn stft(
    signal: &Tensor,
    window: &Tensor,
    spec: &StftSpec,
    spectrogram: &mut Tensor,
) -> Result<()> {
    let op = "stft";
    let be = dispatch(
        op,
        &[
            input("signal", signal),
            input("window", window),
            written("spectrogram", spectrogram),
        ],
    )?;
    check_dtype(op, "signal", signal, Dtype::F32)?;
    let (signals, len) = rows_of(op, "signal", signal.dims())?;
    let g = spec.geometry(op, len)?;
    check_window(op, window, g.win_length)?;
    be.out(
        "spectrogram",
        spectrogram,
        &spectrogram_dims(op, signals, &g)?,
        Dtype::F32,
    )?;
    if signals == 0 {
        return Ok(());
    }
    be.stft(op, StftPass::Stft, signal, window, &g, spectrogram)
}

/// Errors unless `spectrogram` is F32 `(signals frames, 2 bins)` for `g`.
fn check_spectrogram(
    op: &'static str,
    name: &'static str,
    t: &Tensor,
    signals: usize,
    g: &StftFrames,
) -> Result<()> {
    check_dtype(op, name, t, Dtype::F32)?;
    let want = spectrogram_dims(op, signals, g)?;
    if t.dims() != want {
        return Err(Error::shape(
            op,
            format!(
                "{name} must be (N frames, 2 bins) = {want:?} for N = {signals} signals of {} samples, got dims {:?}",
                g.signal_len,
                t.dims()
            ),
        ));
    }
    Ok(())
}

/// A map from a spectrogram `x` to `(signals, len)` signals `y`.
fn to_signal(
    op: &'static str,
    pass: StftPass,
    (x, window): (&Tensor, &Tensor),
    (signals, len): (usize, usize),
    spec: &StftSpec,
    y: &mut Tensor,
) -> Result<()> {
    let be = dispatch(
        op,
        &[input("x", x), input("window", window), written("y", y)],
    )?;
    let g = spec.geometry(op, len)?;
    check_window(op, window, g.win_length)?;
    check_spectrogram(op, "x", x, signals, &g)?;
    be.out("y", y, &[signals, len], Dtype::F32)?;
    checked_product(op, "signals * padded length", &[signals, g.padded_len()])?;
    if signals == 0 {
        return Ok(());
    }
    be.stft(op, pass, x, window, &g, y)
}

/// The transpose of [`stft`] (C++ `stft_backward`): the gradient of the `(signals, len)`
/// signals from the spectrogram gradient `dspec` (F32 `(signals frames, 2 bins)`). Frames'
/// contributions add where they overlap (and reflect back at the borders with `center`);
/// `dsignal` is resized to F32 `(signals, len)` and overwritten. `window` and `spec` as in
/// the forward call.
pub fn stft_backward(
    dspec: &Tensor,
    window: &Tensor,
    (signals, len): (usize, usize),
    spec: &StftSpec,
    dsignal: &mut Tensor,
) -> Result<()> {
    to_signal(
        "stft_backward",
        StftPass::StftBackward,
        (dspec, window),
        (signals, len),
        spec,
        dsignal,
    )
}

/// The inverse transform (C++ `istft`): each frame's inverse [`rfft`] times `window`,
/// overlap-added, divided per sample by the overlap-added squared window (samples no frame
/// covers are 0); with `center` the padding is cut off. With the forward window and a hop
/// that satisfies the COLA condition `istft(stft(x)) == x`. `spectrogram` F32 `(signals
/// frames, 2 bins)`; `signal` is resized to F32 `(signals, len)`.
pub fn istft(
    spectrogram: &Tensor,
    window: &Tensor,
    (signals, len): (usize, usize),
    spec: &StftSpec,
    signal: &mut Tensor,
) -> Result<()> {
    to_signal(
        "istft",
        StftPass::Istft,
        (spectrogram, window),
        (signals, len),
        spec,
        signal,
    )
}

/// The transpose of [`istft`] (C++ `istft_backward`), the envelope division included: the
/// spectrogram gradient from the signal gradient `dsignal` (F32 `(signals, len)`); `dspec` is
/// resized to F32 `(signals frames, 2 bins)` and overwritten.
pub fn istft_backward(
    dsignal: &Tensor,
    window: &Tensor,
    spec: &StftSpec,
    dspec: &mut Tensor,
) -> Result<()> {
    let op = "istft_backward";
    let be = dispatch(
        op,
        &[
            input("dsignal", dsignal),
            input("window", window),
            written("dspec", dspec),
        ],
    )?;
    check_dtype(op, "dsignal", dsignal, Dtype::F32)?;
    let (signals, len) = match dsignal.dims() {
        &[n, l] => (n, l),
        dims => {
            return Err(Error::shape(
                op,
                format!("dsignal must be (signals, len), got dims {dims:?}"),
            ))
        }
    };
    let g = spec.geometry(op, len)?;
    check_window(op, window, g.win_length)?;
    checked_product(op, "signals * padded length", &[signals, g.padded_len()])?;
    be.out(
        "dspec",
        dspec,
        &spectrogram_dims(op, signals, &g)?,
        Dtype::F32,
    )?;
    if signals == 0 {
        return Ok(());
    }
    be.stft(op, StftPass::IstftBackward, dsignal, window, &g, dspec)
}
