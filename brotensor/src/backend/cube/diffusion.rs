//! GPU glue of the diffusion element ops: the launches of `brotensor_kernels::diffusion`.

use brotensor_kernels::diffusion::{self as kd, Step};
use cubecl::prelude::*;

use super::{float_launch, out_handle, CubeBackend};
use crate::backend::{DiffusionOps, StepCoefficients};
use crate::{Result, Tensor};

impl<R: Runtime> DiffusionOps for CubeBackend<R> {
    fn row_affine(
        &self,
        name: &'static str,
        x: &Tensor,
        scale: &Tensor,
        shift: Option<&Tensor>,
        one_plus: bool,
        y: &mut Tensor,
    ) -> Result<()> {
        let (xh, sh, yh) = (out_handle(x), out_handle(scale), out_handle(y));
        let th = shift.map(out_handle);
        let (len, d) = (x.numel(), scale.numel());
        let inputs: Vec<&Tensor> = [Some(x), Some(scale), shift]
            .into_iter()
            .flatten()
            .collect();
        self.float_op(name, x.dtype())
            .inputs(&inputs)
            .written(&mut [y])
            .run(
                |i, o| self.row_affine(name, &i[0], &i[1], i.get(2), one_plus, &mut o[0]),
                float_launch!(|F| kd::launch_row_affine::<R, F>(
                    &self.client,
                    (&xh, &sh, th.as_ref(), &yh),
                    len,
                    d,
                    one_plus
                )),
            )
    }

    fn sampler_step(
        &self,
        name: &'static str,
        x: &Tensor,
        e: &Tensor,
        p: Option<&Tensor>,
        c: StepCoefficients,
        y: &mut Tensor,
        z: Option<&mut Tensor>,
    ) -> Result<()> {
        let (xh, eh, yh) = (out_handle(x), out_handle(e), out_handle(y));
        let (ph, zh) = (p.map(out_handle), z.as_deref().map(out_handle));
        let len = x.numel();
        let step = Step {
            cx: c.cx,
            ce: c.ce,
            cp: c.cp,
            z_ce: c.z_ce,
        };
        let inputs: Vec<&Tensor> = [Some(x), Some(e), p].into_iter().flatten().collect();
        let mut written: Vec<&mut Tensor> = std::iter::once(y).chain(z).collect();
        self.float_op(name, x.dtype())
            .inputs(&inputs)
            .written(&mut written)
            .run(
                |i, o| {
                    let (y, z) = o.split_at_mut(1);
                    self.sampler_step(name, &i[0], &i[1], i.get(2), c, &mut y[0], z.first_mut())
                },
                float_launch!(|F| kd::launch_sampler_step::<R, F>(
                    &self.client,
                    (&xh, &eh, ph.as_ref()),
                    (&yh, zh.as_ref()),
                    len,
                    step
                )),
            )
    }

    fn timestep_embedding(
        &self,
        name: &'static str,
        t: &Tensor,
        freqs: &[f32],
        dim: usize,
        y: &mut Tensor,
    ) -> Result<()> {
        let (th, yh) = (out_handle(t), out_handle(y));
        let n = t.numel();
        self.float_op(name, t.dtype())
            .inputs(&[t])
            .written(&mut [y])
            .run(
                |i, o| self.timestep_embedding(name, &i[0], freqs, dim, &mut o[0]),
                float_launch!(|F| kd::launch_timestep_embedding::<R, F>(
                    &self.client,
                    (&th, &yh),
                    freqs,
                    (n, dim)
                )),
            )
    }
}
