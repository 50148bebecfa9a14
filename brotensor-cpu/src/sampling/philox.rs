//! Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011)
//! and the integer-only math that turns its words into floats.
//!
//! Every function here has a twin in `brotensor_kernels::sampling::philox` that computes the
//! same integers: the floats are built from them by exact conversions (integers below 2^24)
//! and single correctly rounded products, so every device gives the same bits. A builtin
//! `ln`, `cos`, `sqrt` or `exp`, or a sum of rounded products (which a GPU compiler may fuse
//! into an FMA), would not.

/// First Philox round multiplier.
const M0: u32 = 0xD251_1F53;
/// Second Philox round multiplier.
const M1: u32 = 0xCD9E_8D57;
/// First key bump (Weyl increment).
const W0: u32 = 0x9E37_79B9;
/// Second key bump.
const W1: u32 = 0xBB67_AE85;

/// The Philox 4x32-10 block of counter `ctr` under key `key` (Random123's `philox4x32`).
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (ctr, key);
    for round in 0..10 {
        let p0 = u64::from(M0) * u64::from(c[0]);
        let p1 = u64::from(M1) * u64::from(c[2]);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
        if round < 9 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
    }
    c
}

/// The block of substream `sub` under the 64-bit `key`: key words and counter
/// `{lo(sub), hi(sub), 0, 0}` low word first.
pub fn block(key: u64, sub: u64) -> [u32; 4] {
    philox4x32_10(
        [sub as u32, (sub >> 32) as u32, 0, 0],
        [key as u32, (key >> 32) as u32],
    )
}

/// `(w >> 8) / 2^24`: the word's top 24 bits as a uniform in `[0, 1)` (exact).
pub fn uniform24(w: u32) -> f32 {
    (w >> 8) as f32 * (1.0 / 16_777_216.0)
}

/// `(a b) >> 30` for Q2.30 operands whose product stays below 2^62.
fn mul_q30(a: u32, b: u32) -> u32 {
    ((u64::from(a) * u64::from(b)) >> 30) as u32
}

/// `cos(pi/2 s)` in Q2.30 for `s` in Q2.30, `0 <= s <= 1`: Taylor to `s^14` in Horner form on
/// `w = s^2` (truncation error below 2^-32).
fn cos_quarter_q30(s: u32) -> u32 {
    /// `(pi/2)^(2k) / (2k)!` in Q2.30, `k = 0..8`.
    const C: [u32; 8] = [
        1_073_741_824,
        1_324_675_879,
        272_375_560,
        22_401_992,
        987_048,
        27_060,
        506,
        7,
    ];
    let w = mul_q30(s, s);
    let mut acc = C[7];
    for k in (0..7).rev() {
        acc = C[k].saturating_sub(mul_q30(w, acc));
    }
    acc
}

/// `cos(2 pi b / 2^24)` for a 24-bit `b`, as `(magnitude in Q1.22, negative)`.
fn cos_turn(b: u32) -> (u32, bool) {
    let q = b >> 22;
    let t = b & 0x3F_FFFF;
    // Quadrants 1 and 3 are sines: cos(pi/2 (1 - t)).
    let s = if q & 1 == 0 { t } else { 0x40_0000 - t };
    (cos_quarter_q30(s << 8) >> 8, q == 1 || q == 2)
}

/// `24 - log2 m` in Q5.24 for `1 <= m <= 2^24` (the fraction bit by bit, by squaring).
fn minus_log2_q24(m: u32) -> u32 {
    let e = 31 - m.leading_zeros();
    let mut x = m << (31 - e);
    let mut frac = 0u32;
    for _ in 0..24 {
        let p = u64::from(x) * u64::from(x);
        frac <<= 1;
        if p >> 63 == 1 {
            frac |= 1;
            x = (p >> 32) as u32;
        } else {
            x = (p >> 31) as u32;
        }
    }
    ((24 - e) << 24) - frac
}

/// `floor(sqrt(s))` for `s < 2^46` (the root has at most 23 bits).
fn isqrt46(s: u64) -> u32 {
    let mut r = 0u32;
    for bit in (0..23).rev() {
        let c = r | (1 << bit);
        if u64::from(c) * u64::from(c) <= s {
            r = c;
        }
    }
    r
}

/// `2 ln 2` in Q2.30.
const TWO_LN2_Q30: u32 = 1_488_522_236;

/// The Box-Muller normal of words `w0`, `w1`: `sqrt(-2 ln u1) cos(2 pi u2)` with
/// `u1 = 1 - uniform24(w0)` in `(0, 1]` and `u2 = uniform24(w1)`. The radius is computed to
/// 2^-20 and the cosine to 2^-22 in integers; their product is one rounding.
pub fn normal(w0: u32, w1: u32) -> f32 {
    let m = (1 << 24) - (w0 >> 8);
    let a = u64::from(minus_log2_q24(m)) * u64::from(TWO_LN2_Q30);
    let r = isqrt46(a >> 14);
    let (c, negative) = cos_turn(w1 >> 8);
    let radius = r as f32 * (1.0 / 1_048_576.0);
    let cosine = c as f32 * (1.0 / 4_194_304.0);
    radius * if negative { -cosine } else { cosine }
}

/// `ln 2` in Q2.30.
const LN2_Q30: u32 = 744_261_118;
/// `log2(e)` in Q2.30.
const LOG2E_Q30: u32 = 1_549_082_005;
/// Below this exponent `exp_neg` returns 0.
pub const EXP_FLOOR: f32 = -80.0;

/// `exp(d)` for `d <= 0` (0 for `d < EXP_FLOOR` or NaN): `-d` in Q7.24 (exact to 2^-24),
/// times `log2 e` in fixed point gives `n + f`, integer and 24-bit fraction, and the result
/// is `2^-n 2^-f` with `2^-f` from its Taylor series in Q2.30. Relative error below 2e-7;
/// the result is a normal float.
pub fn exp_neg(d: f32) -> f32 {
    if d.is_nan() || d < EXP_FLOOR {
        return 0.0;
    }
    let y = mul_q30(((-d) * 16_777_216.0) as u32, LOG2E_Q30);
    let n = y >> 24;
    let a = ((u64::from(y & 0xFF_FFFF) * u64::from(LN2_Q30)) >> 24) as u32;
    let one = 1u32 << 30;
    let mut acc = one;
    for k in (1..12).rev() {
        acc = one - mul_q30(a, acc) / k;
    }
    let mant = acc >> 6;
    mant as f32 * (1.0 / 16_777_216.0) * f32::from_bits((127 - n) << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_matches_float64_box_muller() {
        let mut worst = 0.0f64;
        for i in 0..200_000u64 {
            let [w0, w1, _, _] = block(0x1234, i);
            let u1 = 1.0 - f64::from(w0 >> 8) / 16_777_216.0;
            let u2 = f64::from(w1 >> 8) / 16_777_216.0;
            let want = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            worst = worst.max((f64::from(normal(w0, w1)) - want).abs());
        }
        assert!(worst < 1e-5, "worst {worst}");
    }

    #[test]
    fn exp_neg_matches_float64() {
        let mut worst = 0.0f64;
        for i in 0..100_000 {
            let d = -(i as f32) * 8.0e-4;
            let want = f64::from(d).exp();
            let got = f64::from(exp_neg(d));
            worst = worst.max((got - want).abs() / want);
        }
        assert!(worst < 2e-7, "worst relative {worst}");
        assert_eq!(exp_neg(0.0), 1.0);
        assert_eq!(exp_neg(-81.0), 0.0);
        assert_eq!(exp_neg(f32::NAN), 0.0);
    }
}
