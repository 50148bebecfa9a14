//! Kernels of the embedding category: embedding lookups and row gathers/scatters.
//!
//! Rows are moved as raw bits, addressed as 32-bit words (WGSL has no 8- or 16-bit storage
//! type), so one kernel serves every element width: a word holds `pack` elements (1 for
//! 32-bit, 2 for 16-bit, 4 for 8-bit; 64-bit elements are moved as two 32-bit ones by the
//! caller). Element `k` of a word is its `k`-th lowest `32 / pack` bits.
//!
//! Every kernel guards every index it reads: an id outside `[0, rows)` gathers zeros and
//! scatters nothing. The ops refuse such ids before launching (see
//! [`launch_count_bad_ids`]), so the guards only keep a bad buffer from reading or writing
//! out of bounds.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::concat::element;
use crate::launch::{extent, fits_u32, grid_1d, Buf, LaunchError};
use crate::primitives::{cube_sum, REDUCE_UNITS};

/// Ids each unit of the id check visits at most (a cube covers `REDUCE_UNITS` times that),
/// well under the software Vulkan device's 65535-iteration loop limit.
const IDS_PER_UNIT: usize = 4096;

/// Ids one launch of [`scatter_add_rows_kernel`] walks: the software Vulkan device ends a
/// kernel's loop after 65535 iterations in all (nested loops included), so longer walks
/// are split into launches, which run in order.
const WALK_CHUNK: usize = 32768;

/// `partial[cube] = #{i in the cube's ids : ids[i] < 0 or ids[i] >= rows}`.
#[cube(launch_unchecked)]
fn count_bad_ids_kernel(ids: &Array<i32>, partial: &mut Array<u32>, n: u32, rows: u32) {
    let cube = u32::cast_from(CUBE_POS);
    let per_cube = comptime!((REDUCE_UNITS as usize * IDS_PER_UNIT) as u32);
    let start = cube * per_cube;
    let end = n.min(start + per_cube);
    let mut bad = 0u32;
    let mut i = start + UNIT_POS;
    loop {
        if i >= end {
            break;
        }
        let id = ids[i as usize];
        if id < 0 || u32::cast_from(id) >= rows {
            bad += 1;
        }
        i += REDUCE_UNITS;
    }
    let mut smem = SharedMemory::<u32>::new(REDUCE_UNITS as usize);
    let total = cube_sum::<u32>(bad, &mut smem);
    if UNIT_POS == 0 && (cube as usize) < partial.len() {
        partial[cube as usize] = total;
    }
}

/// `out[m, c] = src[ids[m], c]` (zero where `ids[m]` is outside `[0, rows)`); one unit per
/// output word.
#[cube(launch_unchecked)]
fn gather_rows_kernel(
    src: &Array<u32>,
    ids: &Array<i32>,
    out: &mut Array<u32>,
    rows: u32,
    cols: u32,
    numel: u32,
    #[comptime] pack: u32,
) {
    let w = ABSOLUTE_POS;
    if w < out.len() {
        let bits = comptime!(32 / pack);
        let mut word = 0u32;
        #[unroll]
        for k in 0..pack {
            let e = u32::cast_from(w) * pack + k;
            if e < numel {
                let m = e / cols;
                let id = ids[m as usize];
                if id >= 0 && u32::cast_from(id) < rows {
                    let v = element(src, u32::cast_from(id) * cols + e % cols, pack);
                    word |= v << (k * bits);
                }
            }
        }
        out[w] = word;
    }
}

/// `dst[ids[m], c] = src[m, c]` for the rows with `ids[m] % classes == class` (ids outside
/// `[0, rows)` are skipped). One unit per (source row, word of its destination window); a
/// word shared with a neighbouring row keeps that row's elements, and the launch only ever
/// writes rows `classes` apart, so no two units of a launch share a word (unique ids).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn scatter_rows_kernel(
    src: &Array<u32>,
    ids: &Array<i32>,
    dst: &mut Array<u32>,
    rows: u32,
    cols: u32,
    window: u32,
    class: u32,
    classes: u32,
    #[comptime] pack: u32,
) {
    let u = u32::cast_from(ABSOLUTE_POS);
    let m = u / window;
    if m < u32::cast_from(ids.len()) {
        let id = ids[m as usize];
        if id >= 0 && u32::cast_from(id) < rows && u32::cast_from(id) % classes == class {
            let first = u32::cast_from(id) * cols;
            let last = first + cols - 1;
            let at = first / pack + u % window;
            if at * pack <= last {
                if comptime!(pack == 1) {
                    dst[at as usize] = src[(m * cols + at - first) as usize];
                } else {
                    let bits = comptime!(32 / pack);
                    let mask = comptime!(u32::MAX >> (32 - 32 / pack));
                    let mut word = dst[at as usize];
                    #[unroll]
                    for k in 0..pack {
                        let e = at * pack + k;
                        if e >= first && e <= last {
                            let v = element(src, m * cols + e - first, pack);
                            word = (word & !(mask << (k * bits))) | (v << (k * bits));
                        }
                    }
                    dst[at as usize] = word;
                }
            }
        }
    }
}

/// `dst[ids[m], c] += src[m, c]` for `m` in `[from, to)` in order (ids outside `[0, rows)`
/// skipped); one unit per column walks the ids, so repeated ids add up with no race and in
/// a fixed order. FP32.
#[cube(launch_unchecked)]
fn scatter_add_rows_kernel(
    src: &Array<f32>,
    ids: &Array<i32>,
    dst: &mut Array<f32>,
    rows: u32,
    cols: u32,
    from: u32,
    to: u32,
) {
    let c = u32::cast_from(ABSOLUTE_POS);
    if c < cols {
        let mut m = from;
        loop {
            if m >= to {
                break;
            }
            let id = ids[m as usize];
            if id >= 0 && u32::cast_from(id) < rows {
                let at = (u32::cast_from(id) * cols + c) as usize;
                dst[at] += src[(m * cols + c) as usize];
            }
            m += 1;
        }
    }
}

/// Elements per 32-bit word for elements of `elem_bytes` bytes (1, 2 or 4).
fn pack_of(elem_bytes: usize) -> Result<u32, LaunchError> {
    match elem_bytes {
        1 => Ok(4),
        2 => Ok(2),
        4 => Ok(1),
        _ => Err(LaunchError::Overflow {
            what: "element width (1, 2 or 4 bytes)",
        }),
    }
}

/// Queues the id check of `n` I32 ids against `[0, rows)` and returns a buffer of `u32`
/// partial counts of bad ids and how many there are (one per 1 Mi ids: a single 4-byte
/// read for up to 1 Mi ids). The caller reads it back and sums (the read is the one sync
/// the check costs).
pub fn launch_count_bad_ids<R: Runtime>(
    client: &ComputeClient<R>,
    ids: &Handle,
    n: usize,
    rows: usize,
) -> Result<(Handle, usize), LaunchError> {
    let n32 = fits_u32("ids (must fit in 32 bits)", n)?;
    let ids = Buf::new("ids", ids, n, 4)?;
    let cubes = n.div_ceil(REDUCE_UNITS as usize * IDS_PER_UNIT).max(1);
    let partial = client.empty(cubes * 4);
    let partial_buf = Buf::new("partial", &partial, cubes, 4)?;
    // Rows beyond u32::MAX accept every non-negative id, as the exact count would.
    let rows = u32::try_from(rows).unwrap_or(u32::MAX);
    let (count, _) = grid_1d(client, cubes * REDUCE_UNITS as usize)?;
    // SAFETY: `ids` holds `n` ids (a checked `Buf`, given with a length of at least one) and
    // units read ids below `n` only; cube `b` writes `partial[b]` only when `b < cubes`
    // (the kernel's guard: a folded grid may have a few more cubes, which read nothing and
    // write nothing).
    unsafe {
        count_bad_ids_kernel::launch_unchecked::<R>(
            client,
            count,
            CubeDim::new_1d(REDUCE_UNITS),
            ids.nonempty().arg(),
            partial_buf.arg(),
            n32,
            rows,
        );
    }
    Ok((partial, cubes))
}

/// `out (m, cols) = src[ids[m], :]` over a `(rows, cols)` source, rows of `elem_bytes`-byte
/// elements (1, 2 or 4) moved as bits; `m = ids` length. An id outside `[0, rows)` gives a
/// zero row.
///
/// Errors (no launch) on another element width, sizes past 32 bits, or buffers too small.
pub fn launch_gather_rows<R: Runtime>(
    client: &ComputeClient<R>,
    src: &Handle,
    ids: &Handle,
    out: &Handle,
    (rows, cols, m): (usize, usize, usize),
    elem_bytes: usize,
) -> Result<(), LaunchError> {
    let pack = pack_of(elem_bytes)?;
    let numel = extent("m * cols", &[m, cols])?;
    if numel == 0 {
        return Ok(());
    }
    let src_len = extent("rows * cols", &[rows, cols])?;
    fits_u32("rows * cols (must fit in 32 bits)", src_len)?;
    let numel32 = fits_u32("m * cols (must fit in 32 bits)", numel)?;
    let (src_words, out_words) = (
        src_len.div_ceil(pack as usize),
        numel.div_ceil(pack as usize),
    );
    let src = Buf::new("src", src, src_words, 4)?;
    let ids = Buf::new("ids", ids, m, 4)?;
    let out = Buf::new("out", out, out_words, 4)?;
    let (count, dim) = grid_1d(client, out_words)?;
    // SAFETY: unit `w < out_words` writes word `w` of `out` (a checked `Buf` holding them);
    // it reads `ids[e / cols]` with `e < m cols`, so below `m` (checked), and source element
    // `id cols + c < rows cols` only for `0 <= id < rows` (the kernel's guard), whose word
    // is below `src_words` (checked; given with a length of at least one, none read when
    // empty).
    unsafe {
        gather_rows_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            src.nonempty().arg(),
            ids.arg(),
            out.arg(),
            rows as u32,
            cols as u32,
            numel32,
            pack,
        );
    }
    Ok(())
}

/// `dst[ids[i], :] = src[i, :]` into a `(rows, cols)` destination, for `src (m, cols)`; rows
/// of `elem_bytes`-byte elements (1, 2 or 4) moved as bits; the other rows keep their
/// contents. Ids outside `[0, rows)` are skipped; repeated ids leave one of their rows (which
/// one is not defined). Rows that do not fill whole words go in `pack` launches, one per
/// residue of the row index, so that no two units share a word.
///
/// Errors (no launch) on another element width, sizes past 32 bits, or buffers too small.
pub fn launch_scatter_rows<R: Runtime>(
    client: &ComputeClient<R>,
    src: &Handle,
    ids: &Handle,
    dst: &Handle,
    (rows, cols, m): (usize, usize, usize),
    elem_bytes: usize,
) -> Result<(), LaunchError> {
    let pack = pack_of(elem_bytes)? as usize;
    if extent("m * cols * rows", &[m, cols, rows])? == 0 {
        return Ok(());
    }
    let dst_len = extent("rows * cols", &[rows, cols])?;
    let src_len = extent("m * cols", &[m, cols])?;
    fits_u32("rows * cols (must fit in 32 bits)", dst_len)?;
    fits_u32("m * cols (must fit in 32 bits)", src_len)?;
    let src = Buf::new("src", src, src_len.div_ceil(pack), 4)?;
    let ids = Buf::new("ids", ids, m, 4)?;
    let dst = Buf::new("dst", dst, dst_len.div_ceil(pack), 4)?;
    // Words a row of `cols` elements can touch, and whether rows share words.
    let aligned = cols.is_multiple_of(pack);
    let window = if aligned {
        cols / pack
    } else {
        cols / pack + 2
    };
    let units = extent("m * window", &[m, window])?;
    fits_u32("m * window (must fit in 32 bits)", units)?;
    let classes = if aligned { 1 } else { pack };
    let (count, dim) = grid_1d(client, units)?;
    for class in 0..classes {
        // SAFETY: a unit reads `ids[m]` for `m < ids.len() = m` and, for `0 <= id < rows`
        // only, writes a word of destination row `id` (elements `id cols .. id cols + cols`,
        // below `rows cols`, whose words `dst` holds: a checked `Buf`) and reads source
        // elements `m cols + j < m cols` (a checked `Buf`).
        unsafe {
            scatter_rows_kernel::launch_unchecked::<R>(
                client,
                count.clone(),
                dim,
                src.arg(),
                ids.arg(),
                dst.arg(),
                rows as u32,
                cols as u32,
                window as u32,
                class as u32,
                classes as u32,
                pack as u32,
            );
        }
    }
    Ok(())
}

/// `dst[ids[i], :] += src[i, :]` in FP32 into a `(rows, cols)` destination, for
/// `src (m, cols)`, ids in order (repeated ids add up deterministically; ids outside
/// `[0, rows)` are skipped). One launch per `WALK_CHUNK` ids.
///
/// Errors (no launch) on sizes past 32 bits or buffers too small.
pub fn launch_scatter_add_rows<R: Runtime>(
    client: &ComputeClient<R>,
    src: &Handle,
    ids: &Handle,
    dst: &Handle,
    (rows, cols, m): (usize, usize, usize),
) -> Result<(), LaunchError> {
    if extent("m * cols * rows", &[m, cols, rows])? == 0 {
        return Ok(());
    }
    let dst_len = extent("rows * cols", &[rows, cols])?;
    let src_len = extent("m * cols", &[m, cols])?;
    fits_u32("rows * cols (must fit in 32 bits)", dst_len)?;
    fits_u32("m * cols (must fit in 32 bits)", src_len)?;
    let src = Buf::new("src", src, src_len, 4)?;
    let ids = Buf::new("ids", ids, m, 4)?;
    let dst = Buf::new("dst", dst, dst_len, 4)?;
    let (count, dim) = grid_1d(client, cols)?;
    for from in (0..m).step_by(WALK_CHUNK) {
        let to = m.min(from + WALK_CHUNK);
        // SAFETY: unit `c < cols` reads `ids[from..to]` with `to <= m` (a checked `Buf`),
        // `src[i cols + c]` below `m cols` (a checked `Buf`) and writes `dst[id cols + c]`
        // below `rows cols` (a checked `Buf`) only for `0 <= id < rows`.
        unsafe {
            scatter_add_rows_kernel::launch_unchecked::<R>(
                client,
                count.clone(),
                dim,
                src.arg(),
                ids.arg(),
                dst.arg(),
                rows as u32,
                cols as u32,
                from as u32,
                to as u32,
            );
        }
    }
    Ok(())
}

/// Every kernel of this file, in every specialisation the library launches, lowered to CUDA
/// C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::Lowering as L;
    use crate::cuda_lowering::Rt;
    let c = l.client.clone();
    let a = L::array;
    l.lower(count_bad_ids_kernel::CountBadIdsKernel::<Rt>::new(
        L::settings(CubeDim::new_1d(REDUCE_UNITS)),
        c.clone(),
        a(),
        a(),
        (),
        (),
    ));
    for pack in [1u32, 2, 4] {
        l.lower(gather_rows_kernel::GatherRowsKernel::<Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            a(),
            (),
            (),
            (),
            pack,
        ));
        l.lower(scatter_rows_kernel::ScatterRowsKernel::<Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            a(),
            (),
            (),
            (),
            (),
            (),
            pack,
        ));
    }
    l.lower(scatter_add_rows_kernel::ScatterAddRowsKernel::<Rt>::new(
        L::settings_1d(),
        c.clone(),
        a(),
        a(),
        a(),
        (),
        (),
        (),
        (),
    ));
}
