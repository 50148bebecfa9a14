//! CPU glue of the rope category.

use super::CpuBackend;
use crate::backend::RopeOps;

impl RopeOps for CpuBackend {}
