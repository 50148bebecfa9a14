//! Fourier transforms of rows (the spectral family's `fft`, `ifft`, `rfft`, `irfft` and the
//! real transforms' adjoints), through rustfft and realfft: every length, mixed radix with
//! Rader/Bluestein for large primes. Plans come from one process-wide planner cache; rows
//! are split over rayon with per-job scratch. Complex data is interleaved `[re, im]` f32
//! pairs. numpy's "backward" norm: forward unscaled, inverse scaled by `1 / n`.

use std::sync::{Arc, Mutex, OnceLock};

use num_complex::Complex32;
use rayon::prelude::*;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};
use rustfft::{Fft, FftDirection, FftPlanner};

/// Complex values a rayon job transforms at least (small rows are batched together).
const JOB_VALUES: usize = 1 << 14;

/// `slice` of interleaved pairs as complex numbers (`num-complex` is `[re, im]` in memory).
fn pairs(slice: &[f32]) -> &[Complex32] {
    bytemuck::cast_slice(slice)
}

/// [`pairs`], mutable.
fn pairs_mut(slice: &mut [f32]) -> &mut [Complex32] {
    bytemuck::cast_slice_mut(slice)
}

/// The process-wide complex planner (rustfft keeps each length's plan once built).
fn complex_plan(n: usize, direction: FftDirection) -> Arc<dyn Fft<f32>> {
    static PLANNER: OnceLock<Mutex<FftPlanner<f32>>> = OnceLock::new();
    let planner = PLANNER.get_or_init(|| Mutex::new(FftPlanner::new()));
    let mut planner = planner.lock().unwrap_or_else(|e| e.into_inner());
    planner.plan_fft(n, direction)
}

/// The process-wide real planner.
fn real_planner() -> std::sync::MutexGuard<'static, RealFftPlanner<f32>> {
    static PLANNER: OnceLock<Mutex<RealFftPlanner<f32>>> = OnceLock::new();
    PLANNER
        .get_or_init(|| Mutex::new(RealFftPlanner::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The real-to-complex plan of length `n`.
pub(crate) fn r2c_plan(n: usize) -> Arc<dyn RealToComplex<f32>> {
    real_planner().plan_fft_forward(n)
}

/// The complex-to-real plan of length `n`.
pub(crate) fn c2r_plan(n: usize) -> Arc<dyn ComplexToReal<f32>> {
    real_planner().plan_fft_inverse(n)
}

/// Rows per rayon job for rows of `n` values.
pub(crate) fn rows_per_job(n: usize) -> usize {
    (JOB_VALUES / n.max(1)).max(1)
}

/// The complex DFT of every length-`n` row of `x` into `y` (interleaved, `x.len() ==
/// y.len()`, a multiple of `2n`); `inverse` takes `e^{+i}` and scales by `1 / n`.
pub fn fft_rows(x: &[f32], y: &mut [f32], n: usize, inverse: bool) {
    debug_assert_eq!(x.len(), y.len());
    if n == 0 || y.is_empty() {
        return;
    }
    let direction = if inverse {
        FftDirection::Inverse
    } else {
        FftDirection::Forward
    };
    let plan = complex_plan(n, direction);
    let scale = 1.0 / n as f32;
    let job = rows_per_job(n) * n;
    pairs_mut(y)
        .par_chunks_mut(job)
        .zip(pairs(x).par_chunks(job))
        .for_each_init(
            || vec![Complex32::default(); plan.get_inplace_scratch_len()],
            |scratch, (y, x)| {
                y.copy_from_slice(x);
                plan.process_with_scratch(y, scratch);
                if inverse {
                    y.iter_mut().for_each(|v| *v *= scale);
                }
            },
        );
}

/// Weight of bin `k` of a length-`n` half spectrum in the Hermitian fold: 1 for DC and (even
/// `n`) Nyquist, 2 for the bins that stand for a conjugate pair.
pub fn fold_weight(k: usize, n: usize) -> f32 {
    if k == 0 || (n.is_multiple_of(2) && k == n / 2) {
        1.0
    } else {
        2.0
    }
}

/// The real-to-complex DFT of every length-`n` row of `x` into the `n / 2 + 1` bins of the
/// matching row of `y` (interleaved), each bin `k` then multiplied by `bin_scale(k)`; with
/// `real_edges` the imaginary parts of DC and (even `n`) Nyquist are set to 0.
pub fn r2c_rows(
    x: &[f32],
    y: &mut [f32],
    n: usize,
    bin_scale: impl Fn(usize) -> f32 + Sync,
    real_edges: bool,
) {
    let bins = n / 2 + 1;
    if n == 0 || y.is_empty() {
        return;
    }
    let plan = r2c_plan(n);
    let rows = rows_per_job(n);
    y.par_chunks_mut(rows * 2 * bins)
        .zip(x.par_chunks(rows * n))
        .for_each_init(
            || (plan.make_input_vec(), plan.make_scratch_vec()),
            |(input, scratch), (y, x)| {
                for (y, x) in y.chunks_exact_mut(2 * bins).zip(x.chunks_exact(n)) {
                    input.copy_from_slice(x);
                    let out = pairs_mut(y);
                    plan.process_with_scratch(input, out, scratch)
                        .expect("buffer lengths come from the plan");
                    for (k, v) in out.iter_mut().enumerate() {
                        *v *= bin_scale(k);
                    }
                    if real_edges {
                        out[0].im = 0.0;
                        if n.is_multiple_of(2) {
                            out[bins - 1].im = 0.0;
                        }
                    }
                }
            },
        );
}

/// The complex-to-real DFT (`e^{+i}`, unscaled) of the Hermitian spectrum whose `n / 2 + 1`
/// bins are each row of `x` (interleaved) times `bin_scale(k)`, into the length-`n` rows of
/// `y`. The imaginary parts of DC and (even `n`) Nyquist are ignored, as numpy does.
pub fn c2r_rows(x: &[f32], y: &mut [f32], n: usize, bin_scale: impl Fn(usize) -> f32 + Sync) {
    let bins = n / 2 + 1;
    if n == 0 || y.is_empty() {
        return;
    }
    let plan = c2r_plan(n);
    let rows = rows_per_job(n);
    y.par_chunks_mut(rows * n)
        .zip(x.par_chunks(rows * 2 * bins))
        .for_each_init(
            || (plan.make_input_vec(), plan.make_scratch_vec()),
            |(input, scratch), (y, x)| {
                for (y, x) in y.chunks_exact_mut(n).zip(x.chunks_exact(2 * bins)) {
                    half_spectrum(pairs(x), n, &bin_scale, input);
                    plan.process_with_scratch(input, y, scratch)
                        .expect("buffer lengths come from the plan");
                }
            },
        );
}

/// `x` times `bin_scale(k)` into `input`, with the imaginary parts realfft requires to be 0
/// (DC, and Nyquist for even `n`) cleared.
pub(crate) fn half_spectrum(
    x: &[Complex32],
    n: usize,
    bin_scale: &impl Fn(usize) -> f32,
    input: &mut [Complex32],
) {
    for (k, (d, s)) in input.iter_mut().zip(x).enumerate() {
        *d = *s * bin_scale(k);
    }
    input[0].im = 0.0;
    if n.is_multiple_of(2) {
        input[n / 2].im = 0.0;
    }
}

/// `rfft` of the length-`n` rows of `x` into `y` (`n / 2 + 1` interleaved bins a row).
pub fn rfft(x: &[f32], y: &mut [f32], n: usize) {
    r2c_rows(x, y, n, |_| 1.0, false);
}

/// `irfft`: the length-`n` real rows of `y` whose half spectra are the rows of `x`, scaled
/// by `1 / n`.
pub fn irfft(x: &[f32], y: &mut [f32], n: usize) {
    let scale = 1.0 / n as f32;
    c2r_rows(x, y, n, |_| scale);
}

/// The adjoint of [`rfft`]: `dx[t] = Re sum_k dy[k] e^{+2 pi i k t / n}` over the half
/// spectrum's bins (the Hermitian synthesis of `dy` with the paired bins halved).
pub fn rfft_backward(dy: &[f32], dx: &mut [f32], n: usize) {
    c2r_rows(dy, dx, n, |k| 1.0 / fold_weight(k, n));
}

/// The adjoint of [`irfft`]: `dx[k] = w_k / n * rfft(dy)[k]`, `w_k` the [`fold_weight`],
/// with real DC and Nyquist (their imaginary parts do not reach `irfft`'s output).
pub fn irfft_backward(dy: &[f32], dx: &mut [f32], n: usize) {
    let scale = 1.0 / n as f32;
    r2c_rows(dy, dx, n, |k| fold_weight(k, n) * scale, true);
}
