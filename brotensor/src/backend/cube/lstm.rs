//! GPU glue of the LSTM steps (`brotensor_kernels::lstm`).

use brotensor_kernels::lstm::{launch_lstm_step, launch_lstm_step_backward, Prev, StepAt};
use cubecl::prelude::*;
use cubecl::server::Handle;

use super::{out_handle, CubeBackend};
use crate::backend::{CellPrev, LstmOps, StepRows};
use crate::{Result, Tensor};

/// The kernels' form of a previous cell state, with the handle it borrows.
fn prev_of<'a>(prev: CellPrev<'_>, initial: &'a mut Option<Handle>) -> Prev<'a> {
    match prev {
        CellPrev::Zero => Prev::Zero,
        CellPrev::Initial(c0) => Prev::Initial(initial.insert(out_handle(c0))),
        CellPrev::Rows(r) => Prev::Rows(r),
    }
}

impl<R: Runtime> LstmOps for CubeBackend<R> {
    fn lstm_step(
        &self,
        name: &'static str,
        (p, zrec): (&Tensor, Option<&Tensor>),
        prev: CellPrev<'_>,
        (y, gates, c): (&mut Tensor, &mut Tensor, &mut Tensor),
        at: StepRows,
        shape: (usize, usize),
    ) -> Result<()> {
        let mut initial = None;
        let prev = prev_of(prev, &mut initial);
        let (ph, zh) = (out_handle(p), zrec.map(out_handle));
        let [yh, gh, ch] = [&*y, &*gates, &*c].map(out_handle);
        let at = StepAt {
            p: at.p,
            y: at.y,
            cache: at.cache,
        };
        launch_lstm_step::<R>(
            &self.client,
            (&ph, zh.as_ref()),
            prev,
            (&yh, &gh, &ch),
            at,
            shape,
        )
        .map_err(|e| self.launch_error(name, e))
    }

    fn lstm_step_backward(
        &self,
        name: &'static str,
        (gates, c): (&Tensor, &Tensor),
        prev: CellPrev<'_>,
        (dy, dh_rec): (&Tensor, Option<&Tensor>),
        (dc, dz): (&mut Tensor, &mut Tensor),
        row: usize,
        shape: (usize, usize),
    ) -> Result<()> {
        let mut initial = None;
        let prev = prev_of(prev, &mut initial);
        let [gh, ch, dyh] = [gates, c, dy].map(out_handle);
        let dhh = dh_rec.map(out_handle);
        let [dch, dzh] = [&*dc, &*dz].map(out_handle);
        launch_lstm_step_backward::<R>(
            &self.client,
            (&gh, &ch),
            prev,
            (&dyh, dhh.as_ref()),
            (&dch, &dzh),
            row,
            shape,
        )
        .map_err(|e| self.launch_error(name, e))
    }
}
