//! Single-axis reductions with keepdims: a tensor seen as `[outer, n, inner]` reduced over
//! its middle axis, for real floats, integers (wrapping) and complex pairs.
//!
//! One pass reduces chunks of at most [`REDUCE_CHUNK`] elements of the axis: `n` becomes
//! `ceil(n / REDUCE_CHUNK)`, and the launcher repeats passes until it is 1. Every unit loops
//! at most [`REDUCE_CHUNK`] times, so no axis length hits lavapipe's per-shader loop limit.

use cubecl::prelude::*;
use cubecl::server::Handle;

use super::map::nan;
use crate::launch::{check_len, extent, fits_u32, grid_1d, LaunchError};

/// The most axis elements one unit reduces in one pass.
pub const REDUCE_CHUNK: usize = 1024;

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
        let end = u32::min(n, start + chunk);
        let first = (outer * n + start) * inner + i;
        if comptime!(complex) {
            let mut re = x[(2 * first) as usize];
            let mut im = x[(2 * first + 1) as usize];
            for k in start + 1..end {
                let e = (outer * n + k) * inner + i;
                let a = x[(2 * e) as usize];
                let b = x[(2 * e + 1) as usize];
                if comptime!(op == ReduceOp::Prod) {
                    let r = re * a - im * b;
                    im = re * b + im * a;
                    re = r;
                } else {
                    re += a;
                    im += b;
                }
            }
            out[(2 * o) as usize] = re;
            out[(2 * o + 1) as usize] = im;
        } else {
            let mut acc = x[first as usize];
            for k in start + 1..end {
                let v = x[((outer * n + k) * inner + i) as usize];
                // A NaN sticks: once `acc` is NaN, only another NaN replaces it.
                if comptime!(op == ReduceOp::Sum) {
                    acc += v;
                } else if comptime!(op == ReduceOp::Prod) {
                    acc *= v;
                } else if comptime!(op == ReduceOp::Max) {
                    if nan::<T>(v) || (v > acc && !nan::<T>(acc)) {
                        acc = v;
                    }
                } else if nan::<T>(v) || (v < acc && !nan::<T>(acc)) {
                    acc = v;
                }
            }
            out[o as usize] = acc;
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
/// Errors (no launch) when `n` is 0, a buffer is too short, max/min is asked of complex
/// values, or an index needs more than 32 bits.
pub fn launch_reduce_axis<R: Runtime, T: Numeric + CubeElement>(
    client: &ComputeClient<R>,
    op: ReduceOp,
    lanes: Lanes,
    x: &Handle,
    (outer, n, inner): (usize, usize, usize),
    out: &Handle,
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
    let per = if complex { 2 } else { 1 };
    let bytes = core::mem::size_of::<T>();
    let total = extent("input", &[outer, n, inner, per])?;
    fits_u32("input (must fit in 32 bits)", total)?;
    check_len("x", x, total, bytes)?;
    let outs = extent("output", &[outer, inner, per])?;
    check_len("out", out, outs, bytes)?;
    if outs == 0 {
        return Ok(());
    }
    let mut src = x.clone();
    let mut len = n;
    loop {
        let m = len.div_ceil(REDUCE_CHUNK);
        let units = outer * m * inner;
        let dst = if m == 1 {
            out.clone()
        } else {
            client.empty(units * per * bytes)
        };
        let meta = [len as u32, inner as u32, REDUCE_CHUNK as u32, m as u32];
        let meta_h = client.create_from_slice(u32::as_bytes(&meta));
        let (count, dim) = grid_1d(client, units)?;
        // SAFETY: `src` holds `outer len inner` elements (the input, checked above, or the
        // previous pass's output); unit `o < units` reads elements `(outer len + k) inner +
        // i` with `k < len` and writes element `o` of `dst`, which holds `units` elements;
        // `meta` holds the 4 words the kernel reads. Indices fit in 32 bits: each pass is no
        // larger than the input.
        unsafe {
            reduce_axis_kernel::launch_unchecked::<T, R>(
                client,
                count,
                dim,
                ArrayArg::from_raw_parts(src.clone(), outer * len * inner * per),
                ArrayArg::from_raw_parts(dst.clone(), units * per),
                ArrayArg::from_raw_parts(meta_h, 4),
                units as u32,
                op,
                complex,
            );
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
    for op in ReduceOp::ALL {
        for complex in [false, true] {
            if complex && matches!(op, ReduceOp::Max | ReduceOp::Min) {
                continue;
            }
            l.lower(reduce_axis_kernel::ReduceAxisKernel::<f32, Rt>::new(
                L::settings_1d(),
                l.client.clone(),
                a(),
                a(),
                a(),
                (),
                op,
                complex,
            ));
            l.lower(reduce_axis_kernel::ReduceAxisKernel::<f64, Rt>::new(
                L::settings_1d(),
                l.client.clone(),
                a(),
                a(),
                a(),
                (),
                op,
                complex,
            ));
        }
        if matches!(op, ReduceOp::Sum | ReduceOp::Prod) {
            l.lower(reduce_axis_kernel::ReduceAxisKernel::<i64, Rt>::new(
                L::settings_1d(),
                l.client.clone(),
                a(),
                a(),
                a(),
                (),
                op,
                false,
            ));
        }
    }
}
