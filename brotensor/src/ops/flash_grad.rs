//! The flash_grad ops: flash attention backward passes.
