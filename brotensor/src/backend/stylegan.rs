//! The StyleGAN category: `bias_act` and its input gradient, the per-sample weight
//! modulation of `modulated_conv2d` and its gradient, and `upfirdn2d`. (The convolutions
//! are the grouped convolution of the convolution category.)

use super::OnDevice;
use crate::{Error, Result, Tensor};
pub(crate) use brotensor_cpu::stylegan::{BiasAct, Modulation, Upfirdn2d};

fn missing(op: &'static str, be: &(impl OnDevice + ?Sized)) -> Error {
    Error::NotImplemented {
        op,
        device: be.device(),
    }
}

/// StyleGAN ops. Callers guarantee: tensors on this device, dense, in one float dtype, of
/// the lengths each method names (the geometry's sizes), outputs committed and sized.
pub(crate) trait StyleganOps: OnDevice {
    /// Over `(N, C, plane)`: without `dy` the forward `y = clamp(gain act(x + b[c]))`; with
    /// `dy` the input gradient `y = dy gain act'(x + b[c])`, zero where the clamp cut.
    /// `b` holds `C` values.
    #[allow(clippy::too_many_arguments)]
    fn bias_act(
        &self,
        name: &'static str,
        _x: &Tensor,
        _dy: Option<&Tensor>,
        _b: Option<&Tensor>,
        _channels_plane: (usize, usize),
        _p: BiasAct,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `wmod (N C_out, C_in taps)` and `dcoef (N, C_out)` from `w (C_out, C_in taps)` and
    /// `s (N, C_in)`, demodulated when `demod_eps` is given.
    #[allow(clippy::too_many_arguments)]
    fn modulate_weights(
        &self,
        name: &'static str,
        _w: &Tensor,
        _s: &Tensor,
        _m: Modulation,
        _demod_eps: Option<f32>,
        _wmod: &mut Tensor,
        _dcoef: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// The gradient of [`StyleganOps::modulate_weights`] from `dwmod`: `dw` accumulated,
    /// `ds` overwritten.
    #[allow(clippy::too_many_arguments)]
    fn modulate_weights_backward(
        &self,
        name: &'static str,
        _w: &Tensor,
        _s: &Tensor,
        _dcoef: &Tensor,
        _dwmod: &Tensor,
        _m: Modulation,
        _demodulate: bool,
        _dw: &mut Tensor,
        _ds: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `upfirdn2d` of every input plane of `x` by `g` and the filter `f (fH, fW)` into `y`
    /// (planes of `g.out_size()`), overwritten.
    fn upfirdn2d(
        &self,
        name: &'static str,
        _g: &Upfirdn2d,
        _x: &Tensor,
        _f: &Tensor,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }
}
