//! GPU glue of the normalizations (softmax, batch, group, layer and RMS norms).

use brotensor_kernels::norm::{self as rw, LayerNormBuffers};
use brotensor_kernels::reduce as rd;
use brotensor_kernels::softmax as sm;
use cubecl::prelude::*;

use super::{float_launch, out_handle, src_handle, CubeBackend};
use crate::backend::{BatchNormStats, LayerNormCaches, NormOps, Src};
use crate::{Dtype, Result, Tensor};

impl<R: Runtime> CubeBackend<R> {
    /// A scratch F32 tensor of `rows` elements on this device.
    fn scratch(&self, rows: usize) -> Result<Tensor> {
        Tensor::empty_on(self.device, rows, 1, Dtype::F32)
    }
}

impl<R: Runtime> NormOps for CubeBackend<R> {
    fn softmax(
        &self,
        x: Src<'_>,
        mask: Option<&Tensor>,
        out: &mut Tensor,
        cols: usize,
    ) -> Result<()> {
        let oh = out_handle(out);
        let xh = src_handle(x).unwrap_or_else(|| oh.clone());
        let mh = mask.map(out_handle);
        let shape = (out.numel() / cols.max(1), cols);
        // The mask is F32 whatever the data's dtype.
        let inputs: Vec<&Tensor> = match x {
            Src::Tensor(x) => vec![x],
            Src::Out => vec![],
        };
        self.float_op("softmax", out.dtype())
            .inputs(&inputs)
            .updated(&mut [out])
            .run(
                |w, o| {
                    let x = w.first().map_or(Src::Out, Src::Tensor);
                    self.softmax(x, mask, &mut o[0], cols)
                },
                float_launch!(|F| sm::launch_softmax::<R, F>(
                    &self.client,
                    &xh,
                    mh.as_ref(),
                    &oh,
                    shape
                )),
            )
    }

    fn softmax_backward(
        &self,
        p: &Tensor,
        dp: &Tensor,
        dl: &mut Tensor,
        cols: usize,
    ) -> Result<()> {
        let (ph, dph, dlh) = (out_handle(p), out_handle(dp), out_handle(dl));
        let shape = (p.numel() / cols.max(1), cols);
        self.float_op("softmax_backward", p.dtype())
            .inputs(&[p, dp])
            .written(&mut [dl])
            .run(
                |w, o| self.softmax_backward(&w[0], &w[1], &mut o[0], cols),
                float_launch!(|F| sm::launch_softmax_backward::<R, F>(
                    &self.client,
                    &ph,
                    &dph,
                    &dlh,
                    shape
                )),
            )
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
        let (xh, gh, bh, yh) = (
            out_handle(x),
            out_handle(gamma),
            out_handle(beta),
            out_handle(y),
        );
        let ch = caches
            .as_ref()
            .map(|c| (out_handle(c.xhat), out_handle(c.mean), out_handle(c.rstd)));
        let bufs = LayerNormBuffers {
            x: &xh,
            gamma: &gh,
            beta: &bh,
            y: &yh,
            caches: ch.as_ref().map(|(a, b, c)| (a, b, c)),
        };
        let shape = (x.numel() / gamma.numel().max(1), gamma.numel());
        // The mean and rstd caches are F32 whatever the data's dtype.
        let (xhat, stats) = match caches {
            Some(LayerNormCaches { xhat, mean, rstd }) => (Some(xhat), Some((mean, rstd))),
            None => (None, None),
        };
        let mut written: Vec<&mut Tensor> = std::iter::once(y).chain(xhat).collect();
        self.float_op("layernorm", x.dtype())
            .inputs(&[x, gamma, beta])
            .written(&mut written)
            .run(
                |w, o| {
                    let (wy, wxhat) = o.split_first_mut().expect("y is an output");
                    let wc = stats
                        .zip(wxhat.first_mut())
                        .map(|((mean, rstd), xhat)| LayerNormCaches { xhat, mean, rstd });
                    self.layernorm(&w[0], &w[1], &w[2], eps, wy, wc)
                },
                float_launch!(|F| rw::launch_layernorm::<R, F>(&self.client, bufs, shape, eps)),
            )
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
        let hs = (
            out_handle(dy),
            out_handle(xhat),
            out_handle(gamma),
            out_handle(rstd),
        );
        let (dxh, dgh, dbh) = (out_handle(dx), out_handle(dgamma), out_handle(dbeta));
        let shape = (dy.numel() / gamma.numel().max(1), gamma.numel());
        let c = &self.client;
        // rstd is F32 whatever the data's dtype; the parameter gradients accumulate.
        self.float_op("layernorm_backward", dy.dtype())
            .inputs(&[dy, xhat, gamma])
            .written(&mut [dx])
            .updated(&mut [dgamma, dbeta])
            .run(
                |w, o| {
                    let [wdx, wdg, wdb] = o else {
                        unreachable!("three outputs")
                    };
                    self.layernorm_backward(&w[0], &w[1], &w[2], rstd, wdx, wdg, wdb)
                },
                float_launch!(|F| {
                    let ins = (&hs.0, &hs.1, &hs.2, &hs.3);
                    rw::launch_layernorm_backward::<R, F>(c, ins, &dxh, shape)?;
                    rd::launch_column_sums::<R, F>(
                        c,
                        (&hs.0, Some(&hs.1), None),
                        &dgh,
                        shape,
                        true,
                    )?;
                    rd::launch_column_sums::<R, F>(c, (&hs.0, None, None), &dbh, shape, true)
                }),
            )
    }

    fn batch_norm_train(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        beta: &Tensor,
        (n, hw): (usize, usize),
        (eps, momentum): (f32, f32),
        stats: BatchNormStats<'_>,
        y: &mut Tensor,
    ) -> Result<()> {
        let h = [x, gamma, beta, y].map(out_handle);
        let s = [
            &*stats.running_mean,
            &*stats.running_var,
            &*stats.saved_mean,
            &*stats.saved_rstd,
        ]
        .map(out_handle);
        let ks = brotensor_kernels::batch_norm::BatchNormStats {
            running_mean: &s[0],
            running_var: &s[1],
            saved_mean: &s[2],
            saved_rstd: &s[3],
        };
        brotensor_kernels::batch_norm::launch_batch_norm::<R>(
            &self.client,
            (&h[0], &h[1], &h[2], &h[3]),
            ks,
            (n, gamma.numel(), hw),
            eps,
            momentum,
        )
        .map_err(|e| self.launch_error("batch_norm_forward", e))
    }

    fn batch_norm_inference(
        &self,
        x: &Tensor,
        params: (&Tensor, &Tensor, &Tensor, &Tensor),
        hw: usize,
        eps: f32,
        y: &mut Tensor,
    ) -> Result<()> {
        let (gamma, beta, mean, var) = params;
        let h = [x, y, gamma, beta, mean, var].map(out_handle);
        let shape = (x.numel(), gamma.numel(), hw);
        self.float_op("batch_norm_inference", x.dtype())
            .inputs(&[x, gamma, beta, mean, var])
            .written(&mut [y])
            .run(
                |w, o| {
                    let params = (&w[1], &w[2], &w[3], &w[4]);
                    self.batch_norm_inference(&w[0], params, hw, eps, &mut o[0])
                },
                float_launch!(|F| {
                    brotensor_kernels::batch_norm::launch_batch_norm_inference::<R, F>(
                        &self.client,
                        (&h[0], &h[1]),
                        (&h[2], &h[3], &h[4], &h[5]),
                        shape,
                        eps,
                    )
                }),
            )
    }

    fn batch_norm_backward(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        (mean, rstd): (&Tensor, &Tensor),
        dy: &Tensor,
        (n, hw): (usize, usize),
        dx: &mut Tensor,
        dgamma: &mut Tensor,
        dbeta: &mut Tensor,
    ) -> Result<()> {
        let h = [x, gamma, mean, rstd, dy, dx, dgamma, dbeta].map(out_handle);
        brotensor_kernels::batch_norm::launch_batch_norm_backward::<R>(
            &self.client,
            (&h[0], &h[1], &h[2], &h[3], &h[4]),
            (&h[5], &h[6], &h[7]),
            (n, gamma.numel(), hw),
        )
        .map_err(|e| self.launch_error("batch_norm_backward", e))
    }

    fn group_norm(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        beta: &Tensor,
        (groups, hw): (usize, usize),
        eps: f32,
        silu: bool,
        y: &mut Tensor,
    ) -> Result<()> {
        let h = [x, gamma, beta, y].map(out_handle);
        let cpg = gamma.numel() / groups.max(1);
        let rows = x.numel() / (cpg * hw).max(1);
        self.float_op("group_norm_forward", x.dtype())
            .inputs(&[x, gamma, beta])
            .written(&mut [y])
            .run(
                |w, o| self.group_norm(&w[0], &w[1], &w[2], (groups, hw), eps, silu, &mut o[0]),
                float_launch!(|F| rw::launch_group_norm::<R, F>(
                    &self.client,
                    (&h[0], &h[1], &h[2], &h[3]),
                    rows,
                    (groups, cpg, hw),
                    eps,
                    silu
                )),
            )
    }

    fn group_norm_backward(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        dy: &Tensor,
        (groups, hw): (usize, usize),
        eps: f32,
        dx: &mut Tensor,
        (part_g, part_b): (&mut Tensor, &mut Tensor),
    ) -> Result<()> {
        let h = [x, gamma, dy, dx, part_g, part_b].map(out_handle);
        let cpg = gamma.numel() / groups.max(1);
        let rows = x.numel() / (cpg * hw).max(1);
        self.float_op("group_norm_backward", x.dtype())
            .inputs(&[x, gamma, dy])
            .written(&mut [dx, part_g, part_b])
            .run(
                |w, o| {
                    let [wdx, wpg, wpb] = o else {
                        unreachable!("three outputs")
                    };
                    let parts = (wpg, wpb);
                    self.group_norm_backward(&w[0], &w[1], &w[2], (groups, hw), eps, wdx, parts)
                },
                float_launch!(|F| rw::launch_group_norm_backward::<R, F>(
                    &self.client,
                    (&h[0], &h[1], &h[2]),
                    (&h[3], &h[4], &h[5]),
                    rows,
                    (groups, cpg, hw),
                    eps
                )),
            )
    }

    fn rms_norm(&self, x: &Tensor, gamma: &Tensor, eps: f32, y: &mut Tensor) -> Result<()> {
        let (xh, gh, yh) = (out_handle(x), out_handle(gamma), out_handle(y));
        let shape = x.shape();
        self.float_op("rms_norm_forward", x.dtype())
            .inputs(&[x, gamma])
            .written(&mut [y])
            .run(
                |w, o| self.rms_norm(&w[0], &w[1], eps, &mut o[0]),
                float_launch!(|F| rw::launch_rms_norm::<R, F>(
                    &self.client,
                    (&xh, &gh, &yh),
                    None,
                    shape,
                    eps
                )),
            )
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
        let (xh, gh, dyh) = (out_handle(x), out_handle(gamma), out_handle(dy));
        let (dxh, dgh) = (out_handle(dx), dgamma.as_deref().map(out_handle));
        let shape = x.shape();
        let c = &self.client;
        // The gamma gradient accumulates.
        let mut updated: Vec<&mut Tensor> = dgamma.into_iter().collect();
        self.float_op("rms_norm_backward", x.dtype())
            .inputs(&[x, gamma, dy])
            .written(&mut [dx])
            .updated(&mut updated)
            .run(
                |w, o| {
                    let (wdx, wdg) = o.split_first_mut().expect("dx is an output");
                    self.rms_norm_backward(&w[0], &w[1], &w[2], eps, wdx, wdg.first_mut())
                },
                float_launch!(|F| {
                    let rrms = self.scratch(x.rows())?;
                    let rh = out_handle(&rrms);
                    rw::launch_rms_norm_backward::<R, F>(
                        c,
                        (&xh, &gh, &dyh),
                        &dxh,
                        &rh,
                        shape,
                        eps,
                    )?;
                    dgh.as_ref().map_or(Ok(()), |dgh| {
                        let ins = (&dyh, Some(&xh), Some(&rh));
                        rd::launch_column_sums::<R, F>(c, ins, dgh, shape, true)
                    })
                }),
            )
    }
}
