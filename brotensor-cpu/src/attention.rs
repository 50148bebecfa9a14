//! CPU reference of the attention category's own kernels (the attention ops are composites
//! of the matrix product, the masked softmax and the element-wise ops): the slot and causal
//! masks, invalid-row zeroing, the decomposed relative-position bias, window partitioning
//! of a token grid, and the token moments of an attention map. FP32; the masks and the row
//! moves also take the 16-bit float types, whose values they only compare or move.

use rayon::prelude::*;

/// `mask[i] = x[offset + i stride] > 0.5 ? 1 : 0` for every `i < mask.len()` (`x` F32, or a
/// 16-bit float widened exactly); the caller checked that `x` reaches.
pub fn slot_mask<T: Copy>(x: &[T], offset: usize, stride: usize, mask: &mut [f32])
where
    f32: From<T>,
{
    for (i, m) in mask.iter_mut().enumerate() {
        *m = if f32::from(x[offset + i * stride]) > 0.5 {
            1.0
        } else {
            0.0
        };
    }
}

/// `mask[k] = k <= q ? 1 : 0`.
pub fn causal_mask(q: usize, mask: &mut [f32]) {
    for (k, m) in mask.iter_mut().enumerate() {
        *m = if k <= q { 1.0 } else { 0.0 };
    }
}

/// Zeroes row `r` of `y` (rows of `cols`) where `mask[r % mask.len()] < 0.5`; `T::default()`
/// is the zero of the element type (F32 or a 16-bit float).
pub fn mask_rows<T: Copy + Default + Send + Sync>(y: &mut [T], cols: usize, mask: &[f32]) {
    if cols == 0 || mask.is_empty() {
        return;
    }
    y.par_chunks_mut(cols).enumerate().for_each(|(r, row)| {
        if mask[r % mask.len()] < 0.5 {
            row.fill(T::default());
        }
    });
}

/// Adds `q_h[q] . (rel_h[qy - ky + gh - 1] + rel_w[qx - kx + gw - 1])` to
/// `s[h L + q, k]`, with `L = gh gw`, token `t` at `(t / gw, t % gw)`, `q (heads L, hd)`,
/// `rel_h (2 gh - 1, hd)`, `rel_w (2 gw - 1, hd)`, `s (heads L, L)`.
pub fn rel_pos_bias(
    q: &[f32],
    rel_h: &[f32],
    rel_w: &[f32],
    s: &mut [f32],
    hd: usize,
    (gh, gw): (usize, usize),
) {
    let l = gh * gw;
    if l == 0 {
        return;
    }
    s.par_chunks_mut(l).enumerate().for_each(|(row, srow)| {
        let qi = row % l;
        let qv = &q[row * hd..(row + 1) * hd];
        let dot = |table: &[f32], i: usize| -> f32 {
            qv.iter()
                .zip(&table[i * hd..(i + 1) * hd])
                .map(|(a, b)| a * b)
                .sum()
        };
        let by_h: Vec<f32> = (0..gh)
            .map(|ky| dot(rel_h, qi / gw + gh - 1 - ky))
            .collect();
        let by_w: Vec<f32> = (0..gw)
            .map(|kx| dot(rel_w, qi % gw + gw - 1 - kx))
            .collect();
        for (k, v) in srow.iter_mut().enumerate() {
            *v += by_h[k / gw] + by_w[k % gw];
        }
    });
}

/// With `partition`, `out` rows are the tokens of `x (gh gw, cols)` window by window
/// (`win x win` windows, window-major, zero past the grid); else the inverse: `out (gh gw,
/// cols)` from the windows in `x`. Elements are moved, not computed: any element type whose
/// `T::default()` is zero (F32, the 16-bit floats).
pub fn window_rows<T: Copy + Default + Send + Sync>(
    x: &[T],
    out: &mut [T],
    cols: usize,
    (gh, gw, win): (usize, usize, usize),
    partition: bool,
) {
    if cols == 0 || win == 0 {
        return;
    }
    let nwx = gw.div_ceil(win);
    let ww = win * win;
    out.par_chunks_mut(cols).enumerate().for_each(|(r, row)| {
        if partition {
            let (w, t) = (r / ww, r % ww);
            let y = (w / nwx) * win + t / win;
            let xx = (w % nwx) * win + t % win;
            if y < gh && xx < gw {
                let s = (y * gw + xx) * cols;
                row.copy_from_slice(&x[s..s + cols]);
            } else {
                row.fill(T::default());
            }
        } else {
            let (y, xx) = (r / gw, r % gw);
            let w = (y / win) * nwx + xx / win;
            let s = (w * ww + (y % win) * win + xx % win) * cols;
            row.copy_from_slice(&x[s..s + cols]);
        }
    });
}

/// `mass[k] = sum_q attn[q, k]` and `centroid[k] = (sum_q y(q) attn, sum_q x(q) attn) / mass`
/// (`(0, 0)` when the mass is at most 1e-8), with `q = y w_lat + x` over `attn (lq, lk)`.
pub fn token_moments(
    attn: &[f32],
    lk: usize,
    w_lat: usize,
    mass: &mut [f32],
    centroid: &mut [f32],
) {
    if lk == 0 {
        return;
    }
    let lq = attn.len() / lk;
    mass.par_iter_mut()
        .zip(centroid.par_chunks_mut(2))
        .enumerate()
        .for_each(|(k, (m, c))| {
            let (mut sm, mut sy, mut sx) = (0.0f32, 0.0f32, 0.0f32);
            for q in 0..lq {
                let a = attn[q * lk + k];
                sm += a;
                sy += (q / w_lat) as f32 * a;
                sx += (q % w_lat) as f32 * a;
            }
            *m = sm;
            if sm > 1e-8 {
                c[0] = sy / sm;
                c[1] = sx / sm;
            } else {
                c[0] = 0.0;
                c[1] = 0.0;
            }
        });
}
