//! Optimizers over [`Var`] parameters: each step runs the fused in-place step op
//! ([`ops::adam_step`], [`ops::sgd_step`]) on every parameter that has a gradient, keeping
//! the state (and, for 16-bit parameters, an F32 master copy) per parameter.

use super::Var;
use crate::{ops, Dtype, Error, Result, Tensor};

/// F32 zeros of `p`'s dims on its device: an optimizer state.
fn state_like(p: &Tensor) -> Result<Tensor> {
    Tensor::zeros_nd_on(p.device(), p.dims(), Dtype::F32)
}

/// An F32 master copy of a 16-bit parameter (`None` for an F32 one).
fn master_of(p: &Tensor) -> Result<Option<Tensor>> {
    if p.dtype() == Dtype::F32 {
        return Ok(None);
    }
    Ok(Some(p.to_dtype(Dtype::F32)?))
}

/// The state of one parameter under Adam.
struct AdamSlot {
    m: Tensor,
    v: Tensor,
    master: Option<Tensor>,
    step: u32,
}

/// Adam (AdamW with a nonzero `weight_decay`) over a set of parameters.
pub struct Adam {
    params: Vec<Var>,
    hp: ops::AdamParams,
    slots: Vec<Option<AdamSlot>>,
}

impl Adam {
    /// Adam over `params` (a parameter listed twice is stepped once) with
    /// hyper-parameters `hp`.
    pub fn new(params: Vec<Var>, hp: ops::AdamParams) -> Self {
        let params = distinct(params);
        let slots = params.iter().map(|_| None).collect();
        Adam { params, hp, slots }
    }

    /// The hyper-parameters (the learning rate may be changed between steps).
    pub fn hyper_parameters(&mut self) -> &mut ops::AdamParams {
        &mut self.hp
    }

    /// One step on every parameter that has a gradient (each counts its own steps from 1,
    /// as `torch.optim.Adam` does); the gradients are kept.
    pub fn step(&mut self) -> Result<()> {
        for (p, slot) in self.params.iter().zip(&mut self.slots) {
            let hp = self.hp;
            p.with_grad(|g| -> Result<()> {
                let Some(g) = g else { return Ok(()) };
                let mut value = p.value_mut("adam_step")?;
                let s = match slot {
                    Some(s) => s,
                    None => slot.insert(AdamSlot {
                        m: state_like(&value)?,
                        v: state_like(&value)?,
                        master: master_of(&value)?,
                        step: 0,
                    }),
                };
                s.step = s.step.checked_add(1).ok_or_else(|| {
                    Error::invalid("adam_step", "the step counter overflowed u32")
                })?;
                match s.master.as_mut() {
                    Some(w) => {
                        ops::adam_step_master(&mut value, w, g, (&mut s.m, &mut s.v), &hp, s.step)
                    }
                    None => ops::adam_step(&mut value, g, &mut s.m, &mut s.v, &hp, s.step),
                }
            })??;
        }
        Ok(())
    }

    /// Clears every parameter's gradient.
    pub fn zero_grad(&self) {
        self.params.iter().for_each(Var::zero_grad);
    }
}

/// SGD with momentum over a set of parameters.
pub struct Sgd {
    params: Vec<Var>,
    lr: f32,
    momentum: f32,
    slots: Vec<Option<(Tensor, Option<Tensor>)>>,
}

impl Sgd {
    /// SGD over `params` (a parameter listed twice is stepped once) with learning rate `lr`
    /// and `momentum` (0 for plain SGD).
    pub fn new(params: Vec<Var>, lr: f32, momentum: f32) -> Self {
        let params = distinct(params);
        let slots = params.iter().map(|_| None).collect();
        Sgd {
            params,
            lr,
            momentum,
            slots,
        }
    }

    /// One step on every parameter that has a gradient; the gradients are kept.
    pub fn step(&mut self) -> Result<()> {
        let (lr, momentum) = (self.lr, self.momentum);
        for (p, slot) in self.params.iter().zip(&mut self.slots) {
            p.with_grad(|g| -> Result<()> {
                let Some(g) = g else { return Ok(()) };
                let mut value = p.value_mut("sgd_step")?;
                let (vel, master) = match slot {
                    Some(s) => s,
                    None => slot.insert((state_like(&value)?, master_of(&value)?)),
                };
                match master.as_mut() {
                    Some(w) => ops::sgd_step_master(&mut value, w, g, vel, lr, momentum),
                    None => ops::sgd_step(&mut value, g, vel, lr, momentum),
                }
            })??;
        }
        Ok(())
    }

    /// Clears every parameter's gradient.
    pub fn zero_grad(&self) {
        self.params.iter().for_each(Var::zero_grad);
    }
}

/// `params` without repeats (the first of each kept), in order.
fn distinct(params: Vec<Var>) -> Vec<Var> {
    let mut seen = std::collections::HashSet::new();
    params
        .into_iter()
        .filter(|p| seen.insert(p.key()))
        .collect()
}

/// Scales the gradients of `params` in place so that their global L2 norm is at most
/// `max_norm` (by `max_norm / (norm + 1e-6)` when it is above); returns the norm before
/// clipping. Reading the norm synchronizes with the device.
pub fn clip_grad_norm(params: &[Var], max_norm: f32) -> Result<f32> {
    if !(max_norm.is_finite() && max_norm > 0.0) {
        return Err(Error::invalid(
            "clip_grad_norm",
            "`max_norm` must be finite and > 0",
        ));
    }
    let params = distinct(params.to_vec());
    // Every parameter's sum of squares is launched first, then read: one wait for the device.
    let mut sums = Vec::with_capacity(params.len());
    for p in &params {
        if let Some(s) = p.with_grad(|g| -> Result<Option<Tensor>> {
            let Some(g) = g else { return Ok(None) };
            // In F32, so that a 16-bit gradient's squares cannot overflow.
            let wide;
            let g = if g.dtype() == Dtype::F32 {
                &*g
            } else {
                wide = g.to_dtype(Dtype::F32)?;
                &wide
            };
            Ok(Some(super::record::scaled_total(&ops::mul(g, g)?, 1.0)?))
        })?? {
            sums.push(s);
        }
    }
    let mut total = 0.0f64;
    for s in &sums {
        total += f64::from(s.to_vec::<f32>()?[0]);
    }
    let norm = total.sqrt();
    if norm > f64::from(max_norm) {
        let factor = (f64::from(max_norm) / (norm + 1e-6)) as f32;
        for p in &params {
            p.with_grad(|g| g.map_or(Ok(()), |g| g.mul_scalar_(factor)))??;
        }
    }
    Ok(norm as f32)
}
