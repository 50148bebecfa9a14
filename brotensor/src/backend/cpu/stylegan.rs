//! CPU glue of the StyleGAN ops: `brotensor_cpu::stylegan` on the host buffers. F16 and
//! BF16 run on FP32 copies with each output narrowed once.

use brotensor_cpu::stylegan as sg;

use super::conv::{host, in_f32};
use super::CpuBackend;
use crate::backend::{BiasAct, Modulation, StyleganOps, Upfirdn2d};
use crate::{Result, Tensor};

impl StyleganOps for CpuBackend {
    fn bias_act(
        &self,
        _name: &'static str,
        x: &Tensor,
        dy: Option<&Tensor>,
        b: Option<&Tensor>,
        (channels, plane): (usize, usize),
        p: BiasAct,
        y: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(x), dy, b], &mut [y], &mut [], |i, o| {
            let b = i[2].map(|t| t.host());
            match i[1] {
                Some(dy) => sg::bias_act_backward(
                    dy.host(),
                    host(i[0]),
                    b,
                    channels,
                    plane,
                    p,
                    o[0].host_mut(),
                ),
                None => sg::bias_act(host(i[0]), b, channels, plane, p, o[0].host_mut()),
            }
            Ok(())
        })
    }

    fn modulate_weights(
        &self,
        _name: &'static str,
        w: &Tensor,
        s: &Tensor,
        m: Modulation,
        demod_eps: Option<f32>,
        wmod: &mut Tensor,
        dcoef: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(w), Some(s)], &mut [wmod, dcoef], &mut [], |i, o| {
            let [wmod, dcoef] = o else {
                unreachable!("two outputs")
            };
            sg::modulate_weights(
                host(i[0]),
                host(i[1]),
                m,
                demod_eps,
                wmod.host_mut(),
                dcoef.host_mut(),
            );
            Ok(())
        })
    }

    fn modulate_weights_backward(
        &self,
        _name: &'static str,
        w: &Tensor,
        s: &Tensor,
        dcoef: &Tensor,
        dwmod: &Tensor,
        m: Modulation,
        demodulate: bool,
        dw: &mut Tensor,
        ds: &mut Tensor,
    ) -> Result<()> {
        let inputs = [Some(w), Some(s), Some(dcoef), Some(dwmod)];
        in_f32(&inputs, &mut [ds], &mut [dw], |i, o| {
            let [ds, dw] = o else {
                unreachable!("two outputs")
            };
            sg::modulate_weights_backward(
                host(i[0]),
                host(i[1]),
                host(i[2]),
                host(i[3]),
                m,
                demodulate,
                dw.host_mut(),
                ds.host_mut(),
            );
            Ok(())
        })
    }

    fn upfirdn2d(
        &self,
        _name: &'static str,
        g: &Upfirdn2d,
        x: &Tensor,
        f: &Tensor,
        y: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(x), Some(f)], &mut [y], &mut [], |i, o| {
            sg::upfirdn2d(host(i[0]), host(i[1]), g, o[0].host_mut());
            Ok(())
        })
    }
}
