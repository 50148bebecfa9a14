//! GPU glue of the elementwise ops: instruction launches, casts, fills, broadcasts.

use brotensor_kernels::bf16_words as w;
use brotensor_kernels::elementwise as k;
use brotensor_kernels::strided as k_strided;
use cubecl::prelude::*;
use half::{bf16, f16};

use super::{gpu, out_handle, source, src_handle, with_float, CubeBackend, Narrowed};
use crate::backend::{Binary, Broadcast, ElementwiseOps, Src, Unary};
use crate::{Dtype, Result, Tensor};

impl<R: Runtime> ElementwiseOps for CubeBackend<R> {
    fn unary(
        &self,
        name: &'static str,
        op: Unary,
        x: Src<'_>,
        out: &mut Tensor,
        a: f32,
        b: f32,
    ) -> Result<()> {
        let xh = src_handle(x);
        let oh = out_handle(out);
        let (c, len, x) = (&self.client, out.numel(), source(&xh));
        let words = self.words(out.dtype());
        if words {
            w::launch_unary_words::<R>(c, op, x, &oh, len, a, b)
        } else {
            with_float!(out.dtype(), |F| k::launch_unary::<R, F>(
                c, op, x, &oh, len, a, b
            ))
        }
        .map_err(|e| self.launch_error(name, e))
    }

    fn binary(
        &self,
        name: &'static str,
        op: Binary,
        x: Src<'_>,
        y: Src<'_>,
        out: &mut Tensor,
        a: f32,
        b: f32,
    ) -> Result<()> {
        let (xh, yh) = (src_handle(x), src_handle(y));
        let oh = out_handle(out);
        let (c, len, x, y) = (&self.client, out.numel(), source(&xh), source(&yh));
        let words = self.words(out.dtype());
        if words {
            w::launch_binary_words::<R>(c, op, x, y, &oh, len, a, b)
        } else {
            with_float!(out.dtype(), |F| k::launch_binary::<R, F>(
                c, op, x, y, &oh, len, a, b
            ))
        }
        .map_err(|e| self.launch_error(name, e))
    }

    fn binary_views(
        &self,
        name: &'static str,
        op: Binary,
        x: &Tensor,
        y: &Tensor,
        out: &mut Tensor,
    ) -> Result<bool> {
        // Packed BF16 words hold two elements each: such views go through dense copies.
        if self.words(out.dtype())
            || !matches!(op, Binary::Add | Binary::Sub | Binary::Mul | Binary::Div)
        {
            return Ok(false);
        }
        let (Some(xs), Some(ys)) = (x.base_storage(), y.base_storage()) else {
            return Ok(false);
        };
        let (xh, yh, oh) = (gpu(xs), gpu(ys), out_handle(out));
        let c = &self.client;
        with_float!(out.dtype(), |F| {
            k_strided::launch_strided_binary::<R, F>(
                c,
                op,
                (xh, gather_layout(x)),
                (yh, gather_layout(y)),
                &oh,
                0.0,
                0.0,
            )
        })
        .map_err(|e| self.launch_error(name, e))?;
        Ok(true)
    }

    fn cast(&self, x: &Tensor, out: &mut Tensor) -> Result<()> {
        let xh = out_handle(x);
        let oh = out_handle(out);
        let (c, len) = (&self.client, out.numel());
        match (self.words(x.dtype()), self.words(out.dtype())) {
            (false, false) => with_float!(x.dtype(), |I| with_float!(out.dtype(), |O| {
                k::launch_cast::<R, I, O>(c, &xh, &oh, len)
            })),
            (true, false) => with_float!(out.dtype(), |O| {
                w::launch_words_to_float::<R, O>(c, &xh, &oh, len)
            }),
            (false, true) => with_float!(x.dtype(), |I| {
                w::launch_float_to_words::<R, I>(c, &xh, &oh, len)
            }),
            (true, true) => unreachable!("a same-dtype cast is a copy"),
        }
        .map_err(|e| self.launch_error("cast", e))
    }

    fn fill(&self, out: &mut Tensor, value: f32) -> Result<()> {
        let oh = out_handle(out);
        let len = out.numel();
        if self.words(out.dtype()) {
            let bits = u32::from(bf16::from_f32(value).to_bits());
            return k::launch_fill_words(&self.client, &oh, w::words_for(len), bits | bits << 16)
                .map_err(|e| self.launch_error("fill", e));
        }
        with_float!(out.dtype(), |F| k::launch_fill::<R, F>(
            &self.client,
            &oh,
            len,
            value
        ))
        .map_err(|e| self.launch_error("fill", e))
    }

    fn threshold_u8(&self, x: &Tensor, t: f32, out: &mut Tensor) -> Result<()> {
        let (xh, oh) = (out_handle(x), out_handle(out));
        let len = x.numel();
        with_float!(x.dtype(), |F| k::launch_threshold_bytes::<R, F>(
            &self.client,
            &xh,
            &oh,
            len,
            t
        ))
        .map_err(|e| self.launch_error("threshold_u8", e))
    }

    fn dequant_i8_rows(&self, q: &Tensor, scales: &Tensor, out: &mut Tensor) -> Result<()> {
        let (qh, sh, oh) = (out_handle(q), out_handle(scales), out_handle(out));
        k::launch_dequant_i8_rows(&self.client, &qh, &sh, &oh, q.shape())
            .map_err(|e| self.launch_error("linear_forward_batched_int8w_fp16", e))
    }

    fn broadcast(
        &self,
        name: &'static str,
        y: &mut Tensor,
        v: &Tensor,
        b: Broadcast,
    ) -> Result<()> {
        if self.words(y.dtype()) {
            return self.through_f32(&[v], &mut [Narrowed::updated(y)], |w, o| {
                self.broadcast(name, &mut o[0], &w[0], b)
            });
        }
        let (yh, vh) = (out_handle(y), out_handle(v));
        let len = y.numel();
        with_float!(y.dtype(), |F| k::launch_broadcast::<R, F>(
            &self.client,
            &yh,
            &vh,
            len,
            b
        ))
        .map_err(|e| self.launch_error(name, e))
    }
}

/// A tensor's layout as the strided kernels take it.
fn gather_layout(t: &Tensor) -> k_strided::GatherLayout<'_> {
    k_strided::GatherLayout {
        dims: t.layout().dims(),
        strides: t.layout().strides(),
        offset: t.layout().offset(),
    }
}
