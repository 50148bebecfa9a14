//! GPU glue of the sampling category.

use cubecl::prelude::*;

use super::CubeBackend;
use crate::backend::SamplingOps;

impl<R: Runtime> SamplingOps for CubeBackend<R> {}
