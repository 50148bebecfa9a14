//! The bytes behind a committed tensor.

/// A tensor's buffer on its device.
pub(crate) enum Storage {
    /// Host memory, 8-byte aligned so every element type can be viewed in place.
    Host(HostBuffer),
    /// A CubeCL buffer on the device named by the tensor.
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    Gpu(GpuBuffer),
}

impl Storage {
    /// Bytes the buffer can hold.
    pub(crate) fn capacity(&self) -> usize {
        match self {
            Storage::Host(h) => h.capacity(),
            #[cfg(any(feature = "wgpu", feature = "cuda"))]
            Storage::Gpu(g) => g.capacity,
        }
    }
}

/// Host memory backed by `u64` words, so views as `f32`, `f16`, `i32` or `f64` are aligned.
pub(crate) struct HostBuffer {
    words: Vec<u64>,
}

impl HostBuffer {
    /// A buffer of at least `bytes` bytes from the host pool; contents undefined. Errors
    /// (naming `op`) when the host cannot provide it.
    pub(crate) fn new(op: &'static str, bytes: usize) -> crate::Result<Self> {
        Ok(HostBuffer {
            words: super::host_pool::take(op, bytes)?,
        })
    }

    pub(crate) fn capacity(&self) -> usize {
        self.words.len() * 8
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.words)
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.words)
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        super::host_pool::give(std::mem::take(&mut self.words));
    }
}

/// A device buffer and its size in bytes (a multiple of 16, so word-wise kernels can touch
/// the padded tail).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) struct GpuBuffer {
    pub(crate) handle: cubecl::server::Handle,
    pub(crate) capacity: usize,
}
