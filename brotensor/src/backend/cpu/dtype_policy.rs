//! The CPU's dtype policy for the 16-bit floats, the GPU's: F16 and BF16 compute with FP32
//! math and one rounding (to nearest even) on the way out.
//!
//! Two routes, chosen per op:
//! - the memory-bound families (element-wise maps, activations, softmax, the row norms,
//!   reductions) read and write the 16-bit data directly, widening in registers or a block
//!   of rows at a time (`brotensor_cpu::half_float`), so no full-size FP32 copy is made;
//! - every other op runs [`through_f32`]: FP32 copies of its 16-bit operands, the FP32 op,
//!   its outputs narrowed back once (the GPU's `through_f32`, with the same
//!   [`Narrowed::written`] / [`Narrowed::updated`] distinction).
//!
//! Operands that are F32 whatever the data's dtype (statistics, masks, caches) are not
//! listed: the op uses them as they are.

use std::ops::Range;

use brotensor_cpu::cast::{self as cpu_cast, FloatElem};
use brotensor_cpu::half_float as hf;
use half::{bf16, f16};

use crate::{Device, Dtype, Element, Result, Tensor};

/// Whether `dtype` is a 16-bit float the CPU computes through FP32.
pub(super) fn is_half(dtype: Dtype) -> bool {
    matches!(dtype, Dtype::F16 | Dtype::BF16)
}

/// Calls `$body` with `$E` bound to the storage type of a 16-bit float dtype (F16 or BF16).
macro_rules! with_half {
    ($dtype:expr, |$E:ident| $body:expr) => {
        match $dtype {
            Dtype::BF16 => {
                type $E = half::bf16;
                $body
            }
            _ => {
                type $E = half::f16;
                $body
            }
        }
    };
}
pub(super) use with_half;

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

    /// An output the op reads and updates (accumulates, or leaves partly unwritten): its F32
    /// copy starts as the widened old values.
    pub(super) fn updated(t: &'a mut Tensor) -> Self {
        Narrowed { t, reads: true }
    }
}

/// An F32 tensor of `t`'s dims on the CPU, contents undefined.
fn f32_like(t: &Tensor) -> Result<Tensor> {
    Tensor::empty_nd_on(Device::Cpu, t.dims(), Dtype::F32)
}

/// An F32 copy of the float tensor `t` (exact).
pub(super) fn widened(t: &Tensor) -> Result<Tensor> {
    let mut w = f32_like(t)?;
    convert_into(t, &mut w);
    Ok(w)
}

/// `dst = src` converted between float dtypes (F32, F16, BF16), rounding once to nearest
/// even where it narrows. Callers pass tensors of one element count.
fn convert_into(src: &Tensor, dst: &mut Tensor) {
    macro_rules! to {
        ($i:ty) => {
            match dst.dtype() {
                Dtype::F16 => cpu_cast::convert(src.host::<$i>(), dst.host_mut::<f16>()),
                Dtype::BF16 => cpu_cast::convert(src.host::<$i>(), dst.host_mut::<bf16>()),
                _ => cpu_cast::convert(src.host::<$i>(), dst.host_mut::<f32>()),
            }
        };
    }
    match src.dtype() {
        Dtype::F16 => to!(f16),
        Dtype::BF16 => to!(bf16),
        _ => to!(f32),
    }
}

/// Widen, run, narrow: runs `f` on F32 copies of `inputs` and of `outputs`, then narrows each
/// F32 output back into its tensor (one rounding). An output that is already F32 is still
/// copied, so list only the 16-bit ones.
pub(super) fn through_f32(
    inputs: &[&Tensor],
    outputs: &mut [Narrowed<'_>],
    f: impl FnOnce(&[Tensor], &mut [Tensor]) -> Result<()>,
) -> Result<()> {
    let wide = inputs
        .iter()
        .map(|t| widened(t))
        .collect::<Result<Vec<_>>>()?;
    let mut wide_out = outputs
        .iter()
        .map(|o| if o.reads { widened(o.t) } else { f32_like(o.t) })
        .collect::<Result<Vec<_>>>()?;
    f(&wide, &mut wide_out)?;
    for (w, o) in wide_out.iter().zip(outputs.iter_mut()) {
        convert_into(w, o.t);
    }
    Ok(())
}

/// Runs a row-wise FP32 kernel over 16-bit tensors a block of rows at a time
/// (`brotensor_cpu::half_float::by_rows`): `inputs` and `outputs` with their elements per
/// row, each output's FP32 block starting undefined ([`Narrowed::written`]) or as its old
/// values ([`Narrowed::updated`]). `f` gets the block's row range, for operands it slices
/// itself (F32 statistics, accumulators it holds across blocks).
pub(super) fn by_rows<E: FloatElem + Element>(
    rows: usize,
    inputs: &[(&Tensor, usize)],
    outputs: &mut [(Narrowed<'_>, usize)],
    f: impl FnMut(Range<usize>, &[&[f32]], &mut [&mut [f32]]),
) {
    let (ins, mut outs) = row_operands::<E>(inputs, outputs);
    hf::by_rows(rows, &ins, &mut outs, f);
}

/// The row paths' 16-bit inputs and outputs, each with its elements per row.
type RowOperands<'a, 'b, E> = (Vec<(&'a [E], usize)>, Vec<hf::RowOut<'b, E>>);

/// The 16-bit data of the row paths' operands, with each one's elements per row.
fn row_operands<'a, 'b, E: FloatElem + Element>(
    inputs: &[(&'a Tensor, usize)],
    outputs: &'b mut [(Narrowed<'_>, usize)],
) -> RowOperands<'a, 'b, E> {
    let ins = inputs.iter().map(|(t, w)| (t.host::<E>(), *w)).collect();
    let outs = outputs
        .iter_mut()
        .map(|(o, w)| hf::RowOut {
            reads: o.reads,
            data: o.t.host_mut::<E>(),
            per_row: *w,
        })
        .collect();
    (ins, outs)
}

/// [`by_rows`] for a kernel whose rows are independent (`brotensor_cpu::half_float::par_rows`):
/// blocks of rows run in parallel, each widened into its own cache-sized FP32 scratch.
pub(super) fn par_rows<E: FloatElem + Element>(
    rows: usize,
    inputs: &[(&Tensor, usize)],
    outputs: &mut [(Narrowed<'_>, usize)],
    f: impl Fn(Range<usize>, &[&[f32]], &mut [&mut [f32]]) + Sync,
) {
    let (ins, mut outs) = row_operands::<E>(inputs, outputs);
    hf::par_rows(rows, &ins, &mut outs, f);
}

/// The values of a float tensor (F32, F16 or BF16) widened into a vector: for the small
/// per-column operands (parameters, their accumulated gradients) of the row paths.
pub(super) fn f32_values(t: &Tensor) -> Vec<f32> {
    match t.dtype() {
        Dtype::F16 => hf::widened(t.host::<f16>()),
        Dtype::BF16 => hf::widened(t.host::<bf16>()),
        _ => t.host::<f32>().to_vec(),
    }
}

/// Stores FP32 `values` into the float tensor `t` (F32, F16 or BF16), rounding once.
pub(super) fn store_f32(values: &[f32], t: &mut Tensor) {
    match t.dtype() {
        Dtype::F16 => cpu_cast::convert(values, t.host_mut::<f16>()),
        Dtype::BF16 => cpu_cast::convert(values, t.host_mut::<bf16>()),
        _ => t.host_mut::<f32>().copy_from_slice(values),
    }
}
