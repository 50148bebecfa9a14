//! Single-axis reductions with keepdims: a tensor seen as `[outer, n, inner]` reduced over
//! its middle axis, for real floats, integers (wrapping) and complex pairs.
//!
//! One pass reduces chunks of the axis: `n` becomes `ceil(n / chunk)`, and the launcher
//! repeats passes until it is 1. Every unit loops at most [`REDUCE_CHUNK`] times (a few
//! thousand on the plane path), so no axis length hits lavapipe's per-shader loop limit.
//!
//! Two kernels share the work. The unit kernel gives every output element (and chunk) one
//! unit that walks the axis; neighbouring units read neighbouring `inner` positions, so its
//! reads are coalesced whenever `inner > 1`. A contiguous axis (`inner == 1`) of at least
//! [`PLANE_MIN_AXIS`] elements goes, on a device with plane (warp, subgroup) operations, to
//! the plane kernel instead: one plane per row and chunk, its lanes reading neighbouring
//! elements, combined at the end by a butterfly of lane shuffles.

use cubecl::prelude::*;
use cubecl::server::Handle;

use super::map::nan;
use crate::launch::{extent, fits_u32, grid_1d, Buf, LaunchError, CUBE_UNITS};

/// The most axis elements one unit reduces in one pass.
pub const REDUCE_CHUNK: usize = 1024;

/// The most axis elements one plane reduces in one pass of the plane kernel (each lane of a
/// plane of `p` lanes loops `PLANE_CHUNK / p` times).
pub const PLANE_CHUNK: usize = 8192;

/// The shortest contiguous axis the plane kernel takes; shorter ones leave most lanes idle.
pub const PLANE_MIN_AXIS: usize = 256;

/// A reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum (integers wrap).
    Sum,
    /// The product (integers wrap).
    Prod,
    /// The largest element; NaN if any is (real only).
    Max,
    /// The smallest element; NaN if any is (real only).
    Min,
}

impl ReduceOp {
    /// Every reduction.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];
}

/// One pass: unit `o` of `[outer, m, inner]` reduces axis elements
/// `c * chunk .. min(n, (c + 1) chunk)` of `[outer, n, inner]` (`meta`: `n`, `inner`,
/// `chunk`, `m`; `n >= 1`). Complex values are `(re, im)` pairs of `T`.
#[cube(launch_unchecked)]
fn reduce_axis_kernel<T: Numeric>(
    x: &Array<T>,
    out: &mut Array<T>,
    meta: &Array<u32>,
    units: u32,
    #[comptime] op: ReduceOp,
    #[comptime] complex: bool,
) {
    let o = u32::cast_from(ABSOLUTE_POS);
    if o < units {
        let n = meta[0];
        let inner = meta[1];
        let chunk = meta[2];
        let m = meta[3];
        let i = o % inner;
        let t = o / inner;
        let c = t % m;
        let outer = t / m;
        let start = c * chunk;
        // `start < n` (`c < m`); this form cannot wrap near 2^32.
        let end = start + u32::min(chunk, n - start);
        let first = (outer * n + start) * inner + i;
        if comptime!(complex) {
            let mut re = x[(2 * first) as usize];
            let mut im = x[(2 * first + 1) as usize];
            for k in start + 1..end {
                let e = (outer * n + k) * inner + i;
                let (nr, ni) =
                    combine_complex::<T>(re, im, x[(2 * e) as usize], x[(2 * e + 1) as usize], op);
                re = nr;
                im = ni;
            }
            out[(2 * o) as usize] = re;
            out[(2 * o + 1) as usize] = im;
        } else {
            let mut acc = x[first as usize];
            for k in start + 1..end {
                acc = combine::<T>(acc, x[((outer * n + k) * inner + i) as usize], op);
            }
            out[o as usize] = acc;
        }
    }
}

/// `(re, im)` combined with `(a, b)` by a complex sum or product.
#[cube]
fn combine_complex<T: Numeric>(re: T, im: T, a: T, b: T, #[comptime] op: ReduceOp) -> (T, T) {
    if comptime!(op == ReduceOp::Prod) {
        (re * a - im * b, re * b + im * a)
    } else {
        (re + a, im + b)
    }
}

/// The identity of a sum (`0`) or a product (`1`).
#[cube]
fn identity<T: Numeric>(#[comptime] op: ReduceOp) -> T {
    let mut v = T::from_int(0);
    if comptime!(op == ReduceOp::Prod) {
        v = T::from_int(1);
    }
    v
}

/// `acc` combined with `v` by a real reduction (a NaN sticks for max and min).
#[cube]
fn combine<T: Numeric>(acc: T, v: T, #[comptime] op: ReduceOp) -> T {
    let mut r = acc;
    if comptime!(op == ReduceOp::Sum) {
        r = acc + v;
    } else if comptime!(op == ReduceOp::Prod) {
        r = acc * v;
    } else if comptime!(op == ReduceOp::Max) {
        if nan::<T>(v) || (v > acc && !nan::<T>(acc)) {
            r = v;
        }
    } else if nan::<T>(v) || (v < acc && !nan::<T>(acc)) {
        r = v;
    }
    r
}

/// `plane_shuffle_xor(v, mask)`. 64-bit integers (`int64`) travel as the bits of an f64:
/// Vulkan shuffles 64-bit integers only with `shaderSubgroupExtendedTypes`, which wgpu does
/// not require, while 64-bit floats need only `shaderFloat64`. A shuffle moves bits unchanged.
#[cube]
fn shuffle_xor<T: Numeric>(v: T, mask: u32, #[comptime] int64: bool) -> T {
    if comptime!(int64) {
        T::reinterpret(plane_shuffle_xor(f64::reinterpret(v), mask))
    } else {
        plane_shuffle_xor(v, mask)
    }
}

/// One plane-kernel pass over rows of length `n` (`inner == 1`): plane task `t < tasks`
/// reduces chunk `t % m` (elements `c * chunk .. min(n, (c + 1) chunk)`) of row `t / m` into
/// element `t` of `out` (`meta`: `n`, `chunk`, `m`; `n >= 1`). Lane `l` takes elements
/// `start + l`, `start + l + PLANE_DIM`, ...; a butterfly of `plane_shuffle_xor` then gives
/// every lane the plane's result, and lane 0 writes it. The task index is uniform over a
/// plane, so every lane of a plane takes the same branches around the shuffles.
#[cube(launch_unchecked)]
fn reduce_rows_plane_kernel<T: Numeric>(
    x: &Array<T>,
    out: &mut Array<T>,
    meta: &Array<u32>,
    tasks: u32,
    #[comptime] op: ReduceOp,
    #[comptime] complex: bool,
    #[comptime] int64: bool,
) {
    let plane_dim = u32::cast_from(PLANE_DIM);
    let per_cube = u32::cast_from(CUBE_DIM) / plane_dim;
    let t = u32::cast_from(CUBE_POS) * per_cube + u32::cast_from(PLANE_POS);
    if t < tasks {
        let n = meta[0];
        let chunk = meta[1];
        let m = meta[2];
        let c = t % m;
        let row = t / m;
        let start = c * chunk;
        let end = start + u32::min(chunk, n - start);
        let lane = u32::cast_from(UNIT_POS_PLANE);
        let base = row * n;
        if comptime!(complex) {
            let mut re = identity::<T>(op);
            let mut im = T::from_int(0);
            for k in range_stepped(start + lane, end, plane_dim) {
                let e = base + k;
                let (nr, ni) =
                    combine_complex::<T>(re, im, x[(2 * e) as usize], x[(2 * e + 1) as usize], op);
                re = nr;
                im = ni;
            }
            let mut s = plane_dim / 2;
            while s > 0 {
                let a = shuffle_xor::<T>(re, s, int64);
                let b = shuffle_xor::<T>(im, s, int64);
                let (nr, ni) = combine_complex::<T>(re, im, a, b, op);
                re = nr;
                im = ni;
                s /= 2;
            }
            if lane == 0 {
                out[(2 * t) as usize] = re;
                out[(2 * t + 1) as usize] = im;
            }
        } else {
            // Max and min start every lane at the chunk's first element (taking an element
            // twice changes neither); sums and products at their identity.
            let mut acc = identity::<T>(op);
            if comptime!(op == ReduceOp::Max || op == ReduceOp::Min) {
                acc = x[(base + start) as usize];
            }
            for k in range_stepped(start + lane, end, plane_dim) {
                acc = combine::<T>(acc, x[(base + k) as usize], op);
            }
            let mut s = plane_dim / 2;
            while s > 0 {
                acc = combine::<T>(acc, shuffle_xor::<T>(acc, s, int64), op);
                s /= 2;
            }
            if lane == 0 {
                out[t as usize] = acc;
            }
        }
    }
}

/// Which lanes a reduction reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lanes {
    /// One scalar per element.
    Real,
    /// A `(re, im)` pair per element (sum and product only).
    Complex,
}

/// Reduces `x`, seen as `[outer, n, inner]` elements of `T` (pairs of `T` for complex), over
/// its middle axis into `out` (`[outer, 1, inner]`). `n` must be at least 1 (the caller
/// writes the identity for an empty axis). Allocates the intermediate passes' buffers.
///
/// `plane_dim_max` is the device's largest plane size when it has plane operations (`None`
/// otherwise): passes over a contiguous axis of at least [`PLANE_MIN_AXIS`] elements then run
/// on the plane kernel. It must be a power of two that divides the cube size (256).
///
/// Errors (no launch) when `n` is 0, a buffer is too short, max/min is asked of complex
/// values, `plane_dim_max` is not a power of two up to 256, or an index needs more than 32
/// bits.
pub fn launch_reduce_axis<R: Runtime, T: Numeric + CubeElement>(
    client: &ComputeClient<R>,
    op: ReduceOp,
    lanes: Lanes,
    x: &Handle,
    (outer, n, inner): (usize, usize, usize),
    out: &Handle,
    plane_dim_max: Option<u32>,
) -> Result<(), LaunchError> {
    let complex = lanes == Lanes::Complex;
    if complex && matches!(op, ReduceOp::Max | ReduceOp::Min) {
        return Err(LaunchError::Invalid {
            what: "complex max/min (complex numbers have no order)",
        });
    }
    if n == 0 {
        return Err(LaunchError::Invalid {
            what: "axis length 0 (the caller writes the identity)",
        });
    }
    if plane_dim_max.is_some_and(|p| !p.is_power_of_two() || p > CUBE_UNITS) {
        return Err(LaunchError::Invalid {
            what: "plane size (must be a power of two that divides the cube size)",
        });
    }
    let per = if complex { 2 } else { 1 };
    let bytes = core::mem::size_of::<T>();
    let int64 = T::as_type_native_unchecked() == i64::as_type_native_unchecked();
    let total = extent("input", &[outer, n, inner, per])?;
    fits_u32("input (must fit in 32 bits)", total)?;
    // Each pass reads `src` and writes `dst`: the input, then the previous pass's output.
    let mut src = Buf::new("x", x, total, bytes)?;
    let outs = extent("output", &[outer, inner, per])?;
    let out = Buf::new("out", out, outs, bytes)?;
    if outs == 0 {
        return Ok(());
    }
    let mut len = n;
    loop {
        // Lanes step past the axis end by up to a plane before they stop: keep that in u32.
        let plane = plane_dim_max.filter(|_| {
            inner == 1 && len >= PLANE_MIN_AXIS && len + (CUBE_UNITS as usize) <= u32::MAX as usize
        });
        let chunk = if plane.is_some() {
            PLANE_CHUNK
        } else {
            REDUCE_CHUNK
        };
        let m = len.div_ceil(chunk);
        // Every size below is at most the input's element count, which fits in 32 bits.
        let units = outer * m * inner;
        let dst = if m == 1 {
            out.clone()
        } else {
            Buf::new(
                "partials",
                &client.empty(units * per * bytes),
                units * per,
                bytes,
            )?
        };
        if let Some(p) = plane {
            let meta = Buf::upload(client, &[len as u32, chunk as u32, m as u32]);
            // One plane of at most `p` lanes per task: `units * p` units cover every task
            // whatever the plane size the device picks (smaller planes leave planes idle).
            let lanes = units.checked_mul(p as usize).ok_or(LaunchError::Overflow {
                what: "plane lanes",
            })?;
            let (count, dim) = grid_1d(client, lanes)?;
            // SAFETY: `src` holds `outer len` elements (`inner == 1`; the input or the
            // previous pass's output, a checked `Buf`). Task `t < units` (uniform over its
            // plane) reads elements `row len + k` with `row < outer`, `k < len`, and its lane
            // 0 writes element `t` of `dst`, which holds `units` elements (a checked `Buf`);
            // `meta` holds the 3 words the kernel reads. Indices fit in 32 bits: each pass is
            // no larger than the input. The cube size is a multiple of every plane size up to
            // `p`.
            unsafe {
                reduce_rows_plane_kernel::launch_unchecked::<T, R>(
                    client,
                    count,
                    dim,
                    src.arg(),
                    dst.arg(),
                    meta.arg(),
                    units as u32,
                    op,
                    complex,
                    int64,
                );
            }
        } else {
            let meta = Buf::upload(client, &[len as u32, inner as u32, chunk as u32, m as u32]);
            let (count, dim) = grid_1d(client, units)?;
            // SAFETY: `src` holds `outer len inner` elements (the input or the previous
            // pass's output, a checked `Buf`); unit `o < units` reads elements `(outer len +
            // k) inner + i` with `k < len` and writes element `o` of `dst`, which holds
            // `units` elements (a checked `Buf`); `meta` holds the 4 words the kernel reads.
            // Indices fit in 32 bits: each pass is no larger than the input.
            unsafe {
                reduce_axis_kernel::launch_unchecked::<T, R>(
                    client,
                    count,
                    dim,
                    src.arg(),
                    dst.arg(),
                    meta.arg(),
                    units as u32,
                    op,
                    complex,
                );
            }
        }
        if m == 1 {
            return Ok(());
        }
        src = dst;
        len = m;
    }
}

#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{Lowering as L, Rt};
    let a = L::array;
    macro_rules! lower_both {
        ($t:ty, $op:expr, $complex:expr) => {
            l.lower(reduce_axis_kernel::ReduceAxisKernel::<$t, Rt>::new(
                L::settings_1d(),
                l.client.clone(),
                a(),
                a(),
                a(),
                (),
                $op,
                $complex,
            ));
            l.lower(
                reduce_rows_plane_kernel::ReduceRowsPlaneKernel::<$t, Rt>::new(
                    L::settings_1d(),
                    l.client.clone(),
                    a(),
                    a(),
                    a(),
                    (),
                    $op,
                    $complex,
                    core::any::type_name::<$t>() == "i64",
                ),
            );
        };
    }
    for op in ReduceOp::ALL {
        for complex in [false, true] {
            if complex && matches!(op, ReduceOp::Max | ReduceOp::Min) {
                continue;
            }
            lower_both!(f32, op, complex);
            lower_both!(f64, op, complex);
        }
        if matches!(op, ReduceOp::Sum | ReduceOp::Prod) {
            lower_both!(i64, op, false);
        }
    }
}
