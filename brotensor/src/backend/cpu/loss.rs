//! CPU glue of the fused losses.

use brotensor_cpu::loss as ls;

use super::CpuBackend;
use crate::backend::{LossIo, LossOps};
use crate::{Result, Tensor};

impl LossOps for CpuBackend {
    fn xent(&self, io: LossIo<'_>, offsets: &[usize]) -> Result<()> {
        ls::xent_heads(
            io.logits.host(),
            io.target.host(),
            io.mask.map(|m| m.host::<f32>()),
            (io.logits.rows(), io.logits.cols()),
            offsets,
            io.probs.host_mut(),
            io.dlogits.host_mut(),
            io.loss.host_mut(),
        );
        Ok(())
    }

    fn bce(&self, io: LossIo<'_>, pos_weight: f32) -> Result<()> {
        ls::bce_with_logits(
            io.logits.host(),
            io.target.host(),
            io.mask.map(|m| m.host::<f32>()),
            io.logits.cols(),
            pos_weight,
            io.probs.host_mut(),
            io.dlogits.host_mut(),
            io.loss.host_mut(),
        );
        Ok(())
    }

    fn squared_error_sum(&self, pred: &Tensor, target: &Tensor) -> Result<f64> {
        Ok(ls::squared_error_sum(pred.host(), target.host()))
    }
}
