//! Optimizer steps, one unit per parameter, each reading the parameter, its gradient and its
//! FP32 state once and writing them once, in place: SGD with momentum and Adam (with AdamW's
//! decoupled decay). With an FP32 master copy the update runs on the master and the
//! parameter (F16/BF16 storage) receives the master rounded once.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, grid_1d, Buf, LaunchError};

/// The per-step scalars of one Adam update, as `brotensor_cpu::optim::AdamStep`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Adam {
    /// Learning rate.
    pub lr: f32,
    /// First-moment decay.
    pub beta1: f32,
    /// Second-moment decay.
    pub beta2: f32,
    /// Added to the root of the corrected second moment.
    pub eps: f32,
    /// `1 / (1 - beta1^step)`.
    pub inv_bc1: f32,
    /// `1 / (1 - beta2^step)`.
    pub inv_bc2: f32,
    /// `1 - lr weight_decay` (1 for plain Adam).
    pub decay: f32,
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn adam_kernel<F: Float>(
    p: &mut Array<F>,
    g: &Array<F>,
    m: &mut Array<f32>,
    v: &mut Array<f32>,
    master: &mut Array<f32>,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    inv_bc1: f32,
    inv_bc2: f32,
    decay: f32,
    #[comptime] has_master: bool,
) {
    let i = ABSOLUTE_POS;
    if i < p.len() {
        let gv = f32::cast_from(g[i]);
        let mv = beta1 * m[i] + (1.0f32 - beta1) * gv;
        let vv = beta2 * v[i] + (1.0f32 - beta2) * (gv * gv);
        m[i] = mv;
        v[i] = vv;
        let m_hat = mv * inv_bc1;
        let v_hat = vv * inv_bc2;
        let step = lr * m_hat / (v_hat.sqrt() + eps);
        if has_master {
            let pv = master[i] * decay - step;
            master[i] = pv;
            p[i] = F::cast_from(pv);
        } else {
            p[i] = F::cast_from(f32::cast_from(p[i]) * decay - step);
        }
    }
}

/// One Adam step over `len` parameters: `m`, `v` (FP32) and `p` (or the FP32 `master`, then
/// `p` its rounding) updated in place; `g` in `p`'s storage type.
pub fn launch_adam<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (p, g, m, v, master): (&Handle, &Handle, &Handle, &Handle, Option<&Handle>),
    len: usize,
    s: Adam,
) -> Result<(), LaunchError> {
    check_u32(&[("p", len)])?;
    if len == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let pb = Buf::new("p", p, len, b)?;
    let gb = Buf::new("g", g, len, b)?;
    let mb = Buf::new("m", m, len, 4)?;
    let vb = Buf::new("v", v, len, 4)?;
    let wb = master.map(|h| Buf::new("master", h, len, 4)).transpose()?;
    let has_master = wb.is_some();
    let wb = mb.stand_in_for(wb.as_ref());
    let (count, dim) = grid_1d(client, len)?;
    // SAFETY: units below `len`, the checked length of every bound buffer; an absent
    // master's stand-in is never touched (its comptime flag is off).
    unsafe {
        adam_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            pb.arg(),
            gb.arg(),
            mb.arg(),
            vb.arg(),
            wb.arg(),
            s.lr,
            s.beta1,
            s.beta2,
            s.eps,
            s.inv_bc1,
            s.inv_bc2,
            s.decay,
            has_master,
        );
    }
    Ok(())
}

#[cube(launch_unchecked)]
fn sgd_kernel<F: Float>(
    p: &mut Array<F>,
    g: &Array<F>,
    vel: &mut Array<f32>,
    master: &mut Array<f32>,
    lr: f32,
    momentum: f32,
    #[comptime] has_master: bool,
) {
    let i = ABSOLUTE_POS;
    if i < p.len() {
        let u = momentum * vel[i] + f32::cast_from(g[i]);
        vel[i] = u;
        if has_master {
            let pv = master[i] - lr * u;
            master[i] = pv;
            p[i] = F::cast_from(pv);
        } else {
            p[i] = F::cast_from(f32::cast_from(p[i]) - lr * u);
        }
    }
}

/// One SGD-with-momentum step over `len` parameters: `vel = momentum vel + g` (FP32), then
/// `p -= lr vel` (or the FP32 `master`, then `p` its rounding), in place.
pub fn launch_sgd<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (p, g, vel, master): (&Handle, &Handle, &Handle, Option<&Handle>),
    len: usize,
    (lr, momentum): (f32, f32),
) -> Result<(), LaunchError> {
    check_u32(&[("p", len)])?;
    if len == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let pb = Buf::new("p", p, len, b)?;
    let gb = Buf::new("g", g, len, b)?;
    let ub = Buf::new("velocity", vel, len, 4)?;
    let wb = master.map(|h| Buf::new("master", h, len, 4)).transpose()?;
    let has_master = wb.is_some();
    let wb = ub.stand_in_for(wb.as_ref());
    let (count, dim) = grid_1d(client, len)?;
    // SAFETY: units below `len`, the checked length of every bound buffer; an absent
    // master's stand-in is never touched (its comptime flag is off).
    unsafe {
        sgd_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            pb.arg(),
            gb.arg(),
            ub.arg(),
            wb.arg(),
            lr,
            momentum,
            has_master,
        );
    }
    Ok(())
}

#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{for_floats, Lowering as L, Rt};
    let c = l.client.clone();
    let a = L::array;
    for_floats!(|F| {
        for has_master in [false, true] {
            l.lower(adam_kernel::AdamKernel::<F, Rt>::new(
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
                (),
                (),
                has_master,
            ));
            l.lower(sgd_kernel::SgdKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                a(),
                a(),
                (),
                (),
                has_master,
            ));
        }
    });
}
