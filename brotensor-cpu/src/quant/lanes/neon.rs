//! The AArch64 tier's sixteen lanes: four NEON registers (`[0]` lanes 0-3, ..., `[3]`
//! lanes 12-15). NEON is part of the AArch64 baseline, so [`Lanes::enter`] needs no
//! feature switch.

use std::arch::aarch64::*;

use super::{sixteen, Lanes};

/// The f16 at `b[at..at + 2]` (exact).
#[inline(always)]
pub(super) fn f16(b: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// The two f16 at `b[at..at + 4]`.
#[inline(always)]
pub(super) fn f16_pair(b: &[u8], at: usize) -> [f32; 2] {
    [f16(b, at), f16(b, at + 2)]
}

/// NEON (Advanced SIMD): four registers hold the sixteen lanes.
#[derive(Clone, Copy)]
pub(in crate::quant) struct Neon;

/// `$body` on each of the four quarters of `$a` (bound to `$x`), or of `$a` and `$b` (bound
/// to `$x`, `$y`): an array map over a fixed four, which inlines into the kernel.
macro_rules! quarters {
    ($a:expr, |$x:ident| $body:expr) => {{
        let a = $a;
        [0, 1, 2, 3].map(|i| {
            let $x = a[i];
            $body
        })
    }};
    ($a:expr, $b:expr, |$x:ident, $y:ident| $body:expr) => {{
        let (a, b) = ($a, $b);
        [0, 1, 2, 3].map(|i| {
            let ($x, $y) = (a[i], b[i]);
            $body
        })
    }};
}

/// The four quarters of sixteen bytes, widened to 32 bits (zero-extended).
#[inline(always)]
unsafe fn widen_u8(v: uint8x16_t) -> [int32x4_t; 4] {
    let (lo, hi) = (vmovl_u8(vget_low_u8(v)), vmovl_high_u8(v));
    [
        vmovl_u16(vget_low_u16(lo)),
        vmovl_high_u16(lo),
        vmovl_u16(vget_low_u16(hi)),
        vmovl_high_u16(hi),
    ]
    .map(|q| vreinterpretq_s32_u32(q))
}

/// The four quarters of sixteen bytes, widened to 32 bits (sign-extended).
#[inline(always)]
unsafe fn widen_i8(v: int8x16_t) -> [int32x4_t; 4] {
    let (lo, hi) = (vmovl_s8(vget_low_s8(v)), vmovl_high_s8(v));
    [
        vmovl_s16(vget_low_s16(lo)),
        vmovl_high_s16(lo),
        vmovl_s16(vget_low_s16(hi)),
        vmovl_high_s16(hi),
    ]
}

/// `q | v` in the lanes whose `mask` is all ones.
#[inline(always)]
unsafe fn or_masked(q: int32x4_t, mask: uint32x4_t, v: i32) -> int32x4_t {
    vorrq_s32(q, vandq_s32(vreinterpretq_s32_u32(mask), vdupq_n_s32(v)))
}

impl Lanes for Neon {
    type F = [float32x4_t; 4];
    type I = [int32x4_t; 4];
    /// `(d, c)`: [`Lanes::linear`] converts and multiply-adds, as on AVX2.
    type Linear = (float32x4_t, float32x4_t);
    /// The sixteen entries' 64 bytes, for one four-register table lookup per quarter.
    type Table = uint8x16x4_t;
    /// Up to two rows with two accumulators, four with one: 16 of the 32 registers.
    const ROWS_PER_PASS: usize = 4;
    const TWO_ACC_ROWS: usize = 2;

    #[inline(always)]
    unsafe fn enter<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
    #[inline(always)]
    unsafe fn zero() -> [float32x4_t; 4] {
        [vdupq_n_f32(0.0); 4]
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> [float32x4_t; 4] {
        [vdupq_n_f32(v); 4]
    }
    #[inline(always)]
    unsafe fn load(x: *const f32) -> [float32x4_t; 4] {
        [0, 1, 2, 3].map(|i| vld1q_f32(x.add(4 * i)))
    }
    #[inline(always)]
    unsafe fn fma(
        a: [float32x4_t; 4],
        b: [float32x4_t; 4],
        c: [float32x4_t; 4],
    ) -> [float32x4_t; 4] {
        [0, 1, 2, 3].map(|i| vfmaq_f32(c[i], a[i], b[i]))
    }
    #[inline(always)]
    unsafe fn mul(a: [float32x4_t; 4], b: [float32x4_t; 4]) -> [float32x4_t; 4] {
        quarters!(a, b, |a, b| vmulq_f32(a, b))
    }
    #[inline(always)]
    unsafe fn add(a: [float32x4_t; 4], b: [float32x4_t; 4]) -> [float32x4_t; 4] {
        quarters!(a, b, |a, b| vaddq_f32(a, b))
    }
    #[inline(always)]
    unsafe fn sum(a: [float32x4_t; 4]) -> f32 {
        vaddvq_f32(vaddq_f32(vaddq_f32(a[0], a[1]), vaddq_f32(a[2], a[3])))
    }
    #[inline(always)]
    unsafe fn to_f32(q: [int32x4_t; 4]) -> [float32x4_t; 4] {
        quarters!(q, |q| vcvtq_f32_s32(q))
    }
    #[inline(always)]
    unsafe fn bytes(b: &[u8], at: usize) -> [int32x4_t; 4] {
        widen_u8(vld1q_u8(sixteen(b, at)))
    }
    #[inline(always)]
    unsafe fn signed_bytes(b: &[u8], at: usize) -> [int32x4_t; 4] {
        widen_i8(vld1q_s8(sixteen(b, at).cast()))
    }
    #[inline(always)]
    unsafe fn and(q: [int32x4_t; 4], m: i32) -> [int32x4_t; 4] {
        quarters!(q, |q| vandq_s32(q, vdupq_n_s32(m)))
    }
    #[inline(always)]
    unsafe fn or(a: [int32x4_t; 4], b: [int32x4_t; 4]) -> [int32x4_t; 4] {
        quarters!(a, b, |a, b| vorrq_s32(a, b))
    }
    #[inline(always)]
    unsafe fn shr(q: [int32x4_t; 4], n: u32) -> [int32x4_t; 4] {
        // A shift left by a negative count is a logical shift right on unsigned lanes.
        let by = vdupq_n_s32(-(n as i32));
        quarters!(q, |q| vreinterpretq_s32_u32(vshlq_u32(
            vreinterpretq_u32_s32(q),
            by
        )))
    }
    #[inline(always)]
    unsafe fn shl(q: [int32x4_t; 4], n: u32) -> [int32x4_t; 4] {
        let by = vdupq_n_s32(n as i32);
        quarters!(q, |q| vshlq_s32(q, by))
    }
    #[inline(always)]
    unsafe fn sub(q: [int32x4_t; 4], v: i32) -> [int32x4_t; 4] {
        quarters!(q, |q| vsubq_s32(q, vdupq_n_s32(v)))
    }
    #[inline(always)]
    unsafe fn or_where_bits(q: [int32x4_t; 4], bits: u16, v: i32) -> [int32x4_t; 4] {
        // Lane j of quarter i holds bit 4 i + j.
        const LANE_BITS: [[u32; 4]; 4] = [
            [1, 2, 4, 8],
            [16, 32, 64, 128],
            [256, 512, 1024, 2048],
            [4096, 8192, 16384, 32768],
        ];
        let b = vdupq_n_u32(u32::from(bits));
        [0, 1, 2, 3].map(|i| or_masked(q[i], vtstq_u32(b, vld1q_u32(LANE_BITS[i].as_ptr())), v))
    }
    #[inline(always)]
    unsafe fn or_where_bit(
        q: [int32x4_t; 4],
        qh: [int32x4_t; 4],
        bit: u32,
        v: i32,
    ) -> [int32x4_t; 4] {
        let l = vdupq_n_s32(1 << bit);
        quarters!(q, qh, |q, h| or_masked(q, vtstq_s32(h, l), v))
    }
    #[inline(always)]
    unsafe fn linear_table(d: [float32x4_t; 4], c: [float32x4_t; 4]) -> (float32x4_t, float32x4_t) {
        (d[0], c[0])
    }
    #[inline(always)]
    unsafe fn linear(q: [int32x4_t; 4], (d, c): (float32x4_t, float32x4_t)) -> [float32x4_t; 4] {
        quarters!(q, |q| vfmaq_f32(c, vcvtq_f32_s32(q), d))
    }
    #[inline(always)]
    unsafe fn table(values: &[i8; 16], d: [float32x4_t; 4]) -> uint8x16x4_t {
        let v = widen_i8(vld1q_s8(values.as_ptr()))
            .map(|q| vreinterpretq_u8_f32(vmulq_f32(vcvtq_f32_s32(q), d[0])));
        uint8x16x4_t(v[0], v[1], v[2], v[3])
    }
    #[inline(always)]
    unsafe fn lookup(q: [int32x4_t; 4], t: uint8x16x4_t) -> [float32x4_t; 4] {
        // Entry q is bytes 4q..4q + 4 of the table: byte k of lane `q` indexes 4q + k.
        let spread = vdupq_n_u32(0x0404_0404);
        let offsets = vdupq_n_u32(0x0302_0100);
        quarters!(q, |q| {
            let at = vmlaq_u32(offsets, vreinterpretq_u32_s32(q), spread);
            vreinterpretq_f32_u8(vqtbl4q_u8(t, vreinterpretq_u8_u32(at)))
        })
    }
}
