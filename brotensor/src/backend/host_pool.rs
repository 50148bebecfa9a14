//! Recycled host buffers. A fresh multi-MiB buffer costs more in page faults than the
//! arithmetic that fills it, so the CPU backend keeps freed large buffers in size classes and
//! hands them out again, and asks the kernel for transparent huge pages on new ones.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::{Error, Result};

/// Buffers smaller than this come straight from the allocator and are not pooled.
const POOL_MIN_BYTES: usize = 1 << 20;
/// At most this many bytes wait in the pool; buffers beyond it are freed.
const POOL_MAX_BYTES: usize = 1 << 30;

struct Pool {
    free: BTreeMap<usize, Vec<Vec<u64>>>,
    bytes: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    free: BTreeMap::new(),
    bytes: 0,
});

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    // A panic while holding the lock cannot leave the map inconsistent: keep using it.
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The size class of a request: rounded up to a quarter of its power of two, so a pooled
/// buffer wastes at most 25%. `None` when the class does not fit in `usize`.
pub(crate) fn size_class(bytes: usize) -> Option<usize> {
    let step = if bytes < POOL_MIN_BYTES {
        8
    } else {
        1usize << (usize::BITS - 1 - bytes.leading_zeros() - 2)
    };
    bytes.div_ceil(step).checked_mul(step)
}

/// A buffer of `size_class(bytes)` bytes (as `u64` words); contents undefined. Errors (naming
/// `op`) instead of aborting when the host cannot allocate it.
pub(crate) fn take(op: &'static str, bytes: usize) -> Result<Vec<u64>> {
    let class = size_class(bytes).ok_or_else(|| too_large(op, bytes))?;
    if class >= POOL_MIN_BYTES {
        let mut p = pool();
        if let Some(buf) = p.free.get_mut(&class).and_then(Vec::pop) {
            p.bytes -= class;
            return Ok(buf);
        }
    }
    fresh(class / 8).ok_or_else(|| too_large(op, bytes))
}

fn too_large(op: &'static str, bytes: usize) -> Error {
    Error::invalid(op, format!("cannot allocate {bytes} bytes of host memory"))
}

/// Returns a buffer to the pool (or frees it when the pool is full or it is small).
pub(crate) fn give(buf: Vec<u64>) {
    let class = buf.len() * 8;
    if class < POOL_MIN_BYTES {
        return;
    }
    let mut p = pool();
    if p.bytes + class <= POOL_MAX_BYTES {
        p.bytes += class;
        p.free.entry(class).or_default().push(buf);
    }
}

/// Frees every pooled buffer.
pub(crate) fn clear() {
    let mut p = pool();
    p.free.clear();
    p.bytes = 0;
}

/// Bytes waiting in the pool.
#[cfg(feature = "internals")]
fn pooled_bytes() -> usize {
    pool().bytes
}

/// A new zeroed buffer of `words` words, or `None` when the allocator refuses; large ones
/// are advised to use huge pages before their pages are first touched.
fn fresh(words: usize) -> Option<Vec<u64>> {
    let mut v: Vec<u64> = Vec::new();
    v.try_reserve_exact(words).ok()?;
    let _ = advise_huge_pages(&v, words);
    v.resize(words, 0);
    Some(v)
}

/// Asks for transparent huge pages on the whole 2 MiB pages inside `v`'s first `words`
/// words of capacity. Returns madvise's result (0, or -1 when the kernel refuses, e.g. THP
/// disabled; a refusal is harmless), or 0 when there is no whole huge page to advise.
#[cfg(target_os = "linux")]
fn advise_huge_pages(v: &Vec<u64>, words: usize) -> i32 {
    const HUGE: usize = 2 << 20;
    assert!(words <= v.capacity(), "advise past the allocation");
    let start = v.as_ptr() as usize;
    let end = start + words * 8;
    let aligned = start.div_ceil(HUGE) * HUGE;
    if end < aligned + HUGE {
        return 0;
    }
    let len = (end - aligned) / HUGE * HUGE;
    // SAFETY: [aligned, aligned + len) lies inside the vector's allocation (checked above:
    // `aligned >= start`, `aligned + len <= end <= start + capacity`), which the caller owns;
    // MADV_HUGEPAGE only changes how the kernel backs those pages, never their contents.
    unsafe { libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE) }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_v: &Vec<u64>, _words: usize) -> i32 {
    0
}

#[cfg(feature = "internals")]
/// The module's internal checks, run by the workspace's tests through
/// `brotensor::internals` (so the library is not compiled again as its own test harness).
pub mod checks {
    use super::*;

    pub fn classes_bound_the_waste() {
        assert_eq!(size_class(3), Some(8));
        assert_eq!(size_class(1 << 20), Some(1 << 20));
        assert_eq!(size_class((1 << 20) + 1), Some((1 << 20) + (1 << 18)));
        assert_eq!(size_class(usize::MAX), None);
        assert_eq!(size_class(usize::MAX - 3), None);
        for bytes in [1 << 20, 3_000_000, 64 << 20, (64 << 20) + 7] {
            let c = size_class(bytes).unwrap();
            assert!(c >= bytes && c <= bytes + bytes / 4 + 8, "{bytes} -> {c}");
        }
    }

    #[cfg(target_os = "linux")]
    pub fn huge_page_advice_stays_inside_the_allocation() {
        let v: Vec<u64> = Vec::with_capacity(3 << 20);
        let rc = advise_huge_pages(&v, 3 << 20);
        // ENOMEM would mean the range left the mapping; EINVAL is a kernel without THP.
        let errno = std::io::Error::last_os_error().raw_os_error();
        assert!(
            rc == 0 || errno == Some(libc::EINVAL),
            "madvise: {rc} {errno:?}"
        );
        let past = std::panic::catch_unwind(|| advise_huge_pages(&v, (3 << 20) + 1));
        assert!(past.is_err(), "advising past the capacity must be refused");
        let mut w = fresh(1 << 20).unwrap();
        w.iter_mut().enumerate().for_each(|(i, x)| *x = i as u64);
        assert!(w.iter().enumerate().all(|(i, &x)| x == i as u64));
    }

    pub fn freed_buffers_are_reused_and_sized_by_class() {
        let a = take("test", 5 << 20).unwrap();
        assert_eq!(Some(a.len() * 8), size_class(5 << 20));
        let ptr = a.as_ptr();
        give(a);
        let b = take("test", (5 << 20) - 100).unwrap(); // same class
        assert_eq!(b.as_ptr(), ptr, "the pooled buffer comes back");
        give(b);
        clear();
        assert_eq!(pooled_bytes(), 0);
    }

    pub fn absurd_sizes_are_errors_not_aborts() {
        // 2^60 bytes: the size class exists but no allocator can provide it.
        for bytes in [1usize << 60, usize::MAX - 7, usize::MAX] {
            let e = take("alloc", bytes).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("brotensor: alloc: cannot allocate"),
                "{e}"
            );
        }
    }
}
