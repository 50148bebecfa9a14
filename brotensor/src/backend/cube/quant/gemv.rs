//! GPU glue of the quantized gemv.
