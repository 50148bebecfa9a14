//! GPU glue of the flash_grad category.

use cubecl::prelude::*;

use super::CubeBackend;
use crate::backend::FlashAttentionGradOps;

impl<R: Runtime> FlashAttentionGradOps for CubeBackend<R> {}
