//! GPU glue of the convolution ops: the geometry in the kernel crate's terms, then the
//! launches of `brotensor_kernels::conv` (im2col tiles and the tiled GEMM) and
//! `brotensor_kernels::conv1d`.

use brotensor_kernels::conv::{self as kc, ConvGeometry};
use brotensor_kernels::conv1d as k1;
use cubecl::prelude::*;

use super::{float_launch, out_handle, CubeBackend};
use crate::backend::{Conv2d, Conv3d, ConvOps};
use crate::{Result, Tensor};

/// The kernel crate's geometry of a checked [`Conv2d`].
fn geometry(conv: &Conv2d) -> ConvGeometry {
    let s = conv.spec;
    let deep = |[a, b]: [usize; 2], one: usize| [one, a, b];
    ConvGeometry {
        n: conv.x.n,
        c_in: conv.x.c,
        input: [1, conv.x.h, conv.x.w],
        c_out: conv.c_out,
        out: deep(conv.out, 1),
        kernel: deep(s.kernel, 1),
        stride: deep(s.stride, 1),
        padding: deep(s.padding, 0),
        dilation: deep(s.dilation, 1),
        groups: s.groups,
    }
}

/// The kernel crate's geometry of a checked [`Conv3d`].
fn geometry_3d(conv: &Conv3d) -> ConvGeometry {
    let s = conv.spec;
    ConvGeometry {
        n: conv.n,
        c_in: conv.c_in,
        input: conv.input,
        c_out: conv.c_out,
        out: conv.out,
        kernel: s.kernel,
        stride: s.stride,
        padding: s.padding,
        dilation: s.dilation,
        groups: s.groups,
    }
}

impl<R: Runtime> CubeBackend<R> {
    /// A forward convolution of `geo` (2-D or 3-D), `in_f32` its run on F32 copies.
    fn convolve(
        &self,
        name: &'static str,
        geo: ConvGeometry,
        (x, w, bias): (&Tensor, &Tensor, Option<&Tensor>),
        y: &mut Tensor,
        in_f32: impl FnOnce(&[Tensor], &mut [Tensor]) -> Result<()>,
    ) -> Result<()> {
        let (xh, wh, yh) = (out_handle(x), out_handle(w), out_handle(y));
        let bh = bias.map(out_handle);
        let inputs: Vec<&Tensor> = [x, w].into_iter().chain(bias).collect();
        self.float_op(name, x.dtype())
            .inputs(&inputs)
            .written(&mut [y])
            .run(
                in_f32,
                float_launch!(|F| kc::launch_conv_forward::<R, F>(
                    &self.client,
                    (&xh, &wh, bh.as_ref()),
                    &yh,
                    geo
                )),
            )
    }
}

impl<R: Runtime> ConvOps for CubeBackend<R> {
    fn conv2d_forward(
        &self,
        name: &'static str,
        conv: &Conv2d,
        x: &Tensor,
        w: &Tensor,
        bias: Option<&Tensor>,
        y: &mut Tensor,
    ) -> Result<()> {
        self.convolve(name, geometry(conv), (x, w, bias), y, |i, o| {
            self.conv2d_forward(name, conv, &i[0], &i[1], i.get(2), &mut o[0])
        })
    }

    fn conv3d_forward(
        &self,
        name: &'static str,
        conv: &Conv3d,
        x: &Tensor,
        w: &Tensor,
        bias: Option<&Tensor>,
        y: &mut Tensor,
    ) -> Result<()> {
        self.convolve(name, geometry_3d(conv), (x, w, bias), y, |i, o| {
            self.conv3d_forward(name, conv, &i[0], &i[1], i.get(2), &mut o[0])
        })
    }

    fn deform_conv2d_forward(
        &self,
        name: &'static str,
        conv: &Conv2d,
        deform_groups: usize,
        x: &Tensor,
        offset: &Tensor,
        mask: Option<&Tensor>,
        w: &Tensor,
        bias: Option<&Tensor>,
        y: &mut Tensor,
    ) -> Result<()> {
        let (xh, oh, wh, yh) = (
            out_handle(x),
            out_handle(offset),
            out_handle(w),
            out_handle(y),
        );
        let (mh, bh) = (mask.map(out_handle), bias.map(out_handle));
        let geo = geometry(conv);
        // The F32 path's inputs in order, the optional ones where given.
        let inputs: Vec<&Tensor> = [Some(x), Some(offset), mask, Some(w), bias]
            .into_iter()
            .flatten()
            .collect();
        self.float_op(name, x.dtype())
            .inputs(&inputs)
            .written(&mut [y])
            .run(
                |i, o| {
                    let mut next = i.iter();
                    let mut take = |t: Option<&Tensor>| t.and_then(|_| next.next());
                    let (xw, ow) = (take(Some(x)), take(Some(offset)));
                    let (mw, ww, bw) = (take(mask), take(Some(w)), take(bias));
                    let (Some(xw), Some(ow), Some(ww)) = (xw, ow, ww) else {
                        unreachable!("the F32 copies of the given inputs");
                    };
                    self.deform_conv2d_forward(
                        name,
                        conv,
                        deform_groups,
                        xw,
                        ow,
                        mw,
                        ww,
                        bw,
                        &mut o[0],
                    )
                },
                float_launch!(|F| kc::launch_deform_conv2d_forward::<R, F>(
                    &self.client,
                    (&xh, &oh, mh.as_ref()),
                    (&wh, bh.as_ref()),
                    &yh,
                    geo,
                    deform_groups
                )),
            )
    }

    fn conv2d_backward_input(
        &self,
        name: &'static str,
        conv: &Conv2d,
        w: &Tensor,
        dy: &Tensor,
        bias: Option<&Tensor>,
        dx: &mut Tensor,
    ) -> Result<()> {
        let (wh, dyh, dxh) = (out_handle(w), out_handle(dy), out_handle(dx));
        let bh = bias.map(out_handle);
        let geo = geometry(conv);
        let inputs: Vec<&Tensor> = [w, dy].into_iter().chain(bias).collect();
        self.float_op(name, dy.dtype())
            .inputs(&inputs)
            .written(&mut [dx])
            .run(
                |i, o| self.conv2d_backward_input(name, conv, &i[0], &i[1], i.get(2), &mut o[0]),
                float_launch!(|F| kc::launch_conv2d_backward_input::<R, F>(
                    &self.client,
                    (&wh, &dyh, bh.as_ref()),
                    &dxh,
                    geo
                )),
            )
    }

    fn conv2d_backward_weight(
        &self,
        name: &'static str,
        conv: &Conv2d,
        x: &Tensor,
        dy: &Tensor,
        dw: &mut Tensor,
    ) -> Result<()> {
        let (xh, dyh, dwh) = (out_handle(x), out_handle(dy), out_handle(dw));
        let geo = geometry(conv);
        self.float_op(name, x.dtype())
            .inputs(&[x, dy])
            .updated(&mut [dw])
            .run(
                |i, o| self.conv2d_backward_weight(name, conv, &i[0], &i[1], &mut o[0]),
                float_launch!(|F| kc::launch_conv2d_backward_weight::<R, F>(
                    &self.client,
                    (&xh, &dyh),
                    &dwh,
                    geo
                )),
            )
    }

    fn conv2d_backward_bias(
        &self,
        name: &'static str,
        sizes: (usize, usize, usize),
        dy: &Tensor,
        db: &mut Tensor,
    ) -> Result<()> {
        let (dyh, dbh) = (out_handle(dy), out_handle(db));
        self.float_op(name, dy.dtype())
            .inputs(&[dy])
            .updated(&mut [db])
            .run(
                |i, o| self.conv2d_backward_bias(name, sizes, &i[0], &mut o[0]),
                float_launch!(|F| kc::launch_conv2d_backward_bias::<R, F>(
                    &self.client,
                    &dyh,
                    &dbh,
                    sizes
                )),
            )
    }

    fn causal_conv1d_update(
        &self,
        name: &'static str,
        x: &Tensor,
        w: &Tensor,
        bias: Option<&Tensor>,
        sizes: (usize, usize, usize, usize, usize),
        state: &mut Tensor,
        y: &mut Tensor,
    ) -> Result<()> {
        let (xh, wh, sh, yh) = (
            out_handle(x),
            out_handle(w),
            out_handle(state),
            out_handle(y),
        );
        let bh = bias.map(out_handle);
        let inputs: Vec<&Tensor> = [x, w].into_iter().chain(bias).collect();
        self.float_op(name, x.dtype())
            .inputs(&inputs)
            .written(&mut [y])
            .updated(&mut [state])
            .run(
                |i, o| {
                    let (y, state) = o.split_at_mut(1);
                    let (y, state) = (&mut y[0], &mut state[0]);
                    self.causal_conv1d_update(name, &i[0], &i[1], i.get(2), sizes, state, y)
                },
                float_launch!(|F| k1::launch_causal_conv1d_update::<R, F>(
                    &self.client,
                    (&xh, &wh, bh.as_ref()),
                    (&sh, &yh),
                    sizes
                )),
            )
    }
}
