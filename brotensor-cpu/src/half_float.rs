//! FP32 math over 16-bit float storage (F16, BF16): the one dtype policy, FP32 arithmetic
//! with one rounding (to nearest even) on the way out, applied without a full-size FP32 copy
//! of any operand.
//!
//! The element-wise maps widen a block of [`BLOCK`] elements into an FP32 buffer on the
//! stack, run the same scalar math as the FP32 maps on it inside [`wide`], and narrow the
//! results back, in parallel chunks: they read and write the 16-bit bytes and nothing else.
//! The row ops run the FP32 row kernels on blocks of whole rows widened into FP32 scratch (a
//! row longer than a block is one block): [`par_rows`] in parallel, cache-sized blocks of
//! [`PAR_ROW_BLOCK`] elements per operand, for kernels whose rows are independent;
//! [`by_rows`] one block of [`ROW_BLOCK`] elements after another (the kernel parallel inside)
//! for kernels that carry state across blocks, such as accumulated parameter gradients. The
//! conversions are [`FloatElem`]'s (F16C instructions for F16 where the CPU has them).

use std::ops::Range;

use rayon::prelude::*;

use crate::cast::FloatElem;
use crate::simd::{wide, MulAdd};

/// Elements widened at a time into a stack buffer by the element-wise maps.
pub const BLOCK: usize = 256;

/// Elements per parallel task of the element-wise maps (as the FP32 maps).
const CHUNK: usize = 1 << 15;

/// Elements per operand that [`by_rows`] widens at a time (whole rows, at least one).
pub const ROW_BLOCK: usize = 1 << 18;

/// Elements per operand of one parallel task of [`par_rows`] (whole rows, at least one):
/// its FP32 copies stay in the core's cache.
pub const PAR_ROW_BLOCK: usize = 1 << 14;

/// Elements per parallel task of [`widen_par`] and [`narrow_par`].
const CONVERT_CHUNK: usize = 1 << 13;

/// `dst = src` widened (exact), in parallel chunks. Equal lengths.
fn widen_par<E: FloatElem>(src: &[E], dst: &mut [f32]) {
    dst.par_chunks_mut(CONVERT_CHUNK)
        .zip(src.par_chunks(CONVERT_CHUNK))
        .for_each(|(d, s)| E::widen(s, d));
}

/// `dst = src` narrowed (one rounding), in parallel chunks. Equal lengths.
fn narrow_par<E: FloatElem>(src: &[f32], dst: &mut [E]) {
    dst.par_chunks_mut(CONVERT_CHUNK)
        .zip(src.par_chunks(CONVERT_CHUNK))
        .for_each(|(d, s)| E::narrow(s, d));
}

/// `out[i] = f(m, x[i])` over 16-bit storage, FP32 inside, where `fits(x)` holds for every
/// element of a block; such a block runs `fast` on the vector path, any other block `exact`
/// element by element (as [`crate::elementwise::map_unary_fitted`]). Panics if the lengths
/// differ.
pub fn map_unary<E: FloatElem>(
    x: &[E],
    out: &mut [E],
    fits: impl Fn(f32) -> bool + Sync,
    fast: impl Fn(MulAdd, f32) -> f32 + Sync,
    exact: impl Fn(f32) -> f32 + Sync,
) {
    assert_eq!(x.len(), out.len(), "half_float::map_unary: length mismatch");
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(o, x)| {
            let (mut a, mut r) = ([0.0f32; BLOCK], [0.0f32; BLOCK]);
            wide(
                #[inline(always)]
                |m| {
                    for (xs, os) in x.chunks(BLOCK).zip(o.chunks_mut(BLOCK)) {
                        let n = xs.len();
                        E::widen(xs, &mut a[..n]);
                        unary_block(m, &a[..n], &mut r[..n], &fits, &fast, &exact);
                        E::narrow(&r[..n], os);
                    }
                },
            )
        });
}

/// [`map_unary`] in place.
pub fn map_unary_inplace<E: FloatElem>(
    y: &mut [E],
    fits: impl Fn(f32) -> bool + Sync,
    fast: impl Fn(MulAdd, f32) -> f32 + Sync,
    exact: impl Fn(f32) -> f32 + Sync,
) {
    y.par_chunks_mut(CHUNK).for_each(|y| {
        let (mut a, mut r) = ([0.0f32; BLOCK], [0.0f32; BLOCK]);
        wide(
            #[inline(always)]
            |m| {
                for ys in y.chunks_mut(BLOCK) {
                    let n = ys.len();
                    E::widen(ys, &mut a[..n]);
                    unary_block(m, &a[..n], &mut r[..n], &fits, &fast, &exact);
                    E::narrow(&r[..n], ys);
                }
            },
        )
    });
}

/// One block of [`map_unary`]: `r = fast(a)` when every element fits, else `exact(a)`.
#[inline(always)]
fn unary_block(
    m: MulAdd,
    a: &[f32],
    r: &mut [f32],
    fits: &impl Fn(f32) -> bool,
    fast: &impl Fn(MulAdd, f32) -> f32,
    exact: &impl Fn(f32) -> f32,
) {
    if a.iter().fold(true, |all, &v| all & fits(v)) {
        for (r, &v) in r.iter_mut().zip(a) {
            *r = fast(m, v);
        }
    } else {
        for (r, &v) in r.iter_mut().zip(a) {
            *r = exact(v);
        }
    }
}

/// `out[i] = f(m, x[i], y[i])` over 16-bit storage, FP32 inside; blocks whose `x` all fit
/// run `fast`, others `exact` (as [`crate::elementwise::map_binary_fitted`]). Panics if the
/// lengths differ.
pub fn map_binary<E: FloatElem>(
    x: &[E],
    y: &[E],
    out: &mut [E],
    fits: impl Fn(f32) -> bool + Sync,
    fast: impl Fn(MulAdd, f32, f32) -> f32 + Sync,
    exact: impl Fn(f32, f32) -> f32 + Sync,
) {
    assert!(
        x.len() == out.len() && y.len() == out.len(),
        "half_float::map_binary: length mismatch"
    );
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK).zip(y.par_chunks(CHUNK)))
        .for_each(|(o, (x, y))| {
            let (mut a, mut b) = ([0.0f32; BLOCK], [0.0f32; BLOCK]);
            wide(
                #[inline(always)]
                |m| {
                    for ((xs, ys), os) in x
                        .chunks(BLOCK)
                        .zip(y.chunks(BLOCK))
                        .zip(o.chunks_mut(BLOCK))
                    {
                        let n = xs.len();
                        E::widen(xs, &mut a[..n]);
                        E::widen(ys, &mut b[..n]);
                        binary_block(m, &mut a[..n], &b[..n], &fits, &fast, &exact);
                        E::narrow(&a[..n], os);
                    }
                },
            )
        });
}

/// `x[i] = f(m, x[i], y[i])` over 16-bit storage, in place on the first operand; blocks
/// whose `x` all fit run `fast`, others `exact`. Panics if the lengths differ.
pub fn map_binary_inplace<E: FloatElem>(
    x: &mut [E],
    y: &[E],
    fits: impl Fn(f32) -> bool + Sync,
    fast: impl Fn(MulAdd, f32, f32) -> f32 + Sync,
    exact: impl Fn(f32, f32) -> f32 + Sync,
) {
    assert_eq!(
        x.len(),
        y.len(),
        "half_float::map_binary_inplace: length mismatch"
    );
    x.par_chunks_mut(CHUNK)
        .zip(y.par_chunks(CHUNK))
        .for_each(|(x, y)| {
            let (mut a, mut b) = ([0.0f32; BLOCK], [0.0f32; BLOCK]);
            wide(
                #[inline(always)]
                |m| {
                    for (xs, ys) in x.chunks_mut(BLOCK).zip(y.chunks(BLOCK)) {
                        let n = xs.len();
                        E::widen(xs, &mut a[..n]);
                        E::widen(ys, &mut b[..n]);
                        binary_block(m, &mut a[..n], &b[..n], &fits, &fast, &exact);
                        E::narrow(&a[..n], xs);
                    }
                },
            )
        });
}

/// One block of [`map_binary`]: `a = fast(a, b)` when every `a` fits, else `exact(a, b)`.
#[inline(always)]
fn binary_block(
    m: MulAdd,
    a: &mut [f32],
    b: &[f32],
    fits: &impl Fn(f32) -> bool,
    fast: &impl Fn(MulAdd, f32, f32) -> f32,
    exact: &impl Fn(f32, f32) -> f32,
) {
    if a.iter().fold(true, |all, &v| all & fits(v)) {
        for (a, &b) in a.iter_mut().zip(b) {
            *a = fast(m, *a, b);
        }
    } else {
        for (a, &b) in a.iter_mut().zip(b) {
            *a = exact(*a, b);
        }
    }
}

/// `out[i] = value` rounded once to `E`.
pub fn fill<E: FloatElem>(out: &mut [E], value: f32) {
    let mut one = [E::default()];
    E::narrow(&[value], &mut one);
    out.par_chunks_mut(CHUNK).for_each(|c| c.fill(one[0]));
}

/// [`crate::elementwise::broadcast`] over 16-bit `y` and `v`: `y (+|*)= v` in FP32, each
/// element of `y` rounded once.
pub fn broadcast<E: FloatElem>(
    y: &mut [E],
    v: &[E],
    inner: usize,
    per_row: bool,
    v_len: usize,
    repeat: usize,
    multiply: bool,
) {
    let inner = inner.max(1);
    let mut wv = vec![0.0f32; v.len()];
    E::widen(v, &mut wv);
    let wv = &wv;
    y.par_chunks_mut(inner).enumerate().for_each(|(r, row)| {
        let (mut a, mut b) = ([0.0f32; BLOCK], [0.0f32; BLOCK]);
        let at = r / repeat.max(1) * inner;
        for (k, ys) in row.chunks_mut(BLOCK).enumerate() {
            let n = ys.len();
            E::widen(ys, &mut a[..n]);
            if per_row {
                b[..n].fill(wv[r % v_len]);
            } else {
                let from = at + k * BLOCK;
                b[..n].copy_from_slice(&wv[from..from + n]);
            }
            for (a, &b) in a[..n].iter_mut().zip(&b[..n]) {
                if multiply {
                    *a *= b
                } else {
                    *a += b
                }
            }
            E::narrow(&a[..n], ys);
        }
    });
}

/// A 16-bit output of [`by_rows`]: its elements, how many belong to each row, and whether
/// the kernel reads its old values (an accumulation, or an output it leaves partly
/// unwritten); an output it only writes starts undefined in FP32.
pub struct RowOut<'a, E> {
    /// The output's elements, `rows * per_row` of them.
    pub data: &'a mut [E],
    /// Elements per row.
    pub per_row: usize,
    /// Whether the kernel reads the old values.
    pub reads: bool,
}

/// Runs a row-wise FP32 kernel over 16-bit operands, a block of whole rows at a time: each
/// input's (`(elements, per_row)`) and each read output's rows of the block are widened into
/// FP32 scratch, `f(rows, inputs, outputs)` runs on them (`rows` the block's range, for
/// operands the caller slices itself, such as F32 statistics), and the outputs are narrowed
/// back. Blocks run one after another (the kernel parallelizes inside a block), so `f` may
/// accumulate into state it holds across blocks. Panics if an operand holds fewer than
/// `rows * per_row` elements.
pub fn by_rows<E: FloatElem>(
    rows: usize,
    inputs: &[(&[E], usize)],
    outputs: &mut [RowOut<'_, E>],
    mut f: impl FnMut(Range<usize>, &[&[f32]], &mut [&mut [f32]]),
) {
    let widest = inputs
        .iter()
        .map(|i| i.1)
        .chain(outputs.iter().map(|o| o.per_row))
        .max()
        .unwrap_or(0)
        .max(1);
    let k = (ROW_BLOCK / widest).clamp(1, rows.max(1));
    let mut wide_in: Vec<Vec<f32>> = inputs.iter().map(|i| vec![0.0; k * i.1]).collect();
    let mut wide_out: Vec<Vec<f32>> = outputs.iter().map(|o| vec![0.0; k * o.per_row]).collect();
    let mut r0 = 0;
    while r0 < rows {
        let r1 = (r0 + k).min(rows);
        let n = r1 - r0;
        for ((src, w), buf) in inputs.iter().zip(&mut wide_in) {
            widen_par(&src[r0 * w..r1 * w], &mut buf[..n * w]);
        }
        for (o, buf) in outputs.iter().zip(&mut wide_out) {
            if o.reads {
                let w = o.per_row;
                widen_par(&o.data[r0 * w..r1 * w], &mut buf[..n * w]);
            }
        }
        {
            let ins: Vec<&[f32]> = wide_in
                .iter()
                .zip(inputs)
                .map(|(b, i)| &b[..n * i.1])
                .collect();
            let mut outs: Vec<&mut [f32]> = wide_out
                .iter_mut()
                .zip(outputs.iter())
                .map(|(b, o)| &mut b[..n * o.per_row])
                .collect();
            f(r0..r1, &ins, &mut outs);
        }
        for (o, buf) in outputs.iter_mut().zip(&wide_out) {
            let w = o.per_row;
            narrow_par(&buf[..n * w], &mut o.data[r0 * w..r1 * w]);
        }
        r0 = r1;
    }
}

/// [`by_rows`] for a kernel whose rows are independent (`f` keeps no state across blocks):
/// blocks of about [`PAR_ROW_BLOCK`] elements per operand run in parallel, each on its own
/// FP32 scratch, so the 16-bit data is converted where it is used.
pub fn par_rows<E: FloatElem>(
    rows: usize,
    inputs: &[(&[E], usize)],
    outputs: &mut [RowOut<'_, E>],
    f: impl Fn(Range<usize>, &[&[f32]], &mut [&mut [f32]]) + Sync,
) {
    let widest = inputs
        .iter()
        .map(|i| i.1)
        .chain(outputs.iter().map(|o| o.per_row))
        .max()
        .unwrap_or(0)
        .max(1);
    let k = (PAR_ROW_BLOCK / widest).clamp(1, rows.max(1));
    let blocks = rows.div_ceil(k);
    let out_shape: Vec<(usize, bool)> = outputs.iter().map(|o| (o.per_row, o.reads)).collect();
    // Each output cut into its blocks' rows, regrouped by block.
    let mut by_block: Vec<Vec<&mut [E]>> = (0..blocks).map(|_| Vec::new()).collect();
    for o in outputs.iter_mut() {
        let w = o.per_row;
        let mut pieces = o.data[..rows * w].chunks_mut((k * w).max(1));
        for b in by_block.iter_mut() {
            b.push(if w == 0 {
                &mut []
            } else {
                pieces.next().unwrap_or(&mut [])
            });
        }
    }
    by_block.into_par_iter().enumerate().for_each_init(
        || {
            let ins: Vec<Vec<f32>> = inputs.iter().map(|i| vec![0.0; k * i.1]).collect();
            let outs: Vec<Vec<f32>> = out_shape.iter().map(|o| vec![0.0; k * o.0]).collect();
            (ins, outs)
        },
        |(wide_in, wide_out), (b, mut outs)| {
            let (r0, r1) = (b * k, ((b + 1) * k).min(rows));
            let n = r1 - r0;
            for ((src, w), buf) in inputs.iter().zip(wide_in.iter_mut()) {
                E::widen(&src[r0 * w..r1 * w], &mut buf[..n * w]);
            }
            for ((o, &(w, reads)), buf) in outs.iter().zip(&out_shape).zip(wide_out.iter_mut()) {
                if reads {
                    E::widen(o, &mut buf[..n * w]);
                }
            }
            {
                let ins: Vec<&[f32]> = wide_in
                    .iter()
                    .zip(inputs)
                    .map(|(buf, i)| &buf[..n * i.1])
                    .collect();
                let mut o32: Vec<&mut [f32]> = wide_out
                    .iter_mut()
                    .zip(&out_shape)
                    .map(|(buf, o)| &mut buf[..n * o.0])
                    .collect();
                f(r0..r1, &ins, &mut o32);
            }
            for ((o, &(w, _)), buf) in outs.iter_mut().zip(&out_shape).zip(wide_out.iter()) {
                E::narrow(&buf[..n * w], o);
            }
        },
    );
}

/// [`crate::embedding::scatter_rows_add`] over 16-bit storage: `dst[ids[m], :] += src[m, :]`,
/// each hit row of `dst` widened once, its additions made in FP32 in id order, and rounded
/// once; rows no id hits are not touched. Ids outside `[0, rows)` are skipped.
pub fn scatter_rows_add<E: FloatElem>(src: &[E], cols: usize, ids: &[i32], dst: &mut [E]) {
    if cols == 0 {
        return;
    }
    let rows = dst.len() / cols;
    let row_of = |id: i32| usize::try_from(id).ok().filter(|&r| r < rows);
    // (row, m) for the valid ids, by row and then in id order (a stable sort).
    let mut hits: Vec<(usize, usize)> = ids
        .iter()
        .enumerate()
        .filter_map(|(m, &id)| row_of(id).map(|r| (r, m)))
        .collect();
    hits.sort_by_key(|&(r, _)| r);
    let hits = &hits;
    dst.par_chunks_mut(cols).enumerate().for_each_init(
        || (vec![0.0f32; cols], vec![0.0f32; cols]),
        |(acc, s), (r, d)| {
            let from = hits.partition_point(|&(hr, _)| hr < r);
            if hits.get(from).is_none_or(|&(hr, _)| hr != r) {
                return;
            }
            E::widen(d, acc);
            for &(_, m) in hits[from..].iter().take_while(|&&(hr, _)| hr == r) {
                E::widen(&src[m * cols..(m + 1) * cols], s);
                acc.iter_mut().zip(s.iter()).for_each(|(a, v)| *a += v);
            }
            E::narrow(acc, d);
        },
    );
}

/// The FP32 values of a small 16-bit operand (a per-column parameter), widened whole.
pub fn widened<E: FloatElem>(x: &[E]) -> Vec<f32> {
    let mut w = vec![0.0f32; x.len()];
    widen_par(x, &mut w);
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    fn halves(n: usize) -> Vec<f16> {
        (0..n)
            .map(|i| f16::from_f32((i % 211) as f32 * 0.37 - 39.0))
            .collect()
    }

    #[test]
    fn maps_round_the_fp32_result_once() {
        // Lengths that end mid-block and span several chunks.
        for n in [0, 1, 255, 257, CHUNK + 3] {
            let x = halves(n);
            let y: Vec<f16> = x
                .iter()
                .map(|v| f16::from_f32(v.to_f32() * 0.5 + 1.0))
                .collect();
            let mut out = vec![f16::ZERO; n];
            map_unary(&x, &mut out, |_| true, |_, v| v * 3.0, |_| f32::NAN);
            for (o, v) in out.iter().zip(&x) {
                assert_eq!(*o, f16::from_f32(v.to_f32() * 3.0));
            }
            map_binary(
                &x,
                &y,
                &mut out,
                |_| true,
                |_, a, b| a * b - 1.0,
                |_, _| 0.0,
            );
            for ((o, a), b) in out.iter().zip(&x).zip(&y) {
                assert_eq!(*o, f16::from_f32(a.to_f32() * b.to_f32() - 1.0));
            }
            let mut inplace = x.clone();
            map_binary_inplace(&mut inplace, &y, |_| true, |_, a, b| a + b, |_, _| 0.0);
            for ((o, a), b) in inplace.iter().zip(&x).zip(&y) {
                assert_eq!(*o, f16::from_f32(a.to_f32() + b.to_f32()));
            }
            map_unary_inplace(&mut inplace, |_| true, |_, v| -v, |_| 0.0);
            for ((o, a), b) in inplace.iter().zip(&x).zip(&y) {
                assert_eq!(*o, -f16::from_f32(a.to_f32() + b.to_f32()));
            }
        }
    }

    #[test]
    fn a_block_that_does_not_fit_takes_the_exact_path() {
        let mut x: Vec<bf16> = (0..1000).map(|i| bf16::from_f32(i as f32)).collect();
        x[700] = bf16::from_f32(1e30);
        let mut out = vec![bf16::ZERO; x.len()];
        map_unary(&x, &mut out, |v| v < 1e20, |_, _| 1.0, |_| 2.0);
        // Block 2 (elements 512..768) holds the outlier.
        for (i, o) in out.iter().enumerate() {
            let want = if (512..768).contains(&i) { 2.0 } else { 1.0 };
            assert_eq!(o.to_f32(), want, "{i}");
        }
    }

    #[test]
    fn broadcast_and_fill_match_the_definition() {
        let (rows, inner) = (7, 300);
        let v: Vec<bf16> = (0..rows * inner)
            .map(|i| bf16::from_f32(i as f32 * 0.01))
            .collect();
        let base: Vec<bf16> = (0..rows * inner)
            .map(|i| bf16::from_f32((i % 13) as f32))
            .collect();
        let mut y = base.clone();
        broadcast(&mut y, &v, inner, false, v.len(), 1, false);
        for i in 0..y.len() {
            assert_eq!(
                y[i],
                bf16::from_f32(base[i].to_f32() + v[i].to_f32()),
                "{i}"
            );
        }
        let mut y = base.clone();
        broadcast(&mut y, &v[..3], inner, true, 3, usize::MAX, true);
        for i in 0..y.len() {
            let w = v[(i / inner) % 3].to_f32();
            assert_eq!(y[i], bf16::from_f32(base[i].to_f32() * w), "{i}");
        }
        fill(&mut y, 1.0 + 2f32.powi(-9));
        assert!(y.iter().all(|&v| v == bf16::ONE));
    }

    #[test]
    fn by_rows_covers_every_row_and_keeps_state_across_blocks() {
        // Rows wider than a block, and many rows per block.
        for (rows, cols) in [(3, ROW_BLOCK + 5), (3000, 100), (0, 4)] {
            let x = halves(rows * cols);
            let mut y = vec![f16::ZERO; rows * cols];
            let mut acc = vec![f16::from_f32(1.0); cols];
            let mut acc32 = widened(&acc);
            let mut seen = 0;
            by_rows(
                rows,
                &[(&x, cols)],
                &mut [RowOut {
                    data: &mut y,
                    per_row: cols,
                    reads: false,
                }],
                |r, i, o| {
                    assert_eq!(r.start, seen);
                    seen = r.end;
                    for (o, v) in o[0].iter_mut().zip(i[0]) {
                        *o = v * 2.0;
                    }
                    for row in i[0].chunks(cols) {
                        for (a, v) in acc32.iter_mut().zip(row) {
                            *a += v;
                        }
                    }
                },
            );
            assert_eq!(seen, rows);
            narrow_par(&acc32, &mut acc);
            for (o, v) in y.iter().zip(&x) {
                assert_eq!(o.to_f32(), v.to_f32() * 2.0);
            }
            for c in 0..cols.min(50) {
                let want: f32 = 1.0 + (0..rows).map(|r| x[r * cols + c].to_f32()).sum::<f32>();
                assert!(
                    (acc[c].to_f32() - want).abs() <= want.abs() * 1e-3 + 1e-3,
                    "{c}"
                );
            }
        }
    }

    #[test]
    fn scatter_add_rounds_each_hit_row_once() {
        let cols = 3;
        let src: Vec<bf16> = (0..12)
            .map(|i| bf16::from_f32(1.0 + i as f32 / 256.0))
            .collect();
        let mut dst = vec![bf16::from_f32(256.0); 5 * cols];
        let ids = [1, 4, 1, -1];
        scatter_rows_add(&src, cols, &ids, &mut dst);
        for r in 0..5 {
            for c in 0..cols {
                let mut want = 256.0f32;
                for (m, &id) in ids.iter().enumerate() {
                    if id == r as i32 {
                        want += src[m * cols + c].to_f32();
                    }
                }
                // Row 1 adds two values near 1 in FP32 before the one rounding.
                assert_eq!(dst[r * cols + c], bf16::from_f32(want), "({r}, {c})");
            }
        }
    }

    #[test]
    fn par_rows_matches_by_rows() {
        // Rows wider than a block, many rows per block, a partial last block, no rows, and
        // an output of another width.
        for (rows, cols) in [(3, PAR_ROW_BLOCK + 5), (1001, 100), (0, 4), (7, 1)] {
            let x = halves(rows * 2 * cols);
            let mut base: Vec<f16> = (0..rows).map(|r| f16::from_f32(r as f32)).collect();
            let (mut y1, mut y2) = (vec![f16::ZERO; rows * cols], vec![f16::ZERO; rows * cols]);
            let mut s2 = base.clone();
            let run = |r: Range<usize>, i: &[&[f32]], o: &mut [&mut [f32]]| {
                let [y, s] = o else { unreachable!() };
                for (j, row) in i[0].chunks(2 * cols).enumerate() {
                    for c in 0..cols {
                        y[j * cols + c] = row[c] * row[cols + c];
                    }
                    s[j] += (r.start + j) as f32 + row.iter().sum::<f32>();
                }
            };
            by_rows(
                rows,
                &[(&x, 2 * cols)],
                &mut [
                    RowOut {
                        data: &mut y1,
                        per_row: cols,
                        reads: false,
                    },
                    RowOut {
                        data: &mut base,
                        per_row: 1,
                        reads: true,
                    },
                ],
                run,
            );
            par_rows(
                rows,
                &[(&x, 2 * cols)],
                &mut [
                    RowOut {
                        data: &mut y2,
                        per_row: cols,
                        reads: false,
                    },
                    RowOut {
                        data: &mut s2,
                        per_row: 1,
                        reads: true,
                    },
                ],
                run,
            );
            assert_eq!(y1, y2);
            assert_eq!(base, s2);
        }
    }

    #[test]
    fn by_rows_widens_outputs_it_reads() {
        let mut y: Vec<bf16> = (0..10).map(|i| bf16::from_f32(i as f32)).collect();
        by_rows::<bf16>(
            5,
            &[],
            &mut [RowOut {
                data: &mut y,
                per_row: 2,
                reads: true,
            }],
            |_, _, o| o[0].iter_mut().for_each(|v| *v += 0.5),
        );
        for (i, v) in y.iter().enumerate() {
            assert_eq!(v.to_f32(), i as f32 + 0.5);
        }
    }
}
