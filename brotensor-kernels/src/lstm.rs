//! The fused LSTM time step and its backward step on the GPU, as `brotensor_cpu::lstm`
//! computes them: one unit per batch entry and hidden unit, reading the four gate blocks of
//! its row (PyTorch's order i | f | g | o).

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, grid_1d, Buf, LaunchError};

/// Where a step's previous cell state comes from: none (zero), a separate `(B, H)` buffer,
/// or the cell buffer the step writes, at another (or the same) block of rows.
pub const PREV_ZERO: u32 = 0;
/// The previous cell state is the `prev` buffer from row 0.
pub const PREV_INITIAL: u32 = 1;
/// The previous cell state is rows of the cell buffer itself.
pub const PREV_ROWS: u32 = 2;

#[cube]
fn sigmoid(x: f32) -> f32 {
    1.0f32 / (1.0f32 + f32::exp(-x))
}

/// The forward step for unit `u = b H + k`: `z = p[p_row + b] + zrec[b]` per gate, the
/// activations into `gates[cache + b]`, `c = f c_prev + i g` into `c[cache + b]`, `o
/// tanh(c)` into `y[y_row + b]`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn lstm_step_kernel(
    p: &Array<f32>,
    zrec: &Array<f32>,
    prev: &Array<f32>,
    y: &mut Array<f32>,
    gates: &mut Array<f32>,
    c: &mut Array<f32>,
    rows: &Array<u32>,
    h: usize,
    total: usize,
    #[comptime] has_rec: bool,
    #[comptime] prev_mode: u32,
) {
    let u = ABSOLUTE_POS;
    if u < total {
        let (b, k) = (u / h, u % h);
        let p_at = (usize::cast_from(rows[0]) + b) * 4 * h + k;
        let mut zi = p[p_at];
        let mut zf = p[p_at + h];
        let mut zg = p[p_at + 2 * h];
        let mut zo = p[p_at + 3 * h];
        if comptime!(has_rec) {
            let r = b * 4 * h + k;
            zi += zrec[r];
            zf += zrec[r + h];
            zg += zrec[r + 2 * h];
            zo += zrec[r + 3 * h];
        }
        let (i, f, g, o) = (sigmoid(zi), sigmoid(zf), f32::tanh(zg), sigmoid(zo));
        let mut cp = 0.0f32;
        if comptime!(prev_mode == PREV_INITIAL) {
            cp = prev[u];
        } else if comptime!(prev_mode == PREV_ROWS) {
            cp = c[(usize::cast_from(rows[3]) + b) * h + k];
        }
        let cell = f * cp + i * g;
        let cache = usize::cast_from(rows[2]) + b;
        let g_at = cache * 4 * h + k;
        gates[g_at] = i;
        gates[g_at + h] = f;
        gates[g_at + 2 * h] = g;
        gates[g_at + 3 * h] = o;
        c[cache * h + k] = cell;
        let y_at = (usize::cast_from(rows[1]) + b) * h + k;
        y[y_at] = o * f32::tanh(cell);
    }
}

/// The backward step for unit `u = b H + k` at sequence row `row + b`: `dz` of the four
/// gates, and `dc` (the cell gradient from the next step) updated to `c_prev`'s.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn lstm_step_backward_kernel(
    gates: &Array<f32>,
    c: &Array<f32>,
    prev: &Array<f32>,
    dy: &Array<f32>,
    dh_rec: &Array<f32>,
    dc: &mut Array<f32>,
    dz: &mut Array<f32>,
    rows: &Array<u32>,
    h: usize,
    total: usize,
    #[comptime] has_rec: bool,
    #[comptime] prev_mode: u32,
) {
    let u = ABSOLUTE_POS;
    if u < total {
        let (b, k) = (u / h, u % h);
        let row = usize::cast_from(rows[0]) + b;
        let g_at = row * 4 * h + k;
        let (i, f, g, o) = (
            gates[g_at],
            gates[g_at + h],
            gates[g_at + 2 * h],
            gates[g_at + 3 * h],
        );
        let mut dh = dy[row * h + k];
        if comptime!(has_rec) {
            dh += dh_rec[u];
        }
        let tc = f32::tanh(c[row * h + k]);
        let dcell = dc[u] + dh * o * (1.0f32 - tc * tc);
        let mut cp = 0.0f32;
        if comptime!(prev_mode == PREV_INITIAL) {
            cp = prev[u];
        } else if comptime!(prev_mode == PREV_ROWS) {
            cp = c[(usize::cast_from(rows[1]) + b) * h + k];
        }
        dz[g_at] = dcell * g * i * (1.0f32 - i);
        dz[g_at + h] = dcell * cp * f * (1.0f32 - f);
        dz[g_at + 2 * h] = dcell * i * (1.0f32 - g * g);
        dz[g_at + 3 * h] = dh * tc * o * (1.0f32 - o);
        dc[u] = dcell * f;
    }
}

/// A previous cell state for a launch: the mode and, for [`PREV_INITIAL`], the buffer.
#[derive(Clone, Copy, Debug)]
pub enum Prev<'a> {
    /// Zero.
    Zero,
    /// A `(B, H)` buffer.
    Initial(&'a Handle),
    /// Rows of the cell buffer from this batch row.
    Rows(usize),
}

/// Row offsets (in batch rows) of a forward step: the projection `p`, the output `y`, the
/// caches.
#[derive(Clone, Copy, Debug)]
pub struct StepAt {
    /// First row of `p`.
    pub p: usize,
    /// First row of `y`.
    pub y: usize,
    /// First row of `gates` and `c`.
    pub cache: usize,
}

/// Mode, buffer (bound to `fallback` when absent) and first row of a previous state.
fn prev_parts(prev: Prev<'_>, fallback: &Buf, bh: usize) -> Result<(u32, Buf, usize), LaunchError> {
    Ok(match prev {
        Prev::Zero => (PREV_ZERO, fallback.stand_in(), 0),
        Prev::Initial(handle) => (PREV_INITIAL, Buf::new("c0", handle, bh, 4)?, 0),
        Prev::Rows(r) => (PREV_ROWS, fallback.stand_in(), r),
    })
}

/// The forward step over a batch of `b` entries of `h` hidden units: `p` holds `at.p + b`
/// rows of `4h`, `zrec` (optional) `b` rows of `4h`, `y` `at.y + b` rows of `h`, `gates` and
/// `c` the cache rows (and the previous rows of [`Prev::Rows`]).
pub fn launch_lstm_step<R: Runtime>(
    client: &ComputeClient<R>,
    (p, zrec): (&Handle, Option<&Handle>),
    prev: Prev<'_>,
    (y, gates, c): (&Handle, &Handle, &Handle),
    at: StepAt,
    (b, h): (usize, usize),
) -> Result<(), LaunchError> {
    let total = extent("B * H", &[b, h])?;
    if total == 0 {
        return Ok(());
    }
    let prev_row = match prev {
        Prev::Rows(r) => r,
        _ => 0,
    };
    let cache_rows = at
        .cache
        .max(prev_row)
        .checked_add(b)
        .ok_or(LaunchError::Overflow { what: "cache rows" })?;
    let span =
        |first: usize, width: usize| extent("rows * width", &[first.saturating_add(b), width]);
    let p = Buf::new("p", p, span(at.p, 4 * h)?, 4)?;
    let y = Buf::new("y", y, span(at.y, h)?, 4)?;
    let gates = Buf::new(
        "gates",
        gates,
        extent("rows * 4H", &[cache_rows, 4 * h])?,
        4,
    )?;
    let c = Buf::new("c", c, extent("rows * H", &[cache_rows, h])?, 4)?;
    check_u32(&[
        ("p floats", extent("p", &[at.p.saturating_add(b), 4 * h])?),
        ("gates floats", extent("gates", &[cache_rows, 4 * h])?),
        ("y floats", extent("y", &[at.y.saturating_add(b), h])?),
    ])?;
    let zrec = match zrec {
        Some(z) => Some(Buf::new("zrec", z, extent("B * 4H", &[b, 4 * h])?, 4)?),
        None => None,
    };
    let (mode, prev_buf, prev_row) = prev_parts(prev, &p, total)?;
    let words: Vec<u32> = [at.p, at.y, at.cache, prev_row]
        .iter()
        .map(|&v| v as u32)
        .collect();
    let rows = Buf::upload(client, &words);
    let (count, dim) = grid_1d(client, total)?;
    // SAFETY: unit `u < b h` reads p row `at.p + b'`, zrec row `b'` (when bound), the
    // previous state (`c0` of `b h` floats, or c row `prev_row + b'`) and writes y, gates
    // and c at rows `at.y + b'`, `at.cache + b'`: every buffer was checked to hold those
    // rows (`Buf`s), and all float indices fit in 32 bits.
    unsafe {
        lstm_step_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            p.arg(),
            p.stand_in_for(zrec.as_ref()).arg(),
            prev_buf.arg(),
            y.arg(),
            gates.arg(),
            c.arg(),
            rows.arg(),
            h,
            total,
            zrec.is_some(),
            mode,
        );
    }
    Ok(())
}

/// The backward step over a batch of `b` entries of `h` hidden units at sequence row `row`:
/// `gates`, `c`, `dy`, `dz` hold `row + b` rows (`4h`, `h`, `h`, `4h` wide), `dh_rec`
/// (optional) and `dc` `b` rows of `h`.
pub fn launch_lstm_step_backward<R: Runtime>(
    client: &ComputeClient<R>,
    (gates, c): (&Handle, &Handle),
    prev: Prev<'_>,
    (dy, dh_rec): (&Handle, Option<&Handle>),
    (dc, dz): (&Handle, &Handle),
    row: usize,
    (b, h): (usize, usize),
) -> Result<(), LaunchError> {
    let total = extent("B * H", &[b, h])?;
    if total == 0 {
        return Ok(());
    }
    let prev_row = match prev {
        Prev::Rows(r) => r,
        _ => 0,
    };
    let end = row
        .max(prev_row)
        .checked_add(b)
        .ok_or(LaunchError::Overflow { what: "rows" })?;
    let gates = Buf::new("gates", gates, extent("rows * 4H", &[end, 4 * h])?, 4)?;
    let c = Buf::new("c", c, extent("rows * H", &[end, h])?, 4)?;
    let dy = Buf::new("dy", dy, extent("rows * H", &[row + b, h])?, 4)?;
    let dz = Buf::new("dz", dz, extent("rows * 4H", &[row + b, 4 * h])?, 4)?;
    let dc = Buf::new("dc", dc, total, 4)?;
    check_u32(&[("gates floats", extent("gates", &[end, 4 * h])?)])?;
    let dh_rec = match dh_rec {
        Some(d) => Some(Buf::new("dh_rec", d, total, 4)?),
        None => None,
    };
    let (mode, prev_buf, prev_row) = prev_parts(prev, &c, total)?;
    let rows = Buf::upload(client, &[row as u32, prev_row as u32]);
    let (count, dim) = grid_1d(client, total)?;
    // SAFETY: unit `u < b h` reads gates, c, dy at row `row + b'`, the previous state (`c0`
    // of `b h` floats or c row `prev_row + b'`), dh_rec and dc element `u`, and writes dz
    // row `row + b'` and dc element `u`: every buffer was checked to hold them.
    unsafe {
        lstm_step_backward_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            gates.arg(),
            c.arg(),
            prev_buf.arg(),
            dy.arg(),
            dc.stand_in_for(dh_rec.as_ref()).arg(),
            dc.arg(),
            dz.arg(),
            rows.arg(),
            h,
            total,
            dh_rec.is_some(),
            mode,
        );
    }
    Ok(())
}

/// Every kernel of this file, lowered to CUDA C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{Lowering as L, Rt};
    let c = l.client.clone();
    let a = L::array;
    for has_rec in [false, true] {
        for mode in [PREV_ZERO, PREV_INITIAL, PREV_ROWS] {
            l.lower(lstm_step_kernel::LstmStepKernel::<Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                a(),
                a(),
                a(),
                a(),
                a(),
                (),
                (),
                has_rec,
                mode,
            ));
            l.lower(
                lstm_step_backward_kernel::LstmStepBackwardKernel::<Rt>::new(
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
                    (),
                    (),
                    has_rec,
                    mode,
                ),
            );
        }
    }
}
