//! CPU reference of the rope category: rotary position embeddings over `x (L, heads * hd)`.
//!
//! Every op rotates pairs of one head by an angle `t`: `(a, b) -> (a cos t - b sin t,
//! a sin t + b cos t)`, and the backward ops by `-t` (the transpose rotation). The pairs
//! of a head are adjacent elements `(2i, 2i + 1)` (interleaved, GPT-J) or `(i, i + hd/2)`
//! (half-split, GPT-NeoX). The ops differ only in where `cos t` and `sin t` come from (the
//! position-computed ones may also scale them, for YaRN: see [`Freqs`]).
//! Rows run in parallel; all math is FP32.

use rayon::prelude::*;

/// The head geometry of a rope call: `num_heads` contiguous blocks of `head_dim` (even,
/// nonzero) elements per row, and which elements form a pair.
#[derive(Clone, Copy, Debug)]
pub struct Heads {
    /// Heads per row.
    pub num_heads: usize,
    /// Elements per head (even).
    pub head_dim: usize,
    /// Pairs are `(i, i + head_dim / 2)` instead of `(2i, 2i + 1)`.
    pub half_split: bool,
}

impl Heads {
    /// Row offsets of pair `i` of head `h`.
    fn pair(&self, h: usize, i: usize) -> (usize, usize) {
        let base = h * self.head_dim;
        if self.half_split {
            (base + i, base + i + self.head_dim / 2)
        } else {
            (base + 2 * i, base + 2 * i + 1)
        }
    }
}

/// The angle tables of one M-RoPE axis: `cos`, `sin` of `(max_pos, pairs)` FP32 and one
/// position per row of `x`.
#[derive(Clone, Copy, Debug)]
pub struct MropeAxis<'a> {
    /// `cos (max_pos, pairs)`.
    pub cos: &'a [f32],
    /// `sin (max_pos, pairs)`.
    pub sin: &'a [f32],
    /// One table row per row of `x` (each in `[0, max_pos)`).
    pub pos: &'a [i32],
    /// Pairs of each head this axis rotates.
    pub pairs: usize,
}

/// Rotates every pair of `x` into `y` by the angle whose `(cos, sin)` `angle(row, head,
/// pair)` returns; by its negative when `inverse`.
fn rotate(
    x: &[f32],
    y: &mut [f32],
    g: Heads,
    inverse: bool,
    angle: impl Fn(usize, usize, usize) -> (f32, f32) + Sync,
) {
    let cols = g.num_heads * g.head_dim;
    if cols == 0 {
        return;
    }
    let sign = if inverse { -1.0f32 } else { 1.0 };
    y.par_chunks_mut(cols)
        .zip(x.par_chunks(cols))
        .enumerate()
        .for_each(|(r, (yr, xr))| {
            for h in 0..g.num_heads {
                for i in 0..g.head_dim / 2 {
                    let (c, s) = angle(r, h, i);
                    let s = sign * s;
                    let (a, b) = g.pair(h, i);
                    let (xa, xb) = (xr[a], xr[b]);
                    yr[a] = xa * c - xb * s;
                    yr[b] = xa * s + xb * c;
                }
            }
        });
}

/// `inv_freq[i] = exp(-(2i / head_dim) ln(freq_base))`, in FP32, for `i < head_dim / 2`.
fn inverse_frequencies(head_dim: usize, freq_base: f32) -> Vec<f32> {
    let ln_base = freq_base.ln();
    (0..head_dim / 2)
        .map(|i| (-((2 * i) as f32 / head_dim as f32) * ln_base).exp())
        .collect()
}

/// The angles of [`rope_forward`] and [`rope_backward`]: pair `i` of row `r` turns by
/// `t = freq_scale e (1 - m) + e m`, `e = (r + seq_offset) inv_freq[i]`, with the YaRN mix
/// `m = ext_factor (1 - clamp((i - low) / max(high - low, 0.001), 0, 1))` (`corr_dims =
/// (low, high)`), and the rotation is scaled by `mscale`. Without YaRN, `ext_factor = 0` and
/// `mscale = 1`. All FP32.
#[derive(Clone, Copy, Debug)]
pub struct Freqs {
    /// Position of row 0.
    pub seq_offset: usize,
    /// The frequency base.
    pub freq_base: f32,
    /// Linear position scale.
    pub freq_scale: f32,
    /// Weight of the YaRN extrapolation mix.
    pub ext_factor: f32,
    /// The YaRN ramp's `(low, high)` pair indices.
    pub corr_dims: (f32, f32),
    /// Magnitude scale of the rotation.
    pub mscale: f32,
}

/// The position-computed rotation (see [`Freqs`]).
fn rope_positions(x: &[f32], y: &mut [f32], g: Heads, f: &Freqs, inverse: bool) {
    let inv = inverse_frequencies(g.head_dim, f.freq_base);
    let (low, high) = f.corr_dims;
    let mix: Vec<f32> = (0..g.head_dim / 2)
        .map(|i| {
            let ramp = (i as f32 - low) / (high - low).max(0.001);
            (1.0 - ramp.clamp(0.0, 1.0)) * f.ext_factor
        })
        .collect();
    rotate(x, y, g, inverse, |r, _, i| {
        let pos = (r + f.seq_offset) as f32;
        let extrap = pos * inv[i];
        let interp = (pos * f.freq_scale) * inv[i];
        let t = interp * (1.0 - mix[i]) + extrap * mix[i];
        (t.cos() * f.mscale, t.sin() * f.mscale)
    });
}

/// `y = rope(x)` with the angles of `f`.
pub fn rope_forward(x: &[f32], y: &mut [f32], g: Heads, f: &Freqs) {
    rope_positions(x, y, g, f, false);
}

/// `dx = rope^T(dy)`: [`rope_forward`]'s transpose rotation.
pub fn rope_backward(dy: &[f32], dx: &mut [f32], g: Heads, f: &Freqs) {
    rope_positions(dy, dx, g, f, true);
}

/// `y = rope(x)` with `cos t`, `sin t` from `cos`, `sin (L, hd/2)`, row `row` for every
/// head.
pub fn rope_apply(x: &[f32], cos: &[f32], sin: &[f32], y: &mut [f32], g: Heads) {
    let half = g.head_dim / 2;
    rotate(x, y, g, false, |r, _, i| {
        (cos[r * half + i], sin[r * half + i])
    });
}

/// `dx = rope^T(dy)` with the tables of [`rope_apply`].
pub fn rope_apply_backward(dy: &[f32], cos: &[f32], sin: &[f32], dx: &mut [f32], g: Heads) {
    let half = g.head_dim / 2;
    rotate(dy, dx, g, true, |r, _, i| {
        (cos[r * half + i], sin[r * half + i])
    });
}

/// `y = rope(x)` with per-head tables `cos`, `sin (L * num_heads, hd/2)`, row
/// `row * num_heads + head`.
pub fn rope_apply_perhead(x: &[f32], cos: &[f32], sin: &[f32], y: &mut [f32], g: Heads) {
    let half = g.head_dim / 2;
    rotate(x, y, g, false, |r, h, i| {
        let at = (r * g.num_heads + h) * half + i;
        (cos[at], sin[at])
    });
}

/// M-RoPE: pairs `[0, t.pairs)` of each head take their angle from axis `t` at position
/// `t.pos[row]`, the next `h.pairs` from `h`, the rest from `w` (the pairs add up to
/// `hd / 2`; every position is a row of its table).
pub fn rope_apply_mrope(x: &[f32], axes: [MropeAxis<'_>; 3], y: &mut [f32], g: Heads) {
    let [t, h, w] = axes;
    rotate(x, y, g, false, |r, _, i| {
        let (axis, local) = if i < t.pairs {
            (t, i)
        } else if i < t.pairs + h.pairs {
            (h, i - t.pairs)
        } else {
            (w, i - t.pairs - h.pairs)
        };
        let at = axis.pos[r] as usize * axis.pairs + local;
        (axis.cos[at], axis.sin[at])
    });
}
