//! The CPU backend: host buffers and the rayon FP32 reference ops of `brotensor-cpu`. This
//! file holds the backend itself (memory, sync); each op family's glue is in its own file.
//! F16 and BF16 compute with FP32 math and one rounding on the way out, as on a GPU
//! ([`dtype_policy`]).

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

use brotensor_cpu::cast as cpu_cast;

use super::storage::HostBuffer;
use super::{Backend, MemoryInfo, OnDevice, Storage};
use crate::layout::Layout;
use crate::{Device, Dtype, Result};

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
        // F32 for every op, F16 and BF16 through FP32 math (`dtype_policy`); the wide
        // dtypes for the tensor-algebra ops.
        matches!(
            dtype,
            Dtype::F32
                | Dtype::F16
                | Dtype::BF16
                | Dtype::F64
                | Dtype::I64
                | Dtype::C64
                | Dtype::C128
        )
    }

    fn converts(&self, dtype: Dtype) -> bool {
        dtype.is_float()
    }

    fn alloc(&self, bytes: usize) -> Result<Storage> {
        Ok(Storage::Host(HostBuffer::new("alloc", bytes)?))
    }

    fn upload(&self, bytes: &[u8]) -> Result<Storage> {
        let mut buf = HostBuffer::new("upload", bytes.len())?;
        cpu_cast::copy(&mut buf.bytes_mut()[..bytes.len()], bytes);
        Ok(Storage::Host(buf))
    }

    fn download(&self, src: &Storage, bytes: usize) -> Result<Vec<u8>> {
        Ok(host(src).bytes()[..bytes].to_vec())
    }

    fn copy(&self, src: &Storage, dst: &mut Storage, bytes: usize) -> Result<()> {
        cpu_cast::copy(
            &mut host_mut(dst).bytes_mut()[..bytes],
            &host(src).bytes()[..bytes],
        );
        Ok(())
    }

    fn strided_copy(
        &self,
        op: &'static str,
        src: &Storage,
        layout: &Layout,
        dtype: Dtype,
        dst: &mut Storage,
    ) -> Result<()> {
        layout::strided_copy(op, src, layout, dtype, dst)
    }

    fn zero(&self, dst: &mut Storage, bytes: usize) -> Result<()> {
        cpu_cast::zero(&mut host_mut(dst).bytes_mut()[..bytes]);
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
