//! CPU glue of the flash category.

use super::CpuBackend;
use crate::backend::FlashAttentionOps;

impl FlashAttentionOps for CpuBackend {}
