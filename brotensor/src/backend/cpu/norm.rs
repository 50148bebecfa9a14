//! CPU glue of the normalizations (softmax, batch, group, layer and RMS norms).

use brotensor_cpu::norm as nm;

use super::CpuBackend;
use crate::backend::{BatchNormStats, LayerNormCaches, NormOps, Src};
use crate::{Result, Tensor};

impl NormOps for CpuBackend {
    fn softmax(
        &self,
        x: Src<'_>,
        mask: Option<&Tensor>,
        out: &mut Tensor,
        cols: usize,
    ) -> Result<()> {
        let mask = mask.map(|m| m.host::<f32>());
        match x {
            Src::Tensor(x) => nm::softmax_rows(x.host(), cols, mask, out.host_mut()),
            Src::Out => {
                let x = out.host::<f32>().to_vec();
                nm::softmax_rows(&x, cols, mask, out.host_mut());
            }
        }
        Ok(())
    }

    fn softmax_backward(
        &self,
        p: &Tensor,
        dp: &Tensor,
        dl: &mut Tensor,
        cols: usize,
    ) -> Result<()> {
        nm::softmax_rows_backward(p.host(), dp.host(), cols, dl.host_mut());
        Ok(())
    }

    fn batch_norm_train(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        beta: &Tensor,
        n_hw: (usize, usize),
        eps_momentum: (f32, f32),
        stats: BatchNormStats<'_>,
        y: &mut Tensor,
    ) -> Result<()> {
        let s = nm::BatchNormStats {
            running_mean: stats.running_mean.host_mut(),
            running_var: stats.running_var.host_mut(),
            saved_mean: stats.saved_mean.host_mut(),
            saved_rstd: stats.saved_rstd.host_mut(),
        };
        let (x, g, b) = (x.host(), gamma.host(), beta.host());
        nm::batch_norm_train(x, g, b, n_hw, eps_momentum, s, y.host_mut());
        Ok(())
    }

    fn batch_norm_inference(
        &self,
        x: &Tensor,
        (gamma, beta, mean, var): (&Tensor, &Tensor, &Tensor, &Tensor),
        hw: usize,
        eps: f32,
        y: &mut Tensor,
    ) -> Result<()> {
        let affine = (gamma.host(), beta.host());
        let running = (mean.host(), var.host());
        nm::batch_norm_inference(x.host(), affine, running, hw, eps, y.host_mut());
        Ok(())
    }

    fn batch_norm_backward(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        (mean, rstd): (&Tensor, &Tensor),
        dy: &Tensor,
        n_hw: (usize, usize),
        dx: &mut Tensor,
        dgamma: &mut Tensor,
        dbeta: &mut Tensor,
    ) -> Result<()> {
        nm::batch_norm_backward(
            x.host(),
            gamma.host(),
            (mean.host(), rstd.host()),
            dy.host(),
            n_hw,
            dx.host_mut(),
            dgamma.host_mut(),
            dbeta.host_mut(),
        );
        Ok(())
    }

    fn group_norm(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        beta: &Tensor,
        groups_hw: (usize, usize),
        eps: f32,
        y: &mut Tensor,
    ) -> Result<()> {
        let (x, g, b) = (x.host(), gamma.host(), beta.host());
        nm::group_norm_rows(x, g, b, groups_hw, eps, y.host_mut());
        Ok(())
    }

    fn group_norm_backward(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        dy: &Tensor,
        groups_hw: (usize, usize),
        eps: f32,
        dx: &mut Tensor,
        (part_g, part_b): (&mut Tensor, &mut Tensor),
    ) -> Result<()> {
        let (x, g, dy) = (x.host(), gamma.host(), dy.host());
        let parts = (part_g.host_mut(), part_b.host_mut());
        nm::group_norm_rows_backward(x, g, dy, groups_hw, eps, dx.host_mut(), parts);
        Ok(())
    }

    fn layernorm(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        beta: &Tensor,
        eps: f32,
        y: &mut Tensor,
        caches: Option<LayerNormCaches<'_>>,
    ) -> Result<()> {
        let (xhat, mean, rstd) = match caches {
            Some(c) => (
                Some(c.xhat.host_mut()),
                Some(c.mean.host_mut()),
                Some(c.rstd.host_mut()),
            ),
            None => (None, None, None),
        };
        nm::layernorm_rows(
            x.host(),
            gamma.host(),
            beta.host(),
            eps,
            y.host_mut(),
            xhat,
            mean,
            rstd,
        );
        Ok(())
    }

    fn layernorm_backward(
        &self,
        dy: &Tensor,
        xhat: &Tensor,
        gamma: &Tensor,
        rstd: &Tensor,
        dx: &mut Tensor,
        dgamma: &mut Tensor,
        dbeta: &mut Tensor,
    ) -> Result<()> {
        nm::layernorm_rows_backward(
            dy.host(),
            xhat.host(),
            gamma.host(),
            rstd.host(),
            dx.host_mut(),
            dgamma.host_mut(),
            dbeta.host_mut(),
        );
        Ok(())
    }

    fn rms_norm(&self, x: &Tensor, gamma: &Tensor, eps: f32, y: &mut Tensor) -> Result<()> {
        nm::rms_norm_rows(x.host(), gamma.host(), eps, y.host_mut());
        Ok(())
    }

    fn rms_norm_backward(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        dy: &Tensor,
        eps: f32,
        dx: &mut Tensor,
        dgamma: Option<&mut Tensor>,
    ) -> Result<()> {
        nm::rms_norm_rows_backward(
            x.host(),
            gamma.host(),
            dy.host(),
            eps,
            dx.host_mut(),
            dgamma.map(|d| d.host_mut()),
        );
        Ok(())
    }
}
