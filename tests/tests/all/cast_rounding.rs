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
