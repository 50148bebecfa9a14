//! GPU glue of the optimizer steps: the launches of `brotensor_kernels::optim`.

use brotensor_kernels::optim::{self as ko, Adam};
use cubecl::prelude::*;

use super::{float_launch, out_handle, CubeBackend};
use crate::backend::{AdamStep, OptimOps};
use crate::{Result, Tensor};

impl<R: Runtime> OptimOps for CubeBackend<R> {
    fn adam_step(
        &self,
        name: &'static str,
        p: &mut Tensor,
        g: &Tensor,
        (m, v): (&mut Tensor, &mut Tensor),
        master: Option<&mut Tensor>,
        s: AdamStep,
    ) -> Result<()> {
        let (ph, gh, mh, vh) = (out_handle(p), out_handle(g), out_handle(m), out_handle(v));
        let wh = master.as_deref().map(out_handle);
        let len = p.numel();
        let k = Adam {
            lr: s.lr,
            beta1: s.beta1,
            beta2: s.beta2,
            eps: s.eps,
            inv_bc1: s.inv_bc1,
            inv_bc2: s.inv_bc2,
            decay: s.decay,
        };
        let has_master = master.is_some();
        let (dtype, inputs) = (p.dtype(), [g]);
        let (mut written, mut updated): (Vec<&mut Tensor>, Vec<&mut Tensor>) = if has_master {
            (vec![p], vec![])
        } else {
            (vec![], vec![p])
        };
        let op = self.float_op(name, dtype).inputs(&inputs);
        op.written(&mut written).updated(&mut updated).run(
            |i, o| self.adam_step(name, &mut o[0], &i[0], (m, v), master, s),
            float_launch!(|F| ko::launch_adam::<R, F>(
                &self.client,
                (&ph, &gh, &mh, &vh, wh.as_ref()),
                len,
                k
            )),
        )
    }

    fn sgd_step(
        &self,
        name: &'static str,
        p: &mut Tensor,
        g: &Tensor,
        vel: &mut Tensor,
        master: Option<&mut Tensor>,
        lr: f32,
        momentum: f32,
    ) -> Result<()> {
        let (ph, gh, uh) = (out_handle(p), out_handle(g), out_handle(vel));
        let wh = master.as_deref().map(out_handle);
        let len = p.numel();
        let has_master = master.is_some();
        let (dtype, inputs) = (p.dtype(), [g]);
        let (mut written, mut updated): (Vec<&mut Tensor>, Vec<&mut Tensor>) = if has_master {
            (vec![p], vec![])
        } else {
            (vec![], vec![p])
        };
        let op = self.float_op(name, dtype).inputs(&inputs);
        op.written(&mut written).updated(&mut updated).run(
            |i, o| self.sgd_step(name, &mut o[0], &i[0], vel, master, lr, momentum),
            float_launch!(|F| ko::launch_sgd::<R, F>(
                &self.client,
                (&ph, &gh, &uh, wh.as_ref()),
                len,
                (lr, momentum)
            )),
        )
    }
}
