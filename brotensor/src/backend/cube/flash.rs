//! GPU glue of the flash category.

use cubecl::prelude::*;

use super::CubeBackend;
use crate::backend::FlashAttentionOps;

impl<R: Runtime> FlashAttentionOps for CubeBackend<R> {}
