//! CPU glue of the attention category.

use brotensor_cpu::attention as at;

use super::dtype_policy::{is_half, through_f32, with_half, Narrowed};
use super::CpuBackend;
use crate::backend::AttentionOps;
use crate::{Dtype, Result, Tensor};

impl AttentionOps for CpuBackend {
    fn slot_mask(&self, x: &Tensor, offset: usize, stride: usize, mask: &mut Tensor) -> Result<()> {
        if is_half(x.dtype()) {
            // The mask is F32 whatever `x`'s dtype; the 16-bit values widen exactly.
            with_half!(x.dtype(), |E| at::slot_mask(
                x.host::<E>(),
                offset,
                stride,
                mask.host_mut()
            ));
            return Ok(());
        }
        at::slot_mask(x.host::<f32>(), offset, stride, mask.host_mut());
        Ok(())
    }

    fn causal_mask_row(&self, q: usize, mask: &mut Tensor) -> Result<()> {
        at::causal_mask(q, mask.host_mut());
        Ok(())
    }

    fn mask_rows(&self, _: &'static str, y: &mut Tensor, cols: usize, mask: &Tensor) -> Result<()> {
        if is_half(y.dtype()) {
            with_half!(y.dtype(), |E| at::mask_rows(
                y.host_mut::<E>(),
                cols,
                mask.host()
            ));
            return Ok(());
        }
        at::mask_rows(y.host_mut::<f32>(), cols, mask.host());
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
        if is_half(q.dtype()) {
            // `s` is added to: its FP32 copy starts as the old values.
            return through_f32(&[q, rel_h, rel_w], &mut [Narrowed::updated(s)], |w, o| {
                rel_pos_bias_f32(&w[0], &w[1], &w[2], &mut o[0], grid);
                Ok(())
            });
        }
        rel_pos_bias_f32(q, rel_h, rel_w, s, grid);
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
        if is_half(x.dtype()) {
            // Rows are moved, not computed: the 16-bit elements as they are.
            with_half!(x.dtype(), |E| at::window_rows(
                x.host::<E>(),
                out.host_mut::<E>(),
                cols,
                grid,
                partition
            ));
            return Ok(());
        }
        at::window_rows(
            x.host::<f32>(),
            out.host_mut::<f32>(),
            cols,
            grid,
            partition,
        );
        Ok(())
    }

    fn token_moments(
        &self,
        attn: &Tensor,
        w_lat: usize,
        mass: &mut Tensor,
        centroid: &mut Tensor,
    ) -> Result<()> {
        if is_half(attn.dtype()) {
            // `mass` and `centroid` are F32 whatever `attn`'s dtype.
            return through_f32(&[attn], &mut [], |w, _| {
                self.token_moments(&w[0], w_lat, mass, centroid)
            });
        }
        let lk = attn.cols();
        at::token_moments(attn.host(), lk, w_lat, mass.host_mut(), centroid.host_mut());
        Ok(())
    }
}

/// [`AttentionOps::rel_pos_bias`] on F32 tensors.
fn rel_pos_bias_f32(
    q: &Tensor,
    rel_h: &Tensor,
    rel_w: &Tensor,
    s: &mut Tensor,
    grid: (usize, usize),
) {
    let hd = q.cols();
    at::rel_pos_bias(q.host(), rel_h.host(), rel_w.host(), s.host_mut(), hd, grid);
}
