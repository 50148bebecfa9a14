//! GPU glue of the embedding category.
//!
//! Ids are checked on the device: a small kernel counts the ids outside the table into one
//! `u32` per 1 Mi ids, and the op reads that back (4 bytes for up to 1 Mi ids). The read is
//! the check's cost: it waits for the work queued before it (one round trip per op).

use brotensor_kernels::embedding as k;
use cubecl::prelude::*;

use super::concat::{scaled, word_width};
use super::{out_handle, CubeBackend};
use crate::backend::EmbeddingOps;
use crate::{Dtype, Result, Tensor};

impl<R: Runtime> EmbeddingOps for CubeBackend<R> {
    fn count_bad_ids(&self, op: &'static str, ids: &Tensor, rows: usize) -> Result<usize> {
        let (partial, n) =
            k::launch_count_bad_ids(&self.client, &out_handle(ids), ids.numel(), rows)
                .map_err(|e| self.launch_error(op, e))?;
        let bytes = self
            .client
            .read_one(partial)
            .map_err(|e| self.gpu_error(op, format!("{e:?}")))?;
        Ok(bytemuck::cast_slice::<u8, u32>(&bytes[..n * 4])
            .iter()
            .map(|&c| c as usize)
            .sum())
    }

    fn gather_rows(&self, x: &Tensor, ids: &Tensor, y: &mut Tensor) -> Result<()> {
        const OP: &str = "gather_rows";
        let (w, f) = word_width(OP, x)?;
        let shape = (x.rows(), scaled(OP, x.cols(), f)?, ids.numel());
        let (xh, ih, yh) = (out_handle(x), out_handle(ids), out_handle(y));
        k::launch_gather_rows(&self.client, &xh, &ih, &yh, shape, w)
            .map_err(|e| self.launch_error(OP, e))
    }

    fn scatter_rows(&self, y: &Tensor, ids: &Tensor, x: &mut Tensor) -> Result<()> {
        const OP: &str = "scatter_rows";
        let (w, f) = word_width(OP, x)?;
        let shape = (x.rows(), scaled(OP, x.cols(), f)?, ids.numel());
        let (yh, ih, xh) = (out_handle(y), out_handle(ids), out_handle(x));
        k::launch_scatter_rows(&self.client, &yh, &ih, &xh, shape, w)
            .map_err(|e| self.launch_error(OP, e))
    }

    fn scatter_rows_add(&self, dy: &Tensor, ids: &Tensor, dx: &mut Tensor) -> Result<()> {
        if dy.dtype() != Dtype::F32 {
            // FP32 sums: 16-bit gradients add up in F32 copies and round once.
            return self.through_f32(&[dy], &mut [], &mut [dx], |w, o| {
                self.scatter_rows_add(&w[0], ids, &mut o[0])
            });
        }
        let shape = (dx.rows(), dx.cols(), ids.numel());
        let (yh, ih, xh) = (out_handle(dy), out_handle(ids), out_handle(dx));
        k::launch_scatter_add_rows(&self.client, &yh, &ih, &xh, shape)
            .map_err(|e| self.launch_error("scatter_rows_add", e))
    }
}
