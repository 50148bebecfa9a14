//! The convolution category: the 2-D convolution and its three gradients (the 1-D and the
//! transposed convolutions are cases of them, mapped by `crate::ops::conv`), the padding of
//! NCL rows and the streaming step of a causal depthwise convolution.

use super::OnDevice;
use crate::{Error, Result, Tensor};
pub(crate) use brotensor_cpu::conv::Conv2d;
pub(crate) use brotensor_cpu::conv3d::Conv3d;

fn missing(op: &'static str, be: &(impl OnDevice + ?Sized)) -> Error {
    Error::NotImplemented {
        op,
        device: be.device(),
    }
}

/// Convolutions over NCHW rows. Callers guarantee: every tensor on this device in one float
/// dtype, dense, of the lengths `conv.lens` gives (`x` / `dx`, the weight, `y` / `dy`), a
/// bias of the channels it adds to, outputs committed and sized.
pub(crate) trait ConvOps: OnDevice {
    /// `y = conv(x, w) (+ bias[c_out])`, overwritten.
    fn conv2d_forward(
        &self,
        name: &'static str,
        _conv: &Conv2d,
        _x: &Tensor,
        _w: &Tensor,
        _bias: Option<&Tensor>,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `y = conv3d(x, w) (+ bias[c_out])` over NCDHW, overwritten.
    fn conv3d_forward(
        &self,
        name: &'static str,
        _conv: &Conv3d,
        _x: &Tensor,
        _w: &Tensor,
        _bias: Option<&Tensor>,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `y = deform_conv2d(x, offset, mask, w) (+ bias)` (DCNv2) over `deform_groups` offset
    /// groups, overwritten; `offset` `(N, G*2*kH*kW*H_out*W_out)`, `mask` `(N,
    /// G*kH*kW*H_out*W_out)`.
    #[allow(clippy::too_many_arguments)]
    fn deform_conv2d_forward(
        &self,
        name: &'static str,
        _conv: &Conv2d,
        _deform_groups: usize,
        _x: &Tensor,
        _offset: &Tensor,
        _mask: Option<&Tensor>,
        _w: &Tensor,
        _bias: Option<&Tensor>,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `dx = conv^T(dy)` (the input gradient, and a transposed convolution's forward pass),
    /// overwritten, then `+ bias[c]` per input channel when a bias (`conv.x.c` values) is given.
    fn conv2d_backward_input(
        &self,
        name: &'static str,
        _conv: &Conv2d,
        _w: &Tensor,
        _dy: &Tensor,
        _bias: Option<&Tensor>,
        _dx: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `dw += dy . patches(x)^T` per group, accumulated.
    fn conv2d_backward_weight(
        &self,
        name: &'static str,
        _conv: &Conv2d,
        _x: &Tensor,
        _dy: &Tensor,
        _dw: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `db[c] += sum over n and pixels of dy[n, c, :]` for `dy (n, c*pixels)`, accumulated.
    fn conv2d_backward_bias(
        &self,
        name: &'static str,
        _sizes: (usize, usize, usize),
        _dy: &Tensor,
        _db: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// One causal depthwise step: `y` (rows of `steps`) from `state ++ x` per `(n, c)` row,
    /// then `state` (rows of `(k - 1) dilation`) shifted to the last samples. `w` is `(C, k)`,
    /// `bias` `C` values; `sizes` is `(n, c, steps, k, dilation)`.
    #[allow(clippy::too_many_arguments)]
    fn causal_conv1d_update(
        &self,
        name: &'static str,
        _x: &Tensor,
        _w: &Tensor,
        _bias: Option<&Tensor>,
        _sizes: (usize, usize, usize, usize, usize),
        _state: &mut Tensor,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }
}
