//! CPU glue of the normalizations (softmax, batch, group, layer and RMS norms). On F16 and
//! BF16 the row kernels run on FP32 copies of blocks of rows: in parallel ([`par_rows`])
//! where rows are independent, one block after another ([`by_rows`]) where the op
//! accumulates parameter gradients or writes F32 statistics per row. The per-column
//! parameters are widened whole; their gradients accumulate in FP32 across the blocks and
//! are narrowed once at the end.

use brotensor_cpu::cast::FloatElem;
use brotensor_cpu::norm as nm;

use super::dtype_policy::{by_rows, f32_values, is_half, par_rows, store_f32, with_half, Narrowed};
use super::CpuBackend;
use crate::backend::{BatchNormStats, LayerNormCaches, NormOps, Src};
use crate::{Dtype, Element, Result, Tensor};

impl NormOps for CpuBackend {
    fn softmax(
        &self,
        x: Src<'_>,
        mask: Option<&Tensor>,
        out: &mut Tensor,
        cols: usize,
    ) -> Result<()> {
        if is_half(out.dtype()) {
            with_half!(out.dtype(), |E| softmax_half::<E>(x, mask, out, cols));
            return Ok(());
        }
        let mask = mask.map(|m| m.host::<f32>());
        match x {
            Src::Tensor(x) => nm::softmax_rows(x.host(), cols, mask, out.host_mut()),
            Src::Out => {
                let x = out.host::<f32>().to_vec();
                nm::softmax_rows(&x, cols, mask, out.host_mut());
            }
        }
        Ok(())
    }

    fn softmax_backward(
        &self,
        p: &Tensor,
        dp: &Tensor,
        dl: &mut Tensor,
        cols: usize,
    ) -> Result<()> {
        if is_half(p.dtype()) {
            let rows = p.numel() / cols.max(1);
            with_half!(p.dtype(), |E| par_rows::<E>(
                rows,
                &[(p, cols), (dp, cols)],
                &mut [(Narrowed::written(dl), cols)],
                |_, i, o| nm::softmax_rows_backward(i[0], i[1], cols, o[0])
            ));
            return Ok(());
        }
        nm::softmax_rows_backward(p.host(), dp.host(), cols, dl.host_mut());
        Ok(())
    }

    fn batch_norm_train(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        beta: &Tensor,
        n_hw: (usize, usize),
        eps_momentum: (f32, f32),
        stats: BatchNormStats<'_>,
        y: &mut Tensor,
    ) -> Result<()> {
        let s = nm::BatchNormStats {
            running_mean: stats.running_mean.host_mut(),
            running_var: stats.running_var.host_mut(),
            saved_mean: stats.saved_mean.host_mut(),
            saved_rstd: stats.saved_rstd.host_mut(),
        };
        let (x, g, b) = (x.host(), gamma.host(), beta.host());
        nm::batch_norm_train(x, g, b, n_hw, eps_momentum, s, y.host_mut());
        Ok(())
    }

    fn batch_norm_inference(
        &self,
        x: &Tensor,
        (gamma, beta, mean, var): (&Tensor, &Tensor, &Tensor, &Tensor),
        hw: usize,
        eps: f32,
        y: &mut Tensor,
    ) -> Result<()> {
        if is_half(x.dtype()) {
            let params = [gamma, beta, mean, var].map(f32_values);
            let per_row = gamma.numel() * hw;
            let rows = x.numel() / per_row.max(1);
            with_half!(x.dtype(), |E| par_rows::<E>(
                rows,
                &[(x, per_row)],
                &mut [(Narrowed::written(y), per_row)],
                |_, i, o| {
                    let [g, b, m, v] = &params;
                    nm::batch_norm_inference(
                        i[0],
                        (&g[..], &b[..]),
                        (&m[..], &v[..]),
                        hw,
                        eps,
                        o[0],
                    )
                }
            ));
            return Ok(());
        }
        let affine = (gamma.host(), beta.host());
        let running = (mean.host(), var.host());
        nm::batch_norm_inference(x.host(), affine, running, hw, eps, y.host_mut());
        Ok(())
    }

    fn batch_norm_backward(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        (mean, rstd): (&Tensor, &Tensor),
        dy: &Tensor,
        n_hw: (usize, usize),
        dx: &mut Tensor,
        dgamma: &mut Tensor,
        dbeta: &mut Tensor,
    ) -> Result<()> {
        nm::batch_norm_backward(
            x.host(),
            gamma.host(),
            (mean.host(), rstd.host()),
            dy.host(),
            n_hw,
            dx.host_mut(),
            dgamma.host_mut(),
            dbeta.host_mut(),
        );
        Ok(())
    }

    fn group_norm(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        beta: &Tensor,
        groups_hw: (usize, usize),
        eps: f32,
        silu: bool,
        y: &mut Tensor,
    ) -> Result<()> {
        if is_half(x.dtype()) {
            let (g, b) = (f32_values(gamma), f32_values(beta));
            let per_row = g.len() * groups_hw.1;
            let rows = x.numel() / per_row.max(1);
            with_half!(x.dtype(), |E| par_rows::<E>(
                rows,
                &[(x, per_row)],
                &mut [(Narrowed::written(y), per_row)],
                |_, i, o| nm::group_norm_rows(i[0], &g, &b, groups_hw, eps, silu, o[0])
            ));
            return Ok(());
        }
        let (x, g, b) = (x.host(), gamma.host(), beta.host());
        nm::group_norm_rows(x, g, b, groups_hw, eps, silu, y.host_mut());
        Ok(())
    }

    fn group_norm_backward(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        dy: &Tensor,
        groups_hw: (usize, usize),
        eps: f32,
        dx: &mut Tensor,
        (part_g, part_b): (&mut Tensor, &mut Tensor),
    ) -> Result<()> {
        if is_half(x.dtype()) {
            let g = f32_values(gamma);
            let (c, per_row) = (g.len(), g.len() * groups_hw.1);
            let rows = x.numel() / per_row.max(1);
            let mut outputs = [
                (Narrowed::written(dx), per_row),
                (Narrowed::written(part_g), c),
                (Narrowed::written(part_b), c),
            ];
            with_half!(x.dtype(), |E| par_rows::<E>(
                rows,
                &[(x, per_row), (dy, per_row)],
                &mut outputs,
                |_, i, o| {
                    let [dx, pg, pb] = o else {
                        unreachable!("three outputs")
                    };
                    nm::group_norm_rows_backward(
                        i[0],
                        &g,
                        i[1],
                        groups_hw,
                        eps,
                        dx,
                        (&mut **pg, &mut **pb),
                    )
                }
            ));
            return Ok(());
        }
        let (x, g, dy) = (x.host(), gamma.host(), dy.host());
        let parts = (part_g.host_mut(), part_b.host_mut());
        nm::group_norm_rows_backward(x, g, dy, groups_hw, eps, dx.host_mut(), parts);
        Ok(())
    }

    fn layernorm(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        beta: &Tensor,
        eps: f32,
        y: &mut Tensor,
        caches: Option<LayerNormCaches<'_>>,
    ) -> Result<()> {
        if is_half(x.dtype()) {
            with_half!(x.dtype(), |E| layernorm_half::<E>(
                x, gamma, beta, eps, y, caches
            ));
            return Ok(());
        }
        let (xhat, mean, rstd) = match caches {
            Some(c) => (
                Some(c.xhat.host_mut()),
                Some(c.mean.host_mut()),
                Some(c.rstd.host_mut()),
            ),
            None => (None, None, None),
        };
        nm::layernorm_rows(
            x.host(),
            gamma.host(),
            beta.host(),
            eps,
            y.host_mut(),
            xhat,
            mean,
            rstd,
        );
        Ok(())
    }

    fn layernorm_backward(
        &self,
        dy: &Tensor,
        xhat: &Tensor,
        gamma: &Tensor,
        rstd: &Tensor,
        dx: &mut Tensor,
        dgamma: &mut Tensor,
        dbeta: &mut Tensor,
    ) -> Result<()> {
        if is_half(dy.dtype()) {
            // The parameter gradients accumulate: their FP32 copies start as the old values.
            let (g, rstd) = (f32_values(gamma), rstd.host::<f32>());
            let (mut dg, mut db) = (f32_values(dgamma), f32_values(dbeta));
            let cols = g.len();
            let rows = dy.numel() / cols.max(1);
            with_half!(dy.dtype(), |E| by_rows::<E>(
                rows,
                &[(dy, cols), (xhat, cols)],
                &mut [(Narrowed::written(dx), cols)],
                |r, i, o| nm::layernorm_rows_backward(
                    i[0], i[1], &g, &rstd[r], o[0], &mut dg, &mut db
                )
            ));
            store_f32(&dg, dgamma);
            store_f32(&db, dbeta);
            return Ok(());
        }
        nm::layernorm_rows_backward(
            dy.host(),
            xhat.host(),
            gamma.host(),
            rstd.host(),
            dx.host_mut(),
            dgamma.host_mut(),
            dbeta.host_mut(),
        );
        Ok(())
    }

    fn rms_norm(&self, x: &Tensor, gamma: &Tensor, eps: f32, y: &mut Tensor) -> Result<()> {
        if is_half(x.dtype()) {
            let g = f32_values(gamma);
            let cols = g.len();
            let rows = x.numel() / cols.max(1);
            with_half!(x.dtype(), |E| par_rows::<E>(
                rows,
                &[(x, cols)],
                &mut [(Narrowed::written(y), cols)],
                |_, i, o| nm::rms_norm_rows(i[0], &g, eps, o[0])
            ));
            return Ok(());
        }
        nm::rms_norm_rows(x.host(), gamma.host(), eps, y.host_mut());
        Ok(())
    }

    fn rms_norm_backward(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        dy: &Tensor,
        eps: f32,
        dx: &mut Tensor,
        dgamma: Option<&mut Tensor>,
    ) -> Result<()> {
        if is_half(x.dtype()) {
            let g = f32_values(gamma);
            let cols = g.len();
            let rows = x.numel() / cols.max(1);
            let inputs = [(x, cols), (dy, cols)];
            let Some(dgamma) = dgamma else {
                with_half!(x.dtype(), |E| par_rows::<E>(
                    rows,
                    &inputs,
                    &mut [(Narrowed::written(dx), cols)],
                    |_, i, o| nm::rms_norm_rows_backward(i[0], &g, i[1], eps, o[0], None)
                ));
                return Ok(());
            };
            // `dgamma` accumulates across the blocks: its FP32 copy starts as the old values.
            let mut dg = f32_values(dgamma);
            with_half!(x.dtype(), |E| by_rows::<E>(
                rows,
                &inputs,
                &mut [(Narrowed::written(dx), cols)],
                |_, i, o| nm::rms_norm_rows_backward(i[0], &g, i[1], eps, o[0], Some(&mut dg))
            ));
            store_f32(&dg, dgamma);
            return Ok(());
        }
        nm::rms_norm_rows_backward(
            x.host(),
            gamma.host(),
            dy.host(),
            eps,
            dx.host_mut(),
            dgamma.map(|d| d.host_mut()),
        );
        Ok(())
    }
}

/// [`NormOps::softmax`] on 16-bit storage, a block of rows at a time.
fn softmax_half<E: FloatElem + Element>(
    x: Src<'_>,
    mask: Option<&Tensor>,
    out: &mut Tensor,
    cols: usize,
) {
    let mask = mask.map(|m| m.host::<f32>());
    let rows = out.numel() / cols.max(1);
    match x {
        Src::Tensor(x) => par_rows::<E>(
            rows,
            &[(x, cols)],
            &mut [(Narrowed::written(out), cols)],
            |_, i, o| nm::softmax_rows(i[0], cols, mask, o[0]),
        ),
        // In place: each block's widened rows are the input of its own softmax.
        Src::Out => par_rows::<E>(
            rows,
            &[],
            &mut [(Narrowed::updated(out), cols)],
            |_, _, o| {
                let x = o[0].to_vec();
                nm::softmax_rows(&x, cols, mask, o[0]);
            },
        ),
    }
}

/// [`NormOps::layernorm`] on 16-bit storage, a block of rows at a time; the F32 `mean` and
/// `rstd` caches are written in place, row by row.
fn layernorm_half<E: FloatElem + Element>(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    eps: f32,
    y: &mut Tensor,
    caches: Option<LayerNormCaches<'_>>,
) {
    let (g, b) = (f32_values(gamma), f32_values(beta));
    let cols = g.len();
    let rows = x.numel() / cols.max(1);
    match caches {
        None => par_rows::<E>(
            rows,
            &[(x, cols)],
            &mut [(Narrowed::written(y), cols)],
            |_, i, o| nm::layernorm_rows(i[0], &g, &b, eps, o[0], None, None, None),
        ),
        Some(LayerNormCaches { xhat, mean, rstd }) => {
            let (mean, rstd) = (mean.host_mut::<f32>(), rstd.host_mut::<f32>());
            by_rows::<E>(
                rows,
                &[(x, cols)],
                &mut [
                    (Narrowed::written(y), cols),
                    (Narrowed::written(xhat), cols),
                ],
                |r, i, o| {
                    let [y, xhat] = o else {
                        unreachable!("two outputs")
                    };
                    let (m, s) = (&mut mean[r.clone()], &mut rstd[r]);
                    nm::layernorm_rows(i[0], &g, &b, eps, y, Some(&mut **xhat), Some(m), Some(s))
                },
            )
        }
    }
}
