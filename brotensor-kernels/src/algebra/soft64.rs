//! 64-bit exp, log, sin and cos from arithmetic alone, for shader languages whose math
//! library stops at 32 bits (Vulkan's GLSL.std.450). Constants come from the host in a
//! buffer (`consts`, see [`CONSTS`]): an f32 literal cannot carry them, and arithmetic
//! that makes inf or NaN may be folded away by a compiler that assumes finite math.
//!
//! Accuracy: a few ulp (sin and cos: within 1e-14 absolute, tested, and relative to the value
//! only as far as the reduced argument's 2^-100 allows near zeros of huge arguments). exp:
//! Cody-Waite reduction by ln 2 and a degree-17 series. log:
//! the exponent found by binary descent over powers of two, then `2 atanh(s)`. sin/cos:
//! reduction by pi/2 in three parts below [`PAYNE_HANEK_FROM`], Payne-Hanek reduction with
//! the bits of 2/pi above it (every finite f64), then the series of the quadrant's function.

use cubecl::prelude::*;

use super::map::nan;

/// The host constants, in order: +inf, NaN, ln 2 (high part), ln 2 (low part), 1 / ln 2,
/// pi/2 in three parts, 2 / pi; then, from [`TWO_BY_PI_AT`], [`TWO_BY_PI_CHUNKS`].
pub const CONSTS: [f64; TWO_BY_PI_AT + TWO_BY_PI_CHUNKS.len()] = with_chunks([
    f64::INFINITY,
    f64::NAN,
    0.693_147_180_369_123_8,
    1.908_214_929_270_587_7e-10,
    std::f64::consts::LOG2_E,
    1.570_796_326_734_125_6,
    6.077_100_506_303_966e-11,
    2.022_266_248_711_166_5e-21,
    std::f64::consts::FRAC_2_PI,
]);

/// Where the chunks of 2/pi start in [`CONSTS`].
pub const TWO_BY_PI_AT: usize = 9;

/// 2/pi in 24-bit pieces: `2/pi = sum of chunk[i] 2^(-24 (i + 1))`, 1152 bits, enough for
/// the largest f64 exponent (written by `scripts/two_by_pi.py` from exact integer
/// arithmetic).
pub const TWO_BY_PI_CHUNKS: [f64; 48] = [
    10680707.0, 7228996.0, 1387004.0, 2578385.0, 16069853.0, 12639074.0, 9804092.0, 4427841.0,
    16666979.0, 11263675.0, 12935607.0, 2387514.0, 4345298.0, 14681673.0, 3074569.0, 13734428.0,
    16653803.0, 1880361.0, 10960616.0, 8533493.0, 3062596.0, 8710556.0, 7349940.0, 6258241.0,
    3772886.0, 3769171.0, 3798172.0, 8675211.0, 12450088.0, 3874808.0, 9961438.0, 366607.0,
    15675153.0, 9132554.0, 7151469.0, 3571407.0, 2607881.0, 12013382.0, 4155038.0, 6285869.0,
    7677882.0, 13102053.0, 15825725.0, 473591.0, 9065106.0, 15363067.0, 6271263.0, 9264392.0,
];

/// `|x|` from which sin and cos reduce their argument by Payne-Hanek: 2^19, where the
/// three-part reduction's product `k * pi/2 (high part)` stops being exact.
pub const PAYNE_HANEK_FROM: f32 = 524_288.0;

const fn with_chunks(head: [f64; TWO_BY_PI_AT]) -> [f64; TWO_BY_PI_AT + 48] {
    let mut out = [0.0; TWO_BY_PI_AT + 48];
    let mut i = 0;
    while i < out.len() {
        out[i] = if i < TWO_BY_PI_AT {
            head[i]
        } else {
            TWO_BY_PI_CHUNKS[i - TWO_BY_PI_AT]
        };
        i += 1;
    }
    out
}

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

/// `(n, f)` with `|x| 2/pi = n + f` modulo 8, `n` an integer in `[0, 8]` and `|f| <= 1/2`
/// (plus rounding), for finite `|x| >= 2^19` (Payne-Hanek). `|x| = xs 2^e`, `xs` in
/// `[1, 2)`, is split into 27- and 26-bit halves; each half times a 24-bit chunk of 2/pi is
/// exact, scaled by a power of two, and is taken modulo 8 exactly. Chunks whose products are
/// multiples of 8 are skipped; the eight chunks after them leave out less than 2^-113. The
/// sum modulo 8 is carried as a value and its rounding errors (two-sum), about 2^-100.
#[cube]
fn reduce_payne_hanek<F: Float>(ax: F, consts: &Array<F>) -> (F, F) {
    let bits = u64::reinterpret(f64::cast_from(ax));
    let e = F::cast_from(i64::cast_from(bits >> u64::new(52)) - i64::new(1023));
    // `pow2(-e)` in two steps: `-e` may be -1023, below the normal exponents.
    let xs = ax * pow2::<F>(F::new(1.0) - e) * F::new(0.5);
    let xh = F::floor(xs * F::new(67_108_864.0)) / F::new(67_108_864.0);
    let xl = xs - xh;
    // The first chunk whose products are not all multiples of 8.
    let j0 = F::max(F::floor((e - F::new(55.0)) / F::new(24.0)), F::new(0.0));
    let eighth = F::new(0.125);
    let mut hi = F::new(0.0);
    let mut lo = F::new(0.0);
    #[unroll]
    for t in 0..8u32 {
        let i = j0 + F::cast_from(t);
        let chunk = consts[(u32::cast_from(i) + comptime!(TWO_BY_PI_AT as u32)) as usize];
        let scale = pow2::<F>(e - F::new(24.0) * (i + F::new(1.0)));
        #[unroll]
        for half in 0..2u32 {
            let mut part = xh;
            if half == 1 {
                part = xl;
            }
            let p = part * chunk * scale;
            let p8 = p - F::new(8.0) * F::floor(p * eighth);
            let s = hi + p8;
            let b = s - hi;
            lo += (hi - (s - b)) + (p8 - b);
            hi = s - F::new(8.0) * F::floor(s * eighth);
        }
    }
    let n = F::floor(hi + F::new(0.5));
    (n, (hi - n) + lo)
}

/// `sin x`, or `cos x` with `cosine`.
#[cube]
pub fn sin_cos<F: Float>(x: F, consts: &Array<F>, #[comptime] cosine: bool) -> F {
    // `x = k pi/2 + r`, |r| <= pi/4: three-part Cody-Waite for moderate |x|, Payne-Hanek
    // beyond (on |x|, then mirrored).
    let mut k = F::floor(x * consts[8] + F::new(0.5));
    let mut r = x - k * consts[5] - k * consts[6] - k * consts[7];
    let ax = F::abs(x);
    if ax >= F::new(PAYNE_HANEK_FROM) && ax < consts[0] {
        let (n, f) = reduce_payne_hanek::<F>(ax, consts);
        k = n;
        r = f * consts[5] + f * consts[6];
        if x < F::new(0.0) {
            k = F::new(0.0) - k;
            r = F::new(0.0) - r;
        }
    }
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
