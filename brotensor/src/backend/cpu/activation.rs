//! CPU glue of the activation ops (GLU variants, snake). The gated units run on F16 and BF16
//! blocks of rows in parallel through FP32 (`dtype_policy::par_rows`); snake is F32 only.

use brotensor_cpu::activation as act;

use super::dtype_policy::{is_half, par_rows, with_half, Narrowed};
use super::CpuBackend;
use crate::backend::{ActivationOps, Glu, SnakeGrads};
use crate::{Dtype, Result, Tensor};

impl ActivationOps for CpuBackend {
    fn glu_forward(&self, _name: &'static str, op: Glu, x: &Tensor, y: &mut Tensor) -> Result<()> {
        let d = y.cols();
        if is_half(x.dtype()) {
            let rows = y.numel() / d.max(1);
            with_half!(x.dtype(), |E| par_rows::<E>(
                rows,
                &[(x, 2 * d)],
                &mut [(Narrowed::written(y), d)],
                |_, i, o| act::glu_forward(op, i[0], d, o[0])
            ));
            return Ok(());
        }
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
        if is_half(x.dtype()) {
            let rows = dy.numel() / d.max(1);
            with_half!(x.dtype(), |E| par_rows::<E>(
                rows,
                &[(x, 2 * d), (dy, d)],
                &mut [(Narrowed::written(dx), 2 * d)],
                |_, i, o| act::glu_backward(op, i[0], i[1], d, o[0])
            ));
            return Ok(());
        }
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
