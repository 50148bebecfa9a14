//! The quantized dequant kernels: block-quantized weights decoded to F32, F16 or BF16 (F16
//! and BF16 round the FP32 decode to nearest even).

use cubecl::prelude::*;
use cubecl::server::Handle;

use super::blocks::{block_bytes, block_elems, decode8, KINDS};
use crate::launch::{extent, grid_1d, Buf, LaunchError};

/// Unit `g` decodes elements `8g .. 8g + 8` of the flat run of blocks in `w` into `out`.
#[cube(launch_unchecked)]
fn dequant_kernel<F: Float>(
    w: &Array<u32>,
    out: &mut Array<F>,
    groups: usize,
    #[comptime] kind: u32,
) {
    let g = ABSOLUTE_POS;
    if g < groups {
        let elems = comptime!(block_elems(kind));
        let first = g * 8;
        let b = first / elems;
        let mut vals = Array::<f32>::new(8usize);
        decode8(
            w,
            b * comptime!(block_bytes(kind)),
            first % elems,
            &mut vals,
            kind,
        );
        #[unroll]
        for t in 0..8usize {
            out[first + t] = F::cast_from(vals[t]);
        }
    }
}

/// Bytes of `blocks` blocks of type `kind`, and their elements: refused when either does not
/// fit the kernels' 32-bit indexing.
pub(crate) fn quant_extent(kind: u32, blocks: usize) -> Result<(usize, usize), LaunchError> {
    let bytes = extent("blocks * block bytes", &[blocks, block_bytes(kind)])?;
    let elems = extent("blocks * block elements", &[blocks, block_elems(kind)])?;
    if bytes > u32::MAX as usize || elems > u32::MAX as usize {
        return Err(LaunchError::TooLarge { vectors: elems });
    }
    Ok((bytes, elems))
}

/// `out` (`blocks` blocks' elements of `F`): the `blocks` blocks of type `kind` (a
/// [`super::blocks`] code) in `w`, decoded.
pub fn launch_dequantize<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    w: &Handle,
    out: &Handle,
    kind: u32,
    blocks: usize,
) -> Result<(), LaunchError> {
    if !KINDS.contains(&kind) {
        return Err(LaunchError::UnknownBlockKind(kind));
    }
    let (bytes, elems) = quant_extent(kind, blocks)?;
    if elems == 0 {
        return Ok(());
    }
    let words = bytes.div_ceil(4);
    let w = Buf::new("w", w, words, 4)?;
    let out = Buf::new("out", out, elems, core::mem::size_of::<F>())?;
    let groups = elems / 8;
    let (count, dim) = grid_1d(client, groups)?;
    // SAFETY: lengths from checked `Buf`s; unit `g < groups` reads bytes of block
    // `8g / elems` (below `bytes`, so in word `< words`) and writes `out[8g .. 8g + 8]`
    // (below `elems`).
    unsafe {
        dequant_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            w.arg(),
            out.arg(),
            groups,
            kind,
        );
    }
    Ok(())
}

/// Every kernel of this file, in every specialisation the library launches, lowered to CUDA
/// C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{for_floats, Lowering as L, Rt};
    let c = l.client.clone();
    for_floats!(|F| {
        for kind in KINDS {
            l.lower(dequant_kernel::DequantKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                L::array(),
                L::array(),
                (),
                kind,
            ));
        }
    });
}
