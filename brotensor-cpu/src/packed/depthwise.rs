//! Depthwise convolution rows with horizontal stride 1 in the tier's vector registers: every
//! run of [`RUN`] outputs adds all its taps in registers and is stored once.

#[cfg(target_arch = "aarch64")]
use super::vectors::Neon;
#[cfg(target_arch = "x86_64")]
use super::vectors::{Avx2, Avx512};
use super::vectors::{Portable, Vector};
use super::Kernel;

/// Outputs per run (a whole number of vectors on every tier).
pub const RUN: usize = 16;

/// The geometry of [`depthwise_rows`]: an input plane copied into rows of `width` floats
/// with its padding (zeros) around it, read by a `kernel` of taps `dilation` apart, output
/// rows `stride_h` input rows apart, `wo` outputs per row.
#[derive(Clone, Copy, Debug)]
pub struct Bordered {
    /// Floats per bordered row: at least `wo` rounded up to [`RUN`] plus the kernel's reach.
    pub width: usize,
    /// `[kH, kW]`.
    pub kernel: [usize; 2],
    /// `[dH, dW]`.
    pub dilation: [usize; 2],
    /// The vertical stride.
    pub stride_h: usize,
    /// Outputs per row.
    pub wo: usize,
}

/// `out[oy wo + ox] = bias + sum over (ky, kx) of taps[ky kW + kx] *
/// plane[(oy stride_h + ky dH) width + ox + kx dW]` for every row of `out`.
///
/// # Panics
/// If the kernel is empty, `width` is short of the last run's reach, `plane` of the rows the
/// outputs read, `taps` of `kH kW` values (or that product overflows), or `out` is not whole
/// rows of `wo`.
pub fn depthwise_rows(plane: &[f32], g: Bordered, taps: &[f32], bias: f32, out: &mut [f32]) {
    let ([kh, kw], [dh, dw]) = (g.kernel, g.dilation);
    if g.wo == 0 || out.is_empty() {
        return;
    }
    assert!(
        out.len().is_multiple_of(g.wo),
        "depthwise_rows: output rows"
    );
    let rows = out.len() / g.wo;
    let reach = (kw.max(1) - 1)
        .checked_mul(dw)
        .and_then(|r| r.checked_add(g.wo.next_multiple_of(RUN)));
    let needed = (rows - 1)
        .checked_mul(g.stride_h)
        .and_then(|v| v.checked_add((kh.max(1) - 1).checked_mul(dh)?))
        .and_then(|v| v.checked_add(1))
        .and_then(|v| v.checked_mul(g.width));
    assert!(
        kh >= 1 && kw >= 1 && reach.is_some_and(|r| g.width >= r),
        "depthwise_rows: width {} for {g:?}",
        g.width
    );
    assert!(
        needed.is_some_and(|n| plane.len() >= n)
            && kh.checked_mul(kw).is_some_and(|t| taps.len() >= t),
        "depthwise_rows: plane or taps too short"
    );
    // SAFETY (each arm): `Kernel::detect` chose the kernel for a tier this CPU runs; the
    // sizes were checked above.
    match Kernel::detect() {
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => unsafe {
            Avx512::enter(
                #[inline(always)]
                || rows_on::<Avx512>(plane, g, taps, bias, out),
            )
        },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => unsafe {
            Avx2::enter(
                #[inline(always)]
                || rows_on::<Avx2>(plane, g, taps, bias, out),
            )
        },
        #[cfg(target_arch = "aarch64")]
        Kernel::Neon => unsafe {
            Neon::enter(
                #[inline(always)]
                || rows_on::<Neon>(plane, g, taps, bias, out),
            )
        },
        Kernel::Portable => unsafe {
            Portable::enter(
                #[inline(always)]
                || rows_on::<Portable>(plane, g, taps, bias, out),
            )
        },
    }
}

/// [`depthwise_rows`] on tier `S`.
///
/// # Safety
/// The CPU must run `S`'s instructions; the sizes are as [`depthwise_rows`] checks.
#[inline(always)]
unsafe fn rows_on<S: Vector>(plane: &[f32], g: Bordered, taps: &[f32], bias: f32, out: &mut [f32]) {
    // The common 3x3 kernel with its loops unrolled; any other with them as they are.
    if g.kernel == [3, 3] {
        rows_with::<S>(plane, g, (3, 3), taps, bias, out)
    } else {
        rows_with::<S>(plane, g, (g.kernel[0], g.kernel[1]), taps, bias, out)
    }
}

/// [`rows_on`] with the kernel size `(kh, kw)` passed apart, so that constants unroll.
///
/// # Safety
/// As [`rows_on`]; `(kh, kw)` is `g.kernel`.
#[inline(always)]
unsafe fn rows_with<S: Vector>(
    plane: &[f32],
    g: Bordered,
    (kh, kw): (usize, usize),
    taps: &[f32],
    bias: f32,
    out: &mut [f32],
) {
    let [dh, dw] = g.dilation;
    // The accumulators below hold at most four vectors.
    const { assert!(RUN / S::LANES <= 4 && RUN.is_multiple_of(S::LANES)) };
    let nv = RUN / S::LANES;
    for (oy, orow) in out.chunks_exact_mut(g.wo).enumerate() {
        let top = oy * g.stride_h;
        for c0 in (0..g.wo).step_by(RUN) {
            let mut acc = [S::splat(bias); 4];
            for ky in 0..kh {
                // SAFETY: row top + ky dh lies within the checked rows, and the run's reads
                // c0 + kx dw + RUN <= width stay inside it.
                let line = plane.as_ptr().add((top + ky * dh) * g.width + c0);
                for kx in 0..kw {
                    let tap = S::splat(*taps.get_unchecked(ky * kw + kx));
                    for (v, a) in acc.iter_mut().enumerate().take(nv) {
                        *a = S::mul_add(tap, S::load(line.add(kx * dw + v * S::LANES)), *a);
                    }
                }
            }
            let n = RUN.min(g.wo - c0);
            if n == RUN {
                for (v, &a) in acc.iter().enumerate().take(nv) {
                    // In bounds: the run's RUN outputs lie within the row.
                    S::store(orow.as_mut_ptr().add(c0 + v * S::LANES), a);
                }
            } else {
                let mut lanes = [0f32; RUN];
                for (v, &a) in acc.iter().enumerate().take(nv) {
                    S::store(lanes.as_mut_ptr().add(v * S::LANES), a);
                }
                orow[c0..c0 + n].copy_from_slice(&lanes[..n]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_match_a_float64_sum_and_short_inputs_are_refused() {
        // 2 rows of 5 outputs, 3x2 taps, dilation (2, 1), stride 2: the plane needs rows up
        // to 1 * 2 + 2 * 2 = 6 and columns up to 16 + 1.
        let g = Bordered {
            width: 17,
            kernel: [3, 2],
            dilation: [2, 1],
            stride_h: 2,
            wo: 5,
        };
        let plane: Vec<f32> = (0..7 * 17).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
        let taps = [0.5, -1.0, 2.0, 0.25, -0.75, 1.5];
        let mut out = vec![f32::NAN; 10];
        depthwise_rows(&plane, g, &taps, 0.125, &mut out);
        for (i, &got) in out.iter().enumerate() {
            let (oy, ox) = (i / 5, i % 5);
            let mut want = 0.125f64;
            for ky in 0..3 {
                for kx in 0..2 {
                    let v = plane[(oy * 2 + ky * 2) * 17 + ox + kx] as f64;
                    want += taps[ky * 2 + kx] as f64 * v;
                }
            }
            assert!(
                (got as f64 - want).abs() <= 1e-5 * want.abs().max(1.0),
                "[{i}]"
            );
        }
        let refused = |g: Bordered, plane: &[f32], taps: &[f32]| {
            let mut out = vec![0f32; 10];
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                depthwise_rows(plane, g, taps, 0.0, &mut out)
            }))
            .is_err()
        };
        // A row one float short of the last run's reach, a plane one float short of the
        // rows read, five taps for six.
        assert!(refused(Bordered { width: 16, ..g }, &plane, &taps));
        assert!(refused(g, &plane[..7 * 17 - 1], &taps));
        assert!(refused(g, &plane, &taps[..5]));
        // A kernel whose tap count overflows, with a zero dilation keeping its reach small.
        let huge = Bordered {
            kernel: [1 << (usize::BITS / 2 + 1), 1 << (usize::BITS / 2 + 1)],
            dilation: [0, 0],
            ..g
        };
        assert!(refused(huge, &plane, &taps));
    }
}
