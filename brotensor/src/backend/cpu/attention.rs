//! CPU glue of the attention category.

use super::CpuBackend;
use crate::backend::AttentionOps;

impl AttentionOps for CpuBackend {}
