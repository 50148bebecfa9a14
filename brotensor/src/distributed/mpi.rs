//! The MPI engine (feature `distributed`): ranks are the processes of `MPI_COMM_WORLD`
//! (launched by `mpirun`), through the `mpi` crate over the system's Open MPI. Tensors of any
//! device are staged through the host as FP32 (MPI has no 16-bit float type; a 16-bit tensor
//! moves twice its bytes and is rounded once on the way back).
//!
//! The call exchange before each collective and the point-to-point handshake use MPI's
//! non-blocking calls, polled against the timeout; the data then moves with blocking calls
//! (every rank is known to be there).

use std::cell::RefCell;
use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::request::{Request, StaticScope};
use mpi::topology::Communicator as _;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Threading;

use super::call::{self, agree, Call, Kind, CALL_WORDS};
use super::{Communicator, ReduceOp, DEFAULT_TIMEOUT};
use crate::{Error, Result, Tensor};

const TAG_CALL: i32 = 101;
const TAG_VERDICT: i32 = 102;
const TAG_DATA: i32 = 103;

/// This process's rank of `MPI_COMM_WORLD`. MPI is initialised by [`MpiComm::init`] and
/// finalised when the value is dropped; a process has at most one.
pub struct MpiComm {
    world: SimpleCommunicator,
    timeout: Duration,
    /// Why the communicator stopped (a timed-out exchange); later calls fail with it.
    poisoned: RefCell<Option<String>>,
    /// The call exchange's buffers (`CALL_WORDS` and `world * CALL_WORDS` words), owned
    /// here as raw allocations: a request that timed out may still be completed by MPI
    /// later, so after a timeout they are never freed or reused.
    send_words: *mut u64,
    recv_words: *mut u64,
    recv_len: usize,
    /// The send and receive host buffers of the reductions, kept between calls so large
    /// buffers are not allocated (and faulted in) anew.
    send_buf: RefCell<Vec<f32>>,
    recv_buf: RefCell<Vec<f32>>,
    // Dropped last: finalises MPI.
    _universe: Universe,
}

fn leak(len: usize) -> *mut u64 {
    Box::into_raw(vec![0u64; len].into_boxed_slice()).cast()
}

impl MpiComm {
    /// Initialises MPI (thread level "serialized": any thread may call, one at a time,
    /// which this type's `!Sync` ensures) and returns this process's rank of the world.
    /// Errors if MPI was initialised before in this process.
    pub fn init() -> Result<MpiComm> {
        let (universe, _level) =
            mpi::initialize_with_threading(Threading::Serialized).ok_or_else(|| {
                Error::Collective {
                    op: "MpiComm::init",
                    reason: "MPI is already initialised in this process".into(),
                }
            })?;
        let world = universe.world();
        let size = usize::try_from(world.size()).unwrap_or(0).max(1);
        let recv_len = size * CALL_WORDS;
        Ok(MpiComm {
            world,
            timeout: DEFAULT_TIMEOUT,
            poisoned: RefCell::new(None),
            send_words: leak(CALL_WORDS),
            recv_words: leak(recv_len),
            recv_len,
            send_buf: RefCell::new(Vec::new()),
            recv_buf: RefCell::new(Vec::new()),
            _universe: universe,
        })
    }

    /// This rank with another timeout for waiting on the other ranks.
    pub fn with_timeout(mut self, timeout: Duration) -> MpiComm {
        self.timeout = timeout;
        self
    }

    fn check_poisoned(&self, op: &'static str) -> Result<()> {
        match &*self.poisoned.borrow() {
            Some(why) => Err(Error::Collective {
                op,
                reason: why.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The exchange buffers for one request.
    ///
    /// SAFETY: callers use no slice from an earlier call of this once they call it again
    /// (requests take them, so read results through a fresh pair), and `MpiComm` is `!Sync`;
    /// every request made on these slices completes before its method returns, except after
    /// a timeout, which poisons the communicator so that this is never called again.
    unsafe fn words(&self) -> (&'static mut [u64], &'static mut [u64]) {
        (
            std::slice::from_raw_parts_mut(self.send_words, CALL_WORDS),
            std::slice::from_raw_parts_mut(self.recv_words, self.recv_len),
        )
    }

    /// Polls `req` until it completes or the timeout passes (then the communicator is
    /// poisoned and the request abandoned: MPI may still write its buffers, which stay
    /// allocated).
    fn finish<D: ?Sized>(
        &self,
        op: &'static str,
        mut req: Request<'static, D, StaticScope>,
        waiting_for: &str,
    ) -> Result<()> {
        let start = Instant::now();
        loop {
            match req.test() {
                Ok(_) => return Ok(()),
                Err(pending) => req = pending,
            }
            let waited = start.elapsed();
            if waited >= self.timeout {
                // Dropping an incomplete request panics; leaving it is what MPI allows.
                std::mem::forget(req);
                let why = format!(
                    "rank {} waited {:?} for {waiting_for}; the communicator is unusable now",
                    self.rank(),
                    self.timeout
                );
                *self.poisoned.borrow_mut() = Some(why.clone());
                return Err(Error::Collective { op, reason: why });
            }
            if waited < Duration::from_millis(2) {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Every rank's call, in rank order, bounded by the timeout; then errors unless they
    /// agree. A rank whose own checks failed posts an empty call and returns its error.
    fn exchange(&self, op: &'static str, mine: &Result<Call>) -> Result<()> {
        self.check_poisoned(op)?;
        // SAFETY: see `words`; the request below completes or poisons before we return.
        let (send, recv) = unsafe { self.words() };
        send.copy_from_slice(&match mine {
            Ok(c) => c.encode(),
            Err(_) => [0; CALL_WORDS],
        });
        let req = self
            .world
            .immediate_all_gather_into(StaticScope, &*send, &mut *recv);
        self.finish(op, req, "the other ranks to join the call")?;
        if let Err(e) = mine {
            return Err(e.clone());
        }
        // SAFETY: see `words`; the request that took the earlier pair has completed.
        let (_, recv) = unsafe { self.words() };
        let calls: Vec<Option<Call>> = recv
            .chunks_exact(CALL_WORDS)
            .map(|w| Call::decode(w.try_into().expect("CALL_WORDS words")))
            .collect();
        agree(op, &calls)
    }

    /// A mean is MPI's sum divided by the world size.
    fn finish_mean(&self, op: ReduceOp, sums: &mut [f32]) {
        if op == ReduceOp::Mean {
            let w = self.world_size() as f32;
            sums.iter_mut().for_each(|v| *v /= w);
        }
    }

    fn checked_count(op: &'static str, n: usize) -> Result<()> {
        if i32::try_from(n).is_err() {
            return Err(Error::invalid(
                op,
                format!("MPI moves at most 2^31 - 1 elements per call; this one has {n}"),
            ));
        }
        Ok(())
    }
}

impl Drop for MpiComm {
    fn drop(&mut self) {
        if self.poisoned.get_mut().is_none() {
            // SAFETY: both came from `leak` with these lengths, and no request holds them
            // (the communicator is not poisoned, so every request completed).
            unsafe {
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    self.send_words,
                    CALL_WORDS,
                )));
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    self.recv_words,
                    self.recv_len,
                )));
            }
        }
    }
}

fn system_op(op: ReduceOp) -> SystemOperation {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => SystemOperation::sum(),
        ReduceOp::Max => SystemOperation::max(),
    }
}

impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn world_size(&self) -> usize {
        self.world.size() as usize
    }

    fn engine(&self) -> &'static str {
        "mpi"
    }

    fn all_reduce(&self, tensor: &mut Tensor, op: ReduceOp) -> Result<()> {
        let name = "all_reduce";
        let mine = Call::new(name, Kind::AllReduce(op), tensor).and_then(|c| {
            tensor.check_writable(name, "tensor")?;
            Self::checked_count(name, tensor.numel())?;
            Ok(c)
        });
        self.exchange(name, &mine)?;
        if tensor.numel() == 0 {
            return Ok(());
        }
        let mut send = self.send_buf.borrow_mut();
        send.clear();
        if tensor.device() == crate::Device::Cpu && tensor.dtype() == crate::Dtype::F32 {
            // The tensor's own memory receives the result: one copy out, none back.
            let host = tensor.host_mut::<f32>();
            send.extend_from_slice(host);
            self.world.all_reduce_into(&send[..], host, system_op(op));
            self.finish_mean(op, host);
            return Ok(());
        }
        send.extend_from_slice(&call::stage(tensor)?);
        let mut out = self.recv_buf.borrow_mut();
        out.resize(send.len(), 0.0);
        self.world
            .all_reduce_into(&send[..], &mut out[..], system_op(op));
        self.finish_mean(op, &mut out);
        call::unstage_into(name, tensor, &out)
    }

    fn all_gather(&self, tensor: &Tensor) -> Result<Tensor> {
        let name = "all_gather";
        let dims = call::gathered_dims(name, tensor.dims(), self.world_size());
        let mine = Call::new(name, Kind::AllGather, tensor).and_then(|c| {
            let d = dims.as_ref().map_err(Clone::clone)?;
            Self::checked_count(name, d.iter().product())?;
            Ok(c)
        });
        self.exchange(name, &mine)?;
        let data = call::stage(tensor)?;
        let mut out = vec![0f32; data.len() * self.world_size()];
        self.world.all_gather_into(&data[..], &mut out[..]);
        call::unstage(tensor.device(), &dims?, tensor.dtype(), &out)
    }

    fn reduce_scatter(&self, tensor: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let name = "reduce_scatter";
        let dims = call::scattered_dims(name, tensor.dims(), self.world_size());
        let mine = Call::new(name, Kind::ReduceScatter(op), tensor).and_then(|c| {
            dims.as_ref().map_err(Clone::clone)?;
            Self::checked_count(name, tensor.numel())?;
            Ok(c)
        });
        self.exchange(name, &mine)?;
        let data = call::stage(tensor)?;
        let mut out = vec![0f32; data.len() / self.world_size()];
        self.world
            .reduce_scatter_block_into(&data[..], &mut out[..], system_op(op));
        self.finish_mean(op, &mut out);
        call::unstage(tensor.device(), &dims?, tensor.dtype(), &out)
    }

    fn broadcast(&self, tensor: &mut Tensor, root: usize) -> Result<()> {
        let name = "broadcast";
        let mine = Call::new(name, Kind::Broadcast { root }, tensor).and_then(|c| {
            call::check_rank(name, "root", root, self.world_size())?;
            tensor.check_writable(name, "tensor")?;
            Self::checked_count(name, tensor.numel())?;
            Ok(c)
        });
        self.exchange(name, &mine)?;
        let mut data = if self.rank() == root {
            call::stage(tensor)?
        } else {
            vec![0f32; tensor.numel()]
        };
        self.world
            .process_at_rank(root as i32)
            .broadcast_into(&mut data[..]);
        if self.rank() == root {
            return Ok(());
        }
        call::unstage_into(name, tensor, &data)
    }

    fn send(&self, tensor: &Tensor, peer: usize) -> Result<()> {
        let name = "send";
        self.check_poisoned(name)?;
        let call =
            call::point_to_point(name, tensor, (self.rank(), peer, self.world_size()), true)?;
        Self::checked_count(name, tensor.numel())?;
        let data = call::stage(tensor)?;
        let target = self.world.process_at_rank(peer as i32);
        // SAFETY: see `words`; both requests complete or poison before we return.
        let (send, recv) = unsafe { self.words() };
        send.copy_from_slice(&call.encode());
        let req = target.immediate_send_with_tag(StaticScope, &*send, TAG_CALL);
        self.finish(name, req, &format!("rank {peer} to receive"))?;
        let verdict = &mut recv[..1];
        let req = target.immediate_receive_into_with_tag(StaticScope, verdict, TAG_VERDICT);
        self.finish(name, req, &format!("rank {peer}'s answer"))?;
        // SAFETY: see `words`; the requests that took the earlier pair have completed.
        let (_, recv) = unsafe { self.words() };
        if recv[0] != 1 {
            return Err(Error::Collective {
                op: name,
                reason: format!(
                    "rank {peer} receives into another shape or dtype than the {:?} {} sent",
                    tensor.dims(),
                    tensor.dtype()
                ),
            });
        }
        target.send_with_tag(&data[..], TAG_DATA);
        Ok(())
    }

    fn recv(&self, tensor: &mut Tensor, peer: usize) -> Result<()> {
        let name = "recv";
        self.check_poisoned(name)?;
        let expected =
            call::point_to_point(name, tensor, (self.rank(), peer, self.world_size()), false)?;
        let source = self.world.process_at_rank(peer as i32);
        // SAFETY: see `words`; both requests complete or poison before we return.
        let (_, recv) = unsafe { self.words() };
        let got = &mut recv[..CALL_WORDS];
        let req = source.immediate_receive_into_with_tag(StaticScope, got, TAG_CALL);
        self.finish(name, req, &format!("rank {peer} to send"))?;
        // SAFETY: see `words`; the request that took the earlier pair has completed.
        let (send, recv) = unsafe { self.words() };
        let sent = Call::decode(recv[..CALL_WORDS].try_into().expect("CALL_WORDS words"));
        let accepted = sent.as_ref() == Some(&expected);
        send[0] = u64::from(accepted);
        let req = source.immediate_send_with_tag(StaticScope, &send[..1], TAG_VERDICT);
        self.finish(name, req, &format!("rank {peer} to take the answer"))?;
        if !accepted {
            return Err(Error::Collective {
                op: name,
                reason: match sent {
                    Some(c) => format!(
                        "rank {peer} sent {:?} {} but rank {} receives into {:?} {}",
                        c.dims,
                        c.dtype,
                        self.rank(),
                        tensor.dims(),
                        tensor.dtype()
                    ),
                    None => format!("rank {peer} sent something that is not a tensor"),
                },
            });
        }
        let mut data = vec![0f32; tensor.numel()];
        source.receive_into_with_tag(&mut data[..], TAG_DATA);
        call::unstage_into(name, tensor, &data)
    }

    fn barrier(&self) -> Result<()> {
        let call = Call {
            kind: Kind::Barrier,
            dtype: crate::Dtype::F32,
            dims: Vec::new(),
        };
        self.exchange("barrier", &Ok(call))
    }
}
