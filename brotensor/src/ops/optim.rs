//! Optimizer steps and initialisers.
//!
//! Shape contract: a step updates `param` and its state in place (same allocations): `grad`
//! has `param`'s dims and dtype, the state (`m`, `v`, `velocity`) and an optional FP32
//! `master` copy have `param`'s dims in F32. Parameters may be F32, F16 or BF16; the update
//! is computed in FP32 (with `master`, on the master copy, and `param` receives it rounded
//! once, so that small updates are not lost to 16-bit rounding).

use super::check_dtype;
use super::sampling::check_committed;
use super::{check_dtypes_match, dispatch, input, updated, written, Dispatched};
use crate::backend::AdamStep;
use crate::{Dtype, Error, Result, Tensor};

/// The splitmix64 generator of [`xavier_init`]: the next value of the generator whose state
/// is `state` (advanced in place), for host-side shuffles that follow the same seeds.
pub use brotensor_cpu::optim::splitmix64;

/// Adam's hyper-parameters; a nonzero `weight_decay` makes it AdamW (the decay is decoupled:
/// `p *= 1 - lr weight_decay` before the update, as `torch.optim.AdamW`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamParams {
    /// Learning rate.
    pub lr: f32,
    /// First-moment decay, in `[0, 1)`.
    pub beta1: f32,
    /// Second-moment decay, in `[0, 1)`.
    pub beta2: f32,
    /// Added to the root of the corrected second moment (> 0).
    pub eps: f32,
    /// Decoupled weight decay (0 for Adam).
    pub weight_decay: f32,
}

impl AdamParams {
    /// Adam with `lr` and the usual defaults: betas (0.9, 0.999), eps 1e-8, no decay.
    pub fn new(lr: f32) -> Self {
        AdamParams {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }

    /// AdamW: [`AdamParams::new`] with decoupled `weight_decay`.
    pub fn adamw(lr: f32, weight_decay: f32) -> Self {
        AdamParams {
            weight_decay,
            ..AdamParams::new(lr)
        }
    }

    /// The folded scalars of 1-based `step`, or an error naming the bad hyper-parameter.
    fn at(&self, op: &'static str, step: u32) -> Result<AdamStep> {
        let bad = |what: &str| Err(Error::invalid(op, what.to_string()));
        if step == 0 {
            return bad("`step` is 1-based (bias correction divides by 1 - beta^step)");
        }
        if !self.lr.is_finite() || !self.weight_decay.is_finite() || self.weight_decay < 0.0 {
            return bad("`lr` must be finite and `weight_decay` finite and >= 0");
        }
        if !(0.0..1.0).contains(&self.beta1) || !(0.0..1.0).contains(&self.beta2) {
            return bad("`beta1` and `beta2` must lie in [0, 1)");
        }
        if !(self.eps > 0.0 && self.eps.is_finite()) {
            return bad("`eps` must be finite and > 0");
        }
        Ok(AdamStep::new(
            self.lr,
            (self.beta1, self.beta2),
            self.eps,
            self.weight_decay,
            step,
        ))
    }
}

/// Checks the operands of a step: `grad` like `param`; the state and master F32 with
/// `param`'s dims; all committed.
fn check_step(
    op: &'static str,
    param: &Tensor,
    grad: &Tensor,
    state: &[(&'static str, &Tensor)],
) -> Result<()> {
    check_committed(op, "param", param)?;
    for (name, t) in std::iter::once(("grad", grad)).chain(state.iter().copied()) {
        check_committed(op, name, t)?;
        if t.dims() != param.dims() {
            return Err(Error::shape(
                op,
                format!(
                    "`{name}` is {:?} but `param` is {:?}",
                    t.dims(),
                    param.dims()
                ),
            ));
        }
    }
    check_dtypes_match(op, ("param", param), &[("grad", grad)])?;
    state
        .iter()
        .try_for_each(|&(name, t)| check_dtype(op, name, t, Dtype::F32))
}

/// One Adam (AdamW) step in place, with `step` the 1-based bias-correction counter:
/// `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g^2`,
/// `param = param (1 - lr wd) - lr (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps)`.
/// `m` and `v` are F32 with `param`'s dims (zeros before step 1).
pub fn adam_step(
    param: &mut Tensor,
    grad: &Tensor,
    m: &mut Tensor,
    v: &mut Tensor,
    hp: &AdamParams,
    step: u32,
) -> Result<()> {
    adam("adam_step", param, None, grad, (m, v), hp, step)
}

/// [`adam_step`] on an F32 `master` copy of a (16-bit) `param`: the update runs on `master`
/// and `param` receives it rounded once.
pub fn adam_step_master(
    param: &mut Tensor,
    master: &mut Tensor,
    grad: &Tensor,
    (m, v): (&mut Tensor, &mut Tensor),
    hp: &AdamParams,
    step: u32,
) -> Result<()> {
    adam(
        "adam_step_master",
        param,
        Some(master),
        grad,
        (m, v),
        hp,
        step,
    )
}

fn adam(
    op: &'static str,
    param: &mut Tensor,
    master: Option<&mut Tensor>,
    grad: &Tensor,
    (m, v): (&mut Tensor, &mut Tensor),
    hp: &AdamParams,
    step: u32,
) -> Result<()> {
    let be = dispatch_step(op, param, master.as_deref(), grad, &[("m", m), ("v", v)])?;
    let s = hp.at(op, step)?;
    if param.numel() == 0 {
        return Ok(());
    }
    be.adam_step(op, param, grad, (m, v), master, s)
}

/// The dispatch of a step: `param` (written when there is a master, else updated), `master`,
/// `grad` and the state, then [`check_step`].
fn dispatch_step(
    op: &'static str,
    param: &Tensor,
    master: Option<&Tensor>,
    grad: &Tensor,
    state: &[(&'static str, &Tensor)],
) -> Result<Dispatched> {
    let mut operands = vec![match master {
        Some(_) => written("param", param).float(),
        None => updated("param", param).float(),
    }];
    operands.extend(master.map(|w| updated("master", w)));
    operands.push(input("grad", grad));
    operands.extend(state.iter().map(|&(name, t)| updated(name, t)));
    let be = dispatch(op, &operands)?;
    let mut all: Vec<(&'static str, &Tensor)> = master.map(|w| ("master", w)).into_iter().collect();
    all.extend_from_slice(state);
    check_step(op, param, grad, &all)?;
    Ok(be)
}

/// Checks SGD's scalars.
fn check_sgd(op: &'static str, lr: f32, momentum: f32) -> Result<()> {
    if !lr.is_finite() || !momentum.is_finite() {
        return Err(Error::invalid(op, "`lr` and `momentum` must be finite"));
    }
    Ok(())
}

/// SGD with momentum in place: `velocity = momentum velocity + grad`, then
/// `param -= lr velocity`. `velocity` is F32 with `param`'s dims (zeros before step 1).
pub fn sgd_step(
    param: &mut Tensor,
    grad: &Tensor,
    velocity: &mut Tensor,
    lr: f32,
    momentum: f32,
) -> Result<()> {
    sgd("sgd_step", param, None, grad, velocity, (lr, momentum))
}

/// [`sgd_step`] on an F32 `master` copy of a (16-bit) `param`: the update runs on `master`
/// and `param` receives it rounded once.
pub fn sgd_step_master(
    param: &mut Tensor,
    master: &mut Tensor,
    grad: &Tensor,
    velocity: &mut Tensor,
    lr: f32,
    momentum: f32,
) -> Result<()> {
    sgd(
        "sgd_step_master",
        param,
        Some(master),
        grad,
        velocity,
        (lr, momentum),
    )
}

fn sgd(
    op: &'static str,
    param: &mut Tensor,
    master: Option<&mut Tensor>,
    grad: &Tensor,
    velocity: &mut Tensor,
    (lr, momentum): (f32, f32),
) -> Result<()> {
    let be = dispatch_step(
        op,
        param,
        master.as_deref(),
        grad,
        &[("velocity", velocity)],
    )?;
    check_sgd(op, lr, momentum)?;
    if param.numel() == 0 {
        return Ok(());
    }
    be.sgd_step(op, param, grad, velocity, master, lr, momentum)
}

/// The fans of a weight `(d0, rest...)`: `(fan_in, fan_out) = (numel / d0, d0)` (a linear
/// weight `(out, in)` gives `(in, out)`; a convolution's `(C_out, C_in k_h k_w)`).
fn fans(op: &'static str, w: &Tensor) -> Result<(usize, usize)> {
    match w.dims().first() {
        Some(&d0) if d0 > 0 => Ok((w.numel() / d0, d0)),
        _ => Err(Error::shape(
            op,
            format!("`w` is {:?}: a weight needs a nonzero first dim", w.dims()),
        )),
    }
}

/// Fills the pre-sized float weight `w` (any device) with Xavier-uniform values
/// `U(-a, a)`, `a = sqrt(6 / (fan_in + fan_out))` (fans as `(numel / d0, d0)`), drawn in
/// element order from the splitmix64 generator `rng_state` on the host (the C++ contract:
/// each value `a (2u - 1)` with `u` the top 24 bits of one draw), then uploaded;
/// `rng_state` is advanced by one draw per element.
pub fn xavier_init(w: &mut Tensor, rng_state: &mut u64) -> Result<()> {
    let op = "xavier_init";
    let be = dispatch(op, &[written("w", w).float()])?;
    check_committed(op, "w", w)?;
    if w.numel() == 0 {
        return Ok(());
    }
    let (fan_in, fan_out) = fans(op, w)?;
    let mut values = vec![0.0f32; w.numel()];
    brotensor_cpu::optim::xavier_uniform(&mut values, fan_in, fan_out, rng_state);
    let host = Tensor::from_slice_nd_on(crate::Device::Cpu, &values, w.dims())?;
    fill_from(be, op, &host, w)
}

/// Fills the pre-sized float weight `w` on its own device with Xavier-uniform values
/// `U(-a, a)` (fans as [`xavier_init`]'s) from the Philox stream `key`, substreams `counter`
/// onwards ([`rand_uniform`](super::rand_uniform)): the initialiser that never leaves the
/// device.
pub fn xavier_uniform(w: &mut Tensor, key: u64, counter: u64) -> Result<()> {
    let op = "xavier_uniform";
    let be = dispatch(op, &[written("w", w).float()])?;
    check_committed(op, "w", w)?;
    if w.numel() == 0 {
        return Ok(());
    }
    let (fan_in, fan_out) = fans(op, w)?;
    let a = (6.0 / (fan_in as f64 + fan_out as f64)).sqrt() as f32;
    let mut u = Tensor::empty_nd_on(w.device(), w.dims(), Dtype::F32)?;
    super::rand_uniform(key, counter, &mut u)?;
    super::scale_inplace(&mut u, 2.0 * a)?;
    super::add_scalar_inplace(&mut u, -a)?;
    fill_from(be, op, &u, w)
}

/// Fills the pre-sized float weight `w` on its own device with He (Kaiming) normal values
/// `N(0, 2 / fan_in)` (fans as [`xavier_init`]'s) from the Philox stream `key`, substreams
/// `counter` onwards ([`randn`](super::randn)).
pub fn kaiming_normal(w: &mut Tensor, key: u64, counter: u64) -> Result<()> {
    let op = "kaiming_normal";
    let be = dispatch(op, &[written("w", w).float()])?;
    check_committed(op, "w", w)?;
    if w.numel() == 0 {
        return Ok(());
    }
    let (fan_in, _) = fans(op, w)?;
    let mut z = Tensor::empty_nd_on(w.device(), w.dims(), Dtype::F32)?;
    super::randn(key, counter, &mut z)?;
    super::scale_inplace(&mut z, (2.0 / fan_in as f64).sqrt() as f32)?;
    fill_from(be, op, &z, w)
}

/// Writes the F32 values `src` into `w` (same dims) in `w`'s dtype, on `w`'s device.
fn fill_from(be: Dispatched, op: &'static str, src: &Tensor, w: &mut Tensor) -> Result<()> {
    let src = src.to(be.device())?;
    if w.dtype() == Dtype::F32 {
        return super::copy_into(&src, w);
    }
    let mut narrowed = Tensor::default();
    super::cast(&src, &mut narrowed, w.dtype())?;
    super::copy_into(&narrowed, w).map_err(|e| match e {
        Error::Shape { reason, .. } => Error::shape(op, reason),
        other => other,
    })
}
