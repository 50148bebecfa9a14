//! CPU glue of the attention category.

use brotensor_cpu::attention as at;

use super::CpuBackend;
use crate::backend::AttentionOps;
use crate::{Result, Tensor};

impl AttentionOps for CpuBackend {
    fn slot_mask(&self, x: &Tensor, offset: usize, stride: usize, mask: &mut Tensor) -> Result<()> {
        at::slot_mask(x.host(), offset, stride, mask.host_mut());
        Ok(())
    }

    fn causal_mask_row(&self, q: usize, mask: &mut Tensor) -> Result<()> {
        at::causal_mask(q, mask.host_mut());
        Ok(())
    }

    fn mask_rows(&self, _: &'static str, y: &mut Tensor, cols: usize, mask: &Tensor) -> Result<()> {
        at::mask_rows(y.host_mut(), cols, mask.host());
        Ok(())
    }

    fn rel_pos_bias(
        &self,
        _: &'static str,
        q: &Tensor,
        rel_h: &Tensor,
        rel_w: &Tensor,
        s: &mut Tensor,
        grid: (usize, usize),
    ) -> Result<()> {
        let hd = q.cols();
        at::rel_pos_bias(q.host(), rel_h.host(), rel_w.host(), s.host_mut(), hd, grid);
        Ok(())
    }

    fn window_rows(
        &self,
        _: &'static str,
        x: &Tensor,
        out: &mut Tensor,
        grid: (usize, usize, usize),
        partition: bool,
    ) -> Result<()> {
        let cols = x.cols();
        at::window_rows(x.host(), out.host_mut(), cols, grid, partition);
        Ok(())
    }

    fn token_moments(
        &self,
        attn: &Tensor,
        w_lat: usize,
        mass: &mut Tensor,
        centroid: &mut Tensor,
    ) -> Result<()> {
        let lk = attn.cols();
        at::token_moments(attn.host(), lk, w_lat, mass.host_mut(), centroid.host_mut());
        Ok(())
    }
}
