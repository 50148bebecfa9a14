//! CPU glue of the activation ops (GLU variants, snake).

use brotensor_cpu::activation as act;

use super::CpuBackend;
use crate::backend::{ActivationOps, Glu, SnakeGrads};
use crate::{Result, Tensor};

impl ActivationOps for CpuBackend {
    fn glu_forward(&self, _name: &'static str, op: Glu, x: &Tensor, y: &mut Tensor) -> Result<()> {
        let d = y.cols();
        act::glu_forward(op, x.host(), d, y.host_mut());
        Ok(())
    }

    fn glu_backward(
        &self,
        _name: &'static str,
        op: Glu,
        x: &Tensor,
        dy: &Tensor,
        dx: &mut Tensor,
    ) -> Result<()> {
        let d = dy.cols();
        act::glu_backward(op, x.host(), dy.host(), d, dx.host_mut());
        Ok(())
    }

    fn snake_forward(
        &self,
        _name: &'static str,
        x: &Tensor,
        alpha: &Tensor,
        d: &Tensor,
        l: usize,
        y: &mut Tensor,
    ) -> Result<()> {
        act::snake_forward(x.host(), alpha.host(), d.host(), l, y.host_mut());
        Ok(())
    }

    fn snake_backward(
        &self,
        _name: &'static str,
        x: &Tensor,
        alpha: &Tensor,
        d: &Tensor,
        dy: &Tensor,
        l: usize,
        g: SnakeGrads<'_>,
    ) -> Result<()> {
        act::snake_backward(
            x.host(),
            alpha.host(),
            d.host(),
            dy.host(),
            l,
            g.dx.host_mut(),
            g.ga.host_mut(),
            g.gb.host_mut(),
        );
        Ok(())
    }
}
