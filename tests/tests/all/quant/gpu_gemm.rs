//! The GPU prefill GEMM with quantized weights.
