//! GPU glue of the codec quantizers: the launches of `brotensor_kernels::codec`.

use brotensor_kernels::codec as kc;
use cubecl::prelude::*;

use super::{out_handle, CubeBackend};
use crate::backend::CodecOps;
use crate::{Result, Tensor};

impl<R: Runtime> CodecOps for CubeBackend<R> {
    fn vq_encode(
        &self,
        name: &'static str,
        x: &Tensor,
        codebook: &Tensor,
        indices: &mut Tensor,
        quantized: &mut Tensor,
    ) -> Result<()> {
        let h = [x, codebook, indices, quantized].map(out_handle);
        let (rows, d) = (x.rows(), x.cols());
        kc::launch_vq_encode::<R>(
            &self.client,
            (&h[0], &h[1]),
            (&h[2], &h[3]),
            (rows, codebook.rows(), d),
        )
        .map_err(|e| self.launch_error(name, e))
    }

    fn fsq_quantize(
        &self,
        name: &'static str,
        x: &Tensor,
        levels: &Tensor,
        quantized: &mut Tensor,
        packed: &mut Tensor,
    ) -> Result<()> {
        let h = [x, levels, quantized, packed].map(out_handle);
        kc::launch_fsq_quantize::<R>(
            &self.client,
            (&h[0], &h[1]),
            (&h[2], &h[3]),
            (x.rows(), x.cols()),
        )
        .map_err(|e| self.launch_error(name, e))
    }
}
