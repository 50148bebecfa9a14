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

/// An index walk (`dims`, with per-dim strides into the batch table and into the operand)
/// with its size-1 dims dropped and adjacent dims fused wherever both strides step as one
/// (`outer stride == inner stride * inner dim`), so a kernel walks the same elements in the
/// same order at the smallest rank, and fewer rank specialisations are compiled. A walk with
/// no elements is returned as it is; one of a single element becomes rank 1.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn fuse_index_dims(
    dims: &[usize],
    batch_strides: &[usize],
    window_strides: &[usize],
) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    if dims.contains(&0) {
        return (
            dims.to_vec(),
            batch_strides.to_vec(),
            window_strides.to_vec(),
        );
    }
    let mut fused: Vec<(usize, usize, usize)> = Vec::with_capacity(dims.len());
    for ((&n, &b), &w) in dims.iter().zip(batch_strides).zip(window_strides) {
        if n == 1 {
            continue;
        }
        let steps_as_one = |outer: usize, inner: usize| Some(outer) == inner.checked_mul(n);
        let merged = fused
            .last()
            .filter(|last| steps_as_one(last.1, b) && steps_as_one(last.2, w))
            .and_then(|last| last.0.checked_mul(n));
        match (merged, fused.last_mut()) {
            (Some(m), Some(last)) => *last = (m, b, w),
            _ => fused.push((n, b, w)),
        }
    }
    if fused.is_empty() {
        fused.push((1, 0, 0));
    }
    (
        fused.iter().map(|f| f.0).collect(),
        fused.iter().map(|f| f.1).collect(),
        fused.iter().map(|f| f.2).collect(),
    )
}

/// Pad dims with adjacent dims fused: an outer dim without interior padding absorbs the
/// unpadded dims inside it (its low and high pads scaled by their size), which pads the same
/// elements at a smaller rank. A scaling that overflows leaves the dims apart.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn fuse_pad_dims(dims: &[usize], pads: &[PadSpec]) -> (Vec<usize>, Vec<PadSpec>) {
    let unpadded = |p: &PadSpec| p.low == 0 && p.high == 0 && p.interior == 0;
    // Innermost first.
    let mut fused: Vec<(usize, PadSpec)> = Vec::with_capacity(dims.len());
    for (&n, &p) in dims.iter().zip(pads).rev() {
        if let Some(inner) = fused
            .last_mut()
            .filter(|g| unpadded(&g.1) && p.interior == 0)
        {
            let size = inner.0;
            let scaled = |v: i64| i64::try_from(size).ok().and_then(|s| v.checked_mul(s));
            if let (Some(m), Some(low), Some(high)) =
                (n.checked_mul(size), scaled(p.low), scaled(p.high))
            {
                *inner = (
                    m,
                    PadSpec {
                        low,
                        high,
                        interior: 0,
                    },
                );
                continue;
            }
        }
        fused.push((n, p));
    }
    fused.reverse();
    fused.into_iter().unzip()
}

#[cfg(all(feature = "internals", any(feature = "wgpu", feature = "cuda")))]
/// The module's internal checks, run by the workspace's tests through
/// `brotensor::internals` (so the library is not compiled again as its own test harness).
pub mod checks {
    use super::*;

    pub fn index_walks_fuse_where_both_strides_step_as_one() {
        // A row gather of a [5, 3, 4] operand by 6 indices: output [6, 3, 4], walked by batch
        // dim 0 and window dims 1, 2 (dense rows): the window dims fuse, the batch dim not.
        let (d, b, w) = fuse_index_dims(&[6, 3, 4], &[1, 0, 0], &[0, 4, 1]);
        assert_eq!((d, b, w), (vec![6, 12], vec![1, 0], vec![0, 1]));
        // Size-1 dims go; a dim whose strides do not chain stays apart.
        let (d, b, w) = fuse_index_dims(&[1, 2, 1, 3], &[0, 3, 9, 1], &[7, 0, 0, 2]);
        assert_eq!((d, b, w), (vec![2, 3], vec![3, 1], vec![0, 2]));
        // Batch and window both chaining: the whole walk is one dim.
        let (d, b, w) = fuse_index_dims(&[2, 3], &[3, 1], &[6, 2]);
        assert_eq!((d, b, w), (vec![6], vec![1], vec![2]));
        assert_eq!(fuse_index_dims(&[1, 1], &[0, 0], &[5, 5]).0, vec![1]);
        assert_eq!(fuse_index_dims(&[3, 0], &[1, 0], &[0, 1]).0, vec![3, 0]);
    }

    pub fn pads_fuse_outer_dims_into_unpadded_inner_ones() {
        let p = |low, high, interior| PadSpec {
            low,
            high,
            interior,
        };
        let none = p(0, 0, 0);
        // [3, 4, 5] padded on dim 0 only: one dim of 60 with pads of 20.
        let (d, s) = fuse_pad_dims(&[3, 4, 5], &[p(1, -2, 0), none, none]);
        assert_eq!((d, s), (vec![60], vec![p(20, -40, 0)]));
        // Interior padding or a padded inner dim keeps dims apart.
        let (d, s) = fuse_pad_dims(&[3, 4, 5], &[p(1, 0, 1), none, p(0, 2, 0)]);
        assert_eq!((d, s), (vec![3, 4, 5], vec![p(1, 0, 1), none, p(0, 2, 0)]));
        let (d, s) = fuse_pad_dims(&[3, 4, 5], &[none, p(2, 1, 0), none]);
        assert_eq!((d, s), (vec![3, 20], vec![none, p(10, 5, 0)]));
        // Scaling i64::MIN overflows: the dims stay apart.
        let (d, _) = fuse_pad_dims(&[2, 3], &[p(i64::MIN, 0, 0), none]);
        assert_eq!(d, vec![2, 3]);
    }
}
