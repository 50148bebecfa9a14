//! GPU glue of the rope category.

use cubecl::prelude::*;

use super::CubeBackend;
use crate::backend::RopeOps;

impl<R: Runtime> RopeOps for CubeBackend<R> {}
