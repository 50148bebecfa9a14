//! Row-wise softmax and normalizations (the loss and norm categories' row kernels).

use super::{OnDevice, Src};
use crate::{Error, Result, Tensor};

/// The caches a training LayerNorm writes: `xhat (rows, cols)` in the input's dtype, F32
/// `mean (rows, 1)` and `rstd (rows, 1)`.
pub(crate) struct LayerNormCaches<'a> {
    pub(crate) xhat: &'a mut Tensor,
    pub(crate) mean: &'a mut Tensor,
    pub(crate) rstd: &'a mut Tensor,
}

/// The per-channel statistics of a BatchNorm training step: `(C, 1)`-sized F32 tensors.
pub(crate) struct BatchNormStats<'a> {
    pub(crate) running_mean: &'a mut Tensor,
    pub(crate) running_var: &'a mut Tensor,
    pub(crate) saved_mean: &'a mut Tensor,
    pub(crate) saved_rstd: &'a mut Tensor,
}

/// Callers guarantee: operands on this device, one float dtype the device computes in
/// (statistics tensors F32), shapes consistent, outputs committed and sized. The norms take
/// the row length from `gamma`'s element count (rows = elements / that), so a caller may
/// normalize a regrouped view of `x` without copying it.
pub(crate) trait NormOps: OnDevice {
    /// Softmax over each `cols`-wide row of `x` (or of `out` itself) into `out`; `mask`
    /// (F32, `cols` elements) zeroes entries below 0.5.
    fn softmax(
        &self,
        _x: Src<'_>,
        _mask: Option<&Tensor>,
        _out: &mut Tensor,
        _cols: usize,
    ) -> Result<()> {
        Err(missing("softmax", self))
    }
    /// `dl = p (dp - sum(dp p))` per `cols`-wide row.
    fn softmax_backward(
        &self,
        _p: &Tensor,
        _dp: &Tensor,
        _dl: &mut Tensor,
        _cols: usize,
    ) -> Result<()> {
        Err(missing("softmax_backward", self))
    }
    /// LayerNorm per row of `x` (gamma, beta: `cols` elements).
    fn layernorm(
        &self,
        _x: &Tensor,
        _gamma: &Tensor,
        _beta: &Tensor,
        _eps: f32,
        _y: &mut Tensor,
        _caches: Option<LayerNormCaches<'_>>,
    ) -> Result<()> {
        Err(missing("layernorm", self))
    }
    /// LayerNorm gradients: `dx` overwritten, `dgamma`, `dbeta` accumulated.
    #[allow(clippy::too_many_arguments)]
    fn layernorm_backward(
        &self,
        _dy: &Tensor,
        _xhat: &Tensor,
        _gamma: &Tensor,
        _rstd: &Tensor,
        _dx: &mut Tensor,
        _dgamma: &mut Tensor,
        _dbeta: &mut Tensor,
    ) -> Result<()> {
        Err(missing("layernorm_backward", self))
    }
    /// GroupNorm of `x (N, C*HW)` in `groups` groups per sample (`gamma`, `beta`: `C`
    /// elements, `C = groups * cpg`), then SiLU when `silu`; `y` sized like `x`.
    #[allow(clippy::too_many_arguments)]
    fn group_norm(
        &self,
        _x: &Tensor,
        _gamma: &Tensor,
        _beta: &Tensor,
        _groups_hw: (usize, usize),
        _eps: f32,
        _silu: bool,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing("group_norm_forward", self))
    }
    /// GroupNorm's gradient (statistics recomputed from `x`): `dx` overwritten, and per
    /// (sample, channel) the sums of `dy xhat` and of `dy`, `(N, C)` in `x`'s dtype.
    #[allow(clippy::too_many_arguments)]
    fn group_norm_backward(
        &self,
        _x: &Tensor,
        _gamma: &Tensor,
        _dy: &Tensor,
        _groups_hw: (usize, usize),
        _eps: f32,
        _dx: &mut Tensor,
        _parts: (&mut Tensor, &mut Tensor),
    ) -> Result<()> {
        Err(missing("group_norm_backward", self))
    }
    /// BatchNorm training forward over F32 `x (N, C*HW)` (`gamma`, `beta`: `C` elements):
    /// `y` and `stats` (running statistics blended with `momentum`, saved mean and rstd).
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_train(
        &self,
        _x: &Tensor,
        _gamma: &Tensor,
        _beta: &Tensor,
        _n_hw: (usize, usize),
        _eps_momentum: (f32, f32),
        _stats: BatchNormStats<'_>,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing("batch_norm_forward", self))
    }
    /// BatchNorm inference over `x (N, C*HW)`: `y = x a + b` per channel from `params =
    /// (gamma, beta, running_mean, running_var)` (`C` elements each, `x`'s dtype).
    fn batch_norm_inference(
        &self,
        _x: &Tensor,
        _params: (&Tensor, &Tensor, &Tensor, &Tensor),
        _hw: usize,
        _eps: f32,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing("batch_norm_inference", self))
    }
    /// BatchNorm gradients from the saved statistics (all F32): `dx` overwritten, `dgamma`
    /// and `dbeta` (`C` elements) accumulated.
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_backward(
        &self,
        _x: &Tensor,
        _gamma: &Tensor,
        _saved: (&Tensor, &Tensor),
        _dy: &Tensor,
        _n_hw: (usize, usize),
        _dx: &mut Tensor,
        _dgamma: &mut Tensor,
        _dbeta: &mut Tensor,
    ) -> Result<()> {
        Err(missing("batch_norm_backward", self))
    }
    /// RMSNorm per row.
    fn rms_norm(&self, _x: &Tensor, _gamma: &Tensor, _eps: f32, _y: &mut Tensor) -> Result<()> {
        Err(missing("rms_norm_forward", self))
    }
    /// RMSNorm gradients: `dx` overwritten, `dgamma` accumulated.
    fn rms_norm_backward(
        &self,
        _x: &Tensor,
        _gamma: &Tensor,
        _dy: &Tensor,
        _eps: f32,
        _dx: &mut Tensor,
        _dgamma: Option<&mut Tensor>,
    ) -> Result<()> {
        Err(missing("rms_norm_backward", self))
    }
}

fn missing<B: OnDevice + ?Sized>(op: &'static str, b: &B) -> Error {
    Error::NotImplemented {
        op,
        device: b.device(),
    }
}
