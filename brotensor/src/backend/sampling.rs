//! The sampling category: token sampling and the Philox random-number ops.

use super::{missing, OnDevice};
use crate::{Result, Tensor};

/// The settings of one sampled draw (`temperature > 0`; greedy decoding is an argmax).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Draw {
    /// `1 / temperature`, rounded to f32 once on the host.
    pub(crate) inv_temperature: f32,
    /// Keep at most this many tokens (0: all).
    pub(crate) top_k: usize,
    /// Keep the smallest ranked prefix reaching this share of the probability (`>= 1`: all).
    pub(crate) top_p: f32,
    /// Philox key.
    pub(crate) key: u64,
    /// Base counter: row `n` draws from substream `counter + n` (`sample_logits_into` reads
    /// it from its counter tensor instead).
    pub(crate) counter: u64,
}

/// Backend methods of the sampling category (each with a default body returning
/// `Error::NotImplemented` through [`super::missing`]). Callers (the public functions in
/// `crate::ops`) validate shapes, dtypes and devices first: `logits (N, V)` F32 with
/// `N >= 1`, `1 <= V < 2^24`; `indices` `N` I32; `scratch` at least `3 N V` F32; `counter`
/// I32 with at least one element; `y` F32, committed; all on this device.
pub(crate) trait SamplingOps: OnDevice {
    /// One token per row of `logits` into `indices`, from substreams `draw.counter + n`.
    fn sample_logits(&self, _logits: &Tensor, _draw: &Draw, _indices: &mut Tensor) -> Result<()> {
        Err(missing("sample_logits", self))
    }
    /// [`SamplingOps::sample_logits`] with the base counter in `counter[0]` (zero-extended),
    /// then `counter[0] += N` on the device; `scratch` is the workspace.
    fn sample_logits_into(
        &self,
        _logits: &Tensor,
        _draw: &Draw,
        _counter: &mut Tensor,
        _scratch: &mut Tensor,
        _indices: &mut Tensor,
    ) -> Result<()> {
        Err(missing("sample_logits_into", self))
    }
    /// `y[i]` = standard normal of substream `counter + i`.
    fn randn(&self, _key: u64, _counter: u64, _y: &mut Tensor) -> Result<()> {
        Err(missing("randn", self))
    }
    /// `y[i]` = uniform in `[0, 1)` of substream `counter + i`.
    fn rand_uniform(&self, _key: u64, _counter: u64, _y: &mut Tensor) -> Result<()> {
        Err(missing("rand_uniform", self))
    }
    /// `y[i]` = 1 with probability `p` (substream `counter + i`), else 0.
    fn rand_bernoulli(&self, _p: f32, _key: u64, _counter: u64, _y: &mut Tensor) -> Result<()> {
        Err(missing("rand_bernoulli", self))
    }
    /// `y[i]` = normal restricted to `[lo, hi]` by rejection (then clamping).
    fn randn_truncated(
        &self,
        _lo: f32,
        _hi: f32,
        _key: u64,
        _counter: u64,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing("randn_truncated", self))
    }
}
