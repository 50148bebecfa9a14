//! Tests of the flash_attention ops.
