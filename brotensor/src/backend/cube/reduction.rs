//! GPU glue of the row and column reductions.

use brotensor_kernels::reduce as rd;
use cubecl::prelude::*;
use half::{bf16, f16};

use super::{out_handle, with_float, CubeBackend, Narrowed};
use crate::backend::ReductionOps;
use crate::{Dtype, Result, Tensor};

impl<R: Runtime> ReductionOps for CubeBackend<R> {
    fn sum_rows(&self, x: &Tensor, y: &mut Tensor) -> Result<()> {
        if self.words(x.dtype()) {
            return self.through_f32(&[x], &mut [Narrowed::written(y)], |w, o| {
                self.sum_rows(&w[0], &mut o[0])
            });
        }
        let (xh, yh) = (out_handle(x), out_handle(y));
        // The split comes from `y`: rows = y's elements (callers may sum a reshaped view).
        let rows = y.numel();
        let cols = x.numel() / rows.max(1);
        with_float!(x.dtype(), |F| rd::launch_sum_rows::<R, F>(
            &self.client,
            &xh,
            &yh,
            rows,
            cols
        ))
        .map_err(|e| self.launch_error("sum_rows", e))
    }

    fn sum_cols(&self, x: &Tensor, y: &mut Tensor) -> Result<()> {
        if self.words(x.dtype()) {
            return self.through_f32(&[x], &mut [Narrowed::written(y)], |w, o| {
                self.sum_cols(&w[0], &mut o[0])
            });
        }
        let (xh, yh) = (out_handle(x), out_handle(y));
        let cols = y.numel();
        let rows = x.numel() / cols.max(1);
        with_float!(x.dtype(), |F| rd::launch_sum_cols::<R, F>(
            &self.client,
            &xh,
            &yh,
            rows,
            cols
        ))
        .map_err(|e| self.launch_error("sum_cols", e))
    }

    fn argmax_rows(&self, x: &Tensor, idx: &mut Tensor) -> Result<()> {
        if self.words(x.dtype()) {
            // The indices are not a float output: nothing to narrow.
            return self.through_f32(&[x], &mut [], |w, _| self.argmax_rows(&w[0], idx));
        }
        let (xh, ih) = (out_handle(x), out_handle(idx));
        let (rows, cols) = x.shape();
        let c = &self.client;
        with_float!(x.dtype(), |F| match idx.dtype() {
            Dtype::I32 => rd::launch_argmax_rows::<R, F, i32>(c, &xh, &ih, rows, cols),
            _ => rd::launch_argmax_rows::<R, F, f32>(c, &xh, &ih, rows, cols),
        })
        .map_err(|e| self.launch_error("argmax_rows", e))
    }

    fn top_k_rows(&self, x: &Tensor, k: usize, vals: &mut Tensor, idx: &mut Tensor) -> Result<()> {
        let (xh, vh, ih) = (out_handle(x), out_handle(vals), out_handle(idx));
        rd::launch_top_k_rows(&self.client, &xh, &vh, &ih, (x.rows(), x.cols(), k))
            .map_err(|e| self.launch_error("top_k_rows", e))
    }

    fn rows_count_above(&self, x: &Tensor, lo: f32, hi: f32, counts: &mut Tensor) -> Result<()> {
        let (xh, ch) = (out_handle(x), out_handle(counts));
        let shape = x.shape();
        with_float!(x.dtype(), |F| rd::launch_rows_count_above::<R, F>(
            &self.client,
            &xh,
            &ch,
            shape,
            (lo, hi)
        ))
        .map_err(|e| self.launch_error("rows_count_above", e))
    }
}
