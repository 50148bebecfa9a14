//! Launch geometry and validation shared by every kernel.

use cubecl::prelude::*;
use cubecl::server::Handle;

/// The widest vector (elements per load) a kernel is launched with.
pub const MAX_VECTOR_SIZE: usize = 4;

/// Units per cube for one-dimensional element-wise launches.
pub(crate) const CUBE_UNITS: u32 = 256;

/// A launch that was refused before it reached the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchError {
    /// A buffer holds fewer bytes than the launch reads or writes.
    BufferTooSmall {
        /// Which argument of the kernel.
        arg: &'static str,
        /// Bytes the launch touches.
        needed: u64,
        /// Bytes the buffer holds.
        available: u64,
    },
    /// The launch needs more cubes than the device can schedule.
    TooLarge {
        /// Vectors to process.
        vectors: usize,
    },
    /// A size the launch computes from its arguments (an element count, a strided span, a
    /// buffer length) does not fit in `usize`: a wrapped value would let a short buffer pass
    /// validation, so the launch is refused instead.
    Overflow {
        /// Which size, as its formula (`"rows * cols"`).
        what: &'static str,
    },
    /// A divisor of the launch's index arithmetic (a channel count, a channel length) is
    /// zero while there are elements to process.
    ZeroDivisor {
        /// Which argument.
        what: &'static str,
    },
    /// A block-quantized launch got a block type code that is not one of
    /// `quant::blocks::KINDS`.
    UnknownBlockKind(u32),
    /// An argument breaks the launch's contract (a head count that does not divide another).
    Invalid {
        /// Which argument, and the rule it breaks.
        what: &'static str,
    },
}

impl core::fmt::Display for LaunchError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LaunchError::BufferTooSmall {
                arg,
                needed,
                available,
            } => write!(
                f,
                "buffer `{arg}` holds {available} bytes but the launch touches {needed}"
            ),
            LaunchError::TooLarge { vectors } => {
                write!(f, "{vectors} vectors exceed the device's launch grid")
            }
            LaunchError::Overflow { what } => write!(f, "`{what}` overflows: sizes too large"),
            LaunchError::ZeroDivisor { what } => {
                write!(f, "`{what}` is zero but the launch has elements to process")
            }
            LaunchError::UnknownBlockKind(kind) => write!(f, "unknown block type code {kind}"),
            LaunchError::Invalid { what } => write!(f, "invalid argument: {what}"),
        }
    }
}

impl std::error::Error for LaunchError {}

/// Errors unless every `(name, value)` is nonzero: divisors of a non-empty launch's index
/// arithmetic.
pub(crate) fn check_divisors(divisors: &[(&'static str, usize)]) -> Result<(), LaunchError> {
    match divisors.iter().find(|(_, v)| *v == 0) {
        Some(&(what, _)) => Err(LaunchError::ZeroDivisor { what }),
        None => Ok(()),
    }
}

/// Room kept under `u32::MAX` by [`fits_u32`]: a unit's index may pass the end of its range
/// by a vector or a packed word before its bounds check.
const U32_HEADROOM: usize = 8;

/// `n` as a `u32`, or [`LaunchError::Overflow`] naming `what` unless `n` plus a little
/// headroom fits in 32 bits. Kernel `usize` arguments and indices are 32-bit on every
/// runtime (cubecl's default address type), so every length, size, offset and scalar a
/// kernel indexes with passes here first: a wrapped value would read or write elsewhere.
pub(crate) fn fits_u32(what: &'static str, n: usize) -> Result<u32, LaunchError> {
    match u32::try_from(n.saturating_add(U32_HEADROOM)) {
        Ok(_) => Ok(n as u32),
        Err(_) => Err(LaunchError::Overflow { what }),
    }
}

/// [`fits_u32`] for every `(what, value)`.
pub(crate) fn check_u32(values: &[(&'static str, usize)]) -> Result<(), LaunchError> {
    values
        .iter()
        .try_for_each(|&(what, n)| fits_u32(what, n).map(|_| ()))
}

/// A buffer argument of a kernel launch: a device buffer and the length (in elements) the
/// kernel is given it with, one value from which both the launch's check and the kernel's
/// argument come, so the two cannot differ.
///
/// [`Buf::new`] refuses a buffer holding fewer than that many elements, and [`Buf::upload`]
/// binds exactly the values it uploads; the length passes what the buffer holds only through
/// [`Buf::stand_in`] and [`Buf::nonempty`], whose extra element the kernel never reads.
#[derive(Clone, Debug)]
pub(crate) struct Buf {
    handle: Handle,
    len: usize,
}

impl Buf {
    /// `handle` as `elems` elements of `elem_bytes` bytes each, or
    /// [`LaunchError::BufferTooSmall`] naming `arg` when it holds fewer bytes.
    pub(crate) fn new(
        arg: &'static str,
        handle: &Handle,
        elems: usize,
        elem_bytes: usize,
    ) -> Result<Self, LaunchError> {
        let needed = (elems as u64).saturating_mul(elem_bytes as u64);
        let available = handle.size_in_used();
        if needed > available {
            return Err(LaunchError::BufferTooSmall {
                arg,
                needed,
                available,
            });
        }
        Ok(Buf {
            handle: handle.clone(),
            len: elems,
        })
    }

    /// [`Buf::new`] for a buffer the launch needs: a missing one is refused as a buffer
    /// holding no bytes.
    pub(crate) fn required(
        arg: &'static str,
        handle: Option<&Handle>,
        elems: usize,
        elem_bytes: usize,
    ) -> Result<Self, LaunchError> {
        match handle {
            Some(h) => Buf::new(arg, h, elems, elem_bytes),
            None => Err(LaunchError::BufferTooSmall {
                arg,
                needed: (elems as u64).saturating_mul(elem_bytes as u64),
                available: 0,
            }),
        }
    }

    /// `data` copied into a new buffer on `client`'s device, as its `data.len()` elements
    /// (metadata and constant tables a launch reads).
    pub(crate) fn upload<R: Runtime, E: CubeElement>(
        client: &ComputeClient<R>,
        data: &[E],
    ) -> Self {
        Buf {
            handle: client.create_from_slice(E::as_bytes(data)),
            len: data.len(),
        }
    }

    /// This buffer as one element, standing in for an absent optional buffer: the kernel is
    /// told (by a flag of the launch) that the buffer is absent and never reads it.
    pub(crate) fn stand_in(&self) -> Self {
        Buf {
            handle: self.handle.clone(),
            len: 1,
        }
    }

    /// The first `len` elements of this buffer (at most its length: a longer prefix is
    /// clamped to it, so the argument never passes what was checked).
    pub(crate) fn prefix(&self, len: usize) -> Self {
        Buf {
            handle: self.handle.clone(),
            len: len.min(self.len),
        }
    }

    /// The device buffer, for a launch that checks its own lengths ([`crate::matmul::launch_gemm`]).
    pub(crate) fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// `buf`, or where it is absent this buffer's [`stand_in`](Buf::stand_in).
    pub(crate) fn stand_in_for(&self, buf: Option<&Buf>) -> Self {
        buf.cloned().unwrap_or_else(|| self.stand_in())
    }

    /// This buffer as at least one element: an empty one is given to the kernel with a
    /// length of one, which it never reads (it reads no element the buffer was not checked
    /// to hold).
    pub(crate) fn nonempty(&self) -> Self {
        Buf {
            handle: self.handle.clone(),
            len: self.len.max(1),
        }
    }

    /// The kernel argument: the buffer with its length. Bind it to an array of elements of
    /// the size the buffer was checked with (the launch's own `unsafe` block says so).
    pub(crate) fn arg<R: Runtime>(&self) -> ArrayArg<R> {
        // SAFETY: the length is what `new` checked the buffer to hold, the length of the
        // values `upload` wrote, or (`stand_in`, `nonempty`) one element the kernel never
        // reads; building the argument touches no memory, and the launch that binds it is
        // itself `unsafe`, its caller vouching for the element size and the indices read.
        unsafe { ArrayArg::from_raw_parts(self.handle.clone(), self.len) }
    }
}

/// The product of `factors`, or [`LaunchError::Overflow`] naming `what` when it does not fit
/// in `usize`. Zero when any factor is zero (the true product, however large the others).
pub(crate) fn extent(what: &'static str, factors: &[usize]) -> Result<usize, LaunchError> {
    if factors.contains(&0) {
        return Ok(0);
    }
    factors
        .iter()
        .try_fold(1usize, |acc, &f| acc.checked_mul(f))
        .ok_or(LaunchError::Overflow { what })
}

/// `a + b`, or [`LaunchError::Overflow`] naming `what` when it does not fit in `usize`.
pub(crate) fn sum(what: &'static str, a: usize, b: usize) -> Result<usize, LaunchError> {
    a.checked_add(b).ok_or(LaunchError::Overflow { what })
}

/// Elements that `count` blocks of `one` elements each, starting `stride` elements apart,
/// reach: `(count - 1) stride + one` (0 when `count` is), checked as [`extent`] and [`sum`].
pub(crate) fn strided_span(
    what: &'static str,
    count: usize,
    stride: usize,
    one: usize,
) -> Result<usize, LaunchError> {
    if count == 0 {
        return Ok(0);
    }
    sum(what, extent(what, &[count - 1, stride])?, one)
}

/// The widest vector size, at most `max`, that divides `len` (1 always does).
pub fn vector_size_for(len: usize, max: usize) -> usize {
    [4usize, 2, 1]
        .into_iter()
        .find(|&v| v <= max && len.is_multiple_of(v))
        .unwrap_or(1)
}

/// A grid of `CUBE_UNITS`-unit cubes covering `units` units, folded into two dimensions so
/// that it stays under the per-dimension limit (65535 on wgpu).
pub(crate) fn grid_1d<R: Runtime>(
    client: &ComputeClient<R>,
    units: usize,
) -> Result<(CubeCount, CubeDim), LaunchError> {
    grid_layers(client, units, 1)
}

/// [`grid_1d`] repeated `layers` times along z: the same `units` per layer, layer
/// `CUBE_POS_Z`.
pub(crate) fn grid_layers<R: Runtime>(
    client: &ComputeClient<R>,
    units: usize,
    layers: usize,
) -> Result<(CubeCount, CubeDim), LaunchError> {
    let cubes = units.div_ceil(CUBE_UNITS as usize).max(1);
    let (max_x, max_y, max_z) = client.properties().hardware.max_cube_count;
    let max_x = (max_x as usize).clamp(1, 65_535);
    let x = cubes.min(max_x);
    let y = cubes.div_ceil(x);
    if y > max_y as usize || layers > max_z as usize {
        return Err(LaunchError::TooLarge {
            vectors: units.saturating_mul(layers),
        });
    }
    Ok((
        CubeCount::Static(x as u32, y as u32, layers as u32),
        CubeDim::new_1d(CUBE_UNITS),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_are_checked_products() {
        assert_eq!(extent("p", &[3, 5, 7]), Ok(105));
        assert_eq!(extent("p", &[]), Ok(1));
        // A zero factor makes the product zero, however large the others.
        assert_eq!(extent("p", &[usize::MAX, usize::MAX, 0]), Ok(0));
        assert_eq!(
            extent("p", &[1 << 63, 2]),
            Err(LaunchError::Overflow { what: "p" })
        );
        assert_eq!(
            extent("p", &[(1 << 32) + 1, 1 << 32]),
            Err(LaunchError::Overflow { what: "p" })
        );
        assert_eq!(sum("s", usize::MAX - 1, 1), Ok(usize::MAX));
        assert_eq!(
            sum("s", usize::MAX, 1),
            Err(LaunchError::Overflow { what: "s" })
        );
    }

    #[test]
    fn the_u32_guard_keeps_headroom() {
        assert_eq!(fits_u32("n", 0), Ok(0));
        let last = u32::MAX as usize - U32_HEADROOM;
        assert_eq!(fits_u32("n", last), Ok(last as u32));
        for n in [last + 1, u32::MAX as usize, 1 << 32, usize::MAX] {
            assert_eq!(fits_u32("n", n), Err(LaunchError::Overflow { what: "n" }));
        }
        assert_eq!(check_u32(&[("a", 1), ("b", 1 << 20)]), Ok(()));
        assert_eq!(
            check_u32(&[("a", 1), ("b", 1 << 32), ("c", usize::MAX)]),
            Err(LaunchError::Overflow { what: "b" })
        );
    }

    #[test]
    fn bufs_refuse_short_buffers() {
        let handle = Handle::new(cubecl::stream_id::StreamId::current(), 16);
        let too_small = |arg, needed| {
            Some(LaunchError::BufferTooSmall {
                arg,
                needed,
                available: 16,
            })
        };
        assert_eq!(Buf::new("x", &handle, 4, 4).map(|b| b.len), Ok(4));
        assert_eq!(Buf::new("x", &handle, 8, 2).map(|b| b.len), Ok(8));
        assert_eq!(Buf::new("x", &handle, 5, 4).err(), too_small("x", 20));
        assert_eq!(Buf::new("h", &handle, 9, 2).err(), too_small("h", 18));
        // The byte count saturates: a wrapped one would let the short buffer pass.
        assert_eq!(
            Buf::new("y", &handle, usize::MAX, 4).err(),
            too_small("y", u64::MAX)
        );
        assert_eq!(
            Buf::required("bias", None, 3, 2).err(),
            Some(LaunchError::BufferTooSmall {
                arg: "bias",
                needed: 6,
                available: 0,
            })
        );
        assert_eq!(
            Buf::required("bias", Some(&handle), 4, 4).map(|b| b.len),
            Ok(4)
        );
        // Only the stand-ins bind more than was checked: one element, never read.
        let empty = Buf::new("e", &handle, 0, 4).map(|b| (b.len, b.nonempty().len));
        assert_eq!(empty, Ok((0, 1)));
        let full = Buf::new("f", &handle, 4, 4).map(|b| {
            let given = b.stand_in_for(Some(&b)).len;
            (b.stand_in_for(None).len, given, b.nonempty().len)
        });
        assert_eq!(full, Ok((1, 4, 4)));
        assert_eq!(
            too_small("x", 20).map(|e| e.to_string()).as_deref(),
            Some("buffer `x` holds 16 bytes but the launch touches 20")
        );
    }

    #[test]
    fn strided_spans_are_checked() {
        assert_eq!(strided_span("s", 0, usize::MAX, usize::MAX), Ok(0));
        assert_eq!(strided_span("s", 1, usize::MAX, 6), Ok(6));
        assert_eq!(strided_span("s", 3, 10, 6), Ok(26));
        // (3 - 1) 2^63 + 1 and (2 - 1) usize::MAX + 1 would wrap to 1 and 0.
        assert!(strided_span("s", 3, 1 << 63, 1).is_err());
        assert!(strided_span("s", 2, usize::MAX, 1).is_err());
        assert_eq!(
            LaunchError::Overflow {
                what: "rows * cols"
            }
            .to_string(),
            "`rows * cols` overflows: sizes too large"
        );
    }
}
