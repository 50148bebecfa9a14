//! The activation category. The point-wise activations (relu, gelu, ...) are instructions of
//! the element-wise maps ([`super::Unary`], [`super::Binary`]); this trait adds the gated
//! units, whose output has half the input's columns.

use super::OnDevice;
use crate::{Error, Result, Tensor};
pub(crate) use brotensor_cpu::activation::Glu;

/// Gated linear units. Callers guarantee: `x` is `(B, 2D)`, `y` / `dy` are `(B, D)`, `dx`
/// is `(B, 2D)`, all on this device in one float dtype, outputs committed and sized.
pub(crate) trait ActivationOps: OnDevice {
    /// `y = glu(x)`.
    fn glu_forward(
        &self,
        name: &'static str,
        _op: Glu,
        _x: &Tensor,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(Error::NotImplemented {
            op: name,
            device: self.device(),
        })
    }

    /// `dx = [d a | d g]`, overwritten.
    fn glu_backward(
        &self,
        name: &'static str,
        _op: Glu,
        _x: &Tensor,
        _dy: &Tensor,
        _dx: &mut Tensor,
    ) -> Result<()> {
        Err(Error::NotImplemented {
            op: name,
            device: self.device(),
        })
    }
}
