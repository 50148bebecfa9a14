//! CPU reference of the concat category: row and channel concatenation, splits and strided
//! device copies. Every op of the category is a block copy ([`copy_blocks`]) of elements of
//! any type, moved unchanged.

use rayon::prelude::*;

/// Rows per parallel piece of a block copy.
const ROWS_PER_PIECE: usize = 256;

/// Elements per parallel piece of a contiguous block copy.
const FLAT_PIECE: usize = 1 << 16;

/// Copies `height` rows of `width` elements: row `r` from `src[src_off + r src_pitch ..]`
/// to `dst[dst_off + r dst_pitch ..]` (offsets and pitches in elements, pitches at least
/// `width` when `height > 1`, every row inside both slices: checked by the caller; a
/// violation panics on the slice bounds).
pub fn copy_blocks<T: Copy + Send + Sync>(
    src: &[T],
    (src_off, src_pitch): (usize, usize),
    dst: &mut [T],
    (dst_off, dst_pitch): (usize, usize),
    (width, height): (usize, usize),
) {
    if width == 0 || height == 0 {
        return;
    }
    let row = |r: usize| src_off + r * src_pitch;
    if height == 1 || (dst_pitch == width && src_pitch == width) {
        // Both sides are one contiguous run: copy it in pieces on every core.
        let n = height * width;
        dst[dst_off..dst_off + n]
            .par_chunks_mut(FLAT_PIECE)
            .zip(src[src_off..src_off + n].par_chunks(FLAT_PIECE))
            .for_each(|(d, s)| d.copy_from_slice(s));
        return;
    }
    if dst_pitch == width {
        // Destination rows are contiguous (the source's are not): split them into pieces.
        let span = (height - 1) * dst_pitch + width;
        dst[dst_off..dst_off + span]
            .par_chunks_mut(ROWS_PER_PIECE * width)
            .enumerate()
            .for_each(|(p, piece)| {
                for (i, d) in piece.chunks_mut(width).enumerate() {
                    let s = row(p * ROWS_PER_PIECE + i);
                    d.copy_from_slice(&src[s..s + width]);
                }
            });
        return;
    }
    // Gapped destination rows: each chunk of `dst_pitch` elements holds one row's `width`.
    let span = (height - 1) * dst_pitch + width;
    dst[dst_off..dst_off + span]
        .par_chunks_mut(dst_pitch)
        .enumerate()
        .for_each(|(r, d)| {
            let s = row(r);
            d[..width].copy_from_slice(&src[s..s + width]);
        });
}
