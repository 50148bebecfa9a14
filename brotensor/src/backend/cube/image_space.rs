//! GPU glue of the image-space ops: the geometry and tables in the kernel crate's terms,
//! then the launches of `brotensor_kernels::{resize, pad, pooling, image}`.

use brotensor_kernels::image as ki;
use brotensor_kernels::pad::{self as kp, Window2d};
use brotensor_kernels::pooling::{self as kl, PoolWindow};
use brotensor_kernels::resize::{self as kr, AxisGather, AxisTaps};
use cubecl::prelude::*;

use super::{float_launch, out_handle, CubeBackend};
use crate::backend::{AxisAdjoint, AxisTable, ImageSpaceOps, MaxPool2d, PadMode, Unfold2d};
use crate::{Result, Tensor};

/// The kernels' code of a padding mode.
fn pad_code(mode: PadMode) -> u32 {
    match mode {
        PadMode::Zero => kp::PAD_ZERO,
        PadMode::Reflect => kp::PAD_REFLECT,
        PadMode::Replicate => kp::PAD_REPLICATE,
    }
}

fn window(g: &Unfold2d, out: [usize; 2]) -> Window2d {
    Window2d {
        input: g.input,
        kernel: g.kernel,
        stride: g.stride,
        before: g.before,
        after: g.after,
        out,
    }
}

fn pool_window(g: &MaxPool2d) -> PoolWindow {
    PoolWindow {
        input: g.input,
        out: g.out,
        kernel: g.kernel,
        stride: g.stride,
        padding: g.padding,
        dilation: g.dilation,
    }
}

fn taps(t: &AxisTable) -> AxisTaps<'_> {
    AxisTaps {
        len_in: t.len_in,
        len_out: t.len_out,
        taps: t.taps,
        index: &t.index,
        weight: &t.weight,
    }
}

fn gather(t: &AxisAdjoint, len_out: usize) -> AxisGather<'_> {
    AxisGather {
        len_out,
        start: &t.start,
        index: &t.index,
        weight: &t.weight,
    }
}

/// The planes of a tensor of `numel` elements in planes of `plane` (0 for empty planes).
fn planes(numel: usize, plane: usize) -> usize {
    numel.checked_div(plane).unwrap_or(0)
}

impl<R: Runtime> ImageSpaceOps for CubeBackend<R> {
    fn resample(
        &self,
        name: &'static str,
        (rows, cols): (&AxisTable, &AxisTable),
        x: &Tensor,
        y: &mut Tensor,
    ) -> Result<()> {
        let (xh, yh) = (out_handle(x), out_handle(y));
        let n = planes(y.numel(), rows.len_out * cols.len_out);
        let (rt, ct) = (taps(rows), taps(cols));
        self.float_op(name, x.dtype())
            .inputs(&[x])
            .written(&mut [y])
            .run(
                |i, o| self.resample(name, (rows, cols), &i[0], &mut o[0]),
                float_launch!(|F| kr::launch_resample_forward::<R, F>(
                    &self.client,
                    &xh,
                    &yh,
                    n,
                    (&rt, &ct)
                )),
            )
    }

    fn resample_backward(
        &self,
        name: &'static str,
        (rows, cols): (&AxisAdjoint, &AxisAdjoint),
        out: [usize; 2],
        dy: &Tensor,
        dx: &mut Tensor,
    ) -> Result<()> {
        let (dyh, dxh) = (out_handle(dy), out_handle(dx));
        let plane_in = (rows.start.len() - 1) * (cols.start.len() - 1);
        let n = planes(dx.numel(), plane_in);
        let (rg, cg) = (gather(rows, out[0]), gather(cols, out[1]));
        self.float_op(name, dy.dtype())
            .inputs(&[dy])
            .written(&mut [dx])
            .run(
                |i, o| self.resample_backward(name, (rows, cols), out, &i[0], &mut o[0]),
                float_launch!(|F| kr::launch_resample_backward::<R, F>(
                    &self.client,
                    &dyh,
                    &dxh,
                    n,
                    (&rg, &cg)
                )),
            )
    }

    fn convex_upsample(
        &self,
        name: &'static str,
        dims: (usize, usize, usize, usize),
        k: usize,
        x: &Tensor,
        mask: &Tensor,
        y: &mut Tensor,
    ) -> Result<()> {
        let (xh, mh, yh) = (out_handle(x), out_handle(mask), out_handle(y));
        self.float_op(name, x.dtype())
            .inputs(&[x, mask])
            .written(&mut [y])
            .run(
                |i, o| self.convex_upsample(name, dims, k, &i[0], &i[1], &mut o[0]),
                float_launch!(|F| kr::launch_convex_upsample::<R, F>(
                    &self.client,
                    (&xh, &mh, &yh),
                    dims,
                    k
                )),
            )
    }

    fn pixel_shuffle_upsample_2x(
        &self,
        name: &'static str,
        dims: (usize, usize, usize, usize),
        c_out: usize,
        x: &Tensor,
        y: &mut Tensor,
    ) -> Result<()> {
        let (xh, yh) = (out_handle(x), out_handle(y));
        self.float_op(name, x.dtype())
            .inputs(&[x])
            .written(&mut [y])
            .run(
                |i, o| self.pixel_shuffle_upsample_2x(name, dims, c_out, &i[0], &mut o[0]),
                float_launch!(|F| kr::launch_pixel_shuffle_upsample_2x::<R, F>(
                    &self.client,
                    &xh,
                    &yh,
                    dims,
                    c_out
                )),
            )
    }

    fn unfold2d(
        &self,
        name: &'static str,
        g: &Unfold2d,
        out: [usize; 2],
        x: &Tensor,
        y: &mut Tensor,
    ) -> Result<()> {
        let (xh, yh) = (out_handle(x), out_handle(y));
        let n = planes(x.numel(), g.input[0] * g.input[1]);
        let win = window(g, out);
        self.float_op(name, x.dtype())
            .inputs(&[x])
            .written(&mut [y])
            .run(
                |i, o| self.unfold2d(name, g, out, &i[0], &mut o[0]),
                float_launch!(|F| kp::launch_unfold2d::<R, F>(
                    &self.client,
                    &xh,
                    &yh,
                    n,
                    &win,
                    pad_code(g.mode)
                )),
            )
    }

    fn pad2d_backward(
        &self,
        name: &'static str,
        g: &Unfold2d,
        dy: &Tensor,
        dx: &mut Tensor,
    ) -> Result<()> {
        let (dyh, dxh) = (out_handle(dy), out_handle(dx));
        let n = planes(dx.numel(), g.input[0] * g.input[1]);
        let padded = [
            g.input[0] + g.before[0] + g.after[0],
            g.input[1] + g.before[1] + g.after[1],
        ];
        let win = window(g, padded);
        self.float_op(name, dy.dtype())
            .inputs(&[dy])
            .written(&mut [dx])
            .run(
                |i, o| self.pad2d_backward(name, g, &i[0], &mut o[0]),
                float_launch!(|F| kp::launch_pad2d_backward::<R, F>(
                    &self.client,
                    &dyh,
                    &dxh,
                    n,
                    &win,
                    pad_code(g.mode)
                )),
            )
    }

    fn max_pool2d(
        &self,
        name: &'static str,
        g: &MaxPool2d,
        x: &Tensor,
        y: &mut Tensor,
        idx: &mut Tensor,
    ) -> Result<()> {
        let (xh, yh, ih) = (out_handle(x), out_handle(y), out_handle(idx));
        let n = planes(x.numel(), g.input[0] * g.input[1]);
        let win = pool_window(g);
        // The indices are not a float output: nothing to narrow.
        self.float_op(name, x.dtype())
            .inputs(&[x])
            .written(&mut [y])
            .run(
                |i, o| self.max_pool2d(name, g, &i[0], &mut o[0], idx),
                float_launch!(|F| kl::launch_max_pool2d::<R, F>(
                    &self.client,
                    (&xh, &yh, &ih),
                    n,
                    &win
                )),
            )
    }

    fn max_pool2d_backward(
        &self,
        name: &'static str,
        g: &MaxPool2d,
        dy: &Tensor,
        idx: &Tensor,
        dx: &mut Tensor,
    ) -> Result<()> {
        let (dyh, ih, dxh) = (out_handle(dy), out_handle(idx), out_handle(dx));
        let n = planes(dx.numel(), g.input[0] * g.input[1]);
        let win = pool_window(g);
        self.float_op(name, dy.dtype())
            .inputs(&[dy])
            .written(&mut [dx])
            .run(
                |i, o| self.max_pool2d_backward(name, g, &i[0], idx, &mut o[0]),
                float_launch!(|F| kl::launch_max_pool2d_backward::<R, F>(
                    &self.client,
                    (&dyh, &ih, &dxh),
                    n,
                    &win
                )),
            )
    }

    fn masked_mean_pool(
        &self,
        name: &'static str,
        sizes: (usize, usize),
        backward: bool,
        src: &Tensor,
        mask: Option<&Tensor>,
        dst: &mut Tensor,
    ) -> Result<()> {
        let (sh, dh) = (out_handle(src), out_handle(dst));
        let mh = mask.map(out_handle);
        self.float_op(name, src.dtype())
            .inputs(&[src])
            .written(&mut [dst])
            .run(
                |i, o| self.masked_mean_pool(name, sizes, backward, &i[0], mask, &mut o[0]),
                float_launch!(|F| kl::launch_masked_mean_pool::<R, F>(
                    &self.client,
                    (&sh, mh.as_ref(), &dh),
                    sizes,
                    backward
                )),
            )
    }

    fn image_normalize(
        &self,
        name: &'static str,
        plane: usize,
        x: &Tensor,
        mean: &Tensor,
        std: &Tensor,
        y: &mut Tensor,
    ) -> Result<()> {
        let (xh, mh, sh, yh) = (
            out_handle(x),
            out_handle(mean),
            out_handle(std),
            out_handle(y),
        );
        let (len, c) = (x.numel(), mean.numel());
        self.float_op(name, x.dtype())
            .inputs(&[x, mean, std])
            .written(&mut [y])
            .run(
                |i, o| self.image_normalize(name, plane, &i[0], &i[1], &i[2], &mut o[0]),
                float_launch!(|F| ki::launch_image_normalize::<R, F>(
                    &self.client,
                    (&xh, &mh, &sh, &yh),
                    len,
                    (c, plane)
                )),
            )
    }

    fn image_u8_to_nchw(
        &self,
        name: &'static str,
        bytes: &[u8],
        sizes: (usize, usize, usize),
        scale_bias: (f32, f32),
        y: &mut Tensor,
    ) -> Result<()> {
        let yh = out_handle(y);
        ki::launch_image_u8_to_nchw(&self.client, bytes, &yh, sizes, scale_bias)
            .map_err(|e| self.launch_error(name, e))
    }
}
