//! The attention category: attention without the flash kernels. The public ops are
//! composites of the matrix product, the masked row softmax and the element-wise ops; the
//! methods here are the pieces nothing else provides.

use super::{missing, OnDevice};
use crate::{Result, Tensor};

/// Callers guarantee: operands on this device in one float dtype the device computes in
/// (masks, `mass` and `centroid` F32), outputs committed and sized, and every index the
/// sizes reach inside its tensor.
pub(crate) trait AttentionOps: OnDevice {
    /// `mask[i] = x[offset + i stride] > 0.5 ? 1 : 0` for each of `mask`'s elements.
    fn slot_mask(
        &self,
        _x: &Tensor,
        _offset: usize,
        _stride: usize,
        _mask: &mut Tensor,
    ) -> Result<()> {
        Err(missing("build_slot_mask", self))
    }

    /// `mask[k] = k <= q ? 1 : 0` for each of `mask`'s elements.
    fn causal_mask_row(&self, _q: usize, _mask: &mut Tensor) -> Result<()> {
        Err(missing("build_causal_mask_row", self))
    }

    /// Zeroes row `r` of `y` (rows of `cols`) where `mask[r % mask.numel()] < 0.5`.
    fn mask_rows(
        &self,
        name: &'static str,
        _y: &mut Tensor,
        _cols: usize,
        _mask: &Tensor,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// Adds the decomposed relative-position bias of the queries `q (heads gh gw, hd)` and
    /// the tables `rel_h (2 gh - 1, hd)`, `rel_w (2 gw - 1, hd)` to `s (heads gh gw, gh gw)`.
    fn rel_pos_bias(
        &self,
        name: &'static str,
        _q: &Tensor,
        _rel_h: &Tensor,
        _rel_w: &Tensor,
        _s: &mut Tensor,
        _grid: (usize, usize),
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// With `partition`, `out`'s rows are `x (gh gw, cols)`'s token rows window by window
    /// (`win x win` windows, zero past the grid); else the inverse, cropping the padding.
    fn window_rows(
        &self,
        name: &'static str,
        _x: &Tensor,
        _out: &mut Tensor,
        _grid: (usize, usize, usize),
        _partition: bool,
    ) -> Result<()> {
        Err(missing(name, self))
    }

    /// `mass (lk, 1)` and `centroid (lk, 2)` of `attn (h_lat w_lat, lk)`.
    fn token_moments(
        &self,
        _attn: &Tensor,
        _w_lat: usize,
        _mass: &mut Tensor,
        _centroid: &mut Tensor,
    ) -> Result<()> {
        Err(missing("attention_token_moments", self))
    }
}
