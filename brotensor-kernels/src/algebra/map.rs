//! Element-wise maps for the tensor-algebra dtypes.
//!
//! [`FloatMap`] is one instruction set over real floats (`f32`, `f64`), computed in the
//! storage type with numpy's NaN rules; [`ComplexMap`] works on interleaved `(re, im)`
//! pairs. Both are one kernel each, the instruction a comptime parameter.

use cubecl::prelude::*;
use cubecl::server::Handle;

use super::soft64;
use crate::launch::{grid_1d, Buf, LaunchError};

/// A real-float element-wise instruction. Operands `x`, `y`, `z` in order; the arity is
/// [`FloatMap::arity`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FloatMap {
    /// `e^x`.
    Exp,
    /// `ln x` (NaN below 0, -inf at 0).
    Log,
    /// `sin x`.
    Sin,
    /// `cos x`.
    Cos,
    /// `tanh x`.
    Tanh,
    /// `sqrt x`.
    Sqrt,
    /// `1 / sqrt x`.
    Rsqrt,
    /// `e^x - 1`, accurate near 0.
    Expm1,
    /// `ln(1 + x)`, accurate near 0.
    Log1p,
    /// `|x|`.
    Abs,
    /// `-1`, `0` or `1` by the sign of `x` (zero keeps its sign; NaN stays NaN).
    Sign,
    /// `-x`.
    Neg,
    /// `x + y`.
    Add,
    /// `x - y`.
    Sub,
    /// `x * y`.
    Mul,
    /// `x / y`.
    Div,
    /// The larger of `x` and `y`; NaN if either is.
    Maximum,
    /// The smaller of `x` and `y`; NaN if either is.
    Minimum,
    /// `x^y` with numpy's rules (negative bases with integer exponents).
    Pow,
    /// `1` where `x == y`, else `0`.
    Eq,
    /// `1` where `x != y` (NaN included), else `0`.
    Ne,
    /// `1` where `x < y`, else `0`.
    Lt,
    /// `1` where `x <= y`, else `0`.
    Le,
    /// `1` where `x > y`, else `0`.
    Gt,
    /// `1` where `x >= y`, else `0`.
    Ge,
    /// `y` where `x != 0` (NaN counts as non-zero), else `z`.
    Select,
    /// `minimum(maximum(x, y), z)`: `x` clamped to the bounds `y`, `z`.
    Clamp,
}

impl FloatMap {
    /// Every instruction, in declaration order.
    pub const ALL: [FloatMap; 27] = [
        FloatMap::Exp,
        FloatMap::Log,
        FloatMap::Sin,
        FloatMap::Cos,
        FloatMap::Tanh,
        FloatMap::Sqrt,
        FloatMap::Rsqrt,
        FloatMap::Expm1,
        FloatMap::Log1p,
        FloatMap::Abs,
        FloatMap::Sign,
        FloatMap::Neg,
        FloatMap::Add,
        FloatMap::Sub,
        FloatMap::Mul,
        FloatMap::Div,
        FloatMap::Maximum,
        FloatMap::Minimum,
        FloatMap::Pow,
        FloatMap::Eq,
        FloatMap::Ne,
        FloatMap::Lt,
        FloatMap::Le,
        FloatMap::Gt,
        FloatMap::Ge,
        FloatMap::Select,
        FloatMap::Clamp,
    ];

    /// How many operands the instruction reads.
    pub const fn arity(self) -> usize {
        use FloatMap::*;
        match self {
            Exp | Log | Sin | Cos | Tanh | Sqrt | Rsqrt | Expm1 | Log1p | Abs | Sign | Neg => 1,
            Select | Clamp => 3,
            _ => 2,
        }
    }

    /// Whether the instruction is a transcendental function (exp, log and their kin, the
    /// trigonometric functions, tanh, pow): these need the shader language's math library,
    /// which Vulkan has for 16- and 32-bit floats only.
    pub const fn is_transcendental(self) -> bool {
        use FloatMap::*;
        matches!(self, Exp | Log | Sin | Cos | Tanh | Expm1 | Log1p | Pow)
    }
}

/// A complex element-wise instruction on `(re, im)` pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ComplexMap {
    /// `x + y`.
    Add,
    /// `x - y`.
    Sub,
    /// `x * y`.
    Mul,
    /// `x / y`, by Smith's method on operands scaled by powers of two (finite, right
    /// quotients for operands near the largest or smallest finite values).
    Div,
    /// `-x`.
    Neg,
    /// The conjugate of `x`.
    Conj,
    /// `e^x`.
    Exp,
    /// The principal logarithm `ln|x| + i arg x` (`arg` in `(-pi, pi]`).
    Log,
    /// `sin x`.
    Sin,
    /// `cos x`.
    Cos,
    /// `tanh x` (Kahan's formula; saturates to `+-1` for a large real part).
    Tanh,
    /// `1 / sqrt x` with the principal square root.
    Rsqrt,
}

impl ComplexMap {
    /// Every instruction, in declaration order.
    pub const ALL: [ComplexMap; 12] = [
        ComplexMap::Add,
        ComplexMap::Sub,
        ComplexMap::Mul,
        ComplexMap::Div,
        ComplexMap::Neg,
        ComplexMap::Conj,
        ComplexMap::Exp,
        ComplexMap::Log,
        ComplexMap::Sin,
        ComplexMap::Cos,
        ComplexMap::Tanh,
        ComplexMap::Rsqrt,
    ];

    /// How many operands the instruction reads.
    pub const fn arity(self) -> usize {
        match self {
            ComplexMap::Add | ComplexMap::Sub | ComplexMap::Mul | ComplexMap::Div => 2,
            _ => 1,
        }
    }
}

/// Whether `v` is NaN, by the bits of its f32 conversion (NaN stays NaN): `v != v` may be
/// folded away by a compiler that assumes finite math (WGSL allows it), and CubeCL 0.10's
/// WGSL `is_nan` for f64 has its two bit masks swapped.
#[cube]
pub fn nan<F: Numeric>(v: F) -> bool {
    f32::is_nan(f32::cast_from(v))
}

/// `1` when `c` holds and neither operand is NaN (`unordered_true`: or either is NaN).
#[cube]
fn ordered<F: Float>(c: bool, x: F, y: F, #[comptime] unordered_true: bool) -> F {
    let unordered = nan::<F>(x) || nan::<F>(y);
    let mut r = c && !unordered;
    if comptime!(unordered_true) {
        r = c || unordered;
    }
    indicator::<F>(r)
}

/// numpy's `maximum`: NaN when either operand is.
#[cube]
fn maximum<F: Float>(x: F, y: F) -> F {
    let mut r = y;
    if nan::<F>(x) || (x > y && !nan::<F>(y)) {
        r = x;
    }
    r
}

/// numpy's `minimum`: NaN when either operand is.
#[cube]
fn minimum<F: Float>(x: F, y: F) -> F {
    let mut r = y;
    if nan::<F>(x) || (x < y && !nan::<F>(y)) {
        r = x;
    }
    r
}

/// `1` when `c`, else `0`.
#[cube]
fn indicator<F: Float>(c: bool) -> F {
    let mut r = F::new(0.0);
    if c {
        r = F::new(1.0);
    }
    r
}

/// numpy's `power` for real floats: `x^0 = 1` and `1^y = 1` (even for NaN), a negative base
/// takes integer exponents only (the sign by the exponent's parity), `0^y` is 0 for
/// positive and inf for negative `y`. `inf` and `nan` come from the host: arithmetic that
/// makes them (`1 / 0`) may be folded to garbage by a compiler that assumes finite math.
#[cube]
fn power<F: Float>(x: F, y: F, specials: &Array<F>, #[comptime] soft: bool) -> F {
    let inf = specials[0];
    let not_a_number = specials[1];
    let zero = F::new(0.0);
    let one = F::new(1.0);
    let ay = F::abs(y);
    let integral = F::floor(y) == y;
    let odd = integral && F::floor(ay * F::new(0.5)) * F::new(2.0) != ay;
    let mut r = abs_pow::<F>(x, y, specials, soft);
    if x == zero {
        r = zero;
        if y < zero {
            r = inf;
        }
    } else if x < zero {
        if !integral {
            r = not_a_number;
        } else if odd {
            r = zero - r;
        }
    }
    if nan::<F>(x) || nan::<F>(y) {
        r = not_a_number;
    }
    if y == zero || x == one {
        r = one;
    }
    r
}

/// `e^x`, from the shader's math library or (`soft`, 64-bit on Vulkan) from arithmetic.
#[cube]
fn exp_any<F: Float>(x: F, specials: &Array<F>, #[comptime] soft: bool) -> F {
    if comptime!(soft) {
        soft64::exp::<F>(x, specials)
    } else {
        F::exp(x)
    }
}

/// `ln x`, as [`exp_any`].
#[cube]
fn ln_any<F: Float>(x: F, specials: &Array<F>, #[comptime] soft: bool) -> F {
    if comptime!(soft) {
        soft64::ln::<F>(x, specials)
    } else {
        F::ln(x)
    }
}

/// `|x|^y`: the math library's `powf`, or (`soft`) `e^(y ln|x|)`.
#[cube]
fn abs_pow<F: Float>(x: F, y: F, specials: &Array<F>, #[comptime] soft: bool) -> F {
    if comptime!(soft) {
        exp_any::<F>(y * ln_any::<F>(F::abs(x), specials, soft), specials, soft)
    } else {
        F::powf(F::abs(x), y)
    }
}

/// One real-float instruction on loaded operands.
#[cube]
fn apply_float<F: Float>(
    x: F,
    y: F,
    z: F,
    specials: &Array<F>,
    #[comptime] instr: FloatMap,
    #[comptime] soft: bool,
) -> F {
    let zero = F::new(0.0);
    let one = F::new(1.0);
    match instr {
        FloatMap::Exp => exp_any::<F>(x, specials, soft),
        FloatMap::Log => ln_any::<F>(x, specials, soft),
        FloatMap::Sin => {
            if comptime!(soft) {
                soft64::sin_cos::<F>(x, specials, false)
            } else {
                F::sin(x)
            }
        }
        FloatMap::Cos => {
            if comptime!(soft) {
                soft64::sin_cos::<F>(x, specials, true)
            } else {
                F::cos(x)
            }
        }
        FloatMap::Tanh => {
            // tanh(x) = e / (e + 2), e = expm1(2x): exact near 0, saturates to +-1.
            let e = expm1::<F>(x + x, specials, soft);
            let mut r = e / (e + F::new(2.0));
            if x > F::new(20.0) {
                r = one;
            }
            r
        }
        FloatMap::Sqrt => F::sqrt(x),
        FloatMap::Rsqrt => one / F::sqrt(x),
        FloatMap::Expm1 => expm1::<F>(x, specials, soft),
        FloatMap::Log1p => log1p::<F>(x, specials, soft),
        FloatMap::Abs => F::abs(x),
        FloatMap::Sign => {
            let mut r = x;
            if nan::<F>(x) {
                r = x;
            } else {
                if x > zero {
                    r = one;
                }
                if x < zero {
                    r = zero - one;
                }
            }
            r
        }
        FloatMap::Neg => x * F::new(-1.0),
        FloatMap::Add => x + y,
        FloatMap::Sub => x - y,
        FloatMap::Mul => x * y,
        FloatMap::Div => x / y,
        FloatMap::Maximum => maximum::<F>(x, y),
        FloatMap::Minimum => minimum::<F>(x, y),
        FloatMap::Pow => power::<F>(x, y, specials, soft),
        FloatMap::Eq => ordered::<F>(x == y, x, y, false),
        FloatMap::Ne => ordered::<F>(x != y, x, y, true),
        FloatMap::Lt => ordered::<F>(x < y, x, y, false),
        FloatMap::Le => ordered::<F>(x <= y, x, y, false),
        FloatMap::Gt => ordered::<F>(x > y, x, y, false),
        FloatMap::Ge => ordered::<F>(x >= y, x, y, false),
        FloatMap::Select => {
            let mut r = z;
            if x != zero || nan::<F>(x) {
                r = y;
            }
            r
        }
        FloatMap::Clamp => minimum::<F>(maximum::<F>(x, y), z),
    }
}

/// `e^x - 1`: the Taylor series below `|x| = 1/2` (19 terms, built in `F` so f64 keeps its
/// precision), `e^x - 1` above it, where the subtraction loses under 2 ulp.
#[cube]
fn expm1<F: Float>(x: F, specials: &Array<F>, #[comptime] soft: bool) -> F {
    let mut r = exp_any::<F>(x, specials, soft) - F::new(1.0);
    if F::abs(x) < F::new(0.5) {
        let mut term = x;
        let mut sum = x;
        #[unroll]
        for k in 2..20u32 {
            term = term * x / F::cast_from(k);
            sum += term;
        }
        r = sum;
    }
    r
}

/// `ln(1 + x)`: `2 atanh(s)` with `s = x / (2 + x)` as a series below `|x| = 1/2` (terms to
/// `s^35`), `ln(1 + x)` above it.
#[cube]
fn log1p<F: Float>(x: F, specials: &Array<F>, #[comptime] soft: bool) -> F {
    let mut r = ln_any::<F>(F::new(1.0) + x, specials, soft);
    if F::abs(x) < F::new(0.5) {
        let s = x / (F::new(2.0) + x);
        let s2 = s * s;
        let mut power = s;
        let mut sum = s;
        #[unroll]
        for j in 1..18u32 {
            power *= s2;
            sum += power / F::cast_from(2 * j + 1);
        }
        r = sum + sum;
    }
    r
}

#[cube(launch_unchecked)]
fn float_map_kernel<F: Float>(
    x: &Array<F>,
    y: &Array<F>,
    z: &Array<F>,
    specials: &Array<F>,
    out: &mut Array<F>,
    #[comptime] instr: FloatMap,
    #[comptime] soft: bool,
) {
    let i = ABSOLUTE_POS;
    if i < out.len() {
        let arity = comptime!(instr.arity());
        let vx = x[i];
        let mut vy = vx;
        let mut vz = vx;
        if comptime!(arity >= 2) {
            vy = y[i];
        }
        if comptime!(arity == 3) {
            vz = z[i];
        }
        out[i] = apply_float::<F>(vx, vy, vz, specials, instr, soft);
    }
}

/// Smith's division of `(a + bi) / (c + di)`: the ratio of the smaller to the larger part
/// of the divisor keeps every intermediate in range. A zero divisor gives numpy's
/// infinities and NaNs.
#[cube]
#[allow(unused_assignments)]
fn smith<F: Float>(a: F, b: F, c: F, d: F) -> (F, F) {
    let zero = F::new(0.0);
    let ac = F::abs(c);
    let ad = F::abs(d);
    let mut re = zero;
    let mut im = zero;
    if ac >= ad {
        if ac == zero && ad == zero {
            re = a / ac;
            im = b / ac;
        } else {
            let r = d / c;
            let den = c + d * r;
            re = (a + b * r) / den;
            im = (b - a * r) / den;
        }
    } else {
        let r = c / d;
        let den = c * r + d;
        re = (a * r + b) / den;
        im = (b * r - a) / den;
    }
    (re, im)
}

/// `(a + bi) / (c + di)`: [`smith`] on parts first scaled toward 1 by powers of two where
/// they exceed `2^32` (f32; `2^256` when `wide`, f64) or fall below its inverse, so operands
/// near the largest or smallest values give finite, right quotients.
#[cube]
fn complex_div<F: Float>(a: F, b: F, c: F, d: F, #[comptime] wide: bool) -> (F, F) {
    let zero = F::new(0.0);
    let one = F::new(1.0);
    let mut big = F::new(4_294_967_296.0);
    if comptime!(wide) {
        let b2 = big * big;
        let b4 = b2 * b2;
        big = b4 * b4;
    }
    let small = one / big;
    let mut a = a;
    let mut b = b;
    let mut c = c;
    let mut d = d;
    let mut undo = one;
    let n = F::max(F::abs(a), F::abs(b));
    if n > big {
        a *= small;
        b *= small;
        undo = big;
    } else if n < small && n > zero {
        a *= big;
        b *= big;
        undo = small;
    }
    let m = F::max(F::abs(c), F::abs(d));
    let mut undo_den = one;
    if m > big {
        c *= small;
        d *= small;
        undo_den = small;
    } else if m < small && m > zero {
        c *= big;
        d *= big;
        undo_den = big;
    }
    let (re, im) = smith::<F>(a, b, c, d);
    (re * undo * undo_den, im * undo * undo_den)
}

/// `sin x` or (`cosine`) `cos x`, as [`exp_any`].
#[cube]
fn sin_cos_any<F: Float>(
    x: F,
    specials: &Array<F>,
    #[comptime] soft: bool,
    #[comptime] cosine: bool,
) -> F {
    if comptime!(soft) {
        soft64::sin_cos::<F>(x, specials, cosine)
    } else if comptime!(cosine) {
        F::cos(x)
    } else {
        F::sin(x)
    }
}

/// `atan t` for `|t| <= 1` from arithmetic: two half-angle steps `u = t / (1 + sqrt(1 +
/// t^2))` bring `|u|` under `tan(pi / 16)`, where 13 terms of the series reach f64's
/// precision.
#[cube]
fn atan_small<F: Float>(t: F) -> F {
    let one = F::new(1.0);
    let u1 = t / (one + F::sqrt(one + t * t));
    let u = u1 / (one + F::sqrt(one + u1 * u1));
    let u2 = u * u;
    let mut power = u;
    let mut sum = u;
    #[unroll]
    for k in 1..13u32 {
        power *= u2;
        let term = power / F::cast_from(2 * k + 1);
        if k % 2 == 1 {
            sum -= term;
        } else {
            sum += term;
        }
    }
    sum * F::new(4.0)
}

/// `atan2(y, x)` in `[-pi, pi]`: the math library's, or (`soft`) from [`atan_small`] (pi
/// from the three parts of pi/2 in `specials`).
#[cube]
fn atan2_any<F: Float>(y: F, x: F, specials: &Array<F>, #[comptime] soft: bool) -> F {
    if comptime!(soft) {
        let half_pi = specials[5] + specials[6] + specials[7];
        let pi = half_pi + half_pi;
        let zero = F::new(0.0);
        let mut r = zero;
        if F::abs(y) <= F::abs(x) {
            if x != zero {
                r = atan_small::<F>(y / x);
            }
            if x < zero {
                if y < zero {
                    r -= pi;
                } else {
                    r += pi;
                }
            }
        } else {
            r = half_pi - atan_small::<F>(x / y);
            if y < zero {
                r -= pi;
            }
        }
        r
    } else {
        F::atan2(y, x)
    }
}

/// `(sinh x, cosh x)`: `sinh` through [`expm1`] (exact near 0).
#[cube]
fn sinh_cosh<F: Float>(x: F, specials: &Array<F>, #[comptime] soft: bool) -> (F, F) {
    let half = F::new(0.5);
    let sinh = (expm1::<F>(x, specials, soft) - expm1::<F>(F::new(0.0) - x, specials, soft)) * half;
    let cosh =
        (exp_any::<F>(x, specials, soft) + exp_any::<F>(F::new(0.0) - x, specials, soft)) * half;
    (sinh, cosh)
}

/// One complex function of `a + bi` (the unary transcendental instructions).
#[cube]
#[allow(unused_assignments)]
fn complex_math<F: Float>(
    a: F,
    b: F,
    specials: &Array<F>,
    #[comptime] instr: ComplexMap,
    #[comptime] soft: bool,
    #[comptime] wide: bool,
) -> (F, F) {
    let zero = F::new(0.0);
    let one = F::new(1.0);
    match instr {
        ComplexMap::Exp => {
            let e = exp_any::<F>(a, specials, soft);
            let cos = sin_cos_any::<F>(b, specials, soft, true);
            let sin = sin_cos_any::<F>(b, specials, soft, false);
            let mut re = e * cos;
            let mut im = e * sin;
            if b == zero {
                re = e;
                im = b;
            }
            (re, im)
        }
        ComplexMap::Log => {
            let m = F::max(F::abs(a), F::abs(b));
            let n = F::min(F::abs(a), F::abs(b));
            let mut modulus = m;
            if m > zero {
                let r = n / m;
                modulus = m * F::sqrt(one + r * r);
            }
            (
                ln_any::<F>(modulus, specials, soft),
                atan2_any::<F>(b, a, specials, soft),
            )
        }
        ComplexMap::Sin => {
            let (sh, ch) = sinh_cosh::<F>(b, specials, soft);
            let sin = sin_cos_any::<F>(a, specials, soft, false);
            let cos = sin_cos_any::<F>(a, specials, soft, true);
            (sin * ch, cos * sh)
        }
        ComplexMap::Cos => {
            let (sh, ch) = sinh_cosh::<F>(b, specials, soft);
            let sin = sin_cos_any::<F>(a, specials, soft, false);
            let cos = sin_cos_any::<F>(a, specials, soft, true);
            (cos * ch, zero - sin * sh)
        }
        ComplexMap::Tanh => {
            // Kahan: with t = tan b, s = sinh a, rho = cosh a, beta = 1 + t^2,
            // tanh(a + bi) = (beta rho s + i t) / (1 + beta s^2).
            let sin = sin_cos_any::<F>(b, specials, soft, false);
            let cos = sin_cos_any::<F>(b, specials, soft, true);
            let mut re = one;
            let mut im = zero;
            if F::abs(a) > F::new(22.0) {
                if a < zero {
                    re = zero - one;
                }
                im = F::new(4.0)
                    * sin
                    * cos
                    * exp_any::<F>(F::new(-2.0) * F::abs(a), specials, soft);
            } else {
                let t = sin / cos;
                let beta = one + t * t;
                let (s, rho) = sinh_cosh::<F>(a, specials, soft);
                let den = one + beta * s * s;
                re = beta * rho * s / den;
                im = t / den;
            }
            (re, im)
        }
        ComplexMap::Rsqrt => {
            // The principal square root, then its reciprocal.
            let m = F::max(F::abs(a), F::abs(b));
            let n = F::min(F::abs(a), F::abs(b));
            let mut modulus = m;
            if m > zero {
                let r = n / m;
                modulus = m * F::sqrt(one + r * r);
            }
            let mut x = zero;
            let mut y = zero;
            if a >= zero {
                x = F::sqrt((modulus + a) * F::new(0.5));
                if x > zero {
                    y = b / (x + x);
                }
            } else {
                let t = F::sqrt((modulus - a) * F::new(0.5));
                x = F::abs(b) / (t + t);
                y = t;
                if b < zero {
                    y = zero - t;
                }
            }
            complex_div::<F>(one, zero, x, y, wide)
        }
        _ => (a, b),
    }
}

#[cube(launch_unchecked)]
fn complex_map_kernel<F: Float>(
    x: &Array<F>,
    y: &Array<F>,
    specials: &Array<F>,
    out: &mut Array<F>,
    #[comptime] instr: ComplexMap,
    #[comptime] wide: bool,
    #[comptime] soft: bool,
) {
    let i = ABSOLUTE_POS;
    if i * 2 < out.len() {
        let a = x[2 * i];
        let b = x[2 * i + 1];
        let mut c = a;
        let mut d = b;
        if comptime!(instr.arity() == 2) {
            c = y[2 * i];
            d = y[2 * i + 1];
        }
        let minus = F::new(-1.0);
        let (re, im) = match instr {
            ComplexMap::Add => (a + c, b + d),
            ComplexMap::Sub => (a - c, b - d),
            ComplexMap::Mul => (a * c - b * d, a * d + b * c),
            ComplexMap::Div => complex_div::<F>(a, b, c, d, wide),
            ComplexMap::Neg => (a * minus, b * minus),
            ComplexMap::Conj => (a, b * minus),
            _ => complex_math::<F>(a, b, specials, instr, soft, wide),
        };
        out[2 * i] = re;
        out[2 * i + 1] = im;
    }
}

/// Checks the operands of a map over `scalars` scalars of `bytes` bytes and returns them in
/// order, the unused ones bound to `x`.
fn operands(
    inputs: &[&Handle],
    arity: usize,
    scalars: usize,
    bytes: usize,
) -> Result<[Buf; 3], LaunchError> {
    if inputs.len() != arity {
        return Err(LaunchError::Invalid {
            what: "operand count (must match the instruction's arity)",
        });
    }
    let bufs = inputs
        .iter()
        .map(|h| Buf::new("input", h, scalars, bytes))
        .collect::<Result<Vec<_>, _>>()?;
    let first = &bufs[0];
    Ok([
        first.clone(),
        bufs.get(1).unwrap_or(first).clone(),
        bufs.get(2).unwrap_or(first).clone(),
    ])
}

/// `out[i] = instr(x[i], y[i], z[i])` for `numel` real floats of type `F`; `inputs` holds
/// the instruction's [`arity`](FloatMap::arity) buffers. With `soft`, the transcendental
/// functions are computed from arithmetic ([`super::soft64`]), for 64-bit floats where the
/// shader language's math library has none.
///
/// Errors (no launch) when the operand count is wrong, a buffer is shorter than `numel`, or
/// `numel` needs more than 32 bits.
pub fn launch_float_map<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    instr: FloatMap,
    inputs: &[&Handle],
    out: &Handle,
    numel: usize,
    soft: bool,
) -> Result<(), LaunchError> {
    let bytes = core::mem::size_of::<F>();
    let [x, y, z] = operands(inputs, instr.arity(), numel, bytes)?;
    let out = Buf::new("out", out, numel, bytes)?;
    crate::launch::fits_u32("numel (must fit in 32 bits)", numel)?;
    if numel == 0 {
        return Ok(());
    }
    let (count, dim) = grid_1d(client, numel)?;
    // The constants of `soft64` (inf and NaN first), in the storage type.
    let specials = if bytes == 8 {
        Buf::upload(client, &soft64::CONSTS)
    } else {
        Buf::upload(client, &soft64::CONSTS.map(|c| c as f32))
    };
    // SAFETY: every operand and `out` hold `numel` elements (checked `Buf`s) and unit
    // `i < numel` reads and writes element `i` only; `specials` holds the constants read.
    unsafe {
        float_map_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            y.arg(),
            z.arg(),
            specials.arg(),
            out.arg(),
            instr,
            soft,
        );
    }
    Ok(())
}

/// `out[i] = instr(x[i], y[i])` for `numel` complex numbers whose parts are `F`
/// (interleaved `(re, im)`, so each buffer holds `2 numel` values of `F`). With `soft`, the
/// transcendental functions are computed from arithmetic, as in [`launch_float_map`].
///
/// Errors (no launch) when the operand count is wrong, a buffer is too short, or `2 numel`
/// needs more than 32 bits.
pub fn launch_complex_map<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    instr: ComplexMap,
    inputs: &[&Handle],
    out: &Handle,
    numel: usize,
    soft: bool,
) -> Result<(), LaunchError> {
    let bytes = core::mem::size_of::<F>();
    let scalars = crate::launch::extent("complex parts", &[numel, 2])?;
    let [x, y, _] = operands(inputs, instr.arity(), scalars, bytes)?;
    let out = Buf::new("out", out, scalars, bytes)?;
    crate::launch::fits_u32("parts (must fit in 32 bits)", scalars)?;
    if numel == 0 {
        return Ok(());
    }
    let (count, dim) = grid_1d(client, numel)?;
    let specials = if bytes == 8 {
        Buf::upload(client, &soft64::CONSTS)
    } else {
        Buf::upload(client, &soft64::CONSTS.map(|c| c as f32))
    };
    // SAFETY: every operand and `out` hold `2 numel` parts (checked `Buf`s); unit
    // `i < numel` reads and writes parts `2i` and `2i + 1` only; `specials` holds the
    // constants read.
    unsafe {
        complex_map_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            y.arg(),
            specials.arg(),
            out.arg(),
            instr,
            bytes == 8,
            soft && bytes == 8,
        );
    }
    Ok(())
}

#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{Lowering as L, Rt};
    let a = L::array;
    for instr in FloatMap::ALL {
        l.lower(float_map_kernel::FloatMapKernel::<f32, Rt>::new(
            L::settings_1d(),
            l.client.clone(),
            a(),
            a(),
            a(),
            a(),
            a(),
            instr,
            false,
        ));
        // CUDA launches f64 with its math library (`soft` false); the arithmetic versions
        // run on wgpu only (WGSL / SPIR-V, tested on lavapipe), and Metal has no f64.
        l.lower(float_map_kernel::FloatMapKernel::<f64, Rt>::new(
            L::settings_1d(),
            l.client.clone(),
            a(),
            a(),
            a(),
            a(),
            a(),
            instr,
            false,
        ));
    }
    for instr in ComplexMap::ALL {
        l.lower(complex_map_kernel::ComplexMapKernel::<f32, Rt>::new(
            L::settings_1d(),
            l.client.clone(),
            a(),
            a(),
            a(),
            a(),
            instr,
            false,
            false,
        ));
        l.lower(complex_map_kernel::ComplexMapKernel::<f64, Rt>::new(
            L::settings_1d(),
            l.client.clone(),
            a(),
            a(),
            a(),
            a(),
            instr,
            true,
            false,
        ));
    }
}
