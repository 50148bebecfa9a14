//! Streaming (non-temporal) stores for outputs larger than the caches.
//!
//! A plain store to a line that is not cached first reads that line from memory (a read for
//! ownership), so an op writing a large output moves three bytes for every two it needs,
//! where a copy (`rep movsb`, or streaming stores) moves two. Ops whose whole output is at
//! least [`STREAM_MIN_BYTES`] therefore write it with streaming stores, which skip that read
//! and bypass the caches; smaller outputs, which the next op will likely read from cache,
//! keep plain stores. Streaming stores are x86-64 only; elsewhere every store is plain.
//!
//! Streaming stores are weakly ordered: the thread that made them must run a store fence
//! before anyone reads the data. An op gets its permission to stream, a [`Streaming`], only
//! from [`streaming`]; the stores themselves need a [`Stream`], which only a [`Fence`]
//! lends. A `Fence` is a guard of the thread that made it (it is neither `Send` nor `Sync`,
//! and neither is the `Stream` it lends), and it fences that thread when dropped. Parallel
//! loops make one per rayon job (`for_each_init` / `map_init`), so a thread fences once per
//! job, not per row (fencing per written row stalled each row's end until its stores reached
//! memory, which cost row ops a third of their time), and no thread has to wait for pool
//! threads that are busy elsewhere.

#[cfg(target_arch = "x86_64")]
use crate::simd::{level, Level};

/// Output size in bytes from which ops write with streaming stores: half the 32 MiB
/// last-level cache of a typical server CPU, so an output this large would mostly be
/// evicted before the next op reads it anyway.
pub const STREAM_MIN_BYTES: usize = 16 << 20;

/// Whether an op writing `len` elements of `elem_bytes` bytes each should stream them.
pub fn should_stream(len: usize, elem_bytes: usize) -> bool {
    len.saturating_mul(elem_bytes) >= STREAM_MIN_BYTES
}

/// An op's permission to write with streaming stores (or not), valid inside the
/// [`streaming`] call that made it (its lifetime cannot leave that call). It can be shared
/// with the threads of a parallel loop; each turns it into a [`Fence`] of its own.
///
/// ```compile_fail
/// // A permission cannot outlive the call that made it.
/// let leaked = brotensor_cpu::stream::streaming(1 << 30, 4, |on| on);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Streaming<'scope> {
    on: bool,
    _scope: std::marker::PhantomData<fn(&'scope ()) -> &'scope ()>,
}

impl Streaming<'static> {
    /// No streaming: every [`Stream`] it lends is [`Stream::PLAIN`].
    pub const PLAIN: Self = Streaming {
        on: false,
        _scope: std::marker::PhantomData,
    };
}

impl<'scope> Streaming<'scope> {
    /// A guard for the calling thread: it lends the [`Stream`] that writers take and fences
    /// this thread's streaming stores when dropped.
    pub fn fence(self) -> Fence<'scope> {
        Fence {
            on: self.on,
            _thread: std::marker::PhantomData,
            _scope: std::marker::PhantomData,
        }
    }
}

/// The calling thread's streaming-store guard (see [`Streaming::fence`]). Not `Send`: the
/// thread that streams is the thread that fences.
///
/// ```compile_fail
/// fn send<T: Send>(_: T) {}
/// brotensor_cpu::stream::streaming(1 << 30, 4, |on| send(on.fence()));
/// ```
#[derive(Debug)]
pub struct Fence<'scope> {
    on: bool,
    /// A raw pointer makes the guard neither `Send` nor `Sync`.
    _thread: std::marker::PhantomData<*const ()>,
    _scope: std::marker::PhantomData<fn(&'scope ()) -> &'scope ()>,
}

impl Fence<'_> {
    /// The token writers take, borrowed from this guard (so it cannot outlive it, and like
    /// it cannot cross threads).
    pub fn stream(&self) -> Stream<'_> {
        Stream {
            on: self.on,
            _guard: std::marker::PhantomData,
        }
    }
}

impl Drop for Fence<'_> {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        if self.on {
            // SAFETY: SFENCE has no operands and is x86-64 baseline.
            unsafe { std::arch::x86_64::_mm_sfence() };
        }
    }
}

/// Whether the writers it is handed to may use streaming stores. A `Stream` that is on is
/// lent by a [`Fence`] of the current thread, which fences after it; [`Stream::PLAIN`] allows
/// plain stores only. Neither `Send` nor `Sync`.
///
/// ```compile_fail
/// fn send<T: Send>(_: T) {}
/// send(brotensor_cpu::stream::Stream::PLAIN);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Stream<'guard> {
    on: bool,
    _guard: std::marker::PhantomData<(*const (), &'guard ())>,
}

impl Stream<'static> {
    /// Plain stores only.
    pub const PLAIN: Self = Stream {
        on: false,
        _guard: std::marker::PhantomData,
    };
}

impl Stream<'_> {
    /// Whether [`copy_bytes_ahead`] prefetches its `next` slice with this stream (streaming
    /// is on, on x86-64): callers skip working out `next` otherwise.
    pub fn prefetches(&self) -> bool {
        self.on && cfg!(target_arch = "x86_64")
    }
}

/// Runs `f`, an op writing `len` elements of `elem_bytes` bytes, with a [`Streaming`]
/// permission that is on when [`should_stream`] says so. `f` makes a [`Fence`] on every
/// thread that writes (one per rayon job), so the output is complete and ordered once `f`
/// has returned and its guards are dropped.
pub fn streaming<R>(
    len: usize,
    elem_bytes: usize,
    f: impl for<'s> FnOnce(Streaming<'s>) -> R,
) -> R {
    streaming_if(should_stream(len, elem_bytes), f)
}

/// [`streaming`] with the decision made by the caller.
fn streaming_if<R>(on: bool, f: impl for<'s> FnOnce(Streaming<'s>) -> R) -> R {
    f(Streaming {
        on,
        _scope: std::marker::PhantomData,
    })
}

/// Parallel loops whose bodies write with streaming stores: each rayon job makes its own
/// [`Fence`] (fencing its thread at the job's end) and hands its [`Stream`] to the body.
pub trait StreamedIter: rayon::iter::ParallelIterator {
    /// `for_each`, with the job's [`Stream`] as the body's first argument.
    fn for_each_streamed<F>(self, streaming: Streaming<'_>, body: F)
    where
        F: Fn(Stream<'_>, Self::Item) + Sync + Send,
    {
        self.for_each_init(
            || streaming.fence(),
            |fence, item| body(fence.stream(), item),
        )
    }

    /// `for_each_init`: `init` makes per-job scratch, handed to the body after the
    /// [`Stream`].
    fn for_each_streamed_init<T, I, F>(self, streaming: Streaming<'_>, init: I, body: F)
    where
        I: Fn() -> T + Sync + Send,
        F: Fn(Stream<'_>, &mut T, Self::Item) + Sync + Send,
    {
        self.for_each_init(
            || (streaming.fence(), init()),
            |(fence, scratch), item| body(fence.stream(), scratch, item),
        )
    }

    /// `map`, with the job's [`Stream`] as the body's first argument.
    fn map_streamed<'s, R, F>(
        self,
        streaming: Streaming<'s>,
        body: F,
    ) -> impl rayon::iter::ParallelIterator<Item = R>
    where
        R: Send,
        F: Fn(Stream<'_>, Self::Item) -> R + Sync + Send,
    {
        self.map_init(
            move || streaming.fence(),
            move |fence, item| body(fence.stream(), item),
        )
    }
}

impl<P: rayon::iter::ParallelIterator> StreamedIter for P {}

/// Bytes in a cache line, the unit a streaming store should write whole (the streaming
/// stores are x86-64's).
#[cfg(target_arch = "x86_64")]
const LINE_BYTES: usize = 64;

/// Floats in a cache line.
#[cfg(target_arch = "x86_64")]
const LINE_FLOATS: usize = LINE_BYTES / 4;

/// Fills `dst` through `fill(at, out)`, which must write the values of
/// `dst[at..at + out.len()]` into `out`. Without `stream`, `fill(0, dst)` writes `dst`
/// directly. With `stream` on, the partial lines at either end are filled in place and each
/// whole 64-byte line of `dst` is filled into a 16-float local and written by one
/// streaming store (AVX-512; two or four narrower ones on the other tiers); [`streaming`]
/// fences them.
///
/// Inline into a [`wide`](crate::simd::wide) body, with an `#[inline(always)]` `fill` that
/// loops with `for` over slices cut to `out.len()` (so a line's loop has a constant trip
/// count and compiles to straight vector code).
#[inline(always)]
pub fn write_blocks(stream: Stream, dst: &mut [f32], mut fill: impl FnMut(usize, &mut [f32])) {
    #[cfg(target_arch = "x86_64")]
    if stream.on {
        // SAFETY: `level` is the widest tier this CPU runs.
        unsafe { write_lines_streamed(level(), dst, fill) };
        return;
    }
    let _ = stream;
    fill(0, dst);
}

/// [`write_blocks`] with the streaming stores of `tier`.
///
/// # Safety
/// The CPU must run `tier`'s instructions (`tier <= level()`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn write_lines_streamed(
    tier: Level,
    dst: &mut [f32],
    mut fill: impl FnMut(usize, &mut [f32]),
) {
    use std::arch::x86_64::*;
    let n = dst.len();
    let head = dst.as_ptr().align_offset(LINE_BYTES).min(n);
    let tail = head + (n - head) / LINE_FLOATS * LINE_FLOATS;
    fill(0, &mut dst[..head]);
    let body = &mut dst[head..tail];
    // One loop per tier, so that a line is computed in that tier's registers. With the
    // tier tested inside the loop, LLVM computed every line in the 128-bit pieces the
    // baseline store takes and reassembled them for the wider stores: four times the
    // arithmetic of one 512-bit line, plus the shuffles.
    //
    // SAFETY (each store): `stream_lines` passes the start of one whole 16-float line
    // of `dst`, on a 64-byte boundary (`head` is `dst`'s offset to the first one), and
    // a 16-float local; the caller guarantees the CPU runs `tier`'s instructions.
    match tier {
        Level::Avx512 => stream_lines(body, head, &mut fill, |d, s| unsafe {
            _mm512_stream_ps(d, _mm512_loadu_ps(s))
        }),
        Level::Avx2 => stream_lines(body, head, &mut fill, |d, s| unsafe {
            _mm256_stream_ps(d, _mm256_loadu_ps(s));
            _mm256_stream_ps(d.add(8), _mm256_loadu_ps(s.add(8)));
        }),
        Level::Baseline => stream_lines(body, head, &mut fill, |d, s| unsafe {
            for q in 0..4 {
                _mm_stream_ps(d.add(4 * q), _mm_loadu_ps(s.add(4 * q)));
            }
        }),
    }
    fill(tail, &mut dst[tail..]);
}

/// Fills each 16-float line of `body` (whole lines, starting `offset` floats into the
/// output `fill` describes) into a local and writes it with `store(line, local)`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn stream_lines(
    body: &mut [f32],
    offset: usize,
    fill: &mut impl FnMut(usize, &mut [f32]),
    store: impl Fn(*mut f32, *const f32),
) {
    for (l, out) in body.chunks_exact_mut(LINE_FLOATS).enumerate() {
        let mut line = [0.0f32; LINE_FLOATS];
        fill(offset + l * LINE_FLOATS, &mut line);
        store(out.as_mut_ptr(), line.as_ptr());
    }
}

/// `dst[j] = f(src[j])` for every `j`, through [`write_blocks`] (streamed when `stream` is on).
/// Inline into a [`wide`](crate::simd::wide) body with an `#[inline(always)]` `f`. Panics if
/// the lengths differ.
#[inline(always)]
pub fn write_map(stream: Stream, dst: &mut [f32], src: &[f32], f: impl Fn(f32) -> f32) {
    assert_eq!(dst.len(), src.len(), "write_map: length mismatch");
    write_blocks(
        stream,
        dst,
        #[inline(always)]
        |at, out| {
            let end = at + out.len();
            for (o, &v) in out.iter_mut().zip(&src[at..end]) {
                *o = f(v);
            }
        },
    );
}

/// `dst[j] = f(a[j], b[j])` for every `j`, through [`write_blocks`] (streamed when `stream`
/// is on). Inline into a [`wide`](crate::simd::wide) body with an `#[inline(always)]` `f`.
/// Panics if the lengths differ.
#[inline(always)]
pub fn write_zip(
    stream: Stream,
    dst: &mut [f32],
    (a, b): (&[f32], &[f32]),
    f: impl Fn(f32, f32) -> f32,
) {
    assert!(
        a.len() == dst.len() && b.len() == dst.len(),
        "write_zip: length mismatch"
    );
    write_blocks(
        stream,
        dst,
        #[inline(always)]
        |at, out| {
            let end = at + out.len();
            for (o, (&u, &v)) in out.iter_mut().zip(a[at..end].iter().zip(&b[at..end])) {
                *o = f(u, v);
            }
        },
    );
}

/// `dst.copy_from_slice(src)`, with streaming stores for every whole 64-byte line of `dst`
/// when `stream` is on (x86-64). Panics if the lengths differ.
pub fn copy_bytes(stream: Stream, dst: &mut [u8], src: &[u8]) {
    copy_bytes_ahead(stream, dst, src, &[]);
}

/// [`copy_bytes`] that also prefetches `next`, the source the caller copies after this one,
/// one line for every line copied, when `stream` is on (x86-64). A gather reads its rows in
/// an order the hardware prefetcher cannot guess, so each row's first lines would otherwise
/// arrive only when asked for; with the next row on its way while this one is copied, a
/// gather of shuffled 16 KiB rows goes from about 0.65 to 0.8-0.9 of a sequential copy's
/// speed on the development VM. A prefetch never faults, so `next` may be any slice.
/// Panics if `dst` and `src` differ in length.
pub fn copy_bytes_ahead(stream: Stream, dst: &mut [u8], src: &[u8], next: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_bytes: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if stream.on {
        use std::arch::x86_64::{
            __m128i, _mm_loadu_si128, _mm_prefetch, _mm_stream_si128, _MM_HINT_T0,
        };
        let n = dst.len();
        let head = dst.as_ptr().align_offset(LINE_BYTES).min(n);
        let body = (n - head) / LINE_BYTES * LINE_BYTES;
        dst[..head].copy_from_slice(&src[..head]);
        let (d, s) = (&mut dst[head..head + body], &src[head..head + body]);
        let lines = d
            .chunks_exact_mut(LINE_BYTES)
            .zip(s.chunks_exact(LINE_BYTES));
        for (i, (d, s)) in lines.enumerate() {
            if let Some(ahead) = next.get(i * LINE_BYTES) {
                // SAFETY: PREFETCHT0 (SSE, x86-64 baseline) neither faults nor writes; the
                // address is an element of `next` anyway.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(ahead).cast()) };
            }
            for (d, s) in d.chunks_exact_mut(16).zip(s.chunks_exact(16)) {
                // SAFETY: `d` and `s` are 16 bytes each (chunks_exact); `d` starts at a
                // multiple of 16 past a 64-byte boundary, so it is 16-byte aligned as MOVNTDQ
                // requires; the load is unaligned. SSE2 is x86-64 baseline.
                unsafe {
                    _mm_stream_si128(
                        d.as_mut_ptr().cast::<__m128i>(),
                        _mm_loadu_si128(s.as_ptr().cast::<__m128i>()),
                    )
                };
            }
        }
        dst[head + body..].copy_from_slice(&src[head + body..]);
        return;
    }
    let _ = (stream, next);
    dst.copy_from_slice(src);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetching_copies_equal_plain_ones_whatever_comes_next() {
        let src: Vec<u8> = (0..700u32).map(|i| (i * 7 % 251) as u8).collect();
        for start in [0, 1, 15, 63, 64, 65] {
            for len in [0, 1, 63, 64, 65, 300, 600] {
                for next_len in [0, 1, 64, 200, 699] {
                    let next = &src[src.len() - next_len..];
                    let mut streamed = vec![0u8; 700];
                    streaming_if(true, |on| {
                        copy_bytes_ahead(
                            on.fence().stream(),
                            &mut streamed[start..start + len],
                            &src[..len],
                            next,
                        )
                    });
                    let mut plain = vec![0u8; 700];
                    plain[start..start + len].copy_from_slice(&src[..len]);
                    assert_eq!(streamed, plain, "start {start} len {len} next {next_len}");
                }
            }
        }
    }

    #[test]
    fn streamed_writes_equal_plain_ones_at_every_alignment_and_length() {
        // Sub-slices starting at every float offset within a line, with lengths around the
        // line size, exercise the head, the aligned body and the tail (and their absence).
        let backing_len = 600;
        for start in 0..17 {
            for len in [0, 1, 3, 15, 16, 17, 31, 32, 33, 100, 257, backing_len - 20] {
                let mut a = vec![-1.0f32; backing_len];
                let mut b = a.clone();
                let fill = |at: usize, block: &mut [f32]| {
                    for (k, v) in block.iter_mut().enumerate() {
                        *v = (at + k) as f32 * 0.5 + start as f32;
                    }
                };
                write_blocks(Stream::PLAIN, &mut b[start..start + len], fill);
                streaming_if(true, |on| {
                    write_blocks(on.fence().stream(), &mut a[start..start + len], fill)
                });
                assert_eq!(a, b, "start {start} len {len}");
                assert!(a[..start].iter().all(|&v| v == -1.0));
                assert!(a[start + len..].iter().all(|&v| v == -1.0));
                // Every narrower tier's stores too (the CPU runs them all).
                #[cfg(target_arch = "x86_64")]
                for tier in [Level::Baseline, Level::Avx2, Level::Avx512] {
                    if tier <= level() {
                        let mut t = vec![-1.0f32; backing_len];
                        let t_part = &mut t[start..start + len];
                        // SAFETY: `tier` is at most the tier this CPU runs.
                        unsafe { write_lines_streamed(tier, t_part, fill) };
                        streaming_if(true, |on| drop(on.fence()));
                        assert_eq!(t, b, "{tier:?} start {start} len {len}");
                    }
                }
            }
        }
    }

    #[test]
    fn streamed_copies_equal_plain_ones_at_every_alignment_and_length() {
        let src: Vec<u8> = (0..700u32).map(|i| (i * 31 % 251) as u8).collect();
        for d0 in 0..65 {
            for s0 in [0, 1, 7, 16] {
                for len in [0, 1, 15, 16, 63, 64, 65, 129, 600] {
                    let mut a = vec![0xAAu8; 700];
                    let mut b = a.clone();
                    let (a_part, from) = (&mut a[d0..d0 + len], &src[s0..s0 + len]);
                    streaming_if(true, |on| copy_bytes(on.fence().stream(), a_part, from));
                    copy_bytes(Stream::PLAIN, &mut b[d0..d0 + len], &src[s0..s0 + len]);
                    assert_eq!(a, b, "dst {d0} src {s0} len {len}");
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "length mismatch")]
    fn copies_of_unequal_lengths_panic_before_any_store() {
        streaming_if(true, |on| {
            copy_bytes(on.fence().stream(), &mut [0u8; 64], &[0u8; 63])
        });
    }

    #[test]
    fn ops_write_the_same_bits_streamed_as_plain() {
        // A matrix just over the threshold is written by streaming stores; the same rows
        // in small batches are written plainly. The row math is the same, so the bits are.
        let cols = 1000; // rows of 4000 bytes: lines straddle rows, unaligned heads and tails
        let rows = STREAM_MIN_BYTES / (4 * cols) + 3;
        let x: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919) % 2003) as f32 * 0.01 - 10.0)
            .collect();
        let gamma: Vec<f32> = (0..cols).map(|j| 0.5 + j as f32 * 1e-3).collect();
        let beta: Vec<f32> = (0..cols).map(|j| j as f32 * -1e-3).collect();
        type RowOp<'a> = Box<dyn Fn(&[f32], &mut [f32]) + 'a>;
        let ops: Vec<(&str, RowOp)> = vec![
            (
                "softmax",
                Box::new(|x, y| crate::norm::softmax_rows(x, cols, None, y)),
            ),
            (
                "layernorm",
                Box::new(|x, y| {
                    crate::norm::layernorm_rows(x, &gamma, &beta, 1e-5, y, None, None, None)
                }),
            ),
            (
                "rms_norm",
                Box::new(|x, y| crate::norm::rms_norm_rows(x, &gamma, 1e-6, y)),
            ),
            (
                "gelu",
                Box::new(|x, y| crate::elementwise::map_unary(x, y, crate::activation::gelu_with)),
            ),
            (
                "axpby",
                Box::new(|x, y| {
                    crate::elementwise::map_binary(x, x, y, |_, a, b| {
                        crate::elementwise::axpby(a, b, 2.0, -0.5)
                    })
                }),
            ),
        ];
        assert!(should_stream(x.len(), 4));
        for (name, op) in &ops {
            let mut whole = vec![f32::NAN; x.len()];
            op(&x, &mut whole);
            let mut batched = vec![f32::NAN; x.len()];
            for (xb, yb) in x.chunks(64 * cols).zip(batched.chunks_mut(64 * cols)) {
                assert!(!should_stream(yb.len(), 4));
                op(xb, yb);
            }
            let same = whole
                .iter()
                .zip(&batched)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{name}: streamed output differs from the plain one");
        }
    }

    #[test]
    fn a_streamed_op_finishes_while_a_pool_thread_is_blocked_elsewhere() {
        // One of two pool threads waits on a channel; a large streamed copy in that pool
        // must still finish (a fence broadcast to every pool thread would wait for ever).
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let (started, wait_started) = std::sync::mpsc::channel::<()>();
        pool.spawn(move || {
            started.send(()).unwrap();
            blocked.recv().unwrap();
        });
        wait_started.recv().unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        let src: Vec<u8> = (0..STREAM_MIN_BYTES + 4096).map(|i| i as u8).collect();
        std::thread::spawn(move || {
            let mut dst = vec![0u8; src.len()];
            pool.install(|| crate::cast::copy(&mut dst, &src));
            done.send(dst == src).unwrap();
        });
        let ok = finished.recv_timeout(std::time::Duration::from_secs(60));
        release.send(()).unwrap();
        assert_eq!(
            ok,
            Ok(true),
            "the streamed copy did not finish while a thread was blocked"
        );
    }

    #[test]
    fn the_threshold_is_in_bytes_and_saturates() {
        assert!(!should_stream(STREAM_MIN_BYTES / 4 - 1, 4));
        assert!(should_stream(STREAM_MIN_BYTES / 4, 4));
        assert!(should_stream(usize::MAX, 2));
    }
}
