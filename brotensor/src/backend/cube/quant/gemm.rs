//! GPU glue of the quantized gemm.
