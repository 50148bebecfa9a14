//! Tests of the quantized ops: dequantization, GEMV and GEMM against the gguf package.
