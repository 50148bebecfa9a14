//! One strided gather: the elements of any layout (dims, strides in elements, an offset) into
//! a dense row-major buffer. Views (transposes, permutes, slices with steps, broadcasts,
//! flips) are all layouts, so this one function materialises every one of them.
//!
//! The layout is first simplified (size-1 dims dropped, dims that are contiguous among
//! themselves merged), then copied by the fastest of three loops: whole rows when the last
//! dim is unit-stride, cache tiles when the second-to-last dim is (a transpose of the last two
//! dims), and an element loop otherwise.

use rayon::prelude::*;

/// Side of the square tiles a transpose is copied in: 32 rows of 32 `f32` are 4 KiB, so a
/// tile's source columns and destination rows stay in the first-level cache.
const TILE: usize = 32;

/// Destination elements per parallel job, at least: small enough to spread a 64 MiB copy
/// over every core, large enough that a job is worth its scheduling.
const JOB_ELEMENTS: usize = 1 << 15;

/// The layout with size-1 dims dropped and mergeable neighbours merged (dim `i` and `i + 1`
/// merge when stepping once in `i` equals stepping through all of `i + 1`).
fn simplify(dims: &[usize], strides: &[isize]) -> (Vec<usize>, Vec<isize>) {
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
pub fn gather<T: Copy + Send + Sync>(
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
    if s == 1 {
        copy_rows(src, outer, offset, n, dst);
    } else if dims.len() >= 2 && strides[dims.len() - 2] == 1 {
        let a = dims[dims.len() - 2];
        let lead = (&dims[..dims.len() - 2], &strides[..strides.len() - 2]);
        transpose_tiles(src, lead, offset, (a, n), s, dst);
    } else {
        copy_strided_rows(src, outer, offset, (n, s), dst);
    }
}

/// Rows of `n` unit-stride elements, one per outer index.
fn copy_rows<T: Copy + Send + Sync>(
    src: &[T],
    (dims, strides): (&[usize], &[isize]),
    offset: usize,
    n: usize,
    dst: &mut [T],
) {
    let rows_per_job = (JOB_ELEMENTS / n).max(1);
    dst.par_chunks_mut(rows_per_job * n)
        .enumerate()
        .for_each(|(job, chunk)| {
            for (i, row) in chunk.chunks_mut(n).enumerate() {
                let at = base_of(job * rows_per_job + i, dims, strides, offset) as usize;
                row.copy_from_slice(&src[at..at + n]);
            }
        });
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
/// in the source (a transpose), one per leading index, copied in `TILE`-row bands: each
/// source column piece is read contiguously and scattered down the band's rows, which stay
/// in cache.
fn transpose_tiles<T: Copy + Send + Sync>(
    src: &[T],
    (dims, strides): (&[usize], &[isize]),
    offset: usize,
    (a, b): (usize, usize),
    s: isize,
    dst: &mut [T],
) {
    dst.par_chunks_mut(a * b)
        .enumerate()
        .flat_map(|(m, matrix)| {
            let base = base_of(m, dims, strides, offset);
            matrix
                .par_chunks_mut(TILE * b)
                .enumerate()
                .map(move |(band, rows)| (base, band, rows))
        })
        .for_each(|(base, band, rows)| {
            let r0 = band * TILE;
            let h = rows.len() / b;
            for j in 0..b {
                let at = (base + j as isize * s) as usize + r0;
                let column = &src[at..at + h];
                for (r, &v) in column.iter().enumerate() {
                    rows[r * b + j] = v;
                }
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, one element at a time.
    fn naive(src: &[u32], dims: &[usize], strides: &[isize], offset: usize) -> Vec<u32> {
        let n: usize = dims.iter().product();
        (0..n)
            .map(|i| src[base_of(i, dims, strides, offset) as usize])
            .collect()
    }

    fn check(src_len: usize, dims: &[usize], strides: &[isize], offset: usize) {
        let src: Vec<u32> = (0..src_len as u32).map(|v| v * 7 + 1).collect();
        let mut dst = vec![0u32; dims.iter().product()];
        gather(&src, dims, strides, offset, &mut dst);
        assert_eq!(
            dst,
            naive(&src, dims, strides, offset),
            "{dims:?} {strides:?} +{offset}"
        );
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
