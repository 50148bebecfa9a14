//! The rope category: rotary position embeddings.

use super::OnDevice;

/// Backend methods of the rope category (each with a default body returning
/// `Error::NotImplemented` through [`super::missing`]). Callers (the public functions in
/// `crate::ops`) validate shapes, dtypes and devices first.
pub(crate) trait RopeOps: OnDevice {}
