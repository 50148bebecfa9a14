//! `rope_forward` at long-context positions (the fixtures stop at 110) on every device in
//! F32, against a float64 reference that follows the contract's FP32 angle: `theta` is
//! computed in f32 as the contract says, then `cos`, `sin` and the rotation in f64; and the
//! 32-bit position limit, refused alike on every device.

use brotensor::ops::{self, RopeParams, ROPE_POSITION_END};
use brotensor::{Dtype, Error, Tensor};
use brotensor_tests::SplitMix64;

const BASE: f32 = 10_000.0;

/// Interleaved rope of `x (rows, heads * hd)` from row position `offset`, in float64 from
/// the FP32 angle `((r + offset) * 1.0) * BASE^(-2i / hd)`.
fn reference(x: &[f32], (rows, heads, hd): (usize, usize, usize), offset: usize) -> Vec<f64> {
    let mut y = vec![0.0f64; x.len()];
    for r in 0..rows {
        let pos = (r + offset) as f32 * 1.0f32;
        for h in 0..heads {
            for i in 0..hd / 2 {
                let inv_freq = f64::from(BASE).powf(-2.0 * i as f64 / hd as f64) as f32;
                let theta = f64::from(pos * inv_freq);
                let at = r * heads * hd + h * hd + 2 * i;
                let (a, b) = (f64::from(x[at]), f64::from(x[at + 1]));
                y[at] = a * theta.cos() - b * theta.sin();
                y[at + 1] = a * theta.sin() + b * theta.cos();
            }
        }
    }
    y
}

#[test]
fn rope_forward_turns_long_context_positions_right() {
    let (rows, heads, hd) = (3, 2, 8);
    let x = SplitMix64::new(0x40F5).uniform(rows * heads * hd, -1.0, 1.0);
    let p = RopeParams::new(BASE);
    for offset in [40_000usize, 200_000] {
        let want = reference(&x, (rows, heads, hd), offset);
        // The angle is FP32: one ulp of a position near P is P 2^-23, and the inverse
        // frequency (an f32 exp or pow, a few ulps apart between implementations) moves
        // `theta` by up to ~4 P 2^-24 more; a unit-norm pair then moves by that angle, up to
        // sqrt(2) of it. A row off by one position turns pair 0 by a whole radian.
        let p_max = (offset + rows) as f64;
        let tol = 1.5 * p_max * (2.0f64.powi(-23) + 4.0 * 2.0f64.powi(-24));
        for (device, dtype) in super::runs() {
            if dtype != Dtype::F32 {
                continue;
            }
            let xt = Tensor::from_slice_on(device, &x, rows, heads * hd).unwrap();
            let mut y = Tensor::default();
            ops::rope_forward(&xt, hd, heads, offset, &p, &mut y).unwrap();
            let got = y.to_vec::<f32>().unwrap();
            for (e, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(g) - w).abs() <= tol,
                    "on {device}, offset {offset}: element {e} is {g}, want {w} (tol {tol})"
                );
            }
        }
    }
}

#[test]
fn rope_positions_past_32_bits_are_refused_everywhere() {
    let (rows, heads, hd) = (3, 1, 4);
    let x = vec![0.5f32; rows * heads * hd];
    let p = RopeParams::new(BASE);
    for (device, dtype) in super::runs() {
        if dtype != Dtype::F32 {
            continue;
        }
        let xt = Tensor::from_slice_on(device, &x, rows, heads * hd).unwrap();
        let mut y = Tensor::default();
        let last = ROPE_POSITION_END - rows;
        ops::rope_forward(&xt, hd, heads, last, &p, &mut y)
            .unwrap_or_else(|e| panic!("on {device}: the last positions: {e}"));
        for offset in [last + 1, 1 << 32, usize::MAX - 1] {
            for r in [
                ops::rope_forward(&xt, hd, heads, offset, &p, &mut y),
                ops::rope_backward(&xt, hd, heads, offset, &p, &mut y),
            ] {
                assert!(
                    matches!(r, Err(Error::Shape { .. })),
                    "on {device}, offset {offset}: {r:?}"
                );
            }
        }
    }
}
