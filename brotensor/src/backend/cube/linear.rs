//! GPU glue of the GEMM.

use brotensor_kernels::matmul::{self as mm, GemmSpec};
use cubecl::prelude::*;

use super::{float_launch, out_handle, CubeBackend};
use crate::backend::{Gemm, LinearOps};
use crate::{Result, Tensor};

impl<R: Runtime> LinearOps for CubeBackend<R> {
    fn gemm(
        &self,
        name: &'static str,
        a: &Tensor,
        b: &Tensor,
        bias: Option<&Tensor>,
        c: &mut Tensor,
        g: Gemm,
    ) -> Result<()> {
        let spec = kernel_spec(g, bias.is_some());
        let (ah, bh, ch) = (out_handle(a), out_handle(b), out_handle(c));
        let biash = bias.map(out_handle);
        // The product writes every element of `c` only when its batches tile it with no gap;
        // otherwise the elements it skips must come back unchanged from the F32 path, so `c`
        // is updated, as it is when the product accumulates.
        let mn = g.m.saturating_mul(g.n);
        let tiles_c =
            (g.batch == 1 || g.strides.2 == mn) && g.batch.checked_mul(mn) == Some(c.numel());
        let mut cs = [c];
        let op = self.float_op(name, a.dtype());
        let op = if g.accumulate || !tiles_c {
            op.updated(&mut cs)
        } else {
            op.written(&mut cs)
        };
        let inputs: Vec<&Tensor> = [a, b].into_iter().chain(bias).collect();
        op.inputs(&inputs).run(
            |w, o| self.gemm(name, &w[0], &w[1], w.get(2), &mut o[0], g),
            float_launch!(|F| mm::launch_gemm::<R, F>(
                &self.client,
                &ah,
                &bh,
                biash.as_ref(),
                &ch,
                spec
            )),
        )
    }
}

/// The kernel crate's launch descriptor of a [`Gemm`]: the same fields, plus whether a bias
/// is bound, and the epilogue as the kernel's comptime code (the C++ code, [`crate::ops::Act::code`]).
fn kernel_spec(g: Gemm, bias: bool) -> GemmSpec {
    GemmSpec {
        m: g.m,
        n: g.n,
        k: g.k,
        trans_a: g.trans_a,
        trans_b: g.trans_b,
        accumulate: g.accumulate,
        batch: g.batch,
        strides: g.strides,
        bias,
        act: g.act.code(),
    }
}
