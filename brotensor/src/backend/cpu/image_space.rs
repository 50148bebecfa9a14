//! CPU glue of the image-space ops: `brotensor_cpu::{resize, pad, pooling, image}` on the
//! host buffers. F16 and BF16 run on FP32 copies with each output narrowed once (these
//! ops are memory-bound gathers; their 16-bit form is a GPU concern).

use brotensor_cpu::{image as im, pad, pooling as pl, resize as rs};

use super::conv::{host, in_f32};
use super::CpuBackend;
use crate::backend::{AxisAdjoint, AxisTable, ImageSpaceOps, MaxPool2d, Unfold2d};
use crate::{Result, Tensor};

impl ImageSpaceOps for CpuBackend {
    fn resample(
        &self,
        _name: &'static str,
        (rows, cols): (&AxisTable, &AxisTable),
        x: &Tensor,
        y: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(x)], &mut [y], &mut [], |i, o| {
            rs::resample_forward(host(i[0]), rows, cols, o[0].host_mut());
            Ok(())
        })
    }

    fn resample_backward(
        &self,
        _name: &'static str,
        tables: (&AxisAdjoint, &AxisAdjoint),
        [h_out, w_out]: [usize; 2],
        dy: &Tensor,
        dx: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(dy)], &mut [dx], &mut [], |i, o| {
            rs::resample_backward(host(i[0]), tables, (h_out, w_out), o[0].host_mut());
            Ok(())
        })
    }

    fn convex_upsample(
        &self,
        _name: &'static str,
        dims: (usize, usize, usize, usize),
        k: usize,
        x: &Tensor,
        mask: &Tensor,
        y: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(x), Some(mask)], &mut [y], &mut [], |i, o| {
            rs::convex_upsample(host(i[0]), host(i[1]), dims, k, o[0].host_mut());
            Ok(())
        })
    }

    fn pixel_shuffle_upsample_2x(
        &self,
        _name: &'static str,
        dims: (usize, usize, usize, usize),
        c_out: usize,
        x: &Tensor,
        y: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(x)], &mut [y], &mut [], |i, o| {
            rs::pixel_shuffle_upsample_2x(host(i[0]), dims, c_out, o[0].host_mut());
            Ok(())
        })
    }

    fn unfold2d(
        &self,
        _name: &'static str,
        g: &Unfold2d,
        out: [usize; 2],
        x: &Tensor,
        y: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(x)], &mut [y], &mut [], |i, o| {
            pad::unfold2d_forward(host(i[0]), g, out, o[0].host_mut());
            Ok(())
        })
    }

    fn pad2d_backward(
        &self,
        _name: &'static str,
        g: &Unfold2d,
        dy: &Tensor,
        dx: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(dy)], &mut [dx], &mut [], |i, o| {
            pad::pad2d_backward(host(i[0]), g, o[0].host_mut());
            Ok(())
        })
    }

    fn max_pool2d(
        &self,
        _name: &'static str,
        g: &MaxPool2d,
        x: &Tensor,
        y: &mut Tensor,
        idx: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(x)], &mut [y], &mut [], |i, o| {
            pl::max_pool2d_forward(host(i[0]), g, o[0].host_mut(), idx.host_mut::<i32>());
            Ok(())
        })
    }

    fn max_pool2d_backward(
        &self,
        _name: &'static str,
        g: &MaxPool2d,
        dy: &Tensor,
        idx: &Tensor,
        dx: &mut Tensor,
    ) -> Result<()> {
        in_f32(&[Some(dy)], &mut [dx], &mut [], |i, o| {
            pl::max_pool2d_backward(host(i[0]), idx.host::<i32>(), g, o[0].host_mut());
            Ok(())
        })
    }

    fn masked_mean_pool(
        &self,
        _name: &'static str,
        (_, d): (usize, usize),
        backward: bool,
        src: &Tensor,
        mask: Option<&Tensor>,
        dst: &mut Tensor,
    ) -> Result<()> {
        let mask = mask.map(|m| m.host::<f32>());
        in_f32(&[Some(src)], &mut [dst], &mut [], |i, o| {
            if backward {
                pl::masked_mean_pool_backward(host(i[0]), mask, o[0].host_mut());
            } else {
                pl::masked_mean_pool_forward(host(i[0]), mask, d, o[0].host_mut());
            }
            Ok(())
        })
    }

    fn image_normalize(
        &self,
        _name: &'static str,
        plane: usize,
        x: &Tensor,
        mean: &Tensor,
        std: &Tensor,
        y: &mut Tensor,
    ) -> Result<()> {
        in_f32(
            &[Some(x), Some(mean), Some(std)],
            &mut [y],
            &mut [],
            |i, o| {
                im::image_normalize(host(i[0]), host(i[1]), host(i[2]), plane, o[0].host_mut());
                Ok(())
            },
        )
    }

    fn image_u8_to_nchw(
        &self,
        _name: &'static str,
        bytes: &[u8],
        (_, pixels, c): (usize, usize, usize),
        (scale, bias): (f32, f32),
        y: &mut Tensor,
    ) -> Result<()> {
        im::image_u8_to_nchw(bytes, c, pixels, scale, bias, y.host_mut());
        Ok(())
    }
}
