//! GPU glue of the embedding category.

use cubecl::prelude::*;

use super::CubeBackend;
use crate::backend::EmbeddingOps;

impl<R: Runtime> EmbeddingOps for CubeBackend<R> {}
