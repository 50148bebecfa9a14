//! Softmax and its gradient on the row-reduce skeleton. One cube per row; each pass folds
//! the row in strided slices and combines through shared memory (`cube_sum()`,
//! `cube_max()`); statistics are FP32.
//!
//! Few long rows (a flat softmax, one token's logits) are split across cubes of `LONG_PART`
//! elements: each cube writes its part's statistics, then each combines its row's partials in
//! a fixed order and writes its part.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{extent, Buf, LaunchError};
use crate::primitives::{cube_max, cube_sum, is_valid, row_grid, REDUCE_UNITS};

/// This unit's largest unmasked `x[base + j]` over `j` in `[from, to)` (strided by the
/// cube), at least `-1e30` (the C++ original's starting value).
#[cube]
fn unit_max<F: Float>(
    x: &Array<F>,
    mask: &Array<f32>,
    base: usize,
    from: usize,
    to: usize,
    #[comptime] masked: bool,
) -> f32 {
    let mut m = f32::new(-1e30f32);
    let mut j = from + UNIT_POS as usize;
    loop {
        if j >= to {
            break;
        }
        let v = f32::cast_from(x[base + j]);
        if is_valid(mask, j, masked) && v > m {
            m = v;
        }
        j += REDUCE_UNITS as usize;
    }
    m
}

/// This unit's share of `sum exp(x[base + j] - m)` over unmasked `j` in `[from, to)`.
#[cube]
fn unit_exp_sum<F: Float>(
    x: &Array<F>,
    mask: &Array<f32>,
    base: usize,
    from: usize,
    to: usize,
    m: f32,
    #[comptime] masked: bool,
) -> f32 {
    let mut s = f32::new(0.0f32);
    let mut j = from + UNIT_POS as usize;
    loop {
        if j >= to {
            break;
        }
        if is_valid(mask, j, masked) {
            s += (f32::cast_from(x[base + j]) - m).exp();
        }
        j += REDUCE_UNITS as usize;
    }
    s
}

/// Writes `y = exp(x - m) / s` (0 where masked, and everywhere when `s` is 0) over this
/// unit's share of `j` in `[from, to)`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn write_softmax<F: Float>(
    x: &Array<F>,
    mask: &Array<f32>,
    y: &mut Array<F>,
    base: usize,
    from: usize,
    to: usize,
    m: f32,
    s: f32,
    #[comptime] masked: bool,
) {
    let mut inv = f32::new(0.0f32);
    if s > 0.0 {
        inv = 1.0 / s;
    }
    let mut j = from + UNIT_POS as usize;
    loop {
        if j >= to {
            break;
        }
        let mut p = f32::new(0.0f32);
        if is_valid(mask, j, masked) {
            p = (f32::cast_from(x[base + j]) - m).exp() * inv;
        }
        y[base + j] = F::cast_from(p);
        j += REDUCE_UNITS as usize;
    }
}

/// This unit's share of `sum p dp` over `j` in `[from, to)`.
#[cube]
fn unit_dot<F: Float>(p: &Array<F>, dp: &Array<F>, base: usize, from: usize, to: usize) -> f32 {
    let mut s = f32::new(0.0f32);
    let mut j = from + UNIT_POS as usize;
    loop {
        if j >= to {
            break;
        }
        s += f32::cast_from(p[base + j]) * f32::cast_from(dp[base + j]);
        j += REDUCE_UNITS as usize;
    }
    s
}

/// Writes `dl = p (dp - s)` over this unit's share of `j` in `[from, to)`.
#[cube]
fn write_softmax_grad<F: Float>(
    p: &Array<F>,
    dp: &Array<F>,
    dl: &mut Array<F>,
    base: usize,
    from: usize,
    to: usize,
    s: f32,
) {
    let mut j = from + UNIT_POS as usize;
    loop {
        if j >= to {
            break;
        }
        let pv = f32::cast_from(p[base + j]);
        dl[base + j] = F::cast_from(pv * (f32::cast_from(dp[base + j]) - s));
        j += REDUCE_UNITS as usize;
    }
}

/// Softmax per row; entries whose `mask[j]` is below 0.5 (when `masked`) get 0, and a fully
/// masked row is zeros. The running max starts at -1e30, as in the C++ original.
#[cube(launch_unchecked)]
fn softmax_kernel<F: Float>(
    x: &Array<F>,
    mask: &Array<f32>,
    y: &mut Array<F>,
    rows: usize,
    cols: usize,
    #[comptime] masked: bool,
) {
    let row = CUBE_POS;
    if row < rows {
        let base = row * cols;
        let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let m = cube_max(unit_max(x, mask, base, 0, cols, masked), &mut smem);
        let s = unit_exp_sum(x, mask, base, 0, cols, m, masked);
        let s = cube_sum::<f32>(s, &mut smem);
        write_softmax(x, mask, y, base, 0, cols, m, s, masked);
    }
}

/// `dl = p (dp - sum(dp p))` per row.
#[cube(launch_unchecked)]
fn softmax_backward_kernel<F: Float>(
    p: &Array<F>,
    dp: &Array<F>,
    dl: &mut Array<F>,
    rows: usize,
    cols: usize,
) {
    let row = CUBE_POS;
    if row < rows {
        let base = row * cols;
        let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let s = cube_sum::<f32>(unit_dot(p, dp, base, 0, cols), &mut smem);
        write_softmax_grad(p, dp, dl, base, 0, cols, s);
    }
}

/// Elements of a long row one cube covers in the split softmax kernels (16 per unit).
const LONG_PART: usize = REDUCE_UNITS as usize * 16;

/// Whether softmax splits each row across cubes: few rows (one cube per row would leave a
/// GPU idle) that are long (a flat softmax, one token's logits).
fn splits_rows(rows: usize, cols: usize) -> bool {
    rows < 256 && cols >= 4 * LONG_PART
}

/// Cubes per row when a row is split.
fn row_parts(cols: usize) -> usize {
    cols.div_ceil(LONG_PART)
}

/// First stage of a split softmax: cube `(part, row)` writes the max `m` of its part of the
/// row and `sum exp(x - m)` to `partials[2 (row parts + part) ..]` (`-1e30` and 0 when
/// nothing in the part is unmasked).
#[cube(launch_unchecked)]
fn softmax_parts_kernel<F: Float>(
    x: &Array<F>,
    mask: &Array<f32>,
    partials: &mut Array<f32>,
    cols: usize,
    #[comptime] masked: bool,
) {
    let part = CUBE_POS_X as usize;
    let row = CUBE_POS_Y as usize;
    let (from, base) = (part * LONG_PART, row * cols);
    let to = cols.min(from + LONG_PART);
    let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
    let m = cube_max(unit_max(x, mask, base, from, to, masked), &mut smem);
    let s = unit_exp_sum(x, mask, base, from, to, m, masked);
    let s = cube_sum::<f32>(s, &mut smem);
    if UNIT_POS == 0 {
        let at = 2 * (row * CUBE_COUNT_X as usize + part);
        partials[at] = m;
        partials[at + 1] = s;
    }
}

/// Second stage: cube `(part, row)` combines the row's partials (the row max, and the sum
/// of every part's `s exp(m - max)`), then writes its part of `y`.
#[cube(launch_unchecked)]
fn softmax_apply_kernel<F: Float>(
    x: &Array<F>,
    mask: &Array<f32>,
    partials: &Array<f32>,
    y: &mut Array<F>,
    cols: usize,
    #[comptime] masked: bool,
) {
    let part = CUBE_POS_X as usize;
    let row = CUBE_POS_Y as usize;
    let parts = CUBE_COUNT_X as usize;
    let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
    let mut m = f32::new(-1e30f32);
    let mut q = UNIT_POS as usize;
    loop {
        if q >= parts {
            break;
        }
        let v = partials[2 * (row * parts + q)];
        if v > m {
            m = v;
        }
        q += REDUCE_UNITS as usize;
    }
    let m = cube_max(m, &mut smem);
    let mut s = f32::new(0.0f32);
    q = UNIT_POS as usize;
    loop {
        if q >= parts {
            break;
        }
        let at = 2 * (row * parts + q);
        s += partials[at + 1] * (partials[at] - m).exp();
        q += REDUCE_UNITS as usize;
    }
    let s = cube_sum::<f32>(s, &mut smem);
    let from = part * LONG_PART;
    let to = cols.min(from + LONG_PART);
    write_softmax(x, mask, y, row * cols, from, to, m, s, masked);
}

/// First stage of a split softmax gradient: cube `(part, row)` writes `sum dp p` over its
/// part of the row to `partials[row parts + part]`.
#[cube(launch_unchecked)]
fn softmax_backward_parts_kernel<F: Float>(
    p: &Array<F>,
    dp: &Array<F>,
    partials: &mut Array<f32>,
    cols: usize,
) {
    let part = CUBE_POS_X as usize;
    let row = CUBE_POS_Y as usize;
    let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
    let from = part * LONG_PART;
    let s = unit_dot(p, dp, row * cols, from, cols.min(from + LONG_PART));
    let s = cube_sum::<f32>(s, &mut smem);
    if UNIT_POS == 0 {
        partials[row * CUBE_COUNT_X as usize + part] = s;
    }
}

/// Second stage: cube `(part, row)` adds the row's partials and writes its part of
/// `dl = p (dp - sum)`.
#[cube(launch_unchecked)]
fn softmax_backward_apply_kernel<F: Float>(
    p: &Array<F>,
    dp: &Array<F>,
    partials: &Array<f32>,
    dl: &mut Array<F>,
    cols: usize,
) {
    let part = CUBE_POS_X as usize;
    let row = CUBE_POS_Y as usize;
    let parts = CUBE_COUNT_X as usize;
    let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
    let mut s = f32::new(0.0f32);
    let mut q = UNIT_POS as usize;
    loop {
        if q >= parts {
            break;
        }
        s += partials[row * parts + q];
        q += REDUCE_UNITS as usize;
    }
    let s = cube_sum::<f32>(s, &mut smem);
    let from = part * LONG_PART;
    write_softmax_grad(p, dp, dl, row * cols, from, cols.min(from + LONG_PART), s);
}

/// The grid of a split row op: `(parts, rows)` cubes, and `parts`.
fn split_grid<R: Runtime>(
    client: &ComputeClient<R>,
    rows: usize,
    cols: usize,
) -> Result<(CubeCount, usize), LaunchError> {
    let parts = row_parts(cols);
    let (max_x, max_y, _) = client.properties().hardware.max_cube_count;
    if parts > max_x as usize || rows > max_y as usize {
        return Err(LaunchError::TooLarge {
            vectors: rows.saturating_mul(cols),
        });
    }
    Ok((CubeCount::Static(parts as u32, rows as u32, 1), parts))
}

/// Softmax of each row of `x` into `y` (`y` may be `x`), with an optional per-column mask.
pub fn launch_softmax<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    x: &Handle,
    mask: Option<&Handle>,
    y: &Handle,
    (rows, cols): (usize, usize),
) -> Result<(), LaunchError> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let len = extent("rows * cols", &[rows, cols])?;
    let b = core::mem::size_of::<F>();
    let x = Buf::new("x", x, len, b)?;
    let y = Buf::new("y", y, len, b)?;
    let mask = mask.map(|m| Buf::new("mask", m, cols, 4)).transpose()?;
    let masked = mask.is_some();
    let mask = x.stand_in_for(mask.as_ref());
    if splits_rows(rows, cols) {
        let (count, parts) = split_grid(client, rows, cols)?;
        let stats = extent("2 * rows * parts", &[2, rows, parts])?;
        let partials = client.empty(extent("partials bytes", &[stats, 4])?);
        let partials = Buf::new("partials", &partials, stats, 4)?;
        // SAFETY: lengths from checked `Buf`s (the unmasked variant never reads `mask`). Cube
        // `(part, row)` has `part < parts = ceil(cols / LONG_PART)`, `row < rows`; it reads
        // `row * cols + j` and `mask[j]` with `j < cols`, and `partials` at
        // `2 (row parts + q) + 1 < 2 rows parts`, all allocated.
        unsafe {
            softmax_parts_kernel::launch_unchecked::<F, R>(
                client,
                count.clone(),
                CubeDim::new_1d(REDUCE_UNITS),
                x.arg(),
                mask.arg(),
                partials.arg(),
                cols,
                masked,
            );
            softmax_apply_kernel::launch_unchecked::<F, R>(
                client,
                count,
                CubeDim::new_1d(REDUCE_UNITS),
                x.arg(),
                mask.arg(),
                partials.arg(),
                y.arg(),
                cols,
                masked,
            );
        }
        return Ok(());
    }
    let (count, dim) = row_grid(client, rows)?;
    // SAFETY: lengths from checked `Buf`s (the unmasked variant never reads `mask`); every
    // index is `row * cols + j` with `row < rows`, `j < cols`, or `j < cols` into the mask.
    unsafe {
        softmax_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            mask.arg(),
            y.arg(),
            rows,
            cols,
            masked,
        );
    }
    Ok(())
}

/// `dl = p (dp - sum(dp p))` per row.
pub fn launch_softmax_backward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    p: &Handle,
    dp: &Handle,
    dl: &Handle,
    (rows, cols): (usize, usize),
) -> Result<(), LaunchError> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let len = extent("rows * cols", &[rows, cols])?;
    let b = core::mem::size_of::<F>();
    let p = Buf::new("p", p, len, b)?;
    let dp = Buf::new("dp", dp, len, b)?;
    let dl = Buf::new("dl", dl, len, b)?;
    if splits_rows(rows, cols) {
        let (count, parts) = split_grid(client, rows, cols)?;
        let dots = extent("rows * parts", &[rows, parts])?;
        let partials = client.empty(extent("partials bytes", &[dots, 4])?);
        let partials = Buf::new("partials", &partials, dots, 4)?;
        // SAFETY: as in `launch_softmax`'s split path; `partials` is read and written at
        // `row parts + q < rows parts`.
        unsafe {
            softmax_backward_parts_kernel::launch_unchecked::<F, R>(
                client,
                count.clone(),
                CubeDim::new_1d(REDUCE_UNITS),
                p.arg(),
                dp.arg(),
                partials.arg(),
                cols,
            );
            softmax_backward_apply_kernel::launch_unchecked::<F, R>(
                client,
                count,
                CubeDim::new_1d(REDUCE_UNITS),
                p.arg(),
                dp.arg(),
                partials.arg(),
                dl.arg(),
                cols,
            );
        }
        return Ok(());
    }
    let (count, dim) = row_grid(client, rows)?;
    // SAFETY: as in `launch_softmax`.
    unsafe {
        softmax_backward_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            p.arg(),
            dp.arg(),
            dl.arg(),
            rows,
            cols,
        );
    }
    Ok(())
}

/// Every kernel of this file in every specialisation the library can launch, lowered to
/// CUDA C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{for_floats, Lowering as L, Rt};
    let c = l.client.clone();
    let a = L::array;
    let s = || L::settings(CubeDim::new_1d(REDUCE_UNITS));
    for_floats!(|F| {
        for flag in [false, true] {
            l.lower(softmax_kernel::SoftmaxKernel::<F, Rt>::new(
                s(),
                c.clone(),
                a(),
                a(),
                a(),
                (),
                (),
                flag,
            ));
            l.lower(softmax_parts_kernel::SoftmaxPartsKernel::<F, Rt>::new(
                s(),
                c.clone(),
                a(),
                a(),
                a(),
                (),
                flag,
            ));
            l.lower(softmax_apply_kernel::SoftmaxApplyKernel::<F, Rt>::new(
                s(),
                c.clone(),
                a(),
                a(),
                a(),
                a(),
                (),
                flag,
            ));
        }
        l.lower(
            softmax_backward_kernel::SoftmaxBackwardKernel::<F, Rt>::new(
                s(),
                c.clone(),
                a(),
                a(),
                a(),
                (),
                (),
            ),
        );
        l.lower(softmax_backward_parts_kernel::SoftmaxBackwardPartsKernel::<
            F,
            Rt,
        >::new(s(), c.clone(), a(), a(), a(), ()));
        l.lower(softmax_backward_apply_kernel::SoftmaxBackwardApplyKernel::<
            F,
            Rt,
        >::new(s(), c.clone(), a(), a(), a(), a(), ()));
    });
}
