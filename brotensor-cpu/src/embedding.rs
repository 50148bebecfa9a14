//! CPU reference of the embedding category: embedding lookups and row gathers/scatters over
//! row-major `(rows, cols)` slices with I32 row ids. Gathers and scatters move elements of
//! any type unchanged; the accumulating scatter adds in FP32. Ids outside `[0, rows)` gather
//! zeros and scatter nothing (callers refuse them first; see [`count_bad_ids`]).

use rayon::prelude::*;

/// How many of `ids` lie outside `[0, rows)`.
pub fn count_bad_ids(ids: &[i32], rows: usize) -> usize {
    ids.par_iter()
        .filter(|&&id| usize::try_from(id).map_or(true, |i| i >= rows))
        .count()
}

/// Source row `id` of `rows`, or `None` when outside `[0, rows)`.
fn row_of(id: i32, rows: usize) -> Option<usize> {
    usize::try_from(id).ok().filter(|&r| r < rows)
}

/// `out[m, :] = src[ids[m], :]` with `src (rows, cols)` and `out (ids.len(), cols)`; a row
/// with an id outside `[0, rows)` is zero.
pub fn gather_rows<T: Copy + Default + Send + Sync>(
    src: &[T],
    cols: usize,
    ids: &[i32],
    out: &mut [T],
) {
    if cols == 0 {
        return;
    }
    let rows = src.len() / cols;
    out.par_chunks_mut(cols)
        .zip(ids.par_iter())
        .for_each(|(o, &id)| match row_of(id, rows) {
            Some(r) => o.copy_from_slice(&src[r * cols..(r + 1) * cols]),
            None => o.fill(T::default()),
        });
}

/// `dst[ids[m], :] = src[m, :]` with `src (ids.len(), cols)` and `dst (rows, cols)`, in
/// order of `m` (a repeated id keeps its last row); ids outside `[0, rows)` are skipped.
pub fn scatter_rows<T: Copy>(src: &[T], cols: usize, ids: &[i32], dst: &mut [T]) {
    if cols == 0 {
        return;
    }
    let rows = dst.len() / cols;
    for (s, &id) in src.chunks_exact(cols).zip(ids) {
        if let Some(r) = row_of(id, rows) {
            dst[r * cols..(r + 1) * cols].copy_from_slice(s);
        }
    }
}

/// `dst[ids[m], :] += src[m, :]` with `src (ids.len(), cols)` and `dst (rows, cols)`, in
/// order of `m` for each row (repeated ids add up in FP32, in id order); ids outside
/// `[0, rows)` are skipped. Rows are split across threads, so the result does not depend on
/// the thread count.
pub fn scatter_rows_add(src: &[f32], cols: usize, ids: &[i32], dst: &mut [f32]) {
    if cols == 0 {
        return;
    }
    let rows = dst.len() / cols;
    // (row, m) for the valid ids, by row and then in id order (a stable sort).
    let mut hits: Vec<(usize, usize)> = ids
        .iter()
        .enumerate()
        .filter_map(|(m, &id)| row_of(id, rows).map(|r| (r, m)))
        .collect();
    hits.sort_by_key(|&(r, _)| r);
    dst.par_chunks_mut(cols).enumerate().for_each(|(r, d)| {
        let from = hits.partition_point(|&(hr, _)| hr < r);
        for &(_, m) in hits[from..].iter().take_while(|&&(hr, _)| hr == r) {
            let s = &src[m * cols..(m + 1) * cols];
            d.iter_mut().zip(s).for_each(|(d, s)| *d += s);
        }
    });
}
