//! GPU glue of the complex element ops: the product through the algebra family's complex
//! map kernel, the rest through `brotensor_kernels::spectral`. F32 and C64 buffers are the
//! same interleaved floats.

use brotensor_cpu::stft::StftFrames;
use brotensor_kernels::algebra::map::{launch_complex_map, ComplexMap};
use brotensor_kernels::fft::{launch_fft, launch_stft, FftKind, StftKind, StftShape};
use brotensor_kernels::spectral as ks;
use cubecl::prelude::*;

use super::{out_handle, CubeBackend};
use crate::backend::{SpectralOps, StftPass, Transform};
use crate::{Result, Tensor};

impl<R: Runtime> SpectralOps for CubeBackend<R> {
    fn complex_mul(
        &self,
        name: &'static str,
        [a, b]: [&Tensor; 2],
        y: &mut Tensor,
        n: usize,
    ) -> Result<()> {
        let (ah, bh, yh) = (out_handle(a), out_handle(b), out_handle(y));
        launch_complex_map::<R, f32>(&self.client, ComplexMap::Mul, &[&ah, &bh], &yh, n, false)
            .map_err(|e| self.launch_error(name, e))
    }

    fn complex_mul_backward(
        &self,
        name: &'static str,
        [a, b, dy]: [&Tensor; 3],
        [da, db]: [&mut Tensor; 2],
        n: usize,
    ) -> Result<()> {
        let h = [a, b, dy, &*da, &*db].map(out_handle);
        ks::launch_complex_mul_backward::<R>(&self.client, (&h[0], &h[1], &h[2]), (&h[3], &h[4]), n)
            .map_err(|e| self.launch_error(name, e))
    }

    fn complex_to_real(
        &self,
        name: &'static str,
        z: &Tensor,
        angle: bool,
        y: &mut Tensor,
        n: usize,
    ) -> Result<()> {
        let (zh, yh) = (out_handle(z), out_handle(y));
        ks::launch_complex_to_real::<R>(&self.client, (&zh, &yh), n, angle)
            .map_err(|e| self.launch_error(name, e))
    }

    fn complex_abs_backward(
        &self,
        name: &'static str,
        z: &Tensor,
        dy: &Tensor,
        dz: &mut Tensor,
        n: usize,
    ) -> Result<()> {
        let h = [z, dy, &*dz].map(out_handle);
        ks::launch_complex_abs_backward::<R>(&self.client, (&h[0], &h[1]), &h[2], n)
            .map_err(|e| self.launch_error(name, e))
    }

    fn complex_from_polar(
        &self,
        name: &'static str,
        mag: &Tensor,
        phase: &Tensor,
        y: &mut Tensor,
        n: usize,
    ) -> Result<()> {
        let h = [mag, phase, &*y].map(out_handle);
        ks::launch_complex_from_polar::<R>(&self.client, (&h[0], &h[1]), &h[2], n)
            .map_err(|e| self.launch_error(name, e))
    }

    fn fft(
        &self,
        name: &'static str,
        transform: Transform,
        x: &Tensor,
        y: &mut Tensor,
        n: usize,
        rows: usize,
    ) -> Result<()> {
        let kind = match transform {
            Transform::Fft => FftKind::Fft,
            Transform::Ifft => FftKind::Ifft,
            Transform::Rfft => FftKind::Rfft,
            Transform::Irfft => FftKind::Irfft,
            Transform::RfftBackward => FftKind::RfftBackward,
            Transform::IrfftBackward => FftKind::IrfftBackward,
        };
        let (xh, yh) = (out_handle(x), out_handle(y));
        launch_fft::<R>(&self.client, kind, (&xh, &yh), n, rows)
            .map_err(|e| self.launch_error(name, e))
    }

    fn stft(
        &self,
        name: &'static str,
        pass: StftPass,
        x: &Tensor,
        window: &Tensor,
        g: &StftFrames,
        y: &mut Tensor,
    ) -> Result<()> {
        let kind = match pass {
            StftPass::Stft => StftKind::Stft,
            StftPass::StftBackward => StftKind::StftBackward,
            StftPass::Istft => StftKind::Istft,
            StftPass::IstftBackward => StftKind::IstftBackward,
        };
        // The signals are the input of the forward passes and the output of the others.
        let signal_numel = match pass {
            StftPass::Stft | StftPass::IstftBackward => x.numel(),
            StftPass::StftBackward | StftPass::Istft => y.numel(),
        };
        let shape = StftShape {
            signals: signal_numel / g.signal_len,
            len: g.signal_len,
            frames: g.frames,
            n_fft: g.n_fft,
            hop: g.hop,
            win: g.win_length,
            center: g.center,
            norm: g.norm(),
        };
        let h = [x, window, &*y].map(out_handle);
        launch_stft::<R>(&self.client, kind, (&h[0], &h[1], &h[2]), &shape)
            .map_err(|e| self.launch_error(name, e))
    }
}
