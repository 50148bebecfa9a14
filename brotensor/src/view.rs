//! Zero-copy views: new layouts over a tensor's storage (permute, transpose, slice, narrow,
//! broadcast, flip, reshape, squeeze, unsqueeze), and [`Tensor::contiguous`] /
//! [`copy_into`](crate::ops::copy_into), which materialise any layout with one strided copy.
//!
//! A view is a [`Tensor`] that shares its base's storage: making one costs no copy and no
//! device work, on every device. Ops read views directly or through one dense copy; they do
//! not write into them (see [`Tensor`]).
//!
//! ```
//! use brotensor::{Device, Tensor};
//! let x = Tensor::from_slice_nd_on(Device::Cpu, &(0..6).map(|i| i as f32).collect::<Vec<_>>(), &[2, 3])?;
//! let t = x.transpose(0, 1)?; // (3, 2), no copy
//! assert_eq!(t.to_vec::<f32>()?, [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
//! let rev = x.slice(1, 0, 3, -1)?; // every column, last to first
//! assert_eq!(rev.to_vec::<f32>()?, [2.0, 1.0, 0.0, 5.0, 4.0, 3.0]);
//! let b = x.narrow(0, 1, 1)?.broadcast_to(&[2, 2, 3])?;
//! assert_eq!(b.dims(), [2, 2, 3]);
//! # Ok::<(), brotensor::Error>(())
//! ```

use crate::layout::Layout;
use crate::{Error, Result, Tensor};

impl Tensor {
    fn view_of(&self, op: &'static str, layout: Result<Layout>) -> Result<Tensor> {
        if self.dtype().is_quant() {
            return Err(Error::invalid(
                op,
                format!(
                    "{} tensors are blocks of elements: their only views are reshapes",
                    self.dtype()
                ),
            ));
        }
        Ok(self.view(layout?))
    }

    /// A view with the dims reordered: dim `i` of the view is dim `perm[i]` of `self`.
    /// `perm` must name every dim once.
    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        self.view_of("permute", self.layout().permute("permute", perm))
    }

    /// A view with dims `d0` and `d1` swapped (`t.transpose(0, 1)` of a matrix is `t^T`).
    pub fn transpose(&self, d0: usize, d1: usize) -> Result<Tensor> {
        let rank = self.rank();
        if d0 >= rank || d1 >= rank {
            return Err(Error::shape(
                "transpose",
                format!("dims ({d0}, {d1}) are out of range for rank {rank}"),
            ));
        }
        let mut perm: Vec<usize> = (0..rank).collect();
        perm.swap(d0, d1);
        self.view_of("transpose", self.layout().permute("transpose", &perm))
    }

    /// A view of every `step`-th index of `dim` in `start..end`; a negative `step` walks the
    /// range backwards from its last index (numpy's `x[start:end][::step]`). Errors when the
    /// range is out of bounds or `step` is 0.
    pub fn slice(&self, dim: usize, start: usize, end: usize, step: isize) -> Result<Tensor> {
        self.view_of("slice", self.layout().slice("slice", dim, start, end, step))
    }

    /// A view of indices `start..start + len` of `dim`.
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<Tensor> {
        let end = start.checked_add(len).ok_or_else(|| {
            Error::shape("narrow", format!("start {start} + length {len} overflows"))
        })?;
        self.view_of("narrow", self.layout().slice("narrow", dim, start, end, 1))
    }

    /// A view repeating this tensor to `dims` by numpy's broadcasting rules (dims aligned at
    /// the end; a size-1 or missing dim repeats with stride 0). No copy is made.
    pub fn broadcast_to(&self, dims: &[usize]) -> Result<Tensor> {
        self.view_of(
            "broadcast_to",
            self.layout().broadcast_to("broadcast_to", dims),
        )
    }

    /// [`Tensor::broadcast_to`] under its PyTorch name.
    pub fn expand(&self, dims: &[usize]) -> Result<Tensor> {
        self.view_of("expand", self.layout().broadcast_to("expand", dims))
    }

    /// A view with the order of `dims` reversed.
    pub fn flip(&self, dims: &[usize]) -> Result<Tensor> {
        self.view_of("flip", self.layout().flip("flip", dims))
    }

    /// A view with a size-1 dim inserted before `dim` (`dim == rank` appends one).
    pub fn unsqueeze(&self, dim: usize) -> Result<Tensor> {
        self.view_of("unsqueeze", self.layout().unsqueeze("unsqueeze", dim))
    }

    /// A view without `dim`, which must have size 1.
    pub fn squeeze(&self, dim: usize) -> Result<Tensor> {
        self.view_of("squeeze", self.layout().squeeze("squeeze", dim))
    }

    /// A view of the same elements, in row-major order, under `dims`. Errors when the
    /// element counts differ, or when this tensor's strides do not allow it without a copy
    /// (a transposed matrix cannot be flattened): the message says to call
    /// [`Tensor::contiguous`] first. Block dtypes keep whole blocks in the last dim.
    pub fn reshape(&self, dims: &[usize]) -> Result<Tensor> {
        Ok(self.view(self.reshaped_layout("reshape", dims)?))
    }

    /// This tensor's elements as a dense row-major tensor: a view sharing the storage when
    /// it already is dense, else one copy by the strided-copy kernel on its device. (For an
    /// independent copy in every case, use [`Tensor::try_clone`].)
    pub fn contiguous(&self) -> Result<Tensor> {
        if !self.is_committed() || self.layout().is_dense() {
            return Ok(self.view(*self.layout()));
        }
        let mut out = Tensor::default();
        crate::ops::copy_into(self, &mut out)?;
        Ok(out)
    }
}
