//! brotensor: one [`Tensor`] type with a runtime device tag, and device-neutral ops that run
//! on the CPU (a rayon FP32 reference) and on GPUs through CubeCL (CUDA, and wgpu: Vulkan,
//! Metal, DX12).
//!
//! ```
//! use brotensor::{ops, Device, Tensor};
//! # fn main() -> brotensor::Result<()> {
//! brotensor::init().ok(); // discover GPUs; the CPU works without it
//! let a = Tensor::from_slice_on(Device::Cpu, &[1.0f32, 2.0, 3.0, 4.0], 2, 2)?;
//! let b = Tensor::from_slice_on(Device::Cpu, &[0.5f32; 4], 2, 2)?;
//! let c = ops::add(&a, &b)?;
//! assert_eq!(c.to_vec::<f32>()?, vec![1.5, 2.5, 3.5, 4.5]);
//! # Ok(()) }
//! ```
//!
//! Every public function returns [`Result`]; bad shapes, dtypes and devices are
//! [`Error`]s with messages of the form `brotensor: <op>: <reason>`.

pub mod autograd;
mod backend;
pub mod custom;
mod device;
mod display;
pub mod distributed;
mod dtype;
mod error;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals;
pub mod io;
mod layout;
mod methods;
pub mod ops;
mod runtime;
mod tensor;
mod view;

/// The CubeCL version brotensor is built on, for writing your own `#[cube]` kernels (see
/// [`custom`]).
pub use cubecl;
pub use device::{Device, DeviceKind};
pub use dtype::Dtype;
pub use error::{Error, Result};
pub use layout::MAX_RANK;
/// The complex element type of C64 (`Complex<f32>`) and C128 (`Complex<f64>`) tensors.
pub use num_complex::Complex;
pub use runtime::{
    available_devices, compute_dtype, compute_dtype_on, cpu_tier, default_device, device_count,
    device_name, init, is_available, is_software, matmul_uses_matrix_units, max_buffer_bytes,
    memory_info, memory_trim, set_default_device, supports_dtype, sync, sync_all, DeviceScope,
    MemoryInfo, CPU_TIER_ENV, DEFAULT_DEVICE_ENV,
};
pub use tensor::{Element, Tensor, GPU_MAX_ELEMENTS};

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
