//! CPU glue of the quant category.

use super::CpuBackend;
use crate::backend::QuantOps;

impl QuantOps for CpuBackend {}
