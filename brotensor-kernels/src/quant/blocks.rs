//! The block layouts of the GGUF weight types as #[cube] decoders (one per type).
//!
//! A quantized weight lives on the device as its raw GGUF blocks, byte-packed back to back
//! in a `u32` word array (element `4i + j` of the bytes is byte `j` of word `i`, little
//! endian). Blocks of 18, 34 or 17 bytes do not start on word boundaries, so every field is
//! read out of the words at any byte offset ([`read_byte()`], [`read_u16()`], [`read_u32()`], and
//! [`read8()`] for a group's 8 quant bytes in two or three word loads) and f16
//! scales are decoded from their bits ([`f16_bits()`]).
//!
//! The one interface the dequantization, the GEMV and the GEMM kernels share is
//! [`decode8()`]: the 8 consecutive elements `e .. e + 8` (`e` a multiple of 8) of the block
//! starting at byte `at`, decoded to FP32 with the operations in ggml's order (bit-exact with
//! its reference decoder). Any 8 such elements share their block's scales, so a group costs
//! one scale decode. The block type is a comptime code ([`Q4_0`] ... [`MXFP4`]); its sizes
//! are [`BLOCK_SIZES`] and its field offsets the `*_AT` constants, the one definition the
//! host's block table is checked against (tests/tests/all/quant/gpu_dequant.rs).

use cubecl::prelude::*;

/// Block type code of Q4_0 (the comptime `kind` of [`decode8()`]).
pub const Q4_0: u32 = 0;
/// Block type code of Q4_1.
pub const Q4_1: u32 = 1;
/// Block type code of Q5_0.
pub const Q5_0: u32 = 2;
/// Block type code of Q5_1.
pub const Q5_1: u32 = 3;
/// Block type code of Q8_0.
pub const Q8_0: u32 = 4;
/// Block type code of Q2_K.
pub const Q2_K: u32 = 5;
/// Block type code of Q3_K.
pub const Q3_K: u32 = 6;
/// Block type code of Q4_K.
pub const Q4_K: u32 = 7;
/// Block type code of Q5_K.
pub const Q5_K: u32 = 8;
/// Block type code of Q6_K.
pub const Q6_K: u32 = 9;
/// Block type code of IQ4_NL.
pub const IQ4_NL: u32 = 10;
/// Block type code of IQ4_XS.
pub const IQ4_XS: u32 = 11;
/// Block type code of MXFP4.
pub const MXFP4: u32 = 12;

/// Every block type code, in code order.
pub const KINDS: [u32; 13] = [
    Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4,
];

/// `(elements, bytes)` of one block, indexed by type code.
pub const BLOCK_SIZES: [(usize, usize); 13] = [
    (32, 18),   // Q4_0: d, 16 bytes of nibbles
    (32, 20),   // Q4_1: d, m, 16 bytes of nibbles
    (32, 22),   // Q5_0: d, 32 high bits, 16 bytes of nibbles
    (32, 24),   // Q5_1: d, m, 32 high bits, 16 bytes of nibbles
    (32, 34),   // Q8_0: d, 32 int8
    (256, 84),  // Q2_K: 16 scale bytes, 64 bytes of 2-bit quants, d, dmin
    (256, 110), // Q3_K: 32 high-bit bytes, 64 bytes of 2-bit quants, 12 scale bytes, d
    (256, 144), // Q4_K: d, dmin, 12 scale bytes, 128 bytes of nibbles
    (256, 176), // Q5_K: d, dmin, 12 scale bytes, 32 high-bit bytes, 128 bytes of nibbles
    (256, 210), // Q6_K: 128 low-nibble bytes, 64 high-bit bytes, 16 int8 scales, d
    (32, 18),   // IQ4_NL: d, 16 bytes of codebook indices
    (256, 136), // IQ4_XS: d, 16-bit high scale bits, 4 low scale bytes, 128 index bytes
    (32, 17),   // MXFP4: E8M0 exponent, 16 bytes of E2M1 values
];

/// Elements of one block of type `kind`.
pub const fn block_elems(kind: u32) -> usize {
    BLOCK_SIZES[kind as usize].0
}

/// Bytes of one block of type `kind`.
pub const fn block_bytes(kind: u32) -> usize {
    BLOCK_SIZES[kind as usize].1
}

/// Q4_0 / IQ4_NL quants (after the f16 `d` at 0).
pub const Q4_0_QS_AT: usize = 2;
/// Q4_1 quants.
pub const Q4_1_QS_AT: usize = 4;
/// Q5_0 high bits (32, little endian) and quants.
pub const Q5_0_QH_AT: usize = 2;
/// Q5_0 quants.
pub const Q5_0_QS_AT: usize = 6;
/// Q5_1 `m`, high bits and quants.
pub const Q5_1_M_AT: usize = 2;
/// Q5_1 high bits.
pub const Q5_1_QH_AT: usize = 4;
/// Q5_1 quants.
pub const Q5_1_QS_AT: usize = 8;
/// Q8_0 quants (int8).
pub const Q8_0_QS_AT: usize = 2;
/// Q2_K quants (after 16 scale bytes at 0).
pub const Q2_K_QS_AT: usize = 16;
/// Q2_K f16 `d`.
pub const Q2_K_D_AT: usize = 80;
/// Q2_K f16 `dmin`.
pub const Q2_K_DMIN_AT: usize = 82;
/// Q3_K 2-bit quants (after 32 high-bit bytes at 0).
pub const Q3_K_QS_AT: usize = 32;
/// Q3_K packed 6-bit scales (12 bytes).
pub const Q3_K_SCALES_AT: usize = 96;
/// Q3_K f16 `d`.
pub const Q3_K_D_AT: usize = 108;
/// Q4_K / Q5_K f16 `dmin` (after `d` at 0).
pub const QK_DMIN_AT: usize = 2;
/// Q4_K / Q5_K packed 6-bit scales and mins (12 bytes).
pub const QK_SCALES_AT: usize = 4;
/// Q4_K nibbles.
pub const Q4_K_QS_AT: usize = 16;
/// Q5_K high bits (32 bytes).
pub const Q5_K_QH_AT: usize = 16;
/// Q5_K nibbles.
pub const Q5_K_QS_AT: usize = 48;
/// Q6_K high 2-bit pairs (after 128 low-nibble bytes at 0).
pub const Q6_K_QH_AT: usize = 128;
/// Q6_K int8 scales (16).
pub const Q6_K_SCALES_AT: usize = 192;
/// Q6_K f16 `d`.
pub const Q6_K_D_AT: usize = 208;
/// IQ4_XS 16-bit high scale bits (after `d` at 0).
pub const IQ4_XS_SCALES_H_AT: usize = 2;
/// IQ4_XS low scale nibbles (4 bytes).
pub const IQ4_XS_SCALES_L_AT: usize = 4;
/// IQ4_XS codebook indices.
pub const IQ4_XS_QS_AT: usize = 8;
/// MXFP4 E2M1 values (after the exponent byte at 0).
pub const MXFP4_QS_AT: usize = 1;

/// The IQ4_NL codebook (`-127, -104, ..., 113`) as int8, four to a little-endian word.
const IQ4_WORDS: [u32; 4] = [0xbfad_9881, 0xf6ea_ddcf, 0x2619_0d01, 0x7159_4535];

/// Byte `at` of the byte-packed buffer `w`.
#[cube]
pub fn read_byte(w: &Array<u32>, at: usize) -> u32 {
    (w[at / 4] >> u32::cast_from((at % 4) * 8)) & 0xFF
}

/// The little-endian 16-bit value at byte `at` (any alignment).
#[cube]
pub fn read_u16(w: &Array<u32>, at: usize) -> u32 {
    let lo = w[at / 4] >> u32::cast_from((at % 4) * 8);
    let mut v = lo & 0xFFFF;
    if at % 4 == 3 {
        v = (lo & 0xFF) | ((w[at / 4 + 1] & 0xFF) << 8);
    }
    v
}

/// The 8 bytes at byte `at` (any alignment) as two little-endian words in `q[0]`, `q[1]`:
/// two or three word loads.
#[cube]
pub fn read8(w: &Array<u32>, at: usize, q: &mut Array<u32>) {
    let a = at / 4;
    let sh = u32::cast_from((at % 4) * 8);
    let w0 = w[a];
    let w1 = w[a + 1];
    q[0] = w0;
    q[1] = w1;
    if sh != 0 {
        // Only an unaligned run reaches a third word (its last byte lies there).
        let w2 = w[a + 2];
        q[0] = (w0 >> sh) | (w1 << (32 - sh));
        q[1] = (w1 >> sh) | (w2 << (32 - sh));
    }
}

/// Byte `t` (0..8) of a [`read8()`] run.
#[cube]
fn byte_at(q: &Array<u32>, #[comptime] t: usize) -> u32 {
    (q[comptime!(t / 4)] >> comptime!((8 * (t % 4)) as u32)) & 0xFF
}

/// The little-endian 32-bit value at byte `at` (any alignment).
#[cube]
pub fn read_u32(w: &Array<u32>, at: usize) -> u32 {
    read_u16(w, at) | (read_u16(w, at + 2) << 16)
}

/// The f16 whose bits are the low 16 bits of `h`, widened to f32 (exact, as IEEE
/// conversion: subnormals, infinities and NaNs included).
#[cube]
pub fn f16_bits(h: u32) -> f32 {
    let sign = (h >> 15) << 31;
    let exp = (h >> 10) & 0x1F;
    let mant = h & 0x3FF;
    let mut v = f32::reinterpret(sign | ((exp + 112) << 23) | (mant << 13));
    if exp == 0 {
        // Subnormal or zero: mant 2^-24, exact in f32.
        let mag = f32::cast_from(mant) * 5.960_464_5e-8f32;
        v = f32::reinterpret(u32::reinterpret(mag) | sign);
    } else if exp == 31 {
        v = f32::reinterpret(sign | 0x7F80_0000u32 | (mant << 13));
    }
    v
}

/// The f16 at byte `at`, widened.
#[cube]
pub fn read_f16(w: &Array<u32>, at: usize) -> f32 {
    f16_bits(read_u16(w, at))
}

/// The IQ4_NL codebook value at index `q` (0..16).
#[cube]
fn iq4_value(q: u32) -> i32 {
    let g = q / 4;
    let mut word = u32::new(IQ4_WORDS[0] as i64);
    if g == 1 {
        word = u32::new(IQ4_WORDS[1] as i64);
    } else if g == 2 {
        word = u32::new(IQ4_WORDS[2] as i64);
    } else if g == 3 {
        word = u32::new(IQ4_WORDS[3] as i64);
    }
    let b = (word >> ((q % 4) * 8)) & 0xFF;
    let mut v = i32::cast_from(b);
    if b >= 128 {
        v -= 256;
    }
    v
}

/// The E2M1 value at index `q` (0..16), doubled: `0, 1, 2, 3, 4, 6, 8, 12` and their
/// negatives (the E8M0 scale is halved to match, as in ggml).
#[cube]
fn mxfp4_value(q: u32) -> i32 {
    let m = q & 7;
    let mut mag = m;
    if m >= 4 {
        mag = (2 + (m & 1)) << ((m >> 1) - 1);
    }
    let mut v = i32::cast_from(mag);
    if q >= 8 {
        v = -v;
    }
    v
}

/// The 6-bit scale (`min` false) or min (`min` true) `j` (0..8) of a K-quant's 12 packed
/// bytes at `at`.
#[cube]
fn scale_min_k4(w: &Array<u32>, at: usize, j: usize, #[comptime] min: bool) -> u32 {
    let mut v = read_byte(w, at + j % 4) & 63;
    if comptime!(min) {
        v = read_byte(w, at + j % 4 + 4) & 63;
    }
    if j >= 4 {
        let hi = read_byte(w, at + j + 4);
        if comptime!(min) {
            v = (hi >> 4) | ((read_byte(w, at + j) >> 6) << 4);
        } else {
            v = (hi & 0xF) | ((read_byte(w, at + j - 4) >> 6) << 4);
        }
    }
    v
}

/// The signed 6-bit scale `s` (0..16), minus 32, of a Q3_K block at `at`.
#[cube]
fn q3k_scale(w: &Array<u32>, at: usize, s: usize) -> i32 {
    let g = s / 4;
    let b = s % 4;
    let packed = at + Q3_K_SCALES_AT;
    let low = (read_byte(w, packed + b + 4 * (g % 2)) >> u32::cast_from(4 * (g / 2))) & 0xF;
    let high = (read_byte(w, packed + 8 + b) >> u32::cast_from(2 * g)) & 3;
    i32::cast_from(low | (high << 4)) - 32
}

/// Elements `e .. e + 8` (`e` a multiple of 8, below the block's element count) of the block
/// of type `kind` starting at byte `at` of `w`, decoded to FP32 into `out[0..8]`, bit-exact
/// with ggml's reference decoder (same operations in the same order).
// A variable assigned in both arms of a comptime branch is declared with a placeholder first.
#[allow(unused_assignments)]
#[cube]
pub fn decode8(w: &Array<u32>, at: usize, e: usize, out: &mut Array<f32>, #[comptime] kind: u32) {
    let mut q = Array::<u32>::new(2usize);
    if comptime!(kind == Q4_0 || kind == IQ4_NL || kind == Q4_1 || kind == MXFP4) {
        // Elements 0..16 are the low nibbles of the 16 quant bytes, 16..32 the high ones.
        let nshift = u32::cast_from(4 * (e / 16));
        let mut qs_at = at + Q4_0_QS_AT;
        if comptime!(kind == Q4_1) {
            qs_at = at + Q4_1_QS_AT;
        }
        if comptime!(kind == MXFP4) {
            qs_at = at + MXFP4_QS_AT;
        }
        read8(w, qs_at + e % 16, &mut q);
        if comptime!(kind == MXFP4) {
            // 2^(x - 128), half the E8M0 scale, to match the doubled value table. For x < 2
            // that scale is subnormal, which devices that flush subnormal inputs (lavapipe
            // through SPIR-V) would read as zero: there the value is scaled by 2^(x - 2)
            // first (exact) and then by 2^-126, the smallest normal, so every normal result
            // comes out exactly on every device.
            let x = read_byte(w, at);
            let mut pre = 1.0f32;
            // The exponent field of `d`: 1 (2^-126) below x = 2. A run-time value, as CUDA
            // C++ cannot reinterpret a constant.
            let mut field = 1u32;
            if x >= 2 {
                field = x - 1;
            } else {
                pre = f32::reinterpret((125 + x) << 23);
            }
            let d = f32::reinterpret(field << 23);
            #[unroll]
            for t in 0..8usize {
                let v = (byte_at(&q, t) >> nshift) & 0xF;
                out[t] = (f32::cast_from(mxfp4_value(v)) * pre) * d;
            }
        } else {
            let mut d = f32::new(0.0f32);
            let mut m = f32::new(0.0f32);
            if comptime!(kind == Q4_1) {
                // `d` (bytes 0-1) and `m` (bytes 2-3) are the block's first word: one load
                // (Q4_1 blocks are 20 bytes, so every block starts on a word).
                let dm = w[at / 4];
                d = f16_bits(dm & 0xFFFF);
                m = f16_bits(dm >> 16);
            } else {
                d = read_f16(w, at);
            }
            #[unroll]
            for t in 0..8usize {
                let v = (byte_at(&q, t) >> nshift) & 0xF;
                if comptime!(kind == Q4_0) {
                    out[t] = f32::cast_from(i32::cast_from(v) - 8) * d;
                } else if comptime!(kind == Q4_1) {
                    out[t] = f32::cast_from(v) * d + m;
                } else {
                    out[t] = d * f32::cast_from(iq4_value(v));
                }
            }
        }
    } else if comptime!(kind == Q5_0 || kind == Q5_1) {
        let d = read_f16(w, at);
        let mut m = f32::new(0.0f32);
        let mut qh_at = at + Q5_0_QH_AT;
        let mut qs_at = at + Q5_0_QS_AT;
        if comptime!(kind == Q5_1) {
            m = read_f16(w, at + Q5_1_M_AT);
            qh_at = at + Q5_1_QH_AT;
            qs_at = at + Q5_1_QS_AT;
        }
        // Bit i of the 32 high bits is the fifth bit of element i.
        let qh = read_u32(w, qh_at) >> u32::cast_from(e);
        let nshift = u32::cast_from(4 * (e / 16));
        read8(w, qs_at + e % 16, &mut q);
        #[unroll]
        for t in 0..8usize {
            let lo = (byte_at(&q, t) >> nshift) & 0xF;
            let x = lo | (((qh >> comptime!(t as u32)) & 1) << 4);
            if comptime!(kind == Q5_1) {
                out[t] = f32::cast_from(x) * d + m;
            } else {
                out[t] = f32::cast_from(i32::cast_from(x) - 16) * d;
            }
        }
    } else if comptime!(kind == Q8_0) {
        let d = read_f16(w, at);
        read8(w, at + Q8_0_QS_AT + e, &mut q);
        #[unroll]
        for t in 0..8usize {
            let b = byte_at(&q, t);
            let mut v = i32::cast_from(b);
            if b >= 128 {
                v -= 256;
            }
            out[t] = f32::cast_from(v) * d;
        }
    } else if comptime!(kind == Q2_K || kind == Q3_K) {
        // Element i = 128 n + 32 j + r: 2-bit field j of quant byte 32 n + r; scale i / 16.
        let n = e / 128;
        let j = (e % 128) / 32;
        let r0 = e % 32;
        let shift = u32::cast_from(2 * j);
        if comptime!(kind == Q2_K) {
            // Scale byte i / 16 holds the scale (low nibble) and min (high nibble).
            let sc = read_byte(w, at + e / 16);
            let dl = read_f16(w, at + Q2_K_D_AT) * f32::cast_from(sc & 0xF);
            let ml = read_f16(w, at + Q2_K_DMIN_AT) * f32::cast_from(sc >> 4);
            read8(w, at + Q2_K_QS_AT + 32 * n + r0, &mut q);
            #[unroll]
            for t in 0..8usize {
                let low = (byte_at(&q, t) >> shift) & 3;
                out[t] = dl * f32::cast_from(low) - ml;
            }
        } else {
            // The high bit of element i is bit 4 n + j of high-bit byte r.
            let dl = read_f16(w, at + Q3_K_D_AT) * f32::cast_from(q3k_scale(w, at, e / 16));
            let hbit = u32::cast_from(4 * n + j);
            let mut hm = Array::<u32>::new(2usize);
            read8(w, at + r0, &mut hm);
            read8(w, at + Q3_K_QS_AT + 32 * n + r0, &mut q);
            #[unroll]
            for t in 0..8usize {
                let mut v = i32::cast_from((byte_at(&q, t) >> shift) & 3);
                if (byte_at(&hm, t) >> hbit) & 1 == 0 {
                    v -= 4;
                }
                out[t] = dl * f32::cast_from(v);
            }
        }
    } else if comptime!(kind == Q4_K || kind == Q5_K) {
        // Element i: sub-block s = i / 32 (scale and min s), nibble of byte 32 (i / 64) +
        // i % 32 (high nibble for odd s); Q5_K adds bit s of high byte i % 32 as 16.
        let s = e / 32;
        let dl = read_f16(w, at) * f32::cast_from(scale_min_k4(w, at + QK_SCALES_AT, s, false));
        let ml = read_f16(w, at + QK_DMIN_AT)
            * f32::cast_from(scale_min_k4(w, at + QK_SCALES_AT, s, true));
        let mut qs_at = at + Q4_K_QS_AT;
        if comptime!(kind == Q5_K) {
            qs_at = at + Q5_K_QS_AT;
        }
        let nshift = u32::cast_from(4 * (s % 2));
        read8(w, qs_at + 32 * (e / 64) + e % 32, &mut q);
        let mut qh = Array::<u32>::new(2usize);
        if comptime!(kind == Q5_K) {
            read8(w, at + Q5_K_QH_AT + e % 32, &mut qh);
        }
        #[unroll]
        for t in 0..8usize {
            let mut v = (byte_at(&q, t) >> nshift) & 0xF;
            if comptime!(kind == Q5_K) {
                v += ((byte_at(&qh, t) >> u32::cast_from(s)) & 1) << 4;
            }
            out[t] = dl * f32::cast_from(v) - ml;
        }
    } else if comptime!(kind == Q6_K) {
        // Element i = 128 n + 32 t4 + l: low nibble (t4 < 2) or high nibble of byte
        // 64 n + 32 (t4 % 2) + l, 2-bit field t4 of high byte 32 n + l, scale 8 n + l / 16
        // + 2 t4.
        let n = e / 128;
        let t4 = (e % 128) / 32;
        let l0 = e % 32;
        let sb = read_byte(w, at + Q6_K_SCALES_AT + 8 * n + l0 / 16 + 2 * t4);
        let mut sc = i32::cast_from(sb);
        if sb >= 128 {
            sc -= 256;
        }
        let ds = read_f16(w, at + Q6_K_D_AT) * f32::cast_from(sc);
        let nshift = u32::cast_from(4 * (t4 / 2));
        let hshift = u32::cast_from(2 * t4);
        let mut qh = Array::<u32>::new(2usize);
        read8(w, at + 64 * n + 32 * (t4 % 2) + l0, &mut q);
        read8(w, at + Q6_K_QH_AT + 32 * n + l0, &mut qh);
        #[unroll]
        for t in 0..8usize {
            let lo = (byte_at(&q, t) >> nshift) & 0xF;
            let hi = (byte_at(&qh, t) >> hshift) & 3;
            let v = i32::cast_from(lo | (hi << 4)) - 32;
            out[t] = ds * f32::cast_from(v);
        }
    } else {
        // IQ4_XS: sub-block ib = i / 32 of 16 index bytes, low nibbles first.
        let ib = e / 32;
        let low =
            (read_byte(w, at + IQ4_XS_SCALES_L_AT + ib / 2) >> u32::cast_from(4 * (ib % 2))) & 0xF;
        let high = (read_u16(w, at + IQ4_XS_SCALES_H_AT) >> u32::cast_from(2 * ib)) & 3;
        let dl = read_f16(w, at) * f32::cast_from(i32::cast_from(low | (high << 4)) - 32);
        let r = e % 32;
        let nshift = u32::cast_from(4 * (r / 16));
        read8(w, at + IQ4_XS_QS_AT + 16 * ib + r % 16, &mut q);
        #[unroll]
        for t in 0..8usize {
            let v = (byte_at(&q, t) >> nshift) & 0xF;
            out[t] = dl * f32::cast_from(iq4_value(v));
        }
    }
}
