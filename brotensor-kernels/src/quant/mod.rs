//! Kernels of GGUF block-quantized weights: the block decoders (one per block type), the
//! dequantization kernel, the decode GEMV and the prefill GEMM.

pub mod blocks;
pub mod dequant;
pub mod gemm;
pub mod gemv;

/// Every kernel of the quant files, in every specialisation the library launches, lowered to
/// CUDA C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    dequant::lower_for_cuda(l);
    gemv::lower_for_cuda(l);
    gemm::lower_for_cuda(l);
}
