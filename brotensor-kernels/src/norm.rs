//! The normalizations on the row-reduce skeleton: layer norm, RMSNorm and group norm, with
//! their gradients. One cube per row (per group for group norm); each pass folds the row in
//! strided slices and combines through shared memory (`cube_sum()`). Statistics are FP32;
//! variance is two-pass.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{extent, Buf, LaunchError};
use crate::primitives::{cube_sum, row_grid, REDUCE_UNITS};

/// The mean of `x[base..base + cols]`, folded over the cube (every unit must call it).
#[cube]
fn row_mean<F: Float>(x: &Array<F>, base: usize, cols: usize, smem: &mut SharedMemory<f32>) -> f32 {
    let mut s = f32::new(0.0f32);
    let mut j = UNIT_POS as usize;
    loop {
        if j >= cols {
            break;
        }
        s += f32::cast_from(x[base + j]);
        j += REDUCE_UNITS as usize;
    }
    cube_sum::<f32>(s, smem) / f32::cast_from(cols)
}

/// `1 / sqrt(var + eps)` of `x[base..base + cols]`, the biased variance taken about `mu` in a
/// second pass (every unit must call it).
#[cube]
fn row_rstd<F: Float>(
    x: &Array<F>,
    base: usize,
    cols: usize,
    mu: f32,
    eps: f32,
    smem: &mut SharedMemory<f32>,
) -> f32 {
    let mut ss = f32::new(0.0f32);
    let mut j = UNIT_POS as usize;
    loop {
        if j >= cols {
            break;
        }
        let d = f32::cast_from(x[base + j]) - mu;
        ss += d * d;
        j += REDUCE_UNITS as usize;
    }
    let var = cube_sum::<f32>(ss, smem) / f32::cast_from(cols);
    1.0 / (var + eps).sqrt()
}

/// LayerNorm per row (two-pass variance); writes `xhat`, `mean`, `rstd` when `caches`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn layernorm_kernel<F: Float>(
    x: &Array<F>,
    gamma: &Array<F>,
    beta: &Array<F>,
    y: &mut Array<F>,
    xhat: &mut Array<F>,
    mean: &mut Array<f32>,
    rstd: &mut Array<f32>,
    rows: usize,
    cols: usize,
    eps: f32,
    #[comptime] caches: bool,
) {
    let row = CUBE_POS;
    if row < rows {
        let base = row * cols;
        let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let mu = row_mean::<F>(x, base, cols, &mut smem);
        let r = row_rstd::<F>(x, base, cols, mu, eps, &mut smem);
        let mut j = UNIT_POS as usize;
        loop {
            if j >= cols {
                break;
            }
            let xh = (f32::cast_from(x[base + j]) - mu) * r;
            y[base + j] = F::cast_from(f32::cast_from(gamma[j]) * xh + f32::cast_from(beta[j]));
            if comptime!(caches) {
                xhat[base + j] = F::cast_from(xh);
            }
            j += REDUCE_UNITS as usize;
        }
        if comptime!(caches) && UNIT_POS == 0 {
            mean[row] = mu;
            rstd[row] = r;
        }
    }
}

/// LayerNorm input gradient per row from the caches (overwrites `dx`).
#[cube(launch_unchecked)]
fn layernorm_backward_kernel<F: Float>(
    dy: &Array<F>,
    xhat: &Array<F>,
    gamma: &Array<F>,
    rstd: &Array<f32>,
    dx: &mut Array<F>,
    rows: usize,
    cols: usize,
) {
    let row = CUBE_POS;
    if row < rows {
        let base = row * cols;
        let n = f32::cast_from(cols);
        let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let mut s1 = f32::new(0.0f32);
        let mut s2 = f32::new(0.0f32);
        let mut j = UNIT_POS as usize;
        loop {
            if j >= cols {
                break;
            }
            let d = f32::cast_from(dy[base + j]) * f32::cast_from(gamma[j]);
            s1 += d;
            s2 += d * f32::cast_from(xhat[base + j]);
            j += REDUCE_UNITS as usize;
        }
        let s1 = cube_sum::<f32>(s1, &mut smem);
        let s2 = cube_sum::<f32>(s2, &mut smem);
        let r = rstd[row];
        j = UNIT_POS as usize;
        loop {
            if j >= cols {
                break;
            }
            let d = f32::cast_from(dy[base + j]) * f32::cast_from(gamma[j]);
            let xh = f32::cast_from(xhat[base + j]);
            dx[base + j] = F::cast_from(r / n * (n * d - s1 - xh * s2));
            j += REDUCE_UNITS as usize;
        }
    }
}

/// GroupNorm per group row of `m = cpg * hw` elements (row `r` is group `r % groups` of its
/// sample): two-pass statistics, then `y = (x - mean) rstd gamma[c] + beta[c]` with channel
/// `c = (r % groups) cpg + j / hw`, passed through SiLU when `silu`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn group_norm_kernel<F: Float>(
    x: &Array<F>,
    gamma: &Array<F>,
    beta: &Array<F>,
    y: &mut Array<F>,
    rows: usize,
    groups: usize,
    cpg: usize,
    hw: usize,
    eps: f32,
    #[comptime] silu: bool,
) {
    let row = CUBE_POS;
    if row < rows {
        let m = cpg * hw;
        let base = row * m;
        let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let mu = row_mean::<F>(x, base, m, &mut smem);
        let r = row_rstd::<F>(x, base, m, mu, eps, &mut smem);
        let c0 = (row % groups) * cpg;
        let mut j = UNIT_POS as usize;
        loop {
            if j >= m {
                break;
            }
            let ch = c0 + j / hw;
            let xh = (f32::cast_from(x[base + j]) - mu) * r;
            let v = xh * f32::cast_from(gamma[ch]) + f32::cast_from(beta[ch]);
            if silu {
                y[base + j] = F::cast_from(v / (1.0f32 + (-v).exp()));
            } else {
                y[base + j] = F::cast_from(v);
            }
            j += REDUCE_UNITS as usize;
        }
    }
}

/// GroupNorm's gradient per group row, statistics recomputed from `x`: per channel `k` of
/// the group, `sum dy` and `sum dy xhat` (written to `part_b`, `part_g` at `row * cpg + k`,
/// i.e. `(sample, channel)`, for the caller to sum over samples); from them `sum d` and
/// `sum d xhat` with `d = dy gamma[c]`; then `dx = rstd/m (m d - sum d - xhat sum(d xhat))`
/// (overwritten).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn group_norm_backward_kernel<F: Float>(
    x: &Array<F>,
    gamma: &Array<F>,
    dy: &Array<F>,
    dx: &mut Array<F>,
    part_g: &mut Array<F>,
    part_b: &mut Array<F>,
    rows: usize,
    groups: usize,
    cpg: usize,
    hw: usize,
    eps: f32,
) {
    let row = CUBE_POS;
    if row < rows {
        let m = cpg * hw;
        let base = row * m;
        let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let mu = row_mean::<F>(x, base, m, &mut smem);
        let r = row_rstd::<F>(x, base, m, mu, eps, &mut smem);
        let c0 = (row % groups) * cpg;
        let mut s1 = f32::new(0.0f32);
        let mut s2 = f32::new(0.0f32);
        for k in 0..cpg {
            let at = base + k * hw;
            let mut a = f32::new(0.0f32);
            let mut b = f32::new(0.0f32);
            let mut j = UNIT_POS as usize;
            loop {
                if j >= hw {
                    break;
                }
                let g = f32::cast_from(dy[at + j]);
                a += g;
                b += g * (f32::cast_from(x[at + j]) - mu) * r;
                j += REDUCE_UNITS as usize;
            }
            let a = cube_sum::<f32>(a, &mut smem);
            let b = cube_sum::<f32>(b, &mut smem);
            let gk = f32::cast_from(gamma[c0 + k]);
            s1 += gk * a;
            s2 += gk * b;
            if UNIT_POS == 0 {
                part_b[row * cpg + k] = F::cast_from(a);
                part_g[row * cpg + k] = F::cast_from(b);
            }
        }
        let n = f32::cast_from(m);
        let mut j = UNIT_POS as usize;
        loop {
            if j >= m {
                break;
            }
            let d = f32::cast_from(dy[base + j]) * f32::cast_from(gamma[c0 + j / hw]);
            let xh = (f32::cast_from(x[base + j]) - mu) * r;
            dx[base + j] = F::cast_from(r / n * (n * d - s1 - xh * s2));
            j += REDUCE_UNITS as usize;
        }
    }
}

/// RMSNorm per row: `y = x gamma rrms`, `rrms = 1/sqrt(mean(x^2) + eps)`; `rrms` is written
/// per row when `keep` (the backward's scale).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn rms_norm_kernel<F: Float>(
    x: &Array<F>,
    gamma: &Array<F>,
    y: &mut Array<F>,
    rrms: &mut Array<f32>,
    rows: usize,
    cols: usize,
    eps: f32,
    #[comptime] keep: bool,
) {
    let row = CUBE_POS;
    if row < rows {
        let base = row * cols;
        let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let mut ss = f32::new(0.0f32);
        let mut j = UNIT_POS as usize;
        loop {
            if j >= cols {
                break;
            }
            let v = f32::cast_from(x[base + j]);
            ss += v * v;
            j += REDUCE_UNITS as usize;
        }
        let r = 1.0 / (cube_sum::<f32>(ss, &mut smem) / f32::cast_from(cols) + eps).sqrt();
        j = UNIT_POS as usize;
        loop {
            if j >= cols {
                break;
            }
            y[base + j] = F::cast_from(f32::cast_from(x[base + j]) * f32::cast_from(gamma[j]) * r);
            j += REDUCE_UNITS as usize;
        }
        if comptime!(keep) && UNIT_POS == 0 {
            rrms[row] = r;
        }
    }
}

/// RMSNorm input gradient per row (overwrites `dx`); writes `rrms` per row.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn rms_norm_backward_kernel<F: Float>(
    x: &Array<F>,
    gamma: &Array<F>,
    dy: &Array<F>,
    dx: &mut Array<F>,
    rrms: &mut Array<f32>,
    rows: usize,
    cols: usize,
    eps: f32,
) {
    let row = CUBE_POS;
    if row < rows {
        let base = row * cols;
        let d = f32::cast_from(cols);
        let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let mut ss = f32::new(0.0f32);
        let mut sd = f32::new(0.0f32);
        let mut j = UNIT_POS as usize;
        loop {
            if j >= cols {
                break;
            }
            let v = f32::cast_from(x[base + j]);
            ss += v * v;
            sd += v * f32::cast_from(dy[base + j]) * f32::cast_from(gamma[j]);
            j += REDUCE_UNITS as usize;
        }
        let ss = cube_sum::<f32>(ss, &mut smem);
        let sd = cube_sum::<f32>(sd, &mut smem);
        let r = 1.0 / (ss / d + eps).sqrt();
        let c = r * r / d * sd;
        j = UNIT_POS as usize;
        loop {
            if j >= cols {
                break;
            }
            let g = f32::cast_from(gamma[j]) * f32::cast_from(dy[base + j]);
            dx[base + j] = F::cast_from(r * (g - f32::cast_from(x[base + j]) * c));
            j += REDUCE_UNITS as usize;
        }
        if UNIT_POS == 0 {
            rrms[row] = r;
        }
    }
}

/// The buffers of a LayerNorm forward: `xhat`, `mean`, `rstd` are written when given.
pub struct LayerNormBuffers<'a> {
    /// Input `(rows, cols)`.
    pub x: &'a Handle,
    /// Scale, `cols` elements.
    pub gamma: &'a Handle,
    /// Shift, `cols` elements.
    pub beta: &'a Handle,
    /// Output `(rows, cols)`.
    pub y: &'a Handle,
    /// Caches: normalized input `(rows, cols)`, then FP32 `mean` and `rstd` per row.
    pub caches: Option<(&'a Handle, &'a Handle, &'a Handle)>,
}

/// LayerNorm of each row.
pub fn launch_layernorm<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    bufs: LayerNormBuffers<'_>,
    (rows, cols): (usize, usize),
    eps: f32,
) -> Result<(), LaunchError> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let len = extent("rows * cols", &[rows, cols])?;
    let b = core::mem::size_of::<F>();
    let x = Buf::new("x", bufs.x, len, b)?;
    let y = Buf::new("y", bufs.y, len, b)?;
    let gamma = Buf::new("gamma", bufs.gamma, cols, b)?;
    let beta = Buf::new("beta", bufs.beta, cols, b)?;
    let (xhat, mean, rstd) = match bufs.caches {
        Some((xh, m, r)) => (
            Buf::new("xhat", xh, len, b)?,
            Buf::new("mean", m, rows, 4)?,
            Buf::new("rstd", r, rows, 4)?,
        ),
        // Without caches the kernel never touches these: `y` stands in for them.
        None => (y.stand_in(), y.stand_in(), y.stand_in()),
    };
    let (count, dim) = row_grid(client, rows)?;
    // SAFETY: lengths from checked `Buf`s; the cache arrays are only indexed when `caches`.
    unsafe {
        layernorm_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            gamma.arg(),
            beta.arg(),
            y.arg(),
            xhat.arg(),
            mean.arg(),
            rstd.arg(),
            rows,
            cols,
            eps,
            bufs.caches.is_some(),
        );
    }
    Ok(())
}

/// LayerNorm input gradient from `dy`, `xhat`, `gamma` and FP32 `rstd`.
pub fn launch_layernorm_backward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (dy, xhat, gamma, rstd): (&Handle, &Handle, &Handle, &Handle),
    dx: &Handle,
    (rows, cols): (usize, usize),
) -> Result<(), LaunchError> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let len = extent("rows * cols", &[rows, cols])?;
    let b = core::mem::size_of::<F>();
    let dy = Buf::new("dy", dy, len, b)?;
    let xhat = Buf::new("xhat", xhat, len, b)?;
    let dx = Buf::new("dx", dx, len, b)?;
    let gamma = Buf::new("gamma", gamma, cols, b)?;
    let rstd = Buf::new("rstd", rstd, rows, 4)?;
    let (count, dim) = row_grid(client, rows)?;
    // SAFETY: as in `launch_softmax`.
    unsafe {
        layernorm_backward_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            dy.arg(),
            xhat.arg(),
            gamma.arg(),
            rstd.arg(),
            dx.arg(),
            rows,
            cols,
        );
    }
    Ok(())
}

/// RMSNorm of each row; with `rrms`, also writes the FP32 `1/rms` per row.
pub fn launch_rms_norm<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, gamma, y): (&Handle, &Handle, &Handle),
    rrms: Option<&Handle>,
    (rows, cols): (usize, usize),
    eps: f32,
) -> Result<(), LaunchError> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let len = extent("rows * cols", &[rows, cols])?;
    let b = core::mem::size_of::<F>();
    let x = Buf::new("x", x, len, b)?;
    let y = Buf::new("y", y, len, b)?;
    let gamma = Buf::new("gamma", gamma, cols, b)?;
    let rrms = rrms.map(|r| Buf::new("rrms", r, rows, 4)).transpose()?;
    let (count, dim) = row_grid(client, rows)?;
    // SAFETY: as in `launch_layernorm`.
    unsafe {
        rms_norm_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            gamma.arg(),
            y.arg(),
            y.stand_in_for(rrms.as_ref()).arg(),
            rows,
            cols,
            eps,
            rrms.is_some(),
        );
    }
    Ok(())
}

/// RMSNorm input gradient (overwrites `dx`), writing the FP32 `1/rms` per row to `rrms`.
#[allow(clippy::too_many_arguments)]
pub fn launch_rms_norm_backward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, gamma, dy): (&Handle, &Handle, &Handle),
    dx: &Handle,
    rrms: &Handle,
    (rows, cols): (usize, usize),
    eps: f32,
) -> Result<(), LaunchError> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let len = extent("rows * cols", &[rows, cols])?;
    let b = core::mem::size_of::<F>();
    let x = Buf::new("x", x, len, b)?;
    let dy = Buf::new("dy", dy, len, b)?;
    let dx = Buf::new("dx", dx, len, b)?;
    let gamma = Buf::new("gamma", gamma, cols, b)?;
    let rrms = Buf::new("rrms", rrms, rows, 4)?;
    let (count, dim) = row_grid(client, rows)?;
    // SAFETY: as in `launch_softmax`.
    unsafe {
        rms_norm_backward_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            gamma.arg(),
            dy.arg(),
            dx.arg(),
            rrms.arg(),
            rows,
            cols,
            eps,
        );
    }
    Ok(())
}

/// GroupNorm of `rows = N * groups` group rows of `cpg * hw` elements, then SiLU when
/// `silu`; `gamma`, `beta` hold `groups * cpg` values.
pub fn launch_group_norm<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, gamma, beta, y): (&Handle, &Handle, &Handle, &Handle),
    rows: usize,
    (groups, cpg, hw): (usize, usize, usize),
    eps: f32,
    silu: bool,
) -> Result<(), LaunchError> {
    let len = extent("rows * cpg * hw", &[rows, cpg, hw])?;
    if len == 0 || groups == 0 {
        return Ok(());
    }
    let channels = extent("groups * cpg", &[groups, cpg])?;
    let b = core::mem::size_of::<F>();
    let x = Buf::new("x", x, len, b)?;
    let y = Buf::new("y", y, len, b)?;
    let gamma = Buf::new("gamma", gamma, channels, b)?;
    let beta = Buf::new("beta", beta, channels, b)?;
    let (count, dim) = row_grid(client, rows)?;
    // SAFETY: lengths from checked `Buf`s; every channel index is below `groups * cpg`.
    unsafe {
        group_norm_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            gamma.arg(),
            beta.arg(),
            y.arg(),
            rows,
            groups,
            cpg,
            hw,
            eps,
            silu,
        );
    }
    Ok(())
}

/// GroupNorm's gradient: `dx` from `x`, `gamma` and `dy` (shapes as in
/// [`launch_group_norm`]), and the per-(sample, channel) sums `part_g` (of `dy xhat`) and
/// `part_b` (of `dy`), `rows * cpg` values each.
pub fn launch_group_norm_backward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, gamma, dy): (&Handle, &Handle, &Handle),
    (dx, part_g, part_b): (&Handle, &Handle, &Handle),
    rows: usize,
    (groups, cpg, hw): (usize, usize, usize),
    eps: f32,
) -> Result<(), LaunchError> {
    let len = extent("rows * cpg * hw", &[rows, cpg, hw])?;
    if len == 0 || groups == 0 {
        return Ok(());
    }
    let channels = extent("groups * cpg", &[groups, cpg])?;
    let sums = extent("rows * cpg", &[rows, cpg])?;
    let b = core::mem::size_of::<F>();
    let x = Buf::new("x", x, len, b)?;
    let dy = Buf::new("dy", dy, len, b)?;
    let dx = Buf::new("dx", dx, len, b)?;
    let part_g = Buf::new("part_g", part_g, sums, b)?;
    let part_b = Buf::new("part_b", part_b, sums, b)?;
    let gamma = Buf::new("gamma", gamma, channels, b)?;
    let (count, dim) = row_grid(client, rows)?;
    // SAFETY: lengths from checked `Buf`s; every channel index is below `groups * cpg` and
    // every partial-sum index below `rows * cpg`.
    unsafe {
        group_norm_backward_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            gamma.arg(),
            dy.arg(),
            dx.arg(),
            part_g.arg(),
            part_b.arg(),
            rows,
            groups,
            cpg,
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
    let s = || L::settings(CubeDim::new_1d(REDUCE_UNITS));
    for_floats!(|F| {
        for flag in [false, true] {
            l.lower(layernorm_kernel::LayernormKernel::<F, Rt>::new(
                s(),
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
                (),
                flag,
            ));
            l.lower(rms_norm_kernel::RmsNormKernel::<F, Rt>::new(
                s(),
                c.clone(),
                a(),
                a(),
                a(),
                a(),
                (),
                (),
                (),
                flag,
            ));
        }
        l.lower(
            layernorm_backward_kernel::LayernormBackwardKernel::<F, Rt>::new(
                s(),
                c.clone(),
                a(),
                a(),
                a(),
                a(),
                a(),
                (),
                (),
            ),
        );
        for silu in [false, true] {
            l.lower(group_norm_kernel::GroupNormKernel::<F, Rt>::new(
                s(),
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
                silu,
            ));
        }
        l.lower(
            group_norm_backward_kernel::GroupNormBackwardKernel::<F, Rt>::new(
                s(),
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
                (),
                (),
            ),
        );
        l.lower(
            rms_norm_backward_kernel::RmsNormBackwardKernel::<F, Rt>::new(
                s(),
                c.clone(),
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
    });
}
