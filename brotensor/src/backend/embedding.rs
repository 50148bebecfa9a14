//! The embedding category: embedding lookups and row gathers/scatters.

use super::OnDevice;

/// Backend methods of the embedding category (each with a default body returning
/// `Error::NotImplemented` through [`super::missing`]). Callers (the public functions in
/// `crate::ops`) validate shapes, dtypes and devices first.
pub(crate) trait EmbeddingOps: OnDevice {}
