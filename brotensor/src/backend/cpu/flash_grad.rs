//! CPU glue of the flash_grad category.

use super::CpuBackend;
use crate::backend::FlashAttentionGradOps;

impl FlashAttentionGradOps for CpuBackend {}
