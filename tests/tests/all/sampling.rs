//! Tests of the sampling ops: both Philox cores against Random123's published vectors, the
//! random fills bit for bit across devices, with their moments and substream addressing,
//! `sample_logits` against a float64 implementation of its contract written here, and every
//! error case.

mod edge;
mod reference;

use brotensor::cubecl::prelude::*;
use brotensor::custom::{self, CustomKernel, GpuLaunch, HostIn, HostOut, Input, Output};
use brotensor::{ops, Device, Dtype, Error, Result, Tensor};
use brotensor_cpu::sampling::philox;
use brotensor_tests::{gpu_devices, SplitMix64};
use reference::{draw_f64, normal_f64, truncated_moments, uniform_f64};

/// The CPU and every GPU found.
fn devices() -> Vec<Device> {
    let gpus = gpu_devices();
    if gpus.is_empty() {
        eprintln!("sampling: NO GPU DEVICE FOUND: only the CPU runs");
    }
    std::iter::once(Device::Cpu).chain(gpus).collect()
}

/// `(counter words, key words, expected block)` of every line of the fixture.
fn kat_vectors() -> Vec<([u32; 4], [u32; 2], [u32; 4])> {
    let text = include_str!("../../fixtures/philox4x32_10_kat.txt");
    let rows: Vec<_> = text
        .lines()
        .filter(|l| l.starts_with("philox4x32 10 "))
        .map(|l| {
            let w: Vec<u32> = l
                .split_whitespace()
                .skip(2)
                .map(|h| u32::from_str_radix(h, 16).expect("hex word"))
                .collect();
            assert_eq!(w.len(), 10, "{l}");
            (
                [w[0], w[1], w[2], w[3]],
                [w[4], w[5]],
                [w[6], w[7], w[8], w[9]],
            )
        })
        .collect();
    assert_eq!(
        rows.len(),
        3,
        "the fixture holds Random123's three philox4x32-10 vectors"
    );
    rows
}

/// Runs the Philox core of a device on `(ctr, key)` sextuples: the CPU core on the CPU, the
/// `#[cube]` core in `brotensor_kernels` on a GPU.
struct PhiloxBlocks;

impl CustomKernel for PhiloxBlocks {
    const NAME: &'static str = "philox_blocks";
    const INPUTS: usize = 1;
    const OUTPUTS: usize = 1;

    fn cpu(&self, inputs: &[HostIn<'_>], outputs: &mut [HostOut<'_>]) -> Result<()> {
        let words = inputs[0].slice::<i32>()?;
        let out = outputs[0].slice_mut::<i32>()?;
        for (w, o) in words.chunks(6).zip(out.chunks_mut(4)) {
            let w: Vec<u32> = w.iter().map(|&v| v as u32).collect();
            let block = philox::philox4x32_10([w[0], w[1], w[2], w[3]], [w[4], w[5]]);
            for (o, b) in o.iter_mut().zip(block) {
                *o = b as i32;
            }
        }
        Ok(())
    }

    fn gpu<R: Runtime>(&self, launch: &GpuLaunch<'_, R>) -> Result<()> {
        let (input, out) = (&launch.inputs()[0], &launch.outputs()[0]);
        brotensor_kernels::sampling::launch_philox_blocks(
            launch.client(),
            input.handle(),
            out.handle(),
            input.numel() / 6,
        )
        .map_err(|e| Error::InvalidArgument {
            op: "philox_blocks",
            reason: e.to_string(),
        })
    }
}

#[test]
fn philox_cores_match_random123_known_answers() {
    let kat = kat_vectors();
    for (ctr, key, want) in &kat {
        assert_eq!(
            philox::philox4x32_10(*ctr, *key),
            *want,
            "CPU core, ctr {ctr:08x?}"
        );
    }
    let words: Vec<i32> = kat
        .iter()
        .flat_map(|(c, k, _)| c.iter().chain(k).map(|&w| w as i32).collect::<Vec<_>>())
        .collect();
    let want: Vec<u32> = kat.iter().flat_map(|(_, _, w)| w.to_vec()).collect();
    for device in devices() {
        let input = Tensor::from_slice_on(device, &words, kat.len(), 6).unwrap();
        let mut out = Tensor::default();
        custom::launch(
            &PhiloxBlocks,
            &[Input::new("ctr_key", &input, Dtype::I32)],
            &mut [Output::new("out", &mut out, &[kat.len(), 4], Dtype::I32)],
        )
        .unwrap();
        let got: Vec<u32> = out
            .to_vec::<i32>()
            .unwrap()
            .into_iter()
            .map(|v| v as u32)
            .collect();
        assert_eq!(got, want, "Philox core on {device}");
    }
}

/// The four random fills, by name.
const FILLS: [&str; 4] = ["rand_uniform", "rand_bernoulli", "randn", "randn_truncated"];
/// The bounds of the truncated normal in these tests.
const TRUNC: (f32, f32) = (-0.5, 1.5);
/// The Bernoulli probability in these tests.
const P: f32 = 0.3;

fn fill(name: &str, key: u64, counter: u64, y: &mut Tensor) -> Result<()> {
    match name {
        "rand_uniform" => ops::rand_uniform(key, counter, y),
        "rand_bernoulli" => ops::rand_bernoulli(P, key, counter, y),
        "randn" => ops::randn(key, counter, y),
        _ => ops::randn_truncated(TRUNC.0, TRUNC.1, key, counter, y),
    }
}

fn filled(
    device: Device,
    name: &str,
    (rows, cols): (usize, usize),
    key: u64,
    counter: u64,
) -> Vec<f32> {
    let mut y = Tensor::zeros_on(device, rows, cols, Dtype::F32).unwrap();
    fill(name, key, counter, &mut y).unwrap();
    y.to_vec::<f32>().unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The first index where two fills differ, for the failure message.
fn first_difference(a: &[f32], b: &[f32]) -> Option<(usize, f32, f32)> {
    a.iter()
        .zip(b)
        .enumerate()
        .find(|(_, (x, y))| x.to_bits() != y.to_bits())
        .map(|(i, (x, y))| (i, *x, *y))
}

/// A key and a counter whose substreams cross a 32-bit carry inside the tensor.
const KEY: u64 = 0xDEAD_BEEF_0123_4567;
const COUNTER: u64 = 0x0000_0001_FFFF_0000;
const SHAPE: (usize, usize) = (331, 307);

#[test]
fn random_fills_are_bit_identical_on_every_device() {
    for name in FILLS {
        let cpu = filled(Device::Cpu, name, SHAPE, KEY, COUNTER);
        for device in gpu_devices() {
            let got = filled(device, name, SHAPE, KEY, COUNTER);
            assert!(
                bits(&got) == bits(&cpu),
                "{name} on {device}: first difference (index, cpu, gpu) {:?}",
                first_difference(&cpu, &got)
            );
        }
    }
}

#[test]
fn random_fills_match_float64_formulas() {
    let cpu: Vec<Vec<f32>> = FILLS
        .iter()
        .map(|n| filled(Device::Cpu, n, SHAPE, KEY, COUNTER))
        .collect();
    let mut worst_normal = 0.0f64;
    for (i, s) in (0..SHAPE.0 * SHAPE.1).map(|i| (i, COUNTER + i as u64)) {
        let [w0, w1, _, _] = philox::block(KEY, s);
        assert_eq!(f64::from(cpu[0][i]), uniform_f64(w0), "uniform {i}");
        let bern = if uniform_f64(w0) < f64::from(P) {
            1.0
        } else {
            0.0
        };
        assert_eq!(f64::from(cpu[1][i]), bern, "bernoulli {i}");
        worst_normal = worst_normal.max((f64::from(cpu[2][i]) - normal_f64(w0, w1)).abs());
    }
    assert!(
        worst_normal < 1e-5,
        "randn vs float64 Box-Muller: worst {worst_normal}"
    );
    // The truncated normal: the first in-bounds try of the float64 formula.
    let n = (SHAPE.0 * SHAPE.1) as u64;
    for (i, &got) in cpu[3].iter().enumerate() {
        let want = (0..64)
            .map(|r| {
                let [w0, w1, _, _] = philox::block(KEY, COUNTER + i as u64 + r * n);
                normal_f64(w0, w1)
            })
            .find(|z| (f64::from(TRUNC.0)..=f64::from(TRUNC.1)).contains(z))
            .expect("an in-bounds draw within 64 tries");
        assert!(
            (f64::from(got) - want).abs() < 1e-5,
            "truncated {i}: {got} vs {want}"
        );
    }
}

/// `(mean, variance)` in float64 (two-pass).
fn moments(v: &[f32]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let var = v
        .iter()
        .map(|&x| (f64::from(x) - mean).powi(2))
        .sum::<f64>()
        / n;
    (mean, var)
}

#[test]
fn random_fills_have_the_right_moments() {
    let n = (SHAPE.0 * SHAPE.1) as f64;
    // (fill, mean, variance, fourth central moment) of the target distribution.
    let (tm, tv, t4) = truncated_moments(f64::from(TRUNC.0), f64::from(TRUNC.1));
    let p = f64::from(P);
    let targets = [
        (1.0 / 2.0, 1.0 / 12.0, 1.0 / 80.0),
        (
            p,
            p * (1.0 - p),
            p * (1.0 - p) * (1.0 - 3.0 * p * (1.0 - p)),
        ),
        (0.0, 1.0, 3.0),
        (tm, tv, t4),
    ];
    for (name, (mean, var, m4)) in FILLS.iter().zip(targets) {
        for seed in [1u64, 2, 3] {
            let v = filled(Device::Cpu, name, SHAPE, KEY ^ seed, seed << 40);
            let (m, s2) = moments(&v);
            // Five standard errors: the mean's sqrt(var / n), the variance's
            // sqrt((m4 - var^2) / n).
            let (em, ev) = (5.0 * (var / n).sqrt(), 5.0 * ((m4 - var * var) / n).sqrt());
            assert!(
                (m - mean).abs() < em,
                "{name} seed {seed}: mean {m} vs {mean} (+-{em})"
            );
            assert!(
                (s2 - var).abs() < ev,
                "{name} seed {seed}: variance {s2} vs {var} (+-{ev})"
            );
        }
    }
    let u = filled(Device::Cpu, "rand_uniform", SHAPE, KEY, COUNTER);
    assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
    let b = filled(Device::Cpu, "rand_bernoulli", SHAPE, KEY, COUNTER);
    assert!(b.iter().all(|&x| x == 0.0 || x == 1.0));
    let t = filled(Device::Cpu, "randn_truncated", SHAPE, KEY, COUNTER);
    assert!(t.iter().all(|&x| (TRUNC.0..=TRUNC.1).contains(&x)));
}

#[test]
fn substreams_shift_with_the_counter() {
    let (len, shift) = (4096usize, 777usize);
    for device in devices() {
        for name in ["rand_uniform", "randn", "rand_bernoulli"] {
            let base = filled(device, name, (1, len), KEY, COUNTER);
            let later = filled(device, name, (1, len - shift), KEY, COUNTER + shift as u64);
            assert!(bits(&base[shift..]) == bits(&later), "{name} on {device}");
            let other = filled(device, name, (1, len), KEY + 1, COUNTER);
            assert!(
                bits(&base) != bits(&other),
                "{name} on {device}: the key is ignored"
            );
        }
        // A truncated fill retries at `counter + i + r numel`: only its first try shifts, so
        // compare against the untruncated normal where the first try is in bounds.
        let normal = filled(device, "randn", (1, len), KEY, COUNTER);
        let trunc = filled(device, "randn_truncated", (1, len), KEY, COUNTER);
        for (z, t) in normal.iter().zip(&trunc) {
            if (TRUNC.0..=TRUNC.1).contains(z) {
                assert_eq!(z.to_bits(), t.to_bits(), "randn_truncated on {device}");
            }
        }
    }
}

/// `(N, V, temperature, top_k, top_p, key, counter, logit spread, logits quantized)`.
type Case = (usize, usize, f32, i32, f32, u64, u64, f32, bool);

const CASES: [Case; 7] = [
    (16, 1000, 0.7, 0, 1.0, 11, 0, 4.0, false),
    (16, 1000, 1.3, 50, 0.9, 12, 1 << 33, 4.0, false),
    (9, 777, 1.0, 0, 0.5, 13, 5, 3.0, true),
    (12, 300, 0.5, 7, 1.0, 14, u64::MAX - 3, 2.0, true),
    (8, 4099, 2.0, 0, 0.95, 15, 99, 6.0, false),
    (5, 3, 1.0, 0, 0.0, 16, 0, 1.0, false),
    (4, 50_257, 0.9, 0, 0.92, 17, 1234, 8.0, false),
];

fn case_logits((n, v, .., spread, quantized): Case, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    rng.uniform(n * v, -spread, spread)
        .into_iter()
        .map(|x| {
            if quantized {
                (x * 2.0).round() / 2.0
            } else {
                x
            }
        })
        .collect()
}

fn sampled(device: Device, logits: &[f32], (n, v): (usize, usize), c: Case) -> Vec<i32> {
    let x = Tensor::from_slice_on(device, logits, n, v).unwrap();
    let mut idx = Tensor::default();
    ops::sample_logits(&x, c.2, c.3, c.4, c.5, c.6, &mut idx).unwrap();
    assert_eq!((idx.dims(), idx.dtype()), (&[n, 1][..], Dtype::I32));
    idx.to_vec::<i32>().unwrap()
}

#[test]
fn sample_logits_follows_the_contract_on_every_device() {
    for (ci, case) in CASES.into_iter().enumerate() {
        let (n, v) = (case.0, case.1);
        let logits = case_logits(case, 0x5A00 + ci as u64);
        let mut want = Vec::new();
        for (r, row) in logits.chunks(v).enumerate() {
            let u = uniform_f64(philox::block(case.5, case.6.wrapping_add(r as u64))[0]);
            let (id, margin) = draw_f64(
                row,
                f64::from(case.2),
                case.3 as usize,
                f64::from(case.4),
                u,
            );
            assert!(
                margin > 1e-6,
                "case {ci} row {r}: a draw {margin} from a bucket boundary"
            );
            want.push(id as i32);
        }
        for device in devices() {
            let t0 = std::time::Instant::now();
            let got = sampled(device, &logits, (n, v), case);
            assert_eq!(got, want, "case {ci} ({n}x{v}) on {device}");
            if v > 10_000 {
                eprintln!("sample_logits {n}x{v} on {device}: {:?}", t0.elapsed());
            }
        }
    }
}

#[test]
fn sample_logits_frequencies_follow_the_probabilities() {
    let logits = [0.0f32, 1.0, -0.5, 2.0, 0.25];
    let rows = 20_000;
    let x: Vec<f32> = logits
        .iter()
        .copied()
        .cycle()
        .take(rows * logits.len())
        .collect();
    let e: Vec<f64> = logits.iter().map(|&l| f64::from(l).exp()).collect();
    // Top-2 keeps tokens 3 and 1, renormalised.
    for (top_k, probs) in [
        (
            0,
            e.iter()
                .map(|w| w / e.iter().sum::<f64>())
                .collect::<Vec<_>>(),
        ),
        (
            2,
            vec![0.0, e[1] / (e[1] + e[3]), 0.0, e[3] / (e[1] + e[3]), 0.0],
        ),
    ] {
        let case = (rows, 5, 1.0, top_k, 1.0, 77, 0, 0.0, false);
        for device in devices() {
            let ids = sampled(device, &x, (rows, 5), case);
            for (tok, &p) in probs.iter().enumerate() {
                let f = ids.iter().filter(|&&i| i == tok as i32).count() as f64 / rows as f64;
                let bound = 5.0 * (p * (1.0 - p) / rows as f64).sqrt();
                assert!(
                    (f - p).abs() <= bound,
                    "top_k {top_k} token {tok} on {device}: {f} vs {p}"
                );
            }
        }
    }
}

#[test]
fn greedy_and_top_1_are_deterministic_argmax() {
    // Ties: the lowest index wins.
    let logits = [
        1.0f32, 3.0, 3.0, -2.0, 0.5, 0.5, 0.5, -1.0, 7.0, 7.0, 2.0, 7.0,
    ];
    let want = vec![1, 0, 0];
    for device in devices() {
        let x = Tensor::from_slice_on(device, &logits, 3, 4).unwrap();
        for (t, k, p) in [(0.0, 0, 1.0), (0.0, 3, 0.1), (1.0, 1, 1.0), (5.0, 1, 0.7)] {
            for counter in [0u64, 1, 1 << 40] {
                let mut idx = Tensor::default();
                ops::sample_logits(&x, t, k, p, 42, counter, &mut idx).unwrap();
                assert_eq!(
                    idx.to_vec::<i32>().unwrap(),
                    want,
                    "T {t} top_k {k} on {device}"
                );
            }
        }
    }
}

#[test]
fn sample_logits_into_reads_and_advances_the_device_counter() {
    let case = (6, 513, 1.1, 0, 0.9, 5, 0, 3.0, false);
    let logits = case_logits(case, 0x77);
    for device in devices() {
        let x = Tensor::from_slice_on(device, &logits, 6, 513).unwrap();
        for start in [40i32, -5] {
            let mut counter = Tensor::from_slice_on(device, &[start, 9], 2, 1).unwrap();
            let mut scratch = Tensor::zeros_on(device, 3 * 6, 513, Dtype::F32).unwrap();
            let mut idx = Tensor::zeros_on(device, 6, 1, Dtype::I32).unwrap();
            // The device counter is 32 bits wide: it wraps, and is read zero-extended.
            let mut base = start as u32;
            for step in 0..2 {
                ops::sample_logits_into(&x, 1.1, 0, 0.9, 5, &mut counter, &mut scratch, &mut idx)
                    .unwrap();
                let want = sampled(
                    device,
                    &logits,
                    (6, 513),
                    (6, 513, 1.1, 0, 0.9, 5, u64::from(base), 0.0, false),
                );
                assert_eq!(
                    idx.to_vec::<i32>().unwrap(),
                    want,
                    "step {step} from {start} on {device}"
                );
                base = base.wrapping_add(6);
                let c = counter.to_vec::<i32>().unwrap();
                assert_eq!(c, [base as i32, 9], "counter after step {step} on {device}");
            }
            // Greedy leaves the counter alone.
            ops::sample_logits_into(&x, 0.0, 0, 1.0, 5, &mut counter, &mut scratch, &mut idx)
                .unwrap();
            assert_eq!(counter.to_vec::<i32>().unwrap()[0], base as i32);
        }
    }
}

/// Asserts an error of `op` whose message names it.
fn assert_err(op: &str, r: Result<()>) {
    let e = r.expect_err("must be rejected");
    assert!(
        e.to_string().starts_with(&format!("brotensor: {op}: ")),
        "{e}"
    );
}

#[test]
fn sampling_ops_reject_bad_arguments() {
    for device in devices() {
        let x = Tensor::zeros_on(device, 2, 8, Dtype::F32).unwrap();
        let sample = |x: &Tensor, t: f32, k: i32, p: f32| {
            let mut idx = Tensor::default();
            ops::sample_logits(x, t, k, p, 1, 0, &mut idx)
        };
        for (t, k, p) in [
            (-1.0, 0, 1.0),
            (f32::NAN, 0, 1.0),
            (1.0, -1, 1.0),
            (1.0, 0, -0.1),
            (1.0, 0, f32::NAN),
        ] {
            assert_err("sample_logits", sample(&x, t, k, p));
        }
        let empty_vocab = Tensor::zeros_on(device, 2, 0, Dtype::F32).unwrap();
        assert_err("sample_logits", sample(&empty_vocab, 1.0, 0, 1.0));
        let ints = Tensor::zeros_on(device, 2, 8, Dtype::I32).unwrap();
        assert!(matches!(
            sample(&ints, 1.0, 0, 1.0),
            Err(Error::Dtype { .. })
        ));
        // No rows: nothing to draw, an empty (0, 1) result.
        let none = Tensor::zeros_on(device, 0, 8, Dtype::F32).unwrap();
        let mut idx = Tensor::default();
        ops::sample_logits(&none, 1.0, 0, 1.0, 1, 0, &mut idx).unwrap();
        assert_eq!(idx.dims(), &[0, 1]);

        let into = |counter: &mut Tensor, scratch: &mut Tensor, idx: &mut Tensor| {
            ops::sample_logits_into(&x, 1.0, 0, 1.0, 1, counter, scratch, idx)
        };
        let good = || {
            (
                Tensor::zeros_on(device, 1, 1, Dtype::I32).unwrap(),
                Tensor::zeros_on(device, 48, 1, Dtype::F32).unwrap(),
                Tensor::zeros_on(device, 2, 1, Dtype::I32).unwrap(),
            )
        };
        let (mut c, mut s, mut i) = good();
        into(&mut c, &mut s, &mut i).unwrap();
        let bad: [(usize, Tensor); 7] = [
            (0, Tensor::zeros_on(device, 1, 1, Dtype::F32).unwrap()),
            (0, Tensor::zeros_on(device, 0, 1, Dtype::I32).unwrap()),
            (1, Tensor::zeros_on(device, 47, 1, Dtype::F32).unwrap()),
            (1, Tensor::zeros_on(device, 48, 1, Dtype::I32).unwrap()),
            (2, Tensor::zeros_on(device, 3, 1, Dtype::I32).unwrap()),
            (2, Tensor::zeros_on(device, 2, 1, Dtype::F32).unwrap()),
            (2, Tensor::default()),
        ];
        for (which, t) in bad {
            let (mut c, mut s, mut i) = good();
            *[&mut c, &mut s, &mut i][which] = t;
            assert_err("sample_logits_into", into(&mut c, &mut s, &mut i));
        }
        let (mut c, mut s, mut i) = good();
        assert_err(
            "sample_logits_into",
            ops::sample_logits_into(&x, -1.0, 0, 1.0, 1, &mut c, &mut s, &mut i),
        );

        for name in FILLS {
            let mut uncommitted = Tensor::default();
            assert_err(name, fill(name, 1, 0, &mut uncommitted));
            let mut ints = Tensor::zeros_on(device, 2, 2, Dtype::I32).unwrap();
            assert_err(name, fill(name, 1, 0, &mut ints));
        }
        let mut y = Tensor::zeros_on(device, 2, 2, Dtype::F32).unwrap();
        for p in [-0.1, 1.5, f32::NAN] {
            assert_err("rand_bernoulli", ops::rand_bernoulli(p, 1, 0, &mut y));
        }
        for (lo, hi) in [(1.0, 1.0), (2.0, 1.0), (f32::NAN, 1.0)] {
            assert_err(
                "randn_truncated",
                ops::randn_truncated(lo, hi, 1, 0, &mut y),
            );
        }
        // Bernoulli's end points are exact: p = 0 never, p = 1 always.
        ops::rand_bernoulli(0.0, 1, 0, &mut y).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [0.0; 4]);
        ops::rand_bernoulli(1.0, 1, 0, &mut y).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [1.0; 4]);
    }
}

#[test]
fn masked_and_nan_logits_pick_the_same_finite_tokens_everywhere() {
    let (n, v) = (64, 700);
    let mut rng = SplitMix64::new(0x99);
    let mut logits = rng.uniform(n * v, -3.0, 3.0);
    for (i, x) in logits.iter_mut().enumerate() {
        match rng.next_u64() % 10 {
            0..=5 => *x = f32::NEG_INFINITY,
            6 if i % 7 == 0 => *x = f32::NAN,
            _ => {}
        }
    }
    let case = (n, v, 0.8, 0, 1.0, 3, 17, 0.0, false);
    let cpu = sampled(Device::Cpu, &logits, (n, v), case);
    for (r, &id) in cpu.iter().enumerate() {
        assert!(
            logits[r * v + id as usize].is_finite(),
            "row {r} picked {id}"
        );
    }
    for device in gpu_devices() {
        assert_eq!(sampled(device, &logits, (n, v), case), cpu, "on {device}");
    }
}
