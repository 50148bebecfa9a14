//! CPU glue of the sampling category.

use super::CpuBackend;
use crate::backend::SamplingOps;

impl SamplingOps for CpuBackend {}
