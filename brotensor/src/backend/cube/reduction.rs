//! GPU glue of the row and column reductions.

use brotensor_kernels::reduce as rd;
use cubecl::prelude::*;

use super::{float_launch, out_handle, CubeBackend};
use crate::backend::ReductionOps;
use crate::{Dtype, Result, Tensor};

impl<R: Runtime> ReductionOps for CubeBackend<R> {
    fn sum_rows(&self, x: &Tensor, y: &mut Tensor) -> Result<()> {
        let (xh, yh) = (out_handle(x), out_handle(y));
        // The split comes from `y`: rows = y's elements (callers may sum a reshaped view).
        let rows = y.numel();
        let cols = x.numel() / rows.max(1);
        self.float_op("sum_rows", x.dtype())
            .inputs(&[x])
            .written(&mut [y])
            .run(
                |w, o| self.sum_rows(&w[0], &mut o[0]),
                float_launch!(|F| rd::launch_sum_rows::<R, F>(&self.client, &xh, &yh, rows, cols)),
            )
    }

    fn sum_cols(&self, x: &Tensor, y: &mut Tensor) -> Result<()> {
        let (xh, yh) = (out_handle(x), out_handle(y));
        let cols = y.numel();
        let rows = x.numel() / cols.max(1);
        self.float_op("sum_cols", x.dtype())
            .inputs(&[x])
            .written(&mut [y])
            .run(
                |w, o| self.sum_cols(&w[0], &mut o[0]),
                float_launch!(|F| rd::launch_sum_cols::<R, F>(&self.client, &xh, &yh, rows, cols)),
            )
    }

    fn argmax_rows(&self, x: &Tensor, idx: &mut Tensor) -> Result<()> {
        let (xh, ih) = (out_handle(x), out_handle(idx));
        let (rows, cols) = x.shape();
        let i32_indices = idx.dtype() == Dtype::I32;
        let c = &self.client;
        // The indices are not a float output: nothing to narrow.
        self.float_op("argmax_rows", x.dtype()).inputs(&[x]).run(
            |w, _| self.argmax_rows(&w[0], idx),
            float_launch!(|F| if i32_indices {
                rd::launch_argmax_rows::<R, F, i32>(c, &xh, &ih, rows, cols)
            } else {
                rd::launch_argmax_rows::<R, F, f32>(c, &xh, &ih, rows, cols)
            }),
        )
    }

    fn top_k_rows(&self, x: &Tensor, k: usize, vals: &mut Tensor, idx: &mut Tensor) -> Result<()> {
        let (xh, vh, ih) = (out_handle(x), out_handle(vals), out_handle(idx));
        rd::launch_top_k_rows(&self.client, &xh, &vh, &ih, (x.rows(), x.cols(), k))
            .map_err(|e| self.launch_error("top_k_rows", e))
    }

    fn rows_count_above(&self, x: &Tensor, lo: f32, hi: f32, counts: &mut Tensor) -> Result<()> {
        let (xh, ch) = (out_handle(x), out_handle(counts));
        let shape = x.shape();
        // F32 or F16 only: the op refuses BF16.
        self.float_op("rows_count_above", x.dtype())
            .run_native(float_launch!(|F| rd::launch_rows_count_above::<R, F>(
                &self.client,
                &xh,
                &ch,
                shape,
                (lo, hi)
            )))
    }
}
