//! `y (m, n) = act(x (m, k) . dequant(w)^T + bias)` with `w (n, k)` read as GGUF blocks.
//!
//! Activations stay FP32 (they are not quantized to 8 bits as ggml's integer dot products
//! do): each weight block is decoded to FP32 in a stack buffer and multiplied with fused
//! multiply-adds into FP32 accumulators. Against a float64 reference this keeps the error at
//! FP32 accumulation level (about 1e-7 of the output scale per sqrt(k)), where Q8 activations
//! add their own rounding: measured at K = 512, 3e-7 of the row scale with FP32 activations
//! against 1e-2 with Q8_0 ones (`fp32_activations_beat_8_bit_ones` in
//! `tests/tests/all/quant/cpu.rs`).
//!
//! - [`gemv`] (decode, `m <= GEMV_MAX_ROWS`): rayon over tasks of [`GEMV_TASK_ROWS`] weight
//!   rows; each block is decoded once and multiplied into every activation row, so every
//!   weight byte is read once for the whole batch. On the AVX-512 and AVX2 tiers the common
//!   kinds take the kernels of `registers`, which decode in registers; the rest take the
//!   portable path.
//! - [`gemm`] (prefill): rayon over panels of weight rows; a panel is decoded once into an
//!   FP32 buffer of about [`PANEL_ELEMS`] elements (cache-sized, per task) and multiplied with
//!   all `m` activation rows by the `gemm` crate, so the decode cost is shared by `m` rows.
//!
//! Both write a transposed `(n, m)` product first and finish with one pass that adds the bias,
//! applies the activation and transposes into `y`; [`gemv`] with one activation row writes
//! `y` (the same layout then) and finishes each task's rows in the task.

use rayon::prelude::*;

use super::{decode, Block};
use crate::linear::{matmul, Act, Mat};
use crate::simd::{wide, MulAdd};

/// The most activation rows [`gemv`] takes.
pub const GEMV_MAX_ROWS: usize = 8;

/// Weight rows per parallel task of [`gemv`].
const GEMV_TASK_ROWS: usize = 16;

/// Outputs below which [`finish`] runs on the calling thread: a parallel section costs a
/// round trip to the pool (about 10 us from outside it), more than the pass itself.
const SERIAL_FINISH: usize = 1 << 16;

/// Target FP32 elements of one decoded [`gemm`] panel (4 MiB: fewer panels means fewer
/// re-packings of `x` by the `gemm` crate, one per panel).
const PANEL_ELEMS: usize = 1 << 20;

/// Checks the length contract shared by [`gemv`] and [`gemm`] and returns `(m, row_bytes)`,
/// or `None` when the output is empty.
fn shape(
    kind: Block,
    w: &[u8],
    (n, k): (usize, usize),
    x: &[f32],
    bias: Option<&[f32]>,
    y: &[f32],
) -> Option<(usize, usize)> {
    let (elems, size) = kind.size();
    assert!(
        k.is_multiple_of(elems),
        "quant: k = {k} is not whole blocks"
    );
    let row_bytes = k / elems * size;
    assert!(
        n.checked_mul(row_bytes) == Some(w.len()),
        "quant: {} weight bytes for {n} rows of {row_bytes}",
        w.len()
    );
    if let Some(b) = bias {
        assert_eq!(b.len(), n, "quant: bias length");
    }
    if n == 0 {
        assert!(y.is_empty(), "quant: output length");
        return None;
    }
    let m = y.len() / n;
    assert!(
        m * n == y.len() && m.checked_mul(k) == Some(x.len()),
        "quant: {} activations and {} outputs for {n} x {k}",
        x.len(),
        y.len()
    );
    (m > 0).then_some((m, row_bytes))
}

/// `y[i, r] = act(t[r, i] + bias[r])` for the transposed product `t (n, m)`; on this thread
/// when small (below [`SERIAL_FINISH`] elements).
fn finish(t: &[f32], m: usize, bias: Option<&[f32]>, act: Act, y: &mut [f32]) {
    let n = t.len() / m;
    let row = |(i, y): (usize, &mut [f32])| {
        for (r, v) in y.iter_mut().enumerate() {
            let s = t[r * m + i] + bias.map_or(0.0, |b| b[r]);
            *v = act.apply(s);
        }
    };
    if t.len() < SERIAL_FINISH {
        y.chunks_mut(n).enumerate().for_each(row);
    } else {
        y.par_chunks_mut(n).enumerate().for_each(row);
    }
}

/// The decode-path product (see the module doc): `w` holds `n` rows of `k` elements (`k` a
/// whole number of `kind` blocks) as blocks, `x (m, k)` with `m <= GEMV_MAX_ROWS`, `bias`
/// `n` values, `y (m, n)` overwritten. FP32 accumulation.
///
/// # Panics
/// If a length breaks that contract.
#[allow(clippy::too_many_arguments)]
pub fn gemv(
    kind: Block,
    w: &[u8],
    n: usize,
    k: usize,
    x: &[f32],
    bias: Option<&[f32]>,
    act: Act,
    y: &mut [f32],
) {
    let Some((m, row_bytes)) = shape(kind, w, (n, k), x, bias, y) else {
        return;
    };
    assert!(m <= GEMV_MAX_ROWS, "gemv: {m} rows");
    let rows = |w: &[u8], t: &mut [f32]| {
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        if super::registers::rows(kind, w, row_bytes, x, m, t) {
            return;
        }
        portable(kind, w, row_bytes, x, m, t)
    };
    if m == 1 && k > 0 {
        // `y` is the transposed product: each task finishes its own rows (one parallel
        // section, no buffer).
        y.par_chunks_mut(GEMV_TASK_ROWS)
            .zip(w.par_chunks(GEMV_TASK_ROWS * row_bytes))
            .enumerate()
            .for_each(|(c, (y, w))| {
                rows(w, y);
                let bias = bias.map(|b| &b[c * GEMV_TASK_ROWS..]);
                for (r, v) in y.iter_mut().enumerate() {
                    *v = act.apply(*v + bias.map_or(0.0, |b| b[r]));
                }
            });
        return;
    }
    let mut t = vec![0.0f32; n * m];
    if k > 0 {
        t.par_chunks_mut(GEMV_TASK_ROWS * m)
            .zip(w.par_chunks(GEMV_TASK_ROWS * row_bytes))
            .for_each(|(t, w)| rows(w, t));
    }
    finish(&t, m, bias, act, y);
}

/// [`gemv_rows`] for any kind, on the widest vectors [`wide`] has: the activation rows in
/// groups of 4, 2 or 1, so that each group's accumulators stay in registers (each group
/// decodes the weights again).
fn portable(kind: Block, w: &[u8], row_bytes: usize, x: &[f32], m: usize, t: &mut [f32]) {
    let k = x.len() / m;
    let mut i = 0;
    while i < m {
        let g = match m - i {
            1 => 1,
            2 | 3 => 2,
            _ => 4,
        };
        let x = &x[i * k..(i + g) * k];
        wide(
            #[inline(always)]
            |ma| {
                for_kind!(kind, |kd| match g {
                    1 => gemv_rows::<1, 32>(kd, ma, w, row_bytes, x, i, t),
                    2 => gemv_rows::<2, 16>(kd, ma, w, row_bytes, x, i, t),
                    _ => gemv_rows::<4, 16>(kd, ma, w, row_bytes, x, i, t),
                })
            },
        );
        i += g;
    }
}

/// `t[r, col + i] = w[r] . x[i]` for the rows of `w` (whole rows of `row_bytes`) and the `M`
/// activation rows of `x`, with `L` accumulator lanes per activation row; `t` has
/// `t.len() / rows` columns.
#[inline(always)]
fn gemv_rows<const M: usize, const L: usize>(
    kind: Block,
    ma: MulAdd,
    w: &[u8],
    row_bytes: usize,
    x: &[f32],
    col: usize,
    t: &mut [f32],
) {
    let (elems, size) = kind.size();
    let k = x.len() / M;
    let cols = t.len() / (w.len() / row_bytes);
    let mut buf = [0.0f32; 256];
    for (row, out) in w.chunks_exact(row_bytes).zip(t.chunks_exact_mut(cols)) {
        let mut acc = [[0.0f32; L]; M];
        for (b, blk) in row.chunks_exact(size).enumerate() {
            let buf = &mut buf[..elems];
            decode::block(kind, blk, buf);
            for (i, acc) in acc.iter_mut().enumerate() {
                let xs = &x[i * k + b * elems..][..elems];
                for (wv, xv) in buf.chunks_exact(L).zip(xs.chunks_exact(L)) {
                    for l in 0..L {
                        acc[l] = ma.apply(wv[l], xv[l], acc[l]);
                    }
                }
            }
        }
        for (o, acc) in out[col..col + M].iter_mut().zip(&acc) {
            *o = acc.iter().sum();
        }
    }
}

/// The prefill-path product (see the module doc), with [`gemv`]'s contract for any `m`.
///
/// # Panics
/// If a length breaks that contract.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    kind: Block,
    w: &[u8],
    n: usize,
    k: usize,
    x: &[f32],
    bias: Option<&[f32]>,
    act: Act,
    y: &mut [f32],
) {
    let Some((m, row_bytes)) = shape(kind, w, (n, k), x, bias, y) else {
        return;
    };
    let mut t = vec![0.0f32; n * m];
    // k == 0 leaves the product zero.
    if let Some(per_row) = PANEL_ELEMS.checked_div(k) {
        let panel = per_row.clamp(16, 256);
        let xt = Mat::new(x, m, k).t();
        t.par_chunks_mut(panel * m)
            .zip(w.par_chunks(panel * row_bytes))
            .for_each_init(Vec::new, |buf, (t, w)| {
                let rows = t.len() / m;
                buf.resize(rows * k, 0.0);
                super::decode_serial(kind, w, buf);
                matmul(Mat::new(buf, rows, k), xt, t, false);
            });
    }
    finish(&t, m, bias, act, y);
}

#[cfg(test)]
mod tests {
    use super::super::testing::{blocks, check, floats, KINDS};
    use super::*;

    /// The portable path (every kind on the scalar tier, the kinds without register kernels on
    /// all).
    #[test]
    fn the_portable_path_matches_the_decoded_float64_product() {
        let (n, k) = (5, 512);
        for kind in KINDS {
            let w = blocks(kind, n, k);
            let row_bytes = w.len() / n;
            for m in 1..=GEMV_MAX_ROWS {
                let x = floats(m * k, m as u64);
                let mut t = vec![f32::NAN; n * m];
                portable(kind, &w, row_bytes, &x, m, &mut t);
                check(kind, &w, &x, m, &t);
            }
        }
    }
}
