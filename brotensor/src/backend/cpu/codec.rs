//! CPU glue of the codec quantizers (`brotensor_cpu::codec`).

use brotensor_cpu::codec;

use super::CpuBackend;
use crate::backend::CodecOps;
use crate::{Result, Tensor};

impl CodecOps for CpuBackend {
    fn vq_encode(
        &self,
        _name: &'static str,
        x: &Tensor,
        codebook: &Tensor,
        indices: &mut Tensor,
        quantized: &mut Tensor,
    ) -> Result<()> {
        let d = x.cols();
        codec::vq_encode(
            x.host(),
            codebook.host(),
            d,
            indices.host_mut(),
            quantized.host_mut(),
        );
        Ok(())
    }

    fn fsq_quantize(
        &self,
        _name: &'static str,
        x: &Tensor,
        levels: &Tensor,
        quantized: &mut Tensor,
        packed: &mut Tensor,
    ) -> Result<()> {
        codec::fsq_quantize(
            x.host(),
            levels.host(),
            quantized.host_mut(),
            packed.host_mut(),
        );
        Ok(())
    }
}
