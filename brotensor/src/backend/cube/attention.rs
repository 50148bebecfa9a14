//! GPU glue of the attention category.

use cubecl::prelude::*;

use super::CubeBackend;
use crate::backend::AttentionOps;

impl<R: Runtime> AttentionOps for CubeBackend<R> {}
