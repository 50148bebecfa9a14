//! The activation category. The point-wise activations (relu, gelu, ...) are instructions of
//! the element-wise maps ([`super::Unary`], [`super::Binary`]); this trait adds the gated
//! units, whose output has half the input's columns, and snake, whose parameters are
//! per channel.

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

    /// Snake: `y = x + sin^2(alpha_c x) / guard(d_c)` over `x (N, C*L)`; `alpha`, `d` hold
    /// `C` F32 values (`d` is `alpha` for plain snake); all F32, `y` sized like `x`.
    fn snake_forward(
        &self,
        name: &'static str,
        _x: &Tensor,
        _alpha: &Tensor,
        _d: &Tensor,
        _l: usize,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(Error::NotImplemented {
            op: name,
            device: self.device(),
        })
    }

    /// Snake's per-element backward: `dx` (overwritten) and the parameter terms `ga`, `gb`
    /// (see `brotensor_cpu::activation::snake_backward`), all sized like `x`.
    #[allow(clippy::too_many_arguments)]
    fn snake_backward(
        &self,
        name: &'static str,
        _x: &Tensor,
        _alpha: &Tensor,
        _d: &Tensor,
        _dy: &Tensor,
        _l: usize,
        _grads: SnakeGrads<'_>,
    ) -> Result<()> {
        Err(Error::NotImplemented {
            op: name,
            device: self.device(),
        })
    }
}

/// The outputs of [`ActivationOps::snake_backward`].
pub(crate) struct SnakeGrads<'a> {
    /// The input gradient, overwritten.
    pub dx: &'a mut Tensor,
    /// Per element, the term of `alpha`'s gradient through `sin(alpha x)`.
    pub ga: &'a mut Tensor,
    /// Per element, the term of `d`'s gradient through `1 / d`.
    pub gb: &'a mut Tensor,
}
