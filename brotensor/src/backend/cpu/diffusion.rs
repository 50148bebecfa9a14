//! CPU glue of the diffusion element ops: `brotensor_cpu::diffusion` on the host buffers.
//! F16 and BF16 run on FP32 copies with each output narrowed once.

use brotensor_cpu::diffusion as df;

use super::conv::{host, in_f32};
use super::CpuBackend;
use crate::backend::{DiffusionOps, StepCoefficients};
use crate::{Result, Tensor};

impl DiffusionOps for CpuBackend {
    fn row_affine(
        &self,
        _name: &'static str,
        x: &Tensor,
        scale: &Tensor,
        shift: Option<&Tensor>,
        one_plus: bool,
        y: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(x), Some(scale), shift], &mut [y], &mut [], |i, o| {
            let shift = i[2].map(|t| t.host());
            df::row_affine(host(i[0]), host(i[1]), shift, one_plus, o[0].host_mut());
            Ok(())
        })
    }

    fn sampler_step(
        &self,
        _name: &'static str,
        x: &Tensor,
        e: &Tensor,
        p: Option<&Tensor>,
        c: StepCoefficients,
        y: &mut Tensor,
        z: Option<&mut Tensor>,
    ) -> Result<()> {
        let mut written: Vec<&mut Tensor> = std::iter::once(y).chain(z).collect();
        in_f32(&[Some(x), Some(e), p], &mut written, &mut [], |i, o| {
            let p = i[2].map(|t| t.host());
            let (y, z) = o.split_at_mut(1);
            let z = z.first_mut().map(|t| t.host_mut());
            df::sampler_step(host(i[0]), host(i[1]), p, c, y[0].host_mut(), z);
            Ok(())
        })
    }

    fn timestep_embedding(
        &self,
        _name: &'static str,
        t: &Tensor,
        freqs: &[f32],
        dim: usize,
        y: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(t)], &mut [y], &mut [], |i, o| {
            df::timestep_embedding(host(i[0]), freqs, dim, o[0].host_mut());
            Ok(())
        })
    }
}
