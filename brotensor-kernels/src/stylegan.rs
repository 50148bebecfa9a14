//! StyleGAN kernels: `bias_act` and its input gradient (one unit per element), the
//! per-sample weight modulation of `modulated_conv2d` (one unit per `(sample, output
//! channel)` row) and its gradient in three passes, and `upfirdn2d` (one unit per output
//! pixel, visiting only the taps that meet an input sample). FP32 math in every storage
//! type.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, grid_1d, Buf, LaunchError};

/// `bias_act`'s parameters: `y = clamp(gain act(x + b[c]))`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BiasActParams {
    /// Leaky ReLU slope, or `None` for the linear activation.
    pub leaky_alpha: Option<f32>,
    /// Output scale.
    pub gain: f32,
    /// Symmetric clamp of the scaled value, or none.
    pub clamp: Option<f32>,
}

/// `gain act(t)` before the clamp.
#[cube]
fn scaled(t: f32, alpha: f32, gain: f32, #[comptime] leaky: bool) -> f32 {
    let mut a = t;
    if leaky && t <= 0.0f32 {
        a = t * alpha;
    }
    a * gain
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn bias_act_kernel<F: Float>(
    x: &Array<F>,
    dy: &Array<F>,
    b: &Array<F>,
    y: &mut Array<F>,
    channels: usize,
    plane: usize,
    alpha: f32,
    gain: f32,
    clamp: f32,
    #[comptime] leaky: bool,
    #[comptime] has_bias: bool,
    #[comptime] has_clamp: bool,
    #[comptime] backward: bool,
) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let mut t = f32::cast_from(x[i]);
        if has_bias {
            t += f32::cast_from(b[(i / plane) % channels]);
        }
        let v = scaled(t, alpha, gain, leaky);
        if backward {
            let mut g = f32::cast_from(dy[i]) * gain;
            if leaky && t <= 0.0f32 {
                g *= alpha;
            }
            if has_clamp && v.abs() > clamp {
                g = 0.0f32;
            }
            y[i] = F::cast_from(g);
        } else {
            let mut out = v;
            if has_clamp {
                out = clamp_value(v, clamp);
            }
            y[i] = F::cast_from(out);
        }
    }
}

/// `v` limited to `[-c, c]`.
#[cube]
fn clamp_value(v: f32, c: f32) -> f32 {
    let mut out = v;
    if v > c {
        out = c;
    }
    if v < -c {
        out = -c;
    }
    out
}

/// `bias_act` over `len` elements in `(N, C, plane)` order: the forward value `y = clamp(gain
/// act(x + b[c]))`, or with `dy` (the backward pass) the input gradient `dx = dy gain
/// act'(x + b[c])`, zero where the clamp cut the value, written to `y`.
pub fn launch_bias_act<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, dy, b, y): (&Handle, Option<&Handle>, Option<&Handle>, &Handle),
    len: usize,
    (channels, plane): (usize, usize),
    p: BiasActParams,
) -> Result<(), LaunchError> {
    check_u32(&[("x", len)])?;
    if len == 0 {
        return Ok(());
    }
    crate::launch::check_divisors(&[("C", channels), ("H*W", plane)])?;
    let e = core::mem::size_of::<F>();
    let xb = Buf::new("x", x, len, e)?;
    let yb = Buf::new(if dy.is_some() { "dx" } else { "y" }, y, len, e)?;
    let db = dy.map(|h| Buf::new("dy", h, len, e)).transpose()?;
    let bb = b.map(|h| Buf::new("b", h, channels, e)).transpose()?;
    let (backward, has_bias) = (db.is_some(), bb.is_some());
    let (db, bb) = (xb.stand_in_for(db.as_ref()), xb.stand_in_for(bb.as_ref()));
    let (count, dim) = grid_1d(client, len)?;
    // SAFETY: units below `len`, the checked length of `x`, `y` and (bound) `dy`; the bias
    // index is `% channels`, inside the checked `b`; `plane` and `channels` are nonzero;
    // stand-ins are not read (their flags are off).
    unsafe {
        bias_act_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            xb.arg(),
            db.arg(),
            bb.arg(),
            yb.arg(),
            channels,
            plane,
            p.leaky_alpha.unwrap_or(1.0),
            p.gain,
            p.clamp.unwrap_or(0.0),
            p.leaky_alpha.is_some(),
            has_bias,
            p.clamp.is_some(),
            backward,
        );
    }
    Ok(())
}

/// The sizes of a weight modulation (as `brotensor_cpu::stylegan::Modulation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModSizes {
    /// Samples.
    pub n: usize,
    /// Output channels.
    pub c_out: usize,
    /// Input channels.
    pub c_in: usize,
    /// Taps per input channel.
    pub taps: usize,
}

/// `w'[n, o, j] = w[o, j] s[n, i]`, element `j = i taps + k` of weight row `o` modulated
/// by sample `n`'s style of its input channel.
#[cube]
fn modulated<F: Float>(
    w: &Array<F>,
    s: &Array<F>,
    n: usize,
    o: usize,
    j: usize,
    c_in: usize,
    taps: usize,
) -> f32 {
    f32::cast_from(w[o * c_in * taps + j]) * f32::cast_from(s[n * c_in + j / taps])
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn modulate_weights_kernel<F: Float>(
    w: &Array<F>,
    s: &Array<F>,
    wmod: &mut Array<F>,
    dcoef: &mut Array<F>,
    c_out: usize,
    c_in: usize,
    taps: usize,
    eps: f32,
    #[comptime] demod: bool,
) {
    let r = ABSOLUTE_POS;
    if r < dcoef.len() {
        let (n, o) = (r / c_out, r % c_out);
        let row = c_in * taps;
        let mut sq = 0.0f32;
        for j in 0..row {
            let v = modulated::<F>(w, s, n, o, j, c_in, taps);
            sq += v * v;
        }
        let mut d = 1.0f32;
        if demod {
            d = 1.0f32 / (sq + eps).sqrt();
        }
        dcoef[r] = F::cast_from(d);
        for j in 0..row {
            let v = modulated::<F>(w, s, n, o, j, c_in, taps);
            wmod[r * row + j] = F::cast_from(v * d);
        }
    }
}

/// The per-sample weights of `modulated_conv2d`: `wmod[n, o] = w[o] s[n] dcoef[n, o]` with
/// `dcoef = 1 / sqrt(sum (w s)^2 + eps)` under demodulation (`demod_eps`), else 1. One unit
/// walks a weight row twice, so on lavapipe (see the crate docs) a row of `C_in kH kW` must
/// stay under about 32 thousand elements (StyleGAN's 512 x 3 x 3 is 4608).
pub fn launch_modulate_weights<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (w, s, wmod, dcoef): (&Handle, &Handle, &Handle, &Handle),
    m: ModSizes,
    demod_eps: Option<f32>,
) -> Result<(), LaunchError> {
    let rows = extent("N*C_out", &[m.n, m.c_out])?;
    let row = extent("C_in*kH*kW", &[m.c_in, m.taps])?;
    let wlen = extent("C_out*C_in*kH*kW", &[m.c_out, row])?;
    let mlen = extent("N*C_out*C_in*kH*kW", &[rows, row])?;
    let slen = extent("N*C_in", &[m.n, m.c_in])?;
    check_u32(&[("wmod", mlen), ("s", slen)])?;
    if rows == 0 {
        return Ok(());
    }
    let e = core::mem::size_of::<F>();
    let wb = Buf::new("w", w, wlen, e)?.nonempty();
    let sb = Buf::new("s", s, slen, e)?.nonempty();
    let mb = Buf::new("wmod", wmod, mlen, e)?.nonempty();
    let db = Buf::new("dcoef", dcoef, rows, e)?;
    let (count, dim) = grid_1d(client, rows)?;
    // SAFETY: units below `rows = N C_out` (the checked `dcoef`); row `r` reads `w[o row +
    // j]`, `s[n C_in + j / taps]` and writes `wmod[r row + j]` for `j < row`, all below the
    // checked lengths; with `row = 0` no loop runs, so the nonempty stand-ins are not read.
    unsafe {
        modulate_weights_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            wb.arg(),
            sb.arg(),
            mb.arg(),
            db.arg(),
            m.c_out,
            m.c_in,
            m.taps,
            demod_eps.unwrap_or(0.0),
            demod_eps.is_some(),
        );
    }
    Ok(())
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn modulate_weights_grad_kernel<F: Float>(
    w: &Array<F>,
    s: &Array<F>,
    dcoef: &Array<F>,
    dwmod: &Array<F>,
    dwp: &mut Array<f32>,
    c_out: usize,
    c_in: usize,
    taps: usize,
    #[comptime] demod: bool,
) {
    let r = ABSOLUTE_POS;
    if r < dcoef.len() {
        let (n, o) = (r / c_out, r % c_out);
        let row = c_in * taps;
        if demod {
            let d = f32::cast_from(dcoef[r]);
            let mut g = 0.0f32;
            for j in 0..row {
                let wp = modulated::<F>(w, s, n, o, j, c_in, taps);
                g += f32::cast_from(dwmod[r * row + j]) * wp;
            }
            let k = g * d * d * d;
            for j in 0..row {
                let wp = modulated::<F>(w, s, n, o, j, c_in, taps);
                dwp[r * row + j] = f32::cast_from(dwmod[r * row + j]) * d - k * wp;
            }
        } else {
            for j in 0..row {
                dwp[r * row + j] = f32::cast_from(dwmod[r * row + j]);
            }
        }
    }
}

#[cube(launch_unchecked)]
fn modulate_weights_dw_kernel<F: Float>(
    s: &Array<F>,
    dwp: &Array<f32>,
    dw: &mut Array<F>,
    n: usize,
    c_in: usize,
    taps: usize,
) {
    let q = ABSOLUTE_POS;
    if q < dw.len() {
        let row = c_in * taps;
        let per_sample = dw.len();
        let i = (q % row) / taps;
        let mut acc = 0.0f32;
        for k in 0..n {
            acc += dwp[k * per_sample + q] * f32::cast_from(s[k * c_in + i]);
        }
        dw[q] = F::cast_from(f32::cast_from(dw[q]) + acc);
    }
}

#[cube(launch_unchecked)]
fn modulate_weights_ds_kernel<F: Float>(
    w: &Array<F>,
    dwp: &Array<f32>,
    ds: &mut Array<F>,
    c_out: usize,
    c_in: usize,
    taps: usize,
) {
    let q = ABSOLUTE_POS;
    if q < ds.len() {
        let (n, i) = (q / c_in, q % c_in);
        let row = c_in * taps;
        let mut acc = 0.0f32;
        for o in 0..c_out {
            let at = o * row + i * taps;
            for k in 0..taps {
                acc += dwp[n * c_out * row + at + k] * f32::cast_from(w[at + k]);
            }
        }
        ds[q] = F::cast_from(acc);
    }
}

/// The gradient of [`launch_modulate_weights`] from `dwmod` (the grouped convolution's
/// weight gradient): `dw' = dwmod dcoef - (sum dwmod w') dcoef^3 w'` per `(n, o)` under
/// demodulation (else `dwmod`) into the FP32 scratch `dwp` (`N C_out C_in taps` values),
/// then `dw[o, i, k] += sum_n dw' s[n, i]` and `ds[n, i] = sum_{o,k} dw' w[o, i, k]`.
#[allow(clippy::too_many_arguments)]
pub fn launch_modulate_weights_backward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (w, s, dcoef, dwmod): (&Handle, &Handle, &Handle, &Handle),
    dwp: &Handle,
    (dw, ds): (&Handle, &Handle),
    m: ModSizes,
    demodulate: bool,
) -> Result<(), LaunchError> {
    let rows = extent("N*C_out", &[m.n, m.c_out])?;
    let row = extent("C_in*kH*kW", &[m.c_in, m.taps])?;
    let wlen = extent("C_out*C_in*kH*kW", &[m.c_out, row])?;
    let mlen = extent("N*C_out*C_in*kH*kW", &[rows, row])?;
    let slen = extent("N*C_in", &[m.n, m.c_in])?;
    check_u32(&[("dwmod", mlen), ("s", slen), ("w", wlen)])?;
    let e = core::mem::size_of::<F>();
    let wb = Buf::new("w", w, wlen, e)?.nonempty();
    let sb = Buf::new("s", s, slen, e)?.nonempty();
    let cb = Buf::new("dcoef", dcoef, rows, e)?;
    let mb = Buf::new("dwmod", dwmod, mlen, e)?.nonempty();
    let pb = Buf::new("scratch", dwp, mlen, 4)?.nonempty();
    let dwb = Buf::new("dw", dw, wlen, e)?;
    let dsb = Buf::new("ds", ds, slen, e)?;
    if rows > 0 {
        let (count, dim) = grid_1d(client, rows)?;
        // SAFETY: units below `rows` (the checked `dcoef`); row `r` touches `[r row, (r + 1)
        // row)` of `dwmod` and `dwp` and `w`, `s` as in the forward launch, all checked.
        unsafe {
            modulate_weights_grad_kernel::launch_unchecked::<F, R>(
                client,
                count,
                dim,
                wb.arg(),
                sb.arg(),
                cb.arg(),
                mb.arg(),
                pb.arg(),
                m.c_out,
                m.c_in,
                m.taps,
                demodulate,
            );
        }
    }
    if wlen > 0 {
        let (count, dim) = grid_1d(client, wlen)?;
        // SAFETY: units below `wlen` (the checked `dw`); unit `q` reads `dwp[k wlen + q]` for
        // `k < N` (below `N wlen`, checked) and `s[k C_in + i]` with `i < C_in`.
        unsafe {
            modulate_weights_dw_kernel::launch_unchecked::<F, R>(
                client,
                count,
                dim,
                sb.arg(),
                pb.arg(),
                dwb.arg(),
                m.n,
                m.c_in,
                m.taps,
            );
        }
    }
    if slen > 0 {
        let (count, dim) = grid_1d(client, slen)?;
        // SAFETY: units below `slen` (the checked `ds`); unit `(n, i)` reads `dwp[n C_out row
        // + o row + i taps + k]` (below `N C_out row`) and `w[o row + i taps + k]` (below
        // `C_out row`) for `o < C_out`, `k < taps`; with `row = 0` no loop body runs.
        unsafe {
            modulate_weights_ds_kernel::launch_unchecked::<F, R>(
                client,
                count,
                dim,
                wb.arg(),
                pb.arg(),
                dsb.arg(),
                m.c_out,
                m.c_in,
                m.taps,
            );
        }
    }
    Ok(())
}

/// The geometry of an `upfirdn2d` launch (as `brotensor_cpu::stylegan::Upfirdn2d`, with the
/// output size it gives).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UpfirdnGeometry {
    /// Input plane `[H, W]`.
    pub input: [usize; 2],
    /// Output plane `[H_out, W_out]`.
    pub out: [usize; 2],
    /// Filter `[fH, fW]`.
    pub filter: [usize; 2],
    /// Up factors `[y, x]`.
    pub up: [usize; 2],
    /// Down factors `[y, x]`.
    pub down: [usize; 2],
    /// `[y0, y1, x0, x1]` padding (negative crops); only the leading pads are read.
    pub pad: [i64; 4],
    /// Correlate with the filter as stored (else flipped).
    pub flip_filter: bool,
    /// Output scale.
    pub gain: f32,
}

/// The filter taps along one axis that meet an input sample for output index `o`: the
/// first tap, and the source index it meets (`base = o down - pad0`, taps step by `up`).
#[cube]
fn first_tap(o: i32, down: i32, pad0: i32, up: i32) -> (i32, i32) {
    let base = o * down - pad0;
    let mut t = (0i32 - base) % up;
    if t < 0i32 {
        t += up;
    }
    (t, (base + t) / up)
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn upfirdn2d_kernel<F: Float>(
    x: &Array<F>,
    f: &Array<F>,
    y: &mut Array<F>,
    h: i32,
    w: i32,
    ho: usize,
    wo: usize,
    fh: i32,
    fw: i32,
    up_y: i32,
    up_x: i32,
    down_y: i32,
    down_x: i32,
    pad_y0: i32,
    pad_x0: i32,
    gain: f32,
    #[comptime] flip_filter: bool,
) {
    let q = ABSOLUTE_POS;
    if q < y.len() {
        let plane = q / (ho * wo);
        let ox = (q % wo) as i32;
        let oy = ((q / wo) % ho) as i32;
        let src = plane * (h * w) as usize;
        let (i0, sy0) = first_tap(oy, down_y, pad_y0, up_y);
        let (j0, sx0) = first_tap(ox, down_x, pad_x0, up_x);
        let mut acc = 0.0f32;
        let mut i = i0;
        let mut sy = sy0;
        loop {
            if i >= fh || sy >= h {
                break;
            }
            if sy >= 0i32 {
                let mut j = j0;
                let mut sx = sx0;
                loop {
                    if j >= fw || sx >= w {
                        break;
                    }
                    if sx >= 0i32 {
                        let mut ti = i;
                        let mut tj = j;
                        if !flip_filter {
                            ti = fh - 1i32 - i;
                            tj = fw - 1i32 - j;
                        }
                        let tap = f32::cast_from(f[(ti * fw + tj) as usize]);
                        acc += tap * f32::cast_from(x[src + (sy * w + sx) as usize]);
                    }
                    j += up_x;
                    sx += 1i32;
                }
            }
            i += up_y;
            sy += 1i32;
        }
        y[q] = F::cast_from(acc * gain);
    }
}

/// `upfirdn2d` of `planes` input planes into output planes (`g.out`): zero-insert up, pad
/// or crop, correlation with the filter (flipped unless `flip_filter`), down, gain. Every
/// size, factor, span (`H up`, `H_out down`) and pad must be below 2^29 in size (refused
/// otherwise), so the kernel's `i32` indices cannot overflow.
pub fn launch_upfirdn2d<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, f, y): (&Handle, &Handle, &Handle),
    planes: usize,
    g: &UpfirdnGeometry,
) -> Result<(), LaunchError> {
    let in_len = extent("planes*H*W", &[planes, g.input[0], g.input[1]])?;
    let out_len = extent("planes*H_out*W_out", &[planes, g.out[0], g.out[1]])?;
    let taps = extent("fH*fW", &g.filter)?;
    check_u32(&[("x", in_len), ("y", out_len)])?;
    // Every index the kernel forms (`o down - pad0 + tap`, `source + 1`) stays within
    // +-2^31 when each term is below 2^29 in size.
    const LIMIT: i64 = 1 << 29;
    let small = |v: i64| v.abs() < LIMIT;
    let sizes = [g.input, g.filter, g.up, g.down, g.out]
        .iter()
        .flatten()
        .all(|&v| v > 0 && (v as u64) < LIMIT as u64);
    let spans = (0..2).all(|a| {
        let up_span = (g.input[a] as u64).saturating_mul(g.up[a] as u64);
        let down_span = (g.out[a] as u64).saturating_mul(g.down[a] as u64);
        up_span < LIMIT as u64 && down_span < LIMIT as u64
    });
    if !sizes || !spans || !small(g.pad[0]) || !small(g.pad[2]) {
        return Err(LaunchError::Invalid {
            what: "upfirdn2d sizes, factors, spans and pads are positive (pads: any sign) and \
                   below 2^29",
        });
    }
    if out_len == 0 {
        return Ok(());
    }
    let e = core::mem::size_of::<F>();
    let xb = Buf::new("x", x, in_len, e)?;
    let fb = Buf::new("f", f, taps, e)?;
    let yb = Buf::new("y", y, out_len, e)?;
    let (count, dim) = grid_1d(client, out_len)?;
    let i = |v: usize| v as i32;
    // SAFETY: units below `out_len` (the checked `y`), so `plane < planes`; a tap is read only
    // for `0 <= sy < H`, `0 <= sx < W` (input index below `planes H W`, checked) and `0 <= i
    // < fH`, `0 <= j < fW` (filter index below `fH fW`, checked, also flipped); every index
    // the kernel forms stays inside `i32` (the bounds checked above).
    unsafe {
        upfirdn2d_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            xb.arg(),
            fb.arg(),
            yb.arg(),
            i(g.input[0]),
            i(g.input[1]),
            g.out[0],
            g.out[1],
            i(g.filter[0]),
            i(g.filter[1]),
            i(g.up[0]),
            i(g.up[1]),
            i(g.down[0]),
            i(g.down[1]),
            g.pad[0] as i32,
            g.pad[2] as i32,
            g.gain,
            g.flip_filter,
        );
    }
    Ok(())
}

/// Every kernel of this file in every specialisation the library can launch, lowered to
/// CUDA C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{for_floats, Lowering as L, Rt};
    let c = l.client.clone();
    let a = L::array;
    for_floats!(|F| {
        for flags in 0..16u32 {
            let [leaky, has_bias, has_clamp, backward] = [0, 1, 2, 3].map(|b| flags >> b & 1 == 1);
            l.lower(bias_act_kernel::BiasActKernel::<F, Rt>::new(
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
                (),
                leaky,
                has_bias,
                has_clamp,
                backward,
            ));
        }
        for demod in [false, true] {
            l.lower(
                modulate_weights_kernel::ModulateWeightsKernel::<F, Rt>::new(
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
                    demod,
                ),
            );
            l.lower(modulate_weights_grad_kernel::ModulateWeightsGradKernel::<
                F,
                Rt,
            >::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                a(),
                a(),
                a(),
                (),
                (),
                (),
                demod,
            ));
        }
        l.lower(
            modulate_weights_dw_kernel::ModulateWeightsDwKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                a(),
                (),
                (),
                (),
            ),
        );
        l.lower(
            modulate_weights_ds_kernel::ModulateWeightsDsKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                a(),
                (),
                (),
                (),
            ),
        );
        for flip in [false, true] {
            l.lower(upfirdn2d_kernel::Upfirdn2dKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
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
                (),
                (),
                (),
                (),
                (),
                (),
                flip,
            ));
        }
    });
}
