//! Diffusion element kernels, one unit per output element: the per-column affine of token
//! rows (`modulate`, `broadcast_mul`), the sampler step as a linear combination of
//! same-shaped tensors with an optional second output, and the sinusoidal timestep
//! embedding. FP32 math in every storage type.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, grid_1d, Buf, LaunchError};

#[cube(launch_unchecked)]
fn row_affine_kernel<F: Float>(
    x: &Array<F>,
    scale: &Array<F>,
    shift: &Array<F>,
    y: &mut Array<F>,
    d: usize,
    #[comptime] one_plus: bool,
    #[comptime] has_shift: bool,
) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let col = i % d;
        let mut a = f32::cast_from(scale[col]);
        if one_plus {
            a += 1.0f32;
        }
        let mut v = f32::cast_from(x[i]) * a;
        if has_shift {
            v += f32::cast_from(shift[col]);
        }
        y[i] = F::cast_from(v);
    }
}

/// `y[l, c] = x[l, c] a[c] (+ shift[c])` over `len` elements in rows of `d`, `a = 1 +
/// scale` when `one_plus`, else `scale`; `shift` absent for a plain column scale.
pub fn launch_row_affine<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, scale, shift, y): (&Handle, &Handle, Option<&Handle>, &Handle),
    len: usize,
    d: usize,
    one_plus: bool,
) -> Result<(), LaunchError> {
    check_u32(&[("x", len)])?;
    if len == 0 {
        return Ok(());
    }
    crate::launch::check_divisors(&[("D", d)])?;
    let b = core::mem::size_of::<F>();
    let xb = Buf::new("x", x, len, b)?;
    let yb = Buf::new("y", y, len, b)?;
    let sb = Buf::new("scale", scale, d, b)?;
    let tb = shift.map(|t| Buf::new("shift", t, d, b)).transpose()?;
    let has_shift = tb.is_some();
    let tb = sb.stand_in_for(tb.as_ref());
    let (count, dim) = grid_1d(client, len)?;
    // SAFETY: units below `len` (the checked length of `x` and `y`) only; column indices are
    // `% d`, inside the checked `scale` and (when bound) `shift`; `d` is nonzero.
    unsafe {
        row_affine_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            xb.arg(),
            sb.arg(),
            tb.arg(),
            yb.arg(),
            d,
            one_plus,
            has_shift,
        );
    }
    Ok(())
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn sampler_step_kernel<F: Float>(
    x: &Array<F>,
    e: &Array<F>,
    p: &Array<F>,
    y: &mut Array<F>,
    z: &mut Array<F>,
    cx: f32,
    ce: f32,
    cp: f32,
    z_ce: f32,
    #[comptime] has_p: bool,
    #[comptime] has_z: bool,
) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let xv = f32::cast_from(x[i]);
        let ev = f32::cast_from(e[i]);
        let mut v = cx * xv + ce * ev;
        if has_p {
            v += cp * f32::cast_from(p[i]);
        }
        y[i] = F::cast_from(v);
        if has_z {
            z[i] = F::cast_from(xv + z_ce * ev);
        }
    }
}

/// The coefficients of one sampler step, as `brotensor_cpu::diffusion::StepCoefficients`:
/// `y = cx x + ce e (+ cp p)`, and `z = x + z_ce e` when `z_ce` is `Some`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    /// Weight of `x`.
    pub cx: f32,
    /// Weight of `e`.
    pub ce: f32,
    /// Weight of `p` (read only when `p` is bound).
    pub cp: f32,
    /// `z = x + z_ce e` when `Some` (then `z` must be bound).
    pub z_ce: Option<f32>,
}

/// One sampler step over `len` elements of same-length `x`, `e` (and `p`): `y = cx x + ce e
/// (+ cp p)`, and with `step.z_ce` the second output `z = x + z_ce e`.
pub fn launch_sampler_step<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, e, p): (&Handle, &Handle, Option<&Handle>),
    (y, z): (&Handle, Option<&Handle>),
    len: usize,
    step: Step,
) -> Result<(), LaunchError> {
    check_u32(&[("x", len)])?;
    if len == 0 {
        return Ok(());
    }
    if z.is_some() != step.z_ce.is_some() {
        return Err(LaunchError::Invalid {
            what: "the second output is bound exactly when its coefficient is given",
        });
    }
    let b = core::mem::size_of::<F>();
    let xb = Buf::new("x", x, len, b)?;
    let eb = Buf::new("eps", e, len, b)?;
    let yb = Buf::new("y", y, len, b)?;
    let pb = p.map(|h| Buf::new("p", h, len, b)).transpose()?;
    let zb = z.map(|h| Buf::new("z", h, len, b)).transpose()?;
    let (has_p, has_z) = (pb.is_some(), zb.is_some());
    let pb = xb.stand_in_for(pb.as_ref());
    let zb = yb.stand_in_for(zb.as_ref());
    let (count, dim) = grid_1d(client, len)?;
    // SAFETY: units below `len`, the checked length of every bound buffer; the stand-ins of
    // absent `p` and `z` are never touched (their comptime flags are off).
    unsafe {
        sampler_step_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            xb.arg(),
            eb.arg(),
            pb.arg(),
            yb.arg(),
            zb.arg(),
            step.cx,
            step.ce,
            step.cp,
            step.z_ce.unwrap_or(0.0),
            has_p,
            has_z,
        );
    }
    Ok(())
}

#[cube(launch_unchecked)]
fn timestep_embedding_kernel<F: Float>(
    t: &Array<F>,
    freqs: &Array<f32>,
    y: &mut Array<F>,
    dim: usize,
    half: usize,
) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let (row, col) = (i / dim, i % dim);
        let mut v = 0.0f32;
        if col < 2 * half {
            let j = col % half;
            let arg = f32::cast_from(t[row]) * freqs[j];
            if col < half {
                v = arg.cos();
            } else {
                v = arg.sin();
            }
        }
        y[i] = F::cast_from(v);
    }
}

/// Sinusoidal embedding of `n` timesteps into rows of `dim`: `cos(t f_j)` for `j < half`,
/// then `sin(t f_j)`, then zero for an odd `dim`; `freqs` (`half = dim / 2` host values) is
/// uploaded.
pub fn launch_timestep_embedding<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (t, y): (&Handle, &Handle),
    freqs: &[f32],
    (n, dim): (usize, usize),
) -> Result<(), LaunchError> {
    let len = extent("N*dim", &[n, dim])?;
    check_u32(&[("y", len)])?;
    if len == 0 {
        return Ok(());
    }
    let half = freqs.len();
    if dim / 2 != half || half == 0 {
        return Err(LaunchError::Invalid {
            what: "the frequency table holds dim / 2 values",
        });
    }
    let b = core::mem::size_of::<F>();
    let tb = Buf::new("timesteps", t, n, b)?;
    let yb = Buf::new("y", y, len, b)?;
    let fb = Buf::upload(client, freqs);
    let (count, dim_grid) = grid_1d(client, len)?;
    // SAFETY: units below `len = n dim` only, so row `i / dim < n` (checked `timesteps`) and
    // the table index `col % half < half` (the uploaded length); `dim >= 2`.
    unsafe {
        timestep_embedding_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim_grid,
            tb.arg(),
            fb.arg(),
            yb.arg(),
            dim,
            half,
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
        for (one_plus, has_shift) in [(true, true), (false, false)] {
            l.lower(row_affine_kernel::RowAffineKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                a(),
                a(),
                (),
                one_plus,
                has_shift,
            ));
        }
        for (has_p, has_z) in [(false, false), (true, true)] {
            l.lower(sampler_step_kernel::SamplerStepKernel::<F, Rt>::new(
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
                has_p,
                has_z,
            ));
        }
        l.lower(
            timestep_embedding_kernel::TimestepEmbeddingKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                a(),
                (),
                (),
            ),
        );
    });
}
