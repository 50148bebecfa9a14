//! Runtime: device discovery, the default-device policy, scopes, sync and memory queries.

use std::cell::RefCell;
use std::sync::{Mutex, OnceLock};

use crate::backend::cpu::CPU;
use crate::backend::Backend;
pub use crate::backend::MemoryInfo;
use crate::{Device, DeviceKind, Dtype, Error, Result};

/// Environment variable that names the default device: `cpu`, `cuda[:N]` or `wgpu[:N]`.
pub const DEFAULT_DEVICE_ENV: &str = "BROTENSOR_DEFAULT_DEVICE";

/// The GPU backends found by [`init`], in `available_devices` order.
struct Registry {
    gpus: Vec<Box<dyn Backend>>,
    /// What went wrong with `BROTENSOR_DEFAULT_DEVICE`, reported by every `init` call.
    env_error: Option<Error>,
}

static REGISTRY: OnceLock<Registry> = OnceLock::new();
static DEFAULT: Mutex<Option<Device>> = Mutex::new(None);

thread_local! {
    static SCOPES: RefCell<Vec<Device>> = const { RefCell::new(Vec::new()) };
}

/// Discovers the devices (CUDA through the driver, every wgpu adapter including software
/// ones) and fixes the default device. Idempotent: later calls return the first call's
/// outcome. A machine without a GPU driver is not an error; the devices are simply absent.
///
/// Errors if [`DEFAULT_DEVICE_ENV`] is set to something unparseable or to a device that is
/// not available; the default then falls back to the best available device.
pub fn init() -> Result<()> {
    match &registry().env_error {
        Some(e) => Err(e.clone()),
        None => Ok(()),
    }
}

fn registry() -> &'static Registry {
    REGISTRY.get_or_init(|| {
        #[cfg_attr(not(any(feature = "cuda", feature = "wgpu")), allow(unused_mut))]
        let mut gpus: Vec<Box<dyn Backend>> = Vec::new();
        #[cfg(feature = "cuda")]
        gpus.extend(crate::backend::probe::cuda_backends());
        #[cfg(feature = "wgpu")]
        gpus.extend(crate::backend::probe::wgpu_backends());
        let best = gpus
            .iter()
            .find(|b| !b.is_software())
            .map_or(Device::Cpu, |b| b.device());
        let mut env_error = None;
        let mut default = best;
        if let Ok(value) = std::env::var(DEFAULT_DEVICE_ENV) {
            match value.parse::<Device>() {
                Ok(d) if d == Device::Cpu || gpus.iter().any(|b| b.device() == d) => default = d,
                Ok(d) => {
                    env_error = Some(Error::DeviceUnavailable {
                        op: "init",
                        device: d,
                        reason: format!("named by {DEFAULT_DEVICE_ENV}; using {best}"),
                    })
                }
                Err(e) => env_error = Some(e),
            }
        }
        DEFAULT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(default);
        Registry { gpus, env_error }
    })
}

/// The backend of `device`, discovering devices first when it is a GPU.
pub(crate) fn backend(op: &'static str, device: Device) -> Result<&'static dyn Backend> {
    if device == Device::Cpu {
        return Ok(&CPU);
    }
    registry()
        .gpus
        .iter()
        .find(|b| b.device() == device)
        .map(|b| {
            b.note_thread();
            b.as_ref()
        })
        .ok_or(Error::DeviceUnavailable {
            op,
            device,
            reason: String::new(),
        })
}

/// Every usable device: the CPU first, then CUDA ordinals, then wgpu ordinals.
pub fn available_devices() -> Vec<Device> {
    std::iter::once(Device::Cpu)
        .chain(registry().gpus.iter().map(|b| b.device()))
        .collect()
}

/// How many usable devices of `kind` this machine has (1 for the CPU): `cuda:0 ..
/// cuda:{n-1}` or `wgpu:0 .. wgpu:{n-1}`. Discovers the devices first.
pub fn device_count(kind: DeviceKind) -> usize {
    available_devices()
        .into_iter()
        .filter(|d| d.kind() == kind)
        .count()
}

/// Whether `device` is usable.
pub fn is_available(device: Device) -> bool {
    backend("is_available", device).is_ok()
}

/// The device new tensors land on: the innermost [`DeviceScope`] of this thread, else the
/// process default. Before devices are discovered that is the CPU; discovery ([`init`], or
/// the first use of a GPU device, which runs it) picks CUDA, then a hardware wgpu adapter,
/// then the CPU (a software adapter is never the default), unless [`DEFAULT_DEVICE_ENV`]
/// names another or [`set_default_device`] chose one before.
pub fn default_device() -> Device {
    if let Some(d) = SCOPES.with(|s| s.borrow().last().copied()) {
        return d;
    }
    DEFAULT
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .unwrap_or(Device::Cpu)
}

/// Makes `device` the process default. Errors if it is not available.
pub fn set_default_device(device: Device) -> Result<()> {
    backend("set_default_device", device)?;
    *DEFAULT.lock().unwrap_or_else(|p| p.into_inner()) = Some(device);
    Ok(())
}

/// While alive, makes `device` this thread's default device. Scopes nest; dropping one
/// restores the default that was in force when it was created.
#[must_use = "the scope ends when this value is dropped"]
pub struct DeviceScope {
    depth: usize,
    /// Scopes are per thread: keep the guard on the thread that made it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl DeviceScope {
    /// Enters a scope on `device`. Errors if the device is not available.
    pub fn new(device: Device) -> Result<DeviceScope> {
        backend("DeviceScope", device)?;
        let depth = SCOPES.with(|s| {
            let mut s = s.borrow_mut();
            s.push(device);
            s.len() - 1
        });
        Ok(DeviceScope {
            depth,
            _not_send: std::marker::PhantomData,
        })
    }
}

impl Drop for DeviceScope {
    fn drop(&mut self) {
        SCOPES.with(|s| s.borrow_mut().truncate(self.depth));
    }
}

/// The dtype models should compute in on the default device (see [`compute_dtype_on`]).
pub fn compute_dtype() -> Result<Dtype> {
    compute_dtype_on(default_device())
}

/// The dtype models should compute in on `device`: F16 on a GPU whose adapter computes in
/// F16, else F32 (the CPU, and GPUs without 16-bit float arithmetic). Errors when the device
/// is not available.
pub fn compute_dtype_on(device: Device) -> Result<Dtype> {
    let be = backend("compute_dtype", device)?;
    Ok(if device.is_gpu() && be.supports(Dtype::F16) {
        Dtype::F16
    } else {
        Dtype::F32
    })
}

/// Whether ops compute in `dtype` on `device` (the capability query): e.g. F16 is false on
/// adapters without shader-f16. F16 and BF16 are true on the CPU (FP32 math, one rounding
/// on the way out). BF16 is true on every GPU, WGSL devices included, where it runs as
/// packed 16-bit words widened to FP32.
/// For a GGUF block dtype it says whether the quantized ops (`ops::quant_linear`,
/// `ops::dequantize`) take weights of that type on `device`.
pub fn supports_dtype(device: Device, dtype: Dtype) -> Result<bool> {
    let be = backend("supports_dtype", device)?;
    Ok(be.supports(dtype) || (dtype.is_quant() && be.computes_quant(dtype)))
}

/// Environment variable that caps the CPU's vector tier: `scalar`, `avx2`, `avx512` or
/// `neon` (see [`cpu_tier`]).
pub const CPU_TIER_ENV: &str = brotensor_cpu::simd::TIER_ENV;

/// The vector tier the CPU ops run (`"scalar"`, `"avx2"`, `"avx512"` or `"neon"`): the widest
/// this CPU has, capped by [`CPU_TIER_ENV`] so that a narrower tier's kernels can be tested
/// and timed on a wider CPU (a cap wider than the CPU changes nothing). Decided once per
/// process, at the first CPU op.
///
/// Errors if [`CPU_TIER_ENV`] holds a value that is not a tier, or a tier of another
/// architecture; the CPU ops then ignore it and run the widest tier.
pub fn cpu_tier() -> Result<&'static str> {
    brotensor_cpu::simd::tier_cap().map_err(|reason| Error::InvalidArgument {
        op: "cpu_tier",
        reason,
    })?;
    Ok(brotensor_cpu::simd::tier().name())
}

/// A name that says what is underneath, e.g. `wgpu:0 (Vulkan, llvmpipe ...)`.
pub fn device_name(device: Device) -> Result<String> {
    Ok(backend("device_name", device)?.describe())
}

/// Whether matmuls in `dtype` run on matrix units on `device` (CubeCL `cmma`: CUDA tensor
/// cores, or Vulkan cooperative matrices with the `vulkan-spirv` feature); those of at most
/// eight rows take the skinny kernel instead where its grid fits (they are bound by memory). False on the CPU,
/// for F32, where the runtime offers no square 16- or 8-sided fragments from `dtype` to FP32,
/// and when `BROTENSOR_CMMA=0` was set at the first 16-bit matmul.
pub fn matmul_uses_matrix_units(device: Device, dtype: Dtype) -> Result<bool> {
    Ok(backend("matmul_uses_matrix_units", device)?.matmul_on_matrix_units(dtype))
}

/// Whether `device` is a software rasterizer (usable, but never the default).
pub fn is_software(device: Device) -> Result<bool> {
    Ok(backend("is_software", device)?.is_software())
}

/// Waits until every operation queued on `device` has finished, by any thread (GPU runtimes
/// queue work per OS thread; this visits every thread's queue); an asynchronous GPU failure
/// surfaces here as an error.
pub fn sync(device: Device) -> Result<()> {
    backend("sync", device)?.sync()
}

/// [`sync`] on every available device.
pub fn sync_all() -> Result<()> {
    for d in available_devices() {
        sync(d)?;
    }
    Ok(())
}

/// Memory figures of `device`, summed over the memory pools of every thread that has used
/// it; `None` on the CPU.
pub fn memory_info(device: Device) -> Result<Option<MemoryInfo>> {
    backend("memory_info", device)?.memory_info()
}

/// The largest tensor, in bytes, that `device` can hold in one buffer (wgpu adapters bind
/// at most `max_storage_buffer_binding_size`, often 128 MiB to 4 GiB); larger allocations
/// are refused with an error.
pub fn max_buffer_bytes(device: Device) -> Result<u64> {
    Ok(backend("max_buffer_bytes", device)?.max_buffer_bytes())
}

/// Synchronizes `device`, then releases pooled memory no tensor uses, in every thread's pool
/// (on the CPU: the recycled host buffers).
pub fn memory_trim(device: Device) -> Result<()> {
    backend("memory_trim", device)?.trim()
}
