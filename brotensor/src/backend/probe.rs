//! Finding the GPUs: CUDA through the driver library, wgpu through adapter enumeration.
//! Nothing here panics on a machine without a driver; absent runtimes give no devices.

use super::cube::CubeBackend;
use super::Backend;
use crate::Device;

/// Runs `f`, turning a panic inside a runtime's start-up into `None`.
fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> Option<T> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    match out {
        Ok(v) => Some(v),
        Err(_) => {
            eprintln!("brotensor: init: {what} failed to start; leaving it out");
            None
        }
    }
}

/// One backend per CUDA device the driver reports; none without `libcuda` and NVRTC.
#[cfg(feature = "cuda")]
pub(crate) fn cuda_backends() -> Vec<Box<dyn Backend>> {
    use cubecl::cuda::{CudaDevice, CudaRuntime};
    use cubecl::Runtime;
    use cudarc::driver::result as drv;

    // SAFETY: these only try to dlopen the libraries and report whether that worked.
    let present = unsafe {
        cudarc::driver::sys::is_culib_present() && cudarc::nvrtc::sys::is_culib_present()
    };
    if !present || drv::init().is_err() {
        return Vec::new();
    }
    let count = drv::device::get_count().unwrap_or(0).max(0) as usize;
    (0..count)
        .filter_map(|i| {
            let name = drv::device::get(i as i32)
                .and_then(drv::device::get_name)
                .unwrap_or_else(|_| "unknown NVIDIA GPU".to_string());
            let client = guarded(&format!("cuda:{i}"), || {
                CudaRuntime::client(&CudaDevice { index: i })
            })?;
            Some(Box::new(CubeBackend::new(
                Device::Cuda(i),
                client,
                name,
                false,
                false,
            )) as Box<dyn Backend>)
        })
        .collect()
}

/// One backend per wgpu adapter CubeCL can address: hardware adapters first (discrete,
/// integrated, virtual, in enumeration order), then the first software (CPU) adapter.
#[cfg(feature = "wgpu")]
pub(crate) fn wgpu_backends() -> Vec<Box<dyn Backend>> {
    use cubecl::wgpu::{AutoGraphicsApi, GraphicsApi, WgpuDevice, WgpuRuntime};
    use cubecl::Runtime;

    let api = AutoGraphicsApi::backend();
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: api.into(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapters = guarded("wgpu adapter enumeration", || {
        cubecl::future::block_on(instance.enumerate_adapters(api.into()))
    })
    .unwrap_or_default();

    // CubeCL addresses an adapter by its type and its index among adapters of that type.
    let mut per_type = [0usize; 3];
    let mut found: Vec<(u8, WgpuDevice, wgpu::AdapterInfo, wgpu::Features)> = Vec::new();
    let mut have_cpu = false;
    for adapter in adapters {
        let info = adapter.get_info();
        let (rank, device) = match info.device_type {
            wgpu::DeviceType::DiscreteGpu => (0, WgpuDevice::DiscreteGpu(per_type[0])),
            wgpu::DeviceType::IntegratedGpu => (1, WgpuDevice::IntegratedGpu(per_type[1])),
            wgpu::DeviceType::VirtualGpu => (2, WgpuDevice::VirtualGpu(per_type[2])),
            wgpu::DeviceType::Cpu if !have_cpu => {
                have_cpu = true;
                (3, WgpuDevice::Cpu)
            }
            _ => continue,
        };
        if rank < 3 {
            per_type[rank as usize] += 1;
        }
        found.push((rank, device, info, adapter.features()));
    }
    found.sort_by_key(|(rank, ..)| *rank);

    found
        .into_iter()
        .enumerate()
        .filter_map(|(ordinal, (rank, device, info, features))| {
            let what = format!("{:?}, {}", info.backend, info.name);
            let subgroups = features.contains(wgpu::Features::SUBGROUP);
            let client = guarded(&format!("wgpu:{ordinal} ({what})"), || {
                WgpuRuntime::client(&device)
            })?;
            let software = rank == 3;
            Some(Box::new(CubeBackend::new(
                Device::Wgpu(ordinal),
                client,
                what,
                software,
                subgroups,
            )) as Box<dyn Backend>)
        })
        .collect()
}
