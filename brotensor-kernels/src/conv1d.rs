//! The 1-D (NCL) op of the convolution family that is not a 2-D convolution with one row:
//! the streaming step of a causal depthwise convolution, one unit per `(n, c)` row. Rows
//! are `(N*C, L)`. (The padding of the length axis is `crate::pad`'s 2-D padding of one-row
//! planes.)

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, grid_1d, Buf, LaunchError};

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
