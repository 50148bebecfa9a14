//! CPU glue of the GEMM. F16 and BF16 products are compute-bound: they run on FP32 copies of
//! their operands and narrow `C` once (`dtype_policy::through_f32`).

use brotensor_cpu::linear as lin;
use brotensor_cpu::packed::{dots, PackedRhs};

use super::dtype_policy::{is_half, through_f32, Narrowed};
use super::CpuBackend;
use crate::backend::{Gemm, LinearOps};
use crate::{Result, Tensor};

impl LinearOps for CpuBackend {
    fn gemm(
        &self,
        _name: &'static str,
        a: &Tensor,
        b: &Tensor,
        bias: Option<&Tensor>,
        c: &mut Tensor,
        g: Gemm,
    ) -> Result<()> {
        if is_half(a.dtype()) || is_half(c.dtype()) {
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
            return through_f32(&inputs, &mut [wc], |w, o| {
                gemm_f32(&w[0], &w[1], w.get(2), &mut o[0], g);
                Ok(())
            });
        }
        gemm_f32(a, b, bias, c, g);
        Ok(())
    }
}

/// The FP32 product on F32 tensors. A single product `A . B^T` of more rows than the
/// dot-product path takes (a linear layer on many tokens) reads `B` (the weight) packed: it
/// is packed at the first such product and kept with the tensor until its elements change.
fn gemm_f32(a: &Tensor, b: &Tensor, bias: Option<&Tensor>, c: &mut Tensor, g: Gemm) {
    let bias = bias.map(|t| t.host::<f32>());
    let packed = (g.batch == 1 && !g.trans_a && g.trans_b && g.m > dots::MAX_ROWS)
        .then(|| b.derived(|| PackedRhs::transposed(&b.host()[..g.n * g.k], g.n, g.k)))
        .flatten()
        .filter(|p| p.fits(g.n, g.k));
    lin::gemm(a.host(), b.host(), bias, c.host_mut(), g, packed.as_deref());
}
