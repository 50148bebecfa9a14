//! The prefill GEMM with block-quantized weights: `y (m, n) = act(x (m, k) . dequant(w)^T +
//! bias)`, `w (n, k)` raw GGUF blocks, FP32 accumulation.
//!
//! Each cube computes a `64 x 64` tile of `y` (64 activation rows by 64 weight rows) with
//! `16 x 16` units, each a `4 x 4` block in registers. Per 32-deep step along `k` (four
//! 8-element groups, always inside one block since blocks hold 32 or 256 elements), every
//! unit decodes one group of the weight tile with [`decode8()`] into shared memory as FP32 and
//! stages 8 activations (widened to FP32); the cube then multiplies the two slices. The weight
//! is never decoded whole: each block group is decoded once per 64 activation rows.

use cubecl::prelude::*;
use cubecl::server::Handle;

use super::blocks::{block_bytes, block_elems, decode8, KINDS};
use super::dequant::quant_extent;
use crate::launch::{extent, Buf, LaunchError};
use crate::matmul::{store_tile, tile_fma, BM, BN, TM, TN};

/// Depth of one step: four 8-element groups.
const BK: usize = 32;
/// Units per side of a cube.
const UNITS: usize = 16;
/// Most steps along `k` one launch takes (lavapipe ends longer loops).
const MAX_STEPS: usize = 65_535;

// Every block holds a whole number of steps, and one step's weight slice is one 8-element
// group per unit.
const _: () = {
    let mut i = 0;
    while i < KINDS.len() {
        assert!(block_elems(KINDS[i]).is_multiple_of(BK));
        i += 1;
    }
    assert!(BN * BK == 8 * UNITS * UNITS && (BM * BK).is_multiple_of(UNITS * UNITS));
    // `tile_fma` and `store_tile` take square unit blocks.
    assert!(TM == TN);
};

/// What one quantized GEMM launch computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantGemm {
    /// Block type code of `w` (one of [`KINDS`]).
    pub kind: u32,
    /// Activation rows (rows of `x` and `y`).
    pub m: usize,
    /// Weight rows (columns of `y`).
    pub n: usize,
    /// Blocks per weight row: `k = k_blocks * block elements` (so `k` is always whole blocks).
    pub k_blocks: usize,
    /// The epilogue activation: 0 none, 1 relu, 2 tanh-GELU, 3 erf-GELU, 4 SiLU, 5
    /// quick-GELU (the C++ codes; any other value is none).
    pub act: u32,
}

/// Cube `(X, Y)` computes `y[64 Y .. 64 Y + 64, 64 X .. 64 X + 64]` (edges skipped).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn quant_gemm_kernel<F: Float>(
    w: &Array<u32>,
    x: &Array<F>,
    bias: &Array<F>,
    y: &mut Array<F>,
    m: usize,
    n: usize,
    k_blocks: usize,
    flags: u32,
    act: u32,
    #[comptime] kind: u32,
) {
    let row0 = CUBE_POS_Y as usize * BM;
    let col0 = CUBE_POS_X as usize * BN;
    let tid = UNIT_POS as usize;
    let tx = tid % UNITS;
    let ty = tid / UNITS;
    let elems = comptime!(block_elems(kind));
    let bytes = comptime!(block_bytes(kind));
    let k = k_blocks * elems;
    let row_bytes = k_blocks * bytes;
    let mut sx = SharedMemory::<f32>::new(BK * BM);
    let mut sw = SharedMemory::<f32>::new(BK * BN);
    let mut acc = Array::<f32>::new(TM * TN);
    #[unroll]
    for i in 0..TM * TN {
        acc[i] = f32::new(0.0f32);
    }
    // This unit's weight group of every step: row `wj` of the tile, elements `wg .. wg + 8`.
    let wj = tid / (BK / 8);
    let wg = (tid % (BK / 8)) * 8;
    let gj = col0 + wj;
    let mut vals = Array::<f32>::new(8usize);
    let mut k0 = usize::new(0);
    loop {
        if k0 >= k {
            break;
        }
        #[unroll]
        for t in 0..8usize {
            vals[t] = f32::new(0.0f32);
        }
        if gj < n {
            let kk = k0 + wg;
            decode8(
                w,
                gj * row_bytes + (kk / elems) * bytes,
                kk % elems,
                &mut vals,
                kind,
            );
        }
        #[unroll]
        for t in 0..8usize {
            sw[(wg + t) * BN + wj] = vals[t];
        }
        // Stage x's 64 x 32 slice: consecutive units along the stored row (coalesced).
        #[unroll]
        for r in 0..(BM * BK) / (UNITS * UNITS) {
            let e = tid + r * UNITS * UNITS;
            let i = e / BK;
            let kk = e % BK;
            let gi = row0 + i;
            let mut v = f32::new(0.0f32);
            if gi < m {
                v = f32::cast_from(x[gi * k + k0 + kk]);
            }
            sx[kk * BM + i] = v;
        }
        sync_cube();
        tile_fma(&sx, &sw, &mut acc, tx, ty, BK, BM, BN, TM);
        sync_cube();
        k0 += BK;
    }
    store_tile::<F>(
        y,
        bias,
        &acc,
        row0 + ty * TM,
        col0 + tx * TN,
        m,
        n,
        0,
        flags,
        act,
        TM,
    );
}

/// Runs `y (m, n) = act(x (m, k) . dequant(w)^T + bias)` as `spec` says: `w` holds `n *
/// k_blocks` blocks of type `spec.kind` back to back (row-major), `x` `m * k` elements of
/// `F`, `bias` (when given) `n`, `y` `m * n`. Refuses an unknown block type, short buffers,
/// sizes past 32-bit indexing, `k` beyond 65535 steps and grids past the device's limits.
pub fn launch_quant_gemm<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    w: &Handle,
    x: &Handle,
    bias: Option<&Handle>,
    y: &Handle,
    spec: QuantGemm,
) -> Result<(), LaunchError> {
    let QuantGemm {
        kind,
        m,
        n,
        k_blocks,
        act,
    } = spec;
    if !KINDS.contains(&kind) {
        return Err(LaunchError::UnknownBlockKind(kind));
    }
    let (bytes, _) = quant_extent(kind, extent("n * k blocks", &[n, k_blocks])?)?;
    let k = extent("k blocks * block elements", &[k_blocks, block_elems(kind)])?;
    let (len_x, len_y) = (extent("m * k", &[m, k])?, extent("m * n", &[m, n])?);
    if len_x > u32::MAX as usize || len_y > u32::MAX as usize || k / BK > MAX_STEPS {
        return Err(LaunchError::TooLarge {
            vectors: len_x.max(len_y),
        });
    }
    if len_y == 0 {
        return Ok(());
    }
    let words = bytes.div_ceil(4);
    let elem = core::mem::size_of::<F>();
    let w = Buf::new("w", w, words, 4)?;
    let x = Buf::new("x", x, len_x, elem)?;
    let y = Buf::new("y", y, len_y, elem)?;
    let bias = bias.map(|b| Buf::new("bias", b, n, elem)).transpose()?;
    let (gx, gy) = (n.div_ceil(BN), m.div_ceil(BM));
    let max = client.properties().hardware.max_cube_count;
    if gx > max.0 as usize || gy > max.1 as usize {
        return Err(LaunchError::TooLarge { vectors: len_y });
    }
    let count = CubeCount::Static(gx as u32, gy as u32, 1);
    let dim = CubeDim::new_2d(UNITS as u32, UNITS as u32);
    let act = if act <= 5 { act } else { 0 };
    // The run-time epilogue of `store_tile`: bit 1 adds the bias (no accumulation).
    let flags = u32::from(bias.is_some()) << 1;
    let bias = y.stand_in_for(bias.as_ref());
    // SAFETY: lengths from checked `Buf`s (`y` stands in for an absent bias, unread). The
    // kernel reads `w` at bytes of rows `< n`, blocks `< k_blocks` (below `bytes`, so words
    // `< words`); `x` at rows `< m`, columns `< k`; `bias` at columns `< n` only when bound;
    // writes `y` at rows `< m`, columns `< n`. Every index fits in 32 bits (checked above).
    unsafe {
        quant_gemm_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            w.arg(),
            x.arg(),
            bias.arg(),
            y.arg(),
            m,
            n,
            k_blocks,
            flags,
            act,
            kind,
        );
    }
    Ok(())
}

/// Every kernel of this file, in every specialisation the library launches, lowered to CUDA
/// C++ (see `crate::cuda_lowering`): every block type and float type (the bias and the
/// activation are launch arguments).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{for_floats, Lowering as L, Rt};
    let c = l.client.clone();
    let a = L::array;
    for_floats!(|F| {
        for kind in KINDS {
            l.lower(quant_gemm_kernel::QuantGemmKernel::<F, Rt>::new(
                L::settings(CubeDim::new_2d(UNITS as u32, UNITS as u32)),
                c.clone(),
                a(),
                a(),
                a(),
                a(),
                (),
                (),
                (),
                (),
                (),
                kind,
            ));
        }
    });
}
