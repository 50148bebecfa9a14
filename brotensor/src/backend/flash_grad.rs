//! The flash_grad category: flash attention backward passes.

use super::OnDevice;

/// Backend methods of the flash_grad category (each with a default body returning
/// `Error::NotImplemented` through [`super::missing`]). Callers (the public functions in
/// `crate::ops`) validate shapes, dtypes and devices first.
pub(crate) trait FlashAttentionGradOps: OnDevice {}
