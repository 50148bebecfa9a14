//! GPU glue of the tensor-algebra ops: dtypes to kernel element types, host-resolved
//! metadata (pads, index maps) to the kernels' run-time arguments.

use brotensor_kernels::algebra::convert::{launch_convert, Conversion};
use brotensor_kernels::algebra::index::{self as kidx, PadDim};
use brotensor_kernels::algebra::map::{launch_complex_map, launch_float_map};
use brotensor_kernels::algebra::reduce::{launch_reduce_axis, Lanes};
use cubecl::ir::features::AtomicUsage;
use cubecl::ir::{StorageType, Type};
use cubecl::prelude::*;

use super::{out_handle, CubeBackend};
use crate::backend::algebra::{fuse_index_dims, fuse_pad_dims};
use crate::backend::{AlgebraOps, ComplexMap, FloatMap, IndexMap, PadSpec, ReduceOp};
use crate::{Device, Dtype, Error, Result, Tensor};

/// Whether the device adds `T` atomically.
pub(super) fn atomic_add<T: CubePrimitive>(props: &cubecl::ir::DeviceProperties) -> bool {
    let ty = Type::new(StorageType::Atomic(
        T::as_type_native_unchecked().elem_type(),
    ));
    props.atomic_type_usage(ty).contains(AtomicUsage::Add)
}

/// 32-bit words per element of a structural op's dtype (4-, 8- and 16-byte elements).
fn words(op: &'static str, t: &Tensor) -> Result<usize> {
    match t.dtype().size_bytes() {
        Some(w @ (4 | 8 | 16)) => Ok(w / 4),
        _ => Err(Error::invalid(
            op,
            format!("{} has no 32-bit word layout on the GPU", t.dtype()),
        )),
    }
}

/// An index map's bases as the kernels take them: `u32::MAX` for a skipped entry, every
/// base scaled by `k` (parts per element).
fn kernel_bases(op: &'static str, bases: &[Option<usize>], k: usize) -> Result<Vec<u32>> {
    bases
        .iter()
        .map(|b| match b {
            None => Ok(u32::MAX),
            Some(b) => b
                .checked_mul(k)
                .and_then(|v| u32::try_from(v).ok())
                .filter(|&v| v != u32::MAX)
                .ok_or_else(|| Error::invalid(op, "an index needs more than 32 bits")),
        })
        .collect()
}

/// The kernel arguments of a pad dim: see [`PadDim`]. All arithmetic in i128, so the most
/// negative and positive paddings resolve exactly.
fn pad_dim(
    op: &'static str,
    n: usize,
    p: PadSpec,
    out_dim: usize,
    in_stride: usize,
) -> Result<PadDim> {
    let step = p.interior as i128 + 1;
    if step > (u32::MAX / 2) as i128 {
        return Err(Error::invalid(op, "interior padding above 2^31 on a GPU"));
    }
    let out = out_dim as i128;
    // Output position `c` holds input coordinate `(c - low) / step`.
    let skip = (p.low as i128).clamp(0, out);
    let start = skip - p.low as i128; // `c - low` at `c == skip`, >= 0
    let last = (n as i128 - 1) * step; // the last input position, stretched
    let (phase, base, limit, skip) = if n == 0 || start > last {
        (0, 0, 0, out) // no input element lands in the output
    } else {
        let phase = start % step;
        (phase, start / step, (last - start).min(out), skip)
    };
    let us = |v: i128| usize::try_from(v).map_err(|_| Error::invalid(op, "pad metadata overflows"));
    Ok(PadDim {
        out_dim,
        skip: us(skip)?,
        phase: us(phase)?,
        step: us(step)?,
        limit: us(limit)?,
        base: us(base)?,
        in_stride,
    })
}

impl<R: Runtime> AlgebraOps for CubeBackend<R> {
    fn float_map(
        &self,
        name: &'static str,
        instr: FloatMap,
        inputs: &[&Tensor],
        out: &mut Tensor,
    ) -> Result<()> {
        let hs: Vec<_> = inputs.iter().map(|t| out_handle(t)).collect();
        let refs: Vec<_> = hs.iter().collect();
        let o = out_handle(out);
        let c = &self.client;
        let n = out.numel();
        match out.dtype() {
            // CUDA has a 64-bit math library; Vulkan (GLSL.std.450) and Metal do not, so
            // there the transcendental functions are computed from arithmetic.
            Dtype::F64 => {
                let soft = !matches!(self.device, Device::Cuda(_));
                launch_float_map::<R, f64>(c, instr, &refs, &o, n, soft)
            }
            _ => launch_float_map::<R, f32>(c, instr, &refs, &o, n, false),
        }
        .map_err(|e| self.launch_error(name, e))
    }

    fn complex_map(
        &self,
        name: &'static str,
        instr: ComplexMap,
        inputs: &[&Tensor],
        out: &mut Tensor,
    ) -> Result<()> {
        let hs: Vec<_> = inputs.iter().map(|t| out_handle(t)).collect();
        let refs: Vec<_> = hs.iter().collect();
        let o = out_handle(out);
        let n = out.numel();
        // As in `float_map`: 64-bit transcendentals from arithmetic except on CUDA.
        let soft = !matches!(self.device, Device::Cuda(_));
        match out.dtype() {
            Dtype::C128 => launch_complex_map::<R, f64>(&self.client, instr, &refs, &o, n, soft),
            _ => launch_complex_map::<R, f32>(&self.client, instr, &refs, &o, n, false),
        }
        .map_err(|e| self.launch_error(name, e))
    }

    fn reduce_axis(
        &self,
        name: &'static str,
        op: ReduceOp,
        x: &Tensor,
        shape: (usize, usize, usize),
        out: &mut Tensor,
    ) -> Result<()> {
        let (xh, o, c) = (out_handle(x), out_handle(out), &self.client);
        let p = self.plane_dim_max;
        match x.dtype() {
            Dtype::F32 => launch_reduce_axis::<R, f32>(c, op, Lanes::Real, &xh, shape, &o, p),
            Dtype::F64 => launch_reduce_axis::<R, f64>(c, op, Lanes::Real, &xh, shape, &o, p),
            Dtype::I64 => launch_reduce_axis::<R, i64>(c, op, Lanes::Real, &xh, shape, &o, p),
            Dtype::C64 => launch_reduce_axis::<R, f32>(c, op, Lanes::Complex, &xh, shape, &o, p),
            _ => launch_reduce_axis::<R, f64>(c, op, Lanes::Complex, &xh, shape, &o, p),
        }
        .map_err(|e| self.launch_error(name, e))
    }

    fn convert(&self, x: &Tensor, out: &mut Tensor) -> Result<()> {
        const OP: &str = "convert";
        let (xh, o) = (out_handle(x), out_handle(out));
        let flag = self.client.create_from_slice(u32::as_bytes(&[0u32]));
        let n = x.numel();
        let (from, to) = (x.dtype(), out.dtype());
        let from_complex = from.is_complex();
        let to_complex = to.is_complex();
        // The destination's integer range, `[lo, hi)`, as a float source checks it.
        let range = match to {
            Dtype::I64 => Some((-9_223_372_036_854_775_808.0f64, 9_223_372_036_854_775_808.0)),
            Dtype::I32 => Some((-2_147_483_648.0, 2_147_483_648.0)),
            _ => None,
        };
        macro_rules! go {
            ($A:ty, $B:ty) => {{
                let conv = Conversion::<$A> {
                    from_complex,
                    to_complex,
                    range: if from.is_int() {
                        None
                    } else {
                        range.map(|(lo, hi)| (lo as $A, hi as $A))
                    },
                };
                launch_convert::<R, $A, $B>(&self.client, &xh, conv, &o, &flag, n)
            }};
        }
        macro_rules! to {
            ($A:ty) => {
                match to {
                    Dtype::F32 | Dtype::C64 => go!($A, f32),
                    Dtype::F64 | Dtype::C128 => go!($A, f64),
                    Dtype::I64 => go!($A, i64),
                    _ => go!($A, i32),
                }
            };
        }
        match from {
            Dtype::F32 | Dtype::C64 => to!(f32),
            Dtype::F64 | Dtype::C128 => to!(f64),
            Dtype::I64 => to!(i64),
            _ => to!(i32),
        }
        .map_err(|e| self.launch_error(OP, e))?;
        if range.is_some() && !from.is_int() && n > 0 {
            let bytes = self
                .client
                .read_one(flag)
                .map_err(|e| self.gpu_error(OP, format!("{e:?}")))?;
            if u32::from_bytes(&bytes)[0] != 0 {
                return Err(Error::invalid(
                    OP,
                    format!("a value is NaN, infinite or outside the range of {to}"),
                ));
            }
        }
        Ok(())
    }

    fn pad(&self, x: &Tensor, pads: &[PadSpec], out: &mut Tensor) -> Result<()> {
        const OP: &str = "pad";
        let w = words(OP, x)?;
        let (dims, pads) = fuse_pad_dims(x.dims(), pads);
        let mut in_stride = 1usize;
        let mut resolved = Vec::with_capacity(dims.len());
        for d in (0..dims.len()).rev() {
            let out_dim = brotensor_cpu::algebra::pad_dim(dims[d], pads[d])
                .ok_or_else(|| Error::invalid(OP, "a padded dim is negative or overflows"))?;
            resolved.push(pad_dim(OP, dims[d], pads[d], out_dim, in_stride)?);
            in_stride = in_stride.saturating_mul(dims[d]);
        }
        resolved.reverse();
        kidx::launch_pad(
            &self.client,
            &out_handle(x),
            x.numel(),
            &resolved,
            w,
            &out_handle(out),
        )
        .map_err(|e| self.launch_error(OP, e))
    }

    fn place(
        &self,
        name: &'static str,
        src: &Tensor,
        dims: &[usize],
        strides: &[usize],
        offset: usize,
        out: &mut Tensor,
    ) -> Result<()> {
        let w = words(name, src)?;
        let n = out.numel();
        kidx::launch_place(
            &self.client,
            &out_handle(src),
            dims,
            strides,
            offset,
            w,
            &out_handle(out),
            n,
        )
        .map_err(|e| self.launch_error(name, e))
    }

    fn triangle(
        &self,
        name: &'static str,
        x: &Tensor,
        k: i64,
        lower: bool,
        out: &mut Tensor,
    ) -> Result<()> {
        let w = words(name, x)?;
        let r = x.rank();
        let shape = (x.dims()[r - 2], x.dims()[r - 1]);
        kidx::launch_triangle(
            &self.client,
            &out_handle(x),
            shape,
            k,
            lower,
            w,
            &out_handle(out),
            x.numel(),
        )
        .map_err(|e| self.launch_error(name, e))
    }

    fn gather(&self, src: &Tensor, map: &IndexMap<'_>, out: &mut Tensor) -> Result<()> {
        const OP: &str = "gather";
        let w = words(OP, src)?;
        let bases = kernel_bases(OP, map.bases, 1)?;
        let (dims, batch, window) =
            fuse_index_dims(map.dims, map.batch_strides, map.window_strides);
        let kmap = kidx::IndexMap {
            dims: &dims,
            batch_strides: &batch,
            window_strides: &window,
            bases: &bases,
        };
        kidx::launch_gather(
            &self.client,
            &out_handle(src),
            src.numel(),
            &kmap,
            w,
            &out_handle(out),
        )
        .map_err(|e| self.launch_error(OP, e))
    }

    fn scatter_add(&self, updates: &Tensor, map: &IndexMap<'_>, out: &mut Tensor) -> Result<()> {
        const OP: &str = "scatter_add";
        // Complex values are pairs of scalars: one more dim of 2, in parts.
        let parts = if out.dtype().is_complex() { 2 } else { 1 };
        let overflow = || Error::invalid(OP, "the operand overflows");
        let scalars = out.numel().checked_mul(parts).ok_or_else(overflow)?;
        let mut dims = map.dims.to_vec();
        let mut batch = map.batch_strides.to_vec();
        let mut window = map
            .window_strides
            .iter()
            .map(|s| s.checked_mul(parts).ok_or_else(overflow))
            .collect::<Result<Vec<usize>>>()?;
        if parts == 2 {
            dims.push(2);
            batch.push(0);
            window.push(1);
        }
        let (dims, batch, window) = fuse_index_dims(&dims, &batch, &window);
        let (uh, oh) = (out_handle(updates), out_handle(out));
        let (atomic, slot) = match out.dtype() {
            Dtype::F32 | Dtype::C64 => (self.atomic_add[0], 0),
            Dtype::F64 | Dtype::C128 => (self.atomic_add[1], 1),
            _ => (self.atomic_add[2], 2),
        };
        // Without atomic adds, entries that share a target go to separate launches: the
        // k-th entry of each base in launch k (windows of different bases are disjoint,
        // see `scatter_rounds`), or one entry per launch when windows may overlap.
        let rounds: Vec<Vec<Option<usize>>> = if atomic {
            vec![map.bases.to_vec()]
        } else {
            scatter_rounds(map)
        };
        for round in rounds {
            let bases = kernel_bases(OP, &round, parts)?;
            let kmap = kidx::IndexMap {
                dims: &dims,
                batch_strides: &batch,
                window_strides: &window,
                bases: &bases,
            };
            let c = &self.client;
            match slot {
                0 => kidx::launch_scatter_add::<R, f32>(c, &uh, &kmap, atomic, &oh, scalars),
                1 => kidx::launch_scatter_add::<R, f64>(c, &uh, &kmap, atomic, &oh, scalars),
                _ => kidx::launch_scatter_add::<R, i64>(c, &uh, &kmap, atomic, &oh, scalars),
            }
            .map_err(|e| self.launch_error(OP, e))?;
        }
        Ok(())
    }
}

/// Splits a scatter's entries into launches with no shared target: when every entry's
/// window is one element wide along each dim an index moves (`map.exclusive`), entries with
/// different bases never overlap, so launch `k` takes the `k`-th entry of every base;
/// otherwise each entry is its own launch.
fn scatter_rounds(map: &IndexMap<'_>) -> Vec<Vec<Option<usize>>> {
    let mut rounds: Vec<Vec<Option<usize>>> = Vec::new();
    if map.exclusive {
        let mut seen = std::collections::HashMap::<usize, usize>::new();
        for (i, b) in map.bases.iter().enumerate() {
            let Some(b) = b else { continue };
            let k = seen.entry(*b).or_insert(0);
            if rounds.len() <= *k {
                rounds.push(vec![None; map.bases.len()]);
            }
            rounds[*k][i] = Some(*b);
            *k += 1;
        }
    } else {
        for (i, b) in map.bases.iter().enumerate() {
            if b.is_some() {
                let mut r = vec![None; map.bases.len()];
                r[i] = *b;
                rounds.push(r);
            }
        }
    }
    rounds
}
