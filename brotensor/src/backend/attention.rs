//! The attention category: attention without the flash kernels: single-head, multi-head, self and cross attention, masks.

use super::OnDevice;

/// Backend methods of the attention category (each with a default body returning
/// `Error::NotImplemented` through [`super::missing`]). Callers (the public functions in
/// `crate::ops`) validate shapes, dtypes and devices first.
pub(crate) trait AttentionOps: OnDevice {}
