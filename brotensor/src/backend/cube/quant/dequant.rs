//! GPU glue of the quantized dequant.
