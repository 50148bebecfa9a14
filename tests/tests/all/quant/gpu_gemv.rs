//! The GPU decode GEMV with quantized weights.
