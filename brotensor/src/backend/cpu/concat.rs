//! CPU glue of the concat category.

use super::CpuBackend;
use crate::backend::ConcatOps;

impl ConcatOps for CpuBackend {}
