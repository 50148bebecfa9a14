//! The spectral category: the complex element ops on interleaved `[re, im]` f32 pairs (an
//! `(R, 2C)` F32 tensor or a C64 one: the same memory). Counts are complex elements.

use brotensor_cpu::stft::StftFrames;

use super::{missing, OnDevice};
use crate::{Result, Tensor};

/// A Fourier transform of rows of length `n` (numpy's "backward" norm).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transform {
    /// Complex to complex, `e^{-i}`, unscaled.
    Fft,
    /// Complex to complex, `e^{+i}`, scaled by `1 / n`.
    Ifft,
    /// Real rows to `n / 2 + 1` bins, unscaled.
    Rfft,
    /// `n / 2 + 1` bins to real rows, scaled by `1 / n`.
    Irfft,
    /// The adjoint of `Rfft`: bins to real rows.
    RfftBackward,
    /// The adjoint of `Irfft`: real rows to bins.
    IrfftBackward,
}

/// One of the four STFT maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StftPass {
    /// Signal to spectrogram.
    Stft,
    /// Spectrogram gradient to signal gradient (the transpose of `Stft`).
    StftBackward,
    /// Spectrogram to signal (overlap-add over the window envelope).
    Istft,
    /// Signal gradient to spectrogram gradient (the transpose of `Istft`).
    IstftBackward,
}

/// Complex element ops. Callers guarantee dense F32 or C64 operands on this device, each
/// holding `n` complex elements (real operands `n` F32 values), and committed, sized
/// outputs.
pub(crate) trait SpectralOps: OnDevice {
    /// `y = a b`.
    fn complex_mul(
        &self,
        name: &'static str,
        _ab: [&Tensor; 2],
        _y: &mut Tensor,
        _n: usize,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `da += dy conj(b)`, `db += dy conj(a)`.
    fn complex_mul_backward(
        &self,
        name: &'static str,
        _ab_dy: [&Tensor; 3],
        _grads: [&mut Tensor; 2],
        _n: usize,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `y = |z|` (real), or with `angle` `y = atan2(im, re)`.
    fn complex_to_real(
        &self,
        name: &'static str,
        _z: &Tensor,
        _angle: bool,
        _y: &mut Tensor,
        _n: usize,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `dz = dy z / |z|` (0 where `|z| = 0`), `dy` real, `dz` overwritten.
    fn complex_abs_backward(
        &self,
        name: &'static str,
        _z: &Tensor,
        _dy: &Tensor,
        _dz: &mut Tensor,
        _n: usize,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `y = mag e^{i phase}` from real `mag`, `phase`.
    fn complex_from_polar(
        &self,
        name: &'static str,
        _mag: &Tensor,
        _phase: &Tensor,
        _y: &mut Tensor,
        _n: usize,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `transform` of `rows` rows of length `n`: complex operands are interleaved F32 or
    /// C64 (`n` values, or `n / 2 + 1` bins for the real transforms), real ones F32.
    fn fft(
        &self,
        name: &'static str,
        _transform: Transform,
        _x: &Tensor,
        _y: &mut Tensor,
        _n: usize,
        _rows: usize,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `pass` of an STFT framed by `g` with `window` (`win_length` F32): `x` the signals
    /// `(signals, signal_len)` or the spectrogram `(signals frames, 2 bins)`, `y` the other
    /// (sized; written whole).
    fn stft(
        &self,
        name: &'static str,
        _pass: StftPass,
        _x: &Tensor,
        _window: &Tensor,
        _g: &StftFrames,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }
}
