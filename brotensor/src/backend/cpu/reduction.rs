//! CPU glue of the row and column reductions. On F16 and BF16 the sums, argmax and counts
//! read blocks of rows widened to FP32 (`dtype_policy::par_rows` for the row sums,
//! `dtype_policy::by_rows` where column sums or per-row results of another type are kept
//! across blocks), with FP32 partial sums, each sum rounded once into the 16-bit output.

use brotensor_cpu::cast::FloatElem;
use brotensor_cpu::reduction as red;

use super::dtype_policy::{by_rows, is_half, par_rows, store_f32, with_half, Narrowed};
use super::CpuBackend;
use crate::backend::ReductionOps;
use crate::{Dtype, Element, Result, Tensor};

impl ReductionOps for CpuBackend {
    fn sum_rows(&self, x: &Tensor, y: &mut Tensor) -> Result<()> {
        // The split comes from `y`: callers may sum a reshaped view.
        let cols = x.numel() / y.numel().max(1);
        if is_half(x.dtype()) {
            let rows = y.numel();
            with_half!(x.dtype(), |E| par_rows::<E>(
                rows,
                &[(x, cols)],
                &mut [(Narrowed::written(y), 1)],
                |_, i, o| red::sum_rows(i[0], cols, o[0])
            ));
            return Ok(());
        }
        red::sum_rows(x.host(), cols, y.host_mut());
        Ok(())
    }

    fn sum_cols(&self, x: &Tensor, y: &mut Tensor) -> Result<()> {
        let rows = x.numel() / y.numel().max(1);
        if is_half(x.dtype()) {
            // FP32 column sums of each block of rows, added up in FP32, rounded once.
            let cols = y.numel();
            let (mut acc, mut part) = (vec![0.0f32; cols], vec![0.0f32; cols]);
            with_half!(x.dtype(), |E| by_rows::<E>(
                rows,
                &[(x, cols)],
                &mut [],
                |r, i, _| {
                    red::sum_cols(i[0], r.len(), &mut part);
                    acc.iter_mut().zip(&part).for_each(|(a, p)| *a += p);
                }
            ));
            store_f32(&acc, y);
            return Ok(());
        }
        red::sum_cols(x.host(), rows, y.host_mut());
        Ok(())
    }

    fn argmax_rows(&self, x: &Tensor, idx: &mut Tensor) -> Result<()> {
        let shape = (x.rows(), x.cols());
        if is_half(x.dtype()) {
            with_half!(x.dtype(), |E| argmax_half::<E>(x, shape, idx));
            return Ok(());
        }
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
        let cols = x.cols();
        if is_half(x.dtype()) {
            let (rows, counts) = (x.numel() / cols.max(1), counts.host_mut::<i32>());
            with_half!(x.dtype(), |E| by_rows::<E>(
                rows,
                &[(x, cols)],
                &mut [],
                |r, i, _| red::rows_count_above(
                    i[0],
                    cols,
                    lo,
                    hi,
                    &mut counts[2 * r.start..2 * r.end]
                )
            ));
            return Ok(());
        }
        red::rows_count_above(x.host(), cols, lo, hi, counts.host_mut());
        Ok(())
    }
}

/// [`ReductionOps::argmax_rows`] on 16-bit storage, a block of rows at a time (the widening
/// is exact, so the indices are those of the 16-bit values).
fn argmax_half<E: FloatElem + Element>(x: &Tensor, (rows, cols): (usize, usize), idx: &mut Tensor) {
    match idx.dtype() {
        Dtype::I32 => {
            let out = idx.host_mut::<i32>();
            by_rows::<E>(rows, &[(x, cols)], &mut [], |r, i, _| {
                red::argmax_rows_into(i[0], (r.len(), cols), &mut out[r], |i| i as i32)
            })
        }
        _ => {
            let out = idx.host_mut::<f32>();
            by_rows::<E>(rows, &[(x, cols)], &mut [], |r, i, _| {
                red::argmax_rows_into(i[0], (r.len(), cols), &mut out[r], |i| i as f32)
            })
        }
    }
}
