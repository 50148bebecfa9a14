//! The flash_attention ops: flash attention forward passes, decode and the KV cache.
