//! CPU glue of the GEMM.

use brotensor_cpu::linear as lin;

use super::CpuBackend;
use crate::backend::{Gemm, LinearOps};
use crate::{Result, Tensor};

impl LinearOps for CpuBackend {
    fn gemm(
        &self,
        _name: &'static str,
        a: &Tensor,
        b: &Tensor,
        bias: Option<&Tensor>,
        c: &mut Tensor,
        g: Gemm,
    ) -> Result<()> {
        let bias = bias.map(|t| t.host::<f32>());
        lin::gemm(a.host(), b.host(), bias, c.host_mut(), g);
        Ok(())
    }
}
