//! The rope ops: rotary position embeddings (RoPE) over `x (L, num_heads * head_dim)`.
//!
//! Each row holds `num_heads` contiguous heads of `head_dim` (even) elements; row `r` is
//! position `r` (plus `seq_offset` for [`rope_forward`]). Leading dims fold into `L` (a
//! `(B, L, D)` input counts positions across the batch: run one call per sequence). Every
//! pair `i < head_dim / 2` of a head is rotated by an angle `t`:
//! `y_a = x_a cos t - x_b sin t`, `y_b = x_a sin t + x_b cos t` (times a magnitude factor
//! with [`RopeYarn`]); the backward ops apply the transpose (angle `-t`) to the gradient,
//! and overwrite it. Which elements form pair `i` is the [`RopeLayout`]: adjacent
//! `(2i, 2i + 1)` (the C++ contract, GPT-J, GGUF llama-family weights) or half-split
//! `(i, i + head_dim / 2)` (GPT-NeoX, HF transformers `rotate_half`, most safetensors
//! checkpoints).
//!
//! Dtypes: `x` F32, F16 or BF16 on every device (FP32 math inside). Angle tables
//! are F32 on every device, M-RoPE position streams I32. Outputs are resized and take `x`'s
//! dtype.

use super::{check_float, checked_product, dispatch, input, written};
use crate::ops::Dispatched;
use crate::{Dtype, Error, Result, Tensor};

/// Which two elements of a head one rotation pairs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RopeLayout {
    /// Adjacent pairs `(x[2i], x[2i + 1])`: GPT-J style, the C++ contract and what GGUF
    /// llama-family weights expect.
    #[default]
    Interleaved,
    /// Half-split pairs `(x[i], x[i + head_dim / 2])`: GPT-NeoX style, HF transformers'
    /// `rotate_half`, what most safetensors checkpoints expect.
    HalfSplit,
}

/// The angles of [`rope_forward`] and [`rope_backward`]: pair `i` of position `pos` turns by
/// `t_i = (pos * freq_scale) * freq_base^(-2i / head_dim)`, computed in FP32 as
/// `(pos * freq_scale) * exp(-(2i / head_dim) ln(freq_base))` (with [`RopeYarn`], see there).
///
/// `freq_scale` is linear position interpolation: llama.cpp's `--rope-freq-scale`, and HF
/// transformers' `rope_scaling = {"rope_type": "linear", "factor": f}` is `freq_scale = 1 /
/// f`. `freq_base` is the C++ `theta_base` (llama.cpp `--rope-freq-base`, HF `rope_theta`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    /// The frequency base (default 10000); finite and > 0.
    pub freq_base: f32,
    /// The linear position scale (default 1: no scaling); finite and > 0.
    pub freq_scale: f32,
    /// The pairing (default [`RopeLayout::Interleaved`], the C++ contract).
    pub layout: RopeLayout,
    /// YaRN context extension (default none).
    pub yarn: Option<RopeYarn>,
}

impl Default for RopeParams {
    fn default() -> Self {
        RopeParams {
            freq_base: 10_000.0,
            freq_scale: 1.0,
            layout: RopeLayout::Interleaved,
            yarn: None,
        }
    }
}

impl RopeParams {
    /// Interleaved pairs, base `freq_base`, no scaling.
    pub fn new(freq_base: f32) -> Self {
        RopeParams {
            freq_base,
            ..Self::default()
        }
    }

    /// The same with linear position scale `freq_scale`.
    pub fn with_scale(self, freq_scale: f32) -> Self {
        RopeParams { freq_scale, ..self }
    }

    /// The same with pairing `layout`.
    pub fn with_layout(self, layout: RopeLayout) -> Self {
        RopeParams { layout, ..self }
    }

    /// The same with YaRN context extension (`freq_scale` is then `1 / factor`).
    pub fn with_yarn(self, yarn: RopeYarn) -> Self {
        RopeParams {
            yarn: Some(yarn),
            ..self
        }
    }

    /// Checks the parameters for `op`.
    fn check(&self, op: &'static str) -> Result<()> {
        let mut positive = vec![
            ("freq_base", self.freq_base),
            ("freq_scale", self.freq_scale),
        ];
        if let Some(y) = &self.yarn {
            if y.orig_ctx == 0 {
                return Err(Error::invalid(op, "yarn orig_ctx must be > 0"));
            }
            positive.extend([
                ("yarn beta_fast", y.beta_fast),
                ("yarn beta_slow", y.beta_slow),
            ]);
            for (what, v) in [
                ("yarn ext_factor", y.ext_factor),
                ("yarn attn_factor", y.attn_factor),
            ] {
                if !v.is_finite() {
                    return Err(Error::invalid(
                        op,
                        format!("{what} must be finite, got {v}"),
                    ));
                }
            }
        }
        match positive.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
            Some((what, v)) => Err(Error::invalid(
                op,
                format!("{what} must be finite and > 0, got {v}"),
            )),
            None => Ok(()),
        }
    }

    /// The per-call angle settings for heads of `head_dim`: `(ext_factor, (low, high),
    /// mscale)` of [`RopeYarn`], `(0, (0, 0), 1)` without it.
    pub(crate) fn yarn_terms(&self, head_dim: usize) -> (f32, (f32, f32), f32) {
        let Some(y) = &self.yarn else {
            return (0.0, (0.0, 0.0), 1.0);
        };
        let (hd, ln_base) = (head_dim as f64, (self.freq_base as f64).ln());
        // The pair index whose wavelength fits `rotations` times into the original context.
        let dim = |rotations: f32| {
            hd * (y.orig_ctx as f64 / (rotations as f64 * 2.0 * std::f64::consts::PI)).ln()
                / (2.0 * ln_base)
        };
        let low = dim(y.beta_fast).floor().max(0.0);
        let high = dim(y.beta_slow).ceil().min(hd - 1.0);
        let mut mscale = y.attn_factor;
        if self.freq_scale < 1.0 {
            mscale *= 1.0 + 0.1 * (1.0 / self.freq_scale).ln();
        }
        (y.ext_factor, (low as f32, high as f32), mscale)
    }
}

/// YaRN context extension (Peng et al. 2023; llama.cpp's `--yarn-*` options, HF
/// transformers' `rope_type: "yarn"`), on top of [`RopeParams::freq_scale`] `= 1 / factor`.
/// Pair `i` mixes the interpolated angle `freq_scale * e` with the unscaled one `e`:
/// `t_i = freq_scale e (1 - m_i) + e m_i`, `m_i = ext_factor (1 - clamp((i - low) /
/// max(high - low, 0.001), 0, 1))`, where `low = max(0, floor(d(beta_fast)))`, `high =
/// min(head_dim - 1, ceil(d(beta_slow)))` and `d(r) = head_dim ln(orig_ctx / (2 pi r)) /
/// (2 ln freq_base)` (the pair whose wavelength fits `r` times into `orig_ctx`). The
/// rotation is scaled by `mscale = attn_factor (1 + 0.1 ln(1 / freq_scale))` (by
/// `attn_factor` alone when `freq_scale >= 1`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeYarn {
    /// The context length the model was trained with (HF `original_max_position_embeddings`,
    /// llama.cpp `n_ctx_orig`); > 0.
    pub orig_ctx: usize,
    /// Weight of the extrapolation mix (default 1; 0 leaves only linear interpolation).
    pub ext_factor: f32,
    /// Extra magnitude scale (default 1).
    pub attn_factor: f32,
    /// Rotations that mark the fully extrapolated pairs (default 32).
    pub beta_fast: f32,
    /// Rotations that mark the fully interpolated pairs (default 1).
    pub beta_slow: f32,
}

impl RopeYarn {
    /// YaRN for a model trained on `orig_ctx` positions, with the peers' defaults.
    pub fn new(orig_ctx: usize) -> Self {
        RopeYarn {
            orig_ctx,
            ext_factor: 1.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
        }
    }
}

/// Checks `x (L, num_heads * head_dim)`: a float the device computes, `head_dim` even and
/// nonzero, `num_heads` nonzero.
fn check_x(
    op: &'static str,
    (name, x): (&'static str, &Tensor),
    be: Dispatched,
    head_dim: usize,
    num_heads: usize,
) -> Result<()> {
    check_float(op, name, x, be)?;
    if head_dim == 0 || !head_dim.is_multiple_of(2) {
        return Err(Error::invalid(
            op,
            format!("head_dim must be even and > 0, got {head_dim}"),
        ));
    }
    if num_heads == 0 {
        return Err(Error::invalid(op, "num_heads must be > 0"));
    }
    let cols = checked_product(op, "num_heads * head_dim", &[num_heads, head_dim])?;
    if x.cols() != cols {
        return Err(Error::shape(
            op,
            format!(
                "`{name}` has {} columns but num_heads * head_dim = {num_heads} * {head_dim} = {cols}",
                x.cols()
            ),
        ));
    }
    Ok(())
}

/// Checks an F32 angle table of `rows x cols`.
fn check_table(
    op: &'static str,
    (name, t): (&'static str, &Tensor),
    (rows, cols): (usize, usize),
) -> Result<()> {
    if t.dtype() != Dtype::F32 {
        return Err(Error::Dtype {
            op,
            operand: name,
            expected: "angle tables must be F32".into(),
            found: t.dtype(),
        });
    }
    if t.shape() != (rows, cols) {
        return Err(Error::shape(
            op,
            format!("`{name}` is {:?}, expected {rows}x{cols}", t.dims()),
        ));
    }
    Ok(())
}

/// One past the largest position [`rope_forward`] and [`rope_backward`] take
/// (`seq_offset + L` at most this): the GPU kernels compute positions in 32 bits.
pub const ROPE_POSITION_END: usize = u32::MAX as usize;

/// The shared body of [`rope_forward`] and [`rope_backward`].
fn rope_positions(
    (op, inverse): (&'static str, bool),
    (xn, x): (&'static str, &Tensor),
    (head_dim, num_heads): (usize, usize),
    seq_offset: usize,
    params: &RopeParams,
    (yn, y): (&'static str, &mut Tensor),
) -> Result<()> {
    let be = dispatch(op, &[input(xn, x), written(yn, y)])?;
    check_x(op, (xn, x), be, head_dim, num_heads)?;
    params.check(op)?;
    // The GPU kernels form positions `row + seq_offset` in 32 bits: every device refuses
    // positions past them, so that all agree.
    if seq_offset
        .checked_add(x.rows())
        .is_none_or(|end| end > ROPE_POSITION_END)
    {
        return Err(Error::shape(
            op,
            format!(
                "seq_offset {seq_offset} + {} rows passes the largest position, {}",
                x.rows(),
                ROPE_POSITION_END - 1
            ),
        ));
    }
    be.out(yn, y, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    let heads = (head_dim, num_heads);
    if inverse {
        be.rope_backward(x, heads, seq_offset, params, y)
    } else {
        be.rope_forward(x, heads, seq_offset, params, y)
    }
}

/// `y (L, num_heads * head_dim) = rope(x)`: pair `i` of row `r` turns by
/// `t_i = ((r + seq_offset) * freq_scale) * freq_base^(-2i / head_dim)` (see
/// [`RopeParams`], and [`RopeYarn`] for its scaled variant). Errors when `head_dim` is odd or 0, `num_heads` is 0, or `x`'s columns
/// are not `num_heads * head_dim`.
pub fn rope_forward(
    x: &Tensor,
    head_dim: usize,
    num_heads: usize,
    seq_offset: usize,
    params: &RopeParams,
    y: &mut Tensor,
) -> Result<()> {
    rope_positions(
        ("rope_forward", false),
        ("x", x),
        (head_dim, num_heads),
        seq_offset,
        params,
        ("y", y),
    )
}

/// `dx = rope^T(dy)`: the gradient of [`rope_forward`] with the same arguments (the
/// transpose rotation), `dx` overwritten.
pub fn rope_backward(
    dy: &Tensor,
    head_dim: usize,
    num_heads: usize,
    seq_offset: usize,
    params: &RopeParams,
    dx: &mut Tensor,
) -> Result<()> {
    rope_positions(
        ("rope_backward", true),
        ("dy", dy),
        (head_dim, num_heads),
        seq_offset,
        params,
        ("dx", dx),
    )
}

/// Which table op [`rope_tables`] runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TableOp {
    Apply,
    Backward,
    PerHead,
}

/// The shared body of the table-driven ops.
#[allow(clippy::too_many_arguments)]
fn rope_tables(
    (op, kind): (&'static str, TableOp),
    (xn, x): (&'static str, &Tensor),
    cos: &Tensor,
    sin: &Tensor,
    (head_dim, num_heads): (usize, usize),
    layout: RopeLayout,
    (yn, y): (&'static str, &mut Tensor),
) -> Result<()> {
    let be = dispatch(
        op,
        &[
            input(xn, x),
            input("cos_tbl", cos),
            input("sin_tbl", sin),
            written(yn, y),
        ],
    )?;
    check_x(op, (xn, x), be, head_dim, num_heads)?;
    let rows = match kind {
        TableOp::PerHead => checked_product(op, "L * num_heads", &[x.rows(), num_heads])?,
        _ => x.rows(),
    };
    check_table(op, ("cos_tbl", cos), (rows, head_dim / 2))?;
    check_table(op, ("sin_tbl", sin), (rows, head_dim / 2))?;
    be.out(yn, y, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    let heads = (head_dim, num_heads);
    match kind {
        TableOp::Apply => be.rope_apply(x, cos, sin, heads, layout, y),
        TableOp::Backward => be.rope_apply_backward(x, cos, sin, heads, layout, y),
        TableOp::PerHead => be.rope_apply_perhead(x, cos, sin, heads, layout, y),
    }
}

/// `y = rope(x)` with caller-supplied angles: `cos t`, `sin t` of pair `i` of row `r` are
/// `cos_tbl[r, i]`, `sin_tbl[r, i]`, shared across heads. `cos_tbl`, `sin_tbl (L, head_dim
/// / 2)` F32. Errors as [`rope_forward`], and on tables of another shape or dtype.
pub fn rope_apply(
    x: &Tensor,
    cos_tbl: &Tensor,
    sin_tbl: &Tensor,
    head_dim: usize,
    num_heads: usize,
    layout: RopeLayout,
    y: &mut Tensor,
) -> Result<()> {
    rope_tables(
        ("rope_apply", TableOp::Apply),
        ("x", x),
        cos_tbl,
        sin_tbl,
        (head_dim, num_heads),
        layout,
        ("y", y),
    )
}

/// [`rope_apply`] with one angle per (row, head, pair): `cos_tbl`, `sin_tbl (L * num_heads,
/// head_dim / 2)` F32, row `r * num_heads + h` for head `h` of row `r` (head-minor).
pub fn rope_apply_perhead(
    x: &Tensor,
    cos_tbl: &Tensor,
    sin_tbl: &Tensor,
    head_dim: usize,
    num_heads: usize,
    layout: RopeLayout,
    y: &mut Tensor,
) -> Result<()> {
    rope_tables(
        ("rope_apply_perhead", TableOp::PerHead),
        ("x", x),
        cos_tbl,
        sin_tbl,
        (head_dim, num_heads),
        layout,
        ("y", y),
    )
}

/// `dx = rope^T(dy)`: the gradient of [`rope_apply`] with the same tables (the transpose
/// rotation), `dx` overwritten.
pub fn rope_apply_backward(
    dy: &Tensor,
    cos_tbl: &Tensor,
    sin_tbl: &Tensor,
    head_dim: usize,
    num_heads: usize,
    layout: RopeLayout,
    dx: &mut Tensor,
) -> Result<()> {
    rope_tables(
        ("rope_apply_backward", TableOp::Backward),
        ("dy", dy),
        cos_tbl,
        sin_tbl,
        (head_dim, num_heads),
        layout,
        ("dx", dx),
    )
}

/// The angle tables of one M-RoPE axis: `cos`, `sin (max_pos, d)` F32, shared across heads.
#[derive(Clone, Copy, Debug)]
pub struct MropeTables<'a> {
    /// `cos (max_pos, d)`.
    pub cos: &'a Tensor,
    /// `sin (max_pos, d)`.
    pub sin: &'a Tensor,
}

/// M-RoPE (Qwen2-VL / Qwen2.5-VL / Qwen3-VL): three position streams `t`, `h`, `w` rotate
/// disjoint ranges of each head's pairs. With `sections = [d_t, d_h, d_w]` (summing to
/// `head_dim / 2`), pairs `[0, d_t)` take angle `tables[0]` at row `positions[0][r]` and
/// column `i`, pairs `[d_t, d_t + d_h)` table `1` at column `i - d_t`, and the rest table `2`
/// at `i - d_t - d_h`. `tables[a]` are `(max_pos_a, d_a)` F32; `positions[a]` are `L` I32
/// values in `[0, max_pos_a)` on `x`'s device. On a GPU the op reads the position streams
/// back to the host to check them: one device sync per call, waiting for the work queued
/// before it. With
/// `d_h = d_w = 0` and positions `0..L` this is [`rope_apply`]. Errors as [`rope_apply`],
/// and when the sections do not add up to `head_dim / 2` or a position is out of its table.
#[allow(clippy::too_many_arguments)]
pub fn rope_apply_mrope(
    x: &Tensor,
    tables: [MropeTables<'_>; 3],
    positions: [&Tensor; 3],
    head_dim: usize,
    num_heads: usize,
    sections: [usize; 3],
    layout: RopeLayout,
    y: &mut Tensor,
) -> Result<()> {
    let op = "rope_apply_mrope";
    const AXES: [(&str, &str, &str); 3] = [
        ("cos_t", "sin_t", "pos_t"),
        ("cos_h", "sin_h", "pos_h"),
        ("cos_w", "sin_w", "pos_w"),
    ];
    let mut operands = vec![input("x", x)];
    for (a, names) in AXES.iter().enumerate() {
        operands.extend([
            input(names.0, tables[a].cos),
            input(names.1, tables[a].sin),
            input(names.2, positions[a]),
        ]);
    }
    operands.push(written("y", y));
    let be = dispatch(op, &operands)?;
    check_x(op, ("x", x), be, head_dim, num_heads)?;
    let total = sections.iter().try_fold(0usize, |s, &d| s.checked_add(d));
    if total != Some(head_dim / 2) {
        return Err(Error::invalid(
            op,
            format!(
                "sections {sections:?} must add up to head_dim / 2 = {}",
                head_dim / 2
            ),
        ));
    }
    for (a, names) in AXES.iter().enumerate() {
        let max_pos = tables[a].cos.rows();
        check_table(op, (names.0, tables[a].cos), (max_pos, sections[a]))?;
        check_table(op, (names.1, tables[a].sin), (max_pos, sections[a]))?;
        // An axis without pairs never reads its table: its positions are not checked.
        let bound = (sections[a] > 0).then_some(max_pos);
        check_positions(op, (names.2, positions[a]), x.rows(), bound)?;
    }
    be.out("y", y, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    be.rope_apply_mrope(
        x,
        tables,
        positions,
        (head_dim, num_heads),
        sections,
        layout,
        y,
    )
}

/// Checks an M-RoPE position stream: `rows` I32 values, each in `[0, max_pos)` when a bound
/// is given.
fn check_positions(
    op: &'static str,
    (name, p): (&'static str, &Tensor),
    rows: usize,
    max_pos: Option<usize>,
) -> Result<()> {
    if p.dtype() != Dtype::I32 {
        return Err(Error::Dtype {
            op,
            operand: name,
            expected: "position streams must be I32".into(),
            found: p.dtype(),
        });
    }
    if p.numel() != rows {
        return Err(Error::shape(
            op,
            format!("`{name}` has {} positions, x has {rows} rows", p.numel()),
        ));
    }
    let Some(max_pos) = max_pos.filter(|_| rows > 0) else {
        return Ok(());
    };
    let values = p.to_vec::<i32>()?;
    if let Some((r, &v)) = values
        .iter()
        .enumerate()
        .find(|(_, &v)| usize::try_from(v).map_or(true, |v| v >= max_pos))
    {
        return Err(Error::invalid(
            op,
            format!("`{name}`[{r}] = {v} is outside its table of {max_pos} rows"),
        ));
    }
    Ok(())
}
