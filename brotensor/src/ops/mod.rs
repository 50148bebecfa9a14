//! The public ops, one module per category. Every op is device-neutral: it runs on the
//! device of its first committed operand.
//!
//! Naming and argument rules (one for every op):
//! - The C++ name is the contract, and it is the form that writes into a caller's output:
//!   `exp_forward(x, &mut y)`, `rms_norm_forward(x, gamma, eps, &mut y)`, `add_out(a, b,
//!   &mut out)`. Arguments come in one order: inputs, then parameters (`eps`, sizes, flags),
//!   then outputs. Shapes come from the tensors (rows are the last dim, every leading dim
//!   folded), never as extra `rows`/`cols` arguments.
//! - The allocating form returns a new tensor: `ops::exp(x)`, `ops::add(a, b)`,
//!   `ops::softmax_rows(x)`, or, where the C++ name is already taken by the output form, a
//!   `Tensor` method (`x.matmul(&w)`, `x.rms_norm(&g, eps)`, `x.softmax(dim)`, `x.sum(dim)`,
//!   `x.swiglu()`, `x.elu(alpha)`; see the `methods` docs on [`Tensor`]).
//! - The in-place form is a `Tensor` method ending in `_`: `x.exp_()`, `x.add_(&b)`,
//!   `x.clamp_(lo, hi)`, `x.softmax_rows_()`. The C++ in-place names (`add_inplace`, `clamp`)
//!   stay as free functions.
//!
//! Dispatch rules (shared by every op):
//! - Each op declares every tensor it reads or writes once, in signature order, with its
//!   role ([`Role`]: input, written, updated) in the one list it dispatches on. The device
//!   rule, writability, dense views and the float checks of operands marked so all follow
//!   from that list, before any other check, and every error names the op and the operand.
//! - The op's device is the device of the first committed operand in signature order
//!   (outputs included); if none is committed, the first operand's device tag.
//! - Every other committed operand must be on that device, else
//!   `Error::DeviceMismatch` names the operand.
//! - An uncommitted output is adopted: it is allocated on the op's device.
//! - Outputs are resized by the op and keep their allocation while the new size fits.

#[macro_use]
pub mod elementwise;
pub mod activation;
pub mod algebra;
pub mod attention;
pub mod codec;
pub mod concat;
pub mod conv;
pub mod delta_rule;
pub mod diffusion;
pub mod embedding;
pub mod flash_attention;
pub mod flash_grad;
pub mod fourier;
pub mod image;
pub mod layout;
pub mod linear;
pub mod loss;
pub mod lstm;
pub mod norm;
pub mod optim;
pub mod pooling;
pub mod quant;
pub mod reduction;
pub mod resize;
pub mod rope;
pub mod sampling;
pub mod spatial;
pub mod spectral;
pub mod stylegan;

pub use activation::*;
pub use algebra::*;
pub use attention::*;
pub use codec::*;
pub use concat::*;
pub use conv::*;
pub use delta_rule::*;
pub use diffusion::*;
pub use elementwise::*;
pub use embedding::*;
pub use flash_attention::*;
pub use flash_grad::*;
pub use fourier::*;
pub use image::*;
pub use layout::*;
pub use linear::*;
pub use loss::*;
pub use lstm::*;
pub use norm::*;
pub use optim::*;
pub use pooling::*;
pub use quant::*;
pub use reduction::*;
pub use resize::*;
pub use rope::*;
pub use sampling::*;
pub use spatial::*;
pub use spectral::*;
pub use stylegan::*;

/// The spatial ops' shape and geometry types (defined with the CPU reference, as [`Act`] and
/// the GEMM spec are).
pub use brotensor_cpu::spatial::{
    Conv1dSpec, Conv2dSpec, Conv3dSpec, ConvSpec, Nchw, Pool2dSpec, PoolSpec, ResizeMode,
    ResizeSpec,
};

use crate::backend::Backend;
use crate::runtime::backend;
use crate::{Device, Dtype, Error, Result, Tensor};

/// How an op uses one of its tensor operands. Every op declares each operand once, with its
/// role, in the one list it dispatches on (the module's dispatch rules); the device check of
/// every committed operand, writability and dense views follow from that list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Read only.
    Input,
    /// Written in full; its old contents are not read (sized by the op).
    Written,
    /// Read and written: an accumulated gradient, a running statistic, an in-place target.
    Updated,
}

/// One declared operand of an op: its name in the signature, its role, and the tensor
/// (`None` for an optional operand that was not passed).
#[derive(Clone, Copy)]
pub(crate) struct Operand<'a> {
    pub(crate) name: &'static str,
    pub(crate) role: Role,
    pub(crate) tensor: Option<&'a Tensor>,
    /// Checked by [`dispatch`] to be a float the op's device computes in.
    float: bool,
}

impl Operand<'_> {
    /// Declares that the operand must be a float (F32, F16 or BF16) that the op's device
    /// computes in ([`check_float`], run by [`dispatch`] after the device rule).
    pub(crate) fn float(self) -> Self {
        Operand {
            float: true,
            ..self
        }
    }
}

/// An input operand.
pub(crate) fn input<'a>(name: &'static str, t: &'a Tensor) -> Operand<'a> {
    Operand {
        name,
        role: Role::Input,
        tensor: Some(t),
        float: false,
    }
}

/// An optional input operand.
pub(crate) fn input_opt<'a>(name: &'static str, t: Option<&'a Tensor>) -> Operand<'a> {
    Operand {
        name,
        role: Role::Input,
        tensor: t,
        float: false,
    }
}

/// An output the op writes in full.
pub(crate) fn written<'a>(name: &'static str, t: &'a Tensor) -> Operand<'a> {
    Operand {
        name,
        role: Role::Written,
        tensor: Some(t),
        float: false,
    }
}

/// An optional output the op writes in full.
pub(crate) fn written_opt<'a>(name: &'static str, t: Option<&'a Tensor>) -> Operand<'a> {
    Operand {
        name,
        role: Role::Written,
        tensor: t,
        float: false,
    }
}

/// An operand the op reads and writes (accumulates into, or updates in place).
pub(crate) fn updated<'a>(name: &'static str, t: &'a Tensor) -> Operand<'a> {
    Operand {
        name,
        role: Role::Updated,
        tensor: Some(t),
        float: false,
    }
}

/// An optional operand the op reads and writes.
pub(crate) fn updated_opt<'a>(name: &'static str, t: Option<&'a Tensor>) -> Operand<'a> {
    Operand {
        name,
        role: Role::Updated,
        tensor: t,
        float: false,
    }
}

/// Resolves the device of an op from its declared operands, in signature order: the device
/// of the first committed one (else of the first present one, else the CPU), and every other
/// committed operand must be on it.
fn resolve(op: &'static str, operands: &[Operand<'_>]) -> Result<Device> {
    let present = || operands.iter().filter_map(|o| Some((o.name, o.tensor?)));
    let device = present()
        .find(|(_, t)| t.is_committed())
        .or_else(|| present().next())
        .map_or(Device::Cpu, |(_, t)| t.device());
    for (name, t) in present() {
        check_on_device(op, name, t, device)?;
    }
    Ok(device)
}

/// The backend an op runs on, with the op's name: it derefs to the [`Backend`], and sizes the
/// op's outputs ([`Dispatched::out`]) so that each one is checked by name against the op's
/// device.
#[derive(Clone, Copy)]
pub(crate) struct Dispatched {
    be: &'static dyn Backend,
    op: &'static str,
}

impl std::ops::Deref for Dispatched {
    type Target = dyn Backend;

    fn deref(&self) -> &(dyn Backend + 'static) {
        self.be
    }
}

impl Dispatched {
    /// `op` on `device`'s backend, for an op that resolved its device itself.
    pub(crate) fn on(op: &'static str, device: Device) -> Result<Self> {
        Ok(Dispatched {
            be: backend(op, device)?,
            op,
        })
    }

    /// The backend itself, for code that keeps it past the op's borrow.
    pub(crate) fn backend(self) -> &'static dyn Backend {
        self.be
    }

    /// Sizes output `name` to `dims` of `dtype` on the op's device ([`prepare_out`]).
    pub(crate) fn out(
        &self,
        name: &'static str,
        out: &mut Tensor,
        dims: &[usize],
        dtype: Dtype,
    ) -> Result<()> {
        prepare_out(self.op, name, out, self.be.device(), dims, dtype)
    }
}

/// The device `op` runs on, from its declared operands (every tensor the op reads or writes,
/// in signature order; see [`Role`]), before any other check of the op: the device rule over
/// every committed operand, then every written or updated operand must be writable (no
/// view, no live views). For an op that reads views in place; most ops use [`dispatch`].
pub(crate) fn declare(op: &'static str, operands: &[Operand<'_>]) -> Result<Device> {
    #[cfg(feature = "internals")]
    declared::record(op, operands);
    let device = resolve(op, operands)?;
    for o in operands {
        if let (Some(t), Role::Written | Role::Updated) = (o.tensor, o.role) {
            t.check_writable(op, o.name)?;
        }
    }
    Ok(device)
}

/// The backend `op` runs on, from its declared operands ([`declare`]); then every input that
/// is a view without a dense layout gets its one dense copy (kept with the view), so
/// backends always see dense storage; last, every operand declared [`Operand::float`] is
/// checked to be a float the device computes in.
pub(crate) fn dispatch(op: &'static str, operands: &[Operand<'_>]) -> Result<Dispatched> {
    let be = Dispatched::on(op, declare(op, operands)?)?;
    for o in operands {
        if let (Some(t), Role::Input) = (o.tensor, o.role) {
            if t.is_committed() && !t.layout().is_dense() {
                t.dense_storage(op)?;
            }
        }
    }
    for o in operands.iter().filter(|o| o.float) {
        if let Some(t) = o.tensor {
            check_float(op, o.name, t, be)?;
        }
    }
    Ok(be)
}

/// What [`dispatch`] was given, recorded for the workspace's tests (the `internals`
/// feature): the generated wrong-device test learns each op's declared operands from it.
#[cfg(feature = "internals")]
pub(crate) mod declared {
    use super::{Operand, Role};
    use std::cell::RefCell;

    /// One operand as an op declared it: its name, role and the tensor's allocation.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Declared {
        /// The op's name.
        pub op: &'static str,
        /// The operand's name.
        pub name: &'static str,
        /// How the op uses it.
        pub role: Role,
        /// The tensor's [`allocation_id`](crate::Tensor::allocation_id) (`None` when
        /// uncommitted), to match it to the caller's tensors.
        pub allocation: Option<u64>,
    }

    thread_local! {
        static LOG: RefCell<Option<Vec<Vec<Declared>>>> = const { RefCell::new(None) };
    }

    /// Records one dispatch while a recording runs on this thread.
    pub(crate) fn record(op: &'static str, operands: &[Operand<'_>]) {
        LOG.with(|log| {
            if let Some(calls) = log.borrow_mut().as_mut() {
                calls.push(
                    operands
                        .iter()
                        .filter_map(|o| {
                            Some(Declared {
                                op,
                                name: o.name,
                                role: o.role,
                                allocation: o.tensor?.allocation_id(),
                            })
                        })
                        .collect(),
                );
            }
        });
    }

    /// Runs `f` and returns its result with every dispatch it made on this thread, in order
    /// (the op called first, then any op it called).
    pub fn recording<T>(f: impl FnOnce() -> T) -> (T, Vec<Vec<Declared>>) {
        LOG.with(|log| *log.borrow_mut() = Some(Vec::new()));
        let out = f();
        let calls = LOG.with(|log| log.borrow_mut().take()).unwrap_or_default();
        (out, calls)
    }
}

/// Errors unless a committed `t` is on `device`: for an operand an op checks apart from its
/// dispatch list, such as a caller-sized gradient it accumulates into.
pub(crate) fn check_on_device(
    op: &'static str,
    name: &'static str,
    t: &Tensor,
    device: Device,
) -> Result<()> {
    if t.is_committed() && t.device() != device {
        return Err(Error::DeviceMismatch {
            op,
            operand: name,
            expected: device,
            found: t.device(),
        });
    }
    Ok(())
}

/// Checks that `t` is a float the backend computes in.
pub(crate) fn check_float(
    op: &'static str,
    name: &'static str,
    t: &Tensor,
    be: Dispatched,
) -> Result<()> {
    if !t.dtype().is_float() {
        return Err(Error::Dtype {
            op,
            operand: name,
            expected: "expected F32, F16 or BF16".into(),
            found: t.dtype(),
        });
    }
    if !be.supports(t.dtype()) {
        return Err(Error::UnsupportedDtype {
            op,
            dtype: t.dtype(),
            device: be.device(),
        });
    }
    Ok(())
}

/// Checks that `t` has `like`'s shape and dtype.
pub(crate) fn check_same(
    op: &'static str,
    (name, t): (&'static str, &Tensor),
    (like_name, like): (&'static str, &Tensor),
) -> Result<()> {
    if t.shape() != like.shape() {
        return Err(Error::shape(
            op,
            format!(
                "`{name}` is {:?} but `{like_name}` is {:?}",
                t.dims(),
                like.dims()
            ),
        ));
    }
    check_dtypes_match(op, (like_name, like), &[(name, t)])
}

/// Checks that operand `name` is of dtype `want`.
pub(crate) fn check_dtype(
    op: &'static str,
    name: &'static str,
    t: &Tensor,
    want: Dtype,
) -> Result<()> {
    if t.dtype() != want {
        return Err(Error::Dtype {
            op,
            operand: name,
            expected: format!("expected {want}"),
            found: t.dtype(),
        });
    }
    Ok(())
}

/// Checks that every tensor in `others` has `like`'s dtype, naming the first that does not.
pub(crate) fn check_dtypes_match(
    op: &'static str,
    (like_name, like): (&'static str, &Tensor),
    others: &[(&'static str, &Tensor)],
) -> Result<()> {
    match others.iter().find(|(_, t)| t.dtype() != like.dtype()) {
        Some((name, t)) => Err(Error::Dtype {
            op,
            operand: name,
            expected: format!("must match `{like_name}` ({})", like.dtype()),
            found: t.dtype(),
        }),
        None => Ok(()),
    }
}

/// The product of user-supplied sizes, or `Error::Shape` naming `op` and `what` when it
/// overflows `usize` (the one rule for sizes: no unchecked product reaches a kernel).
pub(crate) fn checked_product(op: &'static str, what: &str, factors: &[usize]) -> Result<usize> {
    factors
        .iter()
        .try_fold(1usize, |acc, &f| acc.checked_mul(f))
        .ok_or_else(|| {
            Error::shape(
                op,
                format!("{what} = {factors:?} multiplied overflows usize"),
            )
        })
}

/// Adopts and sizes output `name` of `op` to `dims` of `dtype` on `device`. Errors, naming
/// the op and the output, when the output is committed on another device, or is a view or
/// has live views (ops never write through views).
pub(crate) fn prepare_out(
    op: &'static str,
    name: &'static str,
    out: &mut Tensor,
    device: Device,
    dims: &[usize],
    dtype: Dtype,
) -> Result<()> {
    check_on_device(op, name, out, device)?;
    out.check_writable(op, name)?;
    out.adopt(device);
    out.resize_for(op, dims, dtype)
}
