//! The optimizer category: SGD with momentum and Adam (AdamW), updating parameters and their
//! FP32 state in place.

use super::OnDevice;
use crate::{Error, Result, Tensor};
pub(crate) use brotensor_cpu::optim::AdamStep;

fn missing(op: &'static str, be: &(impl OnDevice + ?Sized)) -> Error {
    Error::NotImplemented {
        op,
        device: be.device(),
    }
}

/// Optimizer steps. Callers guarantee: tensors on this device, dense, of one length; `p` and
/// `g` in one float dtype; the state (`m`, `v`, `vel`) and `master` F32.
pub(crate) trait OptimOps: OnDevice {
    /// One Adam step in place: `m`, `v` and `p` updated by `s` (`AdamStep::apply`); with
    /// `master` the update runs on it and `p` receives its rounding.
    fn adam_step(
        &self,
        name: &'static str,
        _p: &mut Tensor,
        _g: &Tensor,
        _state: (&mut Tensor, &mut Tensor),
        _master: Option<&mut Tensor>,
        _s: AdamStep,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// One SGD step in place: `vel = momentum vel + g`, `p -= lr vel`; with `master` the
    /// update runs on it and `p` receives its rounding.
    #[allow(clippy::too_many_arguments)]
    fn sgd_step(
        &self,
        name: &'static str,
        _p: &mut Tensor,
        _g: &Tensor,
        _vel: &mut Tensor,
        _master: Option<&mut Tensor>,
        _lr: f32,
        _momentum: f32,
    ) -> Result<()> {
        Err(missing(name, self))
    }
}
