//! Tests of the quantized ops: dequantization, GEMV and GEMM against the gguf package.

mod cpu;
mod gpu_dequant;
mod gpu_gemm;
mod gpu_gemv;
