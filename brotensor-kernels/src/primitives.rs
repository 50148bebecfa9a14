//! The pieces every row-reduce kernel shares: the cube width, the shared-memory combines
//! (sum, max, argmax over the units of a cube), the mask test of the masked row ops, and the
//! host side's one-cube-per-row grid.

use cubecl::prelude::*;

use crate::launch::{grid_1d, LaunchError};

/// Units per cube in row reductions (a power of two).
pub const REDUCE_UNITS: u32 = 256;

/// The sum of every unit's `v` over the cube; all units receive it. `smem` holds
/// [`REDUCE_UNITS`] elements. Every unit of the cube must call it.
#[cube]
pub fn cube_sum<T: Numeric>(v: T, smem: &mut SharedMemory<T>) -> T {
    let u = UNIT_POS as usize;
    smem[u] = v;
    sync_cube();
    let mut stride = usize::new((REDUCE_UNITS / 2) as i64);
    loop {
        if stride == 0 {
            break;
        }
        if u < stride {
            smem[u] = smem[u] + smem[u + stride];
        }
        sync_cube();
        stride /= 2;
    }
    let total = smem[0];
    sync_cube();
    total
}

/// Leaves the largest `(value, index)` over the cube, larger value first and the smaller index
/// on ties, in `vals[0]`, `idxs[0]` (visible to all units). Every unit of the cube must call
/// it, and read the result before the shared memory is written again (then `sync_cube`).
#[cube]
pub fn cube_argmax(v: f32, i: u32, vals: &mut SharedMemory<f32>, idxs: &mut SharedMemory<u32>) {
    let u = UNIT_POS as usize;
    vals[u] = v;
    idxs[u] = i;
    sync_cube();
    let mut stride = usize::new((REDUCE_UNITS / 2) as i64);
    loop {
        if stride == 0 {
            break;
        }
        if u < stride {
            let ov = vals[u + stride];
            let oi = idxs[u + stride];
            let bv = vals[u];
            let bi = idxs[u];
            if ov > bv || (ov == bv && oi < bi) {
                vals[u] = ov;
                idxs[u] = oi;
            }
        }
        sync_cube();
        stride /= 2;
    }
}

/// The largest `v` over the cube; all units receive it. Every unit must call it.
#[cube]
pub fn cube_max(v: f32, smem: &mut SharedMemory<f32>) -> f32 {
    let u = UNIT_POS as usize;
    smem[u] = v;
    sync_cube();
    let mut stride = usize::new((REDUCE_UNITS / 2) as i64);
    loop {
        if stride == 0 {
            break;
        }
        if u < stride {
            let o = smem[u + stride];
            if o > smem[u] {
                smem[u] = o;
            }
        }
        sync_cube();
        stride /= 2;
    }
    let m = smem[0];
    sync_cube();
    m
}

/// Whether entry `at` takes part: always without a mask, else where `mask[at] >= 0.5`.
#[cube]
pub(crate) fn is_valid(mask: &Array<f32>, at: usize, #[comptime] masked: bool) -> bool {
    let mut v = true;
    if comptime!(masked) {
        v = mask[at] >= 0.5;
    }
    v
}

/// One cube per row, folded into two grid dimensions (too many rows saturate into a grid the
/// device refuses).
pub(crate) fn row_grid<R: Runtime>(
    client: &ComputeClient<R>,
    rows: usize,
) -> Result<(CubeCount, CubeDim), LaunchError> {
    let (count, _) = grid_1d(client, rows.saturating_mul(REDUCE_UNITS as usize))?;
    Ok((count, CubeDim::new_1d(REDUCE_UNITS)))
}
