//! CPU glue of the gated delta rule (`brotensor_cpu::delta_rule`); 16-bit `q`, `k`, `v`
//! run through FP32 copies and `o` is rounded once.

use brotensor_cpu::delta_rule as cpu;

use super::dtype_policy::{is_half, through_f32, Narrowed};
use super::CpuBackend;
use crate::backend::{DeltaDims, DeltaRuleOps};
use crate::{Result, Tensor};

/// The rule on F32 `q`, `k`, `v` and `o`, as the token scan or (`chunked`) in chunks.
fn run_f32(
    [q, k, v]: [&Tensor; 3],
    gates: [&Tensor; 3],
    dims: DeltaDims,
    (state, o): (&mut Tensor, &mut Tensor),
    chunked: bool,
) {
    let [a_raw, beta, log_a] = gates;
    let rule = if chunked {
        cpu::gated_delta_rule_chunked
    } else {
        cpu::gated_delta_rule
    };
    rule(
        q.host(),
        k.host(),
        v.host(),
        (a_raw.host(), beta.host(), log_a.host()),
        dims,
        state.host_mut(),
        o.host_mut(),
    );
}

/// Either form, 16-bit `q`, `k`, `v` through FP32 copies.
fn run(
    [q, k, v]: [&Tensor; 3],
    gates: [&Tensor; 3],
    dims: DeltaDims,
    (state, o): (&mut Tensor, &mut Tensor),
    chunked: bool,
) -> Result<()> {
    if is_half(q.dtype()) {
        return through_f32(&[q, k, v], &mut [Narrowed::written(o)], |w, out| {
            run_f32(
                [&w[0], &w[1], &w[2]],
                gates,
                dims,
                (state, &mut out[0]),
                chunked,
            );
            Ok(())
        });
    }
    run_f32([q, k, v], gates, dims, (state, o), chunked);
    Ok(())
}

impl DeltaRuleOps for CpuBackend {
    fn gated_delta_rule(
        &self,
        _name: &'static str,
        qkv: [&Tensor; 3],
        gates: [&Tensor; 3],
        dims: DeltaDims,
        state: &mut Tensor,
        o: &mut Tensor,
    ) -> Result<()> {
        run(qkv, gates, dims, (state, o), false)
    }

    fn gated_delta_rule_chunked(
        &self,
        _name: &'static str,
        qkv: [&Tensor; 3],
        gates: [&Tensor; 3],
        dims: DeltaDims,
        state: &mut Tensor,
        o: &mut Tensor,
    ) -> Result<()> {
        run(qkv, gates, dims, (state, o), true)
    }
}
