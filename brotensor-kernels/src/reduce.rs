//! Row and column reductions. The skeleton: one cube of [`REDUCE_UNITS`] units per row; each
//! unit folds a strided slice of the row, then the cube combines the units' partials through
//! shared memory ([`cube_sum()`], [`cube_argmax()`]); rows of at most [`NARROW_ROW`] values
//! are summed by one unit each instead (a cube would leave nearly every unit idle). Row-wise ops (softmax, the norms) reuse the
//! same helpers. Column sums (`sum_cols`, the norms' parameter gradients) run in two stages:
//! one unit per column per part of the rows writes an FP32 partial, then one unit per column
//! adds the parts in order, so a tall input spreads over many units and no unit loops long.
//! Partial sums are FP32 whatever the storage type.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{extent, grid_1d, grid_layers, Buf, LaunchError};
use crate::primitives::row_grid;
pub use crate::primitives::{cube_argmax, cube_sum, REDUCE_UNITS};

/// The longest rows [`launch_sum_rows`] sums one unit per row.
pub const NARROW_ROW: usize = 32;

/// `y[row] = sum_j x[row, j]`, one unit per row, in FP32 and in order.
#[cube(launch_unchecked)]
fn narrow_sum_rows_kernel<F: Float>(x: &Array<F>, y: &mut Array<F>, rows: usize, cols: usize) {
    let row = ABSOLUTE_POS;
    if row < rows {
        let mut acc = f32::new(0.0f32);
        for j in 0..cols {
            acc += f32::cast_from(x[row * cols + j]);
        }
        y[row] = F::cast_from(acc);
    }
}

#[cube(launch_unchecked)]
fn sum_rows_kernel<F: Float>(x: &Array<F>, y: &mut Array<F>, rows: usize, cols: usize) {
    let row = CUBE_POS;
    if row < rows {
        let mut acc = f32::new(0.0f32);
        let mut j = UNIT_POS as usize;
        loop {
            if j >= cols {
                break;
            }
            acc += f32::cast_from(x[row * cols + j]);
            j += REDUCE_UNITS as usize;
        }
        let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let total = cube_sum::<f32>(acc, &mut smem);
        if UNIT_POS == 0 {
            y[row] = F::cast_from(total);
        }
    }
}

/// First stage of a column sum: `partials[p, c] = sum_r a[r, c] (* b[r, c]) (* scale[r])`
/// over the rows of part `p` (rows `p chunk ..` up to `rows`). Columns run along the
/// cubes' x and y (so consecutive units read consecutive addresses), parts along z.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn column_partials_kernel<F: Float>(
    a: &Array<F>,
    b: &Array<F>,
    scale: &Array<f32>,
    partials: &mut Array<f32>,
    rows: usize,
    cols: usize,
    chunk: usize,
    #[comptime] with_b: bool,
    #[comptime] with_scale: bool,
) {
    let cube = CUBE_POS_Y as usize * CUBE_COUNT_X as usize + CUBE_POS_X as usize;
    let c = cube * CUBE_DIM_X as usize + UNIT_POS_X as usize;
    let part = CUBE_POS_Z as usize;
    if c < cols {
        let end = rows.min((part + 1) * chunk);
        let mut acc = f32::new(0.0f32);
        let mut r = part * chunk;
        loop {
            if r >= end {
                break;
            }
            let mut v = f32::cast_from(a[r * cols + c]);
            if comptime!(with_b) {
                v *= f32::cast_from(b[r * cols + c]);
            }
            if comptime!(with_scale) {
                v *= scale[r];
            }
            acc += v;
            r += 1;
        }
        partials[part * cols + c] = acc;
    }
}

/// Second stage: `out[c] (+)= sum_p partials[p, c]`, parts added in order.
#[cube(launch_unchecked)]
fn column_finish_kernel<F: Float>(
    partials: &Array<f32>,
    out: &mut Array<F>,
    parts: usize,
    cols: usize,
    #[comptime] accumulate: bool,
) {
    let c = ABSOLUTE_POS;
    if c < cols {
        let mut acc = f32::new(0.0f32);
        for p in 0..parts {
            acc += partials[p * cols + c];
        }
        if comptime!(accumulate) {
            acc += f32::cast_from(out[c]);
        }
        out[c] = F::cast_from(acc);
    }
}

#[cube(launch_unchecked)]
fn argmax_rows_kernel<F: Float, O: Numeric>(
    x: &Array<F>,
    idx: &mut Array<O>,
    rows: usize,
    cols: usize,
) {
    let row = CUBE_POS;
    if row < rows {
        let mut best = f32::new(-f32::MAX);
        let mut at = u32::new(0);
        let mut j = UNIT_POS as usize;
        loop {
            if j >= cols {
                break;
            }
            let v = f32::cast_from(x[row * cols + j]);
            if v > best {
                best = v;
                at = j as u32;
            }
            j += REDUCE_UNITS as usize;
        }
        let mut vals = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let mut idxs = SharedMemory::<u32>::new(REDUCE_UNITS as usize);
        cube_argmax(best, at, &mut vals, &mut idxs);
        if UNIT_POS == 0 {
            idx[row] = O::cast_from(idxs[0]);
        }
    }
}

#[cube(launch_unchecked)]
fn top_k_rows_kernel(
    x: &Array<f32>,
    vals: &mut Array<f32>,
    idx: &mut Array<i32>,
    rows: usize,
    cols: usize,
    k: usize,
) {
    // No infinity or NaN literals: WGSL rejects them, so "nothing found" is an index of
    // u32::MAX and the -inf and NaN the kernel needs are built from its bits.
    let none = u32::new(u32::MAX as i64);
    let row = CUBE_POS;
    if row < rows {
        let mut sv = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let mut si = SharedMemory::<u32>::new(REDUCE_UNITS as usize);
        // The previous pick; the next is the best element ranked strictly after it.
        let mut pv = f32::new(0.0f32);
        let mut pi = u32::new(0);
        let mut first = bool::new(true);
        for out in 0..k {
            let mut bv = f32::new(0.0f32);
            let mut bi = none;
            let mut j = UNIT_POS as usize;
            loop {
                if j >= cols {
                    break;
                }
                let v = x[row * cols + j];
                let ju = j as u32;
                let after = !v.is_nan() && (first || v < pv || (v == pv && ju > pi));
                if after && (bi == none || v > bv || (v == bv && ju < bi)) {
                    bv = v;
                    bi = ju;
                }
                j += REDUCE_UNITS as usize;
            }
            // Units that found nothing must lose every comparison: give them the lowest
            // value any real candidate can beat or tie (ties go to the smaller index).
            // The bits come from `bi` (which is `none` here) rather than a literal: CUDA
            // cannot reinterpret a literal (`reinterpret_cast` of an rvalue does not compile).
            if bi == none {
                bv = f32::reinterpret(bi ^ u32::new(0x007F_FFFF_i64));
            }
            cube_argmax(bv, bi, &mut sv, &mut si);
            let v = sv[0];
            let i = si[0];
            sync_cube();
            if UNIT_POS == 0 {
                if i == none {
                    // A quiet NaN (0x7FC0_0000), from `i`'s bits as above.
                    vals[row * k + out] = f32::reinterpret(i ^ u32::new(0x803F_FFFF_i64));
                    idx[row * k + out] = i32::new(-1);
                } else {
                    vals[row * k + out] = v;
                    idx[row * k + out] = i32::cast_from(i);
                }
            }
            pv = v;
            pi = i;
            first = false;
        }
    }
}

#[cube(launch_unchecked)]
fn rows_count_above_kernel<F: Float>(
    x: &Array<F>,
    counts: &mut Array<i32>,
    rows: usize,
    cols: usize,
    lo: f32,
    hi: f32,
) {
    let row = CUBE_POS;
    if row < rows {
        let mut above_lo = u32::new(0);
        let mut above_hi = u32::new(0);
        let mut j = UNIT_POS as usize;
        loop {
            if j >= cols {
                break;
            }
            let v = f32::cast_from(x[row * cols + j]);
            if v > lo {
                above_lo += 1;
            }
            if v > hi {
                above_hi += 1;
            }
            j += REDUCE_UNITS as usize;
        }
        let mut smem = SharedMemory::<u32>::new(REDUCE_UNITS as usize);
        let a = cube_sum::<u32>(above_lo, &mut smem);
        let b = cube_sum::<u32>(above_hi, &mut smem);
        if UNIT_POS == 0 {
            counts[row * 2] = i32::cast_from(a);
            counts[row * 2 + 1] = i32::cast_from(b);
        }
    }
}

/// `y[r] = sum_c x[r, c]` (FP32 partials).
pub fn launch_sum_rows<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    x: &Handle,
    y: &Handle,
    rows: usize,
    cols: usize,
) -> Result<(), LaunchError> {
    if rows == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let len = extent("rows * cols", &[rows, cols])?;
    let x = Buf::new("x", x, len, b)?;
    let y = Buf::new("y", y, rows, b)?;
    if cols <= NARROW_ROW {
        let (count, dim) = grid_1d(client, rows)?;
        // SAFETY: x holds rows*cols and y rows elements (checked `Buf`s); units past `rows`
        // return and a unit reads only `row * cols + j` with `j < cols`.
        unsafe {
            narrow_sum_rows_kernel::launch_unchecked::<F, R>(
                client,
                count,
                dim,
                x.arg(),
                y.arg(),
                rows,
                cols,
            );
        }
        return Ok(());
    }
    let (count, dim) = row_grid(client, rows)?;
    // SAFETY: x holds rows*cols and y rows elements (checked `Buf`s); cubes past `rows`
    // return and units read only `row * cols + j` with `j < cols`.
    unsafe {
        sum_rows_kernel::launch_unchecked::<F, R>(client, count, dim, x.arg(), y.arg(), rows, cols);
    }
    Ok(())
}

/// `y[c] = sum_r x[r, c]` (FP32 partials).
pub fn launch_sum_cols<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    x: &Handle,
    y: &Handle,
    rows: usize,
    cols: usize,
) -> Result<(), LaunchError> {
    launch_column_sums::<R, F>(client, (x, None, None), y, (rows, cols), false)
}

/// Units the first stage of a column sum aims for: enough to keep a large GPU's memory
/// system busy (an H200 holds about 270 thousand resident units).
const COLUMN_SUM_UNITS: usize = 1 << 18;
/// The fewest rows a part of a column sum has (but for the last part, and inputs shorter
/// than this, which take one part).
const MIN_CHUNK_ROWS: usize = 16;

/// How a column sum over `(rows, cols)` splits its rows: `(parts, rows per part)`, every
/// part but the last full, none empty. One unit per column per part; a short or wide input
/// takes one part.
fn column_parts(rows: usize, cols: usize) -> (usize, usize) {
    let col_units = cols
        .div_ceil(REDUCE_UNITS as usize)
        .saturating_mul(REDUCE_UNITS as usize);
    let wanted = COLUMN_SUM_UNITS.div_ceil(col_units);
    let parts = wanted.min(rows / MIN_CHUNK_ROWS).max(1);
    let chunk = rows.div_ceil(parts).max(1);
    (rows.div_ceil(chunk), chunk)
}

/// `out[c] = sum_r a[r, c] (* b[r, c]) (* scale[r])` over `(rows, cols)`, or `out[c] +=` that
/// when `accumulate` (the norms' parameter gradients). `b` is `(rows, cols)` like `a`,
/// `scale` holds `rows` FP32 values. Deterministic for a shape: the rows are split into
/// fixed parts, each summed in row order, and the parts added in order.
pub fn launch_column_sums<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (a, b, scale): (&Handle, Option<&Handle>, Option<&Handle>),
    out: &Handle,
    (rows, cols): (usize, usize),
    accumulate: bool,
) -> Result<(), LaunchError> {
    if cols == 0 || (rows == 0 && accumulate) {
        return Ok(());
    }
    let e = core::mem::size_of::<F>();
    let len = extent("rows * cols", &[rows, cols])?;
    let a = Buf::new("a", a, len, e)?;
    let out = Buf::new("out", out, cols, e)?;
    let b = b.map(|b| Buf::new("b", b, len, e)).transpose()?;
    let scale = scale.map(|s| Buf::new("scale", s, rows, 4)).transpose()?;
    let (parts, chunk) = if rows == 0 {
        (0, 1)
    } else {
        column_parts(rows, cols)
    };
    // `parts <= rows`, so this fits whenever `rows * cols` does; checked all the same.
    let partials_len = extent("parts * cols", &[parts, cols])?.max(1);
    let partials = client.empty(extent("partials bytes", &[partials_len, 4])?);
    let partials = Buf::new("partials", &partials, partials_len, 4)?;
    if parts > 0 {
        let (count, dim) = grid_layers(client, cols, parts)?;
        // SAFETY: lengths from checked `Buf`s; a unit reads `a` (and `b`) at `r * cols + c`
        // with `r < rows`, `c < cols`, `scale` at `r`, only when given (else `a`'s stand-in
        // of one element, never read through them), and writes `partials` at
        // `p * cols + c` with `p < parts`, inside the `parts * cols` FP32 values allocated.
        unsafe {
            column_partials_kernel::launch_unchecked::<F, R>(
                client,
                count,
                dim,
                a.arg(),
                a.stand_in_for(b.as_ref()).arg(),
                a.stand_in_for(scale.as_ref()).arg(),
                partials.arg(),
                rows,
                cols,
                chunk,
                b.is_some(),
                scale.is_some(),
            );
        }
    }
    let (count, dim) = grid_1d(client, cols)?;
    // SAFETY: units past `cols` return; the others read `partials` at `p * cols + c` with
    // `p < parts` (none when `parts == 0`) and write `out[c]`, `c < cols` (checked `Buf`s).
    unsafe {
        column_finish_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            partials.arg(),
            out.arg(),
            parts,
            cols,
            accumulate,
        );
    }
    Ok(())
}

/// `idx[r]` = the first index of the row's largest element (NaN never chosen; 0 when none
/// exceeds `-f32::MAX`), stored as `O` (i32, or f32 holding the index).
pub fn launch_argmax_rows<R: Runtime, F: Float + CubeElement, O: Numeric + CubeElement>(
    client: &ComputeClient<R>,
    x: &Handle,
    idx: &Handle,
    rows: usize,
    cols: usize,
) -> Result<(), LaunchError> {
    if rows == 0 {
        return Ok(());
    }
    let len = extent("rows * cols", &[rows, cols])?;
    let x = Buf::new("x", x, len, core::mem::size_of::<F>())?;
    let idx = Buf::new("idx", idx, rows, core::mem::size_of::<O>())?;
    let (count, dim) = row_grid(client, rows)?;
    // SAFETY: as in `launch_sum_rows`.
    unsafe {
        argmax_rows_kernel::launch_unchecked::<F, O, R>(
            client,
            count,
            dim,
            x.arg(),
            idx.arg(),
            rows,
            cols,
        );
    }
    Ok(())
}

/// The `k` largest of each FP32 row, descending, ties to the smaller index.
pub fn launch_top_k_rows<R: Runtime>(
    client: &ComputeClient<R>,
    x: &Handle,
    vals: &Handle,
    idx: &Handle,
    (rows, cols, k): (usize, usize, usize),
) -> Result<(), LaunchError> {
    if rows == 0 || k == 0 {
        return Ok(());
    }
    let len = extent("rows * cols", &[rows, cols])?;
    let picked = extent("rows * k", &[rows, k])?;
    let x = Buf::new("x", x, len, 4)?;
    let vals = Buf::new("vals", vals, picked, 4)?;
    let idx = Buf::new("idx", idx, picked, 4)?;
    let (count, dim) = row_grid(client, rows)?;
    // SAFETY: as in `launch_sum_rows`; writes go to `row * k + out` with `out < k`.
    unsafe {
        top_k_rows_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            x.arg(),
            vals.arg(),
            idx.arg(),
            rows,
            cols,
            k,
        );
    }
    Ok(())
}

/// `counts[r] = (#{x > lo}, #{x > hi})` as two i32 per row.
pub fn launch_rows_count_above<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    x: &Handle,
    counts: &Handle,
    (rows, cols): (usize, usize),
    (lo, hi): (f32, f32),
) -> Result<(), LaunchError> {
    if rows == 0 {
        return Ok(());
    }
    let len = extent("rows * cols", &[rows, cols])?;
    let pairs = extent("rows * 2", &[rows, 2])?;
    let x = Buf::new("x", x, len, core::mem::size_of::<F>())?;
    let counts = Buf::new("counts", counts, pairs, 4)?;
    let (count, dim) = row_grid(client, rows)?;
    // SAFETY: as in `launch_sum_rows`.
    unsafe {
        rows_count_above_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            counts.arg(),
            rows,
            cols,
            lo,
            hi,
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
    let reduce = || L::settings(CubeDim::new_1d(REDUCE_UNITS));
    for_floats!(|F| {
        l.lower(sum_rows_kernel::SumRowsKernel::<F, Rt>::new(
            reduce(),
            c.clone(),
            a(),
            a(),
            (),
            (),
        ));
        l.lower(narrow_sum_rows_kernel::NarrowSumRowsKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            (),
            (),
        ));
        for with_b in [false, true] {
            for with_scale in [false, true] {
                l.lower(column_partials_kernel::ColumnPartialsKernel::<F, Rt>::new(
                    L::settings_1d(),
                    c.clone(),
                    a(),
                    a(),
                    a(),
                    a(),
                    (),
                    (),
                    (),
                    with_b,
                    with_scale,
                ));
            }
        }
        for accumulate in [false, true] {
            l.lower(column_finish_kernel::ColumnFinishKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                (),
                (),
                accumulate,
            ));
        }
        l.lower(argmax_rows_kernel::ArgmaxRowsKernel::<F, i32, Rt>::new(
            reduce(),
            c.clone(),
            a(),
            a(),
            (),
            (),
        ));
        l.lower(argmax_rows_kernel::ArgmaxRowsKernel::<F, f32, Rt>::new(
            reduce(),
            c.clone(),
            a(),
            a(),
            (),
            (),
        ));
        l.lower(rows_count_above_kernel::RowsCountAboveKernel::<F, Rt>::new(
            reduce(),
            c.clone(),
            a(),
            a(),
            (),
            (),
            (),
            (),
        ));
    });
    l.lower(top_k_rows_kernel::TopKRowsKernel::<Rt>::new(
        reduce(),
        c,
        a(),
        a(),
        a(),
        (),
        (),
        (),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_parts_cover_every_row_once() {
        for rows in (1..200).chain([4095, 4096, 65_537, 262_144, 1 << 22]) {
            for cols in [1, 3, 64, 255, 256, 4096, 1 << 20] {
                let (parts, chunk) = column_parts(rows, cols);
                assert!(parts >= 1 && chunk >= 1, "{rows}x{cols}");
                assert!((parts - 1) * chunk < rows, "{rows}x{cols}: an empty part");
                assert!(parts * chunk >= rows, "{rows}x{cols}: rows left over");
                assert!(
                    chunk >= MIN_CHUNK_ROWS.min(rows),
                    "{rows}x{cols}: chunk {chunk}"
                );
                let units = parts * cols.div_ceil(256) * 256;
                assert!(
                    parts == 1 || units <= 2 * COLUMN_SUM_UNITS,
                    "{rows}x{cols}: {units} units"
                );
            }
        }
    }
}
