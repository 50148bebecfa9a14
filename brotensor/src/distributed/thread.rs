//! The in-process engine: ranks are threads sharing one board. Each collective posts every
//! rank's call and host copy on the board, meets at a barrier, checks that the calls agree,
//! then works on the posted copies: an all-reduce reduces one slice per rank (each slice
//! computed once, so every rank gets the same bits) and gathers the slices.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::call::{self, agree, Call, Kind};
use super::{Communicator, ReduceOp, DEFAULT_TIMEOUT};
use crate::{Error, Result, Tensor};

/// One rank of a world of threads made by [`thread_group`]. Move each to its own thread;
/// every rank must make the same collective calls in the same order.
pub struct ThreadComm {
    rank: usize,
    group: Arc<Group>,
    timeout: Duration,
    /// Collective calls made so far: posts alternate between two boards by its parity, so a
    /// fast rank's next post never overwrites a post a slow rank has yet to read.
    calls: std::cell::Cell<usize>,
    /// This rank's reduced slice of an all-reduce, and the host copy of a tensor that is not
    /// CPU F32; kept between calls, so large buffers are not allocated (and faulted in) anew.
    scratch: RefCell<Vec<f32>>,
    staging: RefCell<Vec<f32>>,
}

/// `world` connected ranks, rank `r` at index `r`, with the [`DEFAULT_TIMEOUT`]. Errors for
/// a world of zero ranks.
pub fn thread_group(world: usize) -> Result<Vec<ThreadComm>> {
    if world == 0 {
        return Err(Error::invalid(
            "thread_group",
            "a world needs at least one rank",
        ));
    }
    let group = Arc::new(Group {
        world,
        passed: AtomicU64::new(0),
        board: Mutex::new(Board {
            arrived: 0,
            generation: 0,
            poisoned: None,
            posts: [vec![None; world], vec![None; world]],
            buffers: vec![HostSpan::default(); world],
        }),
        turn: Condvar::new(),
        mail: Mutex::new(Mail::default()),
        delivered: Condvar::new(),
    });
    Ok((0..world)
        .map(|rank| ThreadComm {
            rank,
            group: group.clone(),
            timeout: DEFAULT_TIMEOUT,
            calls: std::cell::Cell::new(0),
            scratch: RefCell::new(Vec::new()),
            staging: RefCell::new(Vec::new()),
        })
        .collect())
}

impl ThreadComm {
    /// This rank with another timeout for waiting on the other ranks.
    pub fn with_timeout(mut self, timeout: Duration) -> ThreadComm {
        self.timeout = timeout;
        self
    }
}

type Shared = Arc<Vec<f32>>;

/// How long a rank spins (yielding) at a meeting before it sleeps on the condition variable.
const SPIN: Duration = Duration::from_micros(50);

#[derive(Clone)]
struct Post {
    call: Call,
    data: Shared,
}

struct Board {
    arrived: usize,
    generation: u64,
    /// Why the group stopped (a rank timed out); every later call fails with it.
    poisoned: Option<String>,
    posts: [Vec<Option<Post>>; 2],
    /// Each rank's host buffer during an all-reduce (see `ThreadComm::all_reduce`).
    buffers: Vec<HostSpan>,
}

/// A rank's host buffer, shared by address for the length of one all-reduce.
#[derive(Clone, Copy, Default)]
struct HostSpan {
    addr: usize,
    len: usize,
}

struct Letter {
    id: u64,
    call: Call,
    data: Shared,
}

#[derive(Default)]
struct Mail {
    next_id: u64,
    /// Letters waiting, by (from, to).
    queues: HashMap<(usize, usize), VecDeque<Letter>>,
    /// The receiver's answer to each taken letter: accepted, or why not.
    verdicts: HashMap<u64, std::result::Result<(), String>>,
}

struct Group {
    world: usize,
    /// The board's generation, readable without the lock (for the spin in `meet`).
    passed: AtomicU64,
    board: Mutex<Board>,
    turn: Condvar,
    mail: Mutex<Mail>,
    delivered: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A rank that panicked mid-call leaves consistent data (every write is one assignment).
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ThreadComm {
    fn board(&self) -> MutexGuard<'_, Board> {
        lock(&self.group.board)
    }

    /// Waits until every rank has arrived here, or the timeout passes (then the group is
    /// poisoned and every waiting and later call fails).
    fn meet(&self, op: &'static str, b: MutexGuard<'_, Board>) -> Result<()> {
        self.meet_within(op, b, true)
    }

    /// [`ThreadComm::meet`]; `bounded: false` waits without a timeout and ignores the poison:
    /// for the meetings of an all-reduce's data phase, which every rank reaches once it has
    /// passed the first (they only copy memory), and which no rank may leave early while
    /// another still reads or writes its buffer.
    fn meet_within(
        &self,
        op: &'static str,
        mut b: MutexGuard<'_, Board>,
        bounded: bool,
    ) -> Result<()> {
        if let (true, Some(why)) = (bounded, &b.poisoned) {
            return Err(Error::Collective {
                op,
                reason: why.clone(),
            });
        }
        let generation = b.generation;
        b.arrived += 1;
        if b.arrived == self.group.world {
            b.arrived = 0;
            b.generation += 1;
            self.group.passed.store(b.generation, Ordering::Release);
            self.group.turn.notify_all();
            return Ok(());
        }
        // A short spin first: decode steps all-reduce small tensors many times per token,
        // and a condition-variable sleep and wake-up costs tens of microseconds.
        drop(b);
        let spin = Instant::now();
        while spin.elapsed() < SPIN {
            if self.group.passed.load(Ordering::Acquire) != generation {
                return Ok(());
            }
            std::thread::yield_now();
        }
        let mut b = self.board();
        let deadline = Instant::now() + self.timeout;
        loop {
            if b.generation != generation {
                return Ok(());
            }
            if let (true, Some(why)) = (bounded, &b.poisoned) {
                return Err(Error::Collective {
                    op,
                    reason: why.clone(),
                });
            }
            let now = Instant::now();
            if !bounded {
                b = self.group.turn.wait(b).unwrap_or_else(|p| p.into_inner());
                if b.generation != generation {
                    return Ok(());
                }
                continue;
            }
            if now >= deadline {
                let why = format!(
                    "rank {} waited {:?} for the other ranks ({} of {} arrived); the group \
                     is unusable now",
                    self.rank, self.timeout, b.arrived, self.group.world
                );
                b.poisoned = Some(why.clone());
                self.group.turn.notify_all();
                return Err(Error::Collective { op, reason: why });
            }
            b = self
                .group
                .turn
                .wait_timeout(b, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Posts this rank's call and data, meets the others, checks that all calls agree, and
    /// returns every rank's data in rank order. A rank
    /// whose own checks failed (`mine` is an error) still posts, so the others fail at once
    /// instead of waiting out the timeout; it returns its own error.
    fn exchange(&self, op: &'static str, mine: Result<(Call, Vec<f32>)>) -> Result<Vec<Shared>> {
        let parity = self.calls.get() % 2;
        self.calls.set(self.calls.get() + 1);
        let mut b = self.board();
        let (post, local_error) = match mine {
            Ok((call, data)) => (
                Some(Post {
                    call,
                    data: Arc::new(data),
                }),
                None,
            ),
            Err(e) => (None, Some(e)),
        };
        b.posts[parity][self.rank] = post;
        self.meet(op, b)?;
        if let Some(e) = local_error {
            return Err(e);
        }
        let b = self.board();
        let posts = &b.posts[parity];
        agree(
            op,
            &posts
                .iter()
                .map(|p| p.as_ref().map(|p| p.call.clone()))
                .collect::<Vec<_>>(),
        )?;
        let data = posts
            .iter()
            .map(|p| {
                p.as_ref()
                    .map(|p| p.data.clone())
                    .expect("agree saw every call")
            })
            .collect();
        Ok(data)
    }

    /// Reduces this rank's slice `lo..hi` of every rank's data.
    fn reduce_slice(op: ReduceOp, data: &[Shared], lo: usize, hi: usize) -> Vec<f32> {
        let parts: Vec<&[f32]> = data.iter().map(|d| &d[lo..hi]).collect();
        let mut out = vec![0.0; hi - lo];
        call::reduce(op, &parts, &mut out);
        out
    }
}

/// Rank `r`'s slice of `n` elements split over `world` ranks (the first `n % world` ranks
/// take one more).
fn slice_of(n: usize, world: usize, r: usize) -> (usize, usize) {
    let (q, rem) = (n / world, n % world);
    let lo = r * q + r.min(rem);
    (lo, lo + q + usize::from(r < rem))
}

impl Communicator for ThreadComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.group.world
    }

    fn engine(&self) -> &'static str {
        "threads"
    }

    /// In place over the ranks' host buffers, with no copy for a CPU F32 tensor (its own
    /// memory) and one reused host copy otherwise: the buffers' addresses are posted; each
    /// rank reduces its slice of all of them into its scratch (reads only); after a meeting,
    /// each writes its reduced slice into every rank's buffer (disjoint writes); after a last
    /// meeting, each owns its buffer again. Every slice is computed once, so all ranks get the
    /// same bits.
    fn all_reduce(&self, tensor: &mut Tensor, op: ReduceOp) -> Result<()> {
        let name = "all_reduce";
        let direct = tensor.device() == crate::Device::Cpu
            && tensor.dtype() == crate::Dtype::F32
            && tensor.numel() > 0;
        let mine = Call::new(name, Kind::AllReduce(op), tensor).and_then(|c| {
            tensor.check_writable(name, "tensor")?;
            if !direct {
                let staged = call::stage(tensor)?;
                let mut s = self.staging.borrow_mut();
                s.clear();
                s.extend_from_slice(&staged);
            }
            Ok((c, Vec::new()))
        });
        let mut staging = self.staging.borrow_mut();
        let span = match (&mine, direct) {
            (Err(_), _) => HostSpan::default(),
            (Ok(_), true) => {
                let host = tensor.host_mut::<f32>();
                HostSpan {
                    addr: host.as_mut_ptr() as usize,
                    len: host.len(),
                }
            }
            (Ok(_), false) => HostSpan {
                addr: staging.as_mut_ptr() as usize,
                len: staging.len(),
            },
        };
        self.board().buffers[self.rank] = span;
        self.exchange(name, mine)?;
        let world = self.group.world;
        let spans = self.board().buffers.clone();
        let (lo, hi) = slice_of(span.len, world, self.rank);
        let mut scratch = self.scratch.borrow_mut();
        scratch.resize(hi - lo, 0.0);
        {
            // SAFETY: every rank posted the address and length of a live buffer of `len`
            // f32 (its tensor's storage or its staging vector, neither touched by its owner
            // until the last meeting below), and all lengths are equal (the calls agreed on
            // the dims). Until the next meeting every rank only reads the buffers.
            let parts: Vec<&[f32]> = spans
                .iter()
                .map(|b| unsafe {
                    std::slice::from_raw_parts((b.addr as *const f32).add(lo), hi - lo)
                })
                .collect();
            call::reduce(op, &parts, &mut scratch);
        }
        self.meet_within(name, self.board(), false)?;
        for b in &spans {
            // SAFETY: as above; now each rank writes only its own slice `lo..hi` of each
            // buffer (the slices of different ranks are disjoint) and nobody reads them.
            let dst =
                unsafe { std::slice::from_raw_parts_mut((b.addr as *mut f32).add(lo), hi - lo) };
            dst.copy_from_slice(&scratch);
        }
        self.meet_within(name, self.board(), false)?;
        if direct {
            return Ok(());
        }
        call::unstage_into(name, tensor, &staging)
    }

    fn all_gather(&self, tensor: &Tensor) -> Result<Tensor> {
        let name = "all_gather";
        let dims = call::gathered_dims(name, tensor.dims(), self.group.world);
        let mine = Call::new(name, Kind::AllGather, tensor).and_then(|c| {
            dims.as_ref().map_err(Clone::clone)?;
            Ok((c, call::stage(tensor)?))
        });
        let data = self.exchange(name, mine)?;
        let dims = dims?;
        let out: Vec<f32> = data.iter().flat_map(|d| d.iter().copied()).collect();
        call::unstage(tensor.device(), &dims, tensor.dtype(), &out)
    }

    fn reduce_scatter(&self, tensor: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let name = "reduce_scatter";
        let dims = call::scattered_dims(name, tensor.dims(), self.group.world);
        let mine = Call::new(name, Kind::ReduceScatter(op), tensor).and_then(|c| {
            dims.as_ref().map_err(Clone::clone)?;
            Ok((c, call::stage(tensor)?))
        });
        let data = self.exchange(name, mine)?;
        let dims = dims?;
        let n = data[0].len() / self.group.world;
        let out = Self::reduce_slice(op, &data, self.rank * n, (self.rank + 1) * n);
        call::unstage(tensor.device(), &dims, tensor.dtype(), &out)
    }

    fn broadcast(&self, tensor: &mut Tensor, root: usize) -> Result<()> {
        let name = "broadcast";
        let mine = Call::new(name, Kind::Broadcast { root }, tensor).and_then(|c| {
            call::check_rank(name, "root", root, self.group.world)?;
            tensor.check_writable(name, "tensor")?;
            let data = if self.rank == root {
                call::stage(tensor)?
            } else {
                Vec::new()
            };
            Ok((c, data))
        });
        let data = self.exchange(name, mine)?;
        if self.rank == root {
            return Ok(());
        }
        call::unstage_into(name, tensor, &data[root])
    }

    fn send(&self, tensor: &Tensor, peer: usize) -> Result<()> {
        let name = "send";
        let call = call::point_to_point(name, tensor, (self.rank, peer, self.group.world), true)?;
        let data = Arc::new(call::stage(tensor)?);
        let mut mail = lock(&self.group.mail);
        let id = mail.next_id;
        mail.next_id += 1;
        mail.queues
            .entry((self.rank, peer))
            .or_default()
            .push_back(Letter { id, call, data });
        self.group.delivered.notify_all();
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(verdict) = mail.verdicts.remove(&id) {
                return verdict.map_err(|reason| Error::Collective { op: name, reason });
            }
            let now = Instant::now();
            if now >= deadline {
                if let Some(q) = mail.queues.get_mut(&(self.rank, peer)) {
                    q.retain(|l| l.id != id);
                }
                return Err(Error::Collective {
                    op: name,
                    reason: format!("rank {peer} did not receive within {:?}", self.timeout),
                });
            }
            mail = self
                .group
                .delivered
                .wait_timeout(mail, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn recv(&self, tensor: &mut Tensor, peer: usize) -> Result<()> {
        let name = "recv";
        let expected =
            call::point_to_point(name, tensor, (self.rank, peer, self.group.world), false)?;
        let mut mail = lock(&self.group.mail);
        let deadline = Instant::now() + self.timeout;
        let letter = loop {
            if let Some(l) = mail
                .queues
                .get_mut(&(peer, self.rank))
                .and_then(VecDeque::pop_front)
            {
                break l;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Collective {
                    op: name,
                    reason: format!("rank {peer} sent nothing within {:?}", self.timeout),
                });
            }
            mail = self
                .group
                .delivered
                .wait_timeout(mail, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        };
        let verdict = agree(name, &[Some(letter.call.clone()), Some(expected)]).map_err(|_| {
            format!(
                "rank {} sent {:?} {} but rank {} receives into {:?} {}",
                peer,
                letter.call.dims,
                letter.call.dtype,
                self.rank,
                tensor.dims(),
                tensor.dtype()
            )
        });
        mail.verdicts.insert(letter.id, verdict.clone());
        self.group.delivered.notify_all();
        drop(mail);
        verdict.map_err(|reason| Error::Collective { op: name, reason })?;
        call::unstage_into(name, tensor, &letter.data)
    }

    fn barrier(&self) -> Result<()> {
        let name = "barrier";
        let call = Call {
            kind: Kind::Barrier,
            dtype: crate::Dtype::F32,
            dims: Vec::new(),
        };
        self.exchange(name, Ok((call, Vec::new()))).map(|_| ())
    }
}
