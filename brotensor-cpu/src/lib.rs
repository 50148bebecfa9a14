//! brotensor's CPU reference: FP32 ops over plain slices, parallel with rayon.
//!
//! Every GPU kernel is tested against these functions. They take and return plain slices;
//! shapes, dtypes and devices are checked by the caller (`brotensor`), and every function
//! here documents the length contract it relies on (violations panic on the slice bounds,
//! they are never UB).

pub mod activation;
pub mod algebra;
pub mod attention;
pub mod cast;
pub mod codec;
pub mod concat;
pub mod conv;
pub mod conv1d;
pub mod conv3d;
pub mod deform;
pub mod delta_rule;
pub mod diffusion;
pub mod elementwise;
pub mod embedding;
pub mod fft;
pub mod flash;
pub mod flash_grad;
pub mod half_float;
pub mod image;
pub mod linear;
pub mod loss;
pub mod lstm;
pub mod norm;
pub mod optim;
pub mod packed;
pub mod pad;
pub mod pooling;
pub mod quant;
pub mod reduction;
pub mod resize;
pub mod rope;
pub mod sampling;
pub mod simd;
pub mod spatial;
pub mod spectral;
pub mod stft;
pub mod stream;
pub mod strided;
pub mod stylegan;
