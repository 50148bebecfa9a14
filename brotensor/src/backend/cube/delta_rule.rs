//! GPU glue of the gated delta rule: the launch of `brotensor_kernels::delta_rule`, through
//! the float dtype policy (`q`, `k`, `v`, `o` in the data's dtype; gates and state F32).

use brotensor_kernels::delta_rule::{self as kd, DeltaSizes};
use cubecl::prelude::*;

use super::{float_launch, out_handle, CubeBackend};
use crate::backend::{DeltaDims, DeltaRuleOps};
use crate::{Result, Tensor};

impl<R: Runtime> DeltaRuleOps for CubeBackend<R> {
    fn gated_delta_rule(
        &self,
        name: &'static str,
        [q, k, v]: [&Tensor; 3],
        gates: [&Tensor; 3],
        dims: DeltaDims,
        state: &mut Tensor,
        o: &mut Tensor,
    ) -> Result<()> {
        let [qh, kh, vh] = [q, k, v].map(out_handle);
        let [ah, bh, lh] = gates.map(out_handle);
        let (sh, oh) = (out_handle(state), out_handle(o));
        let sizes = DeltaSizes {
            tokens: dims.tokens,
            heads: dims.heads,
            d_k: dims.d_k,
            d_v: dims.d_v,
        };
        self.float_op(name, q.dtype())
            .inputs(&[q, k, v])
            .written(&mut [o])
            .run(
                |w, out| {
                    self.gated_delta_rule(
                        name,
                        [&w[0], &w[1], &w[2]],
                        gates,
                        dims,
                        state,
                        &mut out[0],
                    )
                },
                float_launch!(|F| kd::launch_gated_delta_rule::<R, F>(
                    &self.client,
                    (&qh, &kh, &vh),
                    (&ah, &bh, &lh),
                    (&sh, &oh),
                    sizes
                )),
            )
    }
}
