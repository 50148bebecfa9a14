//! The NCCL engine (feature `cuda`): one rank per CUDA device. NCCL is loaded at run time
//! (`libnccl.so.2`, the name NVIDIA's wheels and packages ship, else `libnccl.so`) and its
//! functions called through the small table below; cudarc provides the CUDA context and the
//! communicator's stream. The tensors stay on the device: each call syncs the tensor's device
//! (so CubeCL's queued writes land), runs NCCL on the communicator's own stream over the
//! buffer's device address, and synchronizes that stream before returning (so CubeCL's later
//! work sees the result). 16-bit tensors are reduced in FP32 (cast on the device, reduced,
//! cast back once); the copies (gather, broadcast, send) move their bytes as they are.
//!
//! NCCL allows one rank per GPU: a world of several ranks needs as many devices. Unlike the
//! thread and MPI engines, a rank that never arrives is not bounded by a timeout here (NCCL
//! blocks); ranks that disagree still get an error, from the call exchange.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{Arc, OnceLock};

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use super::call::{self, agree, Call, Kind, CALL_WORDS};
use super::{Communicator, ReduceOp};
use crate::backend::CudaAddress;
use crate::runtime::backend;
use crate::{Device, Dtype, Error, Result, Tensor};

// NCCL's data types and reduction ops, as its ABI numbers them.
const NCCL_UINT8: c_int = 1;
const NCCL_UINT64: c_int = 5;
const NCCL_FLOAT32: c_int = 7;
const NCCL_SUM: c_int = 0;
const NCCL_MAX: c_int = 2;
const NCCL_AVG: c_int = 4;

/// `ncclUniqueId`: a C struct of 128 bytes, passed by value to `ncclCommInitRank`.
#[repr(C)]
#[derive(Clone, Copy)]
struct UniqueId {
    internal: [c_char; 128],
}

type Comm = *mut c_void;
type Stream = *mut c_void;
type Reduce =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> c_int;
type PointToPoint = unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, Comm, Stream) -> c_int;

/// The NCCL functions this engine calls, loaded once per process.
struct Nccl {
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> c_int,
    comm_init_rank: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> c_int,
    comm_destroy: unsafe extern "C" fn(Comm) -> c_int,
    get_error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    all_reduce: Reduce,
    reduce_scatter: Reduce,
    /// `ncclBroadcast(send, recv, count, type, root, comm, stream)`: the root where the op is.
    broadcast: Reduce,
    all_gather:
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> c_int,
    /// `ncclSend` takes a const buffer; the same ABI as `ncclRecv`.
    send: PointToPoint,
    recv: PointToPoint,
    _lib: libloading::Library,
}

/// The library names tried, in order.
const LIBRARY_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

fn load() -> std::result::Result<Nccl, String> {
    let mut tried = Vec::new();
    for name in LIBRARY_NAMES {
        // SAFETY: loading NCCL runs its initialisers, which have no preconditions.
        let lib = match unsafe { libloading::Library::new(name) } {
            Ok(lib) => lib,
            Err(e) => {
                tried.push(format!("{name}: {e}"));
                continue;
            }
        };
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol is NCCL's function of that name, whose C signature
                // (NCCL 2.x) is the field's type; the library stays loaded in `_lib`.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("{name}: {}: {e}", $name))?
            };
        }
        return Ok(Nccl {
            get_unique_id: sym!("ncclGetUniqueId"),
            comm_init_rank: sym!("ncclCommInitRank"),
            comm_destroy: sym!("ncclCommDestroy"),
            get_error_string: sym!("ncclGetErrorString"),
            all_reduce: sym!("ncclAllReduce"),
            reduce_scatter: sym!("ncclReduceScatter"),
            broadcast: sym!("ncclBroadcast"),
            all_gather: sym!("ncclAllGather"),
            send: sym!("ncclSend"),
            recv: sym!("ncclRecv"),
            _lib: lib,
        });
    }
    Err(format!(
        "the NCCL library was not found ({}); install NVIDIA's nccl wheel or libnccl2 and put \
         its folder on LD_LIBRARY_PATH",
        tried.join("; ")
    ))
}

fn nccl(op: &'static str) -> Result<&'static Nccl> {
    static LIB: OnceLock<std::result::Result<Nccl, String>> = OnceLock::new();
    LIB.get_or_init(load)
        .as_ref()
        .map_err(|reason| Error::Collective {
            op,
            reason: reason.clone(),
        })
}

impl Nccl {
    /// `Ok` for `ncclSuccess`, else the error in NCCL's words.
    fn check(&self, op: &'static str, code: c_int) -> Result<()> {
        if code == 0 {
            return Ok(());
        }
        // SAFETY: ncclGetErrorString takes any code and returns a static C string.
        let text = unsafe { CStr::from_ptr((self.get_error_string)(code)) };
        Err(Error::Collective {
            op,
            reason: format!("NCCL error {code}: {}", text.to_string_lossy()),
        })
    }
}

fn driver_error(op: &'static str, e: impl std::fmt::Display) -> Error {
    Error::Collective {
        op,
        reason: format!("CUDA driver: {e}"),
    }
}

/// A device address as NCCL takes it.
fn at(ptr: u64) -> *mut c_void {
    ptr as usize as *mut c_void
}

/// The 128-byte identifier that rank 0 makes ([`NcclId::new`]) and every rank passes to
/// [`NcclComm::from_rank`]; ship it by any means (MPI, a file, TCP).
#[derive(Clone, Copy)]
pub struct NcclId(pub [u8; 128]);

impl NcclId {
    /// A fresh identifier (rank 0 makes it). Errors when NCCL cannot be loaded.
    pub fn new() -> Result<NcclId> {
        let op = "NcclId::new";
        let lib = nccl(op)?;
        let mut id = UniqueId { internal: [0; 128] };
        // SAFETY: writes the 128 bytes of `id`.
        lib.check(op, unsafe { (lib.get_unique_id)(&mut id) })?;
        Ok(NcclId(id.internal.map(|c| c as u8)))
    }
}

/// One rank of an NCCL world on one CUDA device. Not `Send`: it is used from the thread
/// that made it.
pub struct NcclComm {
    lib: &'static Nccl,
    comm: Comm,
    stream: Arc<CudaStream>,
    device: Device,
    ordinal: usize,
    rank: usize,
    world: usize,
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        // SAFETY: `comm` came from ncclCommInitRank and is destroyed once; the stream was
        // synchronized after every call, so no NCCL work is pending on it.
        unsafe { (self.lib.comm_destroy)(self.comm) };
    }
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
        let ranks =
            c_int::try_from(world).map_err(|_| Error::invalid(op, "the world is too large"))?;
        backend(op, device)?;
        let lib = nccl(op)?;
        let ctx = CudaContext::new(ordinal).map_err(|e| driver_error(op, e))?;
        let stream = ctx.new_stream().map_err(|e| driver_error(op, e))?;
        let mut comm: Comm = std::ptr::null_mut();
        // SAFETY: writes one communicator handle; the id is 128 bytes that NCCL made.
        lib.check(op, unsafe {
            let id = UniqueId {
                internal: id.0.map(|b| b as c_char),
            };
            (lib.comm_init_rank)(&mut comm, ranks, id, rank as c_int)
        })?;
        Ok(NcclComm {
            lib,
            comm,
            stream,
            device,
            ordinal,
            rank,
            world,
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

    /// The CUDA ordinal this rank runs on.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The tensor's device address after CubeCL's queued work on it finished, with the hold
    /// that keeps it valid.
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

    fn stream(&self) -> Stream {
        self.stream.cu_stream() as Stream
    }

    fn finish(&self, op: &'static str) -> Result<()> {
        self.stream.synchronize().map_err(|e| driver_error(op, e))
    }

    /// A few host words on the device (the call words, a verdict).
    fn words(&self, op: &'static str, w: &[u64]) -> Result<CudaSlice<u64>> {
        self.stream.clone_htod(w).map_err(|e| driver_error(op, e))
    }

    fn read_words(&self, op: &'static str, w: &CudaSlice<u64>) -> Result<Vec<u64>> {
        self.stream.clone_dtoh(w).map_err(|e| driver_error(op, e))
    }

    /// Every rank's call, through an NCCL all-gather of their words; errors unless they
    /// agree. A rank whose own checks failed posts empty words and returns its error.
    fn exchange(&self, op: &'static str, mine: &Result<Call>) -> Result<()> {
        let words = match mine {
            Ok(c) => c.encode(),
            Err(_) => [0; CALL_WORDS],
        };
        let send = self.words(op, &words)?;
        let mut recv = self
            .stream
            .alloc_zeros::<u64>(CALL_WORDS * self.world)
            .map_err(|e| driver_error(op, e))?;
        {
            let (src, _s) = send.device_ptr(&self.stream);
            let (dst, _d) = recv.device_ptr_mut(&self.stream);
            // SAFETY: `send` holds CALL_WORDS words and `recv` world times as many, on this
            // communicator's device and stream, which orders the copies around the call.
            let code = unsafe {
                (self.lib.all_gather)(
                    at(src),
                    at(dst),
                    CALL_WORDS,
                    NCCL_UINT64,
                    self.comm,
                    self.stream(),
                )
            };
            self.lib.check(op, code)?;
        }
        let all = self.read_words(op, &recv)?;
        if let Err(e) = mine {
            return Err(e.clone());
        }
        let calls: Vec<Option<Call>> = all
            .chunks_exact(CALL_WORDS)
            .map(|w| Call::decode(w.try_into().expect("CALL_WORDS words")))
            .collect();
        agree(op, &calls)
    }

    /// Sends (`sending`) or receives the `words` to or from `peer`, then waits for the stream.
    fn p2p_words(
        &self,
        op: &'static str,
        peer: usize,
        sending: bool,
        words: &mut CudaSlice<u64>,
    ) -> Result<()> {
        let n = words.len();
        let code = {
            let (ptr, _hold) = words.device_ptr_mut(&self.stream);
            let f = if sending {
                self.lib.send
            } else {
                self.lib.recv
            };
            // SAFETY: `words` holds `n` words on this device; the stream is synchronized
            // below, before `words` can drop.
            unsafe {
                f(
                    at(ptr),
                    n,
                    NCCL_UINT64,
                    peer as c_int,
                    self.comm,
                    self.stream(),
                )
            }
        };
        self.lib.check(op, code)?;
        self.finish(op)
    }

    /// Sends or receives the tensor's bytes to or from `peer`.
    fn p2p_tensor(&self, op: &'static str, peer: usize, sending: bool, t: &Tensor) -> Result<()> {
        if t.numel() == 0 {
            return Ok(());
        }
        let a = self.address(op, t)?;
        let f = if sending {
            self.lib.send
        } else {
            self.lib.recv
        };
        // SAFETY: the tensor's bytes on this device, kept valid by the hold `a`; the stream is
        // synchronized before it drops. A received tensor is not shared (checked writable).
        let code = unsafe {
            f(
                at(a.ptr),
                t.storage_bytes(),
                NCCL_UINT8,
                peer as c_int,
                self.comm,
                self.stream(),
            )
        };
        self.lib.check(op, code)?;
        self.finish(op)
    }

    fn nccl_op(op: ReduceOp) -> c_int {
        match op {
            ReduceOp::Sum => NCCL_SUM,
            ReduceOp::Mean => NCCL_AVG,
            ReduceOp::Max => NCCL_MAX,
        }
    }

    /// Runs `f`, one of NCCL's (send buffer, receive buffer, count, type, op or root)
    /// collectives, on this communicator's stream and waits for it.
    ///
    /// # Safety
    /// `src` and `dst` are live device buffers of this device, as large as `f` reads and
    /// writes for `count` elements of `dtype`, whose holders outlive the call.
    unsafe fn collective(
        &self,
        op: &'static str,
        f: Reduce,
        (src, dst): (u64, u64),
        count: usize,
        dtype: c_int,
        arg: c_int,
    ) -> Result<()> {
        // SAFETY: the caller's promise; the stream is synchronized before returning.
        let code = unsafe {
            f(
                at(src),
                at(dst),
                count,
                dtype,
                arg,
                self.comm,
                self.stream(),
            )
        };
        self.lib.check(op, code)?;
        self.finish(op)
    }

    /// An F32 copy of a 16-bit tensor (reductions run in FP32); `None` for F32.
    fn as_f32(t: &Tensor) -> Result<Option<Tensor>> {
        Ok(match t.dtype() {
            Dtype::F32 => None,
            _ => Some(t.to_dtype(Dtype::F32)?),
        })
    }
}

impl Communicator for NcclComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
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
        {
            let target = wide.as_ref().unwrap_or(tensor);
            let a = self.address(name, target)?;
            // SAFETY: `a` is the address of `target`'s numel() F32 elements on this device,
            // kept valid by its hold, CubeCL's queued work finished; in place, as NCCL allows.
            unsafe {
                self.collective(
                    name,
                    self.lib.all_reduce,
                    (a.ptr, a.ptr),
                    target.numel(),
                    NCCL_FLOAT32,
                    Self::nccl_op(op),
                )
            }?;
        }
        if let Some(w) = wide {
            let narrow = w.to_dtype(tensor.dtype())?;
            tensor.overwrite_with(name, &narrow)?;
        }
        Ok(())
    }

    fn all_gather(&self, tensor: &Tensor) -> Result<Tensor> {
        let name = "all_gather";
        let dims = call::gathered_dims(name, tensor.dims(), self.world);
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
        // SAFETY: `src` holds the tensor's bytes and `dst` world times as many (`out`), on
        // this device, kept valid by their holds; synchronized before they drop.
        let code = unsafe {
            (self.lib.all_gather)(
                at(src.ptr),
                at(dst.ptr),
                tensor.storage_bytes(),
                NCCL_UINT8,
                self.comm,
                self.stream(),
            )
        };
        self.lib.check(name, code)?;
        self.finish(name)?;
        Ok(out)
    }

    fn reduce_scatter(&self, tensor: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let name = "reduce_scatter";
        let dims = call::scattered_dims(name, tensor.dims(), self.world);
        let mine = Call::new(name, Kind::ReduceScatter(op), tensor).and_then(|c| {
            dims.as_ref().map_err(Clone::clone)?;
            Ok(c)
        });
        self.exchange(name, &mine)?;
        let out = Tensor::zeros_nd_on(self.device, &dims?, Dtype::F32)?;
        if out.numel() > 0 {
            let wide = Self::as_f32(tensor)?;
            let src = wide.as_ref().unwrap_or(tensor);
            let (a, b) = (self.address(name, src)?, self.address(name, &out)?);
            // SAFETY: `a` holds world * out.numel() F32 elements and `b` out.numel(), on this
            // device, kept valid by their holds.
            unsafe {
                self.collective(
                    name,
                    self.lib.reduce_scatter,
                    (a.ptr, b.ptr),
                    out.numel(),
                    NCCL_FLOAT32,
                    Self::nccl_op(op),
                )
            }?;
        }
        out.to_dtype(tensor.dtype())
    }

    fn broadcast(&self, tensor: &mut Tensor, root: usize) -> Result<()> {
        let name = "broadcast";
        let mine = Call::new(name, Kind::Broadcast { root }, tensor).and_then(|c| {
            call::check_rank(name, "root", root, self.world)?;
            tensor.check_writable(name, "tensor")?;
            Ok(c)
        });
        self.exchange(name, &mine)?;
        if tensor.numel() == 0 {
            return Ok(());
        }
        let a = self.address(name, tensor)?;
        // SAFETY: the tensor's bytes on this device, in place, kept valid by the hold.
        unsafe {
            self.collective(
                name,
                self.lib.broadcast,
                (a.ptr, a.ptr),
                tensor.storage_bytes(),
                NCCL_UINT8,
                root as c_int,
            )
        }
    }

    fn send(&self, tensor: &Tensor, peer: usize) -> Result<()> {
        let name = "send";
        let call = call::point_to_point(name, tensor, (self.rank, peer, self.world), true)?;
        // The receiver's verdict on the call first, so a mismatch is an error on both sides.
        self.p2p_words(name, peer, true, &mut self.words(name, &call.encode())?)?;
        let mut verdict = self.words(name, &[0])?;
        self.p2p_words(name, peer, false, &mut verdict)?;
        if self.read_words(name, &verdict)?[0] != 1 {
            return Err(Error::Collective {
                op: name,
                reason: format!(
                    "rank {peer} receives into another shape or dtype than the {:?} {} sent",
                    tensor.dims(),
                    tensor.dtype()
                ),
            });
        }
        self.p2p_tensor(name, peer, true, tensor)
    }

    fn recv(&self, tensor: &mut Tensor, peer: usize) -> Result<()> {
        let name = "recv";
        let expected = call::point_to_point(name, tensor, (self.rank, peer, self.world), false)?;
        let mut words = self.words(name, &[0; CALL_WORDS])?;
        self.p2p_words(name, peer, false, &mut words)?;
        let words = self.read_words(name, &words)?;
        let sent = Call::decode(words[..].try_into().expect("CALL_WORDS words"));
        let accepted = sent.as_ref() == Some(&expected);
        self.p2p_words(
            name,
            peer,
            true,
            &mut self.words(name, &[u64::from(accepted)])?,
        )?;
        if !accepted {
            return Err(Error::Collective {
                op: name,
                reason: format!(
                    "rank {peer} sent {} but rank {} receives into {:?} {}",
                    sent.map_or("something that is not a tensor".into(), |c| {
                        format!("{:?} {}", c.dims, c.dtype)
                    }),
                    self.rank,
                    tensor.dims(),
                    tensor.dtype()
                ),
            });
        }
        self.p2p_tensor(name, peer, false, tensor)
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
