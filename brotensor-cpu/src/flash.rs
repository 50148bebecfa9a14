//! CPU reference of the flash category: flash attention forward passes, decode and the KV cache.
