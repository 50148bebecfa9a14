//! One strided gather: the elements of any layout (dims, strides in elements, an offset) into
//! a dense row-major buffer. Views (transposes, permutes, slices with steps, broadcasts,
//! flips) are all layouts, so this one function materialises every one of them.
//!
//! The layout is first simplified (size-1 dims dropped, dims that are contiguous among
//! themselves merged), then copied by the fastest of five loops: filled rows when the last
//! dim has stride 0 (a broadcast along it); whole rows when the last dim is unit-stride, in
//! destination order, or in source order when the two dims above it are swapped (a permute
//! like `(0, 2, 1, 3)`); cache-line tiles when the second-to-last dim is unit-stride (a
//! transpose of the last two dims); and an element loop otherwise. Outputs of
//! [`STREAM_MIN_BYTES`](crate::stream::STREAM_MIN_BYTES) or more are written with streaming
//! stores by every loop but the element loop.

use bytemuck::Pod;
use rayon::prelude::*;

use crate::stream::{copy_bytes, should_stream, streaming, Stream, StreamedIter};

/// Bytes in a cache line: a transpose assembles and writes its destination a line at a time.
const LINE_BYTES: usize = 64;

/// Bytes a transpose reads from each source row per visit, at most: a page (of `f32`, 1024
/// elements), the destination band's height. Longer runs per source row measured faster
/// (fewer, longer streams for the prefetchers and one TLB entry per run); a band of 1024
/// destination rows also keeps its rows' pages within the second-level TLB.
const BAND_BYTES: usize = 4096;

/// Source bytes [`copy_rows_swapped`] stages per group, at most: 8 rows of 512 bytes read
/// side by side measured 1.25x faster than 16 (fewer streams for the prefetchers), 4 no
/// faster than 8.
const SWAP_STAGE_BYTES: usize = 4 << 10;

/// Largest staged group of short rows, in bytes ([`copy_rows`]): well inside the
/// first-level cache.
const STAGE_BYTES: usize = 8 << 10;

/// Destination elements per parallel job, at least: small enough to spread a 64 MiB copy
/// over every core, large enough that a job is worth its scheduling.
const JOB_ELEMENTS: usize = 1 << 15;

/// The layout with size-1 dims dropped and mergeable neighbours merged (dim `i` and `i + 1`
/// merge when stepping once in `i` equals stepping through all of `i + 1`).
pub fn simplify(dims: &[usize], strides: &[isize]) -> (Vec<usize>, Vec<isize>) {
    let mut d: Vec<usize> = Vec::with_capacity(dims.len());
    let mut s: Vec<isize> = Vec::with_capacity(dims.len());
    for (&n, &st) in dims.iter().zip(strides) {
        if n == 1 {
            continue;
        }
        match (d.last_mut(), s.last_mut()) {
            (Some(pn), Some(ps)) if *ps == st * n as isize => {
                *pn *= n;
                *ps = st;
            }
            _ => {
                d.push(n);
                s.push(st);
            }
        }
    }
    (d, s)
}

/// The storage index of the first element of outer index `row` (row-major over `dims`).
fn base_of(mut row: usize, dims: &[usize], strides: &[isize], offset: usize) -> isize {
    let mut at = offset as isize;
    for (&n, &s) in dims.iter().zip(strides).rev() {
        at += (row % n) as isize * s;
        row /= n;
    }
    at
}

/// The smallest and largest storage index the layout reaches (`None` when it is empty).
pub fn span(dims: &[usize], strides: &[isize], offset: usize) -> Option<(isize, isize)> {
    if dims.contains(&0) {
        return None;
    }
    let (mut lo, mut hi) = (offset as isize, offset as isize);
    for (&n, &s) in dims.iter().zip(strides) {
        let reach = (n as isize - 1).checked_mul(s)?;
        if reach < 0 {
            lo = lo.checked_add(reach)?;
        } else {
            hi = hi.checked_add(reach)?;
        }
    }
    Some((lo, hi))
}

/// `dst[i] = src[offset + sum(coord_d(i) * strides[d])]` for every row-major index `i` of
/// `dims`.
///
/// # Panics
/// If `dims` and `strides` differ in length, `dst` does not hold exactly the product of
/// `dims` elements, or the layout reaches outside `src` (check with [`span`] first). A
/// layout is never read out of bounds: the indexing is checked.
pub fn gather<T: Pod + Send + Sync>(
    src: &[T],
    dims: &[usize],
    strides: &[isize],
    offset: usize,
    dst: &mut [T],
) {
    assert_eq!(dims.len(), strides.len(), "one stride per dim");
    let numel = dims.iter().try_fold(1usize, |a, &n| a.checked_mul(n));
    assert_eq!(numel, Some(dst.len()), "dst holds the layout's elements");
    if dst.is_empty() {
        return;
    }
    let reach = span(dims, strides, offset).expect("a non-empty layout has a span");
    assert!(
        reach.0 >= 0 && (reach.1 as usize) < src.len(),
        "the layout reaches {reach:?} outside a source of {} elements",
        src.len()
    );
    let (dims, strides) = simplify(dims, strides);
    let Some((&n, &s)) = dims.last().zip(strides.last()) else {
        dst[0] = src[offset];
        return;
    };
    let outer = (&dims[..dims.len() - 1], &strides[..strides.len() - 1]);
    let k = outer.0.len();
    if s == 0 {
        fill_rows(src, outer, offset, n, dst);
    } else if s == 1 && k >= 2 && outer.1[k - 1].unsigned_abs() > outer.1[k - 2].unsigned_abs() {
        copy_rows_swapped(src, outer, offset, n, dst);
    } else if s == 1 {
        copy_rows(src, outer, offset, n, dst);
    } else if dims.len() >= 2 && strides[dims.len() - 2] == 1 {
        let a = dims[dims.len() - 2];
        let lead = (&dims[..dims.len() - 2], &strides[..strides.len() - 2]);
        transpose_tiles(src, lead, offset, (a, n), s, dst);
    } else {
        copy_strided_rows(src, outer, offset, (n, s), dst);
    }
}

/// Rows of `n` unit-stride elements, one per outer index. Large outputs are written with
/// streaming stores ([`crate::stream`]); rows shorter than [`STAGE_BYTES`] are first gathered
/// into a per-job staging buffer that stays in the first-level cache, so that the streamed
/// range is contiguous and only its two ends are partial lines (streaming each short row on
/// its own would leave a partial, plainly stored line at both ends of every row).
fn copy_rows<T: Pod + Send + Sync>(
    src: &[T],
    (dims, strides): (&[usize], &[isize]),
    offset: usize,
    n: usize,
    dst: &mut [T],
) {
    let w = size_of::<T>();
    let rows_per_job = (JOB_ELEMENTS / n).max(1);
    if !should_stream(dst.len(), w) {
        dst.par_chunks_mut(rows_per_job * n)
            .enumerate()
            .for_each(|(job, chunk)| {
                for (i, row) in chunk.chunks_mut(n).enumerate() {
                    let at = base_of(job * rows_per_job + i, dims, strides, offset) as usize;
                    row.copy_from_slice(&src[at..at + n]);
                }
            });
        return;
    }
    let stage_rows = (STAGE_BYTES / (n * w)).max(1);
    streaming(dst.len(), w, |on| {
        dst.par_chunks_mut(rows_per_job * n)
            .enumerate()
            .for_each_streamed_init(on, Vec::<T>::new, |stream, stage, (job, chunk)| {
                let first = job * rows_per_job;
                let row_at = |i: usize| base_of(first + i, dims, strides, offset) as usize;
                if stage_rows == 1 {
                    for (i, row) in chunk.chunks_mut(n).enumerate() {
                        let at = row_at(i);
                        write_bytes(stream, row, &src[at..at + n]);
                    }
                    return;
                }
                for (g, group) in chunk.chunks_mut(stage_rows * n).enumerate() {
                    stage.clear();
                    for i in 0..group.len() / n {
                        let at = row_at(g * stage_rows + i);
                        stage.extend_from_slice(&src[at..at + n]);
                    }
                    write_bytes(stream, group, stage);
                }
            });
    });
}

/// Rows of `n` unit-stride elements whose last two outer dims, `(p, q)`, step through the
/// source the other way round (`q`'s stride is the larger: a permute that swaps two dims
/// above the last, like `(0, 2, 1, 3)` of a 4-d tensor). Going through the destination in
/// order would read the source in short runs, one row per visit; instead each group of `G`
/// consecutive `q` (the rows one staged group holds) is read for every `p`, so the source is
/// read as `G` long runs, and each staged group is written as one contiguous piece (streamed
/// when the output is large). A parallel job is a range of `p` of one `(p, q)` block.
fn copy_rows_swapped<T: Pod + Send + Sync>(
    src: &[T],
    (dims, strides): (&[usize], &[isize]),
    offset: usize,
    n: usize,
    dst: &mut [T],
) {
    let w = size_of::<T>();
    let k = dims.len();
    let (lead, lead_strides) = (&dims[..k - 2], &strides[..k - 2]);
    let (p, q) = (dims[k - 2], dims[k - 1]);
    let (sp, sq) = (strides[k - 2], strides[k - 1]);
    let g = (SWAP_STAGE_BYTES / (n * w)).clamp(1, 16);
    let blocks = dst.len() / (p * q * n);
    let threads = rayon::current_num_threads();
    let p_per_job = (p * blocks).div_ceil(4 * threads).clamp(1, p);
    streaming(dst.len(), w, |on| {
        dst.par_chunks_mut(p * q * n)
            .enumerate()
            .flat_map(|(m, block)| {
                let base = base_of(m, lead, lead_strides, offset);
                block
                    .par_chunks_mut(p_per_job * q * n)
                    .enumerate()
                    .map(move |(i, rows)| (base, i * p_per_job, rows))
            })
            .for_each_streamed_init(on, Vec::<T>::new, |stream, stage, (base, p0, rows)| {
                let ps = rows.len() / (q * n);
                for q0 in (0..q).step_by(g) {
                    let gq = g.min(q - q0);
                    for i in 0..ps {
                        let row0 = base + (p0 + i) as isize * sp;
                        stage.clear();
                        for j in q0..q0 + gq {
                            let at = (row0 + j as isize * sq) as usize;
                            stage.extend_from_slice(&src[at..at + n]);
                        }
                        let d = (i * q + q0) * n;
                        write_bytes(stream, &mut rows[d..d + gq * n], stage);
                    }
                }
            });
    });
}

/// Rows of `n` copies of one element, one per outer index (a broadcast along the last dim,
/// such as a column vector broadcast across a matrix). Rows are filled in a per-job staging
/// buffer, written in pieces of up to [`STAGE_BYTES`] (streamed when the output is large).
fn fill_rows<T: Pod + Send + Sync>(
    src: &[T],
    (dims, strides): (&[usize], &[isize]),
    offset: usize,
    n: usize,
    dst: &mut [T],
) {
    let w = size_of::<T>();
    let piece = (STAGE_BYTES / w).max(1);
    let job = JOB_ELEMENTS.next_multiple_of(n);
    streaming(dst.len(), w, |on| {
        dst.par_chunks_mut(job).enumerate().for_each_streamed_init(
            on,
            Vec::<T>::new,
            |stream, stage, (i, chunk)| {
                let first = i * job;
                for (p, out) in chunk.chunks_mut(piece).enumerate() {
                    let start = first + p * piece;
                    stage.clear();
                    let mut e = start;
                    while e < start + out.len() {
                        let row = e / n;
                        let end = ((row + 1) * n).min(start + out.len());
                        let v = src[base_of(row, dims, strides, offset) as usize];
                        stage.resize(stage.len() + (end - e), v);
                        e = end;
                    }
                    write_bytes(stream, out, stage);
                }
            },
        );
    });
}

/// `dst.copy_from_slice(src)` through [`copy_bytes`] (streamed when `stream` is on).
#[inline(always)]
fn write_bytes<T: Pod>(stream: Stream, dst: &mut [T], src: &[T]) {
    copy_bytes(
        stream,
        bytemuck::cast_slice_mut(dst),
        bytemuck::cast_slice(src),
    );
}

/// Rows of `n` elements `s` apart, one per outer index.
fn copy_strided_rows<T: Copy + Send + Sync>(
    src: &[T],
    (dims, strides): (&[usize], &[isize]),
    offset: usize,
    (n, s): (usize, isize),
    dst: &mut [T],
) {
    let rows_per_job = (JOB_ELEMENTS / n).max(1);
    dst.par_chunks_mut(rows_per_job * n)
        .enumerate()
        .for_each(|(job, chunk)| {
            for (i, row) in chunk.chunks_mut(n).enumerate() {
                let at = base_of(job * rows_per_job + i, dims, strides, offset);
                for (k, v) in row.iter_mut().enumerate() {
                    *v = src[(at + k as isize * s) as usize];
                }
            }
        });
}

/// Matrices of `a x b` whose rows are `b`-strided by `s` and whose columns are unit-stride
/// in the source (a transpose), one per leading index. Each parallel job is a band of
/// destination rows (up to [`BAND_BYTES`] of each source row), walked in square tiles of
/// one cache line's worth of elements a side (`L`, 16 `f32`): for each group of `L` source
/// rows, the tiles go down the band, so the band reads `L` source rows at a time, each as one
/// long run (what the prefetchers follow best: wider groups, with more and shorter runs,
/// measured slower). Each destination line of a tile is assembled whole (in AVX registers
/// for 4-byte elements) and written with a streaming store when the output is large.
fn transpose_tiles<T: Pod + Send + Sync>(
    src: &[T],
    lead: (&[usize], &[isize]),
    offset: usize,
    ab: (usize, usize),
    s: isize,
    dst: &mut [T],
) {
    match size_of::<T>() {
        1 => transpose_lines::<T, 64>(src, lead, offset, ab, s, dst),
        2 => transpose_lines::<T, 32>(src, lead, offset, ab, s, dst),
        4 => transpose_lines::<T, 16>(src, lead, offset, ab, s, dst),
        8 => transpose_lines::<T, 8>(src, lead, offset, ab, s, dst),
        _ => transpose_lines::<T, 4>(src, lead, offset, ab, s, dst),
    }
}

/// [`transpose_tiles`] with tiles of `L x L` elements.
fn transpose_lines<T: Pod + Send + Sync, const L: usize>(
    src: &[T],
    (dims, strides): (&[usize], &[isize]),
    offset: usize,
    (a, b): (usize, usize),
    s: isize,
    dst: &mut [T],
) {
    let w = size_of::<T>();
    // Whole lines can be streamed when a tile's row is one line and every destination row
    // starts at the same place within a line (rows a whole number of lines long); tiles then
    // start at the first column on a line boundary, `j0`, and the columns before it and
    // after the last whole tile are copied element by element.
    let lines = L * w == LINE_BYTES && (b * w).is_multiple_of(LINE_BYTES);
    let j0 = if lines {
        dst.as_ptr().align_offset(LINE_BYTES).min(b)
    } else {
        0
    };
    let tiles = (b - j0) / L;
    let j1 = j0 + tiles * L;
    let stream_len = if lines { dst.len() } else { 0 };
    // Bands of `BAND_BYTES` of source per row, or fewer rows when that leaves a thread idle
    // (at least 64 rows, a multiple of `L`).
    let threads = rayon::current_num_threads();
    let band = (BAND_BYTES / w)
        .min(a.div_ceil(threads).next_multiple_of(L).max(64))
        .max(1);
    // Full 16 x 16 tiles of 4-byte elements are transposed in AVX registers, and written
    // with streaming stores exactly when `streaming` below turns streaming on (the same
    // test, on the same length), so that every job that streams also fences.
    #[cfg(target_arch = "x86_64")]
    let (avx, nt) = (
        L == 16 && w == 4 && std::arch::is_x86_feature_detected!("avx"),
        should_stream(stream_len, w),
    );
    streaming(stream_len, w, |on| {
        dst.par_chunks_mut(a * b)
            .enumerate()
            .flat_map(|(m, matrix)| {
                let base = base_of(m, dims, strides, offset);
                matrix
                    .par_chunks_mut(band * b)
                    .enumerate()
                    .map(move |(i, rows)| (base, i * band, rows))
            })
            .for_each_streamed_init(
                on,
                || [[T::zeroed(); L]; L],
                |stream, tile, (base, r0, rows)| {
                    let h = rows.len() / b;
                    // The source index of the band's row `r`, column `j`.
                    let at = |j: usize, r: usize| (base + j as isize * s) as usize + r0 + r;
                    let columns = |rows: &mut [T], from: usize, to: usize| {
                        for j in from..to {
                            let p = at(j, 0);
                            for (r, &v) in src[p..p + h].iter().enumerate() {
                                rows[r * b + j] = v;
                            }
                        }
                    };
                    columns(rows, 0, j0);
                    columns(rows, j1, b);
                    for j in (j0..j1).step_by(L) {
                        // Windows of rows that start where row `j`'s source piece starts a
                        // line, so each source line is read by one tile (the band's first
                        // and last windows may be partial).
                        let phase = (src.as_ptr() as usize / w + at(j, 0)) % L;
                        let first = (L - phase) % L;
                        let starts = (first > 0).then_some(0).into_iter();
                        for q in starts.chain((first..h).step_by(L)) {
                            let hq = if q < first {
                                first.min(h)
                            } else {
                                L.min(h - q)
                            };
                            #[cfg(target_arch = "x86_64")]
                            if avx && hq == L {
                                let pieces = std::array::from_fn(|k| {
                                    let p = at(j + k, q);
                                    &src[p..p + L]
                                });
                                tile16(pieces, rows, q * b + j, b, nt);
                                continue;
                            }
                            for (k, piece) in tile.iter_mut().enumerate() {
                                let p = at(j + k, q);
                                piece[..hq].copy_from_slice(&src[p..p + hq]);
                            }
                            for (r, row) in rows[q * b..].chunks_mut(b).take(hq).enumerate() {
                                let line: [T; L] = std::array::from_fn(|k| tile[k][r]);
                                write_bytes(stream, &mut row[j..j + L], &line);
                            }
                        }
                    }
                },
            );
    });
}

/// `rows[d0 + r * pitch + k] = pieces[k][r]` for `r, k < 16`: one 16 x 16 tile of 4-byte
/// elements transposed in AVX registers, each destination line written with two 32-byte
/// stores, streaming ones when `nt`. The caller has checked that the CPU runs AVX.
///
/// # Panics
/// If `T` is not 4 bytes, a piece is not 16 elements long, the tile reaches past `rows`, or
/// `nt` is set while a destination line does not start on a 32-byte boundary.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tile16<T: Pod>(pieces: [&[T]; 16], rows: &mut [T], d0: usize, pitch: usize, nt: bool) {
    assert_eq!(size_of::<T>(), 4, "tile16 moves 4-byte elements");
    assert!(
        pieces.iter().all(|p| p.len() == 16),
        "tile16 pieces are 16 long"
    );
    assert!(
        d0 + 15 * pitch + 16 <= rows.len(),
        "tile16 reaches past its rows"
    );
    let dst = rows[d0..].as_mut_ptr().cast::<f32>();
    assert!(
        !nt || ((dst as usize).is_multiple_of(32) && pitch.is_multiple_of(8)),
        "streamed lines are aligned"
    );
    let src = pieces.map(|p| p.as_ptr().cast::<f32>());
    // SAFETY: the CPU runs AVX (the caller's check); every piece holds 16 elements of 4
    // bytes, read with unaligned loads; the stores reach `d0 + r * pitch + k` for r, k < 16,
    // which the assert above keeps inside `rows`, and are 32-byte aligned when streamed. A
    // 4-byte `Pod` element is moved as the bits of an `f32` (loads and stores copy bits).
    unsafe { tile16_avx(src, dst, pitch, nt) }
}

/// The registers of [`tile16`]: two 8 x 8 transposes per half of the tile.
///
/// # Safety
/// The CPU runs AVX; `src[k]` points at 16 readable `f32`; `dst + r * pitch + k` is
/// writable for r, k < 16, and 32-byte aligned for r < 16, k in {0, 8} when `nt`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn tile16_avx(src: [*const f32; 16], dst: *mut f32, pitch: usize, nt: bool) {
    use std::arch::x86_64::*;
    for half in 0..2 {
        // Destination rows `8 half ..`: source columns `8 half ..` of pieces 0-7 (the
        // destination's first 8 columns) and of pieces 8-15 (its last 8).
        let mut lo = [_mm256_setzero_ps(); 8];
        let mut hi = [_mm256_setzero_ps(); 8];
        for i in 0..8 {
            lo[i] = _mm256_loadu_ps(src[i].add(8 * half));
            hi[i] = _mm256_loadu_ps(src[8 + i].add(8 * half));
        }
        let (lo, hi) = (transpose8(lo), transpose8(hi));
        for c in 0..8 {
            let d = dst.add((8 * half + c) * pitch);
            if nt {
                _mm256_stream_ps(d, lo[c]);
                _mm256_stream_ps(d.add(8), hi[c]);
            } else {
                _mm256_storeu_ps(d, lo[c]);
                _mm256_storeu_ps(d.add(8), hi[c]);
            }
        }
    }
}

/// The transpose of 8 rows of 8 `f32`: pairs of rows interleaved, then pairs of pairs,
/// then the 128-bit halves exchanged.
///
/// # Safety
/// The CPU runs AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose8(r: [std::arch::x86_64::__m256; 8]) -> [std::arch::x86_64::__m256; 8] {
    use std::arch::x86_64::*;
    // t[2i] = (a0 b0 a1 b1 | a4 b4 a5 b5), t[2i + 1] = (a2 b2 a3 b3 | a6 b6 a7 b7) for rows
    // a = r[2i], b = r[2i + 1].
    let t: [__m256; 8] = std::array::from_fn(|i| {
        let (a, b) = (r[i & !1], r[i | 1]);
        if i % 2 == 0 {
            _mm256_unpacklo_ps(a, b)
        } else {
            _mm256_unpackhi_ps(a, b)
        }
    });
    // u[c] (c < 4) holds column c of rows 0-3 in its low half and column c + 4 in its
    // high half; u[4 + c] the same for rows 4-7.
    let u = |t0: __m256, t1: __m256, c: usize| {
        if c.is_multiple_of(2) {
            _mm256_shuffle_ps::<0x44>(t0, t1)
        } else {
            _mm256_shuffle_ps::<0xEE>(t0, t1)
        }
    };
    let u: [__m256; 8] = std::array::from_fn(|i| {
        let (rows, c) = (4 * (i / 4), i % 4);
        let pair = c / 2; // columns 0, 1 come from the `unpacklo`s, 2, 3 from the `unpackhi`s
        u(t[rows + pair], t[rows + 2 + pair], c)
    });
    std::array::from_fn(|c| {
        if c < 4 {
            _mm256_permute2f128_ps::<0x20>(u[c], u[4 + c])
        } else {
            _mm256_permute2f128_ps::<0x31>(u[c - 4], u[c])
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, one element at a time.
    fn naive<T: Copy>(src: &[T], dims: &[usize], strides: &[isize], offset: usize) -> Vec<T> {
        let n: usize = dims.iter().product();
        (0..n)
            .map(|i| src[base_of(i, dims, strides, offset) as usize])
            .collect()
    }

    fn check(src_len: usize, dims: &[usize], strides: &[isize], offset: usize) {
        check_as::<u32>(src_len, dims, strides, offset, 0);
    }

    /// [`gather`] of `T` into a destination that starts `skew` elements into its
    /// allocation (another alignment within a cache line), against [`naive`].
    fn check_as<T: Pod + Send + Sync + PartialEq + std::fmt::Debug + TryFrom<u64>>(
        src_len: usize,
        dims: &[usize],
        strides: &[isize],
        offset: usize,
        skew: usize,
    ) {
        let value = |v: usize| T::try_from((v as u64 * 7 + 1) % 251).ok().unwrap();
        let src: Vec<T> = (0..src_len).map(value).collect();
        let n: usize = dims.iter().product();
        let mut buf = vec![T::zeroed(); n + skew];
        gather(&src, dims, strides, offset, &mut buf[skew..]);
        let want = naive(&src, dims, strides, offset);
        if let Some(i) = (0..n).find(|&i| buf[skew + i] != want[i]) {
            panic!(
                "{} bytes {dims:?} {strides:?} +{offset} skew {skew}: element {i} is {:?}, not {:?}",
                size_of::<T>(),
                buf[skew + i],
                want[i]
            );
        }
    }

    /// Outputs of [`STREAM_MIN_BYTES`](crate::stream::STREAM_MIN_BYTES) and more are
    /// written with streaming stores; these layouts reach every loop's streamed form.
    const BIG: usize = 2048;

    #[test]
    fn transposes_match_at_every_width_and_alignment() {
        for skew in [0, 1, 5] {
            // Rows a whole number of lines long (whole tiles, AVX for 4 bytes), and not.
            for (a, b) in [(64, 48), (70, 100), (33, 256), (128, 1)] {
                check_as::<u8>(a * b, &[a, b], &[1, a as isize], 0, skew);
                check_as::<u16>(a * b, &[a, b], &[1, a as isize], 0, skew);
                check_as::<u32>(a * b, &[a, b], &[1, a as isize], 0, skew);
                check_as::<u64>(a * b, &[a, b], &[1, a as isize], 0, skew);
            }
            // A source offset that is not on a line, and batched transposes.
            check_as::<u32>(3 + 64 * 96 * 3, &[3, 96, 64], &[6144, 1, 96], 3, skew);
            // Streamed (16 MiB of u32 out), with the source pitch padded and not.
            check_as::<u32>(BIG * BIG, &[BIG, BIG], &[1, BIG as isize], 0, skew);
            check_as::<u32>(
                BIG * (BIG + 16),
                &[BIG, BIG],
                &[1, BIG as isize + 16],
                0,
                skew,
            );
        }
    }

    #[test]
    fn rows_match_when_staged_streamed_or_swapped() {
        for skew in [0, 3] {
            // Short rows staged and streamed; long rows streamed one by one.
            check_as::<u32>(BIG * BIG * 2, &[BIG * 32, 64], &[128, 1], 0, skew);
            check_as::<u32>(
                BIG / 2 * (4 * BIG + 16) + 8,
                &[BIG / 2, 4 * BIG],
                &[4 * BIG as isize + 16, 1],
                8,
                skew,
            );
            // Permutes (0, 2, 1, 3): small, large enough to stream, with ragged groups of
            // rows, and with the swapped dims flipped.
            check_as::<u32>(2 * 4 * 3 * 5, &[2, 3, 4, 5], &[60, 5, 15, 1], 0, skew);
            check_as::<u32>(
                1 << 22,
                &[8, 32, 128, 128],
                &[1 << 19, 128, 4096, 1],
                0,
                skew,
            );
            check_as::<u16>(3 * 7 * 37 * 9, &[3, 37, 7, 9], &[2331, 9, 333, 1], 0, skew);
            check_as::<u8>(5 * 6 * 4, &[4, 6, 5], &[5, -20, 1], 100, skew);
            // Broadcasts along the last dim: small, and streamed with rows longer than a
            // staged piece.
            check_as::<u32>(7, &[7, 5], &[1, 0], 0, skew);
            check_as::<u16>(3 * 11, &[3, 11, 300], &[11, 1, 0], 0, skew);
            check_as::<u32>(BIG * 2, &[BIG * 2, BIG * 2 + 3], &[1, 0], 0, skew);
        }
    }

    #[test]
    fn every_loop_matches_the_definition() {
        check(12, &[3, 4], &[4, 1], 0); // dense: one merged row
        check(12, &[4, 3], &[1, 4], 0); // transpose: tiles
        check(100 * 70, &[70, 100], &[1, 70], 0); // transpose larger than a tile, ragged band
        check(2 * 3 * 4 * 5, &[2, 4, 3, 5], &[60, 5, 20, 1], 0); // permute (0, 2, 1, 3): rows
        check(24, &[2, 3], &[-4, -1], 23); // flips: element loop
        check(6, &[4, 2, 3], &[0, 3, 1], 0); // broadcast
        check(50, &[3, 2], &[10, 3], 5); // stepped slice
        check(1, &[], &[], 0); // rank 0
        check(8, &[1, 1, 1], &[5, 9, 2], 7); // size-1 dims only
        check(64 * 40 * 3, &[3, 64, 40], &[2560, 1, 64], 0); // batched transposes
    }

    #[test]
    fn merging_keeps_only_real_steps() {
        assert_eq!(simplify(&[2, 3, 4], &[12, 4, 1]), (vec![24], vec![1]));
        assert_eq!(simplify(&[2, 1, 4], &[4, 99, 1]), (vec![8], vec![1]));
        assert_eq!(simplify(&[3, 4], &[1, 3]), (vec![3, 4], vec![1, 3]));
    }

    #[test]
    #[should_panic(expected = "outside a source")]
    fn a_layout_past_the_source_is_refused() {
        let mut dst = [0u32; 4];
        gather(&[0u32; 4], &[2, 2], &[2, 1], 1, &mut dst);
    }

    #[test]
    fn empty_layouts_touch_nothing() {
        let mut dst: [u32; 0] = [];
        gather::<u32>(&[], &[0, 3], &[3, 1], 0, &mut dst);
    }
}
