//! The CPU backend: host buffers and the rayon FP32 reference ops of `brotensor-cpu`.

use brotensor_cpu::{cast as cpu_cast, elementwise as ew};
use half::{bf16, f16};
use rayon::prelude::*;

use super::storage::HostBuffer;
use super::{Backend, Binary, ElementwiseOps, MemoryInfo, OnDevice, Src, Storage, Unary};
use crate::{Device, Dtype, Error, Result, Tensor};

/// The host backend. It needs no initialization and is always available.
pub(crate) struct CpuBackend;

/// The one CPU backend.
pub(crate) static CPU: CpuBackend = CpuBackend;

fn host(storage: &Storage) -> &HostBuffer {
    match storage {
        Storage::Host(h) => h,
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        Storage::Gpu(_) => unreachable!("a GPU buffer reached the CPU backend"),
    }
}

fn host_mut(storage: &mut Storage) -> &mut HostBuffer {
    match storage {
        Storage::Host(h) => h,
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        Storage::Gpu(_) => unreachable!("a GPU buffer reached the CPU backend"),
    }
}

impl OnDevice for CpuBackend {
    fn device(&self) -> Device {
        Device::Cpu
    }
}

impl Backend for CpuBackend {
    fn describe(&self) -> String {
        format!("cpu (rayon, {} threads)", rayon::current_num_threads())
    }

    fn supports(&self, dtype: Dtype) -> bool {
        dtype == Dtype::F32
    }

    fn converts(&self, dtype: Dtype) -> bool {
        dtype.is_float()
    }

    fn alloc(&self, bytes: usize) -> Result<Storage> {
        Ok(Storage::Host(HostBuffer::new(bytes)))
    }

    fn upload(&self, bytes: &[u8]) -> Result<Storage> {
        let mut buf = HostBuffer::new(bytes.len());
        copy_bytes(&mut buf.bytes_mut()[..bytes.len()], bytes);
        Ok(Storage::Host(buf))
    }

    fn download(&self, src: &Storage, bytes: usize) -> Result<Vec<u8>> {
        Ok(host(src).bytes()[..bytes].to_vec())
    }

    fn copy(&self, src: &Storage, dst: &mut Storage, bytes: usize) -> Result<()> {
        copy_bytes(
            &mut host_mut(dst).bytes_mut()[..bytes],
            &host(src).bytes()[..bytes],
        );
        Ok(())
    }

    fn zero(&self, dst: &mut Storage, bytes: usize) -> Result<()> {
        host_mut(dst).bytes_mut()[..bytes]
            .par_chunks_mut(COPY_CHUNK)
            .for_each(|c| c.fill(0));
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn memory_info(&self) -> Result<Option<MemoryInfo>> {
        Ok(None)
    }

    fn trim(&self) -> Result<()> {
        super::host_pool::clear();
        Ok(())
    }
}

/// Bytes per parallel task of host copies and fills.
const COPY_CHUNK: usize = 1 << 18;

/// `dst.copy_from_slice(src)` on all cores.
fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    dst.par_chunks_mut(COPY_CHUNK)
        .zip(src.par_chunks(COPY_CHUNK))
        .for_each(|(d, s)| d.copy_from_slice(s));
}

/// The scalar math of a unary instruction with its parameters bound.
fn unary_fn(op: Unary, a: f32, b: f32) -> impl Fn(f32) -> f32 + Sync {
    move |x| match op {
        Unary::Identity => x,
        Unary::AddScalar => x + a,
        Unary::SubScalar => x - a,
        Unary::MulScalar => x * a,
        Unary::DivScalar => x / a,
        Unary::Clamp => ew::clamp(x, a, b),
        Unary::Exp => ew::exp(x),
        Unary::Log => ew::log(x),
        Unary::Sin => ew::sin(x),
        Unary::Cos => ew::cos(x),
        Unary::Rsqrt => ew::rsqrt(x),
        Unary::Round => ew::round(x),
    }
}

/// The scalar math of a binary instruction with its parameters bound.
fn binary_fn(op: Binary, a: f32, b: f32) -> impl Fn(f32, f32) -> f32 + Sync + Copy {
    move |x, y| match op {
        Binary::Add => x + y,
        Binary::Sub => x - y,
        Binary::Mul => x * y,
        Binary::Div => x / y,
        Binary::Axpby => ew::axpby(x, y, a, b),
        Binary::ExpBackward => ew::exp_backward(x, y),
        Binary::LogBackward => ew::log_backward(x, y),
        Binary::SinBackward => ew::sin_backward(x, y),
        Binary::CosBackward => ew::cos_backward(x, y),
        Binary::RsqrtBackward => ew::rsqrt_backward(x, y),
    }
}

impl ElementwiseOps for CpuBackend {
    fn unary(
        &self,
        _name: &'static str,
        op: Unary,
        x: Src<'_>,
        out: &mut Tensor,
        a: f32,
        b: f32,
    ) -> Result<()> {
        let f = unary_fn(op, a, b);
        match x {
            Src::Out => ew::map_unary_inplace(out.host_mut::<f32>(), f),
            Src::Tensor(x) => ew::map_unary(x.host::<f32>(), out.host_mut::<f32>(), f),
        }
        Ok(())
    }

    fn binary(
        &self,
        _name: &'static str,
        op: Binary,
        x: Src<'_>,
        y: Src<'_>,
        out: &mut Tensor,
        a: f32,
        b: f32,
    ) -> Result<()> {
        let f = binary_fn(op, a, b);
        match (x, y) {
            (Src::Tensor(x), Src::Tensor(y)) => {
                ew::map_binary(x.host::<f32>(), y.host::<f32>(), out.host_mut::<f32>(), f)
            }
            (Src::Out, Src::Tensor(y)) => {
                ew::map_binary_inplace(out.host_mut::<f32>(), y.host(), f)
            }
            (Src::Tensor(x), Src::Out) => {
                ew::map_binary_inplace(out.host_mut::<f32>(), x.host(), move |o, x| f(x, o))
            }
            (Src::Out, Src::Out) => ew::map_unary_inplace(out.host_mut::<f32>(), move |o| f(o, o)),
        }
        Ok(())
    }

    fn cast(&self, x: &Tensor, out: &mut Tensor) -> Result<()> {
        macro_rules! convert {
            ($i:ty) => {
                match out.dtype() {
                    Dtype::F32 => cpu_cast::convert(x.host::<$i>(), out.host_mut::<f32>()),
                    Dtype::F16 => cpu_cast::convert(x.host::<$i>(), out.host_mut::<f16>()),
                    Dtype::BF16 => cpu_cast::convert(x.host::<$i>(), out.host_mut::<bf16>()),
                    other => return Err(cast_error(other)),
                }
            };
        }
        match x.dtype() {
            Dtype::F32 => convert!(f32),
            Dtype::F16 => convert!(f16),
            Dtype::BF16 => convert!(bf16),
            other => return Err(cast_error(other)),
        }
        Ok(())
    }

    fn fill(&self, out: &mut Tensor, value: f32) -> Result<()> {
        ew::fill(out.host_mut::<f32>(), value);
        Ok(())
    }
}

fn cast_error(dtype: Dtype) -> Error {
    Error::UnsupportedDtype {
        op: "cast",
        dtype,
        device: Device::Cpu,
    }
}
