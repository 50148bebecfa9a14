//! GPU glue of the StyleGAN ops: the launches of `brotensor_kernels::stylegan`.

use brotensor_kernels::stylegan::{self as ks, BiasActParams, ModSizes, UpfirdnGeometry};
use cubecl::prelude::*;

use super::{float_launch, out_handle, CubeBackend};
use crate::backend::{BiasAct, Modulation, StyleganOps, Upfirdn2d};
use crate::{Dtype, Error, Result, Tensor};
use brotensor_cpu::stylegan::BiasActivation;

fn mod_sizes(m: Modulation) -> ModSizes {
    ModSizes {
        n: m.n,
        c_out: m.c_out,
        c_in: m.c_in,
        taps: m.taps,
    }
}

impl<R: Runtime> StyleganOps for CubeBackend<R> {
    fn bias_act(
        &self,
        name: &'static str,
        x: &Tensor,
        dy: Option<&Tensor>,
        b: Option<&Tensor>,
        sizes: (usize, usize),
        p: BiasAct,
        y: &mut Tensor,
    ) -> Result<()> {
        let (xh, yh) = (out_handle(x), out_handle(y));
        let (dh, bh) = (dy.map(out_handle), b.map(out_handle));
        let len = x.numel();
        let params = BiasActParams {
            leaky_alpha: match p.act {
                BiasActivation::Linear => None,
                BiasActivation::LeakyRelu { alpha } => Some(alpha),
            },
            gain: p.gain,
            clamp: p.clamp,
        };
        let inputs: Vec<&Tensor> = [Some(x), dy, b].into_iter().flatten().collect();
        self.float_op(name, x.dtype())
            .inputs(&inputs)
            .written(&mut [y])
            .run(
                |i, o| {
                    let mut rest = i[1..].iter();
                    let dy = dy.and_then(|_| rest.next());
                    let b = b.and_then(|_| rest.next());
                    self.bias_act(name, &i[0], dy, b, sizes, p, &mut o[0])
                },
                float_launch!(|F| ks::launch_bias_act::<R, F>(
                    &self.client,
                    (&xh, dh.as_ref(), bh.as_ref(), &yh),
                    len,
                    sizes,
                    params
                )),
            )
    }

    fn modulate_weights(
        &self,
        name: &'static str,
        w: &Tensor,
        s: &Tensor,
        m: Modulation,
        demod_eps: Option<f32>,
        wmod: &mut Tensor,
        dcoef: &mut Tensor,
    ) -> Result<()> {
        let h = [w, s].map(out_handle);
        let (mh, dh) = (out_handle(wmod), out_handle(dcoef));
        self.float_op(name, w.dtype())
            .inputs(&[w, s])
            .written(&mut [wmod, dcoef])
            .run(
                |i, o| {
                    let [wmod, dcoef] = o else {
                        unreachable!("two outputs")
                    };
                    self.modulate_weights(name, &i[0], &i[1], m, demod_eps, wmod, dcoef)
                },
                float_launch!(|F| ks::launch_modulate_weights::<R, F>(
                    &self.client,
                    (&h[0], &h[1], &mh, &dh),
                    mod_sizes(m),
                    demod_eps
                )),
            )
    }

    fn modulate_weights_backward(
        &self,
        name: &'static str,
        w: &Tensor,
        s: &Tensor,
        dcoef: &Tensor,
        dwmod: &Tensor,
        m: Modulation,
        demodulate: bool,
        dw: &mut Tensor,
        ds: &mut Tensor,
    ) -> Result<()> {
        let h = [w, s, dcoef, dwmod].map(out_handle);
        let (dwh, dsh) = (out_handle(dw), out_handle(ds));
        let scratch_len = dwmod.numel().max(1);
        let scratch = Tensor::empty_on(self.device, 1, scratch_len, Dtype::F32)?;
        let ph = out_handle(&scratch);
        self.float_op(name, w.dtype())
            .inputs(&[w, s, dcoef, dwmod])
            .written(&mut [ds])
            .updated(&mut [dw])
            .run(
                |i, o| {
                    let [ds, dw] = o else {
                        unreachable!("two outputs")
                    };
                    self.modulate_weights_backward(
                        name, &i[0], &i[1], &i[2], &i[3], m, demodulate, dw, ds,
                    )
                },
                float_launch!(|F| ks::launch_modulate_weights_backward::<R, F>(
                    &self.client,
                    (&h[0], &h[1], &h[2], &h[3]),
                    &ph,
                    (&dwh, &dsh),
                    mod_sizes(m),
                    demodulate
                )),
            )
    }

    fn upfirdn2d(
        &self,
        name: &'static str,
        g: &Upfirdn2d,
        x: &Tensor,
        f: &Tensor,
        y: &mut Tensor,
    ) -> Result<()> {
        let (xh, fh, yh) = (out_handle(x), out_handle(f), out_handle(y));
        let out = g.out_size().map_err(|e| Error::shape(name, e))?;
        let plane = g.input[0] * g.input[1];
        let planes = x.numel().checked_div(plane).unwrap_or(0);
        let geometry = UpfirdnGeometry {
            input: g.input,
            out,
            filter: g.filter,
            up: g.up,
            down: g.down,
            pad: g.pad,
            flip_filter: g.flip_filter,
            gain: g.gain,
        };
        self.float_op(name, x.dtype())
            .inputs(&[x, f])
            .written(&mut [y])
            .run(
                |i, o| self.upfirdn2d(name, g, &i[0], &i[1], &mut o[0]),
                float_launch!(|F| ks::launch_upfirdn2d::<R, F>(
                    &self.client,
                    (&xh, &fh, &yh),
                    planes,
                    &geometry
                )),
            )
    }
}
