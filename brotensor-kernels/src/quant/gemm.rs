//! The quantized gemm kernels.

/// Every kernel of this file, in every specialisation the library launches, lowered to CUDA
/// C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(_l: &mut crate::cuda_lowering::Lowering) {}
