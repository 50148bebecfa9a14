//! The rope category: rotary position embeddings.

use super::{missing, OnDevice};
use crate::ops::{MropeTables, RopeLayout, RopeParams};
use crate::{Result, Tensor};

/// Backend methods of the rope category (each with a default body returning
/// `Error::NotImplemented` through [`super::missing`]). Callers (the public functions in
/// `crate::ops`) validate shapes, dtypes and devices first: `x`/`dy` `(L, num_heads *
/// head_dim)` non-empty, a float the device computes, `heads = (head_dim, num_heads)` with
/// `head_dim` even and nonzero, tables F32 of the contract's shape, positions I32 inside
/// their tables, outputs committed and sized like `x` in its dtype.
pub(crate) trait RopeOps: OnDevice {
    /// `y = rope(x)` with angles from positions `row + seq_offset` and `params`.
    fn rope_forward(
        &self,
        _x: &Tensor,
        _heads: (usize, usize),
        _seq_offset: usize,
        _params: &RopeParams,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing("rope_forward", self))
    }
    /// `dx = rope^T(dy)`, the transpose rotation of [`RopeOps::rope_forward`].
    fn rope_backward(
        &self,
        _dy: &Tensor,
        _heads: (usize, usize),
        _seq_offset: usize,
        _params: &RopeParams,
        _dx: &mut Tensor,
    ) -> Result<()> {
        Err(missing("rope_backward", self))
    }
    /// `y = rope(x)` with `cos`, `sin (L, head_dim / 2)` shared across heads.
    fn rope_apply(
        &self,
        _x: &Tensor,
        _cos: &Tensor,
        _sin: &Tensor,
        _heads: (usize, usize),
        _layout: RopeLayout,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing("rope_apply", self))
    }
    /// `y = rope(x)` with `cos`, `sin (L * num_heads, head_dim / 2)`, one row per head.
    fn rope_apply_perhead(
        &self,
        _x: &Tensor,
        _cos: &Tensor,
        _sin: &Tensor,
        _heads: (usize, usize),
        _layout: RopeLayout,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing("rope_apply_perhead", self))
    }
    /// `dx = rope^T(dy)` with the tables of [`RopeOps::rope_apply`].
    fn rope_apply_backward(
        &self,
        _dy: &Tensor,
        _cos: &Tensor,
        _sin: &Tensor,
        _heads: (usize, usize),
        _layout: RopeLayout,
        _dx: &mut Tensor,
    ) -> Result<()> {
        Err(missing("rope_apply_backward", self))
    }
    /// M-RoPE: pairs split into `sections` (t, h, w), each rotated by its axis's tables at
    /// its position stream's row.
    #[allow(clippy::too_many_arguments)]
    fn rope_apply_mrope(
        &self,
        _x: &Tensor,
        _tables: [MropeTables<'_>; 3],
        _positions: [&Tensor; 3],
        _heads: (usize, usize),
        _sections: [usize; 3],
        _layout: RopeLayout,
        _y: &mut Tensor,
    ) -> Result<()> {
        Err(missing("rope_apply_mrope", self))
    }
}
