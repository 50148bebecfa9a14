//! GPU glue of the activation ops (GLU variants, snake).

use brotensor_kernels::glu as gl;
use cubecl::prelude::*;

use super::{float_launch, out_handle, CubeBackend};
use crate::backend::{ActivationOps, Glu, SnakeGrads};
use crate::{Result, Tensor};

/// Calls `$body` with `$O` bound to the kernel type of a [`Glu`].
macro_rules! with_glu {
    ($op:expr, |$O:ident| $body:expr) => {
        match $op {
            Glu::Geglu => {
                type $O = brotensor_kernels::glu::Geglu;
                $body
            }
            Glu::GegluExact => {
                type $O = brotensor_kernels::glu::GegluExact;
                $body
            }
            Glu::Swiglu => {
                type $O = brotensor_kernels::glu::Swiglu;
                $body
            }
        }
    };
}

impl<R: Runtime> ActivationOps for CubeBackend<R> {
    fn glu_forward(&self, name: &'static str, op: Glu, x: &Tensor, y: &mut Tensor) -> Result<()> {
        let (xh, yh) = (out_handle(x), out_handle(y));
        let (rows, d) = y.shape();
        self.float_op(name, x.dtype())
            .inputs(&[x])
            .written(&mut [y])
            .run(
                |w, o| self.glu_forward(name, op, &w[0], &mut o[0]),
                float_launch!(|F| with_glu!(op, |O| {
                    gl::launch_glu_forward::<R, F, O>(&self.client, &xh, &yh, rows, d)
                })),
            )
    }

    fn glu_backward(
        &self,
        name: &'static str,
        op: Glu,
        x: &Tensor,
        dy: &Tensor,
        dx: &mut Tensor,
    ) -> Result<()> {
        let (xh, dyh, dxh) = (out_handle(x), out_handle(dy), out_handle(dx));
        let (rows, d) = dy.shape();
        self.float_op(name, x.dtype())
            .inputs(&[x, dy])
            .written(&mut [dx])
            .run(
                |w, o| self.glu_backward(name, op, &w[0], &w[1], &mut o[0]),
                float_launch!(|F| with_glu!(op, |O| {
                    gl::launch_glu_backward::<R, F, O>(&self.client, &xh, &dyh, &dxh, rows, d)
                })),
            )
    }

    fn snake_forward(
        &self,
        name: &'static str,
        x: &Tensor,
        alpha: &Tensor,
        d: &Tensor,
        l: usize,
        y: &mut Tensor,
    ) -> Result<()> {
        let h = [x, alpha, d, y].map(out_handle);
        brotensor_kernels::snake::launch_snake_forward::<R>(
            &self.client,
            &h[0],
            &h[1],
            &h[2],
            &h[3],
            x.numel(),
            alpha.numel(),
            l,
        )
        .map_err(|e| self.launch_error(name, e))
    }

    fn snake_backward(
        &self,
        name: &'static str,
        x: &Tensor,
        alpha: &Tensor,
        d: &Tensor,
        dy: &Tensor,
        l: usize,
        g: SnakeGrads<'_>,
    ) -> Result<()> {
        let h = [x, alpha, d, dy, &*g.dx, &*g.ga, &*g.gb].map(out_handle);
        brotensor_kernels::snake::launch_snake_backward::<R>(
            &self.client,
            &h[0],
            &h[1],
            &h[2],
            &h[3],
            &h[4],
            &h[5],
            &h[6],
            (x.numel(), alpha.numel(), l),
        )
        .map_err(|e| self.launch_error(name, e))
    }
}
