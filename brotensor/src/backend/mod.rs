//! Backends: device storage, the op traits (one per category) and the device registry.
//!
//! A backend owns its device's memory and implements the op traits. Each trait method has a
//! default body returning [`Error::NotImplemented`], so a backend that lacks an op says so at
//! run time, and the trait list is the op table. The public functions in `crate::ops`
//! validate shapes, dtypes and devices *before* they reach a backend; backend methods may
//! assume operands are consistent.

mod activation;
mod algebra;
mod attention;
mod codec;
mod concat;
mod conv;
pub(crate) mod cpu;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) mod cube;
mod delta_rule;
mod diffusion;
mod elementwise;
mod embedding;
mod flash;
mod flash_grad;
mod host_pool;
mod image_space;
mod linear;
mod loss;
mod lstm;
mod norm;
mod optim;
#[cfg(feature = "cuda")]
pub(crate) mod peer;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) mod probe;
mod quant;
mod reduction;
mod rope;
mod sampling;
mod spectral;
pub(crate) mod storage;
mod stylegan;

pub(crate) use activation::{ActivationOps, Glu, SnakeGrads};
pub(crate) use algebra::{AlgebraOps, ComplexMap, FloatMap, IndexMap, PadSpec, ReduceOp};
pub(crate) use attention::AttentionOps;
pub(crate) use codec::CodecOps;
pub(crate) use concat::ConcatOps;
pub(crate) use conv::{Conv2d, Conv3d, ConvOps};
pub(crate) use delta_rule::{DeltaDims, DeltaRuleOps};
pub(crate) use diffusion::{DiffusionOps, StepCoefficients};
pub(crate) use elementwise::{Binary, Broadcast, ElementwiseOps, Src, Unary};
pub(crate) use embedding::EmbeddingOps;
pub(crate) use flash::{FlashAttentionOps, FlashSpec, SeqLens};
pub(crate) use flash_grad::FlashAttentionGradOps;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) use image_space::PadMode;
pub(crate) use image_space::{AxisAdjoint, AxisTable, ImageSpaceOps, MaxPool2d, Unfold2d};
pub(crate) use linear::{Gemm, LinearOps};
pub(crate) use loss::{LossIo, LossOps};
pub(crate) use lstm::{CellPrev, LstmOps, StepRows};
pub(crate) use norm::{BatchNormStats, LayerNormCaches, NormOps};
pub(crate) use optim::{AdamStep, OptimOps};
pub(crate) use quant::QuantOps;
pub(crate) use reduction::ReductionOps;
pub(crate) use rope::RopeOps;
pub(crate) use sampling::{Draw, SamplingOps};
pub(crate) use spectral::{SpectralOps, StftPass, Transform};
pub(crate) use storage::Storage;
pub(crate) use stylegan::{BiasAct, Modulation, StyleganOps, Upfirdn2d};

use crate::layout::Layout;
use crate::{Device, Dtype, Error, Result};

/// Memory figures of a device, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Bytes held by live tensors.
    pub in_use: u64,
    /// Bytes the runtime has reserved from the device (in use, pooled, padding).
    pub reserved: u64,
}

/// The device a backend drives (the supertrait of every op trait, for error messages).
pub(crate) trait OnDevice {
    /// The device this backend drives.
    fn device(&self) -> Device;
}

/// A device's runtime: memory management plus every op category.
pub(crate) trait Backend:
    Send
    + Sync
    + OnDevice
    + ElementwiseOps
    + ActivationOps
    + ReductionOps
    + LinearOps
    + NormOps
    + LossOps
    + EmbeddingOps
    + ConcatOps
    + RopeOps
    + AttentionOps
    + FlashAttentionOps
    + FlashAttentionGradOps
    + SamplingOps
    + QuantOps
    + AlgebraOps
    + ConvOps
    + ImageSpaceOps
    + DiffusionOps
    + StyleganOps
    + OptimOps
    + CodecOps
    + DeltaRuleOps
    + SpectralOps
    + LstmOps
{
    /// A human-readable name that says what is underneath, e.g. `wgpu:0 (Vulkan, llvmpipe)`.
    fn describe(&self) -> String;
    /// Whether the device is a software rasterizer (never chosen as the default).
    fn is_software(&self) -> bool {
        false
    }
    /// Whether ops compute in `dtype` on this device.
    fn supports(&self, dtype: Dtype) -> bool;
    /// Whether matmuls in `dtype` run on matrix units (tensor cores) on this device.
    fn matmul_on_matrix_units(&self, _dtype: Dtype) -> bool {
        false
    }
    /// Whether `cast` converts to and from `dtype` on this device.
    fn converts(&self, dtype: Dtype) -> bool {
        self.supports(dtype)
    }
    /// The largest buffer the device can allocate and bind to a kernel, in bytes.
    fn max_buffer_bytes(&self) -> u64 {
        u64::MAX
    }
    /// A buffer of at least `bytes` bytes; contents undefined.
    fn alloc(&self, bytes: usize) -> Result<Storage>;
    /// A buffer holding a copy of `bytes`.
    fn upload(&self, bytes: &[u8]) -> Result<Storage>;
    /// The first `bytes` bytes of `src`, after every queued write to it has finished.
    fn download(&self, src: &Storage, bytes: usize) -> Result<Vec<u8>>;
    /// Copies the first `bytes` bytes of `src` into `dst` (same device).
    fn copy(&self, src: &Storage, dst: &mut Storage, bytes: usize) -> Result<()>;
    /// Gathers the elements of `layout` over `src` (elements of `dtype`, which has a size)
    /// densely, in row-major order, into `dst`. Errors when the layout reaches outside `src`.
    fn strided_copy(
        &self,
        op: &'static str,
        src: &Storage,
        layout: &Layout,
        dtype: Dtype,
        dst: &mut Storage,
    ) -> Result<()>;
    /// Sets the first `bytes` bytes of `dst` to zero.
    fn zero(&self, dst: &mut Storage, bytes: usize) -> Result<()>;
    /// The CUDA device address of `src`'s first byte (CUDA devices only), with what keeps it
    /// valid; the caller syncs the device before another engine touches the memory.
    #[cfg(feature = "cuda")]
    fn cuda_address(&self, op: &'static str, _src: &Storage) -> Result<CudaAddress> {
        Err(crate::Error::NotImplemented {
            op,
            device: self.device(),
        })
    }
    /// Notes that the calling thread is about to queue work on the device, so that
    /// [`Backend::sync`] can wait for it too (GPU runtimes queue per thread).
    fn note_thread(&self) {}
    /// Waits for every queued operation on the device, from every thread; surfaces
    /// asynchronous failures.
    fn sync(&self) -> Result<()>;
    /// Memory figures, where the runtime reports them.
    fn memory_info(&self) -> Result<Option<MemoryInfo>>;
    /// Synchronizes, then returns pooled memory that no tensor uses to the device.
    fn trim(&self) -> Result<()>;
    /// The concrete backend behind this trait object, for code that needs the runtime
    /// itself (user kernels reach a `CubeBackend<R>` through it); `None` on the CPU.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// The error of a backend method that `b`'s device does not implement.
pub(crate) fn missing<B: OnDevice + ?Sized>(op: &'static str, b: &B) -> Error {
    Error::NotImplemented {
        op,
        device: b.device(),
    }
}

/// The element width of `dtype` for a strided copy, or an error for block dtypes.
pub(crate) fn gather_width(op: &'static str, dtype: Dtype) -> Result<usize> {
    dtype.size_bytes().ok_or_else(|| {
        Error::invalid(
            op,
            format!("{dtype} is stored in blocks: only dense tensors of it can be copied"),
        )
    })
}

/// The backend modules' internal checks, for `crate::internals`.
#[cfg(feature = "internals")]
pub(crate) mod checks {
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    pub use super::algebra::checks as algebra;
    pub use super::elementwise::checks as elementwise;
    pub use super::host_pool::checks as host_pool;
}

/// A CUDA device address of a buffer, and the runtime's hold on the memory behind it.
#[cfg(feature = "cuda")]
pub(crate) struct CudaAddress {
    pub(crate) ptr: u64,
    pub(crate) _hold: Box<dyn std::any::Any>,
}
