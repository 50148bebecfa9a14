//! The LSTM category: the fused gate math of one time step and of its backward step (the
//! products around them are GEMMs of the linear category).

use super::{missing, OnDevice};
use crate::{Result, Tensor};

/// Where a step's previous cell state comes from.
#[derive(Clone, Copy)]
pub(crate) enum CellPrev<'a> {
    /// A zero state.
    Zero,
    /// A `(batch, H)` F32 tensor from its first row.
    Initial(&'a Tensor),
    /// The cell-state tensor of the step itself, from this batch row (may be the rows the
    /// step writes: each element is read before it is written).
    Rows(usize),
}

/// Row offsets (in rows of the batch) of one forward step's operands.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StepRows {
    /// The input projection's first row.
    pub p: usize,
    /// The hidden output's first row.
    pub y: usize,
    /// The first row of the gate and cell caches.
    pub cache: usize,
}

/// LSTM steps. Callers guarantee F32 operands on this device: `p` holds `p + batch` rows of
/// `4H`, `zrec` (when present) `batch x 4H`, `y` `y + batch` rows of `H`, `gates` and `c`
/// `cache + batch` rows of `4H` and `H`, a previous state the rows it names; every size
/// below 2^32.
pub(crate) trait LstmOps: OnDevice {
    /// The forward step of `brotensor_cpu::lstm::lstm_step` at the rows of `rows`.
    #[allow(clippy::too_many_arguments)]
    fn lstm_step(
        &self,
        name: &'static str,
        _inputs: (&Tensor, Option<&Tensor>),
        _prev: CellPrev<'_>,
        _outputs: (&mut Tensor, &mut Tensor, &mut Tensor),
        _rows: StepRows,
        _shape: (usize, usize),
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// The backward step of `brotensor_cpu::lstm::lstm_step_backward`: `gates`, `c`, `dy`
    /// and `dz` at batch row `row`; `dh_rec` and `dc` `batch x H` from row 0.
    #[allow(clippy::too_many_arguments)]
    fn lstm_step_backward(
        &self,
        name: &'static str,
        _cache: (&Tensor, &Tensor),
        _prev: CellPrev<'_>,
        _upstream: (&Tensor, Option<&Tensor>),
        _grads: (&mut Tensor, &mut Tensor),
        _row: usize,
        _shape: (usize, usize),
    ) -> Result<()> {
        Err(missing(name, self))
    }
}
