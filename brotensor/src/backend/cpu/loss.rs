//! CPU glue of the fused losses.

use brotensor_cpu::loss as ls;

use super::CpuBackend;
use crate::backend::{LossIo, LossOps};
use crate::{Result, Tensor};

impl LossOps for CpuBackend {
    fn xent(&self, io: LossIo<'_>, offsets: &[usize]) -> Result<()> {
        let cols = io.logits.cols();
        let heads = offsets.len().saturating_sub(1);
        let mut per_head = vec![0.0f32; io.logits.rows() * heads];
        // Per head, so the (rows, heads) losses come out separately.
        for h in 0..heads {
            let mut one = vec![0.0f32; io.logits.rows()];
            ls::xent_batched(
                io.logits.host(),
                io.target.host(),
                io.mask.map(|m| m.host::<f32>()),
                cols,
                &offsets[h..h + 2],
                io.probs.host_mut(),
                io.dlogits.host_mut(),
                &mut one,
            );
            for (r, v) in one.into_iter().enumerate() {
                per_head[r * heads + h] = v;
            }
        }
        io.loss.host_mut::<f32>().copy_from_slice(&per_head);
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
