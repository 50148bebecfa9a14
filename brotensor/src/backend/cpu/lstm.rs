//! CPU glue of the LSTM steps (`brotensor_cpu::lstm`).

use brotensor_cpu::lstm as cpu;

use super::CpuBackend;
use crate::backend::{CellPrev, LstmOps, StepRows};
use crate::{Result, Tensor};

/// `rows` rows of `width` floats of `t` from row `first`.
fn rows(t: &[f32], first: usize, count: usize, width: usize) -> &[f32] {
    &t[first * width..][..count * width]
}

impl LstmOps for CpuBackend {
    fn lstm_step(
        &self,
        _: &'static str,
        (p, zrec): (&Tensor, Option<&Tensor>),
        prev: CellPrev<'_>,
        (y, gates, c): (&mut Tensor, &mut Tensor, &mut Tensor),
        at: StepRows,
        (b, h): (usize, usize),
    ) -> Result<()> {
        // The previous cell state is copied first: it may be the rows this step writes.
        let c_prev: Option<Vec<f32>> = match prev {
            CellPrev::Zero => None,
            CellPrev::Initial(c0) => Some(rows(c0.host(), 0, b, h).to_vec()),
            CellPrev::Rows(r) => Some(rows(c.host(), r, b, h).to_vec()),
        };
        let y = &mut y.host_mut::<f32>()[at.y * h..][..b * h];
        let gates = &mut gates.host_mut::<f32>()[at.cache * 4 * h..][..b * 4 * h];
        let c = &mut c.host_mut::<f32>()[at.cache * h..][..b * h];
        cpu::lstm_step(
            (
                rows(p.host(), at.p, b, 4 * h),
                zrec.map(|z| rows(z.host(), 0, b, 4 * h)),
            ),
            c_prev.as_deref(),
            h,
            (y, gates, c),
        );
        Ok(())
    }

    fn lstm_step_backward(
        &self,
        _: &'static str,
        (gates, c): (&Tensor, &Tensor),
        prev: CellPrev<'_>,
        (dy, dh_rec): (&Tensor, Option<&Tensor>),
        (dc, dz): (&mut Tensor, &mut Tensor),
        row: usize,
        (b, h): (usize, usize),
    ) -> Result<()> {
        let c_prev = match prev {
            CellPrev::Zero => None,
            CellPrev::Initial(c0) => Some(rows(c0.host(), 0, b, h)),
            CellPrev::Rows(r) => Some(rows(c.host(), r, b, h)),
        };
        cpu::lstm_step_backward(
            (
                rows(gates.host(), row, b, 4 * h),
                rows(c.host(), row, b, h),
                c_prev,
            ),
            (
                rows(dy.host(), row, b, h),
                dh_rec.map(|d| rows(d.host(), 0, b, h)),
            ),
            h,
            (
                &mut dc.host_mut::<f32>()[..b * h],
                &mut dz.host_mut::<f32>()[row * 4 * h..][..b * 4 * h],
            ),
        );
        Ok(())
    }
}
