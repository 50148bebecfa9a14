//! The sampling category: token sampling and the Philox random-number ops.

use super::OnDevice;

/// Backend methods of the sampling category (each with a default body returning
/// `Error::NotImplemented` through [`super::missing`]). Callers (the public functions in
/// `crate::ops`) validate shapes, dtypes and devices first.
pub(crate) trait SamplingOps: OnDevice {}
