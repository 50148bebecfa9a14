//! GPU glue of the fused losses.

use brotensor_kernels::loss::{self as lk, LossBuffers};
use cubecl::prelude::*;

use super::{gpu, out_handle, CubeBackend};
use crate::backend::{Backend, LossIo, LossOps};
use crate::{Error, Result, Tensor};

impl<R: Runtime> LossOps for CubeBackend<R> {
    fn xent(&self, io: LossIo<'_>, offsets: &[usize]) -> Result<()> {
        let offs: Vec<u32> = offsets
            .iter()
            .map(|&o| {
                u32::try_from(o)
                    .map_err(|_| Error::invalid("softmax_xent", "head offset exceeds u32"))
            })
            .collect::<Result<_>>()?;
        let offs = self.upload(bytemuck::cast_slice(&offs))?;
        let (rows, cols, heads) = (
            io.logits.rows(),
            io.logits.cols(),
            offsets.len().saturating_sub(1),
        );
        let hs = [io.logits, io.target].map(out_handle);
        let mh = io.mask.map(out_handle);
        let (ph, dh, lh) = (
            out_handle(io.probs),
            out_handle(io.dlogits),
            out_handle(io.loss),
        );
        let bufs = LossBuffers {
            logits: &hs[0],
            target: &hs[1],
            mask: mh.as_ref(),
            probs: &ph,
            dlogits: &dh,
            loss: &lh,
        };
        lk::launch_xent(&self.client, bufs, gpu(&offs), (rows, cols, heads))
            .map_err(|e| self.launch_error("softmax_xent", e))
    }

    fn bce(&self, io: LossIo<'_>, pos_weight: f32) -> Result<()> {
        let hs = [io.logits, io.target].map(out_handle);
        let mh = io.mask.map(out_handle);
        let (ph, dh, lh) = (
            out_handle(io.probs),
            out_handle(io.dlogits),
            out_handle(io.loss),
        );
        let bufs = LossBuffers {
            logits: &hs[0],
            target: &hs[1],
            mask: mh.as_ref(),
            probs: &ph,
            dlogits: &dh,
            loss: &lh,
        };
        lk::launch_bce(&self.client, bufs, io.logits.shape(), pos_weight)
            .map_err(|e| self.launch_error("bce_with_logits_fused_batched", e))
    }

    fn squared_error_sum(&self, pred: &Tensor, target: &Tensor) -> Result<f64> {
        let n = pred.numel();
        if n == 0 {
            return Ok(0.0);
        }
        let parts = n.div_ceil(lk::SQUARED_ERROR_PART);
        let partials = self.alloc(parts * 4)?;
        lk::launch_squared_error_parts(
            &self.client,
            &out_handle(pred),
            &out_handle(target),
            gpu(&partials),
            n,
        )
        .map_err(|e| self.launch_error("mse_vec_forward", e))?;
        let bytes = self.download(&partials, parts * 4)?;
        let sums: &[f32] = bytemuck::cast_slice(&bytes);
        Ok(sums.iter().map(|&s| f64::from(s)).sum())
    }
}
