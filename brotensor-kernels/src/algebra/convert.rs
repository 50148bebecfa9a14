//! Dtype conversion between real floats, integers and complex pairs.
//!
//! `out[i] = cast(x[i])`: a complex source gives its real part to a real destination, a real
//! source gives a zero imaginary part to a complex one, a float becomes an integer by
//! truncation toward zero. For a float-to-integer conversion the kernel also sets
//! `flag[0] = 1` when any value is NaN, infinite or outside `[lo, hi)` (the integer's
//! range), so the caller can refuse the result.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{extent, fits_u32, grid_1d, Buf, LaunchError};

#[cube(launch_unchecked)]
fn convert_kernel<A: Numeric, B: Numeric>(
    x: &Array<A>,
    out: &mut Array<B>,
    flag: &mut Array<u32>,
    range: &Array<A>,
    numel: u32,
    #[comptime] from_complex: bool,
    #[comptime] to_complex: bool,
    #[comptime] check_range: bool,
) {
    let i = u32::cast_from(ABSOLUTE_POS);
    if i < numel {
        let mut src = i;
        if comptime!(from_complex) {
            src = 2 * i;
        }
        let v = x[src as usize];
        if comptime!(check_range) {
            // NaN fails both comparisons; infinities fall outside the range.
            if !(v >= range[0] && v < range[1]) {
                flag[0] = 1u32;
            }
        }
        if comptime!(to_complex) {
            out[(2 * i) as usize] = B::cast_from(v);
            let mut im = B::from_int(0);
            if comptime!(from_complex) {
                im = B::cast_from(x[(2 * i + 1) as usize]);
            }
            out[(2 * i + 1) as usize] = im;
        } else {
            out[i as usize] = B::cast_from(v);
        }
    }
}

/// The shape of a conversion: whether source and destination are complex pairs, and the
/// integer range `[lo, hi)` a float source must fall in (`None`: no check).
#[derive(Clone, Copy, Debug)]
pub struct Conversion<A> {
    /// The source holds `(re, im)` pairs.
    pub from_complex: bool,
    /// The destination holds `(re, im)` pairs.
    pub to_complex: bool,
    /// The range a float source must fall in for an integer destination.
    pub range: Option<(A, A)>,
}

/// Converts `numel` elements of `x` (scalars of `A`, or pairs) into `out` (scalars of `B`,
/// or pairs). With a range, `flag` (one `u32`, zeroed by the caller) becomes 1 when a source
/// value falls outside it.
///
/// Errors (no launch) when a buffer is too short or an index needs more than 32 bits.
pub fn launch_convert<R: Runtime, A: Numeric + CubeElement, B: Numeric + CubeElement>(
    client: &ComputeClient<R>,
    x: &Handle,
    conv: Conversion<A>,
    out: &Handle,
    flag: &Handle,
    numel: usize,
) -> Result<(), LaunchError> {
    let xs = extent("source", &[numel, if conv.from_complex { 2 } else { 1 }])?;
    let os = extent("destination", &[numel, if conv.to_complex { 2 } else { 1 }])?;
    fits_u32("source (must fit in 32 bits)", xs)?;
    fits_u32("destination (must fit in 32 bits)", os)?;
    let x = Buf::new("x", x, xs, core::mem::size_of::<A>())?;
    let out = Buf::new("out", out, os, core::mem::size_of::<B>())?;
    let flag = Buf::new("flag", flag, 1, 4)?;
    if numel == 0 {
        return Ok(());
    }
    let (lo, hi) = conv.range.unwrap_or((A::from_int(0), A::from_int(0)));
    let range = Buf::upload(client, &[lo, hi]);
    let (count, dim) = grid_1d(client, numel)?;
    // SAFETY: unit `i < numel` reads scalar `i` (or `2i`, `2i + 1`) of `x`, which holds
    // `xs` scalars, and writes scalar `i` (or `2i`, `2i + 1`) of `out`, which holds `os`,
    // and word 0 of `flag` (checked `Buf`s); `range` holds the 2 values it reads.
    unsafe {
        convert_kernel::launch_unchecked::<A, B, R>(
            client,
            count,
            dim,
            x.arg(),
            out.arg(),
            flag.arg(),
            range.arg(),
            numel as u32,
            conv.from_complex,
            conv.to_complex,
            conv.range.is_some(),
        );
    }
    Ok(())
}

#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{Lowering as L, Rt};
    let a = L::array;
    // Every (source, destination) pair of the scalar types f32, f64, i64 and i32, with the
    // complex flags their dtypes allow (complex parts are f32 or f64) and the range check
    // for float-to-integer.
    macro_rules! pair {
        ($A:ty, $B:ty, $a_float:expr, $b_float:expr) => {
            for (from_complex, to_complex) in
                [(false, false), (true, false), (false, true), (true, true)]
            {
                if (from_complex && !$a_float) || (to_complex && !$b_float) {
                    continue;
                }
                {
                    let check = $a_float && !$b_float;
                    l.lower(convert_kernel::ConvertKernel::<$A, $B, Rt>::new(
                        L::settings_1d(),
                        l.client.clone(),
                        a(),
                        a(),
                        a(),
                        a(),
                        (),
                        from_complex,
                        to_complex,
                        check,
                    ));
                }
            }
        };
    }
    macro_rules! row {
        ($A:ty, $a_float:expr) => {
            pair!($A, f32, $a_float, true);
            pair!($A, f64, $a_float, true);
            pair!($A, i64, $a_float, false);
            pair!($A, i32, $a_float, false);
        };
    }
    row!(f32, true);
    row!(f64, true);
    row!(i64, false);
    row!(i32, false);
}
