//! CPU glue of the optimizer steps: `brotensor_cpu::optim` on the host buffers. F16 and BF16
//! parameters run on FP32 copies, narrowed once; the state and master copies are F32.

use brotensor_cpu::optim as op;

use super::conv::{host, in_f32};
use super::CpuBackend;
use crate::backend::{AdamStep, OptimOps};
use crate::{Result, Tensor};

/// The parameter's slot: the master copy when there is one (the update runs on it), then
/// `p` its rounding; else `p` itself, read and updated.
fn update_param(
    p: &mut Tensor,
    g: &Tensor,
    master: Option<&mut Tensor>,
    step: impl FnOnce(&mut [f32], &[f32]),
) -> Result<()> {
    match master {
        Some(master) => in_f32(&[Some(g)], &mut [p], &mut [], |i, o| {
            let w = master.host_mut::<f32>();
            step(w, host(i[0]));
            o[0].host_mut::<f32>().copy_from_slice(w);
            Ok(())
        }),
        None => in_f32(&[Some(g)], &mut [], &mut [p], |i, o| {
            step(o[0].host_mut(), host(i[0]));
            Ok(())
        }),
    }
}

impl OptimOps for CpuBackend {
    fn adam_step(
        &self,
        _name: &'static str,
        p: &mut Tensor,
        g: &Tensor,
        (m, v): (&mut Tensor, &mut Tensor),
        master: Option<&mut Tensor>,
        s: AdamStep,
    ) -> Result<()> {
        let (m, v) = (m.host_mut::<f32>(), v.host_mut::<f32>());
        update_param(p, g, master, |p, g| op::adam_step(p, g, m, v, &s))
    }

    fn sgd_step(
        &self,
        _name: &'static str,
        p: &mut Tensor,
        g: &Tensor,
        vel: &mut Tensor,
        master: Option<&mut Tensor>,
        lr: f32,
        momentum: f32,
    ) -> Result<()> {
        let vel = vel.host_mut::<f32>();
        update_param(p, g, master, |p, g| op::sgd_step(p, g, vel, lr, momentum))
    }
}
