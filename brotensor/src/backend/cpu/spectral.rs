//! CPU glue of the complex element ops (`brotensor_cpu::spectral`). F32 and C64 operands
//! are read as the same interleaved floats.

use brotensor_cpu::fft as cpu_fft;
use brotensor_cpu::spectral as cpu;
use brotensor_cpu::stft::{self as cpu_stft, StftFrames};

use super::CpuBackend;
use crate::backend::{SpectralOps, StftPass, Transform};
use crate::{Dtype, Result, Tensor};

/// The interleaved floats of an F32 or C64 tensor.
fn floats(t: &Tensor) -> &[f32] {
    match t.dtype() {
        Dtype::C64 => bytemuck::cast_slice(t.host_words::<[f32; 2]>()),
        _ => t.host::<f32>(),
    }
}

/// [`floats`], mutable.
fn floats_mut(t: &mut Tensor) -> &mut [f32] {
    match t.dtype() {
        Dtype::C64 => bytemuck::cast_slice_mut(t.host_words_mut::<[f32; 2]>()),
        _ => t.host_mut::<f32>(),
    }
}

impl SpectralOps for CpuBackend {
    fn complex_mul(
        &self,
        _: &'static str,
        [a, b]: [&Tensor; 2],
        y: &mut Tensor,
        _n: usize,
    ) -> Result<()> {
        cpu::complex_mul(floats(a), floats(b), floats_mut(y));
        Ok(())
    }

    fn complex_mul_backward(
        &self,
        _: &'static str,
        [a, b, dy]: [&Tensor; 3],
        [da, db]: [&mut Tensor; 2],
        _n: usize,
    ) -> Result<()> {
        cpu::complex_mul_backward(
            floats(a),
            floats(b),
            floats(dy),
            floats_mut(da),
            floats_mut(db),
        );
        Ok(())
    }

    fn complex_to_real(
        &self,
        _: &'static str,
        z: &Tensor,
        angle: bool,
        y: &mut Tensor,
        _n: usize,
    ) -> Result<()> {
        if angle {
            cpu::complex_angle(floats(z), y.host_mut());
        } else {
            cpu::complex_abs(floats(z), y.host_mut());
        }
        Ok(())
    }

    fn complex_abs_backward(
        &self,
        _: &'static str,
        z: &Tensor,
        dy: &Tensor,
        dz: &mut Tensor,
        _n: usize,
    ) -> Result<()> {
        cpu::complex_abs_backward(floats(z), dy.host(), floats_mut(dz));
        Ok(())
    }

    fn complex_from_polar(
        &self,
        _: &'static str,
        mag: &Tensor,
        phase: &Tensor,
        y: &mut Tensor,
        _n: usize,
    ) -> Result<()> {
        cpu::complex_from_polar(mag.host(), phase.host(), floats_mut(y));
        Ok(())
    }

    fn fft(
        &self,
        _: &'static str,
        transform: Transform,
        x: &Tensor,
        y: &mut Tensor,
        n: usize,
        _rows: usize,
    ) -> Result<()> {
        let (x, y) = (floats(x), floats_mut(y));
        match transform {
            Transform::Fft => cpu_fft::fft_rows(x, y, n, false),
            Transform::Ifft => cpu_fft::fft_rows(x, y, n, true),
            Transform::Rfft => cpu_fft::rfft(x, y, n),
            Transform::Irfft => cpu_fft::irfft(x, y, n),
            Transform::RfftBackward => cpu_fft::rfft_backward(x, y, n),
            Transform::IrfftBackward => cpu_fft::irfft_backward(x, y, n),
        }
        Ok(())
    }

    fn stft(
        &self,
        _: &'static str,
        pass: StftPass,
        x: &Tensor,
        window: &Tensor,
        g: &StftFrames,
        y: &mut Tensor,
    ) -> Result<()> {
        let (x, w, y) = (x.host::<f32>(), window.host::<f32>(), y.host_mut::<f32>());
        match pass {
            StftPass::Stft => cpu_stft::stft(x, w, g, y),
            StftPass::StftBackward => cpu_stft::stft_backward(x, w, g, y),
            StftPass::Istft => cpu_stft::istft(x, w, &cpu_stft::inverse_envelope(w, g), g, y),
            StftPass::IstftBackward => {
                cpu_stft::istft_backward(x, w, &cpu_stft::inverse_envelope(w, g), g, y)
            }
        }
        Ok(())
    }
}
