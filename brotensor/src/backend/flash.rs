//! The flash category: flash attention forward passes, decode and the KV cache.

use super::OnDevice;

/// Backend methods of the flash category (each with a default body returning
/// `Error::NotImplemented` through [`super::missing`]). Callers (the public functions in
/// `crate::ops`) validate shapes, dtypes and devices first.
pub(crate) trait FlashAttentionOps: OnDevice {}
