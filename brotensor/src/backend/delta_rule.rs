//! The gated-delta-rule category: linear attention with a matrix state per head, updated in
//! place token by token.

use super::{missing, OnDevice};
use crate::{Result, Tensor};
pub(crate) use brotensor_cpu::delta_rule::DeltaDims;

/// The gated delta rule. Callers guarantee dense operands on this device: `q`, `k`
/// (`(tokens, heads d_k)`), `v` (`(tokens, heads d_v)`) and `o` (sized like `v`) in one
/// float dtype; `a_raw`, `beta` (`(tokens, heads)`), `log_a` (`heads`) and `state`
/// (`(heads, d_v d_k)`) F32; every size at least 1.
pub(crate) trait DeltaRuleOps: OnDevice {
    /// Runs the rule over every token in order (`brotensor_cpu::delta_rule`): `state` is
    /// read and left after the last token, `o` gets `S q_t` per token.
    #[allow(clippy::too_many_arguments)]
    fn gated_delta_rule(
        &self,
        name: &'static str,
        _qkv: [&Tensor; 3],
        _gates: [&Tensor; 3],
        _dims: DeltaDims,
        _state: &mut Tensor,
        _o: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// The prompt form: the same result to FP32 rounding, which a backend may compute in
    /// the chunked (WY) form; by default the token scan of [`Self::gated_delta_rule`].
    #[allow(clippy::too_many_arguments)]
    fn gated_delta_rule_chunked(
        &self,
        name: &'static str,
        qkv: [&Tensor; 3],
        gates: [&Tensor; 3],
        dims: DeltaDims,
        state: &mut Tensor,
        o: &mut Tensor,
    ) -> Result<()> {
        self.gated_delta_rule(name, qkv, gates, dims, state, o)
    }
}
