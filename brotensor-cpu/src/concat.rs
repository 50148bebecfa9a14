//! CPU reference of the concat category: row and channel concatenation, splits and strided
//! device copies. Every op of the category is a block copy ([`copy_blocks`]) of elements of
//! any type, moved unchanged.

use rayon::prelude::*;

use crate::stream::{copy_bytes, streaming, Stream, StreamedIter};

/// Rows per parallel piece of a block copy.
const ROWS_PER_PIECE: usize = 256;

/// Elements per parallel piece of a contiguous block copy.
const FLAT_PIECE: usize = 1 << 16;

/// Copies `height` rows of `width` elements: row `r` from `src[src_off + r src_pitch ..]`
/// to `dst[dst_off + r dst_pitch ..]` (offsets and pitches in elements, pitches at least
/// `width` when `height > 1`, every row inside both slices: checked by the caller; a
/// violation panics on the slice bounds). Large copies write with streaming stores
/// ([`crate::stream`]): the destination is not read into the cache first. The decision is
/// this call's (`width * height` elements), so an op joining many parts below the
/// threshold writes each with plain stores.
pub fn copy_blocks<T: bytemuck::Pod + Send + Sync>(
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
    let copy = |stream: Stream<'_>, d: &mut [T], s: &[T]| {
        copy_bytes(stream, bytemuck::cast_slice_mut(d), bytemuck::cast_slice(s));
    };
    let elems = width.saturating_mul(height);
    streaming(elems, std::mem::size_of::<T>(), |streaming| {
        if height == 1 || (dst_pitch == width && src_pitch == width) {
            // Both sides are one contiguous run: copy it in pieces on every core.
            let n = height * width;
            dst[dst_off..dst_off + n]
                .par_chunks_mut(FLAT_PIECE)
                .zip(src[src_off..src_off + n].par_chunks(FLAT_PIECE))
                .for_each_streamed(streaming, |stream, (d, s)| copy(stream, d, s));
            return;
        }
        let span = (height - 1) * dst_pitch + width;
        if dst_pitch == width {
            // Destination rows are contiguous (the source's are not): split them into pieces.
            dst[dst_off..dst_off + span]
                .par_chunks_mut(ROWS_PER_PIECE * width)
                .enumerate()
                .for_each_streamed(streaming, |stream, (p, piece)| {
                    for (i, d) in piece.chunks_mut(width).enumerate() {
                        let s = row(p * ROWS_PER_PIECE + i);
                        copy(stream, d, &src[s..s + width]);
                    }
                });
            return;
        }
        // Gapped destination rows: each chunk of `dst_pitch` elements holds one row's `width`.
        dst[dst_off..dst_off + span]
            .par_chunks_mut(dst_pitch)
            .enumerate()
            .for_each_streamed(streaming, |stream, (r, d)| {
                let s = row(r);
                copy(stream, &mut d[..width], &src[s..s + width]);
            });
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::STREAM_MIN_BYTES;

    /// Element-by-element reference of [`copy_blocks`].
    fn reference<T: Copy>(
        src: &[T],
        (so, sp): (usize, usize),
        dst: &mut [T],
        (d_o, dp): (usize, usize),
        (w, h): (usize, usize),
    ) {
        for r in 0..h {
            for c in 0..w {
                dst[d_o + r * dp + c] = src[so + r * sp + c];
            }
        }
    }

    /// Every branch (one run, contiguous destination rows, gapped destination rows) below
    /// and above the streaming threshold, at odd offsets so rows start off cache lines,
    /// in 2- and 16-byte elements; untouched destination elements keep their value.
    #[test]
    fn block_copies_match_the_element_loop_with_and_without_streaming() {
        fn case<T: bytemuck::Pod + Send + Sync + PartialEq + std::fmt::Debug>(
            make: impl Fn(usize) -> T,
            fill: T,
        ) {
            let big = STREAM_MIN_BYTES / std::mem::size_of::<T>() + 4099;
            for total in [5000usize, big] {
                // (src pitch, dst pitch, width): one run; contiguous destination; gapped.
                let w = 1031;
                let h = total / w + 1;
                let streams = crate::stream::should_stream(w * h, std::mem::size_of::<T>());
                assert_eq!(
                    streams,
                    total == big,
                    "the big case must stream, the small not"
                );
                for (sp, dp) in [(w, w), (w + 3, w), (w + 5, w + 7)] {
                    let (so, d_o) = (3usize, 5usize);
                    let src: Vec<T> = (0..so + h * sp).map(&make).collect();
                    let mut got = vec![fill; d_o + h * dp + 11];
                    let mut want = got.clone();
                    copy_blocks(&src, (so, sp), &mut got, (d_o, dp), (w, h));
                    reference(&src, (so, sp), &mut want, (d_o, dp), (w, h));
                    assert!(got == want, "pitches {sp}/{dp}, {h} rows of {w}");
                }
            }
        }
        case(|i| i as u16 ^ 0x5A5A, 0xFFFFu16);
        case(|i| [i as u64, !(i as u64)], [7u64, 7]);
    }
}
