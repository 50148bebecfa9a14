//! `cast` rounds to nearest even, keeps NaN NaN and overflows to infinity, bit for bit as
//! the `half` crate does, on the CPU and on every GPU that supports the dtype.

use brotensor::{ops, Device, Dtype, Tensor};
use brotensor_tests::{gpu_devices, SplitMix64};
use half::{bf16, f16};

/// Values that probe the rounding rules: exact halves, near-halves, overflow, subnormal
/// results, signed zeros, infinities and NaN.
fn probes() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        65504.0,
        65520.0,
        65519.99,
        1e6,
        -1e6,
        1e-8,
        -1e-8,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        f32::MIN_POSITIVE,
        5.960_464_5e-8,
        2.980_232_2e-8,
        8.940_697e-8,
        6.1035e-5,
        6.097e-5,
    ];
    // Halfway between neighbouring f16 values (ties: the even neighbour wins).
    for k in 0..8 {
        let base = 1.0 + k as f32 * 2f32.powi(-10);
        v.push(base + 2f32.powi(-11));
    }
    // Halfway between neighbouring bf16 values.
    for k in 0..8 {
        let base = 1.0 + k as f32 * 2f32.powi(-7);
        v.push(base + 2f32.powi(-8));
        v.push(-(base + 2f32.powi(-8)));
    }
    let mut rng = SplitMix64::new(0xCA57);
    v.extend((0..4000).map(|_| f32::from_bits(rng.next_u64() as u32)));
    v
}

fn bits_f16(v: &[f16]) -> Vec<u16> {
    v.iter()
        .map(|h| if h.is_nan() { 0x7E00 } else { h.to_bits() })
        .collect()
}

fn bits_bf16(v: &[bf16]) -> Vec<u16> {
    v.iter()
        .map(|h| if h.is_nan() { 0x7FC0 } else { h.to_bits() })
        .collect()
}

#[test]
fn narrowing_matches_half_bit_for_bit() {
    let x = probes();
    let want_h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let want_b: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    for d in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let t = Tensor::from_slice_on(d, &x, x.len(), 1).unwrap();
        for dtype in [Dtype::F16, Dtype::BF16] {
            let mut out = Tensor::default();
            match ops::cast(&t, &mut out, dtype) {
                Ok(()) => {}
                Err(brotensor::Error::UnsupportedDtype { .. })
                    if !brotensor::supports_dtype(d, dtype).unwrap() =>
                {
                    eprintln!("cast to {dtype}: {d} refuses it (reported unsupported)");
                    continue;
                }
                Err(e) => panic!("{d} {dtype}: {e}"),
            }
            let (got, want) = match dtype {
                Dtype::F16 => (bits_f16(&out.to_vec::<f16>().unwrap()), bits_f16(&want_h)),
                _ => (
                    bits_bf16(&out.to_vec::<bf16>().unwrap()),
                    bits_bf16(&want_b),
                ),
            };
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    g,
                    w,
                    "{d} {dtype}: {:e} ({:#010x}) -> {g:#06x}, half says {w:#06x}",
                    x[i],
                    x[i].to_bits()
                );
            }
            // Widening back is exact.
            let back = out.to_dtype(Dtype::F32).unwrap().to_vec::<f32>().unwrap();
            for (i, (&b, &w)) in back.iter().zip(&want).enumerate() {
                let exact = match dtype {
                    Dtype::F16 => f16::from_bits(w).to_f32(),
                    _ => bf16::from_bits(w).to_f32(),
                };
                assert!(
                    b.to_bits() == exact.to_bits() || (b.is_nan() && exact.is_nan()),
                    "{d} {dtype} widen #{i}"
                );
            }
        }
    }
}

/// Every value dtype `to_dtype` converts between.
const VALUE_DTYPES: [Dtype; 8] = [
    Dtype::F32,
    Dtype::F16,
    Dtype::BF16,
    Dtype::F64,
    Dtype::I32,
    Dtype::I64,
    Dtype::C64,
    Dtype::C128,
];

/// `v` (each value exact in every dtype's range of interest) stored as `dtype` on `device`;
/// complex dtypes get `v` as the real part and `-v / 2` as the imaginary part.
fn stored(device: Device, v: &[f64], dtype: Dtype) -> brotensor::Result<Tensor> {
    let n = v.len();
    let t = match dtype {
        Dtype::F32 | Dtype::F16 | Dtype::BF16 => {
            let f: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            Tensor::from_slice_on(device, &f, n, 1).and_then(|t| t.to_dtype(dtype))
        }
        Dtype::F64 => Tensor::from_slice_on(device, v, n, 1),
        Dtype::I32 => {
            let i: Vec<i32> = v.iter().map(|&x| x as i32).collect();
            Tensor::from_slice_on(device, &i, n, 1)
        }
        Dtype::I64 => {
            let i: Vec<i64> = v.iter().map(|&x| x as i64).collect();
            Tensor::from_slice_on(device, &i, n, 1)
        }
        Dtype::C64 => {
            let c: Vec<brotensor::Complex<f32>> = v
                .iter()
                .map(|&x| brotensor::Complex::new(x as f32, (-x / 2.0) as f32))
                .collect();
            Tensor::from_slice_on(device, &c, n, 1)
        }
        _ => {
            let c: Vec<brotensor::Complex<f64>> = v
                .iter()
                .map(|&x| brotensor::Complex::new(x, -x / 2.0))
                .collect();
            Tensor::from_slice_on(device, &c, n, 1)
        }
    };
    t
}

/// The values of `t` as `(re, im)` pairs in float64 (`im` 0 for real dtypes).
fn read(t: &Tensor) -> Vec<(f64, f64)> {
    let real = |v: Vec<f64>| v.into_iter().map(|x| (x, 0.0)).collect();
    match t.dtype() {
        Dtype::F32 => real(
            t.to_vec::<f32>()
                .unwrap()
                .into_iter()
                .map(f64::from)
                .collect(),
        ),
        Dtype::F16 => real(
            t.to_vec::<f16>()
                .unwrap()
                .into_iter()
                .map(f64::from)
                .collect(),
        ),
        Dtype::BF16 => real(
            t.to_vec::<bf16>()
                .unwrap()
                .into_iter()
                .map(f64::from)
                .collect(),
        ),
        Dtype::F64 => real(t.to_vec::<f64>().unwrap()),
        Dtype::I32 => real(
            t.to_vec::<i32>()
                .unwrap()
                .into_iter()
                .map(f64::from)
                .collect(),
        ),
        Dtype::I64 => real(
            t.to_vec::<i64>()
                .unwrap()
                .into_iter()
                .map(|x| x as f64)
                .collect(),
        ),
        Dtype::C64 => t
            .to_vec::<brotensor::Complex<f32>>()
            .unwrap()
            .into_iter()
            .map(|c| (f64::from(c.re), f64::from(c.im)))
            .collect(),
        _ => t
            .to_vec::<brotensor::Complex<f64>>()
            .unwrap()
            .into_iter()
            .map(|c| (c.re, c.im))
            .collect(),
    }
}

/// What converting `(re, im)` held in `from` to `to` must give, written from the rules in
/// `cast`'s docs: the real part of a complex, truncation toward zero into integers, a zero
/// imaginary part into complex, and rounding to nearest even into narrower floats.
fn expected(from: Dtype, to: Dtype, (re, im): (f64, f64)) -> (f64, f64) {
    let re = match to {
        Dtype::I32 | Dtype::I64 => re.trunc(),
        Dtype::F16 => f64::from(f16::from_f64(re)),
        Dtype::BF16 => f64::from(bf16::from_f64(re)),
        Dtype::F32 | Dtype::C64 => f64::from(re as f32),
        _ => re,
    };
    let complex = matches!(from, Dtype::C64 | Dtype::C128);
    let im = match to {
        Dtype::C64 if complex => f64::from(im as f32),
        Dtype::C128 if complex => im,
        _ => 0.0,
    };
    (re, im)
}

#[test]
fn every_value_dtype_converts_to_every_other_on_every_device() {
    // Exact in every source dtype but BF16 (8 significant bits: -65504 and 257 round there),
    // with fractions of both signs that truncate in integers.
    let src = [-3.75, -1.0, 0.0, 0.5, 2.25, 100.0, 1000.0, -65504.0, 257.0];
    let mut checked = 0;
    for device in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let mut on_device = 0;
        for from in VALUE_DTYPES {
            let x = match stored(device, &src, from) {
                Ok(x) => x,
                Err(brotensor::Error::UnsupportedDtype { .. })
                    if !brotensor::supports_dtype(device, from).unwrap() =>
                {
                    eprintln!("cast from {from}: {device} has no {from} (refused, as reported)");
                    continue;
                }
                Err(e) => panic!("{device} {from}: {e}"),
            };
            let held = read(&x);
            for to in VALUE_DTYPES {
                let y = match x.to_dtype(to) {
                    Ok(y) => y,
                    Err(brotensor::Error::UnsupportedDtype { .. })
                        if !brotensor::supports_dtype(device, to).unwrap()
                            || !brotensor::supports_dtype(device, from).unwrap() =>
                    {
                        eprintln!("cast {from} -> {to}: {device} lacks one of them (refused)");
                        continue;
                    }
                    Err(e) => panic!("{device} {from} -> {to}: {e}"),
                };
                assert_eq!(
                    (y.dtype(), y.dims()),
                    (to, x.dims()),
                    "{device} {from} -> {to}"
                );
                let got = read(&y);
                for (i, (&h, &g)) in held.iter().zip(&got).enumerate() {
                    let want = expected(from, to, h);
                    assert_eq!(g, want, "{device} {from} -> {to}, element {i} (held {h:?})");
                }
                on_device += 1;
            }
        }
        // The CPU converts every pair; a GPU at least the F32/F16/BF16/I32 ones.
        let least = if device == Device::Cpu { 64 } else { 16 };
        assert!(
            on_device >= least,
            "{device}: only {on_device} pairs converted"
        );
        checked += on_device;
    }
    assert!(checked >= 64);
}

#[test]
fn float_to_integer_refuses_what_the_integer_cannot_hold() {
    for device in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        for (v, to) in [
            (f32::NAN, Dtype::I32),
            (f32::INFINITY, Dtype::I64),
            (3e9, Dtype::I32),
        ] {
            let x = Tensor::from_slice_on(device, &[1.0f32, v], 2, 1).unwrap();
            assert!(x.to_dtype(to).is_err(), "{device}: {v} as {to}");
        }
        // An F16 source goes through F32 first, with the same refusal.
        let h = Tensor::from_slice_on(device, &[f16::ONE, f16::INFINITY], 2, 1).unwrap();
        assert!(h.to_dtype(Dtype::I32).is_err(), "{device}: f16 inf as I32");
        assert_eq!(
            h.narrow(0, 0, 1)
                .unwrap()
                .to_dtype(Dtype::I64)
                .unwrap()
                .to_vec::<i64>()
                .unwrap(),
            [1]
        );
    }
}
