//! BatchNorm over `x (N, C*HW)` tensors (NCHW samples). Training forward and backward (FP32):
//! one cube per channel reduces its `M = N*HW` values (two-pass statistics), then writes its
//! elements; unit 0 writes the channel's statistics. Inference (any float dtype): one unit
//! per element. Channel `c`'s `t`-th value (`t < M`)
//! sits at `(t / HW) C HW + c HW + t % HW`.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_divisors, extent, grid_1d, Buf, LaunchError};
use crate::primitives::{cube_sum, row_grid, REDUCE_UNITS};

/// The index of channel `ch`'s `t`-th value.
#[cube]
fn at(t: usize, ch: usize, c: usize, hw: usize) -> usize {
    (t / hw) * c * hw + ch * hw + t % hw
}

/// `y = x a + b` with `a = gamma / sqrt(running_var + eps)`, `b = beta - running_mean a` of
/// the element's channel `(i / hw) % c`, computed in FP32.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn batch_norm_inference_kernel<F: Float>(
    x: &Array<F>,
    gamma: &Array<F>,
    beta: &Array<F>,
    running_mean: &Array<F>,
    running_var: &Array<F>,
    y: &mut Array<F>,
    c: usize,
    hw: usize,
    eps: f32,
) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let ch = (i / hw) % c;
        let a = f32::cast_from(gamma[ch]) / (f32::cast_from(running_var[ch]) + eps).sqrt();
        let b = f32::cast_from(beta[ch]) - f32::cast_from(running_mean[ch]) * a;
        y[i] = F::cast_from(f32::cast_from(x[i]) * a + b);
    }
}

/// Per channel: mean and biased variance (two-pass), `y = (x - mean) rstd gamma + beta`,
/// `saved_mean`, `saved_rstd`, and the running statistics blended with `momentum` (the
/// variance unbiased by `M / (M - 1)` when `M > 1`).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn batch_norm_kernel(
    x: &Array<f32>,
    gamma: &Array<f32>,
    beta: &Array<f32>,
    y: &mut Array<f32>,
    running_mean: &mut Array<f32>,
    running_var: &mut Array<f32>,
    saved_mean: &mut Array<f32>,
    saved_rstd: &mut Array<f32>,
    c: usize,
    n: usize,
    hw: usize,
    eps: f32,
    momentum: f32,
) {
    let ch = CUBE_POS;
    if ch < c {
        let m = n * hw;
        let mf = f32::cast_from(m);
        let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let mut s = f32::new(0.0f32);
        let mut t = UNIT_POS as usize;
        loop {
            if t >= m {
                break;
            }
            s += x[at(t, ch, c, hw)];
            t += REDUCE_UNITS as usize;
        }
        let mean = cube_sum::<f32>(s, &mut smem) / mf;
        let mut ss = f32::new(0.0f32);
        t = UNIT_POS as usize;
        loop {
            if t >= m {
                break;
            }
            let d = x[at(t, ch, c, hw)] - mean;
            ss += d * d;
            t += REDUCE_UNITS as usize;
        }
        let var = cube_sum::<f32>(ss, &mut smem) / mf;
        let rstd = 1.0f32 / (var + eps).sqrt();
        let (g, b) = (gamma[ch] * rstd, beta[ch]);
        t = UNIT_POS as usize;
        loop {
            if t >= m {
                break;
            }
            let i = at(t, ch, c, hw);
            y[i] = (x[i] - mean) * g + b;
            t += REDUCE_UNITS as usize;
        }
        if UNIT_POS == 0 {
            let mut unbiased = var;
            if m > 1 {
                unbiased = var * mf / (mf - 1.0f32);
            }
            running_mean[ch] = (1.0f32 - momentum) * running_mean[ch] + momentum * mean;
            running_var[ch] = (1.0f32 - momentum) * running_var[ch] + momentum * unbiased;
            saved_mean[ch] = mean;
            saved_rstd[ch] = rstd;
        }
    }
}

/// Per channel, from the saved statistics: `dx = rstd gamma (dy - (sum dy + xhat sum(dy
/// xhat)) / M)` (overwritten); `dgamma += sum dy xhat`, `dbeta += sum dy`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn batch_norm_backward_kernel(
    x: &Array<f32>,
    gamma: &Array<f32>,
    saved_mean: &Array<f32>,
    saved_rstd: &Array<f32>,
    dy: &Array<f32>,
    dx: &mut Array<f32>,
    dgamma: &mut Array<f32>,
    dbeta: &mut Array<f32>,
    c: usize,
    n: usize,
    hw: usize,
) {
    let ch = CUBE_POS;
    if ch < c {
        let m = n * hw;
        let (mean, rstd) = (saved_mean[ch], saved_rstd[ch]);
        let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let mut s_dy = f32::new(0.0f32);
        let mut s_dyx = f32::new(0.0f32);
        let mut t = UNIT_POS as usize;
        loop {
            if t >= m {
                break;
            }
            let i = at(t, ch, c, hw);
            s_dy += dy[i];
            s_dyx += dy[i] * (x[i] - mean) * rstd;
            t += REDUCE_UNITS as usize;
        }
        let s_dy = cube_sum::<f32>(s_dy, &mut smem);
        let s_dyx = cube_sum::<f32>(s_dyx, &mut smem);
        let k = rstd * gamma[ch];
        let inv_m = 1.0f32 / f32::cast_from(m);
        t = UNIT_POS as usize;
        loop {
            if t >= m {
                break;
            }
            let i = at(t, ch, c, hw);
            let xh = (x[i] - mean) * rstd;
            dx[i] = k * (dy[i] - (s_dy + xh * s_dyx) * inv_m);
            t += REDUCE_UNITS as usize;
        }
        if UNIT_POS == 0 {
            dgamma[ch] += s_dyx;
            dbeta[ch] += s_dy;
        }
    }
}

/// The per-channel statistics of a BatchNorm training step, `C` floats each: the running
/// mean and variance (read and updated), the saved mean and `rstd` (written).
pub struct BatchNormStats<'a> {
    /// Running mean, blended with the batch mean.
    pub running_mean: &'a Handle,
    /// Running variance, blended with the unbiased batch variance.
    pub running_var: &'a Handle,
    /// The batch mean.
    pub saved_mean: &'a Handle,
    /// `1 / sqrt(var + eps)` of the batch.
    pub saved_rstd: &'a Handle,
}

/// BatchNorm training forward over `x (n, c*hw)`.
#[allow(clippy::too_many_arguments)]
pub fn launch_batch_norm<R: Runtime>(
    client: &ComputeClient<R>,
    (x, gamma, beta, y): (&Handle, &Handle, &Handle, &Handle),
    stats: BatchNormStats<'_>,
    (n, c, hw): (usize, usize, usize),
    eps: f32,
    momentum: f32,
) -> Result<(), LaunchError> {
    let len = extent("n * c * hw", &[n, c, hw])?;
    if len == 0 {
        return Ok(());
    }
    let x = Buf::new("x", x, len, 4)?;
    let y = Buf::new("y", y, len, 4)?;
    let gamma = Buf::new("gamma", gamma, c, 4)?;
    let beta = Buf::new("beta", beta, c, 4)?;
    let running_mean = Buf::new("running_mean", stats.running_mean, c, 4)?;
    let running_var = Buf::new("running_var", stats.running_var, c, 4)?;
    let saved_mean = Buf::new("saved_mean", stats.saved_mean, c, 4)?;
    let saved_rstd = Buf::new("saved_rstd", stats.saved_rstd, c, 4)?;
    let (count, dim) = row_grid(client, c)?;
    // SAFETY: lengths from checked `Buf`s; every index formed by `at` is below `n c hw`, and
    // the per-channel arrays are indexed by the cube's channel, below `c`; cubes past `c`
    // return.
    unsafe {
        batch_norm_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            x.arg(),
            gamma.arg(),
            beta.arg(),
            y.arg(),
            running_mean.arg(),
            running_var.arg(),
            saved_mean.arg(),
            saved_rstd.arg(),
            c,
            n,
            hw,
            eps,
            momentum,
        );
    }
    Ok(())
}

/// BatchNorm backward over `x (n, c*hw)` from the saved mean and `rstd`; `dgamma`, `dbeta`
/// (`c` floats each) accumulate.
#[allow(clippy::too_many_arguments)]
pub fn launch_batch_norm_backward<R: Runtime>(
    client: &ComputeClient<R>,
    (x, gamma, saved_mean, saved_rstd, dy): (&Handle, &Handle, &Handle, &Handle, &Handle),
    (dx, dgamma, dbeta): (&Handle, &Handle, &Handle),
    (n, c, hw): (usize, usize, usize),
) -> Result<(), LaunchError> {
    let len = extent("n * c * hw", &[n, c, hw])?;
    if len == 0 {
        return Ok(());
    }
    let x = Buf::new("x", x, len, 4)?;
    let dy = Buf::new("dy", dy, len, 4)?;
    let dx = Buf::new("dx", dx, len, 4)?;
    let gamma = Buf::new("gamma", gamma, c, 4)?;
    let saved_mean = Buf::new("saved_mean", saved_mean, c, 4)?;
    let saved_rstd = Buf::new("saved_rstd", saved_rstd, c, 4)?;
    let dgamma = Buf::new("dgamma", dgamma, c, 4)?;
    let dbeta = Buf::new("dbeta", dbeta, c, 4)?;
    let (count, dim) = row_grid(client, c)?;
    // SAFETY: as in `launch_batch_norm`.
    unsafe {
        batch_norm_backward_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            x.arg(),
            gamma.arg(),
            saved_mean.arg(),
            saved_rstd.arg(),
            dy.arg(),
            dx.arg(),
            dgamma.arg(),
            dbeta.arg(),
            c,
            n,
            hw,
        );
    }
    Ok(())
}

/// BatchNorm inference over `x (len / (c hw), c*hw)` with per-channel `params = (gamma,
/// beta, running_mean, running_var)`, `c` values each, in `x`'s dtype.
#[allow(clippy::too_many_arguments)]
pub fn launch_batch_norm_inference<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, y): (&Handle, &Handle),
    params: (&Handle, &Handle, &Handle, &Handle),
    (len, c, hw): (usize, usize, usize),
    eps: f32,
) -> Result<(), LaunchError> {
    if len == 0 {
        return Ok(());
    }
    check_divisors(&[("c", c), ("hw", hw)])?;
    let b = core::mem::size_of::<F>();
    let x = Buf::new("x", x, len, b)?;
    let y = Buf::new("y", y, len, b)?;
    let (gamma, beta, mean, var) = params;
    let gamma = Buf::new("gamma", gamma, c, b)?;
    let beta = Buf::new("beta", beta, c, b)?;
    let mean = Buf::new("running_mean", mean, c, b)?;
    let var = Buf::new("running_var", var, c, b)?;
    let (count, dim) = grid_1d(client, len)?;
    // SAFETY: lengths from checked `Buf`s; units past `len` return and channel indices are
    // `% c` (`c` and `hw` are nonzero: checked).
    unsafe {
        batch_norm_inference_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            gamma.arg(),
            beta.arg(),
            mean.arg(),
            var.arg(),
            y.arg(),
            c,
            hw,
            eps,
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
    let reduce = || L::settings(CubeDim::new_1d(REDUCE_UNITS));
    for_floats!(|F| l.lower(
        batch_norm_inference_kernel::BatchNormInferenceKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            a(),
            a(),
            a(),
            a(),
            (),
            (),
            (),
        )
    ));
    l.lower(batch_norm_kernel::BatchNormKernel::<Rt>::new(
        reduce(),
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
        (),
        (),
        (),
    ));
    l.lower(
        batch_norm_backward_kernel::BatchNormBackwardKernel::<Rt>::new(
            reduce(),
            c,
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
        ),
    );
}
