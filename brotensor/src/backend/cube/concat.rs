//! GPU glue of the concat category.

use cubecl::prelude::*;

use super::CubeBackend;
use crate::backend::ConcatOps;

impl<R: Runtime> ConcatOps for CubeBackend<R> {}
