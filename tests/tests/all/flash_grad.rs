//! Tests of the flash_grad ops.
