//! CPU glue of the row and column reductions.

use brotensor_cpu::{cast as cpu_cast, reduction as red};
use half::f16;

use super::CpuBackend;
use crate::backend::ReductionOps;
use crate::{Dtype, Result, Tensor};

impl ReductionOps for CpuBackend {
    fn sum_rows(&self, x: &Tensor, y: &mut Tensor) -> Result<()> {
        // The split comes from `y`: callers may sum a reshaped view.
        red::sum_rows(x.host(), x.numel() / y.numel().max(1), y.host_mut());
        Ok(())
    }

    fn sum_cols(&self, x: &Tensor, y: &mut Tensor) -> Result<()> {
        red::sum_cols(x.host(), x.numel() / y.numel().max(1), y.host_mut());
        Ok(())
    }

    fn argmax_rows(&self, x: &Tensor, idx: &mut Tensor) -> Result<()> {
        let shape = (x.rows(), x.cols());
        match idx.dtype() {
            Dtype::I32 => red::argmax_rows_into(x.host(), shape, idx.host_mut(), |i| i as i32),
            _ => red::argmax_rows_into(x.host(), shape, idx.host_mut(), |i| i as f32),
        }
        Ok(())
    }

    fn top_k_rows(&self, x: &Tensor, k: usize, vals: &mut Tensor, idx: &mut Tensor) -> Result<()> {
        red::top_k_rows(x.host(), x.cols(), k, vals.host_mut(), idx.host_mut());
        Ok(())
    }

    fn rows_count_above(&self, x: &Tensor, lo: f32, hi: f32, counts: &mut Tensor) -> Result<()> {
        let wide;
        let values: &[f32] = match x.dtype() {
            Dtype::F16 => {
                let mut w = vec![0.0f32; x.numel()];
                cpu_cast::convert(x.host::<f16>(), &mut w);
                wide = w;
                &wide
            }
            _ => x.host(),
        };
        red::rows_count_above(values, x.cols(), lo, hi, counts.host_mut());
        Ok(())
    }
}
