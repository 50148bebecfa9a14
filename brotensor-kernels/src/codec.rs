//! Neural-codec quantizers (FP32), as `brotensor_cpu::codec` computes them.
//!
//! Vector quantization: one cube per row of `x`. Unit `u` scores codewords `u`, `u + 256`,
//! ... by `|c|^2 - 2 x.c` (both sums over the coordinates in order, as the CPU does), keeps
//! its lowest-index minimum, and the cube merges the units' `(score, index)` pairs
//! lexicographically, so a tie keeps the lowest index however the codewords were split.
//! Finite scalar quantization: one unit per row, its coordinates in order.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, grid_1d, Buf, LaunchError};
use crate::primitives::{cube_argmax, row_grid, REDUCE_UNITS};

#[cube(launch_unchecked)]
fn vq_encode_kernel(
    x: &Array<f32>,
    codebook: &Array<f32>,
    indices: &mut Array<i32>,
    quantized: &mut Array<f32>,
    rows: usize,
    k: usize,
    d: usize,
) {
    let row = CUBE_POS;
    if row < rows {
        let xb = row * d;
        // The search starts at f32::MAX: an infinite or NaN score never wins, and a unit
        // that found nothing keeps the index u32::MAX, which loses every tie.
        let none = u32::new(u32::MAX as i64);
        let mut best = f32::new(f32::MAX);
        let mut best_k = none;
        let mut kk = UNIT_POS as usize;
        while kk < k {
            let cb = kk * d;
            let mut norm = 0.0f32;
            let mut dot = 0.0f32;
            for j in 0..d {
                let c = codebook[cb + j];
                norm += c * c;
                dot += x[xb + j] * c;
            }
            let s = norm - 2.0f32 * dot;
            if s < best {
                best = s;
                best_k = kk as u32;
            }
            kk += REDUCE_UNITS as usize;
        }
        let mut vals = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let mut idxs = SharedMemory::<u32>::new(REDUCE_UNITS as usize);
        // The largest `-score`, the smaller index on ties: the lowest-index minimum.
        cube_argmax(-best, best_k, &mut vals, &mut idxs);
        let mut found = idxs[0];
        if found == none {
            found = 0u32;
        }
        if UNIT_POS == 0 {
            indices[row] = i32::cast_from(found);
        }
        let fb = found as usize * d;
        let mut j = UNIT_POS as usize;
        while j < d {
            quantized[xb + j] = codebook[fb + j];
            j += REDUCE_UNITS as usize;
        }
    }
}

#[cube(launch_unchecked)]
fn fsq_quantize_kernel(
    x: &Array<f32>,
    levels: &Array<i32>,
    quantized: &mut Array<f32>,
    packed: &mut Array<i32>,
    rows: usize,
    d: usize,
) {
    let row = ABSOLUTE_POS;
    if row < rows {
        let mut code = 0i32;
        let mut stride = 1i32;
        for j in 0..d {
            let at = row * d + j;
            let l = levels[j];
            let span = f32::cast_from(l - 1i32);
            let v = x[at];
            // Clamped to [-1, 1]; NaN fails the test and counts as -1.
            let mut c = f32::new(-1.0);
            if v > -1.0f32 {
                c = f32::min(v, 1.0f32);
            }
            let t = (c + 1.0f32) * 0.5f32 * span;
            // round(t), halves away from zero (t >= 0; t - floor(t) is exact).
            let mut r = f32::floor(t);
            if t - r >= 0.5f32 {
                r += 1.0f32;
            }
            quantized[at] = r / (span * 0.5f32) - 1.0f32;
            code += i32::cast_from(r) * stride;
            stride *= l;
        }
        packed[row] = code;
    }
}

/// Vector-quantization encode of `rows` rows of `x` (`(rows, d)`) against `codebook`
/// (`(k, d)`): `indices` (`rows` I32) and `quantized` (`(rows, d)`). `k` and `d` must be at
/// least 1 when there are rows.
pub fn launch_vq_encode<R: Runtime>(
    client: &ComputeClient<R>,
    (x, codebook): (&Handle, &Handle),
    (indices, quantized): (&Handle, &Handle),
    (rows, k, d): (usize, usize, usize),
) -> Result<(), LaunchError> {
    if rows == 0 {
        return Ok(());
    }
    if k == 0 || d == 0 {
        return Err(LaunchError::Invalid {
            what: "vq_encode needs k >= 1 codewords of d >= 1 coordinates",
        });
    }
    let xn = extent("rows * d", &[rows, d])?;
    let cn = extent("k * d", &[k, d])?;
    check_u32(&[("rows * d", xn), ("k * d", cn), ("k", k)])?;
    let x = Buf::new("x", x, xn, 4)?;
    let codebook = Buf::new("codebook", codebook, cn, 4)?;
    let indices = Buf::new("indices", indices, rows, 4)?;
    let quantized = Buf::new("quantized", quantized, xn, 4)?;
    let (count, dim) = row_grid(client, rows)?;
    // SAFETY: x and quantized hold rows * d floats, codebook k * d, indices rows (checked
    // `Buf`s, every index below 2^32); cubes past `rows` return, units read codewords
    // below `k` and coordinates below `d`, and the index copied from is one of them (or 0).
    unsafe {
        vq_encode_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            x.arg(),
            codebook.arg(),
            indices.arg(),
            quantized.arg(),
            rows,
            k,
            d,
        );
    }
    Ok(())
}

/// Finite scalar quantization of `rows` rows of `x` (`(rows, d)`) on `levels` (`d` I32, each
/// at least 2, their product within `i32`: the caller checks): `quantized` (`(rows, d)`) and
/// `packed` (`rows` I32).
pub fn launch_fsq_quantize<R: Runtime>(
    client: &ComputeClient<R>,
    (x, levels): (&Handle, &Handle),
    (quantized, packed): (&Handle, &Handle),
    (rows, d): (usize, usize),
) -> Result<(), LaunchError> {
    if rows == 0 || d == 0 {
        return Ok(());
    }
    let xn = extent("rows * d", &[rows, d])?;
    check_u32(&[("rows * d", xn)])?;
    let x = Buf::new("x", x, xn, 4)?;
    let levels = Buf::new("levels", levels, d, 4)?;
    let quantized = Buf::new("quantized", quantized, xn, 4)?;
    let packed = Buf::new("packed", packed, rows, 4)?;
    let (count, dim) = grid_1d(client, rows)?;
    // SAFETY: x and quantized hold rows * d floats, levels d and packed rows words (checked
    // `Buf`s, indices below 2^32); units past `rows` return.
    unsafe {
        fsq_quantize_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            x.arg(),
            levels.arg(),
            quantized.arg(),
            packed.arg(),
            rows,
            d,
        );
    }
    Ok(())
}

/// Every kernel of this file, lowered to CUDA C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{Lowering as L, Rt};
    let c = l.client.clone();
    let a = L::array;
    l.lower(vq_encode_kernel::VqEncodeKernel::<Rt>::new(
        L::settings(CubeDim::new_1d(REDUCE_UNITS)),
        c.clone(),
        a(),
        a(),
        a(),
        a(),
        (),
        (),
        (),
    ));
    l.lower(fsq_quantize_kernel::FsqQuantizeKernel::<Rt>::new(
        L::settings_1d(),
        c,
        a(),
        a(),
        a(),
        a(),
        (),
        (),
    ));
}
