//! CPU glue of the embedding category.

use brotensor_cpu::{embedding as emb, half_float as hf};

use super::concat::{by_width, bytes, bytes_mut, width};
use super::dtype_policy::{is_half, with_half};
use super::CpuBackend;
use crate::backend::EmbeddingOps;
use crate::{Dtype, Result, Tensor};

impl EmbeddingOps for CpuBackend {
    fn count_bad_ids(&self, _op: &'static str, ids: &Tensor, rows: usize) -> Result<usize> {
        Ok(emb::count_bad_ids(ids.host(), rows))
    }

    fn gather_rows(&self, x: &Tensor, ids: &Tensor, y: &mut Tensor) -> Result<()> {
        let (w, cols) = (width(x), x.cols());
        let (src, ids) = (bytes(x), ids.host::<i32>());
        by_width!(w, |T| emb::gather_rows::<T>(
            bytemuck::cast_slice(src),
            cols,
            ids,
            bytemuck::cast_slice_mut(bytes_mut(y)),
        ));
        Ok(())
    }

    fn scatter_rows(&self, y: &Tensor, ids: &Tensor, x: &mut Tensor) -> Result<()> {
        let (w, cols) = (width(y), y.cols());
        let (src, ids) = (bytes(y), ids.host::<i32>());
        by_width!(w, |T| emb::scatter_rows::<T>(
            bytemuck::cast_slice(src),
            cols,
            ids,
            bytemuck::cast_slice_mut(bytes_mut(x)),
        ));
        Ok(())
    }

    fn scatter_rows_add(&self, dy: &Tensor, ids: &Tensor, dx: &mut Tensor) -> Result<()> {
        if is_half(dx.dtype()) {
            // Each row of `dx` an id hits is widened, added to in FP32 and rounded once.
            with_half!(dx.dtype(), |E| hf::scatter_rows_add(
                dy.host::<E>(),
                dy.cols(),
                ids.host(),
                dx.host_mut::<E>()
            ));
            return Ok(());
        }
        emb::scatter_rows_add(dy.host(), dy.cols(), ids.host(), dx.host_mut());
        Ok(())
    }
}
