//! GPU glue of the activation ops (GLU variants, snake).

use brotensor_kernels::glu as gl;
use cubecl::prelude::*;
use half::{bf16, f16};

use super::{out_handle, with_float, CubeBackend, Narrowed};
use crate::backend::{ActivationOps, Glu, SnakeGrads};
use crate::{Dtype, Result, Tensor};

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
        if self.words(x.dtype()) {
            return self.through_f32(&[x], &mut [Narrowed::written(y)], |w, o| {
                self.glu_forward(name, op, &w[0], &mut o[0])
            });
        }
        let (xh, yh) = (out_handle(x), out_handle(y));
        let (rows, d) = y.shape();
        with_glu!(op, |O| with_float!(x.dtype(), |F| {
            gl::launch_glu_forward::<R, F, O>(&self.client, &xh, &yh, rows, d)
        }))
        .map_err(|e| self.launch_error(name, e))
    }

    fn glu_backward(
        &self,
        name: &'static str,
        op: Glu,
        x: &Tensor,
        dy: &Tensor,
        dx: &mut Tensor,
    ) -> Result<()> {
        if self.words(x.dtype()) {
            return self.through_f32(&[x, dy], &mut [Narrowed::written(dx)], |w, o| {
                self.glu_backward(name, op, &w[0], &w[1], &mut o[0])
            });
        }
        let (xh, dyh, dxh) = (out_handle(x), out_handle(dy), out_handle(dx));
        let (rows, d) = dy.shape();
        with_glu!(op, |O| with_float!(x.dtype(), |F| {
            gl::launch_glu_backward::<R, F, O>(&self.client, &xh, &dyh, &dxh, rows, d)
        }))
        .map_err(|e| self.launch_error(name, e))
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
