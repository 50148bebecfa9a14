//! GPU glue of the attention category. BF16 stored as packed words runs through F32.

use brotensor_kernels::attention as at;
use cubecl::prelude::*;
use half::{bf16, f16};

use super::{out_handle, with_float, CubeBackend, Narrowed};
use crate::backend::AttentionOps;
use crate::{Dtype, Result, Tensor};

impl<R: Runtime> AttentionOps for CubeBackend<R> {
    fn slot_mask(&self, x: &Tensor, offset: usize, stride: usize, mask: &mut Tensor) -> Result<()> {
        if self.words(x.dtype()) {
            // The mask is F32 whatever `x`'s dtype: nothing to narrow.
            return self.through_f32(&[x], &mut [], |w, _| {
                self.slot_mask(&w[0], offset, stride, mask)
            });
        }
        let (xh, mh) = (out_handle(x), out_handle(mask));
        let k = mask.numel();
        with_float!(x.dtype(), |F| at::launch_slot_mask::<R, F>(
            &self.client,
            &xh,
            &mh,
            (offset, k, stride)
        ))
        .map_err(|e| self.launch_error("build_slot_mask", e))
    }

    fn causal_mask_row(&self, q: usize, mask: &mut Tensor) -> Result<()> {
        let mh = out_handle(mask);
        at::launch_causal_mask(&self.client, &mh, mask.numel(), q)
            .map_err(|e| self.launch_error("build_causal_mask_row", e))
    }

    fn mask_rows(
        &self,
        name: &'static str,
        y: &mut Tensor,
        cols: usize,
        mask: &Tensor,
    ) -> Result<()> {
        if self.words(y.dtype()) {
            return self.through_f32(&[], &mut [Narrowed::updated(y)], |_, o| {
                self.mask_rows(name, &mut o[0], cols, mask)
            });
        }
        let (yh, mh) = (out_handle(y), out_handle(mask));
        let rows = y.numel() / cols.max(1);
        with_float!(y.dtype(), |F| at::launch_mask_rows::<R, F>(
            &self.client,
            &yh,
            &mh,
            (rows, cols),
            mask.numel()
        ))
        .map_err(|e| self.launch_error(name, e))
    }

    fn rel_pos_bias(
        &self,
        name: &'static str,
        q: &Tensor,
        rel_h: &Tensor,
        rel_w: &Tensor,
        s: &mut Tensor,
        grid: (usize, usize),
    ) -> Result<()> {
        if self.words(q.dtype()) {
            return self.through_f32(&[q, rel_h, rel_w], &mut [Narrowed::updated(s)], |w, o| {
                self.rel_pos_bias(name, &w[0], &w[1], &w[2], &mut o[0], grid)
            });
        }
        let hs = (
            &out_handle(q),
            &out_handle(rel_h),
            &out_handle(rel_w),
            &out_handle(s),
        );
        let hd = q.cols();
        let heads = q.rows() / (grid.0 * grid.1).max(1);
        with_float!(q.dtype(), |F| at::launch_rel_pos_bias::<R, F>(
            &self.client,
            hs,
            heads,
            hd,
            grid
        ))
        .map_err(|e| self.launch_error(name, e))
    }

    fn window_rows(
        &self,
        name: &'static str,
        x: &Tensor,
        out: &mut Tensor,
        (gh, gw, win): (usize, usize, usize),
        partition: bool,
    ) -> Result<()> {
        if self.words(x.dtype()) {
            return self.through_f32(&[x], &mut [Narrowed::written(out)], |w, o| {
                self.window_rows(name, &w[0], &mut o[0], (gh, gw, win), partition)
            });
        }
        let (xh, oh) = (out_handle(x), out_handle(out));
        let g = at::Windows { gh, gw, win };
        with_float!(x.dtype(), |F| at::launch_window_rows::<R, F>(
            &self.client,
            &xh,
            &oh,
            x.cols(),
            g,
            partition
        ))
        .map_err(|e| self.launch_error(name, e))
    }

    fn token_moments(
        &self,
        attn: &Tensor,
        w_lat: usize,
        mass: &mut Tensor,
        centroid: &mut Tensor,
    ) -> Result<()> {
        if self.words(attn.dtype()) {
            return self.through_f32(&[attn], &mut [], |w, _| {
                self.token_moments(&w[0], w_lat, mass, centroid)
            });
        }
        let (ah, mh, ch) = (out_handle(attn), out_handle(mass), out_handle(centroid));
        let h_lat = attn.rows() / w_lat.max(1);
        let lk = attn.cols();
        with_float!(attn.dtype(), |F| at::launch_token_moments::<R, F>(
            &self.client,
            &ah,
            &mh,
            &ch,
            (h_lat, w_lat, lk)
        ))
        .map_err(|e| self.launch_error("attention_token_moments", e))
    }
}
