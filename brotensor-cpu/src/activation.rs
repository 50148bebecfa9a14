//! Activation functions and their gradients, as scalar FP32 functions (mapped over slices by
//! `elementwise`), and the gated linear units over `(B, 2D)` rows.
//!
//! Gradients read the forward *input* `x`, except tanh and sigmoid, which read the forward
//! *output* `y` (both as in the C++ original).

use rayon::prelude::*;

use crate::elementwise::{exp_fast, exp_with, exp_with_tail, sin_cos_with, trig_fits};
use crate::simd::{wide, MulAdd};
use crate::stream::{streaming, write_zip, StreamedIter};

/// sqrt(2/pi), the tanh-GELU's scale.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
/// The tanh-GELU's cubic coefficient.
const GELU_CUBIC: f32 = 0.044_715;
/// 1/sqrt(2).
const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// 1/sqrt(2*pi).
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;
/// quick_gelu's sigmoid scale.
const QUICK_GELU_SCALE: f32 = 1.702;

/// `1 / (1 + e^-x)`, by [`exp_fast`] so that loops over it (and over silu, quick_gelu and
/// swiglu, which call it) vectorize.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    sigmoid_with(MulAdd::Split, x)
}

/// [`sigmoid`] with its multiply-adds evaluated as `m` says.
#[inline(always)]
pub fn sigmoid_with(m: MulAdd, x: f32) -> f32 {
    1.0 / (1.0 + exp_with(m, -x))
}

/// `x` for `x > 0`, else 0 (NaN gives 0, as the comparison fails).
#[inline]
pub fn relu(x: f32) -> f32 {
    if x > 0.0 {
        x
    } else {
        0.0
    }
}

/// `dy` where `x > 0`, else 0.
#[inline]
pub fn relu_backward(x: f32, dy: f32) -> f32 {
    if x > 0.0 {
        dy
    } else {
        0.0
    }
}

/// From the forward output `y = tanh x`: `dy * (1 - y^2)`.
#[inline]
pub fn tanh_backward(y: f32, dy: f32) -> f32 {
    dy * (1.0 - y * y)
}

/// From the forward output `y = sigmoid x`: `dy * y * (1 - y)`.
#[inline]
pub fn sigmoid_backward(y: f32, dy: f32) -> f32 {
    dy * y * (1.0 - y)
}

/// `x * sigmoid(x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    silu_with(MulAdd::Split, x)
}

/// [`silu`] with its multiply-adds evaluated as `m` says.
#[inline(always)]
pub fn silu_with(m: MulAdd, x: f32) -> f32 {
    x * sigmoid_with(m, x)
}

/// `dy * s * (1 + x (1 - s))`, `s = sigmoid(x)`.
#[inline]
pub fn silu_backward(x: f32, dy: f32) -> f32 {
    let s = sigmoid(x);
    dy * s * (1.0 + x * (1.0 - s))
}

/// The tanh approximation: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
#[inline]
pub fn gelu(x: f32) -> f32 {
    gelu_with(MulAdd::Split, x)
}

/// [`gelu`] with its multiply-adds evaluated as `m` says.
#[inline(always)]
pub fn gelu_with(m: MulAdd, x: f32) -> f32 {
    // 0.5 (1 + tanh u) = sigmoid(2u): one exp and one division.
    let u = SQRT_2_OVER_PI * m.apply(GELU_CUBIC * x * x, x, x);
    x / (1.0 + exp_with(m, -2.0 * u))
}

/// Gradient of [`gelu`].
#[inline]
pub fn gelu_backward(x: f32, dy: f32) -> f32 {
    gelu_backward_with(MulAdd::Split, x, dy)
}

/// [`gelu_backward`] with its multiply-adds evaluated as `m` says.
#[inline(always)]
pub fn gelu_backward_with(m: MulAdd, x: f32, dy: f32) -> f32 {
    dy * gelu_derivative(m, x)
}

/// `d/dx gelu = s + 2 x s (1 - s) u'` with `s = sigmoid(2u) = (1 + tanh u) / 2`: the tanh
/// form's derivative with one exp and one division.
#[inline(always)]
fn gelu_derivative(m: MulAdd, x: f32) -> f32 {
    let u = SQRT_2_OVER_PI * m.apply(GELU_CUBIC * x * x, x, x);
    let s = 1.0 / (1.0 + exp_with(m, -2.0 * u));
    let du = SQRT_2_OVER_PI * m.apply(3.0 * GELU_CUBIC * x, x, 1.0);
    s + 2.0 * x * s * (1.0 - s) * du
}

/// `0.5 x (1 + erf(x / sqrt 2))`.
#[inline]
pub fn gelu_exact(x: f32) -> f32 {
    gelu_exact_with(MulAdd::Split, x)
}

/// [`gelu_exact`] with its multiply-adds evaluated as `m` says (vectorizes).
#[inline(always)]
pub fn gelu_exact_with(m: MulAdd, x: f32) -> f32 {
    0.5 * x * one_plus_erf(m, x * FRAC_1_SQRT_2)
}

/// Gradient of [`gelu_exact`]: `dy * (Phi(x) + x phi(x))`.
#[inline]
pub fn gelu_exact_backward(x: f32, dy: f32) -> f32 {
    gelu_exact_backward_with(MulAdd::Split, x, dy)
}

/// [`gelu_exact_backward`] with its multiply-adds evaluated as `m` says (vectorizes).
#[inline(always)]
pub fn gelu_exact_backward_with(m: MulAdd, x: f32, dy: f32) -> f32 {
    dy * gelu_exact_derivative(m, x)
}

#[inline(always)]
fn gelu_exact_derivative(m: MulAdd, x: f32) -> f32 {
    0.5 * one_plus_erf(m, x * FRAC_1_SQRT_2) + x * FRAC_1_SQRT_2PI * exp_with(m, -0.5 * x * x)
}

/// `1 + erf(u)` in plain arithmetic that vectorizes, accurate in relative terms also where
/// it is small (`u` far below 0, where it is `erfc(-u)`): `1 + u P(u^2)` for `|u| < 1`, `P`
/// of degree 5 fitted to `erf(u) / u`, and [`erfc_from_one`] beyond. Within 8e-7 relative
/// for `|u| <= 9.2` (the test sweeps it against float64); NaN stays NaN.
#[inline(always)]
fn one_plus_erf(m: MulAdd, u: f32) -> f32 {
    // Fitted coefficients; the last is 2/sqrt(pi) to within an ulp, but the fit balances it
    // against the others, so it is not replaced by the constant.
    #[allow(clippy::approx_constant)]
    const P: [f32; 6] = [
        -0.000_565_410_6,
        0.004_923_277_5,
        -0.026_716_385,
        0.112_803_645,
        -0.376_123_5,
        1.128_379_1,
    ];
    let u2 = u * u;
    let mut p = P[0];
    for c in &P[1..] {
        p = m.apply(p, u2, *c);
    }
    let near = m.apply(u, p, 1.0);
    let a = u.abs();
    let tail = erfc_from_one(m, if a < 1.0 { 1.0 } else { a });
    let far = if u > 0.0 { 2.0 - tail } else { tail };
    if a < 1.0 {
        near
    } else {
        far
    }
}

/// `erfc(z)` for `z >= 1`, until it underflows near `z = 9.2` (0 beyond): `erfc(z) = e^{-z^2} G(t)`, `t = 2 / (2 + z)`, `G` a degree-8 polynomial
/// fitted to `erfc(z) e^{z^2}` in relative error. `z^2` is split as `h^2 + (z - h)(z + h)`
/// with `h` the top 12 mantissa bits of `z` (so `h^2` is exact), and the small part joins
/// the exponential's reduced argument ([`exp_with_tail`]): rounding `z^2` itself would cost
/// up to 80 ulp at `z = 9`.
#[inline(always)]
fn erfc_from_one(m: MulAdd, z: f32) -> f32 {
    const G: [f32; 9] = [
        0.078_103_11,
        -0.175_578_31,
        0.011_331_139,
        0.116_447_47,
        0.152_573_56,
        0.254_643,
        0.280_679_08,
        0.282_231_54,
        -0.000_005_508_849_4,
    ];
    // Past 10, e^{-h^2} is 0 in f32. `if`, not `min`: a NaN must stay NaN.
    let z = if z > 10.0 { 10.0 } else { z };
    let h = f32::from_bits(z.to_bits() & 0xffff_f000);
    let d = (z - h) * (z + h);
    let t = 2.0 / (2.0 + z);
    let mut g = G[0];
    for c in &G[1..] {
        g = m.apply(g, t, *c);
    }
    exp_with_tail(m, -(h * h), -d) * g
}

/// `x * sigmoid(1.702 x)`.
#[inline]
pub fn quick_gelu(x: f32) -> f32 {
    x * sigmoid(QUICK_GELU_SCALE * x)
}

/// Gradient of [`quick_gelu`]: `dy * (s + 1.702 x s (1 - s))`.
#[inline]
pub fn quick_gelu_backward(x: f32, dy: f32) -> f32 {
    let s = sigmoid(QUICK_GELU_SCALE * x);
    dy * (s + QUICK_GELU_SCALE * x * s * (1.0 - s))
}

/// `x min(max(x + 3, 0), 6) / 6` (MobileNetV3's hardswish); NaN stays NaN.
#[inline]
pub fn hardswish(x: f32) -> f32 {
    let r = if x < -3.0 {
        0.0
    } else if x > 3.0 {
        6.0
    } else {
        x + 3.0
    };
    x * r / 6.0
}

/// `min(max(alpha x + beta, 0), 1)`; NaN stays NaN.
#[inline]
pub fn hard_sigmoid(x: f32, alpha: f32, beta: f32) -> f32 {
    let v = alpha * x + beta;
    let v = if v < 0.0 { 0.0 } else { v };
    if v > 1.0 {
        1.0
    } else {
        v
    }
}

/// `x` for `x > 0`, else `alpha (e^x - 1)`.
#[inline]
pub fn elu(x: f32, alpha: f32) -> f32 {
    // The exponential for every lane, then a select: a branch around it kept the loop from
    // vectorizing. (Large x overflow to infinity in the unused lanes only.)
    let neg = alpha * (exp_fast(x) - 1.0);
    if x > 0.0 {
        x
    } else {
        neg
    }
}

/// `dy` for `x > 0`, else `dy * alpha e^x`.
#[inline]
pub fn elu_backward(x: f32, dy: f32, alpha: f32) -> f32 {
    // As in `elu`: computed for every lane, then selected.
    let neg = dy * alpha * exp_fast(x);
    if x > 0.0 {
        dy
    } else {
        neg
    }
}

/// `x` for `x > 0`, else `slope x`.
#[inline]
pub fn leaky_relu(x: f32, slope: f32) -> f32 {
    if x > 0.0 {
        x
    } else {
        slope * x
    }
}

/// `dy` for `x > 0`, else `slope dy`.
#[inline]
pub fn leaky_relu_backward(x: f32, dy: f32, slope: f32) -> f32 {
    if x > 0.0 {
        dy
    } else {
        slope * dy
    }
}

/// Snake's divisor: `d` with its magnitude floored at 1e-9 and its sign kept (0 counts as
/// positive).
#[inline]
pub fn snake_guard(d: f32) -> f32 {
    if d >= 0.0 {
        d.max(1e-9)
    } else {
        d.min(-1e-9)
    }
}

/// Snake over `x (N, C*L)` in NCL order (element `i` is in channel `(i / L) % C`):
/// `y = x + sin^2(alpha_c x) / snake_guard(d_c)`; `alpha` and `d` hold `C` values (`d` is
/// `beta` for snakebeta, else `alpha`). Panics unless the lengths agree.
pub fn snake_forward(x: &[f32], alpha: &[f32], d: &[f32], l: usize, y: &mut [f32]) {
    let c = alpha.len();
    assert!(
        d.len() == c && x.len() == y.len() && l > 0 && c > 0,
        "snake_forward: lengths"
    );
    y.par_chunks_mut(l)
        .zip(x.par_chunks(l))
        .enumerate()
        .for_each(|(row, (y, x))| {
            let (a, r) = (alpha[row % c], 1.0 / snake_guard(d[row % c]));
            wide(
                #[inline(always)]
                |m| {
                    if scaled_trig_fits(a, x) {
                        for (y, &v) in y.iter_mut().zip(x) {
                            let s = sin_cos_with(m, a * v).0;
                            *y = v + s * s * r;
                        }
                    } else {
                        for (y, &v) in y.iter_mut().zip(x) {
                            let s = (a * v).sin();
                            *y = v + s * s * r;
                        }
                    }
                },
            )
        });
}

/// Whether [`sin_cos_with`] holds at `a x` for every `x` of `xs` (a branch-free test).
#[inline(always)]
fn scaled_trig_fits(a: f32, xs: &[f32]) -> bool {
    xs.iter().fold(true, |all, &v| all & trig_fits(a * v))
}

/// The per-element part of [`snake_forward`]'s gradient: `dx = dy (1 + 2 a r s c)`
/// (overwritten), `ga = dy 2 r x s c` and `gb = -dy r^2 s^2`, the terms of `alpha`'s and
/// `d`'s gradients that the caller sums per channel (`s`, `c` = sin, cos of `a x`,
/// `r = 1 / snake_guard(d)`). Panics unless the lengths agree.
#[allow(clippy::too_many_arguments)]
pub fn snake_backward(
    x: &[f32],
    alpha: &[f32],
    d: &[f32],
    dy: &[f32],
    l: usize,
    dx: &mut [f32],
    ga: &mut [f32],
    gb: &mut [f32],
) {
    let c = alpha.len();
    let n = x.len();
    assert!(
        d.len() == c && [dy.len(), dx.len(), ga.len(), gb.len()] == [n; 4] && l > 0 && c > 0,
        "snake_backward: lengths"
    );
    dx.par_chunks_mut(l)
        .zip(ga.par_chunks_mut(l).zip(gb.par_chunks_mut(l)))
        .zip(x.par_chunks(l).zip(dy.par_chunks(l)))
        .enumerate()
        .for_each(|(row, ((dx, (ga, gb)), (x, dy)))| {
            let (a, r) = (alpha[row % c], 1.0 / snake_guard(d[row % c]));
            let terms = |v: f32, g: f32, s: f32, co: f32| {
                (
                    g * (1.0 + 2.0 * a * r * s * co),
                    g * 2.0 * r * v * s * co,
                    -g * r * r * s * s,
                )
            };
            let outs = dx.iter_mut().zip(ga.iter_mut()).zip(gb.iter_mut());
            wide(
                #[inline(always)]
                |m| {
                    if scaled_trig_fits(a, x) {
                        for (((dx, ga), gb), (&v, &g)) in outs.zip(x.iter().zip(dy)) {
                            let (s, co) = sin_cos_with(m, a * v);
                            (*dx, *ga, *gb) = terms(v, g, s, co);
                        }
                    } else {
                        for (((dx, ga), gb), (&v, &g)) in outs.zip(x.iter().zip(dy)) {
                            let (s, co) = (a * v).sin_cos();
                            (*dx, *ga, *gb) = terms(v, g, s, co);
                        }
                    }
                },
            )
        });
}

/// A gated linear unit: per row of `(B, 2D)`, `a` = columns `[0, D)`, `g` = `[D, 2D)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Glu {
    /// `a * gelu_tanh(g)`.
    Geglu,
    /// `a * gelu_exact(g)`.
    GegluExact,
    /// `silu(a) * g`.
    Swiglu,
}

impl Glu {
    /// The unit's output for one pair.
    #[inline]
    pub fn forward(self, a: f32, g: f32) -> f32 {
        self.forward_with(MulAdd::Split, a, g)
    }

    /// [`Glu::forward`] with its multiply-adds evaluated as `m` says.
    #[inline(always)]
    pub fn forward_with(self, m: MulAdd, a: f32, g: f32) -> f32 {
        match self {
            Glu::Geglu => a * gelu_with(m, g),
            Glu::GegluExact => a * gelu_exact_with(m, g),
            Glu::Swiglu => silu_with(m, a) * g,
        }
    }

    /// `(d a, d g)` for one pair given the output gradient.
    #[inline]
    pub fn backward(self, a: f32, g: f32, dy: f32) -> (f32, f32) {
        self.backward_with(MulAdd::Split, a, g, dy)
    }

    /// [`Glu::backward`] with its multiply-adds evaluated as `m` says.
    #[inline(always)]
    pub fn backward_with(self, m: MulAdd, a: f32, g: f32, dy: f32) -> (f32, f32) {
        match self {
            Glu::Geglu => (dy * gelu_with(m, g), dy * a * gelu_derivative(m, g)),
            Glu::GegluExact => (
                dy * gelu_exact_with(m, g),
                dy * a * gelu_exact_derivative(m, g),
            ),
            Glu::Swiglu => {
                let s = sigmoid_with(m, a);
                (dy * g * s * (1.0 + a * (1.0 - s)), dy * a * s)
            }
        }
    }
}

/// `y (B, D) = glu(x (B, 2D))`. Panics unless `x.len() == 2 * y.len()` and `d` divides `y`.
pub fn glu_forward(op: Glu, x: &[f32], d: usize, y: &mut [f32]) {
    assert!(
        x.len() == 2 * y.len() && (d == 0 || y.len().is_multiple_of(d)),
        "glu_forward: lengths"
    );
    if d == 0 {
        return;
    }
    // One copy of the loop per unit: each closure is its own type with the unit fixed in
    // its body (a captured `op` would be a load inside the rayon task, not a constant).
    match op {
        Glu::Geglu => glu_forward_as(x, d, y, |m, a, g| Glu::Geglu.forward_with(m, a, g)),
        Glu::GegluExact => glu_forward_as(x, d, y, |m, a, g| Glu::GegluExact.forward_with(m, a, g)),
        Glu::Swiglu => glu_forward_as(x, d, y, |m, a, g| Glu::Swiglu.forward_with(m, a, g)),
    }
}

/// [`glu_forward`] with the unit's pair function `f`.
#[inline(always)]
fn glu_forward_as(x: &[f32], d: usize, y: &mut [f32], f: impl Fn(MulAdd, f32, f32) -> f32 + Sync) {
    streaming(y.len(), 4, |streaming| {
        y.par_chunks_mut(d)
            .zip(x.par_chunks(2 * d))
            .for_each_streamed(streaming, |stream, (y, x)| {
                let (a, g) = x.split_at(d);
                wide(
                    #[inline(always)]
                    |m| {
                        write_zip(
                            stream,
                            y,
                            (a, g),
                            #[inline(always)]
                            |a, g| f(m, a, g),
                        )
                    },
                )
            });
    });
}

/// `dx (B, 2D) = [d a | d g]` from `x (B, 2D)` and `dy (B, D)`; `dx` is overwritten.
pub fn glu_backward(op: Glu, x: &[f32], dy: &[f32], d: usize, dx: &mut [f32]) {
    assert!(
        x.len() == 2 * dy.len() && dx.len() == x.len(),
        "glu_backward: lengths"
    );
    if d == 0 {
        return;
    }
    match op {
        Glu::Geglu => glu_backward_as(x, dy, d, dx, |m, a, g, t| {
            Glu::Geglu.backward_with(m, a, g, t)
        }),
        Glu::GegluExact => glu_backward_as(x, dy, d, dx, |m, a, g, t| {
            Glu::GegluExact.backward_with(m, a, g, t)
        }),
        Glu::Swiglu => glu_backward_as(x, dy, d, dx, |m, a, g, t| {
            Glu::Swiglu.backward_with(m, a, g, t)
        }),
    }
}

/// [`glu_backward`] with the unit's pair gradient `f`.
#[inline(always)]
fn glu_backward_as(
    x: &[f32],
    dy: &[f32],
    d: usize,
    dx: &mut [f32],
    f: impl Fn(MulAdd, f32, f32, f32) -> (f32, f32) + Sync,
) {
    dx.par_chunks_mut(2 * d)
        .zip(x.par_chunks(2 * d).zip(dy.par_chunks(d)))
        .for_each(|(dx, (x, dy))| {
            let (a, g) = x.split_at(d);
            let (da, dg) = dx.split_at_mut(d);
            wide(
                #[inline(always)]
                |m| {
                    for (((da, dg), (&a, &g)), &t) in da
                        .iter_mut()
                        .zip(dg.iter_mut())
                        .zip(a.iter().zip(g))
                        .zip(dy)
                    {
                        (*da, *dg) = f(m, a, g, t);
                    }
                },
            )
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd(f: impl Fn(f32) -> f32, x: f32) -> f32 {
        let h = 1e-3f64;
        ((f((x as f64 + h) as f32) as f64 - f((x as f64 - h) as f32) as f64) / (2.0 * h)) as f32
    }

    #[test]
    fn values_against_float64_formulas() {
        for &x in &[-3.0f32, -0.5, 0.0, 0.7, 2.5] {
            let xd = x as f64;
            let s = 1.0 / (1.0 + (-xd).exp());
            assert!((sigmoid(x) as f64 - s).abs() < 1e-6);
            assert!((silu(x) as f64 - xd * s).abs() < 1e-6);
            let g = 0.5
                * xd
                * (1.0
                    + ((2.0 / std::f64::consts::PI).sqrt() * (xd + 0.044715 * xd.powi(3))).tanh());
            assert!((gelu(x) as f64 - g).abs() < 1e-6, "{x}");
            // The vector path's form (fused multiply-adds where the CPU has FMA) too.
            let fused = crate::simd::wide(|m| gelu_with(m, x));
            assert!((fused as f64 - g).abs() < 1e-6, "{x}");
            let ge = 0.5 * xd * (1.0 + libm::erf(xd / 2f64.sqrt()));
            assert!((gelu_exact(x) as f64 - ge).abs() < 1e-6, "{x}");
        }
        assert_eq!(relu(-1.0), 0.0);
        assert_eq!(relu(f32::NAN), 0.0);
        assert!((elu(-1.0, 2.0) - 2.0 * ((-1.0f32).exp() - 1.0)).abs() < 1e-6);
        assert_eq!(leaky_relu(-2.0, 0.1), -0.2);
    }

    #[test]
    fn exp_based_activations_saturate_and_keep_nan() {
        // Far outside exp's range the fast exponential clamps: no NaN from inf/inf, and the
        // limits come out exactly.
        for (x, s) in [
            (-200.0f32, 0.0f32),
            (-100.0, 0.0),
            (100.0, 1.0),
            (200.0, 1.0),
        ] {
            assert_eq!(sigmoid(x), s, "sigmoid({x})");
            assert_eq!(silu(x), x * s, "silu({x})");
            assert_eq!(quick_gelu(x), x * s, "quick_gelu({x})");
        }
        assert_eq!(elu(-200.0, 0.5), -0.5);
        assert_eq!(elu_backward(-200.0, 1.0, 0.5), 0.0);
        assert_eq!(silu_backward(-200.0, 1.0), 0.0);
        assert_eq!(silu_backward(200.0, 1.0), 1.0);
        assert!(sigmoid(f32::NAN).is_nan() && silu(f32::NAN).is_nan());
        assert!(elu(f32::NAN, 1.0).is_nan());
    }

    #[test]
    fn gradients_match_finite_differences() {
        for &x in &[-2.3f32, -0.4, 0.3, 1.9] {
            let close = |a: f32, b: f32| (a - b).abs() < 2e-3 * (1.0 + b.abs());
            assert!(close(silu_backward(x, 1.0), fd(silu, x)));
            assert!(close(gelu_backward(x, 1.0), fd(gelu, x)));
            assert!(close(gelu_exact_backward(x, 1.0), fd(gelu_exact, x)));
            assert!(close(quick_gelu_backward(x, 1.0), fd(quick_gelu, x)));
            assert!(close(tanh_backward(x.tanh(), 1.0), fd(f32::tanh, x)));
            assert!(close(sigmoid_backward(sigmoid(x), 1.0), fd(sigmoid, x)));
            assert!(close(elu_backward(x, 1.0, 0.7), fd(|v| elu(v, 0.7), x)));
            assert!(close(
                leaky_relu_backward(x, 1.0, 0.1),
                fd(|v| leaky_relu(v, 0.1), x)
            ));
            assert!(close(relu_backward(x, 1.0), fd(relu, x)));
            for op in [Glu::Geglu, Glu::GegluExact, Glu::Swiglu] {
                let g = 0.8f32;
                let (da, dg) = op.backward(x, g, 1.0);
                assert!(close(da, fd(|a| op.forward(a, g), x)), "{op:?} da");
                assert!(close(dg, fd(|gg| op.forward(x, gg), g)), "{op:?} dg");
            }
        }
    }

    #[test]
    fn exact_gelu_and_its_gradient_match_float64_everywhere() {
        // Across both branches of 1 + erf (|x / sqrt 2| < 1 and beyond), deep into the
        // negative tail where 1 + erf is tiny, on the plain and the fused path.
        // 1 + erf(u) as erfc(-u), which keeps its relative precision where it is tiny.
        let one_plus_erf64 = |u: f64| libm::erfc(-u);
        for path in [MulAdd::Split, MulAdd::Fused] {
            for i in -13_000..=13_000 {
                let x = i as f32 * 1e-3 + 3e-5;
                // From the f32 argument the function sees (its rounding moves erfc's tail by up to
                // 2|u|^2 ulp, as in any f32 implementation).
                let (xd, u) = (x as f64, (x * FRAC_1_SQRT_2) as f64);
                let want = 0.5 * xd * one_plus_erf64(u);
                let got = gelu_exact_with(path, x) as f64;
                assert!(
                    (got - want).abs() <= 8e-7 * want.abs() + 1e-36,
                    "{path:?} gelu_exact({x}) = {got}, want {want}"
                );
                let phi = (-0.5 * xd * xd).exp() / (2.0 * std::f64::consts::PI).sqrt();
                let dwant = 0.5 * one_plus_erf64(u) + xd * phi;
                let dgot = gelu_exact_derivative(path, x) as f64;
                assert!(
                    (dgot - dwant).abs() <= 2e-6 * dwant.abs() + 1e-7,
                    "{path:?} d({x})"
                );
            }
        }
        assert!(gelu_exact(f32::NAN).is_nan());
        assert_eq!(gelu_exact(-30.0), 0.0);
        assert_eq!(gelu_exact(30.0), 30.0);
    }

    #[test]
    fn snake_matches_the_library_sine_on_fast_and_fallback_rows() {
        // Two channels of 300; the second row holds a value past the fast sine's bound, so
        // it takes the library path, the first the vector path.
        let (c, l) = (2, 300);
        let mut x: Vec<f32> = (0..c * l).map(|i| (i as f32 - 300.0) * 0.037).collect();
        x[l + 7] = 3.0e20;
        let (alpha, d) = ([0.7f32, 1.3], [0.9f32, 0.4]);
        let dy: Vec<f32> = (0..c * l).map(|i| (i % 5) as f32 - 2.0).collect();
        let mut y = vec![0.0f32; c * l];
        snake_forward(&x, &alpha, &d, l, &mut y);
        let (mut dx, mut ga, mut gb) = (vec![0.0; c * l], vec![0.0; c * l], vec![0.0; c * l]);
        snake_backward(&x, &alpha, &d, &dy, l, &mut dx, &mut ga, &mut gb);
        for i in 0..c * l {
            let (a, r) = (alpha[i / l] as f64, 1.0 / snake_guard(d[i / l]) as f64);
            let (v, g) = (x[i] as f64, dy[i] as f64);
            let (sv, cv) = (
                (a as f32 * x[i]).sin() as f64,
                (a as f32 * x[i]).cos() as f64,
            );
            let tol = |w: f64| 2e-6 * w.abs().max(1.0);
            assert!((y[i] as f64 - (v + sv * sv * r)).abs() <= tol(v), "y[{i}]");
            assert!(
                (dx[i] as f64 - g * (1.0 + 2.0 * a * r * sv * cv)).abs() <= tol(g),
                "dx[{i}]"
            );
            assert!(
                (ga[i] as f64 - g * 2.0 * r * v * sv * cv).abs() <= tol(g * v),
                "ga[{i}]"
            );
            assert!(
                (gb[i] as f64 + g * r * r * sv * sv).abs() <= tol(g),
                "gb[{i}]"
            );
        }
    }

    #[test]
    fn glu_splits_rows_into_halves() {
        // Two rows of 2D = 4: a = [1, 2], g = [3, 4] and a = [-1, 0], g = [2, -2].
        let x = [1.0, 2.0, 3.0, 4.0, -1.0, 0.0, 2.0, -2.0];
        let mut y = [0.0; 4];
        glu_forward(Glu::Swiglu, &x, 2, &mut y);
        // The slices run on the vector path; the pairs are computed on the same one.
        let silu = |v: f32| crate::simd::wide(|m| silu_with(m, v));
        assert_eq!(y, [silu(1.0) * 3.0, silu(2.0) * 4.0, silu(-1.0) * 2.0, 0.0]);
        let mut dx = [9.0; 8];
        glu_backward(Glu::Geglu, &x, &[1.0, 1.0, 1.0, 1.0], 2, &mut dx);
        crate::simd::wide(|m| {
            assert_eq!(dx[0], gelu_with(m, 3.0));
            assert_eq!(dx[2], gelu_derivative(m, 3.0));
            assert_eq!(dx[5], gelu_with(m, -2.0));
        });
    }
}
