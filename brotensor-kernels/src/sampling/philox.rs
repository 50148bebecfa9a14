//! Philox 4x32-10 and the integer-only math that turns its words into floats, as `#[cube]`
//! functions: the GPU twin of `brotensor_cpu::sampling::philox`, computing the same
//! integers. Floats come from them by exact conversions (integers below 2^24) and single
//! correctly rounded products, never from a builtin `log`/`cos`/`sqrt`/`exp` or a sum of
//! rounded products (which a GPU compiler may fuse into an FMA), so every device gives the
//! same bits as the CPU.

use cubecl::prelude::*;

/// First Philox round multiplier.
const M0: u32 = 0xD251_1F53;
/// Second Philox round multiplier.
const M1: u32 = 0xCD9E_8D57;
/// First key bump (Weyl increment).
const W0: u32 = 0x9E37_79B9;
/// Second key bump.
const W1: u32 = 0xBB67_AE85;
/// `2^-24`.
const INV_2P24: f32 = 1.0 / 16_777_216.0;
/// `2^-22`.
const INV_2P22: f32 = 1.0 / 4_194_304.0;
/// `2^-20`.
const INV_2P20: f32 = 1.0 / 1_048_576.0;
/// `2 ln 2` in Q2.30.
const TWO_LN2_Q30: u32 = 1_488_522_236;
/// `ln 2` in Q2.30.
const LN2_Q30: u32 = 744_261_118;
/// `log2(e)` in Q2.30.
const LOG2E_Q30: u32 = 1_549_082_005;
/// `2^24`.
const TWO_P24: f32 = 16_777_216.0;
/// Below this exponent [`exp_neg`] returns 0.
const EXP_FLOOR: f32 = -80.0;

/// The Philox 4x32-10 block of counter `(c0, c1, c2, c3)` under key `(k0, k1)`.
#[cube]
pub fn philox4x32_10(c0: u32, c1: u32, c2: u32, c3: u32, k0: u32, k1: u32) -> (u32, u32, u32, u32) {
    let mut a = c0;
    let mut b = c1;
    let mut c = c2;
    let mut d = c3;
    let mut ka = k0;
    let mut kb = k1;
    for round in 0..10u32 {
        let hi0 = u32::mul_hi(a, M0);
        let lo0 = a * M0;
        let hi1 = u32::mul_hi(c, M1);
        let lo1 = c * M1;
        a = hi1 ^ b ^ ka;
        b = lo1;
        c = hi0 ^ d ^ kb;
        d = lo0;
        if round < 9 {
            ka += W0;
            kb += W1;
        }
    }
    (a, b, c, d)
}

/// `(a_lo, a_hi) + (b_lo, b_hi)` as 64-bit words, wrapping.
#[cube]
pub fn add_u64(a_lo: u32, a_hi: u32, b_lo: u32, b_hi: u32) -> (u32, u32) {
    let lo = a_lo + b_lo;
    let mut hi = a_hi + b_hi;
    if lo < a_lo {
        hi += 1;
    }
    (lo, hi)
}

/// `(w >> 8) / 2^24`: the word's top 24 bits as a uniform in `[0, 1)` (exact).
#[cube]
pub fn uniform24(w: u32) -> f32 {
    f32::cast_from(w >> 8) * INV_2P24
}

/// `(a b) >> 30` for Q2.30 operands whose product stays below 2^62.
#[cube]
fn mul_q30(a: u32, b: u32) -> u32 {
    (u32::mul_hi(a, b) << 2) | ((a * b) >> 30)
}

/// `c - m`, or 0 when `m > c`.
#[cube]
fn sub_sat(c: u32, m: u32) -> u32 {
    let mut r = u32::new(0);
    if m <= c {
        r = c - m;
    }
    r
}

/// `cos(pi/2 s)` in Q2.30 for `s` in Q2.30, `0 <= s <= 1` (Taylor to `s^14`, Horner on
/// `w = s^2`; the coefficients are `(pi/2)^(2k) / (2k)!` in Q2.30).
#[cube]
fn cos_quarter_q30(s: u32) -> u32 {
    let w = mul_q30(s, s);
    let mut acc = u32::new(7);
    acc = sub_sat(506u32, mul_q30(w, acc));
    acc = sub_sat(27_060u32, mul_q30(w, acc));
    acc = sub_sat(987_048u32, mul_q30(w, acc));
    acc = sub_sat(22_401_992u32, mul_q30(w, acc));
    acc = sub_sat(272_375_560u32, mul_q30(w, acc));
    acc = sub_sat(1_324_675_879u32, mul_q30(w, acc));
    sub_sat(1_073_741_824u32, mul_q30(w, acc))
}

/// `24 - log2 m` in Q5.24 for `1 <= m <= 2^24` (the fraction bit by bit, by squaring).
#[cube]
fn minus_log2_q24(m: u32) -> u32 {
    let e = 31u32 - u32::leading_zeros(m);
    let mut x = m << (31u32 - e);
    let mut frac = u32::new(0);
    for _ in 0..24u32 {
        let hi = u32::mul_hi(x, x);
        let lo = x * x;
        frac <<= 1;
        if (hi >> 31) == 1 {
            frac |= 1;
            x = hi;
        } else {
            x = (hi << 1) | (lo >> 31);
        }
    }
    ((24u32 - e) << 24) - frac
}

/// `floor(sqrt(s))` for the 64-bit `s = (s_hi, s_lo) < 2^46`.
#[cube]
fn isqrt46(s_hi: u32, s_lo: u32) -> u32 {
    let mut r = u32::new(0);
    for i in 0..23u32 {
        let c = r | (1u32 << (22u32 - i));
        let c_hi = u32::mul_hi(c, c);
        let c_lo = c * c;
        if c_hi < s_hi || (c_hi == s_hi && c_lo <= s_lo) {
            r = c;
        }
    }
    r
}

/// The Box-Muller normal of words `w0`, `w1`: `sqrt(-2 ln u1) cos(2 pi u2)` with
/// `u1 = 1 - uniform24(w0)`, `u2 = uniform24(w1)` (radius to 2^-20, cosine to 2^-22).
#[cube]
pub fn normal(w0: u32, w1: u32) -> f32 {
    let l = minus_log2_q24((1u32 << 24) - (w0 >> 8));
    let a_hi = u32::mul_hi(l, TWO_LN2_Q30);
    let a_lo = l * TWO_LN2_Q30;
    let r = isqrt46(a_hi >> 14, (a_hi << 18) | (a_lo >> 14));
    let b = w1 >> 8;
    let q = b >> 22;
    let t = b & 0x3F_FFFFu32;
    let mut s = t;
    if (q & 1) == 1 {
        s = 0x40_0000u32 - t;
    }
    let c = cos_quarter_q30(s << 8) >> 8;
    let radius = f32::cast_from(r) * INV_2P20;
    let mut cosine = f32::cast_from(c) * INV_2P22;
    if q == 1 || q == 2 {
        cosine = -cosine;
    }
    radius * cosine
}

/// `exp(d)` for `d <= 0`, 0 below -80 or for NaN: `-d` in Q7.24, times `log2 e`
/// in fixed point, gives `n + f` (integer and 24-bit fraction); the result is `2^-n 2^-f`
/// with `2^-f` by its Taylor series in Q2.30.
#[cube]
pub fn exp_neg(d: f32) -> f32 {
    let mut out = f32::new(0.0);
    if d >= EXP_FLOOR {
        let y = mul_q30(u32::cast_from((-d) * TWO_P24), LOG2E_Q30);
        let n = y >> 24;
        let f = y & 0xFF_FFFFu32;
        let a = (u32::mul_hi(f, LN2_Q30) << 8) | ((f * LN2_Q30) >> 24);
        let one = 1u32 << 30;
        let mut acc = u32::new(1 << 30);
        for i in 0..11u32 {
            acc = one - mul_q30(a, acc) / (11u32 - i);
        }
        let mant = acc >> 6;
        let scale_bits = (127u32 - n) << 23;
        out = f32::cast_from(mant) * INV_2P24 * f32::reinterpret(scale_bits);
    }
    out
}
