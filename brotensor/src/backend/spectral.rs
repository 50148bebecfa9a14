//! The spectral category: the complex element ops on interleaved `[re, im]` f32 pairs (an
//! `(R, 2C)` F32 tensor or a C64 one: the same memory). Counts are complex elements.

use super::{missing, OnDevice};
use crate::{Result, Tensor};

/// Complex element ops. Callers guarantee dense F32 or C64 operands on this device, each
/// holding `n` complex elements (real operands `n` F32 values), and committed, sized
/// outputs.
pub(crate) trait SpectralOps: OnDevice {
    /// `y = a b`.
    fn complex_mul(
        &self,
        name: &'static str,
        _ab: [&Tensor; 2],
        _y: &mut Tensor,
        _n: usize,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `da += dy conj(b)`, `db += dy conj(a)`.
    fn complex_mul_backward(
        &self,
        name: &'static str,
        _ab_dy: [&Tensor; 3],
        _grads: [&mut Tensor; 2],
        _n: usize,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `y = |z|` (real), or with `angle` `y = atan2(im, re)`.
    fn complex_to_real(
        &self,
        name: &'static str,
        _z: &Tensor,
        _angle: bool,
        _y: &mut Tensor,
        _n: usize,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `dz = dy z / |z|` (0 where `|z| = 0`), `dy` real, `dz` overwritten.
    fn complex_abs_backward(
        &self,
        name: &'static str,
        _z: &Tensor,
        _dy: &Tensor,
        _dz: &mut Tensor,
        _n: usize,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `y = mag e^{i phase}` from real `mag`, `phase`.
    fn complex_from_polar(
        &self,
        name: &'static str,
        _mag: &Tensor,
        _phase: &Tensor,
        _y: &mut Tensor,
        _n: usize,
    ) -> Result<()> {
        Err(missing(name, self))
    }
}
