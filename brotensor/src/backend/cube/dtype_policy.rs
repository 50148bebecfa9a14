//! The one GPU dtype policy, and the one wrapper every float op goes through.
//!
//! A dtype is *native* where the device's shader language has the type (F32 everywhere, F16
//! where the adapter has it, BF16 on CUDA); BF16 on a device without a bf16 type is stored
//! as packed 16-bit *words*: the elementwise kernels widen and narrow in the kernel, and
//! every other op runs through [`CubeBackend::through_f32`] (F32 copies of its operands, the
//! op in F32, its outputs narrowed back with round-to-nearest-even). Anything else is not
//! computed on the device.
//!
//! A float op states itself once, as a [`FloatOp`]: its name, its dtype, its float inputs,
//! the outputs it only writes and those it reads and updates, how it runs on packed words
//! and its native launch ([`float_launch!`]). The wrapper applies the policy and names a
//! failed launch after the op. A float kernel cannot launch around it: its type parameter
//! comes from a [`NativeFloat`], which only the policy hands out.

use brotensor_kernels::LaunchError;
use cubecl::prelude::*;

use super::CubeBackend;
use crate::backend::ElementwiseOps;
use crate::{Dtype, Error, Result, Tensor};

/// How a dtype computes on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DtypePolicy {
    /// Kernels run in the dtype's own storage type.
    Native,
    /// Stored as packed 16-bit BF16 words, computed through F32.
    Words,
    /// Not computed on this device.
    Unsupported,
}

/// A float dtype (F32, F16 or BF16) that this device computes in its own storage type. Only
/// [`CubeBackend::stored`] makes one.
#[derive(Clone, Copy, Debug)]
pub(super) struct NativeFloat(Dtype);

impl NativeFloat {
    /// The dtype.
    pub(super) fn dtype(self) -> Dtype {
        self.0
    }
}

/// How a float dtype is stored on this device.
#[derive(Clone, Copy, Debug)]
pub(super) enum Stored {
    /// In its own storage type.
    Native(NativeFloat),
    /// As packed 16-bit BF16 words.
    Words,
}

/// Why a native launch failed.
#[derive(Debug)]
pub(super) enum LaunchFailure {
    /// The kernel crate refused the launch; the wrapper names the error after the op.
    Launch(LaunchError),
    /// A step before a launch (a scratch allocation) failed with the crate's own error.
    Op(Error),
}

impl From<LaunchError> for LaunchFailure {
    fn from(e: LaunchError) -> Self {
        LaunchFailure::Launch(e)
    }
}

impl From<Error> for LaunchFailure {
    fn from(e: Error) -> Self {
        LaunchFailure::Op(e)
    }
}

/// Calls `$body` with `$F` bound to the storage type of a [`NativeFloat`]: the match inside
/// [`float_launch!`], and the cast's (the one op with two float dtypes).
macro_rules! with_float {
    ($native:expr, |$F:ident| $body:expr) => {
        match $crate::backend::cube::NativeFloat::dtype($native) {
            $crate::Dtype::F32 => {
                type $F = f32;
                $body
            }
            $crate::Dtype::F16 => {
                type $F = ::half::f16;
                $body
            }
            $crate::Dtype::BF16 => {
                type $F = ::half::bf16;
                $body
            }
            other => unreachable!("the dtype policy made {other:?} a native float"),
        }
    };
}
pub(crate) use with_float;

/// The native launch of a [`FloatOp`]: a closure of the [`NativeFloat`] the policy picked,
/// running `$body` with `$F` bound to its storage type. `$body` gives the result of its
/// (last) launch and may use `?` on a [`LaunchError`] or on the crate's [`Error`].
macro_rules! float_launch {
    (|$F:ident| $body:expr) => {
        |native: $crate::backend::cube::NativeFloat| -> ::std::result::Result<
            (),
            $crate::backend::cube::LaunchFailure,
        > {
            ::std::result::Result::Ok($crate::backend::cube::with_float!(native, |$F| $body)?)
        }
    };
}
pub(crate) use float_launch;

/// A float op on its way to the device (see [`CubeBackend::float_op`]): its name, its dtype,
/// and the operands of its widen-run-narrow path ([`FloatOp::run`]).
pub(super) struct FloatOp<'b, 'a, 'o, R: Runtime> {
    be: &'b CubeBackend<R>,
    name: &'static str,
    dtype: Dtype,
    inputs: &'a [&'a Tensor],
    written: &'a mut [&'o mut Tensor],
    updated: &'a mut [&'o mut Tensor],
}

impl<'a, 'o, R: Runtime> FloatOp<'_, 'a, 'o, R> {
    /// The float inputs, widened on the F32 path. Operands the op takes in F32 (or as
    /// integers) whatever the data's dtype (statistics, masks, indices) are not listed: the
    /// F32 path uses them as they are.
    pub(super) fn inputs(self, inputs: &'a [&'a Tensor]) -> Self {
        FloatOp { inputs, ..self }
    }

    /// The float outputs the op only writes: on the F32 path their copies start undefined.
    pub(super) fn written(self, written: &'a mut [&'o mut Tensor]) -> Self {
        FloatOp { written, ..self }
    }

    /// The float outputs the op reads and updates (accumulated gradients, outputs it leaves
    /// partly unwritten): on the F32 path their copies start as the widened old values.
    pub(super) fn updated(self, updated: &'a mut [&'o mut Tensor]) -> Self {
        FloatOp { updated, ..self }
    }

    /// Runs the op: `launch` where the dtype is native; on packed words, `in_f32` on F32
    /// copies of the inputs and of the outputs (written ones first, then updated ones, each
    /// in its list's order), whose results are narrowed back into the outputs.
    pub(super) fn run(
        self,
        in_f32: impl FnOnce(&[Tensor], &mut [Tensor]) -> Result<()>,
        launch: impl FnOnce(NativeFloat) -> std::result::Result<(), LaunchFailure>,
    ) -> Result<()> {
        match self.be.stored(self.name, self.dtype)? {
            Stored::Native(native) => self.named(launch(native)),
            Stored::Words => self
                .be
                .through_f32(self.inputs, self.written, self.updated, in_f32),
        }
    }

    /// Runs an op with a kernel of its own for packed words: `launch` where the dtype is
    /// native, `words` on packed words.
    pub(super) fn run_words(
        self,
        words: impl FnOnce() -> std::result::Result<(), LaunchError>,
        launch: impl FnOnce(NativeFloat) -> std::result::Result<(), LaunchFailure>,
    ) -> Result<()> {
        match self.be.stored(self.name, self.dtype)? {
            Stored::Native(native) => self.named(launch(native)),
            Stored::Words => self.named(words().map_err(LaunchFailure::Launch)),
        }
    }

    /// Runs an op that does not compute BF16 stored as words (its caller refuses that dtype,
    /// or handles it another way): `launch` where the dtype is native, else the unsupported
    /// dtype error.
    pub(super) fn run_native(
        self,
        launch: impl FnOnce(NativeFloat) -> std::result::Result<(), LaunchFailure>,
    ) -> Result<()> {
        match self.be.stored(self.name, self.dtype)? {
            Stored::Native(native) => self.named(launch(native)),
            Stored::Words => Err(self.be.unsupported(self.name, self.dtype)),
        }
    }

    /// A launch's result in the crate's terms, a refused launch named after the op.
    fn named(&self, r: std::result::Result<(), LaunchFailure>) -> Result<()> {
        r.map_err(|e| match e {
            LaunchFailure::Launch(e) => self.be.launch_error(self.name, e),
            LaunchFailure::Op(e) => e,
        })
    }
}

impl<R: Runtime> CubeBackend<R> {
    /// How `dtype` computes on this device.
    pub(super) fn policy(&self, dtype: Dtype) -> DtypePolicy {
        match dtype {
            Dtype::F32 => DtypePolicy::Native,
            Dtype::F16 if self.f16 => DtypePolicy::Native,
            Dtype::BF16 if self.bf16 => DtypePolicy::Native,
            Dtype::BF16 => DtypePolicy::Words,
            _ => DtypePolicy::Unsupported,
        }
    }

    /// How the float `dtype` of `op` is stored on this device, or the error of a dtype this
    /// device does not compute.
    pub(super) fn stored(&self, op: &'static str, dtype: Dtype) -> Result<Stored> {
        match self.policy(dtype) {
            DtypePolicy::Native => Ok(Stored::Native(NativeFloat(dtype))),
            DtypePolicy::Words => Ok(Stored::Words),
            DtypePolicy::Unsupported => Err(self.unsupported(op, dtype)),
        }
    }

    /// The error of `op` on a dtype it does not compute on this device.
    fn unsupported(&self, op: &'static str, dtype: Dtype) -> Error {
        Error::UnsupportedDtype {
            op,
            dtype,
            device: self.device,
        }
    }

    /// The float op `name` in `dtype`: state its operands on the returned [`FloatOp`], then
    /// run it. The one way a float kernel launches.
    pub(super) fn float_op<'a, 'o>(
        &self,
        name: &'static str,
        dtype: Dtype,
    ) -> FloatOp<'_, 'a, 'o, R> {
        FloatOp {
            be: self,
            name,
            dtype,
            inputs: &[],
            written: &mut [],
            updated: &mut [],
        }
    }

    /// An F32 copy of `t` on this device.
    fn widened(&self, t: &Tensor) -> Result<Tensor> {
        let mut w = self.f32_like(t)?;
        self.cast(t, &mut w)?;
        Ok(w)
    }

    /// An F32 tensor shaped like `t` on this device, contents undefined.
    fn f32_like(&self, t: &Tensor) -> Result<Tensor> {
        Tensor::empty_on(self.device, t.rows(), t.cols(), Dtype::F32)
    }

    /// Widen, run, narrow: runs `f` on F32 copies of `inputs` and of the outputs (those in
    /// `written` first, undefined; then those in `updated`, the widened old values), then
    /// casts each F32 output back into its tensor. The way every op without a packed-word
    /// kernel runs on BF16 stored as words (FP32 math either way), and the F32 sums of
    /// 16-bit gradients. Operands the op takes in F32 whatever the data's dtype
    /// (statistics, masks) are not listed: `f` uses them as they are.
    pub(super) fn through_f32(
        &self,
        inputs: &[&Tensor],
        written: &mut [&mut Tensor],
        updated: &mut [&mut Tensor],
        f: impl FnOnce(&[Tensor], &mut [Tensor]) -> Result<()>,
    ) -> Result<()> {
        let wide = inputs
            .iter()
            .map(|t| self.widened(t))
            .collect::<Result<Vec<_>>>()?;
        let mut wide_out = written
            .iter()
            .map(|t| self.f32_like(t))
            .chain(updated.iter().map(|t| self.widened(t)))
            .collect::<Result<Vec<_>>>()?;
        f(&wide, &mut wide_out)?;
        let written = written.iter_mut().map(|t| &mut **t);
        let outputs = written.chain(updated.iter_mut().map(|t| &mut **t));
        for (w, t) in wide_out.iter().zip(outputs) {
            self.cast(w, t)?;
        }
        Ok(())
    }
}
