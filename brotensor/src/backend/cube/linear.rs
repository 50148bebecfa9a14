//! GPU glue of the GEMM.

use brotensor_kernels::matmul::{self as mm, GemmSpec};
use cubecl::prelude::*;
use half::{bf16, f16};

use super::{out_handle, with_float, CubeBackend, Narrowed};
use crate::backend::{Gemm, LinearOps};
use crate::{Dtype, Result, Tensor};

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
        if self.words(a.dtype()) {
            // The product writes every element of `c` only when its batches tile it with no
            // gap; otherwise the elements it skips must come back unchanged, so widen them too.
            let mn = g.m * g.n;
            let tiles_c = (g.batch == 1 || g.strides.2 == mn) && g.batch * mn == c.numel();
            let wc = if g.accumulate || !tiles_c {
                Narrowed::updated(c)
            } else {
                Narrowed::written(c)
            };
            let inputs: Vec<&Tensor> = [a, b].into_iter().chain(bias).collect();
            return self.through_f32(&inputs, &mut [wc], |w, o| {
                self.gemm(name, &w[0], &w[1], w.get(2), &mut o[0], g)
            });
        }
        let spec = kernel_spec(g, bias.is_some());
        let (ah, bh, ch) = (out_handle(a), out_handle(b), out_handle(c));
        let biash = bias.map(out_handle);
        with_float!(a.dtype(), |F| mm::launch_gemm::<R, F>(
            &self.client,
            &ah,
            &bh,
            biash.as_ref(),
            &ch,
            spec
        ))
        .map_err(|e| self.launch_error(name, e))
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
