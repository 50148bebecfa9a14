//! brotensor's GPU kernels, written once as CubeCL `#[cube]` functions.
//!
//! This crate owns kernel definitions and launch validation and nothing else: it knows no
//! tensors, devices or dispatch. Every `launch_*` function checks that the buffers it is given
//! hold at least the elements the launch will touch before the `unsafe` launch, so a wrong
//! length is an [`LaunchError`], never an out-of-bounds access on the device. Every element
//! count, strided span and buffer length a launch derives from its sizes is computed with
//! checked arithmetic: one that does not fit in `usize` is [`LaunchError::Overflow`], never a
//! wrapped count that a short buffer would pass.
//!
//! Kernels are generic over the storage element (`f32`, `f16`, `bf16`) and compute in `f32`,
//! so 16-bit paths accumulate in FP32. The element-wise family is one kernel per arity, with
//! the math chosen by a comptime instruction ([`elementwise::UnaryInstr`],
//! [`elementwise::BinaryInstr`]): each instruction set is listed once, and each instruction
//! compiles to its own specialisation of the kernel.
//!
//! Per-unit loops stay short. Lavapipe (Mesa's software Vulkan device, which CI runs every
//! kernel on) ends every loop of a shader after 65535 iterations counted together, silently;
//! a column sum that walked 70 thousand rows in one unit returned a quarter of the sum there.
//! Column sums therefore split their rows across units ([`reduce::launch_column_sums`]), and
//! softmax splits few long rows across cubes. Other row ops loop about `3 cols / 256` times
//! per unit, so on lavapipe one row (a flat LayerNorm, a BatchNorm channel, a GroupNorm
//! group) must stay under about 5.5 million elements, and `top_k_rows` (about
//! `k (cols / 256 + 8)` iterations) under about `65535 * 256 / k` columns. Hardware GPUs have
//! no such limit.

pub mod algebra;
pub mod attention;
pub mod batch_norm;
pub mod bf16_words;
pub mod codec;
pub mod concat;
pub mod conv;
pub mod conv1d;
#[cfg(test)]
mod cuda_lowering;
pub mod delta_rule;
pub mod diffusion;
pub mod elementwise;
pub mod embedding;
pub mod fft;
pub mod flash;
pub mod flash_grad;
pub mod glu;
pub mod image;
mod launch;
pub mod loss;
pub mod lstm;
pub mod matmul;
#[cfg(test)]
mod metadata_contract;
pub mod norm;
pub mod optim;
pub mod pad;
pub mod pooling;
mod primitives;
pub mod quant;
pub mod reduce;
pub mod resize;
pub mod rope;
pub mod sampling;
pub mod snake;
pub mod softmax;
pub mod spectral;
pub mod strided;
pub mod stylegan;

pub use launch::{LaunchError, MAX_VECTOR_SIZE};
