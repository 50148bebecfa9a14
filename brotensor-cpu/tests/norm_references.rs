//! The composed norms against their C++ definitions, in float64.

use brotensor_cpu::norm::{rms_norm_rows, rms_norm_rows_backward};

#[test]
fn l2_norm_is_a_scaled_rms_norm() {
    // One row of two heads of hd = 3.
    let x = [1.0f32, -2.0, 2.0, 0.5, 0.5, -0.5];
    let (hd, eps) = (3usize, 1e-3f32);
    let g = vec![1.0 / (hd as f32).sqrt(); hd];
    let mut y = [0.0f32; 6];
    rms_norm_rows(&x, &g, eps / hd as f32, &mut y);
    for h in 0..2 {
        let s: f64 = x[h * hd..h * hd + hd]
            .iter()
            .map(|&v| (v as f64).powi(2))
            .sum();
        for j in 0..hd {
            let want = x[h * hd + j] as f64 / (s + eps as f64).sqrt();
            assert!((y[h * hd + j] as f64 - want).abs() < 1e-6);
        }
    }
    let dy = [0.3f32, -0.1, 0.2, 1.0, -1.0, 0.5];
    let mut dx = [0.0f32; 6];
    rms_norm_rows_backward(&x, &g, &dy, eps / hd as f32, &mut dx, None);
    for h in 0..2 {
        let xs = &x[h * hd..h * hd + hd];
        let ds = &dy[h * hd..h * hd + hd];
        let n2 = 1.0 / (xs.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() + eps as f64);
        let dot: f64 = xs.iter().zip(ds).map(|(&a, &b)| a as f64 * b as f64).sum();
        for j in 0..hd {
            let want = n2.sqrt() * (ds[j] as f64 - xs[j] as f64 * dot * n2);
            assert!(
                (dx[h * hd + j] as f64 - want).abs() < 1e-5,
                "head {h} j {j}"
            );
        }
    }
}
