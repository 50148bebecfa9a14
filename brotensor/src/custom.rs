//! Your own kernels on brotensor tensors: write a `#[cube]` kernel once, generic over the
//! CubeCL runtime, and launch it on tensors on whichever GPU they live (CUDA or wgpu), with a
//! function of yours over host slices for [`Device::Cpu`].
//!
//! Implement [`CustomKernel`] (a [`cpu`](CustomKernel::cpu) method over host slices and a
//! [`gpu`](CustomKernel::gpu) method generic over `R: cubecl::Runtime`), then call
//! [`launch`] with the input tensors and the outputs to write. brotensor validates
//! everything a launch relies on before your code runs, the way its own ops do:
//!
//! - operand counts match [`CustomKernel::INPUTS`] / [`CustomKernel::OUTPUTS`];
//! - every input is committed and has the dtype its [`Input`] names; the device computes in
//!   every dtype involved (on a GPU: the runtime has the element type natively);
//! - every committed operand is on one device (`Error::DeviceMismatch` names the operand);
//!   uncommitted outputs are allocated on it;
//! - output sizes (dims multiplied, times the element size) are checked products, and a GPU
//!   operand holds at most [`GPU_MAX_ELEMENTS`] elements, so 32-bit
//!   indices reach every element;
//! - outputs are dense tensors that own their storage alone: a view, or a tensor whose
//!   storage a live view shares (an input included), is refused, so no output aliases an
//!   input;
//! - inputs that are views without a dense layout reach your code as a dense copy.
//!
//! Your code then sees dense row-major buffers: [`HostIn`] / [`HostOut`] slices on the CPU,
//! [`GpuOperand`] handles plus the [`ComputeClient`] on a GPU. A GPU buffer holds at least
//! [`GpuOperand::numel`] elements of [`GpuOperand::dtype`] (padded to 16 bytes), and
//! [`GpuOperand::arg`] binds it as exactly those (checking the element type you name against
//! the dtype), so the argument stays in bounds: what the `unsafe` launch has left to trust is
//! your kernel's indexing. Launches are asynchronous like every GPU op; reading a tensor back
//! waits for them.
//!
//! ```
//! use brotensor::cubecl::{self, prelude::*};
//! use brotensor::custom::{self, CustomKernel, GpuLaunch, HostIn, HostOut, Input, Output};
//! use brotensor::{Device, Dtype, Tensor};
//!
//! /// `y = 2 x`, elementwise, F32.
//! #[cube(launch_unchecked)]
//! fn double_kernel(x: &Array<f32>, y: &mut Array<f32>) {
//!     if ABSOLUTE_POS < y.len() {
//!         y[ABSOLUTE_POS] = x[ABSOLUTE_POS] * 2.0;
//!     }
//! }
//!
//! struct Double;
//!
//! impl CustomKernel for Double {
//!     const NAME: &'static str = "double";
//!     const INPUTS: usize = 1;
//!     const OUTPUTS: usize = 1;
//!
//!     fn cpu(&self, inputs: &[HostIn<'_>], outputs: &mut [HostOut<'_>]) -> brotensor::Result<()> {
//!         let x = inputs[0].slice::<f32>()?;
//!         for (y, x) in outputs[0].slice_mut::<f32>()?.iter_mut().zip(x) {
//!             *y = 2.0 * x;
//!         }
//!         Ok(())
//!     }
//!
//!     fn gpu<R: Runtime>(&self, launch: &GpuLaunch<'_, R>) -> brotensor::Result<()> {
//!         let (x, y) = (&launch.inputs()[0], &launch.outputs()[0]);
//!         let (count, dim) = launch.grid_1d(y.numel())?;
//!         let (x_arg, y_arg) = (x.arg::<f32, R>()?, y.arg::<f32, R>()?);
//!         // SAFETY: the arguments bind the `numel` f32 elements brotensor checked each buffer
//!         // holds, and the kernel reads and writes only below `y.len()`, which is `x`'s too.
//!         unsafe {
//!             double_kernel::launch_unchecked::<R>(launch.client(), count, dim, x_arg, y_arg);
//!         }
//!         Ok(())
//!     }
//! }
//!
//! # fn main() -> brotensor::Result<()> {
//! let x = Tensor::from_slice_on(Device::Cpu, &[1.0f32, -2.0, 3.5], 1, 3)?;
//! let mut y = Tensor::default();
//! custom::launch(
//!     &Double,
//!     &[Input::new("x", &x, Dtype::F32)],
//!     &mut [Output::new("y", &mut y, x.dims(), Dtype::F32)],
//! )?;
//! assert_eq!(y.to_vec::<f32>()?, [2.0, -4.0, 7.0]);
//! # Ok(())
//! # }
//! ```

use std::fmt::Display;

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::backend::{Backend, Storage};
use crate::layout::checked_dims;
use crate::{Device, Dtype, Element, Error, Result, Tensor, GPU_MAX_ELEMENTS};

/// A kernel of your own: one function over host slices for the CPU, and one `#[cube]`
/// launch generic over the CubeCL runtime for every GPU. Run it with [`launch`].
pub trait CustomKernel {
    /// The op's name in error messages (`brotensor: <NAME>: <reason>`).
    const NAME: &'static str;
    /// How many input tensors [`launch`] must be given.
    const INPUTS: usize;
    /// How many outputs [`launch`] must be given.
    const OUTPUTS: usize;

    /// Computes the outputs on the CPU. `inputs` and `outputs` are in [`launch`]'s order,
    /// `INPUTS` and `OUTPUTS` long, dense, row-major; each output holds exactly the elements
    /// of the dims and dtype its [`Output`] asked for, with undefined contents.
    fn cpu(&self, inputs: &[HostIn<'_>], outputs: &mut [HostOut<'_>]) -> Result<()>;

    /// Queues the kernel on a GPU through `launch.client()`. The operands are in [`launch`]'s
    /// order, `INPUTS` and `OUTPUTS` long, dense, row-major, on the client's device; each
    /// buffer holds at least `numel()` elements of its `dtype()`, which the runtime supports.
    fn gpu<R: Runtime>(&self, launch: &GpuLaunch<'_, R>) -> Result<()>;
}

/// An input of [`launch`]: a committed tensor and the dtype the kernel expects it to have.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    name: &'static str,
    tensor: &'a Tensor,
    dtype: Dtype,
}

impl<'a> Input<'a> {
    /// `tensor` under `name` (used in error messages), which must be committed and of
    /// `dtype` (pass `other.dtype()` to ask for the dtype of another operand).
    pub fn new(name: &'static str, tensor: &'a Tensor, dtype: Dtype) -> Self {
        Input {
            name,
            tensor,
            dtype,
        }
    }
}

/// An output of [`launch`]: a tensor to (re)size to `dims` of `dtype` and write.
#[derive(Debug)]
pub struct Output<'a> {
    name: &'static str,
    tensor: &'a mut Tensor,
    dims: &'a [usize],
    dtype: Dtype,
}

impl<'a> Output<'a> {
    /// `tensor` under `name` (used in error messages), sized by [`launch`] to `dims` of
    /// `dtype` on the op's device. An uncommitted tensor is allocated there; a committed one
    /// must be a dense tensor that owns its storage alone, and keeps its allocation when the
    /// new size fits (see [`Tensor::resize_nd`]).
    pub fn new(
        name: &'static str,
        tensor: &'a mut Tensor,
        dims: &'a [usize],
        dtype: Dtype,
    ) -> Self {
        Output {
            name,
            tensor,
            dims,
            dtype,
        }
    }
}

/// An input as the CPU function sees it: its dense row-major bytes.
#[derive(Clone, Copy, Debug)]
pub struct HostIn<'a> {
    op: &'static str,
    name: &'static str,
    dims: &'a [usize],
    dtype: Dtype,
    bytes: &'a [u8],
}

impl<'a> HostIn<'a> {
    /// The operand's name.
    pub fn name(&self) -> &'static str {
        self.name
    }
    /// The dims.
    pub fn dims(&self) -> &'a [usize] {
        self.dims
    }
    /// The dtype.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    /// The number of elements (the product of the dims).
    pub fn numel(&self) -> usize {
        crate::layout::dims_product(self.dims)
    }
    /// The raw bytes (`dtype().storage_bytes(numel())` of them).
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// The elements as `&[T]` (`numel()` of them). Errors unless `T` is the dtype's type.
    pub fn slice<T: Element>(&self) -> Result<&'a [T]> {
        typed(self.op, self.name, self.dtype, self.bytes)
    }
}

/// An output as the CPU function sees it: its dense row-major bytes, to write.
#[derive(Debug)]
pub struct HostOut<'a> {
    op: &'static str,
    name: &'static str,
    dims: &'a [usize],
    dtype: Dtype,
    bytes: &'a mut [u8],
}

impl HostOut<'_> {
    /// The operand's name.
    pub fn name(&self) -> &'static str {
        self.name
    }
    /// The dims.
    pub fn dims(&self) -> &[usize] {
        self.dims
    }
    /// The dtype.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    /// The number of elements (the product of the dims).
    pub fn numel(&self) -> usize {
        crate::layout::dims_product(self.dims)
    }
    /// The raw bytes (`dtype().storage_bytes(numel())` of them), contents undefined until
    /// written.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.bytes
    }
    /// The elements as `&mut [T]` (`numel()` of them). Errors unless `T` is the dtype's type.
    pub fn slice_mut<T: Element>(&mut self) -> Result<&mut [T]> {
        check_type::<T>(self.op, self.name, self.dtype, "the CPU function")?;
        bytemuck::try_cast_slice_mut(self.bytes)
            .map_err(|e| Error::invalid(self.op, format!("`{}`: {e}", self.name)))
    }
}

/// Errors unless `T` is `dtype`'s element type, for operand `name` read as `T` in `place`.
fn check_type<T: Element>(
    op: &'static str,
    name: &'static str,
    dtype: Dtype,
    place: &str,
) -> Result<()> {
    if T::DTYPE == dtype {
        return Ok(());
    }
    Err(Error::Dtype {
        op,
        operand: name,
        expected: format!(
            "read as {} ({}) in {place}",
            std::any::type_name::<T>(),
            T::DTYPE
        ),
        found: dtype,
    })
}

fn typed<'a, T: Element>(
    op: &'static str,
    name: &'static str,
    dtype: Dtype,
    bytes: &'a [u8],
) -> Result<&'a [T]> {
    check_type::<T>(op, name, dtype, "the CPU function")?;
    bytemuck::try_cast_slice(bytes).map_err(|e| Error::invalid(op, format!("`{name}`: {e}")))
}

/// An operand as the GPU launch sees it: a device buffer and what it holds.
#[derive(Clone, Copy, Debug)]
pub struct GpuOperand<'a> {
    op: &'static str,
    name: &'static str,
    dims: &'a [usize],
    dtype: Dtype,
    numel: usize,
    handle: &'a Handle,
}

impl<'a> GpuOperand<'a> {
    /// The operand's name.
    pub fn name(&self) -> &'static str {
        self.name
    }
    /// The dims.
    pub fn dims(&self) -> &'a [usize] {
        self.dims
    }
    /// The dtype.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    /// The number of elements (the product of the dims), at most
    /// [`GPU_MAX_ELEMENTS`].
    pub fn numel(&self) -> usize {
        self.numel
    }
    /// The bytes the elements occupy (`dtype().storage_bytes(numel())`); the buffer holds at
    /// least this many.
    pub fn bytes(&self) -> usize {
        self.dtype
            .storage_bytes(self.numel)
            .expect("sizes were checked at launch")
    }
    /// The device buffer, for launches queued inside [`CustomKernel::gpu`]: after it
    /// returns, the tensor owns the buffer again (a kept clone does not stop a later op from
    /// writing or reusing it). [`arg`](Self::arg) binds it as its elements; a kernel that
    /// reads it otherwise (packed words, another element type) clones it into
    /// `ArrayArg::from_raw_parts` with a length in its own element type that the buffer
    /// holds.
    pub fn handle(&self) -> &'a Handle {
        self.handle
    }
    /// The buffer as the argument of a kernel parameter `&Array<T>` (or `&mut Array<T>`):
    /// [`numel`](Self::numel) elements of `T`, which the buffer holds. For launches queued
    /// inside [`CustomKernel::gpu`], like [`handle`](Self::handle). Errors unless `T` is the
    /// dtype's type.
    pub fn arg<T: Element, R: Runtime>(&self) -> Result<ArrayArg<R>> {
        check_type::<T>(self.op, self.name, self.dtype, "the GPU launch")?;
        // SAFETY: `launch` gives every operand a buffer holding at least `numel` elements of
        // its dtype, whose type `T` is (checked above): the length stays inside the buffer.
        // Building the argument touches no memory; the launch binding it is itself `unsafe`.
        Ok(unsafe { ArrayArg::from_raw_parts(self.handle.clone(), self.numel) })
    }
}

/// What a GPU launch gets: the runtime's client and the operands' buffers.
pub struct GpuLaunch<'a, R: Runtime> {
    op: &'static str,
    device: Device,
    client: &'a ComputeClient<R>,
    inputs: Vec<GpuOperand<'a>>,
    outputs: Vec<GpuOperand<'a>>,
}

impl<'a, R: Runtime> GpuLaunch<'a, R> {
    /// The CubeCL client of the operands' device (launch on it, and on no other).
    pub fn client(&self) -> &'a ComputeClient<R> {
        self.client
    }
    /// The device the operands live on.
    pub fn device(&self) -> Device {
        self.device
    }
    /// The inputs, in [`launch`]'s order (`CustomKernel::INPUTS` of them).
    pub fn inputs(&self) -> &[GpuOperand<'a>] {
        &self.inputs
    }
    /// The outputs, in [`launch`]'s order (`CustomKernel::OUTPUTS` of them), sized as asked.
    pub fn outputs(&self) -> &[GpuOperand<'a>] {
        &self.outputs
    }
    /// A 1-D launch grid covering `units` units (at least one cube of 256 units), folded
    /// into two dimensions to stay under the per-dimension cube-count limit; a kernel indexes
    /// it with `ABSOLUTE_POS` and guards `ABSOLUTE_POS < len`. Errors when the device cannot
    /// launch that many.
    pub fn grid_1d(&self, units: usize) -> Result<(CubeCount, CubeDim)> {
        const UNITS: u32 = 256;
        let cubes = units.div_ceil(UNITS as usize).max(1);
        let (max_x, max_y, _) = self.client.properties().hardware.max_cube_count;
        let x = cubes.min((max_x as usize).clamp(1, 65_535));
        let y = cubes.div_ceil(x);
        if y > max_y as usize {
            return Err(Error::invalid(
                self.op,
                format!(
                    "{units} units need more cubes than {} launches",
                    self.device
                ),
            ));
        }
        Ok((
            CubeCount::Static(x as u32, y as u32, 1),
            CubeDim::new_1d(UNITS),
        ))
    }
    /// An [`Error::Gpu`] naming the op and the device, for failures in the launch code.
    pub fn error(&self, reason: impl Display) -> Error {
        Error::Gpu {
            op: self.op,
            device: self.device,
            reason: reason.to_string(),
        }
    }
}

/// Runs `kernel` on `inputs`, writing `outputs`, on the device of the first committed operand
/// (inputs first, then outputs; see [`crate::ops`] for the dispatch rules): `K::cpu` on
/// [`Device::Cpu`], `K::gpu` with the device's runtime on a CUDA or wgpu device. With no
/// committed operand it runs on the first operand's device tag (a [`Tensor::default`] is
/// tagged CPU; `Tensor::default().to(device)` is an uncommitted tensor tagged `device`).
///
/// Shape contract: `inputs.len() == K::INPUTS`, `outputs.len() == K::OUTPUTS`; each output is
/// resized to its dims and dtype before the kernel runs. Errors (`brotensor: <K::NAME>:
/// ...`), before any output is touched: a count mismatch, an uncommitted input, an input of
/// another dtype than its [`Input`] names, operands on different devices, a dtype the device
/// does not compute in, output dims whose product or byte size overflows, more than
/// [`GPU_MAX_ELEMENTS`] elements in an output on a GPU, an output
/// that is a view or shares its storage with a live view. Errors from the kernel's own code
/// are returned as they are.
pub fn launch<K: CustomKernel>(
    kernel: &K,
    inputs: &[Input<'_>],
    outputs: &mut [Output<'_>],
) -> Result<()> {
    let op = K::NAME;
    if inputs.len() != K::INPUTS || outputs.len() != K::OUTPUTS {
        return Err(Error::invalid(
            op,
            format!(
                "the kernel takes {} inputs and {} outputs but was given {} and {}",
                K::INPUTS,
                K::OUTPUTS,
                inputs.len(),
                outputs.len()
            ),
        ));
    }
    for i in inputs {
        if !i.tensor.is_committed() {
            return Err(Error::invalid(
                op,
                format!("input `{}` has no storage", i.name),
            ));
        }
        if i.tensor.dtype() != i.dtype {
            return Err(Error::Dtype {
                op,
                operand: i.name,
                expected: format!("the kernel takes {}", i.dtype),
                found: i.tensor.dtype(),
            });
        }
    }
    let mut out_numel = Vec::with_capacity(outputs.len());
    for o in outputs.iter() {
        o.tensor.check_writable(op, o.name)?;
        let numel = checked_dims(op, o.dims)?;
        o.dtype.storage_bytes(numel).map_err(|e| match e {
            Error::InvalidArgument { reason, .. } => {
                Error::shape(op, format!("output `{}`: {reason}", o.name))
            }
            other => other,
        })?;
        out_numel.push(numel);
    }
    let operands: Vec<crate::ops::Operand<'_>> = inputs
        .iter()
        .map(|i| crate::ops::input(i.name, i.tensor))
        .chain(
            outputs
                .iter()
                .map(|o| crate::ops::written(o.name, o.tensor)),
        )
        .collect();
    // Resolves the device, checks every operand against it and makes views dense.
    let be = crate::ops::dispatch(op, &operands)?;
    drop(operands);
    let device = be.device();
    if device.is_gpu() {
        let sizes = inputs
            .iter()
            .map(|i| (i.name, i.tensor.numel()))
            .chain(outputs.iter().zip(&out_numel).map(|(o, &n)| (o.name, n)));
        for (name, numel) in sizes {
            if numel > GPU_MAX_ELEMENTS {
                return Err(Error::shape(
                    op,
                    format!(
                        "`{name}` holds {numel} elements on {device}: GPU kernels index with \
                         32 bits, so at most {GPU_MAX_ELEMENTS}"
                    ),
                ));
            }
        }
        return launch_gpu(kernel, be.backend(), inputs, outputs);
    }
    commit_outputs(op, device, outputs)?;
    let host_in = inputs
        .iter()
        .map(|i| {
            Ok(HostIn {
                op,
                name: i.name,
                dims: i.tensor.dims(),
                dtype: i.tensor.dtype(),
                bytes: host_bytes(op, i.tensor)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut host_out = outputs
        .iter_mut()
        .map(|o| {
            let bytes = o.tensor.storage_bytes();
            let buffer = match o.tensor.storage_mut() {
                Some(Storage::Host(h)) => &mut h.bytes_mut()[..bytes],
                _ => return Err(not_here(op, o.name, device)),
            };
            Ok(HostOut {
                op,
                name: o.name,
                dims: o.dims,
                dtype: o.dtype,
                bytes: buffer,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    kernel.cpu(&host_in, &mut host_out)
}

/// Sizes every output on `device` (all checks passed before).
fn commit_outputs(op: &'static str, device: Device, outputs: &mut [Output<'_>]) -> Result<()> {
    for o in outputs.iter_mut() {
        o.tensor.adopt(device);
        o.tensor.resize_for(op, o.dims, o.dtype)?;
    }
    Ok(())
}

fn not_here(op: &'static str, name: &'static str, device: Device) -> Error {
    Error::invalid(
        op,
        format!("`{name}` has no dense storage on {device} (an internal error)"),
    )
}

fn host_bytes<'t>(op: &'static str, t: &'t Tensor) -> Result<&'t [u8]> {
    match t.storage() {
        Some(Storage::Host(h)) => Ok(&h.bytes()[..t.storage_bytes()]),
        _ => Err(Error::invalid(
            op,
            "an input has no dense host storage (an internal error)",
        )),
    }
}

/// Finds the runtime behind `be` and runs the kernel's GPU launch on it.
fn launch_gpu<K: CustomKernel>(
    kernel: &K,
    be: &dyn Backend,
    inputs: &[Input<'_>],
    outputs: &mut [Output<'_>],
) -> Result<()> {
    let any = be.as_any();
    #[cfg(feature = "wgpu")]
    if let Some(cube) = any.and_then(|a| a.downcast_ref::<CubeOf<cubecl::wgpu::WgpuRuntime>>()) {
        return launch_on(kernel, cube, inputs, outputs);
    }
    #[cfg(feature = "cuda")]
    if let Some(cube) = any.and_then(|a| a.downcast_ref::<CubeOf<cubecl::cuda::CudaRuntime>>()) {
        return launch_on(kernel, cube, inputs, outputs);
    }
    let _ = (kernel, any, inputs, outputs);
    Err(Error::NotImplemented {
        op: K::NAME,
        device: be.device(),
    })
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
type CubeOf<R> = crate::backend::cube::CubeBackend<R>;

/// Whether the runtime has `dtype`'s element type natively (block carriers are raw bytes,
/// read as words, and always allowed).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn native<R: Runtime>(client: &ComputeClient<R>, dtype: Dtype) -> bool {
    let props = client.properties();
    match dtype {
        Dtype::F32 => props.supports_type(f32::as_type_native_unchecked()),
        Dtype::F16 => props.supports_type(half::f16::as_type_native_unchecked()),
        Dtype::BF16 => props.supports_type(half::bf16::as_type_native_unchecked()),
        Dtype::I8 => props.supports_type(i8::as_type_native_unchecked()),
        Dtype::I32 => props.supports_type(i32::as_type_native_unchecked()),
        Dtype::F64 => props.supports_type(f64::as_type_native_unchecked()),
        _ => true,
    }
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn launch_on<K: CustomKernel, R: Runtime>(
    kernel: &K,
    cube: &CubeOf<R>,
    inputs: &[Input<'_>],
    outputs: &mut [Output<'_>],
) -> Result<()> {
    let op = K::NAME;
    let device = crate::backend::OnDevice::device(cube);
    let client = cube.client();
    let dtypes = inputs.iter().map(|i| i.dtype);
    if let Some(dtype) = dtypes
        .chain(outputs.iter().map(|o| o.dtype))
        .find(|&d| !native(client, d))
    {
        return Err(Error::UnsupportedDtype { op, dtype, device });
    }
    commit_outputs(op, device, outputs)?;
    let launch = GpuLaunch {
        op,
        device,
        client,
        inputs: inputs
            .iter()
            .map(|i| gpu_operand(op, i.name, i.tensor))
            .collect::<Result<_>>()?,
        outputs: outputs
            .iter()
            .map(|o| gpu_operand(op, o.name, o.tensor))
            .collect::<Result<_>>()?,
    };
    kernel.gpu(&launch)
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn gpu_operand<'t>(op: &'static str, name: &'static str, t: &'t Tensor) -> Result<GpuOperand<'t>> {
    match t.storage() {
        Some(Storage::Gpu(g)) => Ok(GpuOperand {
            op,
            name,
            dims: t.dims(),
            dtype: t.dtype(),
            numel: t.numel(),
            handle: &g.handle,
        }),
        _ => Err(not_here(op, name, t.device())),
    }
}
