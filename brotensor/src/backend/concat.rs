//! The concat category: row and channel concatenation, splits and strided device copies.

use super::OnDevice;

/// Backend methods of the concat category (each with a default body returning
/// `Error::NotImplemented` through [`super::missing`]). Callers (the public functions in
/// `crate::ops`) validate shapes, dtypes and devices first.
pub(crate) trait ConcatOps: OnDevice {}
