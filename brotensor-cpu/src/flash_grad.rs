//! CPU reference of the flash_grad category: flash attention backward passes.
