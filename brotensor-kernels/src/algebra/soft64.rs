//! 64-bit exp, log, sin and cos from arithmetic alone, for shader languages whose math
//! library stops at 32 bits (Vulkan's GLSL.std.450). Constants come from the host in a
//! buffer (`consts`, see [`CONSTS`]): an f32 literal cannot carry them, and arithmetic
//! that makes inf or NaN may be folded away by a compiler that assumes finite math.
//!
//! Accuracy: a few ulp. exp: Cody-Waite reduction by ln 2 and a degree-17 series. log:
//! the exponent found by binary descent over powers of two, then `2 atanh(s)`. sin/cos:
//! reduction by pi/2 in three parts (exact for |x| below about 2^20 pi/2; beyond that the
//! error grows with |x|), then the series of the quadrant's function.

use cubecl::prelude::*;

use super::map::nan;

/// The host constants, in order: +inf, NaN, ln 2 (high part), ln 2 (low part), 1 / ln 2,
/// pi/2 in three parts, 2 / pi.
pub const CONSTS: [f64; 9] = [
    f64::INFINITY,
    f64::NAN,
    0.693_147_180_369_123_8,
    1.908_214_929_270_587_7e-10,
    std::f64::consts::LOG2_E,
    1.570_796_326_734_125_6,
    6.077_100_506_303_966e-11,
    2.022_266_248_711_166_5e-21,
    std::f64::consts::FRAC_2_PI,
];

/// `2^n` for integral `-1022 <= n <= 1023`, built from its bits (exponent field `n + 1023`).
#[cube]
fn pow2<F: Float>(n: F) -> F {
    let field = u64::cast_from(i64::cast_from(n) + i64::new(1023));
    F::cast_from(f64::reinterpret(field << u64::new(52)))
}

/// `e^x`.
#[cube]
pub fn exp<F: Float>(x: F, consts: &Array<F>) -> F {
    let k = F::floor(x * consts[4] + F::new(0.5));
    let r = x - k * consts[2] - k * consts[3];
    let mut term = F::new(1.0);
    let mut sum = F::new(1.0);
    #[unroll]
    for i in 1..18u32 {
        term = term * r / F::cast_from(i);
        sum += term;
    }
    // 2^k in two halves, so neither leaves the normal range.
    let k1 = F::floor(k * F::new(0.5));
    let mut y = sum * pow2::<F>(k1) * pow2::<F>(k - k1);
    if x > F::new(709.78) {
        y = consts[0];
    }
    if x < F::new(-745.2) {
        y = F::new(0.0);
    }
    if nan::<F>(x) {
        y = consts[1];
    }
    y
}

/// `ln x` (NaN below 0, -inf at 0, inf at inf).
#[cube]
pub fn ln<F: Float>(x: F, consts: &Array<F>) -> F {
    let one = F::new(1.0);
    let mut m = x;
    let mut e = F::new(0.0);
    // Subnormals first: lift them into the normal range.
    if m < pow2::<F>(F::new(-1000.0)) {
        m *= pow2::<F>(F::new(64.0));
        e -= F::new(64.0);
    }
    let mut step = F::new(512.0);
    #[unroll]
    for _ in 0..10u32 {
        let p = pow2::<F>(step);
        if m >= p {
            m /= p;
            e += step;
        }
        if m * p < one {
            m *= p;
            e -= step;
        }
        step *= F::new(0.5);
    }
    // Now m is in [0.5, 2): center it on 1 (|s| below 0.172 after this).
    if m > F::new(1.41) {
        m *= F::new(0.5);
        e += one;
    }
    if m < F::new(0.71) {
        m *= F::new(2.0);
        e -= one;
    }
    let s = (m - one) / (m + one);
    let s2 = s * s;
    let mut power = s;
    let mut sum = s;
    #[unroll]
    for j in 1..14u32 {
        power *= s2;
        sum += power / F::cast_from(2 * j + 1);
    }
    let mut y = e * consts[2] + (e * consts[3] + (sum + sum));
    if x == F::new(0.0) {
        y = F::new(0.0) - consts[0];
    }
    if x < F::new(0.0) || nan::<F>(x) {
        y = consts[1];
    }
    if x == consts[0] {
        y = x;
    }
    y
}

/// `sin x`, or `cos x` with `cosine`.
#[cube]
pub fn sin_cos<F: Float>(x: F, consts: &Array<F>, #[comptime] cosine: bool) -> F {
    let k = F::floor(x * consts[8] + F::new(0.5));
    let r = x - k * consts[5] - k * consts[6] - k * consts[7];
    let r2 = r * r;
    // sin r and cos r by their series (|r| <= pi/4).
    let mut ts = r;
    let mut s = r;
    let mut tc = F::new(1.0);
    let mut c = F::new(1.0);
    #[unroll]
    for i in 1..12u32 {
        ts = F::new(0.0) - ts * r2 / F::cast_from((2 * i) * (2 * i + 1));
        s += ts;
        tc = F::new(0.0) - tc * r2 / F::cast_from((2 * i - 1) * (2 * i));
        c += tc;
    }
    // The quadrant: k mod 4 (plus 1 for the cosine).
    let mut q = k - F::new(4.0) * F::floor(k * F::new(0.25));
    if comptime!(cosine) {
        q += F::new(1.0);
        if q > F::new(3.5) {
            q = F::new(0.0);
        }
    }
    let mut y = s;
    if q > F::new(0.5) && q < F::new(1.5) {
        y = c;
    }
    if q > F::new(1.5) && q < F::new(2.5) {
        y = F::new(0.0) - s;
    }
    if q > F::new(2.5) {
        y = F::new(0.0) - c;
    }
    if nan::<F>(x) || F::abs(x) == consts[0] {
        y = consts[1];
    }
    y
}
