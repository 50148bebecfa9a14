//! The NCCL engine (feature `cuda`): one rank per CUDA device, NCCL loaded at run time
//! through cudarc. The tensors stay on the device: each call syncs the tensor's device (so
//! CubeCL's queued writes land), runs NCCL on the communicator's own stream over the
//! buffer's device address, and synchronizes that stream before returning (so CubeCL's later
//! work sees the result). 16-bit tensors are reduced in FP32 (cast on the device, reduced,
//! cast back once); the copies (gather, broadcast, send) move their bytes as they are.
//!
//! NCCL allows one rank per GPU: a world of several ranks needs as many devices. Unlike the
//! thread and MPI engines, a rank that never arrives is not bounded by a timeout here (NCCL
//! blocks); ranks that disagree still get an error, from the call exchange.

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop};
use cudarc::nccl::{self, Comm, NcclType};

use super::call::{self, agree, Call, Kind, CALL_WORDS};
use super::{Communicator, ReduceOp};
use crate::backend::CudaAddress;
use crate::runtime::backend;
use crate::{Device, Dtype, Error, Result, Tensor};

/// The 128-byte identifier that rank 0 makes ([`NcclId::new`]) and every rank passes to
/// [`NcclComm::from_rank`]; ship it by any means (MPI, a file, TCP).
#[derive(Clone, Copy)]
pub struct NcclId(pub [u8; 128]);

fn nccl_error(op: &'static str, e: impl std::fmt::Debug) -> Error {
    Error::Collective {
        op,
        reason: format!("NCCL: {e:?}"),
    }
}

fn driver_error(op: &'static str, e: impl std::fmt::Display) -> Error {
    Error::Collective {
        op,
        reason: format!("CUDA driver: {e}"),
    }
}

/// Errors unless the NCCL library can be loaded.
fn check_library(op: &'static str) -> Result<()> {
    // SAFETY: only tries to dlopen the library and reports whether that worked.
    if unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Ok(());
    }
    Err(Error::Collective {
        op,
        reason: "the NCCL library was not found (cudarc loads `libnccl.so`; NVIDIA's pip wheel \
                 ships only `libnccl.so.2`: link `libnccl.so` to it in a folder on \
                 LD_LIBRARY_PATH)"
            .into(),
    })
}

impl NcclId {
    /// A fresh identifier (rank 0 makes it). Errors when NCCL cannot be loaded.
    pub fn new() -> Result<NcclId> {
        let op = "NcclId::new";
        check_library(op)?;
        let id = nccl::Id::new().map_err(|e| nccl_error(op, e))?;
        Ok(NcclId(id.internal().map(|c| c as u8)))
    }
}

/// A device buffer seen by cudarc's NCCL calls: `len` elements of `T` at `ptr`.
struct Raw<T> {
    ptr: u64,
    len: usize,
    stream: Arc<CudaStream>,
    _t: PhantomData<T>,
}

impl<T> DeviceSlice<T> for Raw<T> {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl<T> DevicePtr<T> for Raw<T> {
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        // The caller synced CubeCL's streams before handing the address over.
        (self.ptr, SyncOnDrop::Sync(None))
    }
}

impl<T> DevicePtrMut<T> for Raw<T> {
    fn device_ptr_mut<'a>(&'a mut self, _stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        (self.ptr, SyncOnDrop::Sync(None))
    }
}

/// One rank of an NCCL world on one CUDA device.
pub struct NcclComm {
    comm: Comm,
    stream: Arc<CudaStream>,
    device: Device,
    ordinal: usize,
}

impl NcclComm {
    /// Rank `rank` of a world of `world`, on `device` (`cuda:N`), joining the world that
    /// `id` names. Every rank calls it with the same `id` and `world`; it returns once all
    /// have. Errors when NCCL cannot be loaded or the device is not a CUDA device.
    pub fn from_rank(device: Device, rank: usize, world: usize, id: &NcclId) -> Result<NcclComm> {
        let op = "NcclComm::from_rank";
        let Device::Cuda(ordinal) = device else {
            return Err(Error::invalid(op, format!("{device} is not a CUDA device")));
        };
        call::check_rank(op, "rank", rank, world)?;
        backend(op, device)?;
        check_library(op)?;
        let ctx = CudaContext::new(ordinal).map_err(|e| driver_error(op, e))?;
        let stream = ctx.new_stream().map_err(|e| driver_error(op, e))?;
        let id = nccl::Id::uninit(id.0.map(|b| b as std::ffi::c_char));
        let comm =
            Comm::from_rank(stream.clone(), rank, world, id).map_err(|e| nccl_error(op, e))?;
        Ok(NcclComm {
            comm,
            stream,
            device,
            ordinal,
        })
    }

    /// A world over the launcher's environment, as `torchrun` sets it: `RANK`, `WORLD_SIZE`,
    /// `MASTER_ADDR`, `MASTER_PORT`. Rank 0 makes the id and serves it over TCP at
    /// `MASTER_ADDR:MASTER_PORT` (the other ranks retry for up to `wait`); each rank runs on
    /// `cuda:{LOCAL_RANK}` (0 if unset).
    pub fn from_env(wait: std::time::Duration) -> Result<NcclComm> {
        let op = "NcclComm::from_env";
        let launch = super::env::Launch::from_env(op)?;
        let device = Device::Cuda(launch.local_rank);
        let id = if launch.rank == 0 {
            let id = NcclId::new()?;
            launch.serve(op, &id.0)?;
            id
        } else {
            NcclId(launch.fetch(op, wait)?)
        };
        NcclComm::from_rank(device, launch.rank, launch.world, &id)
    }

    /// A world over the ranks of `mpi` (one per process), each on `device`: rank 0 makes
    /// the id and MPI broadcasts it.
    #[cfg(feature = "distributed")]
    pub fn with_mpi(mpi: &super::MpiComm, device: Device) -> Result<NcclComm> {
        let mut words = Tensor::zeros_on(Device::Cpu, 1, 128, Dtype::F32)?;
        if mpi.rank() == 0 {
            let id = NcclId::new()?;
            let bytes: Vec<f32> = id.0.iter().map(|&b| f32::from(b)).collect();
            words = Tensor::from_slice_on(Device::Cpu, &bytes, 1, 128)?;
        }
        mpi.broadcast(&mut words, 0)?;
        let mut id = [0u8; 128];
        for (b, v) in id.iter_mut().zip(words.to_vec::<f32>()?) {
            *b = v as u8;
        }
        NcclComm::from_rank(device, mpi.rank(), mpi.world_size(), &NcclId(id))
    }

    /// The tensor's device address after CubeCL's queued work on it finished.
    fn address(&self, op: &'static str, t: &Tensor) -> Result<CudaAddress> {
        if t.device() != self.device {
            return Err(Error::DeviceMismatch {
                op,
                operand: "tensor",
                expected: self.device,
                found: t.device(),
            });
        }
        let be = backend(op, self.device)?;
        be.sync()?;
        be.cuda_address(op, t.dense_storage(op)?)
    }

    fn raw<T>(&self, address: &CudaAddress, len: usize) -> Raw<T> {
        Raw {
            ptr: address.ptr,
            len,
            stream: self.stream.clone(),
            _t: PhantomData,
        }
    }

    fn finish(&self, op: &'static str) -> Result<()> {
        self.stream.synchronize().map_err(|e| driver_error(op, e))
    }

    /// Every rank's call, through an NCCL all-gather of their words; errors unless they agree.
    fn exchange(&self, op: &'static str, mine: &Result<Call>) -> Result<()> {
        let words = match mine {
            Ok(c) => c.encode(),
            Err(_) => [0; CALL_WORDS],
        };
        let world = self.world_size();
        let send = self
            .stream
            .clone_htod(&words)
            .map_err(|e| driver_error(op, e))?;
        let mut recv = self
            .stream
            .alloc_zeros::<u64>(CALL_WORDS * world)
            .map_err(|e| driver_error(op, e))?;
        self.comm
            .all_gather(&send, &mut recv)
            .map_err(|e| nccl_error(op, e))?;
        let all = self
            .stream
            .clone_dtoh(&recv)
            .map_err(|e| driver_error(op, e))?;
        if let Err(e) = mine {
            return Err(e.clone());
        }
        let calls: Vec<Option<Call>> = all
            .chunks_exact(CALL_WORDS)
            .map(|w| Call::decode(w.try_into().expect("CALL_WORDS words")))
            .collect();
        agree(op, &calls)
    }

    fn nccl_op(op: ReduceOp) -> nccl::ReduceOp {
        match op {
            ReduceOp::Sum => nccl::ReduceOp::Sum,
            ReduceOp::Mean => nccl::ReduceOp::Avg,
            ReduceOp::Max => nccl::ReduceOp::Max,
        }
    }

    /// `f32` elements of `t`, an F32 copy for a 16-bit tensor.
    fn as_f32(t: &Tensor) -> Result<Option<Tensor>> {
        Ok(match t.dtype() {
            Dtype::F32 => None,
            _ => Some(t.to_dtype(Dtype::F32)?),
        })
    }

    fn p2p<T: NcclType>(
        &self,
        op: &'static str,
        peer: usize,
        sending: bool,
        buf: &mut Raw<T>,
    ) -> Result<()> {
        if sending {
            self.comm
                .send(&*buf, peer as i32)
                .map_err(|e| nccl_error(op, e))?;
        } else {
            self.comm
                .recv(buf, peer as i32)
                .map_err(|e| nccl_error(op, e))?;
        }
        self.finish(op)
    }
}

impl Communicator for NcclComm {
    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn world_size(&self) -> usize {
        self.comm.world_size()
    }

    fn engine(&self) -> &'static str {
        "nccl"
    }

    fn all_reduce(&self, tensor: &mut Tensor, op: ReduceOp) -> Result<()> {
        let name = "all_reduce";
        let mine = Call::new(name, Kind::AllReduce(op), tensor).and_then(|c| {
            tensor.check_writable(name, "tensor")?;
            Ok(c)
        });
        self.exchange(name, &mine)?;
        if tensor.numel() == 0 {
            return Ok(());
        }
        let wide = Self::as_f32(tensor)?;
        let target = wide.as_ref().unwrap_or(tensor);
        let address = self.address(name, target)?;
        let mut buf = self.raw::<f32>(&address, target.numel());
        self.comm
            .all_reduce_in_place(&mut buf, &Self::nccl_op(op))
            .map_err(|e| nccl_error(name, e))?;
        self.finish(name)?;
        if let Some(w) = wide {
            let narrow = w.to_dtype(tensor.dtype())?;
            tensor.overwrite_with(name, &narrow)?;
        }
        Ok(())
    }

    fn all_gather(&self, tensor: &Tensor) -> Result<Tensor> {
        let name = "all_gather";
        let dims = call::gathered_dims(name, tensor.dims(), self.world_size());
        let mine = Call::new(name, Kind::AllGather, tensor).and_then(|c| {
            dims.as_ref().map_err(Clone::clone)?;
            Ok(c)
        });
        self.exchange(name, &mine)?;
        let out = Tensor::zeros_nd_on(self.device, &dims?, tensor.dtype())?;
        if tensor.numel() == 0 {
            return Ok(out);
        }
        let (src, dst) = (self.address(name, tensor)?, self.address(name, &out)?);
        let bytes = tensor.storage_bytes();
        self.comm
            .all_gather(
                &self.raw::<u8>(&src, bytes),
                &mut self.raw::<u8>(&dst, bytes * self.world_size()),
            )
            .map_err(|e| nccl_error(name, e))?;
        self.finish(name)?;
        Ok(out)
    }

    fn reduce_scatter(&self, tensor: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let name = "reduce_scatter";
        let dims = call::scattered_dims(name, tensor.dims(), self.world_size());
        let mine = Call::new(name, Kind::ReduceScatter(op), tensor).and_then(|c| {
            dims.as_ref().map_err(Clone::clone)?;
            Ok(c)
        });
        self.exchange(name, &mine)?;
        let dims = dims?;
        let out = Tensor::zeros_nd_on(self.device, &dims, Dtype::F32)?;
        if out.numel() > 0 {
            let wide = Self::as_f32(tensor)?;
            let src = wide.as_ref().unwrap_or(tensor);
            let (a, b) = (self.address(name, src)?, self.address(name, &out)?);
            self.comm
                .reduce_scatter(
                    &self.raw::<f32>(&a, src.numel()),
                    &mut self.raw::<f32>(&b, out.numel()),
                    &Self::nccl_op(op),
                )
                .map_err(|e| nccl_error(name, e))?;
            self.finish(name)?;
        }
        out.to_dtype(tensor.dtype())
    }

    fn broadcast(&self, tensor: &mut Tensor, root: usize) -> Result<()> {
        let name = "broadcast";
        let mine = Call::new(name, Kind::Broadcast { root }, tensor).and_then(|c| {
            call::check_rank(name, "root", root, self.world_size())?;
            tensor.check_writable(name, "tensor")?;
            Ok(c)
        });
        self.exchange(name, &mine)?;
        if tensor.numel() == 0 {
            return Ok(());
        }
        let address = self.address(name, tensor)?;
        let mut buf = self.raw::<u8>(&address, tensor.storage_bytes());
        self.comm
            .broadcast_in_place(&mut buf, root as i32)
            .map_err(|e| nccl_error(name, e))?;
        self.finish(name)
    }

    fn send(&self, tensor: &Tensor, peer: usize) -> Result<()> {
        let name = "send";
        call::check_rank(name, "peer", peer, self.world_size())?;
        if peer == self.rank() {
            return Err(Error::invalid(
                name,
                format!("rank {peer} cannot send to itself"),
            ));
        }
        let call = Call::new(
            name,
            Kind::Send {
                from: self.rank(),
                to: peer,
            },
            tensor,
        )?;
        // The receiver's verdict on the call first, so a mismatch is an error on both sides.
        let words = self
            .stream
            .clone_htod(&call.encode())
            .map_err(|e| driver_error(name, e))?;
        self.comm
            .send(&words, peer as i32)
            .map_err(|e| nccl_error(name, e))?;
        let mut verdict = self
            .stream
            .alloc_zeros::<u64>(1)
            .map_err(|e| driver_error(name, e))?;
        self.comm
            .recv(&mut verdict, peer as i32)
            .map_err(|e| nccl_error(name, e))?;
        let verdict = self
            .stream
            .clone_dtoh(&verdict)
            .map_err(|e| driver_error(name, e))?;
        if verdict[0] != 1 {
            return Err(Error::Collective {
                op: name,
                reason: format!(
                    "rank {peer} receives into another shape or dtype than the {:?} {} sent",
                    tensor.dims(),
                    tensor.dtype()
                ),
            });
        }
        if tensor.numel() == 0 {
            return Ok(());
        }
        let address = self.address(name, tensor)?;
        self.p2p(
            name,
            peer,
            true,
            &mut self.raw::<u8>(&address, tensor.storage_bytes()),
        )
    }

    fn recv(&self, tensor: &mut Tensor, peer: usize) -> Result<()> {
        let name = "recv";
        call::check_rank(name, "peer", peer, self.world_size())?;
        if peer == self.rank() {
            return Err(Error::invalid(
                name,
                format!("rank {peer} cannot receive from itself"),
            ));
        }
        let expected = Call::new(
            name,
            Kind::Send {
                from: peer,
                to: self.rank(),
            },
            tensor,
        )?;
        tensor.check_writable(name, "tensor")?;
        let mut words = self
            .stream
            .alloc_zeros::<u64>(CALL_WORDS)
            .map_err(|e| driver_error(name, e))?;
        self.comm
            .recv(&mut words, peer as i32)
            .map_err(|e| nccl_error(name, e))?;
        let words = self
            .stream
            .clone_dtoh(&words)
            .map_err(|e| driver_error(name, e))?;
        let sent = Call::decode(words[..].try_into().expect("CALL_WORDS words"));
        let accepted = sent.as_ref() == Some(&expected);
        let verdict = self
            .stream
            .clone_htod(&[u64::from(accepted)])
            .map_err(|e| driver_error(name, e))?;
        self.comm
            .send(&verdict, peer as i32)
            .map_err(|e| nccl_error(name, e))?;
        self.finish(name)?;
        if !accepted {
            return Err(Error::Collective {
                op: name,
                reason: format!(
                    "rank {peer} sent {} but rank {} receives into {:?} {}",
                    sent.map_or("something that is not a tensor".into(), |c| format!(
                        "{:?} {}",
                        c.dims, c.dtype
                    )),
                    self.rank(),
                    tensor.dims(),
                    tensor.dtype()
                ),
            });
        }
        if tensor.numel() == 0 {
            return Ok(());
        }
        let address = self.address(name, tensor)?;
        self.p2p(
            name,
            peer,
            false,
            &mut self.raw::<u8>(&address, tensor.storage_bytes()),
        )
    }

    fn barrier(&self) -> Result<()> {
        let call = Call {
            kind: Kind::Barrier,
            dtype: Dtype::F32,
            dims: Vec::new(),
        };
        self.exchange("barrier", &Ok(call))?;
        self.finish("barrier")
    }
}

impl NcclComm {
    /// The CUDA ordinal this rank runs on.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
}
