//! One strided gather: the elements of any layout (dims, strides and an offset, all run-time
//! values in a small metadata buffer) into a dense row-major buffer. Every view (transpose,
//! permute, stepped or negative slice, broadcast, flip) is a layout, so this one kernel
//! materialises all of them; only the rank and the element width are comptime, so a new
//! shape never compiles a new kernel.
//!
//! Buffers are addressed as 32-bit words (WGSL has no 8- or 16-bit storage type): each unit
//! writes one destination word, gathering the `pack` elements it holds (four bytes, two
//! 16-bit halves, or one word). 64-bit elements are gathered as pairs of words: the caller
//! appends a dim of 2 with stride 1 and doubles the other strides and the offset.
//!
//! Index arithmetic is done in `u32` with wrapping: a negative stride is passed as its two's
//! complement, and since every element's final index is in range (checked on the host),
//! the wrapped partial sums land on it exactly.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::elementwise::{apply_binary, BinaryInstr};
use crate::launch::{fits_u32, grid_1d, Buf, LaunchError};

/// The highest rank the kernel takes: a tensor's 8 dims plus the word pair of a 64-bit
/// element.
pub const MAX_GATHER_RANK: usize = 9;

/// The storage index (in elements) of row-major element `e`. `meta` holds the offset, then
/// `rank` dims, then `rank` strides (two's complement).
#[cube]
pub(crate) fn source_index(e: u32, meta: &Array<u32>, #[comptime] rank: usize) -> u32 {
    let mut rest = e;
    let mut at = meta[0];
    #[unroll]
    for i in 0..rank {
        let d = rank - 1 - i;
        let n = meta[1 + d];
        at += (rest % n) * meta[1 + rank + d];
        rest /= n;
    }
    at
}

#[cube(launch_unchecked)]
fn strided_gather_kernel(
    src: &Array<u32>,
    meta: &Array<u32>,
    out: &mut Array<u32>,
    numel: u32,
    #[comptime] rank: usize,
    #[comptime] pack: u32,
) {
    let w = ABSOLUTE_POS;
    if w < out.len() {
        if comptime!(pack == 1) {
            out[w] = src[source_index(u32::cast_from(w), meta, rank) as usize];
        } else {
            let bits = comptime!(32 / pack);
            let mask = comptime!(u32::MAX >> (32 - 32 / pack));
            let mut word = 0u32;
            #[unroll]
            for j in 0..pack {
                let e = u32::cast_from(w) * pack + j;
                if e < numel {
                    let s = source_index(e, meta, rank);
                    let v = (src[(s / pack) as usize] >> ((s % pack) * bits)) & mask;
                    word |= v << (j * bits);
                }
            }
            out[w] = word;
        }
    }
}

/// A layout for [`launch_strided_gather`]: dims, strides (in elements, negative allowed) and
/// the offset of the first element.
#[derive(Debug, Clone, Copy)]
pub struct GatherLayout<'a> {
    /// The dims (at most [`MAX_GATHER_RANK`]).
    pub dims: &'a [usize],
    /// One stride per dim, in elements.
    pub strides: &'a [isize],
    /// The storage index of element 0.
    pub offset: usize,
}

/// The `(lowest, highest)` element index `layout` reaches, `None` when it is empty, or an
/// overflow error.
fn reach(layout: &GatherLayout<'_>) -> Result<Option<(i64, i64)>, LaunchError> {
    let overflow = LaunchError::Overflow {
        what: "strided layout",
    };
    if layout.dims.contains(&0) {
        return Ok(None);
    }
    let mut lo = i64::try_from(layout.offset).map_err(|_| overflow.clone())?;
    let mut hi = lo;
    for (&n, &s) in layout.dims.iter().zip(layout.strides) {
        let n = i64::try_from(n).map_err(|_| overflow.clone())?;
        let s = i64::try_from(s).map_err(|_| overflow.clone())?;
        let r = (n - 1).checked_mul(s).ok_or(overflow.clone())?;
        if r < 0 {
            lo = lo.checked_add(r).ok_or(overflow.clone())?;
        } else {
            hi = hi.checked_add(r).ok_or(overflow.clone())?;
        }
    }
    Ok(Some((lo, hi)))
}

/// Gathers the elements of `layout` over `src` into `out`, row-major, for elements of
/// `elem_bytes` bytes (1, 2 or 4; 64-bit elements as word pairs, see the module docs).
///
/// Errors (no launch) when the rank is above [`MAX_GATHER_RANK`], dims and strides differ
/// in length, the element width is not 1, 2 or 4, an index needs more than 32 bits, the
/// layout reaches outside `src`, or `out` is too small.
pub fn launch_strided_gather<R: Runtime>(
    client: &ComputeClient<R>,
    src: &Handle,
    layout: GatherLayout<'_>,
    elem_bytes: usize,
    out: &Handle,
) -> Result<(), LaunchError> {
    let pack = match elem_bytes {
        1 => 4usize,
        2 => 2,
        4 => 1,
        _ => {
            return Err(LaunchError::Overflow {
                what: "element width (1, 2 or 4 bytes)",
            })
        }
    };
    let rank = layout.dims.len();
    // The source words the layout reaches (element `i` lies in word `i / pack`).
    let Some(src) = layout_buf("src", src, &layout, pack, 4)? else {
        return Ok(());
    };
    let numel = crate::launch::extent("numel", layout.dims)?;
    fits_u32("numel (must fit in 32 bits)", numel)?;
    let words = numel.div_ceil(pack);
    let out = Buf::new("out", out, words, 4)?;
    // Strides modulo 2^32 (two's complement for negative ones): every element's true index
    // is below 2^32 (checked above), so the kernel's wrapping sums land on it exactly. The
    // offset and dims fit: `lo <= offset <= hi` and each dim is at most `numel`.
    let mut meta = Vec::with_capacity(1 + 2 * rank);
    meta.push(layout.offset as u32);
    meta.extend(layout.dims.iter().map(|&n| n as u32));
    meta.extend(layout.strides.iter().map(|&s| s as u32));
    let meta = Buf::upload(client, &meta);
    let (count, dim) = grid_1d(client, words)?;
    // SAFETY: `out` holds `words` words (a checked `Buf`) and the kernel writes only word
    // `w < words`; every element index the layout reaches lies in the words of `src`'s
    // checked `Buf`; `meta` holds exactly `1 + 2 * rank` words, which is what a rank-`rank`
    // kernel reads.
    unsafe {
        strided_gather_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            src.arg(),
            meta.arg(),
            out.arg(),
            numel as u32,
            rank,
            pack as u32,
        );
    }
    Ok(())
}

/// The storage indices of row-major element `e` in two layouts over the same dims. `meta`
/// holds the two offsets, `rank` dims, then each layout's `rank` strides (two's complement).
#[cube]
fn source_pair(e: u32, meta: &Array<u32>, #[comptime] rank: usize) -> (u32, u32) {
    let mut rest = e;
    let mut ax = meta[0];
    let mut ay = meta[1];
    #[unroll]
    for i in 0..rank {
        let d = rank - 1 - i;
        let n = meta[2 + d];
        let c = rest % n;
        rest /= n;
        ax += c * meta[2 + rank + d];
        ay += c * meta[2 + 2 * rank + d];
    }
    (ax, ay)
}

#[cube(launch_unchecked)]
fn strided_binary_kernel<F: Float>(
    x: &Array<F>,
    y: &Array<F>,
    meta: &Array<u32>,
    out: &mut Array<F>,
    a: f32,
    b: f32,
    #[comptime] rank: usize,
    #[comptime] instr: BinaryInstr,
) {
    let i = ABSOLUTE_POS;
    if i < out.len() {
        let (ix, iy) = source_pair(u32::cast_from(i), meta, rank);
        let vx = Vector::<f32, Const<1>>::new(f32::cast_from(x[ix as usize]));
        let vy = Vector::<f32, Const<1>>::new(f32::cast_from(y[iy as usize]));
        out[i] = F::cast_from(f32::cast_from(apply_binary::<Const<1>>(
            vx, vy, a, b, instr,
        )));
    }
}

/// Checks `layout` for a strided launch over buffer `h` read in units of `unit_bytes` bytes
/// holding `per_unit` elements each: the rank, one stride per dim, 32-bit element indices and
/// every reached unit inside `h`. Returns `h` as the units to bind (the unit of the highest
/// index reached, plus one), or `None` when the layout is empty.
fn layout_buf(
    arg: &'static str,
    h: &Handle,
    layout: &GatherLayout<'_>,
    per_unit: usize,
    unit_bytes: usize,
) -> Result<Option<Buf>, LaunchError> {
    if layout.dims.len() > MAX_GATHER_RANK || layout.strides.len() != layout.dims.len() {
        return Err(LaunchError::Overflow {
            what: "rank (one stride per dim, at most 9)",
        });
    }
    let Some((lo, hi)) = reach(layout)? else {
        return Ok(None);
    };
    if lo < 0 || u32::try_from(hi).is_err() {
        return Err(LaunchError::Overflow {
            what: "strided layout (indices must lie in 0..2^32)",
        });
    }
    let units = hi as usize / per_unit + 1;
    Buf::new(arg, h, units, unit_bytes).map(Some)
}

/// `out[i] = instr(x[layout_x(i)], y[layout_y(i)]; a, b)` for every row-major index `i` of the
/// layouts' common dims, reading `x` and `y` where their strides say (broadcast, transposed,
/// sliced or flipped views) with no copy; `out` is dense. Float math in f32.
///
/// Errors (no launch) when the layouts' dims differ, a rank is above [`MAX_GATHER_RANK`], an
/// index needs more than 32 bits, a layout reaches outside its buffer, or `out` is too small.
#[allow(clippy::too_many_arguments)]
pub fn launch_strided_binary<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    instr: BinaryInstr,
    (x, lx): (&Handle, GatherLayout<'_>),
    (y, ly): (&Handle, GatherLayout<'_>),
    out: &Handle,
    a: f32,
    b: f32,
) -> Result<(), LaunchError> {
    if lx.dims != ly.dims {
        return Err(LaunchError::Overflow {
            what: "strided operands (their dims must match)",
        });
    }
    let bytes = core::mem::size_of::<F>();
    let numel = crate::launch::extent("numel", lx.dims)?;
    let x = layout_buf("x", x, &lx, 1, bytes)?;
    let y = layout_buf("y", y, &ly, 1, bytes)?;
    // Both are `None` exactly when the (common) dims hold a zero: `numel == 0`.
    let (Some(x), Some(y)) = (x, y) else {
        return Ok(());
    };
    fits_u32("numel (must fit in 32 bits)", numel)?;
    let out = Buf::new("out", out, numel, bytes)?;
    let rank = lx.dims.len();
    // Offsets, dims and strides modulo 2^32, as in `launch_strided_gather`.
    let mut meta = Vec::with_capacity(2 + 3 * rank);
    meta.extend([lx.offset as u32, ly.offset as u32]);
    meta.extend(lx.dims.iter().map(|&n| n as u32));
    meta.extend(lx.strides.iter().map(|&s| s as u32));
    meta.extend(ly.strides.iter().map(|&s| s as u32));
    let meta = Buf::upload(client, &meta);
    let (count, dim) = grid_1d(client, numel)?;
    // SAFETY: `out` holds `numel` elements (a checked `Buf`) and unit `i < numel` writes
    // element `i` only; every index either layout reaches lies inside the elements of `x`'s
    // / `y`'s checked `Buf`; `meta` holds the `2 + 3 * rank` words a rank-`rank` kernel
    // reads.
    unsafe {
        strided_binary_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            y.arg(),
            meta.arg(),
            out.arg(),
            a,
            b,
            rank,
            instr,
        );
    }
    Ok(())
}

#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{for_floats, Lowering as L, Rt};
    use BinaryInstr::{Add, Div, Mul, Sub};
    let a = L::array;
    // The broadcasting arithmetic (`ops::add` etc. on views) in every float type and rank.
    for rank in 0..=8 {
        for instr in [Add, Sub, Mul, Div] {
            for_floats!(
                |F| l.lower(strided_binary_kernel::StridedBinaryKernel::<F, Rt>::new(
                    L::settings_1d(),
                    l.client.clone(),
                    a(),
                    a(),
                    a(),
                    a(),
                    (),
                    (),
                    rank,
                    instr,
                ))
            );
        }
    }
    for rank in 0..=MAX_GATHER_RANK {
        for pack in [1u32, 2, 4] {
            l.lower(strided_gather_kernel::StridedGatherKernel::<Rt>::new(
                L::settings_1d(),
                l.client.clone(),
                a(),
                a(),
                a(),
                (),
                rank,
                pack,
            ));
        }
    }
}
