//! Row and column reductions over row-major `(rows, cols)` FP32 matrices.

use rayon::prelude::*;

use crate::simd::wide;
use crate::stream::{Stream, StreamedIter, Streaming};

/// Independent accumulators in the lane-wise reductions: enough that the adds of a
/// 16-wide (AVX-512) or 8-wide (AVX2) loop do not wait on each other's latency.
const LANES: usize = 32;
const _: () = assert!(LANES == 32, "first_max_in_blocks halves 32 lanes");

/// Floats per parallel piece when one long vector is reduced across threads.
pub const PIECE: usize = 1 << 16;

/// `sum f(range)` over the [`PIECE`]-long pieces of `0..n`, computed in parallel and added
/// in piece order in f64, so the sum depends only on `n`, not on the thread count.
pub fn piece_sum(n: usize, f: impl Fn(std::ops::Range<usize>) -> f32 + Sync) -> f64 {
    let parts: Vec<f32> = (0..n.div_ceil(PIECE))
        .into_par_iter()
        .map(|k| f(k * PIECE..((k + 1) * PIECE).min(n)))
        .collect();
    parts.iter().map(|&p| f64::from(p)).sum()
}

/// Sum of a slice, FP32, in 32 independent lanes (vectorizes; more accurate than one
/// chain).
#[inline(always)]
pub fn sum(x: &[f32]) -> f32 {
    sum_map(x, |v| v)
}

/// `sum f(x[i])` in 32 independent FP32 lanes, so the loop vectorizes.
#[inline(always)]
pub fn sum_map(x: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0.0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += f(v);
        }
    }
    let mut s = lanes.iter().sum::<f32>();
    for &v in tail {
        s += f(v);
    }
    s
}

/// `sum f(x[i], y[i])` in 32 independent FP32 lanes. Panics if the lengths differ.
#[inline(always)]
pub fn sum_zip(x: &[f32], y: &[f32], f: impl Fn(f32, f32) -> f32) -> f32 {
    assert_eq!(x.len(), y.len(), "sum_zip: lengths");
    let mut lanes = [0.0f32; LANES];
    let (cx, cy) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let (tx, ty) = (cx.remainder(), cy.remainder());
    for (a, b) in cx.zip(cy) {
        for i in 0..LANES {
            lanes[i] += f(a[i], b[i]);
        }
    }
    let mut s = lanes.iter().sum::<f32>();
    for (&a, &b) in tx.iter().zip(ty) {
        s += f(a, b);
    }
    s
}

/// `sum f(x[i], y[i], z[i])` in 32 independent FP32 lanes. Panics if the lengths differ.
#[inline(always)]
pub fn sum_zip3(x: &[f32], y: &[f32], z: &[f32], f: impl Fn(f32, f32, f32) -> f32) -> f32 {
    assert!(
        x.len() == y.len() && x.len() == z.len(),
        "sum_zip3: lengths"
    );
    let mut lanes = [0.0f32; LANES];
    let (cx, cy, cz) = (
        x.chunks_exact(LANES),
        y.chunks_exact(LANES),
        z.chunks_exact(LANES),
    );
    let (tx, ty, tz) = (cx.remainder(), cy.remainder(), cz.remainder());
    for ((a, b), c) in cx.zip(cy).zip(cz) {
        for i in 0..LANES {
            lanes[i] += f(a[i], b[i], c[i]);
        }
    }
    let mut s = lanes.iter().sum::<f32>();
    for ((&a, &b), &c) in tx.iter().zip(ty).zip(tz) {
        s += f(a, b, c);
    }
    s
}

/// Column sums built row by row: `out[c] += sum_r term(r)[c]`, where `add_row(r, acc)` adds
/// row `r`'s terms to the `cols`-long `acc`. The rows are cut into fixed blocks (at most 64,
/// and fewer when `cols` is large, so the partial sums stay within 64 MiB); each block sums
/// its rows in order into its own partial, in parallel, and the partials are added to `out`
/// in block order, so the result depends only on the shape. Each block reads its rows front
/// to back, one pass in memory order.
///
/// Inline into callers with an `#[inline(always)]` `add_row` whose loops are `for` loops:
/// it runs under [`wide`].
#[inline(always)]
pub fn accumulate_rows(rows: usize, out: &mut [f32], add_row: impl Fn(usize, &mut [f32]) + Sync) {
    let cols = out.len();
    if rows == 0 || cols == 0 {
        return;
    }
    let per_block = rows_per_block(rows, cols);
    let partials: Vec<Vec<f32>> = (0..rows.div_ceil(per_block))
        .into_par_iter()
        .map(|b| {
            let mut acc = vec![0.0f32; cols];
            wide(
                #[inline(always)]
                |_| {
                    for r in b * per_block..((b + 1) * per_block).min(rows) {
                        add_row(r, &mut acc);
                    }
                },
            );
            acc
        })
        .collect();
    add_in_order(out, &partials);
}

/// Rows per block in [`accumulate_rows`] and [`rows_with_column_sums`]: at most 64 blocks,
/// fewer when partial sums of `acc_len` floats each would pass 64 MiB.
fn rows_per_block(rows: usize, acc_len: usize) -> usize {
    const MAX_BLOCKS: usize = 64;
    const PARTIAL_BYTES: usize = 64 << 20;
    let blocks = rows
        .min(MAX_BLOCKS)
        .min((PARTIAL_BYTES / (4 * acc_len.max(1))).max(1))
        .max(1);
    rows.div_ceil(blocks).max(1)
}

/// `out += p` for each partial `p`, in order.
fn add_in_order(out: &mut [f32], partials: &[Vec<f32>]) {
    for p in partials {
        wide(
            #[inline(always)]
            |_| {
                for (o, &v) in out.iter_mut().zip(p) {
                    *o += v;
                }
            },
        );
    }
}

/// Writes each `cols`-wide row `r` of `y` by `row(stream, r, y_row, acc)`, which also adds
/// that row's column terms into the `acc_len`-long `acc`, and returns the sums of those
/// terms: an op's output rows and its column reductions (a norm's parameter gradients) in
/// one pass. Blocked and ordered as [`accumulate_rows`], so the sums depend only on the
/// shape. `stream` is the block's [`Stream`] under `streaming`. Inline into callers with an
/// `#[inline(always)]` `row`: it runs under [`wide`].
#[inline(always)]
pub fn rows_with_column_sums(
    streaming: Streaming<'_>,
    y: &mut [f32],
    cols: usize,
    acc_len: usize,
    row: impl Fn(Stream<'_>, usize, &mut [f32], &mut [f32]) + Sync,
) -> Vec<f32> {
    let mut out = vec![0.0f32; acc_len];
    if cols == 0 || y.is_empty() {
        return out;
    }
    let rows = y.len() / cols;
    let per_block = rows_per_block(rows, acc_len);
    let partials: Vec<Vec<f32>> = y
        .par_chunks_mut(per_block * cols)
        .enumerate()
        .map_streamed(streaming, |stream, (b, block)| {
            let mut acc = vec![0.0f32; acc_len];
            wide(
                #[inline(always)]
                |_| {
                    for (k, y_row) in block.chunks_mut(cols).enumerate() {
                        row(stream, b * per_block + k, y_row, &mut acc);
                    }
                },
            );
            acc
        })
        .collect();
    add_in_order(&mut out, &partials);
    out
}

/// The largest of `floor` and the elements of `x`, in 32 lanes. NaN elements are
/// skipped (a comparison with NaN is false).
#[inline(always)]
pub fn max_with_floor(x: &[f32], floor: f32) -> f32 {
    let pick = |m: f32, v: f32| if v > m { v } else { m };
    let mut lanes = [floor; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = pick(*l, v);
        }
    }
    lanes.iter().chain(tail).fold(floor, |m, &v| pick(m, v))
}

/// `y[r] = sum_c x[r, c]`. Panics unless `x.len() == y.len() * cols`.
pub fn sum_rows(x: &[f32], cols: usize, y: &mut [f32]) {
    assert_eq!(x.len(), y.len() * cols, "sum_rows: lengths");
    if cols == 0 {
        y.fill(0.0);
        return;
    }
    y.par_iter_mut()
        .zip(x.par_chunks(cols))
        .for_each(|(y, row)| {
            *y = wide(
                #[inline(always)]
                |_| sum(row),
            )
        });
}

/// `y[c] = sum_r x[r, c]` (by [`accumulate_rows`]; with fewer rows than threads, by pieces
/// of columns in parallel, each summing its rows in order: the same additions in the same
/// order). Panics unless `x.len() == rows * y.len()`.
pub fn sum_cols(x: &[f32], rows: usize, y: &mut [f32]) {
    let cols = y.len();
    assert_eq!(x.len(), rows * cols, "sum_cols: lengths");
    y.fill(0.0);
    if rows < rayon::current_num_threads() {
        y.par_chunks_mut(PIECE).enumerate().for_each(|(k, ys)| {
            wide(
                #[inline(always)]
                |_| {
                    let n = ys.len();
                    for r in 0..rows {
                        let at = r * cols + k * PIECE;
                        for (o, &v) in ys.iter_mut().zip(&x[at..at + n]) {
                            *o += v;
                        }
                    }
                },
            )
        });
        return;
    }
    accumulate_rows(
        rows,
        y,
        #[inline(always)]
        |r, acc| {
            for (a, &v) in acc.iter_mut().zip(&x[r * cols..(r + 1) * cols]) {
                *a += v;
            }
        },
    );
}

/// Index of the largest element of each row: the first one wins ties, NaN is never chosen,
/// and a row with no element above `-f32::MAX` (or an empty row) gives 0.
pub fn argmax_rows(x: &[f32], cols: usize, idx: &mut [usize]) {
    assert_eq!(x.len(), idx.len() * cols, "argmax_rows: lengths");
    if cols == 0 {
        idx.fill(0);
        return;
    }
    idx.par_iter_mut()
        .zip(x.par_chunks(cols))
        .for_each(|(out, row)| {
            *out = wide(
                #[inline(always)]
                |_| first_max_above(row, -f32::MAX).map_or(0, |(_, at)| at),
            );
        });
}

/// The largest element of `x` above `floor` and its first position, in one pass: each of
/// `LANES` lanes keeps its largest value and the chunk where that value first appeared (a
/// strict comparison, so NaN is never taken); the lanes then give the largest value at its
/// smallest position. `None` when no element is above `floor`.
#[inline(always)]
fn first_max_above(x: &[f32], floor: f32) -> Option<(f32, usize)> {
    // Chunk numbers are u32 lanes (eight to a vector register): longer rows go in blocks.
    first_max_in_blocks(x, floor, LANES << 24)
}

/// [`first_max_above`] over blocks of `block_len` elements (a multiple of `LANES` below
/// `2^32 LANES`), merged in order.
#[inline(always)]
fn first_max_in_blocks(x: &[f32], floor: f32, block_len: usize) -> Option<(f32, usize)> {
    let mut best: Option<(f32, usize)> = None;
    for (b, block) in x.chunks(block_len).enumerate() {
        let mut value = [floor; LANES];
        let mut chunk = [0u32; LANES];
        let chunks = block.chunks_exact(LANES);
        let tail = chunks.remainder();
        for (c, ch) in chunks.enumerate() {
            // Chunk numbers only grow, so a lane's chunk is the larger of its own and this
            // one where the value is taken. Both updates are plain maxima, which stay in
            // registers (a select on `take` becomes masked stores to memory).
            let c = c as u32;
            for j in 0..LANES {
                let take = ch[j] > value[j];
                value[j] = if take { ch[j] } else { value[j] };
                chunk[j] = chunk[j].max(c * u32::from(take));
            }
        }
        // The lanes halve down to one (largest value, then smallest position; a lane that
        // took nothing holds `floor` and loses to every lane that did), then the tail
        // (after every chunk, so it wins only when larger). Fixed-count loops keep the
        // lanes in vector registers.
        let start = b * block_len;
        let mut pos = [0usize; LANES];
        for j in 0..LANES {
            pos[j] = start + chunk[j] as usize * LANES + j;
        }
        for width in [16, 8, 4, 2, 1] {
            for j in 0..width {
                let (v, p) = (value[j + width], pos[j + width]);
                let take = v > value[j] || (v == value[j] && p < pos[j]);
                value[j] = if take { v } else { value[j] };
                pos[j] = if take { p } else { pos[j] };
            }
        }
        let mut candidate = (value[0] > floor).then_some((value[0], pos[0]));
        let tail_start = start + block.len() - tail.len();
        for (i, &v) in tail.iter().enumerate() {
            if v > candidate.map_or(floor, |(m, _)| m) {
                candidate = Some((v, tail_start + i));
            }
        }
        best = match (best, candidate) {
            // Neither is NaN (both were taken by a strict comparison).
            (Some((m, at)), Some((v, _))) if v <= m => Some((m, at)),
            (best, None) => best,
            (_, candidate) => candidate,
        };
    }
    best
}

/// The `k` largest elements of each row, in descending order with ties broken by the smaller
/// index; NaN is never chosen (a row with fewer than `k` other values pads with NaN / -1).
pub fn top_k_rows(x: &[f32], cols: usize, k: usize, vals: &mut [f32], idx: &mut [i32]) {
    let rows = vals.len() / k.max(1);
    assert!(
        x.len() == rows * cols && vals.len() == idx.len(),
        "top_k_rows: lengths"
    );
    if k == 0 {
        return;
    }
    vals.par_chunks_mut(k)
        .zip(idx.par_chunks_mut(k))
        .zip(x.par_chunks(cols.max(1)))
        .for_each(|((vals, idx), row)| {
            if k <= SMALL_K {
                return wide(
                    #[inline(always)]
                    |_| top_k_by_insertion(row, vals, idx),
                );
            }
            let mut order: Vec<usize> = (0..row.len()).filter(|&i| !row[i].is_nan()).collect();
            let take = k.min(order.len());
            let by_rank = |&a: &usize, &b: &usize| row[b].total_cmp(&row[a]).then(a.cmp(&b));
            if take < order.len() {
                order.select_nth_unstable_by(take, by_rank);
            }
            order.truncate(take);
            order.sort_unstable_by(by_rank);
            for j in 0..k {
                (vals[j], idx[j]) = match order.get(j) {
                    Some(&i) => (row[i], i as i32),
                    None => (f32::NAN, -1),
                };
            }
        });
}

/// Largest `k` that [`top_k_rows`] keeps in a sorted buffer while scanning the row once.
const SMALL_K: usize = 64;

/// [`top_k_rows`] for one row and `vals.len() = k <= SMALL_K`: the best `k` seen so far in
/// descending order, a new value entering only when it beats the last kept one strictly
/// (so among equal values the earlier index stays ahead), NaN skipped; unfilled slots pad
/// with NaN / -1.
#[inline(always)]
fn top_k_by_insertion(row: &[f32], vals: &mut [f32], idx: &mut [i32]) {
    let k = vals.len();
    let mut kept = 0;
    // Once the buffer is full, most chunks hold nothing above its last value: a branch-free
    // test of the whole chunk (vectorized when inlined under `wide`) skips them.
    const CHUNK: usize = 16;
    for (c, chunk) in row.chunks(CHUNK).enumerate() {
        if kept == k {
            let kth = vals[k - 1];
            if !chunk.iter().fold(false, |a, &v| a | (v > kth)) {
                continue;
            }
        }
        for (j, &v) in chunk.iter().enumerate() {
            kept = top_k_offer(vals, idx, kept, v, c * CHUNK + j);
        }
    }
    vals[kept..].fill(f32::NAN);
    idx[kept..].fill(-1);
}

/// Offers `v` (at index `i`) to the descending buffer `vals`/`idx` holding `kept` entries;
/// returns the new count. NaN and values not beating a full buffer's last are refused.
#[inline(always)]
fn top_k_offer(vals: &mut [f32], idx: &mut [i32], kept: usize, v: f32, i: usize) -> usize {
    let k = vals.len();
    if v.is_nan() || (kept == k && v <= vals[k - 1]) {
        return kept;
    }
    // First slot holding a smaller value (equal ones stay ahead of `v`).
    let mut at = kept.min(k - 1);
    while at > 0 && vals[at - 1] < v {
        at -= 1;
    }
    let last = kept.min(k - 1);
    vals.copy_within(at..last, at + 1);
    idx.copy_within(at..last, at + 1);
    (vals[at], idx[at]) = (v, i as i32);
    (kept + 1).min(k)
}

/// [`argmax_rows`] over `rows` rows, each index stored as `from(index)` (an `i32`, or an `f32`
/// where the C++ API returns indices as floats).
pub fn argmax_rows_into<T>(
    x: &[f32],
    (rows, cols): (usize, usize),
    idx: &mut [T],
    from: impl Fn(usize) -> T,
) {
    let mut at = vec![0usize; rows];
    argmax_rows(x, cols, &mut at);
    idx.iter_mut().zip(&at).for_each(|(o, &i)| *o = from(i));
}

/// `counts[r] = (#{x > lo}, #{x > hi})` per row (strict comparisons).
pub fn rows_count_above(x: &[f32], cols: usize, lo: f32, hi: f32, counts: &mut [i32]) {
    assert!(
        counts.len().is_multiple_of(2) && x.len() == counts.len() / 2 * cols,
        "rows_count_above: lengths"
    );
    if cols == 0 {
        counts.fill(0);
        return;
    }
    counts
        .par_chunks_mut(2)
        .zip(x.par_chunks(cols))
        .for_each(|(c, row)| {
            // Both counts in one pass, in vector lanes of integer 0/1 increments.
            let (n_lo, n_hi) = wide(
                #[inline(always)]
                |_| {
                    let (mut l, mut h) = ([0u32; LANES], [0u32; LANES]);
                    let chunks = row.chunks_exact(LANES);
                    let tail = chunks.remainder();
                    for ch in chunks {
                        for j in 0..LANES {
                            l[j] += u32::from(ch[j] > lo);
                            h[j] += u32::from(ch[j] > hi);
                        }
                    }
                    let lanes = |a: [u32; LANES]| a.iter().map(|&v| v as usize).sum::<usize>();
                    let above = |t: f32| tail.iter().filter(|&&v| v > t).count();
                    (lanes(l) + above(lo), lanes(h) + above(hi))
                },
            );
            (c[0], c[1]) = (n_lo as i32, n_hi as i32);
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_cols_of_few_rows_adds_as_the_blocked_path() {
        // 3 rows: split by columns in a pool of 4 threads, by row blocks in a pool of 1;
        // the same additions in the same order, so the same bits.
        let (rows, cols) = (3, 2 * PIECE + 77);
        let x: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919) % 2003) as f32 * 0.013 - 13.0)
            .collect();
        let in_pool = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut y = vec![f32::NAN; cols];
            pool.install(|| sum_cols(&x, rows, &mut y));
            y
        };
        let (by_columns, by_rows) = (in_pool(4), in_pool(1));
        assert_eq!(by_columns, by_rows);
        let want: f32 = (0..rows).map(|r| x[r * cols + cols - 1]).sum();
        assert_eq!(by_columns[cols - 1], want);
    }

    #[test]
    fn hand_computed() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2 x 3
        let mut r = [0.0; 2];
        sum_rows(&x, 3, &mut r);
        assert_eq!(r, [6.0, 15.0]);
        let mut c = [0.0; 3];
        sum_cols(&x, 2, &mut c);
        assert_eq!(c, [5.0, 7.0, 9.0]);
        let mut i = [9; 2];
        argmax_rows(
            &[3.0, 7.0, 7.0, f32::NAN, f32::NEG_INFINITY, -1.0],
            3,
            &mut i,
        );
        assert_eq!(i, [1, 2]);
        let (mut v, mut ix) = ([0.0; 4], [0; 4]);
        top_k_rows(&[0.5, 2.0, 2.0, f32::NAN, 1.0, -3.0], 3, 2, &mut v, &mut ix);
        assert_eq!((v, ix), ([2.0, 2.0, 1.0, -3.0], [1, 2, 1, 2]));
        let mut counts = [0; 4];
        rows_count_above(&[0.5, 1.0, 1.5, 0.0, 2.0, 3.0], 3, 0.5, 1.5, &mut counts);
        assert_eq!(counts, [2, 0, 2, 2]);
    }

    #[test]
    fn one_pass_argmax_matches_a_scan_for_the_first_strict_maximum() {
        // Few distinct values (ties across lanes and chunks), NaN, -inf and -f32::MAX, at
        // lengths around the lane count so both the lanes and the tail hold the winner.
        let mut state = 777u32;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            state >> 24
        };
        for n in [
            1,
            5,
            LANES - 1,
            LANES,
            LANES + 1,
            2 * LANES + 3,
            9 * LANES + 17,
        ] {
            for _ in 0..200 {
                let row: Vec<f32> = (0..n)
                    .map(|_| match next() % 11 {
                        0 => f32::NAN,
                        1 => f32::NEG_INFINITY,
                        2 => -f32::MAX,
                        v => v as f32 - 6.0,
                    })
                    .collect();
                let mut want: Option<(f32, usize)> = None;
                for (i, &v) in row.iter().enumerate() {
                    if v > want.map_or(-f32::MAX, |(m, _)| m) {
                        want = Some((v, i));
                    }
                }
                assert_eq!(first_max_above(&row, -f32::MAX), want, "{row:?}");
                // Blocks of two chunks: the merge across blocks keeps the first maximum.
                assert_eq!(
                    first_max_in_blocks(&row, -f32::MAX, 2 * LANES),
                    want,
                    "{row:?}"
                );
                let mut at = [usize::MAX];
                argmax_rows(&row, n, &mut at);
                assert_eq!(at[0], want.map_or(0, |(_, i)| i), "{row:?}");
            }
        }
        // A row with nothing above the floor.
        assert_eq!(
            first_max_above(&[f32::NAN, -f32::MAX, f32::NEG_INFINITY], -f32::MAX),
            None
        );
    }

    #[test]
    fn top_k_by_insertion_matches_a_full_sort() {
        // Rows with many ties and NaNs; every k from 1 to past the row length.
        let mut state = 12345u32;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            state >> 16
        };
        for _ in 0..200 {
            let n = (next() % 40) as usize;
            let row: Vec<f32> = (0..n)
                .map(|_| match next() % 10 {
                    0 => f32::NAN,
                    v => (v % 5) as f32 - 2.0,
                })
                .collect();
            for k in 1..=n + 2 {
                let mut order: Vec<usize> = (0..n).filter(|&i| !row[i].is_nan()).collect();
                order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
                let (mut v, mut ix) = (vec![0.0f32; k], vec![0i32; k]);
                top_k_by_insertion(&row, &mut v, &mut ix);
                for j in 0..k {
                    match order.get(j) {
                        Some(&i) => assert_eq!((v[j], ix[j]), (row[i], i as i32), "{row:?} k={k}"),
                        None => assert!(v[j].is_nan() && ix[j] == -1, "{row:?} k={k}"),
                    }
                }
            }
        }
    }

    #[test]
    fn lane_reductions_cover_every_element_and_the_tail() {
        // Lengths around the lane count, so both the lane loop and the tail carry values.
        for n in [0, 1, LANES - 1, LANES, LANES + 1, 3 * LANES + 7] {
            let x: Vec<f32> = (0..n).map(|i| (i % 13) as f32 - 6.0).collect();
            let want: f32 = x.iter().sum();
            assert_eq!(sum(&x), want, "n={n}");
            assert_eq!(sum_map(&x, |v| 2.0 * v), 2.0 * want, "n={n}");
            let top = x.iter().copied().fold(-100.0f32, f32::max);
            assert_eq!(max_with_floor(&x, -100.0), top, "n={n}");
            assert_eq!(max_with_floor(&x, 50.0), 50.0, "n={n}");
        }
        let mut with_nan = vec![1.0f32; 2 * LANES + 3];
        with_nan[5] = f32::NAN;
        with_nan[2 * LANES + 1] = 4.0;
        assert_eq!(max_with_floor(&with_nan, -1e30), 4.0);
    }
}
