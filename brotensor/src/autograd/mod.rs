//! Reverse-mode gradients over the library's own backward ops: an opt-in tape.
//!
//! A [`Var`] is a tensor that may take part in a gradient. Leaves are made with
//! [`Var::parameter`] (requires gradients) or [`Var::constant`] (does not). Each op method on
//! `Var` ([`Var::linear`], [`Var::conv2d`], [`Var::relu`], [`Var::cross_entropy`], ...) runs
//! the public forward op; when an input requires gradients it also records how to run the
//! matching public backward op with the tensors it saved. [`Var::backward`] runs the
//! recorded backward ops in reverse order and accumulates each parameter's gradient into
//! [`Var::grad`]. No gradient is implemented twice: every rule is a call of a backward op in
//! [`crate::ops`] (or, for sums and broadcasts, of the forward ops that are their adjoints).
//!
//! When no input of an op requires gradients nothing is recorded and nothing is saved: the
//! op costs what the plain op costs. An op without a backward op is refused on a tracked
//! input ([`Var::forward_only`]).
//!
//! ```
//! use brotensor::autograd::{Adam, Var};
//! use brotensor::{ops, Device, Tensor};
//! # fn main() -> brotensor::Result<()> {
//! let w = Var::parameter(Tensor::from_slice_nd_on(Device::Cpu, &[0.5f32, -0.25, 1.0, 0.75], &[2, 2])?);
//! let b = Var::parameter(Tensor::zeros_nd(&[2], brotensor::Dtype::F32)?);
//! let x = Var::constant(Tensor::from_slice_nd_on(Device::Cpu, &[1.0f32, 2.0], &[1, 2])?);
//! let loss = x.linear(&w, Some(&b))?.relu()?.cross_entropy(&[1])?;
//! loss.backward()?;
//! assert!(w.grad()?.is_some());
//! let mut adam = Adam::new(vec![w.clone(), b.clone()], ops::AdamParams::new(1e-2));
//! adam.step()?; // uses and keeps the accumulated gradients
//! adam.zero_grad();
//! # Ok(()) }
//! ```

mod optim;
mod record;

pub use optim::{clip_grad_norm, Adam, Sgd};

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::{ops, Error, Result, Tensor};

/// Gradients of a recorded op's inputs from the gradient of its output: one entry per
/// input, `None` where the input needs none (the flags say which do).
type BackwardFn = Box<dyn FnOnce(&Tensor, &[bool]) -> Result<Vec<Option<Tensor>>> + Send>;

/// One recorded op: its inputs and the call of its backward op.
struct Record {
    op: &'static str,
    inputs: Vec<Var>,
    backward: BackwardFn,
}

struct Node {
    value: RwLock<Tensor>,
    requires_grad: bool,
    /// The op that made this value (`None` for leaves, and after [`Var::backward`] freed it).
    record: Mutex<Option<Record>>,
    /// Whether this is a leaf made by [`Var::parameter`].
    parameter: bool,
    /// A parameter's accumulated gradient.
    grad: Mutex<Option<Tensor>>,
}

/// A tensor that may record the ops applied to it (see the [module docs](self)). Cloning a
/// `Var` is cheap and shares the value.
#[derive(Clone)]
pub struct Var(Arc<Node>);

impl std::fmt::Debug for Var {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Var")
            .field("dims", &self.value().dims())
            .field("requires_grad", &self.0.requires_grad)
            .field("parameter", &self.0.parameter)
            .finish()
    }
}

fn poisoned(op: &'static str) -> Error {
    Error::invalid(op, "a thread panicked while holding this Var")
}

impl Var {
    fn leaf(value: Tensor, parameter: bool) -> Var {
        Var(Arc::new(Node {
            value: RwLock::new(value),
            requires_grad: parameter,
            record: Mutex::new(None),
            parameter,
            grad: Mutex::new(None),
        }))
    }

    /// A leaf that requires gradients: [`Var::backward`] accumulates into its
    /// [`Var::grad`].
    pub fn parameter(value: Tensor) -> Var {
        Var::leaf(value, true)
    }

    /// A leaf that needs no gradient (inputs, labels, frozen weights).
    pub fn constant(value: Tensor) -> Var {
        Var::leaf(value, false)
    }

    /// The value, for reading (the forward result, or the parameter's current value).
    pub fn value(&self) -> RwLockReadGuard<'_, Tensor> {
        self.0.value.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The value for writing in place (optimizers), or an error naming `op` when a
    /// [`Var::value`] guard is alive (waiting for it could deadlock the calling thread).
    /// The op itself refuses the write while a recorded graph still holds views of it.
    pub(crate) fn value_mut(&self, op: &'static str) -> Result<RwLockWriteGuard<'_, Tensor>> {
        match self.0.value.try_write() {
            Ok(guard) => Ok(guard),
            Err(std::sync::TryLockError::Poisoned(e)) => Ok(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => Err(Error::invalid(
                op,
                "a parameter's value is borrowed (drop the `Var::value()` guard before the step)",
            )),
        }
    }

    /// Whether gradients flow to this value (it is a parameter, or was computed from one).
    pub fn requires_grad(&self) -> bool {
        self.0.requires_grad
    }

    /// Whether this is a leaf made by [`Var::parameter`].
    pub fn is_parameter(&self) -> bool {
        self.0.parameter
    }

    /// A constant holding a copy of this value: no gradient flows through it, and it does
    /// not keep the parameter from being updated in place (a shared view would).
    pub fn detach(&self) -> Result<Var> {
        let copy = self.value().try_clone()?;
        Ok(Var::constant(copy))
    }

    /// A copy of the accumulated gradient of a parameter (`None` before any
    /// [`Var::backward`] reached it, and after [`Var::zero_grad`]).
    pub fn grad(&self) -> Result<Option<Tensor>> {
        let g = self.0.grad.lock().map_err(|_| poisoned("grad"))?;
        g.as_ref().map(Tensor::try_clone).transpose()
    }

    /// Runs `f` on the accumulated gradient without copying it.
    pub(crate) fn with_grad<T>(&self, f: impl FnOnce(Option<&mut Tensor>) -> T) -> Result<T> {
        let mut g = self.0.grad.lock().map_err(|_| poisoned("grad"))?;
        Ok(f(g.as_mut()))
    }

    /// Replaces the accumulated gradient.
    pub(crate) fn set_grad(&self, grad: Tensor) -> Result<()> {
        *self.0.grad.lock().map_err(|_| poisoned("grad"))? = Some(grad);
        Ok(())
    }

    /// Clears the accumulated gradient.
    pub fn zero_grad(&self) {
        if let Ok(mut g) = self.0.grad.lock() {
            *g = None;
        }
    }

    /// The identity of the node, for the graph walk.
    fn key(&self) -> *const Node {
        Arc::as_ptr(&self.0)
    }

    /// The recorded result of `op`: `value` with the backward rule `backward` over `inputs`,
    /// or a constant when no input requires gradients (then nothing is kept).
    fn recorded(
        op: &'static str,
        value: Tensor,
        inputs: &[&Var],
        backward: impl FnOnce(&Tensor, &[bool]) -> Result<Vec<Option<Tensor>>> + Send + 'static,
    ) -> Var {
        if !inputs.iter().any(|v| v.requires_grad()) {
            return Var::constant(value);
        }
        Var(Arc::new(Node {
            value: RwLock::new(value),
            requires_grad: true,
            record: Mutex::new(Some(Record {
                op,
                inputs: inputs.iter().map(|&v| v.clone()).collect(),
                backward: Box::new(backward),
            })),
            parameter: false,
            grad: Mutex::new(None),
        }))
    }

    /// Whether any of `inputs` requires gradients: an op saves tensors only then.
    fn tracked(inputs: &[&Var]) -> bool {
        inputs.iter().any(|v| v.requires_grad())
    }

    /// Applies `f`, an op with no backward op, to this value: allowed on a value that needs
    /// no gradient (the result is a constant), an error naming `op` on one that does.
    pub fn forward_only(
        &self,
        op: &'static str,
        f: impl FnOnce(&Tensor) -> Result<Tensor>,
    ) -> Result<Var> {
        if self.requires_grad() {
            return Err(Error::invalid(
                op,
                "this op has no backward op, so it cannot be recorded on a value that requires \
                 gradients (detach() the input first)",
            ));
        }
        Ok(Var::constant(f(&self.value())?))
    }

    /// Runs the recorded backward ops from this value, a single element (a loss), with seed
    /// gradient 1, and accumulates every parameter's gradient. The recorded graph is freed.
    pub fn backward(&self) -> Result<()> {
        let (n, dims, device, dtype) = {
            let v = self.value();
            (v.numel(), v.dims().to_vec(), v.device(), v.dtype())
        };
        if n != 1 {
            return Err(Error::invalid(
                "backward",
                format!(
                    "the seed gradient 1 needs a single-element value, this one is {dims:?} \
                     (use backward_with)"
                ),
            ));
        }
        let one = Tensor::from_slice_nd_on(device, &[1.0f32], &dims)?;
        let seed = if dtype == crate::Dtype::F32 {
            one
        } else {
            one.to_dtype(dtype)?
        };
        self.backward_with(seed)
    }

    /// [`Var::backward`] with an explicit seed gradient `grad` of this value's dims and
    /// dtype.
    pub fn backward_with(&self, grad: Tensor) -> Result<()> {
        const OP: &str = "backward";
        if !self.requires_grad() {
            return Err(Error::invalid(
                OP,
                "no parameter reaches this value, so it has no gradient to propagate",
            ));
        }
        {
            let v = self.value();
            if grad.dims() != v.dims() || grad.dtype() != v.dtype() {
                return Err(Error::shape(
                    OP,
                    format!(
                        "the seed `grad` is {:?} {} but the value is {:?} {}",
                        grad.dims(),
                        grad.dtype(),
                        v.dims(),
                        v.dtype()
                    ),
                ));
            }
        }
        let order = self.reverse_topological()?;
        let mut grads: HashMap<*const Node, Tensor> = HashMap::new();
        grads.insert(self.key(), grad);
        for var in order {
            let Some(g) = grads.remove(&var.key()) else {
                continue;
            };
            if var.is_parameter() {
                var.accumulate(g)?;
                continue;
            }
            let record = var.0.record.lock().map_err(|_| poisoned(OP))?.take();
            let Some(record) = record else {
                return Err(Error::invalid(
                    OP,
                    "the recorded graph was already freed by an earlier backward()",
                ));
            };
            let needs: Vec<bool> = record.inputs.iter().map(Var::requires_grad).collect();
            let input_grads = (record.backward)(&g, &needs)?;
            for ((input, gi), &need) in record.inputs.iter().zip(input_grads).zip(&needs) {
                let Some(gi) = gi.filter(|_| need) else {
                    continue;
                };
                let gi = check_grad(record.op, input, gi)?;
                let summed = match grads.remove(&input.key()) {
                    Some(prev) => ops::add(&prev, &gi)?,
                    None => gi,
                };
                grads.insert(input.key(), summed);
            }
        }
        Ok(())
    }

    /// Adds `g` into this parameter's gradient (the first one is kept as it is when it owns
    /// its storage, else copied).
    fn accumulate(&self, g: Tensor) -> Result<()> {
        let mut slot = self.0.grad.lock().map_err(|_| poisoned("backward"))?;
        *slot = Some(match slot.take() {
            Some(mut prev) => {
                ops::add_inplace(&mut prev, &g)?;
                prev
            }
            None if g.check_writable("backward", "grad").is_ok() => g,
            None => g.contiguous()?.try_clone()?,
        });
        Ok(())
    }

    /// Every node that requires gradients and reaches this one, outputs before inputs.
    fn reverse_topological(&self) -> Result<Vec<Var>> {
        let mut finished: Vec<Var> = Vec::new();
        let mut seen: HashSet<*const Node> = HashSet::new();
        let mut stack: Vec<(Var, bool)> = vec![(self.clone(), false)];
        while let Some((var, expanded)) = stack.pop() {
            if expanded {
                finished.push(var);
                continue;
            }
            if !seen.insert(var.key()) {
                continue;
            }
            stack.push((var.clone(), true));
            let record = var.0.record.lock().map_err(|_| poisoned("backward"))?;
            if let Some(r) = record.as_ref() {
                for input in r.inputs.iter().filter(|v| v.requires_grad()) {
                    if !seen.contains(&input.key()) {
                        stack.push((input.clone(), false));
                    }
                }
            }
        }
        finished.reverse();
        Ok(finished)
    }
}

/// A backward rule's gradient must match its input's dims (a wrong one is a bug in the rule,
/// reported rather than propagated); it is converted to the input's dtype when a rule
/// produced another (a bias of another dtype than its layer).
fn check_grad(op: &'static str, input: &Var, g: Tensor) -> Result<Tensor> {
    let (dims, dtype) = {
        let v = input.value();
        (v.dims().to_vec(), v.dtype())
    };
    if g.dims() != dims.as_slice() {
        return Err(Error::shape(
            op,
            format!(
                "backward produced a gradient of {:?} for an input of {dims:?}",
                g.dims()
            ),
        ));
    }
    if g.dtype() == dtype {
        Ok(g)
    } else {
        g.to_dtype(dtype)
    }
}
