//! CPU glue of the convolution ops. F16 and BF16 run on FP32 copies of their operands and
//! narrow the output once (`dtype_policy::through_f32`): the convolutions are products, and
//! the padding and streaming ops are rare enough on 16-bit data not to need their own path.

use brotensor_cpu::{conv as cv, conv1d as c1, conv3d as c3, deform as df};

use super::dtype_policy::{is_half, through_f32, Narrowed};
use super::CpuBackend;
use crate::backend::{Conv2d, Conv3d, ConvOps};
use crate::{Result, Tensor};

/// Runs `f` on the F32 tensors as they are, or on FP32 copies of 16-bit ones with each
/// output narrowed back once (`written` outputs start undefined, `updated` ones widened).
pub(super) fn in_f32<'t>(
    inputs: &[Option<&Tensor>],
    written: &mut [&'t mut Tensor],
    updated: &mut [&'t mut Tensor],
    f: impl FnOnce(&[Option<&Tensor>], &mut [&mut Tensor]) -> Result<()>,
) -> Result<()> {
    let half = inputs.iter().flatten().any(|t| is_half(t.dtype()));
    if !half {
        let mut outs: Vec<&mut Tensor> = written
            .iter_mut()
            .chain(updated.iter_mut())
            .map(|t| &mut **t)
            .collect();
        return f(inputs, &mut outs);
    }
    let present: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
    let mut outs: Vec<Narrowed<'_>> = written
        .iter_mut()
        .map(|t| Narrowed::written(t))
        .chain(updated.iter_mut().map(|t| Narrowed::updated(t)))
        .collect();
    through_f32(&present, &mut outs, |wide, wide_out| {
        let mut next = wide.iter();
        let inputs: Vec<Option<&Tensor>> =
            inputs.iter().map(|t| t.and_then(|_| next.next())).collect();
        let mut outs: Vec<&mut Tensor> = wide_out.iter_mut().collect();
        f(&inputs, &mut outs)
    })
}

pub(super) fn host(t: Option<&Tensor>) -> &[f32] {
    t.map_or(&[], |t| t.host())
}

impl ConvOps for CpuBackend {
    fn conv2d_forward(
        &self,
        _name: &'static str,
        conv: &Conv2d,
        x: &Tensor,
        w: &Tensor,
        bias: Option<&Tensor>,
        y: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(x), Some(w), bias], &mut [y], &mut [], |i, o| {
            let bias = i[2].map(|b| b.host());
            let w = i[1].expect("the weight is present");
            let packed = conv
                .forward_packs_weights()
                .then(|| w.derived(|| cv::PackedWeights::forward(conv, w.host())))
                .flatten();
            cv::conv2d_forward(
                conv,
                host(i[0]),
                w.host(),
                bias,
                o[0].host_mut(),
                packed.as_deref(),
            );
            Ok(())
        })
    }

    fn conv3d_forward(
        &self,
        _name: &'static str,
        conv: &Conv3d,
        x: &Tensor,
        w: &Tensor,
        bias: Option<&Tensor>,
        y: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(x), Some(w), bias], &mut [y], &mut [], |i, o| {
            let bias = i[2].map(|b| b.host());
            c3::conv3d_forward(conv, host(i[0]), host(i[1]), bias, o[0].host_mut());
            Ok(())
        })
    }

    fn deform_conv2d_forward(
        &self,
        _name: &'static str,
        conv: &Conv2d,
        deform_groups: usize,
        x: &Tensor,
        offset: &Tensor,
        mask: Option<&Tensor>,
        w: &Tensor,
        bias: Option<&Tensor>,
        y: &mut Tensor,
    ) -> Result<()> {
        let inputs = [Some(x), Some(offset), mask, Some(w), bias];
        in_f32(&inputs, &mut [y], &mut [], |i, o| {
            df::deform_conv2d_forward(
                conv,
                deform_groups,
                host(i[0]),
                host(i[1]),
                i[2].map(|m| m.host()),
                host(i[3]),
                i[4].map(|b| b.host()),
                o[0].host_mut(),
            );
            Ok(())
        })
    }

    fn conv2d_backward_input(
        &self,
        _name: &'static str,
        conv: &Conv2d,
        w: &Tensor,
        dy: &Tensor,
        bias: Option<&Tensor>,
        dx: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(w), Some(dy), bias], &mut [dx], &mut [], |i, o| {
            let dx = o[0].host_mut();
            let w = i[0].expect("the weight is present");
            // A weight packed for the forward convolution (training uses both directions)
            // does not fit: then it is packed here per call, as it was before.
            let packed = w.derived(|| cv::PackedWeights::input_gradient(conv, w.host()));
            cv::conv2d_backward_input(conv, host(i[1]), w.host(), dx, packed.as_deref());
            if let Some(b) = i[2] {
                cv::add_channel_bias(dx, b.host(), conv.x.h * conv.x.w);
            }
            Ok(())
        })
    }

    fn conv2d_backward_weight(
        &self,
        _name: &'static str,
        conv: &Conv2d,
        x: &Tensor,
        dy: &Tensor,
        dw: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(x), Some(dy)], &mut [], &mut [dw], |i, o| {
            cv::conv2d_backward_weight(conv, host(i[0]), host(i[1]), o[0].host_mut());
            Ok(())
        })
    }

    fn conv2d_backward_bias(
        &self,
        _name: &'static str,
        sizes: (usize, usize, usize),
        dy: &Tensor,
        db: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(dy)], &mut [], &mut [db], |i, o| {
            cv::conv2d_backward_bias(host(i[0]), sizes, o[0].host_mut());
            Ok(())
        })
    }

    fn causal_conv1d_update(
        &self,
        _name: &'static str,
        x: &Tensor,
        w: &Tensor,
        bias: Option<&Tensor>,
        sizes: (usize, usize, usize, usize, usize),
        state: &mut Tensor,
        y: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(x), Some(w), bias], &mut [y], &mut [state], |i, o| {
            let (y, state) = o.split_at_mut(1);
            let bias = i[2].map(|b| b.host());
            c1::causal_conv1d_update(
                host(i[0]),
                host(i[1]),
                bias,
                sizes,
                state[0].host_mut(),
                y[0].host_mut(),
            );
            Ok(())
        })
    }
}
