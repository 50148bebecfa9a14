//! Kernels of the attention category (attention without the flash kernels). The attention
//! ops themselves are composites of the matrix product, the masked row softmax and the
//! element-wise kernels; these are the pieces nothing else provides:
//! - `slot_mask`: `mask[k] = x[offset + k stride] > 0.5 ? 1 : 0`.
//! - `causal_mask`: `mask[k] = k <= q ? 1 : 0`.
//! - `mask_rows`: `y[r, :] = 0` where `mask[r % mask_len] < 0.5` (invalid query rows).
//! - `rel_pos_bias`: `s[h L + q, k] += q_h[q] . (rel_h[qy - ky + gh - 1] + rel_w[qx - kx + gw - 1])`
//!   over a `gh x gw` token grid (SAM's decomposed relative position).
//! - `window_rows`: token rows of a `gh x gw` grid to zero-padded `win x win` windows, and back.
//! - `token_moments`: per key column, the mass and the `(y, x)` centroid of an attention map.
//!
//! All compute in FP32 whatever the storage type.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{
    check_divisors, check_u32, extent, grid_1d, strided_span, sum, Buf, LaunchError,
};
use crate::primitives::{cube_sum, row_grid, REDUCE_UNITS};

#[cube(launch_unchecked)]
fn slot_mask_kernel<F: Float>(
    x: &Array<F>,
    mask: &mut Array<f32>,
    offset: usize,
    stride: usize,
    k: usize,
) {
    let i = ABSOLUTE_POS;
    if i < k {
        let mut m = 0.0f32;
        if f32::cast_from(x[offset + i * stride]) > 0.5f32 {
            m = 1.0f32;
        }
        mask[i] = m;
    }
}

#[cube(launch_unchecked)]
fn causal_mask_kernel(mask: &mut Array<f32>, q: usize, l: usize) {
    let k = ABSOLUTE_POS;
    if k < l {
        let mut m = 0.0f32;
        if k <= q {
            m = 1.0f32;
        }
        mask[k] = m;
    }
}

#[cube(launch_unchecked)]
fn mask_rows_kernel<F: Float>(
    y: &mut Array<F>,
    mask: &Array<f32>,
    len: usize,
    cols: usize,
    mask_len: usize,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        let row = i / cols;
        if mask[row % mask_len] < 0.5f32 {
            y[i] = F::new(0.0);
        }
    }
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn rel_pos_bias_kernel<F: Float>(
    q: &Array<F>,
    rel_h: &Array<F>,
    rel_w: &Array<F>,
    s: &mut Array<F>,
    len: usize,
    hd: usize,
    gh: usize,
    gw: usize,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        let l = gh * gw;
        let row = i / l;
        let k = i % l;
        let qi = row % l;
        let ih = qi / gw + gh - 1 - k / gw;
        let iw = qi % gw + gw - 1 - k % gw;
        let mut acc = 0.0f32;
        for d in 0..hd {
            let qv = f32::cast_from(q[row * hd + d]);
            acc += qv * (f32::cast_from(rel_h[ih * hd + d]) + f32::cast_from(rel_w[iw * hd + d]));
        }
        s[i] = F::cast_from(f32::cast_from(s[i]) + acc);
    }
}

/// `partition`: `out` rows are the tokens of `win x win` windows (window-major, `nwx` windows
/// per grid row), zero where a window reaches past the grid; else the inverse, cropping.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn window_rows_kernel<F: Float>(
    x: &Array<F>,
    out: &mut Array<F>,
    len: usize,
    cols: usize,
    gh: usize,
    gw: usize,
    win: usize,
    nwx: usize,
    #[comptime] partition: bool,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        let r = i / cols;
        let c = i % cols;
        let ww = win * win;
        if comptime!(partition) {
            let w = r / ww;
            let t = r % ww;
            let y = (w / nwx) * win + t / win;
            let xx = (w % nwx) * win + t % win;
            let mut v = F::new(0.0);
            if y < gh && xx < gw {
                v = x[(y * gw + xx) * cols + c];
            }
            out[i] = v;
        } else {
            let y = r / gw;
            let xx = r % gw;
            let w = (y / win) * nwx + xx / win;
            let src = w * ww + (y % win) * win + xx % win;
            out[i] = x[src * cols + c];
        }
    }
}

/// One cube per key column `k`; its units share the `h_lat * w_lat` query rows.
#[cube(launch_unchecked)]
fn token_moments_kernel<F: Float>(
    attn: &Array<F>,
    mass: &mut Array<f32>,
    centroid: &mut Array<f32>,
    lq: usize,
    lk: usize,
    w_lat: usize,
) {
    let k = CUBE_POS;
    if k < lk {
        let mut m = 0.0f32;
        let mut sy = 0.0f32;
        let mut sx = 0.0f32;
        let mut q = UNIT_POS as usize;
        loop {
            if q >= lq {
                break;
            }
            let a = f32::cast_from(attn[q * lk + k]);
            m += a;
            sy += f32::cast_from(q / w_lat) * a;
            sx += f32::cast_from(q % w_lat) * a;
            q += REDUCE_UNITS as usize;
        }
        let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let m = cube_sum::<f32>(m, &mut smem);
        let sy = cube_sum::<f32>(sy, &mut smem);
        let sx = cube_sum::<f32>(sx, &mut smem);
        if UNIT_POS == 0 {
            mass[k] = m;
            let mut cy = 0.0f32;
            let mut cx = 0.0f32;
            if m > 1e-8f32 {
                cy = sy / m;
                cx = sx / m;
            }
            centroid[2 * k] = cy;
            centroid[2 * k + 1] = cx;
        }
    }
}

/// `mask (k, 1) F32 = x[offset + i stride] > 0.5` for `i < k`.
pub fn launch_slot_mask<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    x: &Handle,
    mask: &Handle,
    (offset, k, stride): (usize, usize, usize),
) -> Result<(), LaunchError> {
    if k == 0 {
        return Ok(());
    }
    let reach = sum(
        "offset + span",
        offset,
        strided_span("k * stride", k, stride, 1)?,
    )?;
    let x = Buf::new("x", x, reach, core::mem::size_of::<F>())?;
    let mask = Buf::new("mask", mask, k, 4)?;
    check_u32(&[("offset + span", reach)])?;
    let (count, dim) = grid_1d(client, k)?;
    // SAFETY: x holds offset + (k - 1) stride + 1 elements and mask k (checked `Buf`s);
    // units past `k` return.
    unsafe {
        slot_mask_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            mask.arg(),
            offset,
            stride,
            k,
        );
    }
    Ok(())
}

/// `mask (l, 1) F32 = k <= q`.
pub fn launch_causal_mask<R: Runtime>(
    client: &ComputeClient<R>,
    mask: &Handle,
    l: usize,
    q: usize,
) -> Result<(), LaunchError> {
    if l == 0 {
        return Ok(());
    }
    let mask = Buf::new("mask", mask, l, 4)?;
    check_u32(&[("l", l), ("q", q)])?;
    let (count, dim) = grid_1d(client, l)?;
    // SAFETY: mask holds l floats (a checked `Buf`); units past `l` return.
    unsafe {
        causal_mask_kernel::launch_unchecked::<R>(client, count, dim, mask.arg(), q, l);
    }
    Ok(())
}

/// Zeroes row `r` of `y (rows, cols)` where `mask[r % mask_len] < 0.5`.
pub fn launch_mask_rows<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    y: &Handle,
    mask: &Handle,
    (rows, cols): (usize, usize),
    mask_len: usize,
) -> Result<(), LaunchError> {
    let len = extent("rows * cols", &[rows, cols])?;
    if len == 0 {
        return Ok(());
    }
    check_divisors(&[("mask_len", mask_len)])?;
    let y = Buf::new("y", y, len, core::mem::size_of::<F>())?;
    let mask = Buf::new("mask", mask, mask_len, 4)?;
    check_u32(&[("rows * cols", len)])?;
    let (count, dim) = grid_1d(client, len)?;
    // SAFETY: y holds rows*cols elements and mask mask_len (checked `Buf`s, nonzero); units
    // past `len` return and mask indices are `% mask_len`.
    unsafe {
        mask_rows_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            y.arg(),
            mask.arg(),
            len,
            cols,
            mask_len,
        );
    }
    Ok(())
}

/// Adds the decomposed relative-position bias to `s (heads gh gw, gh gw)` from the queries
/// `q (heads gh gw, hd)` and the tables `rel_h (2 gh - 1, hd)`, `rel_w (2 gw - 1, hd)`.
pub fn launch_rel_pos_bias<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (q, rel_h, rel_w, s): (&Handle, &Handle, &Handle, &Handle),
    heads: usize,
    hd: usize,
    (gh, gw): (usize, usize),
) -> Result<(), LaunchError> {
    let l = extent("gh * gw", &[gh, gw])?;
    let len = extent("heads * l * l", &[heads, l, l])?;
    if len == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let q = Buf::new("q", q, extent("heads * l * hd", &[heads, l, hd])?, b)?;
    let rel_h = Buf::new(
        "rel_h",
        rel_h,
        extent("(2 gh - 1) hd", &[2 * gh - 1, hd])?,
        b,
    )?;
    let rel_w = Buf::new(
        "rel_w",
        rel_w,
        extent("(2 gw - 1) hd", &[2 * gw - 1, hd])?,
        b,
    )?;
    let s = Buf::new("s", s, len, b)?;
    check_u32(&[("heads * l * l", len)])?;
    let (count, dim) = grid_1d(client, len)?;
    // SAFETY: every buffer holds what its index reaches (checked `Buf`s): rows of q below
    // heads*l, table rows below 2g - 1 (qy + gh - 1 - ky with qy, ky < gh), and units past
    // `len` return.
    unsafe {
        rel_pos_bias_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            q.arg(),
            rel_h.arg(),
            rel_w.arg(),
            s.arg(),
            len,
            hd,
            gh,
            gw,
        );
    }
    Ok(())
}

/// The window geometry of [`launch_window_rows`]: a `gh x gw` token grid cut into
/// `win x win` windows, `nwy x nwx` of them.
#[derive(Clone, Copy, Debug)]
pub struct Windows {
    /// Grid rows.
    pub gh: usize,
    /// Grid columns.
    pub gw: usize,
    /// Window side.
    pub win: usize,
}

impl Windows {
    /// Windows down and across.
    pub fn counts(&self) -> (usize, usize) {
        (self.gh.div_ceil(self.win), self.gw.div_ceil(self.win))
    }
}

/// `partition`: `out (nwy nwx win win, cols)` = the grid rows of `x (gh gw, cols)` window by
/// window, zero past the grid; else `out (gh gw, cols)` = the grid rows back from the windows
/// of `x`.
pub fn launch_window_rows<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    x: &Handle,
    out: &Handle,
    cols: usize,
    g: Windows,
    partition: bool,
) -> Result<(), LaunchError> {
    check_divisors(&[("win", g.win)])?;
    let (nwy, nwx) = g.counts();
    let grid = extent("gh * gw * cols", &[g.gh, g.gw, cols])?;
    let windows = extent("windows * win^2 * cols", &[nwy, nwx, g.win, g.win, cols])?;
    let (src, len) = if partition {
        (grid, windows)
    } else {
        (windows, grid)
    };
    if len == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let x = Buf::new("x", x, src, b)?;
    let out = Buf::new("out", out, len, b)?;
    check_u32(&[("window rows source", src), ("window rows output", len)])?;
    let (count, dim) = grid_1d(client, len)?;
    // SAFETY: x holds `src` and out `len` elements (checked `Buf`s); every source index lies
    // inside the grid (partition reads only y < gh, x < gw) or inside the windows (reverse),
    // and units past `len` return.
    unsafe {
        window_rows_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            out.arg(),
            len,
            cols,
            g.gh,
            g.gw,
            g.win,
            nwx,
            partition,
        );
    }
    Ok(())
}

/// `mass (lk, 1)` and `centroid (lk, 2)` (F32) of `attn (h_lat w_lat, lk)`.
pub fn launch_token_moments<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    attn: &Handle,
    mass: &Handle,
    centroid: &Handle,
    (h_lat, w_lat, lk): (usize, usize, usize),
) -> Result<(), LaunchError> {
    if lk == 0 {
        return Ok(());
    }
    let lq = extent("h_lat * w_lat", &[h_lat, w_lat])?;
    if lq > 0 {
        check_divisors(&[("w_lat", w_lat)])?;
    }
    let attn = Buf::new(
        "attn",
        attn,
        extent("lq * lk", &[lq, lk])?,
        core::mem::size_of::<F>(),
    )?;
    let mass = Buf::new("mass", mass, lk, 4)?;
    let centroid = Buf::new("centroid", centroid, extent("2 lk", &[2, lk])?, 4)?;
    check_u32(&[("lq * lk", extent("lq * lk", &[lq, lk])?), ("2 lk", 2 * lk)])?;
    let (count, dim) = row_grid(client, lk)?;
    // SAFETY: attn holds lq*lk elements, mass lk and centroid 2 lk (checked `Buf`s); cubes
    // past `lk` return and units read only rows below lq; w_lat is nonzero whenever a row is
    // read.
    unsafe {
        token_moments_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            attn.arg(),
            mass.arg(),
            centroid.arg(),
            lq,
            lk,
            w_lat.max(1),
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
    l.lower(causal_mask_kernel::CausalMaskKernel::<Rt>::new(
        L::settings_1d(),
        c.clone(),
        a(),
        (),
        (),
    ));
    for_floats!(|F| {
        l.lower(slot_mask_kernel::SlotMaskKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            (),
            (),
            (),
        ));
        l.lower(mask_rows_kernel::MaskRowsKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            (),
            (),
            (),
        ));
        l.lower(rel_pos_bias_kernel::RelPosBiasKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            a(),
            a(),
            (),
            (),
            (),
            (),
        ));
        for partition in [false, true] {
            l.lower(window_rows_kernel::WindowRowsKernel::<F, Rt>::new(
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
                partition,
            ));
        }
        l.lower(token_moments_kernel::TokenMomentsKernel::<F, Rt>::new(
            L::settings(CubeDim::new_1d(REDUCE_UNITS)),
            c.clone(),
            a(),
            a(),
            a(),
            (),
            (),
            (),
        ));
    });
}
