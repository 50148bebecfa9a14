//! The quantized ops on the CPU.
