//! Fourier transforms of rows on the GPU, as `brotensor_cpu::fft` and `brotensor_cpu::stft`
//! compute them: a Stockham autosort FFT, one launch per radix stage over every row's
//! butterflies (radices 8, 4, 2, 3, 5, 7, 11, 13 planned on the host from the length's
//! factors, each a comptime kernel variant), twiddles from a table computed in f64 on the
//! host; lengths with a larger prime factor go through Bluestein's chirp convolution on
//! power-of-two transforms. The real transforms and the STFT maps are the complex transform
//! between small gather kernels (expansion of real rows or half spectra, framing with the
//! window and the reflect padding, overlap-add as a gather over the frames that cover each
//! sample, the envelope division), so no kernel scatters and every result is deterministic.
//!
//! Complex data is interleaved `[re, im]` f32 pairs.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, grid_1d, Buf, LaunchError};

/// The radices a stage is compiled for, in the order the planner takes them.
const RADICES: [usize; 8] = [8, 4, 2, 3, 5, 7, 11, 13];

/// One Stockham stage of radix `radix` over `rows` rows of `n` complex values: after stages
/// whose radices multiply to `l`, butterfly `j` of a row reads `src[j + t n / radix]`
/// (`t < radix`), turns them by `w^(k t n / (l radix))` (`k = j mod l`, `w` the table's
/// `e^{-2 pi i / n}`, conjugated when `inverse`), takes their radix-point DFT and writes it
/// to `dst[(j / l) l radix + k + s l]`, times `scale`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn stockham_stage_kernel(
    src: &Array<f32>,
    dst: &mut Array<f32>,
    table: &Array<f32>,
    n: usize,
    l: usize,
    butterflies: usize,
    scale: f32,
    #[comptime] radix: usize,
    #[comptime] inverse: bool,
) {
    let u = ABSOLUTE_POS;
    if u < butterflies {
        let per_row = n / radix;
        let row = u / per_row;
        let j = u % per_row;
        let k = j % l;
        let base = row * n;
        let step = per_row / l;
        let mut v = Array::<f32>::new(2 * radix);
        #[unroll]
        for t in 0..radix {
            let at = 2 * (base + j + t * per_row);
            let (xr, xi) = (src[at], src[at + 1]);
            let q = 2 * (k * t * step);
            let wr = table[q];
            let mut wi = table[q + 1];
            if comptime!(inverse) {
                wi = -wi;
            }
            v[2 * t] = xr * wr - xi * wi;
            v[2 * t + 1] = xr * wi + xi * wr;
        }
        let out = base + (j / l) * l * radix + k;
        #[unroll]
        for s in 0..radix {
            let mut ar = 0.0f32;
            let mut ai = 0.0f32;
            #[unroll]
            for t in 0..radix {
                let q = 2 * (((s * t) % radix) * per_row);
                let wr = table[q];
                let mut wi = table[q + 1];
                if comptime!(inverse) {
                    wi = -wi;
                }
                ar += v[2 * t] * wr - v[2 * t + 1] * wi;
                ai += v[2 * t] * wi + v[2 * t + 1] * wr;
            }
            let at = 2 * (out + s * l);
            dst[at] = ar * scale;
            dst[at + 1] = ai * scale;
        }
    }
}

/// Bluestein's first step: `work[r, t] = x[r, t] chirp[t]` for `t < n`, 0 up to `m`.
#[cube(launch_unchecked)]
fn chirp_load_kernel(
    x: &Array<f32>,
    chirp: &Array<f32>,
    work: &mut Array<f32>,
    n: usize,
    m: usize,
    total: usize,
) {
    let u = ABSOLUTE_POS;
    if u < total {
        let (row, t) = (u / m, u % m);
        let mut re = 0.0f32;
        let mut im = 0.0f32;
        if t < n {
            let (xr, xi) = (x[2 * (row * n + t)], x[2 * (row * n + t) + 1]);
            let (cr, ci) = (chirp[2 * t], chirp[2 * t + 1]);
            re = xr * cr - xi * ci;
            im = xr * ci + xi * cr;
        }
        work[2 * u] = re;
        work[2 * u + 1] = im;
    }
}

/// `work[r, k] *= kernel[k]` (the chirp filter's spectrum, shared by every row of `m`).
#[cube(launch_unchecked)]
fn filter_kernel(work: &mut Array<f32>, filter: &Array<f32>, m: usize, total: usize) {
    let u = ABSOLUTE_POS;
    if u < total {
        let k = u % m;
        let (ar, ai) = (work[2 * u], work[2 * u + 1]);
        let (br, bi) = (filter[2 * k], filter[2 * k + 1]);
        work[2 * u] = ar * br - ai * bi;
        work[2 * u + 1] = ar * bi + ai * br;
    }
}

/// Bluestein's last step: `y[r, k] = scale chirp[k] work[r, k]` for `k < n`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn chirp_store_kernel(
    work: &Array<f32>,
    chirp: &Array<f32>,
    y: &mut Array<f32>,
    n: usize,
    m: usize,
    total: usize,
    scale: f32,
) {
    let u = ABSOLUTE_POS;
    if u < total {
        let (row, k) = (u / n, u % n);
        let at = 2 * (row * m + k);
        let (ar, ai) = (work[at], work[at + 1]);
        let (cr, ci) = (chirp[2 * k], chirp[2 * k + 1]);
        y[2 * u] = (ar * cr - ai * ci) * scale;
        y[2 * u + 1] = (ar * ci + ai * cr) * scale;
    }
}

/// Real rows to complex ones: `z = (x, 0)`.
#[cube(launch_unchecked)]
fn real_to_complex_kernel(x: &Array<f32>, z: &mut Array<f32>, total: usize) {
    let u = ABSOLUTE_POS;
    if u < total {
        z[2 * u] = x[u];
        z[2 * u + 1] = 0.0f32;
    }
}

/// The real parts: `y = Re z`.
#[cube(launch_unchecked)]
fn complex_real_kernel(z: &Array<f32>, y: &mut Array<f32>, total: usize) {
    let u = ABSOLUTE_POS;
    if u < total {
        y[u] = z[2 * u];
    }
}

/// The Hermitian spectrum of length `n` from `n / 2 + 1` bins a row: `z[k] = s_k x[k]` for
/// `k <= n / 2` and `conj(z[n - k])` above, the imaginary parts of DC and (even `n`) Nyquist
/// cleared; `s_k = scale`, halved for the bins that stand for a pair when `halve_pairs`.
#[cube(launch_unchecked)]
#[allow(clippy::collapsible_if)]
fn hermitian_kernel(
    x: &Array<f32>,
    z: &mut Array<f32>,
    n: usize,
    total: usize,
    scale: f32,
    #[comptime] halve_pairs: bool,
) {
    let u = ABSOLUTE_POS;
    if u < total {
        let bins = n / 2 + 1;
        let (row, k) = (u / n, u % n);
        let mut src = k;
        let mut sign = 1.0f32;
        if k >= bins {
            src = n - k;
            sign = f32::new(-1.0);
        }
        let at = 2 * (row * bins + src);
        let mut s = scale;
        let edge = src == 0 || src * 2 == n;
        if comptime!(halve_pairs) {
            if !edge {
                s = scale * 0.5f32;
            }
        }
        let mut im = x[at + 1] * s * sign;
        if edge {
            im = 0.0f32;
        }
        z[2 * u] = x[at] * s;
        z[2 * u + 1] = im;
    }
}

/// The first `n / 2 + 1` bins of each length-`n` row of `z`, times `scale` (and, when
/// `weighted`, by 2 for the bins that stand for a pair, with real DC and Nyquist).
#[cube(launch_unchecked)]
fn half_bins_kernel(
    z: &Array<f32>,
    y: &mut Array<f32>,
    n: usize,
    total: usize,
    scale: f32,
    #[comptime] weighted: bool,
) {
    let u = ABSOLUTE_POS;
    if u < total {
        let bins = n / 2 + 1;
        let (row, k) = (u / bins, u % bins);
        let at = 2 * (row * n + k);
        let mut re = z[at] * scale;
        let mut im = z[at + 1] * scale;
        if comptime!(weighted) {
            if k == 0 || k * 2 == n {
                im = 0.0f32;
            } else {
                re *= 2.0f32;
                im *= 2.0f32;
            }
        }
        y[2 * u] = re;
        y[2 * u + 1] = im;
    }
}

/// The STFT's framing (`brotensor_cpu::stft::StftFrames`), as the kernels take it.
#[derive(CubeType, Clone, Copy)]
struct Framing {
    /// Transform length.
    n_fft: usize,
    /// Samples between frames.
    hop: usize,
    /// Window length.
    win: usize,
    /// The window's offset in a frame.
    pad_lo: usize,
    /// How far the padded signal starts before the signal (0 unless centred).
    shift: usize,
    /// Samples of a signal.
    len: usize,
    /// Frames of a signal.
    frames: usize,
    /// Positions of the padded signal.
    padded: usize,
}

/// The framing from its eight words (in [`Framing`]'s field order).
#[cube]
fn framing(geom: &Array<u32>) -> Framing {
    Framing {
        n_fft: usize::cast_from(geom[0]),
        hop: usize::cast_from(geom[1]),
        win: usize::cast_from(geom[2]),
        pad_lo: usize::cast_from(geom[3]),
        shift: usize::cast_from(geom[4]),
        len: usize::cast_from(geom[5]),
        frames: usize::cast_from(geom[6]),
        padded: usize::cast_from(geom[7]),
    }
}

/// The signal sample padded position `p` reads: `p - shift` reflected into `0..len` by
/// folding with period `2 (len - 1)` (numpy's `reflect`).
#[cube]
fn source(p: usize, g: &Framing) -> usize {
    let q = i32::cast_from(p) - i32::cast_from(g.shift);
    let len = i32::cast_from(g.len);
    let mut m = 0i32;
    if len > 1 {
        let period = 2 * (len - 1);
        m = q % period;
        if m < 0 {
            m += period;
        }
        if m >= len {
            m = period - m;
        }
    }
    usize::cast_from(m)
}

/// Frames that cover padded position `p`: `lo .. hi` (empty when none does).
#[cube]
fn covering(p: usize, g: &Framing) -> (usize, usize) {
    let mut lo = 0usize;
    let mut hi = 0usize;
    if p >= g.pad_lo {
        let rel = p - g.pad_lo;
        hi = rel / g.hop + 1;
        if hi > g.frames {
            hi = g.frames;
        }
        if rel >= g.win {
            lo = (rel - g.win) / g.hop + 1;
        }
    }
    (lo, hi)
}

/// The window's overlap-added square at padded position `p`, inverted (0 where at most
/// 1e-10, as `brotensor_cpu::stft::inverse_envelope`).
#[cube]
fn inverse_envelope_at(p: usize, window: &Array<f32>, g: &Framing) -> f32 {
    let (lo, hi) = covering(p, g);
    let mut e = 0.0f32;
    for f in lo..hi {
        let w = window[p - f * g.hop - g.pad_lo];
        e += w * w;
    }
    let mut inv = 0.0f32;
    if e > 1e-10f32 {
        inv = 1.0f32 / e;
    }
    inv
}

/// Frame buffers for the forward transforms: element `i` of frame `f` of signal `b` is the
/// windowed sample (`Stft`: the signal at `source(f hop + i)`; `IstftBackward`: the signal
/// gradient at `f hop + i - shift` over the envelope, 0 in the padding), 0 outside the
/// window. `z` is `(signals frames, n_fft)` complex.
#[cube(launch_unchecked)]
fn frames_kernel(
    x: &Array<f32>,
    window: &Array<f32>,
    z: &mut Array<f32>,
    geom: &Array<u32>,
    total: usize,
    #[comptime] over_envelope: bool,
) {
    let u = ABSOLUTE_POS;
    if u < total {
        let g = framing(geom);
        let i = u % g.n_fft;
        let row = u / g.n_fft;
        let (b, f) = (row / g.frames, row % g.frames);
        let mut v = 0.0f32;
        if i >= g.pad_lo && i < g.pad_lo + g.win {
            let p = f * g.hop + i;
            let w = window[i - g.pad_lo];
            if comptime!(over_envelope) {
                if p >= g.shift && p < g.shift + g.len {
                    v = x[b * g.len + p - g.shift] * w * inverse_envelope_at(p, window, &g);
                }
            } else {
                v = x[b * g.len + source(p, &g)] * w;
            }
        }
        z[2 * u] = v;
        z[2 * u + 1] = 0.0f32;
    }
}

/// The windowed sum of the frames' (real) time values at padded position `p` of signal `b`.
#[cube]
fn frame_sum(time: &Array<f32>, window: &Array<f32>, b: usize, p: usize, g: &Framing) -> f32 {
    let (lo, hi) = covering(p, g);
    let mut acc = 0.0f32;
    for f in lo..hi {
        let i = p - f * g.hop;
        acc += time[2 * ((b * g.frames + f) * g.n_fft + i)] * window[i - g.pad_lo];
    }
    acc
}

/// Overlap-add as a gather, one unit per output sample `t` of signal `b`: `Istft` sums the
/// windowed frames at `t + shift` over the envelope; `StftBackward` sums them at every
/// padded position that reads sample `t` (the reflection's preimages).
#[cube(launch_unchecked)]
fn overlap_add_kernel(
    time: &Array<f32>,
    window: &Array<f32>,
    y: &mut Array<f32>,
    geom: &Array<u32>,
    total: usize,
    #[comptime] transpose_framing: bool,
) {
    let u = ABSOLUTE_POS;
    if u < total {
        let g = framing(geom);
        let (b, t) = (u / g.len, u % g.len);
        let mut acc = 0.0f32;
        if comptime!(transpose_framing) {
            if g.padded == g.len {
                acc = frame_sum(time, window, b, t, &g);
            } else if g.len == 1 {
                for p in 0..g.padded {
                    acc += frame_sum(time, window, b, p, &g);
                }
            } else {
                // q = p - shift reads t when q = t or q = -t modulo 2 (len - 1); the two
                // families coincide at the ends.
                let period = 2 * (g.len - 1);
                let ends = t == 0 || t == g.len - 1;
                // q runs over -shift .. padded - shift: p = q + shift = t + shift + k period,
                // and (the mirror) p = shift - t + k period.
                let mut p = t + g.shift;
                while p >= period {
                    p -= period;
                }
                while p < g.padded {
                    acc += frame_sum(time, window, b, p, &g);
                    p += period;
                }
                if !ends {
                    let mut m = (g.shift + period - t % period) % period;
                    while m < g.padded {
                        acc += frame_sum(time, window, b, m, &g);
                        m += period;
                    }
                }
            }
        } else {
            let p = t + g.shift;
            acc = frame_sum(time, window, b, p, &g) * inverse_envelope_at(p, window, &g);
        }
        y[u] = acc;
    }
}

/// The stages of a length-`n` transform: radices from [`RADICES`] whose product is `n`, or
/// `None` when `n` has a larger prime factor. Length 1 is one radix-1 stage (a copy).
fn stages(mut n: usize) -> Option<Vec<usize>> {
    if n == 1 {
        return Some(vec![1]);
    }
    let mut out = Vec::new();
    for r in RADICES {
        while n.is_multiple_of(r) {
            out.push(r);
            n /= r;
        }
    }
    (n == 1).then_some(out)
}

/// `e^{-2 pi i q / n}` for `q < n`, computed in f64, interleaved.
fn twiddles(n: usize) -> Vec<f32> {
    (0..n)
        .flat_map(|q| {
            let a = -2.0 * std::f64::consts::PI * q as f64 / n as f64;
            [a.cos() as f32, a.sin() as f32]
        })
        .collect()
}

/// A complex scratch buffer of `values` complex elements.
fn scratch<R: Runtime>(client: &ComputeClient<R>, values: usize) -> Result<Handle, LaunchError> {
    Ok(client.empty(extent("complex scratch bytes", &[values, 8])?.max(8)))
}

/// Launches a one-dimensional kernel over `units` units.
macro_rules! launch_1d {
    ($client:expr, $units:expr, $kernel:ident($($arg:expr),* $(,)?)) => {{
        let (count, dim) = grid_1d($client, $units)?;
        // SAFETY: every caller checked its buffers (`Buf`) to hold what the units touch:
        // the unit count is the element count the indices are derived from, each unit
        // bounds-checks against it, and every length fits in 32 bits (`check_u32`).
        unsafe {
            $kernel::launch_unchecked::<R>($client, count, dim, $($arg),*);
        }
    }};
}

/// `y = scale DFT(x)` of `rows` rows of `n` complex values (`e^{+i}` when `inverse`); `x`
/// and `y` distinct buffers of `rows n` complex values.
fn complex_rows<R: Runtime>(
    client: &ComputeClient<R>,
    (x, y): (&Handle, &Handle),
    (n, rows): (usize, usize),
    inverse: bool,
    scale: f32,
) -> Result<(), LaunchError> {
    let values = extent("rows * n", &[rows, n])?;
    let parts = extent("2 * rows * n", &[values, 2])?;
    check_u32(&[("2 * rows * n", parts)])?;
    if values == 0 {
        return Ok(());
    }
    let x = Buf::new("x", x, parts, 4)?;
    let y = Buf::new("y", y, parts, 4)?;
    match stages(n) {
        Some(radices) => {
            let plan = Plan::new(client, n, radices);
            stockham(client, (&x, &y), (n, rows), &plan, inverse, scale)
        }
        None => bluestein(client, (&x, &y), (n, rows), inverse, scale),
    }
}

/// The stages of a length-`n` transform and its twiddle table on the device (one upload,
/// shared by every transform of that length in a launch).
struct Plan {
    radices: Vec<usize>,
    table: Buf,
}

impl Plan {
    fn new<R: Runtime>(client: &ComputeClient<R>, n: usize, radices: Vec<usize>) -> Self {
        Plan {
            radices,
            table: Buf::upload(client, &twiddles(n)),
        }
    }
}

/// The Stockham stages of `plan` from `x` into `y`, ping-ponging through a scratch buffer so
/// that the last stage writes `y`; the last stage applies `scale`.
fn stockham<R: Runtime>(
    client: &ComputeClient<R>,
    (x, y): (&Buf, &Buf),
    (n, rows): (usize, usize),
    plan: &Plan,
    inverse: bool,
    scale: f32,
) -> Result<(), LaunchError> {
    let parts = 2 * rows * n;
    let (table, plan) = (&plan.table, &plan.radices);
    let other = Buf::new("scratch", &scratch(client, rows * n)?, parts, 4)?;
    // Stage s writes y when (stages - 1 - s) is even.
    let mut src = x.clone();
    let mut l = 1;
    for (s, &radix) in plan.iter().enumerate() {
        let dst = if (plan.len() - 1 - s).is_multiple_of(2) {
            y
        } else {
            &other
        };
        let last = s + 1 == plan.len();
        let butterflies = rows * n / radix;
        launch_1d!(
            client,
            butterflies,
            stockham_stage_kernel(
                src.arg(),
                dst.arg(),
                table.arg(),
                n,
                l,
                butterflies,
                if last { scale } else { 1.0 },
                radix,
                inverse,
            )
        );
        src = dst.clone();
        l *= radix;
    }
    Ok(())
}

/// Bluestein's algorithm for a length `n` with a prime factor above 13: the chirp
/// convolution through power-of-two transforms of length `m >= 2n - 1`.
fn bluestein<R: Runtime>(
    client: &ComputeClient<R>,
    (x, y): (&Buf, &Buf),
    (n, rows): (usize, usize),
    inverse: bool,
    scale: f32,
) -> Result<(), LaunchError> {
    let m = (2 * n - 1).next_power_of_two();
    let sign = if inverse { 1.0 } else { -1.0 };
    // chirp[t] = e^{sign pi i t^2 / n}, with t^2 reduced modulo 2n so the angle stays exact.
    let angle = |t: usize| sign * std::f64::consts::PI * ((t * t) % (2 * n)) as f64 / n as f64;
    let chirp: Vec<f32> = (0..n)
        .flat_map(|t| [angle(t).cos() as f32, angle(t).sin() as f32])
        .collect();
    // The filter b[t] = conj(chirp[|t|]) for |t| < n, wrapped into m.
    let mut filter = vec![0.0f32; 2 * m];
    for t in 0..n {
        for at in [t, (m - t) % m] {
            filter[2 * at] = angle(t).cos() as f32;
            filter[2 * at + 1] = -(angle(t).sin() as f32);
        }
    }
    let total = extent("rows * m", &[rows, m])?;
    check_u32(&[("2 * rows * m", extent("2 * rows * m", &[total, 2])?)])?;
    let chirp = Buf::upload(client, &chirp);
    let filter_in = Buf::upload(client, &filter);
    let filter_out = Buf::new("filter", &scratch(client, m)?, 2 * m, 4)?;
    let plan = Plan::new(client, m, stages(m).expect("a power of two"));
    stockham(client, (&filter_in, &filter_out), (m, 1), &plan, false, 1.0)?;
    let work = Buf::new("work", &scratch(client, total)?, 2 * total, 4)?;
    let spectrum = Buf::new("spectrum", &scratch(client, total)?, 2 * total, 4)?;
    launch_1d!(
        client,
        total,
        chirp_load_kernel(x.arg(), chirp.arg(), work.arg(), n, m, total)
    );
    stockham(client, (&work, &spectrum), (m, rows), &plan, false, 1.0)?;
    launch_1d!(
        client,
        total,
        filter_kernel(spectrum.arg(), filter_out.arg(), m, total)
    );
    stockham(client, (&spectrum, &work), (m, rows), &plan, true, 1.0)?;
    let outputs = rows * n;
    launch_1d!(
        client,
        outputs,
        chirp_store_kernel(
            work.arg(),
            chirp.arg(),
            y.arg(),
            n,
            m,
            outputs,
            scale / m as f32
        )
    );
    Ok(())
}

/// A transform of rows, as `brotensor_cpu::fft` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FftKind {
    /// Complex, `e^{-i}`, unscaled.
    Fft,
    /// Complex, `e^{+i}`, `1 / n`.
    Ifft,
    /// Real rows to `n / 2 + 1` bins.
    Rfft,
    /// Bins to real rows, `1 / n`.
    Irfft,
    /// The adjoint of `Rfft`.
    RfftBackward,
    /// The adjoint of `Irfft`.
    IrfftBackward,
}

/// `kind` of `rows` rows of length `n` from `x` into `y`: complex rows are `2n` floats, half
/// spectra `2 (n / 2 + 1)`, real rows `n`.
pub fn launch_fft<R: Runtime>(
    client: &ComputeClient<R>,
    kind: FftKind,
    (x, y): (&Handle, &Handle),
    n: usize,
    rows: usize,
) -> Result<(), LaunchError> {
    let values = extent("rows * n", &[rows, n])?;
    let bins = n / 2 + 1;
    let half = extent("rows * bins", &[rows, bins])?;
    check_u32(&[("2 * rows * n", extent("2 * rows * n", &[values, 2])?)])?;
    if values == 0 {
        return Ok(());
    }
    let inv_n = 1.0 / n as f32;
    match kind {
        FftKind::Fft => complex_rows(client, (x, y), (n, rows), false, 1.0),
        FftKind::Ifft => complex_rows(client, (x, y), (n, rows), true, inv_n),
        FftKind::Rfft | FftKind::IrfftBackward => {
            let xb = Buf::new("x", x, values, 4)?;
            let yb = Buf::new("y", y, 2 * half, 4)?;
            let z = scratch(client, values)?;
            let zb = Buf::new("z", &z, 2 * values, 4)?;
            launch_1d!(
                client,
                values,
                real_to_complex_kernel(xb.arg(), zb.arg(), values)
            );
            let spectrum = scratch(client, values)?;
            complex_rows(client, (&z, &spectrum), (n, rows), false, 1.0)?;
            let sb = Buf::new("spectrum", &spectrum, 2 * values, 4)?;
            let weighted = kind == FftKind::IrfftBackward;
            let scale = if weighted { inv_n } else { 1.0 };
            launch_1d!(
                client,
                half,
                half_bins_kernel(sb.arg(), yb.arg(), n, half, scale, weighted)
            );
            Ok(())
        }
        FftKind::Irfft | FftKind::RfftBackward => {
            let xb = Buf::new("x", x, 2 * half, 4)?;
            let yb = Buf::new("y", y, values, 4)?;
            let z = scratch(client, values)?;
            let zb = Buf::new("z", &z, 2 * values, 4)?;
            let halve = kind == FftKind::RfftBackward;
            launch_1d!(
                client,
                values,
                hermitian_kernel(xb.arg(), zb.arg(), n, values, 1.0, halve)
            );
            let time = scratch(client, values)?;
            let scale = if halve { 1.0 } else { inv_n };
            complex_rows(client, (&z, &time), (n, rows), true, scale)?;
            let tb = Buf::new("time", &time, 2 * values, 4)?;
            launch_1d!(
                client,
                values,
                complex_real_kernel(tb.arg(), yb.arg(), values)
            );
            Ok(())
        }
    }
}

/// One of the four STFT maps, as `brotensor_cpu::stft` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StftKind {
    /// Signals to spectrogram.
    Stft,
    /// The transpose of `Stft`.
    StftBackward,
    /// Spectrogram to signals.
    Istft,
    /// The transpose of `Istft`.
    IstftBackward,
}

/// The framing of an STFT launch (validated by the caller, as `brotensor_cpu::stft::
/// StftFrames` says).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StftShape {
    /// Signals.
    pub signals: usize,
    /// Samples of a signal.
    pub len: usize,
    /// Frames of a signal.
    pub frames: usize,
    /// Transform length.
    pub n_fft: usize,
    /// Samples between frames.
    pub hop: usize,
    /// Window length.
    pub win: usize,
    /// Reflect-padded by `n_fft / 2`.
    pub center: bool,
    /// The forward scale (`1 / sqrt(n_fft)` when normalized, else 1).
    pub norm: f32,
}

/// `kind` of an STFT shaped by `s` with `window` (`win` floats): `x` the signals `(signals,
/// len)` or the spectrogram `(signals frames, 2 (n_fft / 2 + 1))`, `y` the other.
pub fn launch_stft<R: Runtime>(
    client: &ComputeClient<R>,
    kind: StftKind,
    (x, window, y): (&Handle, &Handle, &Handle),
    s: &StftShape,
) -> Result<(), LaunchError> {
    let shift = if s.center { s.n_fft / 2 } else { 0 };
    let padded = if s.center { s.len + s.n_fft } else { s.len };
    let rows = extent("signals * frames", &[s.signals, s.frames])?;
    let values = extent("rows * n_fft", &[rows, s.n_fft])?;
    let bins = s.n_fft / 2 + 1;
    let spec = extent("2 * rows * bins", &[rows, bins, 2])?;
    let samples = extent("signals * len", &[s.signals, s.len])?;
    check_u32(&[
        (
            "2 * rows * n_fft",
            extent("2 * rows * n_fft", &[values, 2])?,
        ),
        (
            "signals * padded",
            extent("signals * padded", &[s.signals, padded])?,
        ),
    ])?;
    if values == 0 || samples == 0 {
        return Ok(());
    }
    let words: Vec<u32> = [
        s.n_fft,
        s.hop,
        s.win,
        (s.n_fft - s.win) / 2,
        shift,
        s.len,
        s.frames,
        padded,
    ]
    .iter()
    .map(|&v| v as u32)
    .collect();
    let geom = Buf::upload(client, &words);
    let window = Buf::new("window", window, s.win, 4)?;
    let z = scratch(client, values)?;
    let zb = Buf::new("frames", &z, 2 * values, 4)?;
    let other = scratch(client, values)?;
    let ob = Buf::new("spectra", &other, 2 * values, 4)?;
    match kind {
        StftKind::Stft | StftKind::IstftBackward => {
            let xb = Buf::new("x", x, samples, 4)?;
            let yb = Buf::new("y", y, spec, 4)?;
            let envelope = kind == StftKind::IstftBackward;
            launch_1d!(
                client,
                values,
                frames_kernel(
                    xb.arg(),
                    window.arg(),
                    zb.arg(),
                    geom.arg(),
                    values,
                    envelope
                )
            );
            complex_rows(client, (&z, &other), (s.n_fft, rows), false, 1.0)?;
            let half = rows * bins;
            let scale = if envelope {
                1.0 / (s.norm * s.n_fft as f32)
            } else {
                s.norm
            };
            launch_1d!(
                client,
                half,
                half_bins_kernel(ob.arg(), yb.arg(), s.n_fft, half, scale, envelope)
            );
        }
        StftKind::StftBackward | StftKind::Istft => {
            let xb = Buf::new("x", x, spec, 4)?;
            let yb = Buf::new("y", y, samples, 4)?;
            let transpose = kind == StftKind::StftBackward;
            let (pre, post) = if transpose {
                (s.norm, 1.0)
            } else {
                (1.0 / s.norm, 1.0 / s.n_fft as f32)
            };
            launch_1d!(
                client,
                values,
                hermitian_kernel(xb.arg(), zb.arg(), s.n_fft, values, pre, transpose)
            );
            complex_rows(client, (&z, &other), (s.n_fft, rows), true, post)?;
            launch_1d!(
                client,
                samples,
                overlap_add_kernel(
                    ob.arg(),
                    window.arg(),
                    yb.arg(),
                    geom.arg(),
                    samples,
                    transpose
                )
            );
        }
    }
    Ok(())
}

/// Every kernel of this file, lowered to CUDA C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{Lowering as L, Rt};
    let c = l.client.clone();
    let a = L::array;
    let s = L::settings_1d;
    for radix in std::iter::once(1).chain(RADICES) {
        for inverse in [false, true] {
            l.lower(stockham_stage_kernel::StockhamStageKernel::<Rt>::new(
                s(),
                c.clone(),
                a(),
                a(),
                a(),
                (),
                (),
                (),
                (),
                radix,
                inverse,
            ));
        }
    }
    l.lower(chirp_load_kernel::ChirpLoadKernel::<Rt>::new(
        s(),
        c.clone(),
        a(),
        a(),
        a(),
        (),
        (),
        (),
    ));
    l.lower(filter_kernel::FilterKernel::<Rt>::new(
        s(),
        c.clone(),
        a(),
        a(),
        (),
        (),
    ));
    l.lower(chirp_store_kernel::ChirpStoreKernel::<Rt>::new(
        s(),
        c.clone(),
        a(),
        a(),
        a(),
        (),
        (),
        (),
        (),
    ));
    l.lower(real_to_complex_kernel::RealToComplexKernel::<Rt>::new(
        s(),
        c.clone(),
        a(),
        a(),
        (),
    ));
    l.lower(complex_real_kernel::ComplexRealKernel::<Rt>::new(
        s(),
        c.clone(),
        a(),
        a(),
        (),
    ));
    for flag in [false, true] {
        l.lower(hermitian_kernel::HermitianKernel::<Rt>::new(
            s(),
            c.clone(),
            a(),
            a(),
            (),
            (),
            (),
            flag,
        ));
        l.lower(half_bins_kernel::HalfBinsKernel::<Rt>::new(
            s(),
            c.clone(),
            a(),
            a(),
            (),
            (),
            (),
            flag,
        ));
        l.lower(frames_kernel::FramesKernel::<Rt>::new(
            s(),
            c.clone(),
            a(),
            a(),
            a(),
            a(),
            (),
            flag,
        ));
        l.lower(overlap_add_kernel::OverlapAddKernel::<Rt>::new(
            s(),
            c.clone(),
            a(),
            a(),
            a(),
            a(),
            (),
            flag,
        ));
    }
}
