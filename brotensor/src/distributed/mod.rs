//! Beyond one device: collectives over a group of ranks, behind one trait.
//!
//! A *rank* is one participant (a thread, a process, a GPU); a *world* is the group. Every
//! rank calls the same collectives in the same order with tensors of the same shape and
//! dtype (F32, F16 or BF16; 16-bit tensors are reduced in FP32 and rounded once). Before each
//! call the ranks exchange what they were asked to do, so a rank that disagrees (another op,
//! shape, dtype or root) makes every rank return [`Error::Collective`](crate::Error)
//! instead of hanging or mixing data; a rank that does not arrive within the communicator's
//! timeout does the same, and the communicator refuses further calls after that.
//!
//! Engines:
//! - [`ThreadComm`] ([`thread_group`]): ranks are threads of one process, for tests and for
//!   one process driving several local devices. Always built.
//! - `MpiComm` (feature `distributed`): ranks are processes launched by `mpirun` (Open MPI
//!   through the `mpi` crate), on any device: tensors are staged through the host.
//! - `NcclComm` (feature `cuda`): one rank per CUDA device, NCCL opened at run time
//!   (`libnccl.so.2`), the tensors staying on the device; its id reaches the other ranks through
//!   MPI (`NcclComm::with_mpi`), a torchrun-style environment (`NcclComm::from_env`) or any
//!   channel of the caller's (`NcclComm::from_rank`).
//!
//! ```
//! use brotensor::distributed::{thread_group, Communicator, ReduceOp};
//! use brotensor::{Device, Tensor};
//!
//! let ranks = thread_group(2)?;
//! let sums = std::thread::scope(|s| {
//!     let handles: Vec<_> = ranks
//!         .into_iter()
//!         .map(|comm| {
//!             s.spawn(move || -> brotensor::Result<Vec<f32>> {
//!                 let r = comm.rank() as f32;
//!                 let mut t = Tensor::from_slice_on(Device::Cpu, &[r, 10.0 * r], 1, 2)?;
//!                 comm.all_reduce(&mut t, ReduceOp::Sum)?;
//!                 t.to_vec::<f32>()
//!             })
//!         })
//!         .collect();
//!     handles.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
//! });
//! for s in sums {
//!     assert_eq!(s?, vec![1.0, 10.0]);
//! }
//! # Ok::<(), brotensor::Error>(())
//! ```

mod call;
#[cfg(feature = "cuda")]
mod env;
#[cfg(feature = "distributed")]
mod mpi;
#[cfg(feature = "cuda")]
mod nccl;
mod thread;

use std::time::Duration;

#[cfg(feature = "distributed")]
pub use mpi::MpiComm;
#[cfg(feature = "cuda")]
pub use nccl::{NcclComm, NcclId};
pub use thread::{thread_group, ThreadComm};

use crate::autograd::Var;
use crate::{ops, Result, Tensor};

/// How [`Communicator::all_reduce`] and [`Communicator::reduce_scatter`] combine the ranks'
/// elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum over ranks.
    Sum,
    /// The sum over ranks divided by the world size.
    Mean,
    /// The largest value (NaN if any rank has NaN).
    Max,
}

/// How long a rank waits for the others at a collective before it gives up, unless the
/// communicator was given another timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Collectives over a world of ranks. Every method is a collective call: each rank of the
/// world makes it (point-to-point: both peers), in the same order, with tensors of the same
/// dims and dtype (F32, F16 or BF16, on any device; the output lands on the input's device).
pub trait Communicator {
    /// This rank, `0..world_size()`.
    fn rank(&self) -> usize;

    /// The number of ranks.
    fn world_size(&self) -> usize;

    /// The engine underneath: `"threads"`, `"mpi"`, `"nccl"`.
    fn engine(&self) -> &'static str;

    /// Every rank's `tensor` becomes the elementwise `op` over all ranks' tensors, written in
    /// place (the allocation stays; errors if it is a view or shared with a live view).
    fn all_reduce(&self, tensor: &mut Tensor, op: ReduceOp) -> Result<()>;

    /// The ranks' tensors stacked along the first axis in rank order: `[d0, rest..]` gives
    /// `[world * d0, rest..]` (a scalar gives `[world]`).
    fn all_gather(&self, tensor: &Tensor) -> Result<Tensor>;

    /// The elementwise `op` over all ranks' `tensor` (`[d0, rest..]`, `d0` divisible by the
    /// world size), of which this rank keeps its slice of the first axis:
    /// `[d0 / world, rest..]`, rows `rank * d0 / world ..`.
    fn reduce_scatter(&self, tensor: &Tensor, op: ReduceOp) -> Result<Tensor>;

    /// Every rank's `tensor` becomes rank `root`'s, written in place.
    fn broadcast(&self, tensor: &mut Tensor, root: usize) -> Result<()>;

    /// Sends `tensor` to rank `peer`, which calls [`Communicator::recv`] with a tensor of the
    /// same dims and dtype; returns once `peer` accepted it (an error on both sides if the
    /// receiver's tensor differs).
    fn send(&self, tensor: &Tensor, peer: usize) -> Result<()>;

    /// Overwrites `tensor` in place with what rank `peer` sends.
    fn recv(&self, tensor: &mut Tensor, peer: usize) -> Result<()>;

    /// Returns once every rank has called it.
    fn barrier(&self) -> Result<()>;
}

/// Data parallelism's gradient step: every rank's gradient of each parameter in `params`
/// (the same list, in the same order, on every rank) becomes `sum over ranks of weight * grad`,
/// in place. With each rank's `weight` its share of the global batch (`rows / total rows`)
/// and each rank's loss the mean over its rows, that is the gradient of the mean loss over
/// the whole batch, as one rank would compute it. A parameter without a gradient on a rank
/// (no backward reached it there) counts as zeros and gets the sum.
pub fn all_reduce_gradients(comm: &dyn Communicator, params: &[Var], weight: f32) -> Result<()> {
    for p in params {
        let summed = p.with_grad(|g| -> Result<Option<Tensor>> {
            match g {
                Some(g) => {
                    ops::scale_inplace(g, weight)?;
                    comm.all_reduce(g, ReduceOp::Sum)?;
                    Ok(None)
                }
                None => {
                    let v = p.value();
                    let mut zeros = Tensor::zeros_nd_on(v.device(), v.dims(), v.dtype())?;
                    comm.all_reduce(&mut zeros, ReduceOp::Sum)?;
                    Ok(Some(zeros))
                }
            }
        })??;
        if let Some(g) = summed {
            p.set_grad(g)?;
        }
    }
    Ok(())
}
