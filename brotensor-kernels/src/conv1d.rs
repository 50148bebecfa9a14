//! The 1-D (NCL) ops of the convolution family that are not a 2-D convolution with one row:
//! padding of the length axis (zero, reflect, replicate) and its adjoint, each one unit per
//! output element gathering what it needs, and the streaming step of a causal depthwise
//! convolution, one unit per `(n, c)` row. Rows are `(N*C, L)`.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, grid_1d, Buf, LaunchError};

/// Padding modes, as the kernels' comptime code (the C++ codes).
pub const PAD_ZERO: u32 = 0;
/// Mirror about the end samples, which are not repeated.
pub const PAD_REFLECT: u32 = 1;
/// Repeat the end samples.
pub const PAD_REPLICATE: u32 = 2;

/// `y` = each row of `x` (rows of `len`) padded by `left` and `right`.
#[cube(launch_unchecked)]
fn pad1d_kernel<F: Float>(
    x: &Array<F>,
    y: &mut Array<F>,
    len: usize,
    left: usize,
    out_len: usize,
    #[comptime] mode: u32,
) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let r = i / out_len;
        let j = i % out_len;
        let mut v = F::new(0.0);
        if j >= left && j - left < len {
            v = x[r * len + j - left];
        } else if comptime!(mode == PAD_REFLECT) {
            // Before the signal: mirrored about sample 0; after it: about sample len - 1.
            let mut src = 2 * (len - 1) + left - j;
            if j < left {
                src = left - j;
            }
            v = x[r * len + src];
        } else if comptime!(mode == PAD_REPLICATE) {
            let mut src = len - 1;
            if j < left {
                src = 0;
            }
            v = x[r * len + src];
        }
        y[i] = v;
    }
}

/// The adjoint of [`pad1d_kernel`]: each input sample sums, in FP32, the output samples
/// that read it (`dy` rows of `out_len = len + left + right`).
#[cube(launch_unchecked)]
fn pad1d_backward_kernel<F: Float>(
    dy: &Array<F>,
    dx: &mut Array<F>,
    len: usize,
    left: usize,
    out_len: usize,
    #[comptime] mode: u32,
) {
    let i = ABSOLUTE_POS;
    if i < dx.len() {
        let r = i / len;
        let s = i % len;
        let row = r * out_len;
        let right = out_len - len - left;
        let mut acc = f32::cast_from(dy[row + s + left]);
        if comptime!(mode == PAD_REFLECT) {
            // Output `left - s` (before the signal) and `2 (len - 1) + left - s` (after it).
            if s >= 1 && s <= left {
                acc += f32::cast_from(dy[row + left - s]);
            }
            if s + 1 < len && len - 1 - s <= right {
                acc += f32::cast_from(dy[row + 2 * (len - 1) + left - s]);
            }
        } else if comptime!(mode == PAD_REPLICATE) {
            if s == 0 {
                for j in 0..left {
                    acc += f32::cast_from(dy[row + j]);
                }
            }
            if s + 1 == len {
                for j in 0..right {
                    acc += f32::cast_from(dy[row + left + len + j]);
                }
            }
        }
        dx[i] = F::cast_from(acc);
    }
}

/// `y` (or with `backward`, `dx`) for `rows` rows of `len` samples padded by `left` and
/// `right` in `mode` ([`PAD_ZERO`], [`PAD_REFLECT`], [`PAD_REPLICATE`]). The caller checked
/// the mode against the sizes (reflect: each pad below `len`; replicate: `len > 0`).
#[allow(clippy::too_many_arguments)]
pub fn launch_pad1d<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    src: &Handle,
    dst: &Handle,
    (rows, len, left, right): (usize, usize, usize, usize),
    mode: u32,
    backward: bool,
) -> Result<(), LaunchError> {
    let out_len = crate::launch::sum("L + pad_left + pad_right", len, left)
        .and_then(|v| crate::launch::sum("L + pad_left + pad_right", v, right))?;
    let (x_len, y_len) = (
        extent("N*C*L", &[rows, len])?,
        extent("N*C*L_out", &[rows, out_len])?,
    );
    check_u32(&[("x", x_len), ("y", y_len)])?;
    let (read, write) = if backward {
        (y_len, x_len)
    } else {
        (x_len, y_len)
    };
    if write == 0 {
        return Ok(());
    }
    let refused = |what| Err(LaunchError::Invalid { what });
    match mode {
        PAD_REFLECT if left >= len || right >= len => {
            return refused("reflect padding needs each pad below L")
        }
        PAD_REPLICATE if len == 0 => return refused("replicate padding needs L > 0"),
        PAD_ZERO | PAD_REFLECT | PAD_REPLICATE => {}
        _ => return refused("padding mode must be 0, 1 or 2"),
    }
    let b = core::mem::size_of::<F>();
    let src = Buf::new(if backward { "dy" } else { "x" }, src, read, b)?;
    let dst = Buf::new(if backward { "dx" } else { "y" }, dst, write, b)?;
    let (count, dim) = grid_1d(client, write)?;
    // SAFETY: units below `write` (the checked length of `dst`) only; a forward unit reads
    // sample `r len + src` with `src < len` (the mode checked against the pads above), a
    // backward one samples `r out_len + j` with `j < out_len`: inside the checked `src`.
    unsafe {
        if backward {
            pad1d_backward_kernel::launch_unchecked::<F, R>(
                client,
                count,
                dim,
                src.arg(),
                dst.arg(),
                len,
                left,
                out_len,
                mode,
            );
        } else {
            pad1d_kernel::launch_unchecked::<F, R>(
                client,
                count,
                dim,
                src.arg(),
                dst.arg(),
                len,
                left,
                out_len,
                mode,
            );
        }
    }
    Ok(())
}

/// One unit per row `(n, c)`: `y[t] = bias[c] + sum_kl w[c, kl] buf[t + kl dilation]` with
/// `buf = state ++ x` (`s = (k - 1) dilation` state samples, then `steps` new ones), in FP32;
/// then `state` becomes the last `s` samples of `buf`, shifted in place.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn causal_conv1d_update_kernel<F: Float>(
    x: &Array<F>,
    w: &Array<F>,
    bias: &Array<F>,
    state: &mut Array<F>,
    y: &mut Array<F>,
    rows: usize,
    channels: usize,
    steps: usize,
    k: usize,
    dilation: usize,
    #[comptime] has_bias: bool,
) {
    let r = ABSOLUTE_POS;
    if r < rows {
        let c = r % channels;
        let s = (k - 1) * dilation;
        for t in 0..steps {
            let mut acc = 0.0f32;
            if comptime!(has_bias) {
                acc = f32::cast_from(bias[c]);
            }
            for kl in 0..k {
                let i = t + kl * dilation;
                let v = if i < s {
                    state[r * s + i]
                } else {
                    x[r * steps + i - s]
                };
                acc += f32::cast_from(w[c * k + kl]) * f32::cast_from(v);
            }
            y[r * steps + t] = F::cast_from(acc);
        }
        // In increasing order: sample `i` reads `i + steps`, never one already written.
        for i in 0..s {
            let src = i + steps;
            if src < s {
                state[r * s + i] = state[r * s + src];
            } else {
                state[r * s + i] = x[r * steps + src - s];
            }
        }
    }
}

/// One streaming step of a causal depthwise convolution over `(n, channels)` rows of `steps`
/// new samples, against `state` (rows of `(k - 1) dilation`), read and overwritten; `w` is
/// `(channels, k)`, `bias` `channels` values.
#[allow(clippy::too_many_arguments)]
pub fn launch_causal_conv1d_update<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, w, bias): (&Handle, &Handle, Option<&Handle>),
    (state, y): (&Handle, &Handle),
    (n, channels, steps, k, dilation): (usize, usize, usize, usize, usize),
) -> Result<(), LaunchError> {
    crate::launch::check_divisors(&[("k", k), ("dilation", dilation)])?;
    let rows = extent("N*C", &[n, channels])?;
    let s = extent("(k - 1) * dilation", &[k - 1, dilation])?;
    let len = extent("N*C*L_step", &[rows, steps])?;
    if len == 0 {
        return Ok(());
    }
    let (w_len, state_len) = (extent("C*k", &[channels, k])?, extent("N*C*S", &[rows, s])?);
    check_u32(&[
        ("x", len),
        ("w", w_len),
        ("state", state_len),
        ("dilation", dilation),
    ])?;
    let b = core::mem::size_of::<F>();
    let x = Buf::new("x", x, len, b)?;
    let yb = Buf::new("y", y, len, b)?;
    let w = Buf::new("w", w, w_len, b)?;
    let state = Buf::new("state", state, state_len, b)?;
    let bias = bias.map(|h| Buf::new("bias", h, channels, b)).transpose()?;
    let has_bias = bias.is_some();
    let bias = w.stand_in_for(bias.as_ref());
    // An empty state is bound as one element the kernel never reads (`s = 0`).
    let state = state.nonempty();
    let (count, dim) = grid_1d(client, rows)?;
    // SAFETY: units below `rows` only (`rows >= 1`, `channels >= 1`: `len > 0`); row `r`
    // reads `x` and writes `y` below `(r + 1) steps <= len`, touches `state` below
    // `(r + 1) s` (checked `rows s`), reads `w` below `channels k` and, when bound, `bias`
    // below `channels`.
    unsafe {
        causal_conv1d_update_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            w.arg(),
            bias.arg(),
            state.arg(),
            yb.arg(),
            rows,
            channels,
            steps,
            k,
            dilation,
            has_bias,
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
        for mode in [PAD_ZERO, PAD_REFLECT, PAD_REPLICATE] {
            l.lower(pad1d_kernel::Pad1dKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                (),
                (),
                (),
                mode,
            ));
            l.lower(pad1d_backward_kernel::Pad1dBackwardKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                (),
                (),
                (),
                mode,
            ));
        }
        for has_bias in [false, true] {
            l.lower(
                causal_conv1d_update_kernel::CausalConv1dUpdateKernel::<F, Rt>::new(
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
                    (),
                    (),
                    has_bias,
                ),
            );
        }
    });
}
