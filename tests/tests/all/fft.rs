//! The Fourier transforms and the STFT of the spectral family on every device: `fft`,
//! `ifft`, `rfft` against numpy's float64 `numpy.fft` (`tests/fixtures/spectral.{txt,bin}`,
//! lengths 1 to 65536, primes included), `irfft` against the inputs numpy transformed, the
//! STFT and iSTFT against float64 framing and DFTs written here, the four backward slots
//! against the float64 transposes of those references (every element), the round trip of a
//! COLA window, and the error cases.

use brotensor::ops::StftSpec;
use brotensor::Complex;
use brotensor::{ops, Device, Dtype, Error, Tensor};
use brotensor_tests::{assert_close_rows, gpu_devices, SplitMix64};
use std::f64::consts::PI;

fn devices() -> Vec<Device> {
    std::iter::once(Device::Cpu).chain(gpu_devices()).collect()
}

/// One fixture line: `n`, `rows`, `seed`, `at`.
struct Case {
    n: usize,
    rows: usize,
    seed: u64,
    at: usize,
}

fn cases() -> (Vec<Case>, Vec<f32>) {
    let text = include_str!("../../fixtures/spectral.txt");
    let bin = include_bytes!("../../fixtures/spectral.bin");
    let cases = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let field = |key: &str| -> usize {
                l.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                    .expect("key=value")
                    .parse()
                    .expect("a number")
            };
            Case {
                n: field("n"),
                rows: field("rows"),
                seed: field("seed") as u64,
                at: field("at"),
            }
        })
        .collect();
    let values = bin
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    (cases, values)
}

/// Interleaved values as a complex tensor `(rows, n)`: F32 `(rows, 2n)` or C64.
fn complex(dev: Device, v: &[f32], rows: usize, c64: bool) -> Tensor {
    let n = v.len() / (2 * rows);
    if c64 {
        let z: Vec<Complex<f32>> = v.chunks(2).map(|p| Complex::new(p[0], p[1])).collect();
        Tensor::from_slice_on(dev, &z, rows, n).unwrap()
    } else {
        Tensor::from_slice_on(dev, v, rows, 2 * n).unwrap()
    }
}

/// A complex tensor's interleaved floats.
fn floats(t: &Tensor) -> Vec<f32> {
    match t.dtype() {
        Dtype::C64 => t
            .to_vec::<Complex<f32>>()
            .unwrap()
            .iter()
            .flat_map(|z| [z.re, z.im])
            .collect(),
        _ => t.to_vec::<f32>().unwrap(),
    }
}

/// FP32 transform error grows like `log2 n`; relative to each row's largest magnitude.
fn tol(n: usize) -> (f32, f32) {
    (4e-6 * (n.max(2) as f32).log2().max(1.0), 1e-6)
}

#[test]
fn transforms_follow_numpy_for_every_length() {
    let (cases, refs) = cases();
    assert_eq!(cases.len(), 13, "the fixture's lengths");
    for dev in devices() {
        for (i, c) in cases.iter().enumerate() {
            let (n, rows) = (c.n, c.rows);
            let z = SplitMix64::new(c.seed).uniform(2 * rows * n, -1.0, 1.0);
            let x = SplitMix64::new(c.seed + 1000).uniform(rows * n, -1.0, 1.0);
            let bins = n / 2 + 1;
            let want_fft = &refs[c.at..][..2 * rows * n];
            let want_ifft = &refs[c.at + 2 * rows * n..][..2 * rows * n];
            let want_rfft = &refs[c.at + 4 * rows * n..][..2 * rows * bins];
            let c64 = i % 2 == 1;
            let zt = complex(dev, &z, rows, c64);
            let tag = |op: &str| format!("{op} n {n} rows {rows} c64 {c64} on {dev}");

            let mut y = Tensor::default();
            ops::fft(&zt, &mut y).unwrap();
            assert_eq!(y.dtype(), zt.dtype());
            assert_close_rows(&tag("fft"), want_fft, &floats(&y), 2 * n, tol(n));
            ops::ifft(&zt, &mut y).unwrap();
            assert_close_rows(&tag("ifft"), want_ifft, &floats(&y), 2 * n, tol(n));

            let xt = Tensor::from_slice_on(dev, &x, rows, n).unwrap();
            ops::rfft(&xt, &mut y).unwrap();
            assert_eq!(y.dims(), [rows, 2 * bins]);
            let got = y.to_vec::<f32>().unwrap();
            assert_close_rows(&tag("rfft"), want_rfft, &got, 2 * bins, tol(n));

            // irfft of numpy's spectrum gives back numpy's input.
            let spectrum = complex(dev, want_rfft, rows, !c64);
            let mut back = Tensor::default();
            ops::irfft(&spectrum, n, &mut back).unwrap();
            assert_eq!(back.dims(), [rows, n]);
            let got = back.to_vec::<f32>().unwrap();
            assert_close_rows(&tag("irfft"), &x, &got, n, tol(n));
        }
    }
}

/// `sum_t v[t] e^{sign 2 pi i k t / n}` in float64 (interleaved complex `v`).
fn dft(v: &[f64], sign: f64) -> Vec<f64> {
    let n = v.len() / 2;
    let mut out = vec![0.0; 2 * n];
    for k in 0..n {
        let (mut re, mut im) = (0.0, 0.0);
        for t in 0..n {
            let a = sign * 2.0 * PI * ((k * t) % n) as f64 / n as f64;
            let (s, c) = a.sin_cos();
            re += v[2 * t] * c - v[2 * t + 1] * s;
            im += v[2 * t] * s + v[2 * t + 1] * c;
        }
        out[2 * k] = re;
        out[2 * k + 1] = im;
    }
    out
}

/// numpy's rfft of a real row in float64: bins `0 ..= n / 2`, interleaved.
fn rfft64(x: &[f64]) -> Vec<f64> {
    let z: Vec<f64> = x.iter().flat_map(|&v| [v, 0.0]).collect();
    let full = dft(&z, -1.0);
    full[..2 * (x.len() / 2 + 1)].to_vec()
}

/// numpy's irfft of `n / 2 + 1` interleaved bins to length `n` in float64 (the imaginary
/// parts of DC and even-`n` Nyquist ignored).
fn irfft64(bins: &[f64], n: usize) -> Vec<f64> {
    let mut full = vec![0.0; 2 * n];
    for k in 0..n {
        let (src, conj) = if k <= n / 2 { (k, 1.0) } else { (n - k, -1.0) };
        full[2 * k] = bins[2 * src];
        full[2 * k + 1] = conj * bins[2 * src + 1];
    }
    full[1] = 0.0;
    if n.is_multiple_of(2) {
        full[n + 1] = 0.0;
    }
    dft(&full, 1.0).chunks(2).map(|p| p[0] / n as f64).collect()
}

/// `A^T y` in float64 for the linear map `forward` of `inputs` values, built column by
/// column from the basis vectors: every element of a backward slot is checked.
fn transpose(forward: impl Fn(&[f64]) -> Vec<f64>, inputs: usize, y: &[f64]) -> Vec<f32> {
    let mut e = vec![0.0; inputs];
    (0..inputs)
        .map(|i| {
            e[i] = 1.0;
            let col = forward(&e);
            e[i] = 0.0;
            assert_eq!(col.len(), y.len());
            col.iter().zip(y).map(|(a, b)| a * b).sum::<f64>() as f32
        })
        .collect()
}

fn wide(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

#[test]
fn real_transform_adjoints_are_the_float64_transposes() {
    for dev in devices() {
        for (i, n) in [1usize, 2, 5, 16, 17, 100, 255].into_iter().enumerate() {
            let (rows, bins) = (3, n / 2 + 1);
            let mut rng = SplitMix64::new(40 + i as u64);
            let dy_bins = rng.uniform(rows * 2 * bins, -1.0, 1.0);
            let dy_real = rng.uniform(rows * n, -1.0, 1.0);
            let (mut want_rb, mut want_ib) = (Vec::new(), Vec::new());
            for r in 0..rows {
                let yb = wide(&dy_bins[r * 2 * bins..][..2 * bins]);
                want_rb.extend(transpose(rfft64, n, &yb));
                let yr = wide(&dy_real[r * n..][..n]);
                want_ib.extend(transpose(|b| irfft64(b, n), 2 * bins, &yr));
            }
            let tag = |op: &str| format!("{op} n {n} on {dev}");
            let dyb = complex(dev, &dy_bins, rows, i % 2 == 0);
            let mut dx = Tensor::default();
            ops::rfft_backward(&dyb, n, &mut dx).unwrap();
            assert_eq!(dx.dims(), [rows, n]);
            let got = dx.to_vec::<f32>().unwrap();
            assert_close_rows(&tag("rfft_backward"), &want_rb, &got, n, tol(n));

            let dyr = Tensor::from_slice_on(dev, &dy_real, rows, n).unwrap();
            ops::irfft_backward(&dyr, &mut dx).unwrap();
            assert_eq!(dx.dims(), [rows, 2 * bins]);
            let got = dx.to_vec::<f32>().unwrap();
            assert_close_rows(&tag("irfft_backward"), &want_ib, &got, 2 * bins, tol(n));
        }
    }
}

/// The STFT framing written out in float64 from the contract (torch.stft): the padded
/// signal, the window centred in `n_fft`, frames `hop` apart.
struct Framing {
    spec: StftSpec,
    len: usize,
}

impl Framing {
    fn pad(&self) -> usize {
        if self.spec.center {
            self.spec.n_fft / 2
        } else {
            0
        }
    }

    fn frames(&self) -> usize {
        let s = &self.spec;
        if s.center {
            1 + self.len / s.hop_length
        } else {
            1 + (self.len - s.n_fft) / s.hop_length
        }
    }

    fn bins(&self) -> usize {
        self.spec.n_fft / 2 + 1
    }

    /// The window padded to `n_fft`.
    fn full_window(&self, w: &[f32]) -> Vec<f64> {
        let lo = (self.spec.n_fft - w.len()) / 2;
        (0..self.spec.n_fft)
            .map(|i| {
                if i >= lo && i < lo + w.len() {
                    f64::from(w[i - lo])
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// The reflect-padded signal (numpy `np.pad(mode="reflect")`), with `n_fft` more values
    /// on the right when centred so every frame position exists.
    fn padded(&self, x: &[f64]) -> Vec<f64> {
        let pad = self.pad();
        let extra = if self.spec.center {
            self.spec.n_fft - pad
        } else {
            0
        };
        (0..self.len + pad + extra)
            .map(|p| {
                let mut q = p as i64 - pad as i64;
                let last = self.len as i64 - 1;
                while q < 0 || q > last {
                    q = if q < 0 { -q } else { 2 * last - q };
                }
                x[q as usize]
            })
            .collect()
    }

    fn norm(&self) -> f64 {
        if self.spec.normalized {
            1.0 / (self.spec.n_fft as f64).sqrt()
        } else {
            1.0
        }
    }

    /// The spectrogram of one signal: `(frames, 2 bins)`.
    fn stft(&self, x: &[f64], w: &[f32]) -> Vec<f64> {
        let (n_fft, hop) = (self.spec.n_fft, self.spec.hop_length);
        let (p, win) = (self.padded(x), self.full_window(w));
        let mut out = Vec::new();
        for f in 0..self.frames() {
            let frame: Vec<f64> = (0..n_fft).map(|i| p[f * hop + i] * win[i]).collect();
            out.extend(rfft64(&frame).into_iter().map(|v| v * self.norm()));
        }
        out
    }

    /// The overlap-added inverse of one signal's spectrogram over the squared-window
    /// envelope (0 where it is below 1e-10), the padding cut off.
    fn istft(&self, spec: &[f64], w: &[f32]) -> Vec<f64> {
        let (n_fft, hop, bins) = (self.spec.n_fft, self.spec.hop_length, self.bins());
        let win = self.full_window(w);
        let total = self.len + 2 * n_fft;
        let (mut acc, mut env) = (vec![0.0; total], vec![0.0; total]);
        for f in 0..self.frames() {
            let time = irfft64(&spec[f * 2 * bins..][..2 * bins], n_fft);
            for i in 0..n_fft {
                acc[f * hop + i] += time[i] * win[i] / self.norm();
                env[f * hop + i] += win[i] * win[i];
            }
        }
        (0..self.len)
            .map(|t| {
                let p = t + self.pad();
                if env[p] > 1e-10 {
                    acc[p] / env[p]
                } else {
                    0.0
                }
            })
            .collect()
    }
}

/// The STFT configurations: even and odd `n_fft`, a window shorter than `n_fft`, centred and
/// not, normalized and not, a prime `n_fft`, the Whisper front end's 400 / 160.
fn framings() -> Vec<(Framing, Vec<f32>)> {
    let spec = |n_fft, hop, win, center, normalized| StftSpec {
        n_fft,
        hop_length: hop,
        win_length: win,
        center,
        normalized,
    };
    let hann = |n: usize| ops::hann_window(n, true).unwrap().to_vec::<f32>().unwrap();
    vec![
        (
            Framing {
                spec: spec(16, 4, 16, true, false),
                len: 50,
            },
            hann(16),
        ),
        (
            Framing {
                spec: spec(15, 5, 12, false, true),
                len: 47,
            },
            SplitMix64::new(7).uniform(12, 0.1, 1.0),
        ),
        (
            Framing {
                spec: spec(17, 6, 10, true, true),
                len: 40,
            },
            SplitMix64::new(8).uniform(10, -1.0, 1.0),
        ),
        (
            Framing {
                spec: spec(8, 3, 5, true, false),
                len: 5,
            },
            hann(5),
        ),
        (
            Framing {
                spec: spec(400, 160, 400, true, false),
                len: 1000,
            },
            hann(400),
        ),
    ]
}

#[test]
fn stft_and_istft_follow_float64_framing() {
    for dev in devices() {
        for (i, (fr, w)) in framings().into_iter().enumerate() {
            let (signals, len, frames, bins) = (2, fr.len, fr.frames(), fr.bins());
            let n_fft = fr.spec.n_fft;
            assert_eq!(fr.spec.frames(len).unwrap(), frames);
            let x = SplitMix64::new(60 + i as u64).uniform(signals * len, -1.0, 1.0);
            let spec_in =
                SplitMix64::new(70 + i as u64).uniform(signals * frames * 2 * bins, -1.0, 1.0);
            let (mut want_s, mut want_i) = (Vec::new(), Vec::new());
            for s in 0..signals {
                want_s.extend(
                    fr.stft(&wide(&x[s * len..][..len]), &w)
                        .iter()
                        .map(|&v| v as f32),
                );
                let sp = wide(&spec_in[s * frames * 2 * bins..][..frames * 2 * bins]);
                want_i.extend(fr.istft(&sp, &w).iter().map(|&v| v as f32));
            }
            let tag = |op: &str| format!("{op} {:?} len {len} on {dev}", fr.spec);
            let wt = if i % 2 == 0 {
                Tensor::from_slice_nd_on(dev, &w, &[w.len()]).unwrap()
            } else {
                Tensor::from_slice_on(dev, &w, 1, w.len()).unwrap()
            };
            let xt = Tensor::from_slice_on(dev, &x, signals, len).unwrap();
            let mut y = Tensor::default();
            ops::stft(&xt, &wt, &fr.spec, &mut y).unwrap();
            assert_eq!(y.dims(), [signals * frames, 2 * bins]);
            let got = y.to_vec::<f32>().unwrap();
            assert_close_rows(&tag("stft"), &want_s, &got, 2 * bins, tol(n_fft));

            let st = Tensor::from_slice_on(dev, &spec_in, signals * frames, 2 * bins).unwrap();
            let mut sig = Tensor::default();
            ops::istft(&st, &wt, (signals, len), &fr.spec, &mut sig).unwrap();
            assert_eq!(sig.dims(), [signals, len]);
            let got = sig.to_vec::<f32>().unwrap();
            // The envelope division amplifies where the window's tail is small: the scale
            // is the signal's, the error the envelope's worst ratio.
            assert_close_rows(&tag("istft"), &want_i, &got, len, (2e-4, 1e-5));
        }
    }
}

#[test]
fn stft_backward_slots_are_the_float64_transposes() {
    for dev in devices() {
        for (i, (fr, w)) in framings()
            .into_iter()
            .enumerate()
            .filter(|(_, (f, _))| f.spec.n_fft < 100)
        {
            let (signals, len, frames, bins) = (2, fr.len, fr.frames(), fr.bins());
            let spec_len = frames * 2 * bins;
            let mut rng = SplitMix64::new(80 + i as u64);
            let dspec = rng.uniform(signals * spec_len, -1.0, 1.0);
            let dsig = rng.uniform(signals * len, -1.0, 1.0);
            let (mut want_sb, mut want_ib) = (Vec::new(), Vec::new());
            for s in 0..signals {
                let y = wide(&dspec[s * spec_len..][..spec_len]);
                want_sb.extend(transpose(|x| fr.stft(x, &w), len, &y));
                let y = wide(&dsig[s * len..][..len]);
                want_ib.extend(transpose(|sp| fr.istft(sp, &w), spec_len, &y));
            }
            let tag = |op: &str| format!("{op} {:?} len {len} on {dev}", fr.spec);
            let wt = Tensor::from_slice_nd_on(dev, &w, &[w.len()]).unwrap();
            let dst = Tensor::from_slice_on(dev, &dspec, signals * frames, 2 * bins).unwrap();
            let mut out = Tensor::default();
            ops::stft_backward(&dst, &wt, (signals, len), &fr.spec, &mut out).unwrap();
            assert_eq!(out.dims(), [signals, len]);
            let got = out.to_vec::<f32>().unwrap();
            assert_close_rows(
                &tag("stft_backward"),
                &want_sb,
                &got,
                len,
                tol(fr.spec.n_fft),
            );

            let dsg = Tensor::from_slice_on(dev, &dsig, signals, len).unwrap();
            ops::istft_backward(&dsg, &wt, &fr.spec, &mut out).unwrap();
            assert_eq!(out.dims(), [signals * frames, 2 * bins]);
            let got = out.to_vec::<f32>().unwrap();
            assert_close_rows(
                &tag("istft_backward"),
                &want_ib,
                &got,
                spec_len,
                (2e-4, 1e-5),
            );
        }
    }
}

#[test]
fn istft_inverts_stft_with_a_cola_window() {
    let spec = StftSpec::new(400, 100);
    let window = ops::hann_window(400, true).unwrap();
    let x = SplitMix64::new(90).uniform(3 * 4000, -1.0, 1.0);
    for dev in devices() {
        let wt = window.to(dev).unwrap();
        let xt = Tensor::from_slice_on(dev, &x, 3, 4000).unwrap();
        let mut s = Tensor::default();
        ops::stft(&xt, &wt, &spec, &mut s).unwrap();
        let mut back = Tensor::default();
        ops::istft(&s, &wt, (3, 4000), &spec, &mut back).unwrap();
        let got = back.to_vec::<f32>().unwrap();
        assert_close_rows(
            &format!("istft(stft(x)) on {dev}"),
            &x,
            &got,
            4000,
            (2e-5, 1e-5),
        );
    }
}

#[test]
fn hann_window_is_periodic_or_symmetric() {
    let p = ops::hann_window(4, true).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(p, [0.0, 0.5, 1.0, 0.5]);
    let s = ops::hann_window(5, false).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(s, [0.0, 0.5, 1.0, 0.5, 0.0]);
    assert_eq!(
        ops::hann_window(1, false).unwrap().to_vec::<f32>().unwrap(),
        [1.0]
    );
}

fn assert_err(r: brotensor::Result<()>, op: &str, needle: &str) {
    match r {
        Err(e @ (Error::Shape { .. } | Error::InvalidArgument { .. } | Error::Dtype { .. })) => {
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("brotensor: {op}: ")), "{msg}");
            assert!(msg.contains(needle), "`{msg}` lacks `{needle}`");
        }
        other => panic!("{op}: expected an error about {needle}, got {other:?}"),
    }
}

#[test]
fn bad_transforms_and_framings_are_errors_naming_the_operand() {
    let odd = Tensor::from_slice(&[1.0f32, 2.0, 3.0], 1, 3).unwrap();
    let mut y = Tensor::default();
    assert_err(ops::fft(&odd, &mut y), "fft", "x holds interleaved");
    let empty = Tensor::zeros(2, 0, Dtype::F32).unwrap();
    assert_err(ops::rfft(&empty, &mut y), "rfft", "length >= 1");
    let bins3 = Tensor::from_slice(&[0.0f32; 6], 1, 6).unwrap();
    assert_err(ops::irfft(&bins3, 6, &mut y), "irfft", "n / 2 + 1 = 4");
    assert_err(ops::irfft(&bins3, 0, &mut y), "irfft", ">= 1");
    assert_err(
        ops::rfft_backward(&bins3, 7, &mut y),
        "rfft_backward",
        "n / 2 + 1 = 4",
    );
    let half = Tensor::zeros(1, 4, Dtype::F16).unwrap();
    assert_err(ops::rfft(&half, &mut y), "rfft", "x");

    let sig = Tensor::from_slice(&[0.5f32; 40], 1, 40).unwrap();
    let w = ops::hann_window(16, true).unwrap();
    let spec = |hop, win, center| StftSpec {
        n_fft: 16,
        hop_length: hop,
        win_length: win,
        center,
        normalized: false,
    };
    assert_err(
        ops::stft(&sig, &w, &spec(0, 16, true), &mut y),
        "stft",
        "hop_length",
    );
    assert_err(
        ops::stft(&sig, &w, &spec(4, 17, true), &mut y),
        "stft",
        "win_length",
    );
    assert_err(
        ops::stft(&sig, &w, &spec(4, 12, true), &mut y),
        "stft",
        "window must be (12)",
    );
    let short = Tensor::from_slice(&[0.5f32; 8], 1, 8).unwrap();
    assert_err(
        ops::stft(&short, &w, &spec(4, 16, true), &mut y),
        "stft",
        "reflect-pads by n_fft / 2 = 8",
    );
    let short = Tensor::from_slice(&[0.5f32; 15], 1, 15).unwrap();
    assert_err(
        ops::stft(&short, &w, &spec(4, 16, false), &mut y),
        "stft",
        "must be >= n_fft",
    );
    let wrong = Tensor::zeros(3, 18, Dtype::F32).unwrap();
    assert_err(
        ops::istft(&wrong, &w, (1, 40), &spec(4, 16, true), &mut y),
        "istft",
        "(N frames, 2 bins) = [11, 18]",
    );
    assert_err(
        ops::stft_backward(&wrong, &w, (1, 40), &spec(4, 16, true), &mut y),
        "stft_backward",
        "[11, 18]",
    );
    let flat = Tensor::from_slice_nd_on(Device::Cpu, &[0.5f32; 40], &[40]).unwrap();
    assert_err(
        ops::istft_backward(&flat, &w, &spec(4, 16, true), &mut y),
        "istft_backward",
        "dsignal must be (signals, len)",
    );
}

#[test]
fn methods_match_the_ops() {
    let x = SplitMix64::new(95).uniform(2 * 3000, -1.0, 1.0);
    let window = ops::hann_window(400, true).unwrap();
    let spec = StftSpec::new(400, 160);
    for dev in devices() {
        let xt = Tensor::from_slice_on(dev, &x, 2, 3000).unwrap();
        let wt = window.to(dev).unwrap();
        let s = xt.stft(&wt, &spec).unwrap();
        let mut want = Tensor::default();
        ops::stft(&xt, &wt, &spec, &mut want).unwrap();
        assert_eq!(s.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
        let back = s.istft(&wt, (2, 3000), &spec).unwrap();
        assert_close_rows(
            &format!("Tensor::istft on {dev}"),
            &x,
            &back.to_vec::<f32>().unwrap(),
            3000,
            (2e-5, 1e-5),
        );
        let r = xt.rfft().unwrap();
        let round = r.irfft(3000).unwrap();
        assert_close_rows(
            &format!("Tensor::irfft on {dev}"),
            &x,
            &round.to_vec::<f32>().unwrap(),
            3000,
            (2e-5, 1e-5),
        );
        let z = r.fft().unwrap().ifft().unwrap();
        assert_close_rows(
            &format!("Tensor::ifft on {dev}"),
            &r.to_vec::<f32>().unwrap(),
            &z.to_vec::<f32>().unwrap(),
            2 * 1501,
            (2e-5, 1e-5),
        );
    }
}
