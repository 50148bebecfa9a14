//! Kernels of the concat category: row and channel concatenation, splits and strided device
//! copies. All of them are one block copy: `height` rows of `width` elements, row `r` read
//! at `src_off + r src_pitch` and written at `dst_off + r dst_pitch` (in elements, pitches at
//! least `width`). Elements are moved as bits in 32-bit words (`pack` elements per word: 1,
//! 2 or 4; 64-bit elements as two 32-bit ones, by the caller), so one kernel serves every
//! element width.
//!
//! One unit per (row, word of the row's destination window). A unit writes its whole word:
//! the elements that some row of the block covers come from the source (found from the
//! element's own position, so a word shared by two rows gets both), the others keep their
//! value. A word shared by two rows is written only by the unit of the first row in it, so
//! no two units write one word.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{extent, fits_u32, grid_1d, strided_span, sum, Buf, LaunchError};

/// Element `e` of a buffer of packed elements (in the low bits of the result).
#[cube]
pub(crate) fn element(buf: &Array<u32>, e: u32, #[comptime] pack: u32) -> u32 {
    if comptime!(pack == 1) {
        buf[e as usize]
    } else {
        let bits = comptime!(32 / pack);
        let mask = comptime!(u32::MAX >> (32 - 32 / pack));
        (buf[(e / pack) as usize] >> ((e % pack) * bits)) & mask
    }
}

/// `dst[dst_off + r dst_pitch + c] = src[src_off + r src_pitch + c]` for `r < height`,
/// `c < width`; `geom` holds `src_off, src_pitch, dst_off, dst_pitch, width, height` and the
/// window (words per unit row).
#[cube(launch_unchecked)]
fn copy_blocks_kernel(
    src: &Array<u32>,
    geom: &Array<u32>,
    dst: &mut Array<u32>,
    #[comptime] pack: u32,
) {
    let (src_off, src_pitch) = (geom[0], geom[1]);
    let (dst_off, dst_pitch) = (geom[2], geom[3]);
    let (width, height, window) = (geom[4], geom[5], geom[6]);
    let u = u32::cast_from(ABSOLUTE_POS);
    let r = u / window;
    if r < height {
        let first = dst_off + r * dst_pitch;
        let last = first + width - 1;
        let at = first / pack + u % window;
        if at * pack <= last {
            if comptime!(pack == 1) {
                dst[at as usize] = src[(src_off + r * src_pitch + at - first) as usize];
            } else {
                let bits = comptime!(32 / pack);
                let mask = comptime!(u32::MAX >> (32 - 32 / pack));
                let mut word = dst[at as usize];
                // The row of the word's first covered element: the unit of that row writes.
                let mut owner = height;
                #[unroll]
                for k in 0..pack {
                    let e = at * pack + k;
                    if e >= dst_off {
                        let rr = (e - dst_off) / dst_pitch;
                        let c = (e - dst_off) % dst_pitch;
                        if rr < height && c < width {
                            if owner == height {
                                owner = rr;
                            }
                            let v = element(src, src_off + rr * src_pitch + c, pack);
                            word = (word & !(mask << (k * bits))) | (v << (k * bits));
                        }
                    }
                }
                if owner == r {
                    dst[at as usize] = word;
                }
            }
        }
    }
}

/// A block copy in elements: `height` rows of `width` elements, row `r` from
/// `src_off + r src_pitch` to `dst_off + r dst_pitch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocks {
    /// First source element.
    pub src_off: usize,
    /// Source elements from one row to the next (at least `width` when `height > 1`).
    pub src_pitch: usize,
    /// First destination element.
    pub dst_off: usize,
    /// Destination elements from one row to the next (at least `width` when `height > 1`).
    pub dst_pitch: usize,
    /// Elements per row.
    pub width: usize,
    /// Rows.
    pub height: usize,
}

impl Blocks {
    /// The elements the source (`src = true`) or destination side reaches: its offset plus
    /// `(height - 1) pitch + width` (0 for an empty copy).
    pub fn reach(&self, src: bool) -> Result<usize, LaunchError> {
        let (off, pitch) = if src {
            (self.src_off, self.src_pitch)
        } else {
            (self.dst_off, self.dst_pitch)
        };
        if self.width == 0 || self.height == 0 {
            return Ok(0);
        }
        sum(
            "offset + span",
            off,
            strided_span("block span", self.height, pitch, self.width)?,
        )
    }
}

/// Runs the block copy `b` from `src` to `dst` for elements of `elem_bytes` bytes (1, 2 or
/// 4), moved as bits.
///
/// Errors (no launch) on another element width, a pitch below the width (with more than
/// one row), sizes past 32 bits, or a side reaching past its buffer.
pub fn launch_copy_blocks<R: Runtime>(
    client: &ComputeClient<R>,
    src: &Handle,
    dst: &Handle,
    b: Blocks,
    elem_bytes: usize,
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
    if b.width == 0 || b.height == 0 {
        return Ok(());
    }
    if b.height > 1 && (b.src_pitch < b.width || b.dst_pitch < b.width) {
        return Err(LaunchError::Overflow {
            what: "pitch (must be at least the width)",
        });
    }
    let (src_end, dst_end) = (b.reach(true)?, b.reach(false)?);
    // `fits_u32` keeps headroom: a unit's word index times `pack` may pass the end by a word.
    fits_u32(
        "block copy reach (must fit in 32 bits)",
        src_end.max(dst_end),
    )?;
    let (src_words, dst_words) = (src_end.div_ceil(pack), dst_end.div_ceil(pack));
    let src = Buf::new("src", src, src_words, 4)?;
    let dst = Buf::new("dst", dst, dst_words, 4)?;
    // Words a row can touch: `width / pack` whole ones plus up to two partial ones.
    let window = if pack == 1 {
        b.width
    } else {
        b.width / pack + 2
    };
    let units = extent("height * window", &[b.height, window])?;
    fits_u32("height * window (must fit in 32 bits)", units)?;
    // A one-row copy's pitch is never used; make it the width for the kernel's division.
    let pitch = |p: usize| if b.height == 1 { b.width } else { p };
    let geom: Vec<u32> = [
        b.src_off,
        pitch(b.src_pitch),
        b.dst_off,
        pitch(b.dst_pitch),
        b.width,
        b.height,
        window,
    ]
    .iter()
    .map(|&v| v as u32)
    .collect();
    let geom = Buf::upload(client, &geom);
    let (count, dim) = grid_1d(client, units)?;
    // SAFETY: every element a unit reads or writes lies in a covered row `rr < height` at
    // column `c < width`, so below `src_end` / `dst_end` (all values fit in 32 bits:
    // checked), whose words `src` / `dst` hold (checked `Buf`s); `geom` holds the 7 words
    // the kernel reads.
    unsafe {
        copy_blocks_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            src.arg(),
            geom.arg(),
            dst.arg(),
            pack as u32,
        );
    }
    Ok(())
}

/// Every kernel of this file, in every specialisation the library launches, lowered to CUDA
/// C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{Lowering as L, Rt};
    let a = L::array;
    for pack in [1u32, 2, 4] {
        l.lower(copy_blocks_kernel::CopyBlocksKernel::<Rt>::new(
            L::settings_1d(),
            l.client.clone(),
            a(),
            a(),
            a(),
            pack,
        ));
    }
}
