//! GPU glue of the attention category. BF16 stored as packed words runs through F32.

use brotensor_kernels::attention as at;
use cubecl::prelude::*;

use super::{float_launch, out_handle, CubeBackend};
use crate::backend::AttentionOps;
use crate::{Result, Tensor};

impl<R: Runtime> AttentionOps for CubeBackend<R> {
    fn slot_mask(&self, x: &Tensor, offset: usize, stride: usize, mask: &mut Tensor) -> Result<()> {
        let (xh, mh) = (out_handle(x), out_handle(mask));
        let k = mask.numel();
        // The mask is F32 whatever `x`'s dtype: nothing to narrow.
        self.float_op("build_slot_mask", x.dtype())
            .inputs(&[x])
            .run(
                |w, _| self.slot_mask(&w[0], offset, stride, mask),
                float_launch!(|F| at::launch_slot_mask::<R, F>(
                    &self.client,
                    &xh,
                    &mh,
                    (offset, k, stride)
                )),
            )
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
        let (yh, mh) = (out_handle(y), out_handle(mask));
        let rows = y.numel() / cols.max(1);
        self.float_op(name, y.dtype()).updated(&mut [y]).run(
            |_, o| self.mask_rows(name, &mut o[0], cols, mask),
            float_launch!(|F| at::launch_mask_rows::<R, F>(
                &self.client,
                &yh,
                &mh,
                (rows, cols),
                mask.numel()
            )),
        )
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
        let hs = (
            &out_handle(q),
            &out_handle(rel_h),
            &out_handle(rel_w),
            &out_handle(s),
        );
        let hd = q.cols();
        let heads = q.rows() / (grid.0 * grid.1).max(1);
        self.float_op(name, q.dtype())
            .inputs(&[q, rel_h, rel_w])
            .updated(&mut [s])
            .run(
                |w, o| self.rel_pos_bias(name, &w[0], &w[1], &w[2], &mut o[0], grid),
                float_launch!(|F| at::launch_rel_pos_bias::<R, F>(
                    &self.client,
                    hs,
                    heads,
                    hd,
                    grid
                )),
            )
    }

    fn window_rows(
        &self,
        name: &'static str,
        x: &Tensor,
        out: &mut Tensor,
        (gh, gw, win): (usize, usize, usize),
        partition: bool,
    ) -> Result<()> {
        let (xh, oh) = (out_handle(x), out_handle(out));
        let g = at::Windows { gh, gw, win };
        self.float_op(name, x.dtype())
            .inputs(&[x])
            .written(&mut [out])
            .run(
                |w, o| self.window_rows(name, &w[0], &mut o[0], (gh, gw, win), partition),
                float_launch!(|F| at::launch_window_rows::<R, F>(
                    &self.client,
                    &xh,
                    &oh,
                    x.cols(),
                    g,
                    partition
                )),
            )
    }

    fn token_moments(
        &self,
        attn: &Tensor,
        w_lat: usize,
        mass: &mut Tensor,
        centroid: &mut Tensor,
    ) -> Result<()> {
        let (ah, mh, ch) = (out_handle(attn), out_handle(mass), out_handle(centroid));
        let h_lat = attn.rows() / w_lat.max(1);
        let lk = attn.cols();
        // The moments are F32 whatever the attention's dtype: nothing to narrow.
        self.float_op("attention_token_moments", attn.dtype())
            .inputs(&[attn])
            .run(
                |w, _| self.token_moments(&w[0], w_lat, mass, centroid),
                float_launch!(|F| at::launch_token_moments::<R, F>(
                    &self.client,
                    &ah,
                    &mh,
                    &ch,
                    (h_lat, w_lat, lk)
                )),
            )
    }
}
