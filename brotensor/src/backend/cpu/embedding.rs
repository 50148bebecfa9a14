//! CPU glue of the embedding category.

use super::CpuBackend;
use crate::backend::EmbeddingOps;

impl EmbeddingOps for CpuBackend {}
