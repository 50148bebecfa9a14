//! Structural kernels: whole elements moved as `words` 32-bit words each (1 for 32-bit
//! dtypes, 2 for 64-bit ones and C64, 4 for C128), so one kernel serves every dtype, and a
//! scatter-add that does arithmetic.
//!
//! Each kernel decomposes the row-major index of the element it writes (or, for the
//! scatter, reads) with run-time dims and multiplies by run-time strides: stride-0
//! broadcasts and any view are fine, and a new shape never compiles a new kernel.

use cubecl::prelude::*;
use cubecl::server::Handle;

use super::MAX_INDEX_RANK;
use crate::launch::{extent, fits_u32, grid_1d, Buf, LaunchError};
use crate::strided::source_index;

/// Copies element `from` of `src` into element `to` of `out`, `words` words each.
#[cube]
fn move_element(
    src: &Array<u32>,
    from: u32,
    out: &mut Array<u32>,
    to: u32,
    #[comptime] words: u32,
) {
    #[unroll]
    for w in 0..words {
        out[(to * words + w) as usize] = src[(from * words + w) as usize];
    }
}

/// Zeroes element `to` of `out`, `words` words.
#[cube]
fn zero_element(out: &mut Array<u32>, to: u32, #[comptime] words: u32) {
    #[unroll]
    for w in 0..words {
        out[(to * words + w) as usize] = 0u32;
    }
}

/// Pad: `meta` holds, per dim, `out_dim, skip, phase, step, limit, base, in_stride` (7
/// words). Output coordinate `c` of a dim reads input coordinate
/// `base + (c - skip + phase) / step` when `c >= skip`, `c - skip <= limit` and
/// `(c - skip + phase) % step == 0`; any other output element is 0.
#[cube(launch_unchecked)]
#[allow(clippy::manual_is_multiple_of)] // `is_multiple_of` has no #[cube] expansion
fn pad_kernel(
    src: &Array<u32>,
    out: &mut Array<u32>,
    meta: &Array<u32>,
    numel: u32,
    #[comptime] rank: usize,
    #[comptime] words: u32,
) {
    let e = u32::cast_from(ABSOLUTE_POS);
    if e < numel {
        let mut rest = e;
        let mut from = 0u32;
        let mut inside = true;
        #[unroll]
        for i in 0..rank {
            let d = rank - 1 - i;
            let m = d * 7;
            let c = rest % meta[m];
            rest /= meta[m];
            let skip = meta[m + 1];
            let step = meta[m + 3];
            if c < skip {
                inside = false;
            } else {
                let t = c - skip;
                let phased = t % step + meta[m + 2];
                if t > meta[m + 4] || phased % step != 0 {
                    inside = false;
                } else {
                    from += (meta[m + 5] + t / step + phased / step) * meta[m + 6];
                }
            }
        }
        if inside {
            move_element(src, from, out, e, words);
        } else {
            zero_element(out, e, words);
        }
    }
}

/// Place: element `e` of the dense `src` goes to `out` at `offset + sum(c_d * stride_d)`
/// for its row-major coordinates `c` over `dims` (`meta`: offset, dims, strides).
#[cube(launch_unchecked)]
fn place_kernel(
    src: &Array<u32>,
    out: &mut Array<u32>,
    meta: &Array<u32>,
    numel: u32,
    #[comptime] rank: usize,
    #[comptime] words: u32,
) {
    let e = u32::cast_from(ABSOLUTE_POS);
    if e < numel {
        // The strided gather's index map, used the other way round.
        move_element(src, e, out, source_index(e, meta, rank), words);
    }
}

/// Triangle mask over the last two dims (`meta`: rows, cols, shifted `k` = `k + rows`):
/// element `(r, c)` is kept where `c + rows <= r + shifted` (lower) or
/// `c + rows >= r + shifted` (upper), else zeroed.
#[cube(launch_unchecked)]
fn triangle_kernel(
    src: &Array<u32>,
    out: &mut Array<u32>,
    meta: &Array<u32>,
    numel: u32,
    #[comptime] lower: bool,
    #[comptime] words: u32,
) {
    let e = u32::cast_from(ABSOLUTE_POS);
    if e < numel {
        let rows = meta[0];
        let cols = meta[1];
        let c = e % cols;
        let r = (e / cols) % rows;
        let mut keep = c + rows >= r + meta[2];
        if comptime!(lower) {
            keep = c + rows <= r + meta[2];
        }
        if keep {
            move_element(src, e, out, e, words);
        } else {
            zero_element(out, e, words);
        }
    }
}

/// Gather: output element `e` with row-major coordinates `c` over `dims` reads element
/// `bases[sum(c_d * batch_stride_d)] + sum(c_d * window_stride_d)` of `src` (`meta`: dims,
/// batch strides, window strides).
#[cube(launch_unchecked)]
fn gather_kernel(
    src: &Array<u32>,
    bases: &Array<u32>,
    out: &mut Array<u32>,
    meta: &Array<u32>,
    numel: u32,
    #[comptime] rank: usize,
    #[comptime] words: u32,
) {
    let e = u32::cast_from(ABSOLUTE_POS);
    if e < numel {
        let mut rest = e;
        let mut batch = 0u32;
        let mut window = 0u32;
        #[unroll]
        for i in 0..rank {
            let d = rank - 1 - i;
            let c = rest % meta[d];
            rest /= meta[d];
            batch += c * meta[rank + d];
            window += c * meta[2 * rank + d];
        }
        move_element(src, bases[batch as usize] + window, out, e, words);
    }
}

/// The destination of update element `e`: `bases[batch] + window`, or `None`-like
/// `u32::MAX` when its batch entry is skipped.
#[cube]
fn scatter_target(e: u32, bases: &Array<u32>, meta: &Array<u32>, #[comptime] rank: usize) -> u32 {
    let mut rest = e;
    let mut batch = 0u32;
    let mut window = 0u32;
    #[unroll]
    for i in 0..rank {
        let d = rank - 1 - i;
        let c = rest % meta[d];
        rest /= meta[d];
        batch += c * meta[rank + d];
        window += c * meta[2 * rank + d];
    }
    let base = bases[batch as usize];
    let mut to = 4294967295u32;
    if base != 4294967295u32 {
        to = base + window;
    }
    to
}

/// Scatter-add with atomics: update element `e` is added to `out[target(e)]` (see
/// [`scatter_target`]; `meta` as for the gather, over the updates' dims).
#[cube(launch_unchecked)]
fn scatter_add_atomic_kernel<T: Numeric>(
    updates: &Array<T>,
    bases: &Array<u32>,
    out: &mut Array<Atomic<T>>,
    meta: &Array<u32>,
    numel: u32,
    #[comptime] rank: usize,
) {
    let e = u32::cast_from(ABSOLUTE_POS);
    if e < numel {
        let to = scatter_target(e, bases, meta, rank);
        if to != 4294967295u32 {
            out[to as usize].fetch_add(updates[e as usize]);
        }
    }
}

/// Scatter-add without atomics: correct when no two update elements of one launch share a
/// target (the caller splits overlapping batch entries into separate launches).
#[cube(launch_unchecked)]
fn scatter_add_plain_kernel<T: Numeric>(
    updates: &Array<T>,
    bases: &Array<u32>,
    out: &mut Array<T>,
    meta: &Array<u32>,
    numel: u32,
    #[comptime] rank: usize,
) {
    let e = u32::cast_from(ABSOLUTE_POS);
    if e < numel {
        let to = scatter_target(e, bases, meta, rank);
        if to != 4294967295u32 {
            out[to as usize] = out[to as usize] + updates[e as usize];
        }
    }
}

/// The checked common arguments of a structural launch: the rank, the words per element
/// (1, 2 or 4), and the element count in 32 bits.
fn check_shape(rank: usize, words: usize, numel: usize) -> Result<u32, LaunchError> {
    if rank > MAX_INDEX_RANK {
        return Err(LaunchError::Invalid {
            what: "rank (at most 9)",
        });
    }
    if !matches!(words, 1 | 2 | 4) {
        return Err(LaunchError::Invalid {
            what: "words per element (1, 2 or 4)",
        });
    }
    extent("words", &[numel, words]).and_then(|w| fits_u32("words (must fit in 32 bits)", w))?;
    Ok(numel as u32)
}

/// One dim of a pad, as the host has resolved it: see [`launch_pad`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PadDim {
    /// The output dim.
    pub out_dim: usize,
    /// Leading output positions that are padding.
    pub skip: usize,
    /// `(position - skip + phase) % step == 0` marks input positions.
    pub phase: usize,
    /// `interior + 1`.
    pub step: usize,
    /// The largest `position - skip` that can hold an input element.
    pub limit: usize,
    /// The input coordinate at `position == skip` (rounded down).
    pub base: usize,
    /// The input's row-major stride of this dim.
    pub in_stride: usize,
}

/// Pads `src` (dense, `src_elems` elements) into `out` (dense over the `dims`' `out_dim`s),
/// zeros outside the input, `words` words per element.
///
/// Errors (no launch) on a rank above 9, a bad word count, a buffer too short, a value that
/// needs more than 32 bits, or a layout that reaches outside `src`.
pub fn launch_pad<R: Runtime>(
    client: &ComputeClient<R>,
    src: &Handle,
    src_elems: usize,
    dims: &[PadDim],
    words: usize,
    out: &Handle,
) -> Result<(), LaunchError> {
    let out_dims: Vec<usize> = dims.iter().map(|d| d.out_dim).collect();
    let numel = extent("output", &out_dims)?;
    let n = check_shape(dims.len(), words, numel)?;
    check_shape(dims.len(), words, src_elems)?;
    let src = Buf::new("src", src, src_elems * words, 4)?;
    let out = Buf::new("out", out, numel * words, 4)?;
    if numel == 0 {
        return Ok(());
    }
    // Every input coordinate the kernel can form is below the input dim (the host resolved
    // `limit` that way); check the farthest element against `src`.
    let mut reach = 0usize;
    let mut meta = Vec::with_capacity(7 * dims.len());
    for d in dims {
        let phased_max = d
            .step
            .checked_mul(2)
            .ok_or(LaunchError::Overflow { what: "pad step" })?;
        fits_u32("pad step", phased_max)?;
        if d.skip < d.out_dim {
            let last = (d.limit.min(d.out_dim - 1 - d.skip) + d.phase) / d.step + d.base;
            reach = reach
                .checked_add(
                    last.checked_mul(d.in_stride)
                        .ok_or(LaunchError::Overflow { what: "pad reach" })?,
                )
                .ok_or(LaunchError::Overflow { what: "pad reach" })?;
        }
        for v in [
            d.out_dim,
            d.skip,
            d.phase,
            d.step,
            d.limit,
            d.base,
            d.in_stride,
        ] {
            meta.push(fits_u32("pad metadata", v)?);
        }
    }
    if dims.iter().all(|d| d.skip < d.out_dim) && reach >= src_elems {
        return Err(LaunchError::Invalid {
            what: "pad layout (reaches outside the source)",
        });
    }
    let meta = Buf::upload(client, &meta);
    let (count, dim) = grid_1d(client, numel)?;
    // SAFETY: unit `e < numel` writes element `e` of `out` (`numel` elements, a checked
    // `Buf`); the element it reads is at most `reach < src_elems` (checked, and `src`'s
    // checked `Buf` holds `src_elems`); `meta` holds `7 rank` words.
    unsafe {
        pad_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            src.arg(),
            out.arg(),
            meta.arg(),
            n,
            dims.len(),
            words as u32,
        );
    }
    Ok(())
}

/// The largest element index `offset + sum((dims_d - 1) strides_d)` of a non-empty layout.
fn layout_reach(offset: usize, dims: &[usize], strides: &[usize]) -> Result<usize, LaunchError> {
    let overflow = LaunchError::Overflow {
        what: "layout reach",
    };
    dims.iter()
        .zip(strides)
        .try_fold(offset, |acc, (&n, &s)| {
            acc.checked_add(n.saturating_sub(1).checked_mul(s)?)
        })
        .ok_or(overflow)
}

/// Writes the dense `src` (row-major over `dims`) into `out` at `offset + sum(c_d
/// strides_d)`, `words` words per element. Element positions must not repeat (a strided
/// region of a tensor, the diagonal of a square block).
///
/// Errors (no launch) on a rank above 9, a bad word count, a buffer too short, a value that
/// needs more than 32 bits, or a layout reaching outside `out`.
#[allow(clippy::too_many_arguments)]
pub fn launch_place<R: Runtime>(
    client: &ComputeClient<R>,
    src: &Handle,
    dims: &[usize],
    strides: &[usize],
    offset: usize,
    words: usize,
    out: &Handle,
    out_elems: usize,
) -> Result<(), LaunchError> {
    if strides.len() != dims.len() {
        return Err(LaunchError::Invalid {
            what: "strides (one per dim)",
        });
    }
    let numel = extent("source", dims)?;
    let n = check_shape(dims.len(), words, numel)?;
    check_shape(dims.len(), words, out_elems)?;
    let src = Buf::new("src", src, numel * words, 4)?;
    let out = Buf::new("out", out, out_elems * words, 4)?;
    if numel == 0 {
        return Ok(());
    }
    if layout_reach(offset, dims, strides)? >= out_elems {
        return Err(LaunchError::Invalid {
            what: "placement (reaches outside the destination)",
        });
    }
    let mut meta = vec![offset as u32];
    meta.extend(dims.iter().map(|&d| d as u32));
    meta.extend(strides.iter().map(|&s| s as u32));
    let meta = Buf::upload(client, &meta);
    let (count, dim) = grid_1d(client, numel)?;
    // SAFETY: unit `e < numel` reads element `e` of `src` (`numel` elements, a checked
    // `Buf`) and writes the element its coordinates reach, at most `layout_reach <
    // out_elems` (checked, with the 32-bit bound on `out_elems words`; `out`'s checked `Buf`
    // holds `out_elems`); `meta` holds `1 + 2 rank` words.
    unsafe {
        place_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            src.arg(),
            out.arg(),
            meta.arg(),
            n,
            dims.len(),
            words as u32,
        );
    }
    Ok(())
}

/// Keeps the lower (`lower`) or upper triangle of every `rows x cols` matrix of `src`
/// (`numel` elements) relative to diagonal `k` (clamped by the caller to `[-rows, cols]`),
/// zeroing the rest, into `out`.
///
/// Errors (no launch) on a bad word count, a buffer too short, zero rows or cols with
/// elements, or values needing more than 32 bits.
#[allow(clippy::too_many_arguments)]
pub fn launch_triangle<R: Runtime>(
    client: &ComputeClient<R>,
    src: &Handle,
    (rows, cols): (usize, usize),
    k: i64,
    lower: bool,
    words: usize,
    out: &Handle,
    numel: usize,
) -> Result<(), LaunchError> {
    let n = check_shape(1, words, numel)?;
    let src = Buf::new("src", src, numel * words, 4)?;
    let out = Buf::new("out", out, numel * words, 4)?;
    if numel == 0 {
        return Ok(());
    }
    let matrix = extent("matrix", &[rows, cols])?;
    if matrix == 0 || !numel.is_multiple_of(matrix) {
        return Err(LaunchError::Invalid {
            what: "matrix dims (rows x cols must divide the element count)",
        });
    }
    let shifted = k.clamp(-(rows as i64), cols as i64) + rows as i64;
    // `c + rows` and `r + shifted` stay below `cols + rows + rows`.
    let reach = rows
        .checked_add(rows)
        .and_then(|v| v.checked_add(cols))
        .ok_or(LaunchError::Overflow {
            what: "rows + cols",
        })?;
    fits_u32("rows + cols", reach)?;
    let meta = Buf::upload(client, &[rows as u32, cols as u32, shifted as u32]);
    let (count, dim) = grid_1d(client, numel)?;
    // SAFETY: unit `e < numel` reads and writes element `e` only, and both buffers hold
    // `numel` elements (checked `Buf`s); `meta` holds 3 words.
    unsafe {
        triangle_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            src.arg(),
            out.arg(),
            meta.arg(),
            n,
            lower,
            words as u32,
        );
    }
    Ok(())
}

/// A gather or scatter geometry over the dims the kernel walks (the gather's output, the
/// scatter's updates): per dim, the stride into the base table (0 for window dims) and the
/// stride into the operand (0 for batch dims), and the table of per-batch-entry bases
/// (operand element indices; `u32::MAX` skips an entry in a scatter).
#[derive(Clone, Debug)]
pub struct IndexMap<'a> {
    /// The dims walked.
    pub dims: &'a [usize],
    /// Per dim, the stride into `bases`.
    pub batch_strides: &'a [usize],
    /// Per dim, the stride into the operand, in elements.
    pub window_strides: &'a [usize],
    /// The base of each batch entry (host-computed, clamped or skipped).
    pub bases: &'a [u32],
}

impl IndexMap<'_> {
    /// Checks the map and returns `(numel, largest base index, largest window offset, meta)`.
    fn check(&self) -> Result<(usize, usize, usize, Vec<u32>), LaunchError> {
        let rank = self.dims.len();
        if self.batch_strides.len() != rank || self.window_strides.len() != rank {
            return Err(LaunchError::Invalid {
                what: "index map strides (one per dim)",
            });
        }
        let numel = extent("index map", self.dims)?;
        fits_u32("index map elements", numel)?;
        let batch = layout_reach(0, self.dims, self.batch_strides)?;
        let window = layout_reach(0, self.dims, self.window_strides)?;
        if numel > 0 && batch >= self.bases.len() {
            return Err(LaunchError::Invalid {
                what: "index map (batch strides reach past the base table)",
            });
        }
        let mut meta = Vec::with_capacity(3 * rank);
        for v in self
            .dims
            .iter()
            .chain(self.batch_strides)
            .chain(self.window_strides)
        {
            meta.push(fits_u32("index map metadata", *v)?);
        }
        Ok((numel, batch, window, meta))
    }

    /// The largest operand element any entry reaches (skipped entries excluded).
    fn reach(&self, window: usize) -> Result<Option<usize>, LaunchError> {
        match self.bases.iter().filter(|&&b| b != u32::MAX).max() {
            Some(&b) => (b as usize)
                .checked_add(window)
                .map(Some)
                .ok_or(LaunchError::Overflow {
                    what: "index reach",
                }),
            None => Ok(None),
        }
    }
}

/// Gathers into the dense `out` (row-major over `map.dims`) from `src` (`src_elems`
/// elements of `words` words), element `e` reading `bases[batch(e)] + window(e)`.
///
/// Errors (no launch) on a bad map, a base that is skipped or reaches outside `src`, a
/// buffer too short, or a value needing more than 32 bits.
pub fn launch_gather<R: Runtime>(
    client: &ComputeClient<R>,
    src: &Handle,
    src_elems: usize,
    map: &IndexMap<'_>,
    words: usize,
    out: &Handle,
) -> Result<(), LaunchError> {
    let (numel, _, window, meta) = map.check()?;
    let n = check_shape(map.dims.len(), words, numel)?;
    check_shape(map.dims.len(), words, src_elems)?;
    let src = Buf::new("src", src, src_elems * words, 4)?;
    let out = Buf::new("out", out, numel * words, 4)?;
    if numel == 0 {
        return Ok(());
    }
    if map.bases.contains(&u32::MAX) || map.reach(window)?.is_some_and(|r| r >= src_elems) {
        return Err(LaunchError::Invalid {
            what: "gather bases (must lie inside the operand)",
        });
    }
    let bases = Buf::upload(client, map.bases);
    let meta = Buf::upload(client, &meta);
    let (count, dim) = grid_1d(client, numel)?;
    // SAFETY: unit `e < numel` writes element `e` of `out` (a checked `Buf`); it reads base
    // entry `batch(e) <= batch reach < bases.len()` and operand element `base + window(e)`,
    // at most `max base + window reach < src_elems` (checked; `src`'s checked `Buf` holds
    // `src_elems`); `meta` holds `3 rank` words.
    unsafe {
        gather_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            src.arg(),
            bases.arg(),
            out.arg(),
            meta.arg(),
            n,
            map.dims.len(),
            words as u32,
        );
    }
    Ok(())
}

/// Adds `updates` (row-major over `map.dims`, scalars of `T`) into `out` (`out_elems`
/// scalars): update `e` goes to `bases[batch(e)] + window(e)`, or nowhere when its base is
/// `u32::MAX`. With `atomic`, overlapping targets accumulate (the device must have atomic
/// add for `T`); without, the caller guarantees no two updates share a target.
///
/// Errors (no launch) on a bad map, a target outside `out`, a buffer too short, or a value
/// needing more than 32 bits.
pub fn launch_scatter_add<R: Runtime, T: Numeric + CubeElement>(
    client: &ComputeClient<R>,
    updates: &Handle,
    map: &IndexMap<'_>,
    atomic: bool,
    out: &Handle,
    out_elems: usize,
) -> Result<(), LaunchError> {
    let (numel, _, window, meta) = map.check()?;
    let n = check_shape(map.dims.len(), 1, numel)?;
    fits_u32("operand (must fit in 32 bits)", out_elems)?;
    let bytes = core::mem::size_of::<T>();
    let updates = Buf::new("updates", updates, numel, bytes)?;
    let out = Buf::new("out", out, out_elems, bytes)?;
    if numel == 0 || map.reach(window)?.is_none() {
        return Ok(());
    }
    if map.reach(window)?.is_some_and(|r| r >= out_elems) {
        return Err(LaunchError::Invalid {
            what: "scatter bases (must lie inside the operand)",
        });
    }
    let bases = Buf::upload(client, map.bases);
    let meta = Buf::upload(client, &meta);
    let (count, dim) = grid_1d(client, numel)?;
    let rank = map.dims.len();
    // SAFETY: unit `e < numel` reads update `e` (a checked `Buf`) and base entry `batch(e) <
    // bases.len()`; it writes `out[base + window(e)]` only for a base that is not skipped,
    // at most `max base + window reach < out_elems` (checked; `out`'s checked `Buf` holds
    // `out_elems`); `meta` holds `3 rank` words.
    unsafe {
        if atomic {
            scatter_add_atomic_kernel::launch_unchecked::<T, R>(
                client,
                count,
                dim,
                updates.arg(),
                bases.arg(),
                out.arg(),
                meta.arg(),
                n,
                rank,
            );
        } else {
            scatter_add_plain_kernel::launch_unchecked::<T, R>(
                client,
                count,
                dim,
                updates.arg(),
                bases.arg(),
                out.arg(),
                meta.arg(),
                n,
                rank,
            );
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{Lowering as L, Rt};
    let a = L::array;
    for words in [1u32, 2, 4] {
        for rank in 0..=MAX_INDEX_RANK {
            l.lower(pad_kernel::PadKernel::<Rt>::new(
                L::settings_1d(),
                l.client.clone(),
                a(),
                a(),
                a(),
                (),
                rank,
                words,
            ));
            l.lower(place_kernel::PlaceKernel::<Rt>::new(
                L::settings_1d(),
                l.client.clone(),
                a(),
                a(),
                a(),
                (),
                rank,
                words,
            ));
            l.lower(gather_kernel::GatherKernel::<Rt>::new(
                L::settings_1d(),
                l.client.clone(),
                a(),
                a(),
                a(),
                a(),
                (),
                rank,
                words,
            ));
        }
        for lower in [false, true] {
            l.lower(triangle_kernel::TriangleKernel::<Rt>::new(
                L::settings_1d(),
                l.client.clone(),
                a(),
                a(),
                a(),
                (),
                lower,
                words,
            ));
        }
    }
    for rank in 0..=MAX_INDEX_RANK {
        macro_rules! scatter {
            ($T:ty) => {
                l.lower(
                    scatter_add_atomic_kernel::ScatterAddAtomicKernel::<$T, Rt>::new(
                        L::settings_1d(),
                        l.client.clone(),
                        a(),
                        a(),
                        a(),
                        a(),
                        (),
                        rank,
                    ),
                );
                l.lower(
                    scatter_add_plain_kernel::ScatterAddPlainKernel::<$T, Rt>::new(
                        L::settings_1d(),
                        l.client.clone(),
                        a(),
                        a(),
                        a(),
                        a(),
                        (),
                        rank,
                    ),
                );
            };
        }
        scatter!(f32);
        scatter!(f64);
        scatter!(i64);
    }
}
