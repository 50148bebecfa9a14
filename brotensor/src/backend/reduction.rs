//! The reduction category: row and column sums, argmax, top-k and threshold counts.

use super::OnDevice;
use crate::{Error, Result, Tensor};

/// Reductions over `x (rows, cols)`. Callers guarantee operands on this device, a float `x`
/// the device computes in (F32 for `top_k_rows`), and outputs committed and sized:
/// `y (rows, 1)` / `(1, cols)` in `x`'s dtype (the sums take the split from `y`'s element
/// count, so a caller may sum a reshaped view of `x`), `idx (rows, 1)` I32 or F32,
/// `vals (rows, k)` F32 with `idx (rows, k)` I32, `counts (rows, 2)` I32.
pub(crate) trait ReductionOps: OnDevice {
    /// `y[r] = sum_c x[r, c]`.
    fn sum_rows(&self, _x: &Tensor, _y: &mut Tensor) -> Result<()> {
        Err(missing("sum_rows", self))
    }
    /// `y[c] = sum_r x[r, c]`.
    fn sum_cols(&self, _x: &Tensor, _y: &mut Tensor) -> Result<()> {
        Err(missing("sum_cols", self))
    }
    /// First index of each row's maximum.
    fn argmax_rows(&self, _x: &Tensor, _idx: &mut Tensor) -> Result<()> {
        Err(missing("argmax_rows", self))
    }
    /// The `k` largest per row, descending, ties to the smaller index.
    fn top_k_rows(
        &self,
        _x: &Tensor,
        _k: usize,
        _vals: &mut Tensor,
        _idx: &mut Tensor,
    ) -> Result<()> {
        Err(missing("top_k_rows", self))
    }
    /// `(#{x > lo}, #{x > hi})` per row.
    fn rows_count_above(
        &self,
        _x: &Tensor,
        _lo: f32,
        _hi: f32,
        _counts: &mut Tensor,
    ) -> Result<()> {
        Err(missing("rows_count_above", self))
    }
}

fn missing<B: OnDevice + ?Sized>(op: &'static str, b: &B) -> Error {
    Error::NotImplemented {
        op,
        device: b.device(),
    }
}
