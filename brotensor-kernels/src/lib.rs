//! brotensor's GPU kernels, written once as CubeCL `#[cube]` functions.
//!
//! This crate owns kernel definitions and launch validation and nothing else: it knows no
//! tensors, devices or dispatch. Every `launch_*` function checks that the buffers it is given
//! hold at least the elements the launch will touch before the `unsafe` launch, so a wrong
//! length is an [`LaunchError`], never an out-of-bounds access on the device.
//!
//! Kernels are generic over the storage element (`f32`, `f16`, `bf16`) and compute in `f32`,
//! so 16-bit paths accumulate in FP32. The element-wise family is one kernel per arity, with
//! the math supplied as a small instruction type ([`elementwise::UnaryOp`],
//! [`elementwise::BinaryOp`]).

pub mod batch_norm;
pub mod bf16_words;
pub mod elementwise;
pub mod glu;
mod launch;
pub mod loss;
pub mod matmul;
pub mod reduce;
pub mod rows;
pub mod snake;

pub use launch::{LaunchError, MAX_VECTOR_SIZE};
