//! Kernels of the rope category: rotary position embeddings over `x (rows, heads * 2 half)`.
//!
//! One unit per rotated pair: unit `p` is pair `i = p % half` of head `(p / half) % heads`
//! of row `p / (heads half)`. The pair is `(2i, 2i + 1)` within the head (interleaved,
//! GPT-J) or `(i, i + half)` (half-split, GPT-NeoX), a comptime choice. Each unit rotates
//! `(a, b) -> (a cos t - b sin t, a sin t + b cos t)`, by `-t` for the backward ops; the
//! kernels differ in where `t` comes from: positions and frequencies, with YaRN's mix and
//! magnitude factor ([`launch_rope_freq`]), caller tables shared across heads or per head
//! ([`launch_rope_table`]), or three per-axis tables indexed by position streams
//! ([`launch_rope_mrope`]). Storage is `F`, math FP32.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_divisors, check_u32, extent, grid_1d, sum, Buf, LaunchError};

/// Buffer offset of the first element of pair `p` (see the module docs); the second is
/// `half` (half-split) or 1 (interleaved) further on.
#[cube]
fn first_of_pair(p: usize, half: usize, #[comptime] half_split: bool) -> usize {
    let head = p / half;
    let i = p % half;
    let mut at = head * 2 * half + 2 * i;
    if comptime!(half_split) {
        at = head * 2 * half + i;
    }
    at
}

/// `y[a], y[b]` = the pair `(x[a], x[b])` of pair unit `p` rotated by the angle with
/// cosine `c` and sine `s`.
#[cube]
fn rotate_pair<F: Float>(
    x: &Array<F>,
    y: &mut Array<F>,
    p: usize,
    half: usize,
    c: f32,
    s: f32,
    #[comptime] half_split: bool,
) {
    let a = first_of_pair(p, half, half_split);
    let mut b = a + 1;
    if comptime!(half_split) {
        b = a + half;
    }
    let xa = f32::cast_from(x[a]);
    let xb = f32::cast_from(x[b]);
    y[a] = F::cast_from(xa * c - xb * s);
    y[b] = F::cast_from(xa * s + xb * c);
}

/// `e = (row + seq_offset) exp(-(2i / hd) ln_base)` (the unscaled angle), `t = freq_scale e
/// (1 - m) + e m` with the YaRN mix `m = ext_factor (1 - clamp((i - low) / max(high - low,
/// 0.001), 0, 1))`, rotated by `t` (`-t` when `inverse`) and scaled by `mscale`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn rope_freq_kernel<F: Float>(
    x: &Array<F>,
    y: &mut Array<F>,
    heads: usize,
    half: usize,
    seq_offset: usize,
    ln_base: f32,
    freq_scale: f32,
    ext_factor: f32,
    corr_low: f32,
    corr_high: f32,
    mscale: f32,
    #[comptime] inverse: bool,
    #[comptime] half_split: bool,
) {
    let p = ABSOLUTE_POS;
    if p < y.len() / 2 {
        let row = p / (heads * half);
        let i = p % half;
        let exponent = f32::cast_from(2 * i) / f32::cast_from(2 * half);
        let inv_freq = f32::exp(-exponent * ln_base);
        let pos = f32::cast_from(row + seq_offset);
        let extrap = pos * inv_freq;
        let interp = (pos * freq_scale) * inv_freq;
        let ramp = (f32::cast_from(i) - corr_low) / f32::max(corr_high - corr_low, 0.001f32);
        let mix = (1.0f32 - f32::clamp(ramp, 0.0f32, 1.0f32)) * ext_factor;
        let t = interp * (1.0f32 - mix) + extrap * mix;
        let mut s = f32::sin(t) * mscale;
        if comptime!(inverse) {
            s = -s;
        }
        rotate_pair::<F>(x, y, p, half, f32::cos(t) * mscale, s, half_split);
    }
}

/// `cos t`, `sin t` from tables of `half` columns: row `row` (shared across heads) or row
/// `row * heads + head` (`per_head`); rotated by `-t` when `inverse`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn rope_table_kernel<F: Float>(
    x: &Array<F>,
    cos: &Array<f32>,
    sin: &Array<f32>,
    y: &mut Array<F>,
    heads: usize,
    half: usize,
    #[comptime] per_head: bool,
    #[comptime] inverse: bool,
    #[comptime] half_split: bool,
) {
    let p = ABSOLUTE_POS;
    if p < y.len() / 2 {
        let i = p % half;
        let mut at = (p / (heads * half)) * half + i;
        if comptime!(per_head) {
            at = p;
        }
        let mut s = sin[at];
        if comptime!(inverse) {
            s = -s;
        }
        rotate_pair::<F>(x, y, p, half, cos[at], s, half_split);
    }
}

/// Table row of a position: `pos` clamped into `[0, max_pos)` (the host checks positions;
/// the clamp only keeps a bad one inside the buffer).
#[cube]
fn table_row(pos: i32, max_pos: usize) -> usize {
    let mut r = 0usize;
    if pos > 0i32 {
        r = usize::cast_from(pos);
    }
    if r >= max_pos {
        r = max_pos - 1;
    }
    r
}

/// M-RoPE: pairs `[0, d_t)` of a head read `cos_t`, `sin_t (max_t, d_t)` at row
/// `pos_t[row]`, pairs `[d_t, d_t + d_h)` the `h` tables at `pos_h[row]`, the rest the `w`
/// tables at `pos_w[row]`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn rope_mrope_kernel<F: Float>(
    x: &Array<F>,
    cos_t: &Array<f32>,
    sin_t: &Array<f32>,
    cos_h: &Array<f32>,
    sin_h: &Array<f32>,
    cos_w: &Array<f32>,
    sin_w: &Array<f32>,
    pos_t: &Array<i32>,
    pos_h: &Array<i32>,
    pos_w: &Array<i32>,
    y: &mut Array<F>,
    heads: usize,
    half: usize,
    d_t: usize,
    d_h: usize,
    max_t: usize,
    max_h: usize,
    max_w: usize,
    #[comptime] half_split: bool,
) {
    let p = ABSOLUTE_POS;
    if p < y.len() / 2 {
        let row = p / (heads * half);
        let i = p % half;
        // Every pair falls in exactly one of the three ranges below.
        let mut c = 1.0f32;
        let mut s = 0.0f32;
        if i < d_t {
            let at = table_row(pos_t[row], max_t) * d_t + i;
            c = cos_t[at];
            s = sin_t[at];
        } else if i < d_t + d_h {
            let at = table_row(pos_h[row], max_h) * d_h + (i - d_t);
            c = cos_h[at];
            s = sin_h[at];
        }
        if i >= d_t + d_h {
            let d_w = half - d_t - d_h;
            let at = table_row(pos_w[row], max_w) * d_w + (i - d_t - d_h);
            c = cos_w[at];
            s = sin_w[at];
        }
        rotate_pair::<F>(x, y, p, half, c, s, half_split);
    }
}

/// The geometry of a rope launch: `rows` rows of `heads` heads of `2 half` elements.
#[derive(Clone, Copy, Debug)]
pub struct RopeGeometry {
    /// Rows of `x`.
    pub rows: usize,
    /// Heads per row.
    pub heads: usize,
    /// Pairs per head (`head_dim / 2`).
    pub half: usize,
    /// Pairs are `(i, i + half)` instead of `(2i, 2i + 1)`.
    pub half_split: bool,
}

impl RopeGeometry {
    /// Elements of `x` (`rows * heads * 2 half`) and pair units (half of them), checked.
    fn sizes(&self) -> Result<(usize, usize), LaunchError> {
        let pairs = extent("rows * heads * half", &[self.rows, self.heads, self.half])?;
        Ok((extent("2 * pairs", &[2, pairs])?, pairs))
    }
}

/// `x` and `y` of a rope launch (`len` elements of `F`), checked, after the divisors of `g`.
fn xy_bufs<F>(
    x: &Handle,
    y: &Handle,
    len: usize,
    g: &RopeGeometry,
) -> Result<(Buf, Buf), LaunchError> {
    check_divisors(&[("heads", g.heads), ("half", g.half)])?;
    check_u32(&[("rows * heads * 2 half", len)])?;
    let bytes = core::mem::size_of::<F>();
    Ok((Buf::new("x", x, len, bytes)?, Buf::new("y", y, len, bytes)?))
}

/// The angle parameters of [`launch_rope_freq`] (see `rope_freq_kernel`): without YaRN,
/// `ext_factor = 0` and `mscale = 1`, and the angle is `(pos freq_scale) inv_freq`.
#[derive(Clone, Copy, Debug)]
pub struct RopeFreqs {
    /// Position of row 0.
    pub seq_offset: usize,
    /// `ln(freq_base)`.
    pub ln_base: f32,
    /// Linear position scale.
    pub freq_scale: f32,
    /// Weight of the YaRN extrapolation mix (0: none).
    pub ext_factor: f32,
    /// The YaRN ramp's first and last pair index `(low, high)`.
    pub corr_dims: (f32, f32),
    /// Magnitude scale of the rotation.
    pub mscale: f32,
}

/// `y = rope(x)` (or its transpose rotation when `inverse`) with the angles of `f`.
pub fn launch_rope_freq<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, y): (&Handle, &Handle),
    g: RopeGeometry,
    f: RopeFreqs,
    inverse: bool,
) -> Result<(), LaunchError> {
    let (len, pairs) = g.sizes()?;
    if len == 0 {
        return Ok(());
    }
    let (x, y) = xy_bufs::<F>(x, y, len, &g)?;
    // The kernel forms positions `row + seq_offset`, `row < rows`, in 32 bits.
    if sum("rows + seq_offset", g.rows, f.seq_offset)? > u32::MAX as usize {
        return Err(LaunchError::Overflow {
            what: "rows + seq_offset (positions must fit in 32 bits)",
        });
    }
    let (count, dim) = grid_1d(client, pairs)?;
    // SAFETY: x and y hold `len` elements (checked `Buf`s); units past `len / 2` return and
    // every pair unit below it addresses two elements below `len`; `heads`, `half` are
    // nonzero.
    unsafe {
        rope_freq_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            y.arg(),
            g.heads,
            g.half,
            f.seq_offset,
            f.ln_base,
            f.freq_scale,
            f.ext_factor,
            f.corr_dims.0,
            f.corr_dims.1,
            f.mscale,
            inverse,
            g.half_split,
        );
    }
    Ok(())
}

/// `y = rope(x)` (transpose when `inverse`) with `cos`, `sin` tables of `half` FP32
/// columns: `(rows, half)` shared across heads, or `(rows * heads, half)` when `per_head`.
pub fn launch_rope_table<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, y): (&Handle, &Handle),
    (cos, sin): (&Handle, &Handle),
    g: RopeGeometry,
    (per_head, inverse): (bool, bool),
) -> Result<(), LaunchError> {
    let (len, pairs) = g.sizes()?;
    if len == 0 {
        return Ok(());
    }
    let (x, y) = xy_bufs::<F>(x, y, len, &g)?;
    let table = if per_head {
        pairs
    } else {
        extent("rows * half", &[g.rows, g.half])?
    };
    let cos = Buf::new("cos", cos, table, 4)?;
    let sin = Buf::new("sin", sin, table, 4)?;
    check_u32(&[("cos/sin table", table)])?;
    let (count, dim) = grid_1d(client, pairs)?;
    // SAFETY: x, y hold `len` elements and the tables `table` floats (checked `Buf`s); a pair
    // unit reads table entry `p` (per head, `p < pairs`) or `row * half + i < rows * half`.
    unsafe {
        rope_table_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            cos.arg(),
            sin.arg(),
            y.arg(),
            g.heads,
            g.half,
            per_head,
            inverse,
            g.half_split,
        );
    }
    Ok(())
}

/// One axis of an M-RoPE launch: `cos`, `sin (max_pos, pairs)` FP32 and `pos` (one I32 per
/// row). With `pairs == 0` the axis is never read (its handles may be any buffers).
#[derive(Clone, Copy, Debug)]
pub struct MropeAxisArgs<'a> {
    /// `cos (max_pos, pairs)`.
    pub cos: &'a Handle,
    /// `sin (max_pos, pairs)`.
    pub sin: &'a Handle,
    /// `rows` positions.
    pub pos: &'a Handle,
    /// Table rows.
    pub max_pos: usize,
    /// Pairs of each head rotated by this axis.
    pub pairs: usize,
}

impl MropeAxisArgs<'_> {
    /// The axis's `[cos, sin, pos]` for `rows` rows, checked; an axis without pairs is never
    /// read, and binds its buffers with no elements.
    fn bufs(&self, rows: usize) -> Result<[Buf; 3], LaunchError> {
        if self.pairs == 0 {
            return Ok([
                Buf::new("cos", self.cos, 0, 4)?,
                Buf::new("sin", self.sin, 0, 4)?,
                Buf::new("pos", self.pos, 0, 4)?,
            ]);
        }
        check_divisors(&[("max_pos", self.max_pos)])?;
        let table = extent("max_pos * pairs", &[self.max_pos, self.pairs])?;
        let bufs = [
            Buf::new("cos", self.cos, table, 4)?,
            Buf::new("sin", self.sin, table, 4)?,
            Buf::new("pos", self.pos, rows, 4)?,
        ];
        check_u32(&[("max_pos * pairs", table)])?;
        Ok(bufs)
    }
}

/// M-RoPE over `rows` rows of `heads` heads, each of `2 (t.pairs + h.pairs + w.pairs)`
/// elements (`axes` = t, h, w): `y = rope(x)` with pair `i`'s angle from the axis whose
/// range of pairs holds it. Positions outside a table are clamped into it (callers check
/// them).
pub fn launch_rope_mrope<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, y): (&Handle, &Handle),
    axes: [MropeAxisArgs<'_>; 3],
    (rows, heads, half_split): (usize, usize, bool),
) -> Result<(), LaunchError> {
    let [t, h, w] = axes;
    let half = sum(
        "d_t + d_h + d_w",
        sum("d_t + d_h", t.pairs, h.pairs)?,
        w.pairs,
    )?;
    let g = RopeGeometry {
        rows,
        heads,
        half,
        half_split,
    };
    let (len, pairs) = g.sizes()?;
    if len == 0 {
        return Ok(());
    }
    let (x, y) = xy_bufs::<F>(x, y, len, &g)?;
    let [t_cos, t_sin, t_pos] = t.bufs(g.rows)?;
    let [h_cos, h_sin, h_pos] = h.bufs(g.rows)?;
    let [w_cos, w_sin, w_pos] = w.bufs(g.rows)?;
    let (count, dim) = grid_1d(client, pairs)?;
    // SAFETY: x, y hold `len` elements, each used axis's tables `max_pos * pairs` floats and
    // its positions `rows` (checked `Buf`s); a unit reads only the axis holding its pair, at
    // a table row clamped below `max_pos` (nonzero, checked) and a row below `rows`.
    unsafe {
        rope_mrope_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            t_cos.arg(),
            t_sin.arg(),
            h_cos.arg(),
            h_sin.arg(),
            w_cos.arg(),
            w_sin.arg(),
            t_pos.arg(),
            h_pos.arg(),
            w_pos.arg(),
            y.arg(),
            g.heads,
            g.half,
            t.pairs,
            h.pairs,
            t.max_pos,
            h.max_pos,
            w.max_pos,
            g.half_split,
        );
    }
    Ok(())
}

/// Every kernel of this file, in every specialisation the library launches, lowered to CUDA
/// C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{for_floats, Lowering as L, Rt};
    let c = l.client.clone();
    let a = L::array;
    for half_split in [false, true] {
        for_floats!(|F| {
            for inverse in [false, true] {
                l.lower(rope_freq_kernel::RopeFreqKernel::<F, Rt>::new(
                    L::settings_1d(),
                    c.clone(),
                    a(),
                    a(),
                    (),
                    (),
                    (),
                    (),
                    (),
                    (),
                    (),
                    (),
                    (),
                    inverse,
                    half_split,
                ));
            }
            // (per_head, inverse): rope_apply, rope_apply_backward, rope_apply_perhead.
            for (per_head, inverse) in [(false, false), (false, true), (true, false)] {
                l.lower(rope_table_kernel::RopeTableKernel::<F, Rt>::new(
                    L::settings_1d(),
                    c.clone(),
                    a(),
                    a(),
                    a(),
                    a(),
                    (),
                    (),
                    per_head,
                    inverse,
                    half_split,
                ));
            }
            l.lower(rope_mrope_kernel::RopeMropeKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                a(),
                a(),
                a(),
                a(),
                a(),
                a(),
                a(),
                a(),
                a(),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                half_split,
            ));
        });
    }
}
