//! The one GPU dtype policy: how an op's float dtype computes on a device, and the one
//! widen-run-narrow path for dtypes stored as packed words.
//!
//! A dtype is *native* where the device's shader language has the type (F32 everywhere, F16
//! where the adapter has it, BF16 on CUDA); BF16 on a device without a bf16 type is stored
//! as packed 16-bit *words*: the elementwise kernels widen and narrow in the kernel, and
//! every other op runs through [`CubeBackend::through_f32`] (F32 copies of its operands, the
//! op in F32, its outputs narrowed back with round-to-nearest-even). Anything else is not
//! computed on the device.

use cubecl::prelude::*;

use super::CubeBackend;
use crate::backend::ElementwiseOps;
use crate::{Dtype, Result, Tensor};

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

/// Calls `$body` with `$F` bound to the storage type of a natively computed float dtype.
macro_rules! with_float {
    ($dtype:expr, |$F:ident| $body:expr) => {
        match $dtype {
            Dtype::F32 => {
                type $F = f32;
                $body
            }
            Dtype::F16 => {
                type $F = f16;
                $body
            }
            Dtype::BF16 => {
                type $F = bf16;
                $body
            }
            other => unreachable!("non-float dtype {other:?} reached a float kernel"),
        }
    };
}
pub(crate) use with_float;

/// An output of an op run through F32, and whether the op reads its old values.
pub(super) struct Narrowed<'a> {
    t: &'a mut Tensor,
    reads: bool,
}

impl<'a> Narrowed<'a> {
    /// An output the op only writes: its F32 copy starts undefined.
    pub(super) fn written(t: &'a mut Tensor) -> Self {
        Narrowed { t, reads: false }
    }

    /// An output the op reads and updates (accumulates, or leaves partly unwritten): its
    /// F32 copy starts as the widened old values.
    pub(super) fn updated(t: &'a mut Tensor) -> Self {
        Narrowed { t, reads: true }
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

    /// Whether `dtype` runs as packed bf16 words on this device.
    pub(super) fn words(&self, dtype: Dtype) -> bool {
        self.policy(dtype) == DtypePolicy::Words
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

    /// Widen, run, narrow: runs `f` on F32 copies of `inputs` and of `outputs`, then casts
    /// each F32 output back into its tensor. The way every op without a packed-word kernel
    /// runs on BF16 stored as words (FP32 math either way). Operands the op takes in F32
    /// whatever the data's dtype (statistics, masks) are not listed: `f` uses them as they
    /// are.
    pub(super) fn through_f32(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Narrowed<'_>],
        f: impl FnOnce(&[Tensor], &mut [Tensor]) -> Result<()>,
    ) -> Result<()> {
        let wide = inputs
            .iter()
            .map(|t| self.widened(t))
            .collect::<Result<Vec<_>>>()?;
        let mut wide_out = outputs
            .iter()
            .map(|o| {
                if o.reads {
                    self.widened(o.t)
                } else {
                    self.f32_like(o.t)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        f(&wide, &mut wide_out)?;
        for (w, o) in wide_out.iter().zip(outputs.iter_mut()) {
            self.cast(w, o.t)?;
        }
        Ok(())
    }
}
