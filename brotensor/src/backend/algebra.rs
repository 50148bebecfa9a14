//! The tensor-algebra op category: element-wise maps of F32/F64 and C64/C128, single-axis
//! reductions, conversion, and the structural kernels (pad, placement, triangles, gather,
//! scatter-add). Views (transpose, broadcast, reverse, slice, diagonal) need no method:
//! they are layouts, materialised by the backend's strided copy.

pub(crate) use brotensor_cpu::algebra::{IndexMap, PadSpec};
pub(crate) use brotensor_kernels::algebra::map::{ComplexMap, FloatMap};
pub(crate) use brotensor_kernels::algebra::reduce::ReduceOp;

use super::{missing, OnDevice};
use crate::{Result, Tensor};

/// Tensor-algebra ops. Callers guarantee dense operands on this device with the dtypes and
/// sizes each method states, and a committed, sized `out`.
pub(crate) trait AlgebraOps: OnDevice {
    /// `out = instr(inputs...)` on real floats (F32, F64); `inputs` holds the instruction's
    /// arity of tensors of `out`'s dtype and element count.
    fn float_map(
        &self,
        name: &'static str,
        _instr: FloatMap,
        _inputs: &[&Tensor],
        _out: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `out = instr(inputs...)` on complex numbers (C64, C128).
    fn complex_map(
        &self,
        name: &'static str,
        _instr: ComplexMap,
        _inputs: &[&Tensor],
        _out: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `out = op` over the middle axis of `x` seen as `[outer, n, inner]` (`n >= 1`); `out`
    /// holds `outer inner` elements of `x`'s dtype.
    fn reduce_axis(
        &self,
        name: &'static str,
        _op: ReduceOp,
        _x: &Tensor,
        _shape: (usize, usize, usize),
        _out: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `out = x` converted to `out`'s dtype (same element count); float to integer errors
    /// on NaN, infinities and values out of the integer's range.
    fn convert(&self, _x: &Tensor, _out: &mut Tensor) -> Result<()> {
        Err(missing("convert", self))
    }

    /// `out = pad(x)` with zeros, one spec per dim of `x` (`out` sized to the padded dims).
    fn pad(&self, _x: &Tensor, _pads: &[PadSpec], _out: &mut Tensor) -> Result<()> {
        Err(missing("pad", self))
    }

    /// Writes the dense `src` (row-major over `dims`) into `out` at `offset + sum(c_d
    /// strides_d)`; positions must be distinct and inside `out`.
    fn place(
        &self,
        name: &'static str,
        _src: &Tensor,
        _dims: &[usize],
        _strides: &[usize],
        _offset: usize,
        _out: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `out` = the lower (`lower`) or upper triangle of each matrix of `x` (last two dims)
    /// relative to diagonal `k`, zeros elsewhere.
    fn triangle(
        &self,
        name: &'static str,
        _x: &Tensor,
        _k: i64,
        _lower: bool,
        _out: &mut Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `out[e] = src[target(e)]` over `map.dims` (no skipped entries).
    fn gather(&self, _src: &Tensor, _map: &IndexMap<'_>, _out: &mut Tensor) -> Result<()> {
        Err(missing("gather", self))
    }

    /// `out[target(e)] += updates[e]` over `map.dims` (skipped entries add nothing); `out`
    /// already holds the operand. Complex values add part by part.
    fn scatter_add(&self, _updates: &Tensor, _map: &IndexMap<'_>, _out: &mut Tensor) -> Result<()> {
        Err(missing("scatter_add", self))
    }
}
