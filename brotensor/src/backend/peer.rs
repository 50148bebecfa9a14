//! Copies between two CUDA devices without the host or NCCL: `cuMemcpyPeer` between the
//! devices' primary contexts (the ones CubeCL runs in).

use cudarc::driver::{result as drv, CudaContext};

use super::Storage;
use crate::runtime::backend;
use crate::{Device, Error, Result};

/// Copies the first `bytes` bytes of `src` on `cuda:from` into `dst` on `cuda:to`, after
/// every queued write to either has finished; returns once the copy is done.
pub(crate) fn cuda_copy(
    op: &'static str,
    (from, src): (usize, &Storage),
    (to, dst): (usize, &mut Storage),
    bytes: usize,
) -> Result<()> {
    let (src_be, dst_be) = (
        backend(op, Device::Cuda(from))?,
        backend(op, Device::Cuda(to))?,
    );
    src_be.sync()?;
    dst_be.sync()?;
    if bytes == 0 {
        return Ok(());
    }
    let (a, b) = (src_be.cuda_address(op, src)?, dst_be.cuda_address(op, dst)?);
    let driver = |e: cudarc::driver::DriverError| Error::Gpu {
        op,
        device: Device::Cuda(to),
        reason: format!("peer copy from cuda:{from}: {e}"),
    };
    // On a thread of its own: binding the destination's context must not change the
    // current context of a thread that CubeCL queues work from.
    std::thread::scope(|s| {
        s.spawn(|| -> Result<()> {
            let (src_ctx, dst_ctx) = (
                CudaContext::new(from).map_err(driver)?,
                CudaContext::new(to).map_err(driver)?,
            );
            dst_ctx.bind_to_thread().map_err(driver)?;
            let stream = dst_ctx.default_stream();
            // SAFETY: both addresses point at live CubeCL buffers of at least `bytes` bytes
            // (`_hold` keeps them) whose queued work finished (the syncs above); the copy
            // completes before the holds drop (the stream is synchronized).
            unsafe {
                drv::memcpy_peer_async(
                    dst_ctx.cu_ctx(),
                    b.ptr,
                    src_ctx.cu_ctx(),
                    a.ptr,
                    bytes,
                    stream.cu_stream(),
                )
            }
            .map_err(driver)?;
            stream.synchronize().map_err(driver)
        })
        .join()
        .map_err(|_| Error::Gpu {
            op,
            device: Device::Cuda(to),
            reason: "the peer copy thread panicked".into(),
        })?
    })
}
