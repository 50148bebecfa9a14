//! GPU glue of the elementwise ops: instruction launches, casts, fills, broadcasts.

use brotensor_kernels::bf16_words as w;
use brotensor_kernels::elementwise as k;
use brotensor_kernels::strided as k_strided;
use cubecl::prelude::*;
use half::bf16;

use super::{
    float_launch, gpu, out_handle, source, src_handle, with_float, CubeBackend, DtypePolicy, Stored,
};
use crate::backend::{Binary, Broadcast, ElementwiseOps, Src, Unary};
use crate::{Result, Tensor};

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
        self.float_op(name, out.dtype()).run_words(
            || w::launch_unary_words::<R>(c, op, x, &oh, len, a, b),
            float_launch!(|F| k::launch_unary::<R, F>(c, op, x, &oh, len, a, b)),
        )
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
        self.float_op(name, out.dtype()).run_words(
            || w::launch_binary_words::<R>(c, op, x, y, &oh, len, a, b),
            float_launch!(|F| k::launch_binary::<R, F>(c, op, x, y, &oh, len, a, b)),
        )
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
        if self.policy(out.dtype()) == DtypePolicy::Words
            || !matches!(op, Binary::Add | Binary::Sub | Binary::Mul | Binary::Div)
        {
            return Ok(false);
        }
        let (Some(xs), Some(ys)) = (x.base_storage(), y.base_storage()) else {
            return Ok(false);
        };
        let (xh, yh, oh) = (gpu(xs), gpu(ys), out_handle(out));
        let c = &self.client;
        self.float_op(name, out.dtype())
            .run_native(float_launch!(|F| {
                k_strided::launch_strided_binary::<R, F>(
                    c,
                    op,
                    (xh, gather_layout(x)),
                    (yh, gather_layout(y)),
                    &oh,
                    0.0,
                    0.0,
                )
            }))?;
        Ok(true)
    }

    fn cast(&self, x: &Tensor, out: &mut Tensor) -> Result<()> {
        const OP: &str = "cast";
        let xh = out_handle(x);
        let oh = out_handle(out);
        let (c, len) = (&self.client, out.numel());
        // The one op with two float dtypes: each side's storage picks the kernel.
        match (self.stored(OP, x.dtype())?, self.stored(OP, out.dtype())?) {
            (Stored::Native(i), Stored::Native(o)) => with_float!(i, |I| with_float!(o, |O| {
                k::launch_cast::<R, I, O>(c, &xh, &oh, len)
            })),
            (Stored::Words, Stored::Native(o)) => with_float!(o, |O| {
                w::launch_words_to_float::<R, O>(c, &xh, &oh, len)
            }),
            (Stored::Native(i), Stored::Words) => with_float!(i, |I| {
                w::launch_float_to_words::<R, I>(c, &xh, &oh, len)
            }),
            (Stored::Words, Stored::Words) => unreachable!("a same-dtype cast is a copy"),
        }
        .map_err(|e| self.launch_error(OP, e))
    }

    fn fill(&self, out: &mut Tensor, value: f32) -> Result<()> {
        let oh = out_handle(out);
        let len = out.numel();
        self.float_op("fill", out.dtype()).run_words(
            || {
                let bits = u32::from(bf16::from_f32(value).to_bits());
                k::launch_fill_words(&self.client, &oh, w::words_for(len), bits | bits << 16)
            },
            float_launch!(|F| k::launch_fill::<R, F>(&self.client, &oh, len, value)),
        )
    }

    fn threshold_u8(&self, x: &Tensor, t: f32, out: &mut Tensor) -> Result<()> {
        let (xh, oh) = (out_handle(x), out_handle(out));
        let len = x.numel();
        // F32 or F16 only: the op refuses BF16.
        self.float_op("threshold_u8", x.dtype())
            .run_native(float_launch!(|F| k::launch_threshold_bytes::<R, F>(
                &self.client,
                &xh,
                &oh,
                len,
                t
            )))
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
        let (yh, vh) = (out_handle(y), out_handle(v));
        let len = y.numel();
        self.float_op(name, y.dtype())
            .inputs(&[v])
            .updated(&mut [y])
            .run(
                |w, o| self.broadcast(name, &mut o[0], &w[0], b),
                float_launch!(|F| k::launch_broadcast::<R, F>(&self.client, &yh, &vh, len, b)),
            )
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
