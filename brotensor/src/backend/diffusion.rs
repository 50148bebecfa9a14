//! The diffusion category: the per-column affine of token rows (`modulate`,
//! `broadcast_mul`), the sampler step as a linear combination of same-shaped tensors, and
//! the sinusoidal timestep embedding. (The resblock is a composite of the norm and
//! convolution categories.)

use super::OnDevice;
use crate::{Error, Result, Tensor};
pub(crate) use brotensor_cpu::diffusion::StepCoefficients;

fn missing(op: &'static str, be: &(impl OnDevice + ?Sized)) -> Error {
    Error::NotImplemented {
        op,
        device: be.device(),
    }
}

/// Diffusion element ops. Callers guarantee: tensors on this device, dense, in one float
/// dtype, of the lengths each method names, outputs committed and sized.
pub(crate) trait DiffusionOps: OnDevice {
    /// `y[l, d] = x[l, d] a[d] (+ shift[d])`, `a = 1 + scale` when `one_plus`, else
    /// `scale`; `scale` and `shift` hold `D` values, `x` and `y` rows of `D`.
    fn row_affine(
        &self,
        name: &'static str,
        _x: &Tensor,
        _scale: &Tensor,
        _shift: Option<&Tensor>,
        _one_plus: bool,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `y = cx x + ce e (+ cp p)`, and `z = x + z_ce e` when `c.z_ce` is given (then `z` is
    /// too); every tensor of one length.
    #[allow(clippy::too_many_arguments)]
    fn sampler_step(
        &self,
        name: &'static str,
        _x: &Tensor,
        _e: &Tensor,
        _p: Option<&Tensor>,
        _c: StepCoefficients,
        _y: &mut Tensor,
        _z: Option<&mut Tensor>,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `y (N, dim)`: `cos(t_i f_j)`, then `sin(t_i f_j)` for the `dim / 2` host frequencies,
    /// then a zero column for an odd `dim`; `t` holds `N` values.
    fn timestep_embedding(
        &self,
        name: &'static str,
        _t: &Tensor,
        _freqs: &[f32],
        _dim: usize,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }
}
