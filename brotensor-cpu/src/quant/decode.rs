//! The one definition of every GGUF block layout: where each block keeps its scales and
//! quants, and how they decode to FP32 in ggml's reference order (so the results match ggml
//! and the Python `gguf` package bit for bit). The host decoder and the quantized products
//! both decode through [`block`].

use half::f16;

use super::Block;

/// The IQ4_NL / IQ4_XS codebook.
pub(super) const IQ4_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];
/// E2M1 values, doubled (the E8M0 scale is halved to match).
pub(super) const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// The f16 at `b[at..at + 2]`.
#[inline(always)]
pub(super) fn h(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// 2^(e - 128) for the E8M0 exponent `e`: half the MXFP4 scale, matching the doubled value
/// table.
#[inline(always)]
pub(super) fn e8m0_half(e: u8) -> f32 {
    if e < 2 {
        f32::from_bits(0x0020_0000 << e)
    } else {
        f32::from_bits(((e as u32) - 1) << 23)
    }
}

/// The 6-bit scale and min `j` of a K-quant's 12 packed scale bytes.
#[inline(always)]
pub(super) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The sixteen 6-bit scales of a Q3_K block (offset by 32) from its 12 packed bytes.
#[inline(always)]
pub(super) fn q3k_scales(packed: &[u8]) -> [u8; 16] {
    let aux = |i: usize| {
        u32::from_le_bytes([
            packed[4 * i],
            packed[4 * i + 1],
            packed[4 * i + 2],
            packed[4 * i + 3],
        ])
    };
    let (k1, k2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
    let (a0, a1, tmp) = (aux(0), aux(1), aux(2));
    let words = [
        (a0 & k2) | ((tmp & k1) << 4),
        (a1 & k2) | (((tmp >> 2) & k1) << 4),
        ((a0 >> 4) & k2) | (((tmp >> 4) & k1) << 4),
        ((a1 >> 4) & k2) | (((tmp >> 6) & k1) << 4),
    ];
    let mut scales = [0u8; 16];
    for (s, w) in scales.chunks_exact_mut(4).zip(words) {
        s.copy_from_slice(&w.to_le_bytes());
    }
    scales
}

/// Decodes the block `b` (`kind.size().1` bytes) of `kind` into `y` (`kind.size().0`
/// elements). Inlined so that a caller with a constant `kind` gets the one layout's code.
#[inline(always)]
pub(crate) fn block(kind: Block, b: &[u8], y: &mut [f32]) {
    match kind {
        Block::Q4_0 => {
            let d = h(b, 0);
            for j in 0..16 {
                y[j] = ((b[2 + j] & 0xF) as i32 - 8) as f32 * d;
                y[j + 16] = ((b[2 + j] >> 4) as i32 - 8) as f32 * d;
            }
        }
        Block::Q4_1 => {
            let (d, m) = (h(b, 0), h(b, 2));
            for j in 0..16 {
                y[j] = (b[4 + j] & 0xF) as f32 * d + m;
                y[j + 16] = (b[4 + j] >> 4) as f32 * d + m;
            }
        }
        Block::Q5_0 | Block::Q5_1 => {
            let one = kind == Block::Q5_1;
            let d = h(b, 0);
            let m = if one { h(b, 2) } else { 0.0 };
            let at = if one { 4 } else { 2 };
            let qh = u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
            let qs = &b[at + 4..];
            for j in 0..16 {
                let h0 = ((qh >> j) << 4) & 0x10;
                let h1 = (qh >> (j + 12)) & 0x10;
                let x0 = ((qs[j] & 0xF) as u32 | h0) as i32;
                let x1 = ((qs[j] >> 4) as u32 | h1) as i32;
                if one {
                    y[j] = x0 as f32 * d + m;
                    y[j + 16] = x1 as f32 * d + m;
                } else {
                    y[j] = (x0 - 16) as f32 * d;
                    y[j + 16] = (x1 - 16) as f32 * d;
                }
            }
        }
        Block::Q8_0 | Block::Q8_1 => {
            let d = h(b, 0);
            let qs = &b[if kind == Block::Q8_0 { 2 } else { 4 }..];
            for j in 0..32 {
                y[j] = qs[j] as i8 as f32 * d;
            }
        }
        Block::Q2_K => {
            let (d, min) = (h(b, 80), h(b, 82));
            let (scales, qs) = (&b[0..16], &b[16..80]);
            let mut is = 0;
            for n in 0..2 {
                let q = &qs[32 * n..];
                for j in 0..4 {
                    let shift = 2 * j;
                    for half in 0..2 {
                        let sc = scales[is];
                        is += 1;
                        let (dl, ml) = (d * (sc & 0xF) as f32, min * (sc >> 4) as f32);
                        for l in 0..16 {
                            let v = (q[l + 16 * half] >> shift) & 3;
                            y[128 * n + 32 * j + 16 * half + l] = dl * v as f32 - ml;
                        }
                    }
                }
            }
        }
        Block::Q3_K => {
            let d_all = h(b, 108);
            let (hm, qs, packed) = (&b[0..32], &b[32..96], &b[96..108]);
            let scales = q3k_scales(packed);
            let mut is = 0;
            let mut m = 1u8;
            for n in 0..2 {
                let q = &qs[32 * n..];
                for j in 0..4 {
                    let shift = 2 * j;
                    for half in 0..2 {
                        let dl = d_all * (scales[is] as i32 - 32) as f32;
                        is += 1;
                        for l in 0..16 {
                            let i = l + 16 * half;
                            let low = ((q[i] >> shift) & 3) as i32;
                            let v = low - if hm[i] & m != 0 { 0 } else { 4 };
                            y[128 * n + 32 * j + 16 * half + l] = dl * v as f32;
                        }
                    }
                    m <<= 1;
                }
            }
        }
        Block::Q4_K | Block::Q5_K => {
            let (d, min) = (h(b, 0), h(b, 2));
            let scales = &b[4..16];
            let five = kind == Block::Q5_K;
            let (qh, ql) = if five {
                (&b[16..48], &b[48..176])
            } else {
                (&b[0..0], &b[16..144])
            };
            for j in 0..4 {
                let (sc1, m1) = scale_min_k4(2 * j, scales);
                let (sc2, m2) = scale_min_k4(2 * j + 1, scales);
                let (d1, mn1) = (d * sc1 as f32, min * m1 as f32);
                let (d2, mn2) = (d * sc2 as f32, min * m2 as f32);
                let q = &ql[32 * j..];
                for l in 0..32 {
                    let (mut lo, mut hi) = ((q[l] & 0xF) as u32, (q[l] >> 4) as u32);
                    if five {
                        lo += if qh[l] & (1 << (2 * j)) != 0 { 16 } else { 0 };
                        hi += if qh[l] & (2 << (2 * j)) != 0 { 16 } else { 0 };
                    }
                    y[64 * j + l] = d1 * lo as f32 - mn1;
                    y[64 * j + 32 + l] = d2 * hi as f32 - mn2;
                }
            }
        }
        Block::Q6_K => {
            let d = h(b, 208);
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            for n in 0..2 {
                let (ql, qh, sc) = (&ql[64 * n..], &qh[32 * n..], &sc[8 * n..]);
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                    let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                    let s = |i: usize| sc[i] as i8 as f32;
                    y[128 * n + l] = d * s(is) * q1 as f32;
                    y[128 * n + l + 32] = d * s(is + 2) * q2 as f32;
                    y[128 * n + l + 64] = d * s(is + 4) * q3 as f32;
                    y[128 * n + l + 96] = d * s(is + 6) * q4 as f32;
                }
            }
        }
        Block::Q8_K => {
            let d = f32::from_le_bytes(b[0..4].try_into().expect("4 bytes"));
            for j in 0..256 {
                y[j] = d * b[4 + j] as i8 as f32;
            }
        }
        Block::IQ4_NL => {
            let d = h(b, 0);
            for j in 0..16 {
                y[j] = d * IQ4_VALUES[(b[2 + j] & 0xF) as usize] as f32;
                y[j + 16] = d * IQ4_VALUES[(b[2 + j] >> 4) as usize] as f32;
            }
        }
        Block::IQ4_XS => {
            let d = h(b, 0);
            let scales_h = u16::from_le_bytes([b[2], b[3]]);
            let (scales_l, qs) = (&b[4..8], &b[8..136]);
            for ib in 0..8 {
                let low = (scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
                let high = ((scales_h >> (2 * ib)) & 3) as u8;
                let dl = d * ((low | (high << 4)) as i32 - 32) as f32;
                let q = &qs[16 * ib..];
                for j in 0..16 {
                    y[32 * ib + j] = dl * IQ4_VALUES[(q[j] & 0xF) as usize] as f32;
                    y[32 * ib + j + 16] = dl * IQ4_VALUES[(q[j] >> 4) as usize] as f32;
                }
            }
        }
        Block::MXFP4 => {
            let d = e8m0_half(b[0]);
            for j in 0..16 {
                y[j] = d * MXFP4_VALUES[(b[1 + j] & 0xF) as usize] as f32;
                y[j + 16] = d * MXFP4_VALUES[(b[1 + j] >> 4) as usize] as f32;
            }
        }
    }
}
