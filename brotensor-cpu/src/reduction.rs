//! Row and column reductions over row-major `(rows, cols)` FP32 matrices.

use rayon::prelude::*;

use crate::simd::wide;

/// Independent accumulators in the lane-wise reductions: enough that the adds of a
/// 16-wide (AVX-512) or 8-wide (AVX2) loop do not wait on each other's latency.
const LANES: usize = 32;

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

/// `y[c] = sum_r x[r, c]`. Panics unless `x.len() == rows * y.len()`.
pub fn sum_cols(x: &[f32], rows: usize, y: &mut [f32]) {
    let cols = y.len();
    assert_eq!(x.len(), rows * cols, "sum_cols: lengths");
    const BLOCK: usize = 256;
    y.par_chunks_mut(BLOCK).enumerate().for_each(|(b, out)| {
        out.fill(0.0);
        let c0 = b * BLOCK;
        wide(
            #[inline(always)]
            |_| {
                for r in 0..rows {
                    let row = &x[r * cols + c0..r * cols + c0 + out.len()];
                    for (o, v) in out.iter_mut().zip(row) {
                        *o += v;
                    }
                }
            },
        )
    });
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
            let mut best = -f32::MAX;
            let mut at = 0;
            for (i, &v) in row.iter().enumerate() {
                if v > best {
                    best = v;
                    at = i;
                }
            }
            *out = at;
        });
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
            c[0] = row.iter().filter(|&&v| v > lo).count() as i32;
            c[1] = row.iter().filter(|&&v| v > hi).count() as i32;
        });
}

#[cfg(test)]
mod tests {
    use super::*;

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
