//! The embedding category: embedding lookups and row gathers/scatters.

use super::{missing, OnDevice};
use crate::{Result, Tensor};

/// Backend methods of the embedding category (each with a default body returning
/// `Error::NotImplemented` through [`super::missing`]). Callers (the public functions in
/// `crate::ops`) validate shapes, dtypes and devices first, and refuse ids outside the
/// table with [`EmbeddingOps::count_bad_ids`] before the other methods run.
///
/// Matrices are `(rows, cols)` views of their tensors (leading dims folded); `ids` is an I32
/// tensor of `m` ids (any shape); the data tensors share a dtype with an element size.
pub(crate) trait EmbeddingOps: OnDevice {
    /// How many of `ids` lie outside `[0, rows)`; errors name `op`, the calling op.
    fn count_bad_ids(&self, op: &'static str, _ids: &Tensor, _rows: usize) -> Result<usize> {
        Err(missing(op, self))
    }
    /// `y (m, cols)`: `y[i, :] = x[ids[i], :]`, bits copied.
    fn gather_rows(&self, _x: &Tensor, _ids: &Tensor, _y: &mut Tensor) -> Result<()> {
        Err(missing("gather_rows", self))
    }
    /// `x[ids[i], :] = y[i, :]` for `y (m, cols)`, bits copied; other rows of `x` untouched.
    fn scatter_rows(&self, _y: &Tensor, _ids: &Tensor, _x: &mut Tensor) -> Result<()> {
        Err(missing("scatter_rows", self))
    }
    /// `dx[ids[i], :] += dy[i, :]` for `dy (m, cols)` (a float the device computes in),
    /// repeated ids adding up in FP32.
    fn scatter_rows_add(&self, _dy: &Tensor, _ids: &Tensor, _dx: &mut Tensor) -> Result<()> {
        Err(missing("scatter_rows_add", self))
    }
}
