//! The GPU backend: one implementation, generic over the CubeCL runtime (CUDA or wgpu).

use brotensor_kernels::elementwise::{self as k, Source};
use brotensor_kernels::LaunchError;
use cubecl::prelude::*;
use cubecl::server::Handle;
use half::{bf16, f16};

use super::storage::GpuBuffer;
use super::{Backend, Binary, ElementwiseOps, MemoryInfo, OnDevice, Src, Storage, Unary};
use crate::{Device, Dtype, Error, Result, Tensor};

/// GPU buffers are sized in multiples of this many bytes (at least one), so that word-wise
/// copies and zero fills may touch the padded tail.
const GPU_ALIGN: usize = 16;

/// A CubeCL client for one device, plus what was learned about it at start-up.
pub(crate) struct CubeBackend<R: Runtime> {
    device: Device,
    client: ComputeClient<R>,
    description: String,
    software: bool,
    f16: bool,
    bf16: bool,
}

impl<R: Runtime> CubeBackend<R> {
    /// Wraps a client. `description` says what is underneath (API, adapter or card name).
    pub(crate) fn new(
        device: Device,
        client: ComputeClient<R>,
        description: String,
        software: bool,
    ) -> Self {
        let props = client.properties();
        let f16 = props.supports_type(f16::as_type_native_unchecked());
        let bf16 = props.supports_type(bf16::as_type_native_unchecked());
        CubeBackend {
            device,
            client,
            description,
            software,
            f16,
            bf16,
        }
    }

    fn gpu_error(&self, op: &'static str, reason: impl std::fmt::Display) -> Error {
        Error::Gpu {
            op,
            device: self.device,
            reason: reason.to_string(),
        }
    }

    fn launch_error(&self, op: &'static str, e: LaunchError) -> Error {
        self.gpu_error(op, e)
    }
}

fn gpu(storage: &Storage) -> &Handle {
    match storage {
        Storage::Gpu(g) => &g.handle,
        Storage::Host(_) => unreachable!("a host buffer reached a GPU backend"),
    }
}

fn out_handle(t: &Tensor) -> Handle {
    gpu(t
        .storage()
        .expect("ops commit their output before the backend runs"))
    .clone()
}

fn src_handle(src: Src<'_>) -> Option<Handle> {
    match src {
        Src::Tensor(t) => Some(out_handle(t)),
        Src::Out => None,
    }
}

fn source(h: &Option<Handle>) -> Source<'_> {
    match h {
        Some(h) => Source::Buffer(h),
        None => Source::Output,
    }
}

impl<R: Runtime> OnDevice for CubeBackend<R> {
    fn device(&self) -> Device {
        self.device
    }
}

impl<R: Runtime> Backend for CubeBackend<R> {
    fn describe(&self) -> String {
        format!("{} ({})", self.device, self.description)
    }

    fn is_software(&self) -> bool {
        self.software
    }

    fn supports(&self, dtype: Dtype) -> bool {
        match dtype {
            Dtype::F32 => true,
            Dtype::F16 => self.f16,
            Dtype::BF16 => self.bf16,
            _ => false,
        }
    }

    fn alloc(&self, bytes: usize) -> Result<Storage> {
        let capacity = bytes.div_ceil(GPU_ALIGN).max(1) * GPU_ALIGN;
        Ok(Storage::Gpu(GpuBuffer {
            handle: self.client.empty(capacity),
            capacity,
        }))
    }

    fn upload(&self, bytes: &[u8]) -> Result<Storage> {
        let capacity = bytes.len().div_ceil(GPU_ALIGN).max(1) * GPU_ALIGN;
        let handle = if capacity == bytes.len() {
            self.client.create_from_slice(bytes)
        } else {
            let mut padded = vec![0u8; capacity];
            padded[..bytes.len()].copy_from_slice(bytes);
            self.client.create_from_slice(&padded)
        };
        Ok(Storage::Gpu(GpuBuffer { handle, capacity }))
    }

    fn download(&self, src: &Storage, bytes: usize) -> Result<Vec<u8>> {
        let data = self
            .client
            .read_one(gpu(src).clone())
            .map_err(|e| self.gpu_error("download", format!("{e:?}")))?;
        Ok(data[..bytes].to_vec())
    }

    fn copy(&self, src: &Storage, dst: &mut Storage, bytes: usize) -> Result<()> {
        let words = bytes.div_ceil(4);
        k::launch_copy_words(&self.client, gpu(src), gpu(dst), words)
            .map_err(|e| self.launch_error("copy", e))
    }

    fn zero(&self, dst: &mut Storage, bytes: usize) -> Result<()> {
        let words = bytes.div_ceil(4);
        k::launch_fill::<R, u32>(&self.client, gpu(dst), words, 0.0)
            .map_err(|e| self.launch_error("zero", e))
    }

    fn sync(&self) -> Result<()> {
        cubecl::future::block_on(self.client.sync())
            .map_err(|e| self.gpu_error("sync", format!("{e:?}")))
    }

    fn memory_info(&self) -> Result<Option<MemoryInfo>> {
        let usage = self
            .client
            .memory_usage()
            .map_err(|e| self.gpu_error("memory_info", format!("{e:?}")))?;
        Ok(Some(MemoryInfo {
            in_use: usage.bytes_in_use,
            reserved: usage.bytes_reserved,
        }))
    }

    fn trim(&self) -> Result<()> {
        self.sync()?;
        self.client.memory_cleanup();
        Ok(())
    }
}

/// Calls `$body` with `$F` bound to the storage type of a float dtype.
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

fn launch_unary_op<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    op: Unary,
    x: Source<'_>,
    out: &Handle,
    len: usize,
    a: f32,
    b: f32,
) -> Result<(), LaunchError> {
    use k::launch_unary as l;
    match op {
        Unary::Identity => l::<R, F, k::Identity>(client, x, out, len, a, b),
        Unary::AddScalar => l::<R, F, k::AddScalar>(client, x, out, len, a, b),
        Unary::SubScalar => l::<R, F, k::SubScalar>(client, x, out, len, a, b),
        Unary::MulScalar => l::<R, F, k::MulScalar>(client, x, out, len, a, b),
        Unary::DivScalar => l::<R, F, k::DivScalar>(client, x, out, len, a, b),
        Unary::Clamp => l::<R, F, k::Clamp>(client, x, out, len, a, b),
        Unary::Exp => l::<R, F, k::Exp>(client, x, out, len, a, b),
        Unary::Log => l::<R, F, k::Log>(client, x, out, len, a, b),
        Unary::Sin => l::<R, F, k::Sin>(client, x, out, len, a, b),
        Unary::Cos => l::<R, F, k::Cos>(client, x, out, len, a, b),
        Unary::Rsqrt => l::<R, F, k::Rsqrt>(client, x, out, len, a, b),
        Unary::Round => l::<R, F, k::Round>(client, x, out, len, a, b),
    }
}

#[allow(clippy::too_many_arguments)]
fn launch_binary_op<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    op: Binary,
    x: Source<'_>,
    y: Source<'_>,
    out: &Handle,
    len: usize,
    a: f32,
    b: f32,
) -> Result<(), LaunchError> {
    use k::launch_binary as l;
    match op {
        Binary::Add => l::<R, F, k::Add>(client, x, y, out, len, a, b),
        Binary::Sub => l::<R, F, k::Sub>(client, x, y, out, len, a, b),
        Binary::Mul => l::<R, F, k::Mul>(client, x, y, out, len, a, b),
        Binary::Div => l::<R, F, k::Div>(client, x, y, out, len, a, b),
        Binary::Axpby => l::<R, F, k::Axpby>(client, x, y, out, len, a, b),
        Binary::ExpBackward => l::<R, F, k::ExpBackward>(client, x, y, out, len, a, b),
        Binary::LogBackward => l::<R, F, k::LogBackward>(client, x, y, out, len, a, b),
        Binary::SinBackward => l::<R, F, k::SinBackward>(client, x, y, out, len, a, b),
        Binary::CosBackward => l::<R, F, k::CosBackward>(client, x, y, out, len, a, b),
        Binary::RsqrtBackward => l::<R, F, k::RsqrtBackward>(client, x, y, out, len, a, b),
    }
}

impl<R: Runtime> ElementwiseOps for CubeBackend<R> {
    fn unary(
        &self,
        name: &'static str,
        op: Unary,
        x: Src<'_>,
        out: &mut Tensor,
        a: f32,
        b: f32,
    ) -> Result<()> {
        let xh = src_handle(x);
        let oh = out_handle(out);
        let len = out.numel();
        with_float!(out.dtype(), |F| launch_unary_op::<R, F>(
            &self.client,
            op,
            source(&xh),
            &oh,
            len,
            a,
            b
        ))
        .map_err(|e| self.launch_error(name, e))
    }

    fn binary(
        &self,
        name: &'static str,
        op: Binary,
        x: Src<'_>,
        y: Src<'_>,
        out: &mut Tensor,
        a: f32,
        b: f32,
    ) -> Result<()> {
        let (xh, yh) = (src_handle(x), src_handle(y));
        let oh = out_handle(out);
        let len = out.numel();
        with_float!(out.dtype(), |F| launch_binary_op::<R, F>(
            &self.client,
            op,
            source(&xh),
            source(&yh),
            &oh,
            len,
            a,
            b
        ))
        .map_err(|e| self.launch_error(name, e))
    }

    fn cast(&self, x: &Tensor, out: &mut Tensor) -> Result<()> {
        let xh = out_handle(x);
        let oh = out_handle(out);
        let len = out.numel();
        with_float!(x.dtype(), |I| with_float!(out.dtype(), |O| {
            k::launch_cast::<R, I, O>(&self.client, &xh, &oh, len)
        }))
        .map_err(|e| self.launch_error("cast", e))
    }

    fn fill(&self, out: &mut Tensor, value: f32) -> Result<()> {
        let oh = out_handle(out);
        let len = out.numel();
        with_float!(out.dtype(), |F| k::launch_fill::<R, F>(
            &self.client,
            &oh,
            len,
            value
        ))
        .map_err(|e| self.launch_error("fill", e))
    }
}
