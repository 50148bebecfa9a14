//! The tensor-algebra kernel set (StableHLO-style ops over N-d tensors, for F32, F64, I64 and
//! the complex dtypes C64 and C128 stored as interleaved `(re, im)` pairs).
//!
//! - [`map`]: element-wise maps of real floats (one kernel, the math a comptime instruction)
//!   and of complex numbers (overflow-safe division).
//! - [`reduce`]: single-axis reductions with keepdims, split into passes of bounded length.
//! - [`convert`]: dtype conversion, with a flag for float values an integer cannot hold.
//! - [`index`]: structural kernels that move whole elements as 32-bit words (pad, strided
//!   placement, triangle masks, gather) and the scatter-add.
//!
//! Metadata contract: shapes, strides, starts, paddings, offsets and lengths are run-time
//! values (a `u32` metadata buffer); only the rank, the words per element, the instruction
//! and algorithm flags are comptime. Every kernel decomposes the *output* (or update) index
//! with the run-time dims and multiplies by run-time strides.

pub mod convert;
pub mod index;
pub mod map;
pub mod reduce;
pub mod soft64;

/// The most dims a structural kernel takes: 8 tensor dims plus the word dim of a wide
/// element.
pub const MAX_INDEX_RANK: usize = 9;

#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    map::lower_for_cuda(l);
    reduce::lower_for_cuda(l);
    convert::lower_for_cuda(l);
    index::lower_for_cuda(l);
}
