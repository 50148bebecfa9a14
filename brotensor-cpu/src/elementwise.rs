//! Element-wise FP32 maps. The math of each op is one scalar function (`exp`, `axpby`,
//! `exp_backward`, ...); the maps apply it over slices in parallel chunks.

use rayon::prelude::*;

/// Elements per parallel task: large enough that scheduling is noise, small enough that
/// every core gets work on a few-MiB tensor.
const CHUNK: usize = 1 << 15;

/// `out[i] = f(x[i])`. Panics if the lengths differ.
pub fn map_unary(x: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32 + Sync) {
    assert_eq!(x.len(), out.len(), "map_unary: length mismatch");
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(o, x)| o.iter_mut().zip(x).for_each(|(o, &x)| *o = f(x)));
}

/// `y[i] = f(y[i])`, in place.
pub fn map_unary_inplace(y: &mut [f32], f: impl Fn(f32) -> f32 + Sync) {
    y.par_chunks_mut(CHUNK)
        .for_each(|c| c.iter_mut().for_each(|v| *v = f(*v)));
}

/// `out[i] = f(x[i], y[i])`. Panics if the lengths differ.
pub fn map_binary(x: &[f32], y: &[f32], out: &mut [f32], f: impl Fn(f32, f32) -> f32 + Sync) {
    assert!(
        x.len() == out.len() && y.len() == out.len(),
        "map_binary: length mismatch"
    );
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK).zip(y.par_chunks(CHUNK)))
        .for_each(|(o, (x, y))| {
            o.iter_mut()
                .zip(x.iter().zip(y))
                .for_each(|(o, (&x, &y))| *o = f(x, y))
        });
}

/// `x[i] = f(x[i], y[i])`, in place on the first operand. Panics if the lengths differ.
pub fn map_binary_inplace(x: &mut [f32], y: &[f32], f: impl Fn(f32, f32) -> f32 + Sync) {
    assert_eq!(x.len(), y.len(), "map_binary_inplace: length mismatch");
    x.par_chunks_mut(CHUNK)
        .zip(y.par_chunks(CHUNK))
        .for_each(|(x, y)| x.iter_mut().zip(y).for_each(|(x, &y)| *x = f(*x, y)));
}

/// `out[i] = value`.
pub fn fill(out: &mut [f32], value: f32) {
    out.par_chunks_mut(CHUNK).for_each(|c| c.fill(value));
}

/// `lo` if `x < lo`, `hi` if `x > hi`, else `x`. Comparisons, not min/max, so NaN passes
/// through and `lo > hi` yields `hi`.
#[inline]
pub fn clamp(x: f32, lo: f32, hi: f32) -> f32 {
    let v = if x < lo { lo } else { x };
    if v > hi {
        hi
    } else {
        v
    }
}

/// `a*x + b*y`.
#[inline]
pub fn axpby(x: f32, y: f32, a: f32, b: f32) -> f32 {
    a * x + b * y
}

/// `e^x`.
#[inline]
pub fn exp(x: f32) -> f32 {
    x.exp()
}

/// `ln x`; no guard (0 gives -inf, negatives NaN).
#[inline]
pub fn log(x: f32) -> f32 {
    x.ln()
}

/// `sin x`.
#[inline]
pub fn sin(x: f32) -> f32 {
    x.sin()
}

/// `cos x`.
#[inline]
pub fn cos(x: f32) -> f32 {
    x.cos()
}

/// `1 / sqrt(x)`, two correctly rounded operations.
#[inline]
pub fn rsqrt(x: f32) -> f32 {
    1.0 / x.sqrt()
}

/// Round half to even (0.5 -> 0, 1.5 -> 2, -0.5 -> -0).
#[inline]
pub fn round(x: f32) -> f32 {
    x.round_ties_even()
}

/// Gradient of `exp` at the forward input `x`: `dy * e^x`.
#[inline]
pub fn exp_backward(x: f32, dy: f32) -> f32 {
    dy * x.exp()
}

/// Gradient of `log` at the forward input `x`: `dy / x`.
#[inline]
pub fn log_backward(x: f32, dy: f32) -> f32 {
    dy / x
}

/// Gradient of `sin` at the forward input `x`: `dy * cos x`.
#[inline]
pub fn sin_backward(x: f32, dy: f32) -> f32 {
    dy * x.cos()
}

/// Gradient of `cos` at the forward input `x`: `-dy * sin x`.
#[inline]
pub fn cos_backward(x: f32, dy: f32) -> f32 {
    -dy * x.sin()
}

/// Gradient of `rsqrt` from the forward *output* `y = x^(-1/2)`: `-0.5 * dy * y^3`.
#[inline]
pub fn rsqrt_backward(y: f32, dy: f32) -> f32 {
    -0.5 * dy * y * y * y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_apply_the_function_at_every_index() {
        let x: Vec<f32> = (0..100_000).map(|i| i as f32 * 0.5).collect();
        let y: Vec<f32> = (0..100_000).map(|i| 1.0 + i as f32).collect();
        let mut out = vec![0.0; x.len()];
        map_binary(&x, &y, &mut out, |a, b| a - b);
        for i in [0, 1, 32_767, 32_768, 99_999] {
            assert_eq!(out[i], x[i] - y[i]);
        }
        let mut z = x.clone();
        map_unary_inplace(&mut z, |v| v * 2.0);
        assert_eq!(z[77_777], x[77_777] * 2.0);
        map_binary_inplace(&mut z, &y, |a, b| a + b);
        assert_eq!(z[5], x[5] * 2.0 + y[5]);
    }

    #[test]
    fn hand_computed_values() {
        assert_eq!(round(0.5), 0.0);
        assert_eq!(round(1.5), 2.0);
        assert_eq!(round(2.5), 2.0);
        assert!(round(-0.5).is_sign_negative() && round(-0.5) == 0.0);
        assert_eq!(clamp(5.0, -1.0, 1.0), 1.0);
        assert_eq!(clamp(-5.0, -1.0, 1.0), -1.0);
        assert!(clamp(f32::NAN, -1.0, 1.0).is_nan());
        assert_eq!(clamp(0.0, 2.0, 1.0), 1.0);
        assert_eq!(rsqrt(4.0), 0.5);
        assert_eq!(rsqrt_backward(0.5, 2.0), -0.125);
        assert_eq!(axpby(2.0, 3.0, 0.5, 2.0), 7.0);
        assert_eq!(log(0.0), f32::NEG_INFINITY);
        assert!(log(-1.0).is_nan());
        assert_eq!(cos_backward(0.0, 1.0), 0.0);
        assert_eq!(exp_backward(0.0, 3.0), 3.0);
    }

    #[test]
    fn gradients_match_finite_differences() {
        let h = 1e-3f64;
        for &x in &[0.3f32, 1.1, 2.0] {
            let fd = |f: fn(f32) -> f32| {
                ((f((x as f64 + h) as f32) as f64 - f((x as f64 - h) as f32) as f64) / (2.0 * h))
                    as f32
            };
            assert!((exp_backward(x, 1.0) - fd(exp)).abs() < 1e-2);
            assert!((log_backward(x, 1.0) - fd(log)).abs() < 1e-2);
            assert!((sin_backward(x, 1.0) - fd(sin)).abs() < 1e-2);
            assert!((cos_backward(x, 1.0) - fd(cos)).abs() < 1e-2);
            assert!((rsqrt_backward(rsqrt(x), 1.0) - fd(rsqrt)).abs() < 1e-2);
        }
    }
}
