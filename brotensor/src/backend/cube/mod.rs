//! The GPU backend: one implementation, generic over the CubeCL runtime (CUDA or wgpu). This
//! file holds the backend itself (client, memory, streams, sync) and the helpers every op
//! family shares; each family's glue is in its own file.

mod activation;
mod algebra;
mod attention;
mod codec;
mod concat;
mod conv;
mod delta_rule;
mod diffusion;
mod dtype_policy;
mod elementwise;
mod embedding;
mod flash;
mod flash_grad;
mod image_space;
mod layout;
mod linear;
mod loss;
mod lstm;
mod norm;
mod optim;
mod quant;
mod reduction;
mod rope;
mod sampling;
mod spectral;
mod stylegan;

use brotensor_kernels::elementwise::{self as k, Source};
use brotensor_kernels::matmul as mm;
use brotensor_kernels::LaunchError;
use cubecl::prelude::*;
use cubecl::server::Handle;
use cubecl::stream_id::StreamId;
use half::{bf16, f16};

use self::dtype_policy::{
    float_launch, with_float, DtypePolicy, LaunchFailure, NativeFloat, Stored,
};
use super::storage::GpuBuffer;
use super::{Backend, MemoryInfo, OnDevice, Src, Storage};
use crate::layout::Layout;
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
    /// Native bf16 arithmetic; without it BF16 runs as packed words (`bf16_words`).
    bf16: bool,
    /// 64-bit floats (F64, C128) in kernels.
    f64: bool,
    /// 64-bit integers (I64) in kernels.
    i64: bool,
    /// Atomic add of f32, f64 and i64 in kernels (the scatter-add's fast path).
    atomic_add: [bool; 3],
    /// The largest plane (warp, subgroup) size, when kernels may use plane operations (the
    /// reductions' plane path).
    plane_dim_max: Option<u32>,
    /// The CubeCL streams that threads have queued work on. CubeCL 0.10 gives each OS thread
    /// its own stream (with its own memory pool): syncing, trimming and memory figures visit
    /// every one of them, so they mean the whole device.
    streams: std::sync::Mutex<std::collections::BTreeSet<StreamId>>,
}

impl<R: Runtime> CubeBackend<R> {
    /// Wraps a client. `description` says what is underneath (API, adapter or card name).
    /// `subgroups`: the device was created with subgroup operations enabled (wgpu's
    /// `SUBGROUP` feature) even where CubeCL does not advertise plane operations. CubeCL 0.10
    /// leaves them unadvertised on CPU adapters; lavapipe's subgroups (8 lanes) run the
    /// reductions' plane path correctly, and the tests check it there.
    pub(crate) fn new(
        device: Device,
        client: ComputeClient<R>,
        description: String,
        software: bool,
        subgroups: bool,
    ) -> Self {
        let props = client.properties();
        let f16 = props.supports_type(f16::as_type_native_unchecked());
        let bf16 = props.supports_type(bf16::as_type_native_unchecked());
        let f64 = props.supports_type(f64::as_type_native_unchecked());
        let i64 = props.supports_type(i64::as_type_native_unchecked());
        let atomic_add = [
            algebra::atomic_add::<f32>(props),
            algebra::atomic_add::<f64>(props),
            algebra::atomic_add::<i64>(props),
        ];
        let plane_ops = subgroups
            || props
                .features
                .plane
                .contains(cubecl::ir::features::Plane::Ops);
        let plane_dim_max = Some(props.hardware.plane_size_max)
            .filter(|p| plane_ops && p.is_power_of_two() && *p <= 256);
        CubeBackend {
            device,
            client,
            description,
            software,
            f16,
            bf16,
            f64,
            i64,
            atomic_add,
            plane_dim_max,
            streams: Default::default(),
        }
    }

    /// Runs `f` on every stream a thread has used on this device (the caller's own
    /// included), in stream order, stopping at the first error.
    fn on_every_stream<T>(&self, f: impl Fn() -> Result<T>) -> Result<Vec<T>> {
        self.note_thread();
        let ids: Vec<StreamId> = self
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        ids.into_iter().map(|id| id.executes(&f)).collect()
    }

    fn gpu_error(&self, op: &'static str, reason: impl std::fmt::Display) -> Error {
        Error::Gpu {
            op,
            device: self.device,
            reason: reason.to_string(),
        }
    }

    /// The padded size of a buffer for `bytes` bytes, refused before it reaches the runtime
    /// when the device cannot bind a buffer that large (the runtime would fail on its own
    /// thread and leave the device unusable).
    fn capacity_for(&self, bytes: usize) -> Result<usize> {
        let max = self.max_buffer_bytes();
        let capacity = bytes.div_ceil(GPU_ALIGN).max(1).saturating_mul(GPU_ALIGN);
        if capacity as u64 > max {
            return Err(Error::invalid(
                "alloc",
                format!(
                    "{bytes} bytes exceed the largest buffer {} can bind ({max} bytes)",
                    self.device
                ),
            ));
        }
        Ok(capacity)
    }

    fn launch_error(&self, op: &'static str, e: LaunchError) -> Error {
        self.gpu_error(op, e)
    }

    /// The CubeCL client of this device (user kernels launch on it).
    pub(crate) fn client(&self) -> &ComputeClient<R> {
        &self.client
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

    fn matmul_on_matrix_units(&self, dtype: Dtype) -> bool {
        // BF16 stored as packed words multiplies through FP32 copies, never on matrix units.
        self.policy(dtype) == DtypePolicy::Native
            && match dtype {
                Dtype::F16 => mm::matrix_unit_shape::<R, f16>(&self.client).is_some(),
                Dtype::BF16 => mm::matrix_unit_shape::<R, bf16>(&self.client).is_some(),
                _ => false,
            }
    }

    fn supports(&self, dtype: Dtype) -> bool {
        match dtype {
            // The tensor-algebra dtypes, where the shader language has their parts' types.
            Dtype::F64 | Dtype::C128 => self.f64,
            Dtype::I64 => self.i64,
            Dtype::C64 => true,
            // Natively, or (BF16) as packed 16-bit words.
            _ => self.policy(dtype) != DtypePolicy::Unsupported,
        }
    }

    fn max_buffer_bytes(&self) -> u64 {
        self.client.properties().memory.max_page_size
    }

    fn alloc(&self, bytes: usize) -> Result<Storage> {
        let capacity = self.capacity_for(bytes)?;
        Ok(Storage::Gpu(GpuBuffer {
            handle: self.client.empty(capacity),
            capacity,
        }))
    }

    fn upload(&self, bytes: &[u8]) -> Result<Storage> {
        let capacity = self.capacity_for(bytes.len())?;
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

    fn strided_copy(
        &self,
        op: &'static str,
        src: &Storage,
        layout: &Layout,
        dtype: Dtype,
        dst: &mut Storage,
    ) -> Result<()> {
        layout::strided_copy(self, op, src, layout, dtype, dst)
    }

    fn zero(&self, dst: &mut Storage, bytes: usize) -> Result<()> {
        let words = bytes.div_ceil(4);
        k::launch_fill_words(&self.client, gpu(dst), words, 0)
            .map_err(|e| self.launch_error("zero", e))
    }

    fn note_thread(&self) {
        // Every op looks its backend up: take the lock only on a thread's first use of this
        // device, not on every op.
        thread_local! {
            static NOTED: std::cell::RefCell<Vec<Device>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let first = NOTED.with(|noted| {
            let mut noted = noted.borrow_mut();
            let first = !noted.contains(&self.device);
            if first {
                noted.push(self.device);
            }
            first
        });
        if first {
            let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
            streams.insert(StreamId::current());
        }
    }

    #[cfg(feature = "cuda")]
    fn cuda_address(&self, op: &'static str, src: &Storage) -> Result<super::CudaAddress> {
        use cubecl::cuda::CudaRuntime;
        let client = (&self.client as &dyn std::any::Any)
            .downcast_ref::<ComputeClient<CudaRuntime>>()
            .ok_or(Error::NotImplemented {
                op,
                device: self.device,
            })?;
        let resource = client
            .get_resource(gpu(src).clone())
            .map_err(|e| self.gpu_error(op, format!("{e:?}")))?;
        Ok(super::CudaAddress {
            ptr: resource.resource().ptr,
            _hold: Box::new(resource),
        })
    }

    fn sync(&self) -> Result<()> {
        self.on_every_stream(|| {
            cubecl::future::block_on(self.client.sync())
                .map_err(|e| self.gpu_error("sync", format!("{e:?}")))
        })?;
        Ok(())
    }

    fn memory_info(&self) -> Result<Option<MemoryInfo>> {
        let usages = self.on_every_stream(|| {
            self.client
                .memory_usage()
                .map_err(|e| self.gpu_error("memory_info", format!("{e:?}")))
        })?;
        Ok(Some(usages.iter().fold(
            MemoryInfo {
                in_use: 0,
                reserved: 0,
            },
            |sum, u| MemoryInfo {
                in_use: sum.in_use + u.bytes_in_use,
                reserved: sum.reserved + u.bytes_reserved,
            },
        )))
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn trim(&self) -> Result<()> {
        self.sync()?;
        self.on_every_stream(|| {
            self.client.memory_cleanup();
            Ok(())
        })?;
        Ok(())
    }
}
