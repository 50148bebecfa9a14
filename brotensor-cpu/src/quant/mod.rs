//! GGUF block-quantized weights on the host: the block table ([`Block`]), the decoder to
//! FP32 / F16 / BF16 ([`dequantize`], [`dequantize_to`]) and the products that read the
//! blocks directly ([`gemv()`], [`gemm()`]). Every block layout is written once, in `decode`; the
//! float operations follow ggml's reference order, so decoded values match it (and the Python
//! `gguf` package) bit for bit.

use std::any::TypeId;

use rayon::prelude::*;

use crate::cast::FloatElem;
use crate::simd::wide;

pub use matmul::{gemm, gemv, GEMV_MAX_ROWS};

/// Blocks decoded per parallel task: 8 KiB (legacy) to 64 KiB (K-quant) of output.
const BLOCKS_PER_TASK: usize = 64;

/// Evaluates `$body` with `$k` bound to the constant block kind `$kind` holds, one match arm
/// per kind, so that `#[inline(always)]` code in `$body` is compiled for each layout alone
/// (the per-block `match` folds away).
macro_rules! for_kind {
    ($kind:expr, |$k:ident| $body:expr) => {
        for_kind!(@arms $kind, $k, $body,
            Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K IQ4_NL IQ4_XS MXFP4)
    };
    (@arms $kind:expr, $k:ident, $body:expr, $($v:ident)*) => {
        match $kind {
            $(Block::$v => {
                let $k = Block::$v;
                $body
            })*
        }
    };
}

mod decode;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod lanes;
mod matmul;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod registers;

/// A GGUF block format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum Block {
    /// 32 elements: f16 scale, 4-bit quants offset by 8.
    Q4_0,
    /// 32 elements: f16 scale and min, 4-bit quants.
    Q4_1,
    /// 32 elements: f16 scale, 5-bit quants offset by 16.
    Q5_0,
    /// 32 elements: f16 scale and min, 5-bit quants.
    Q5_1,
    /// 32 elements: f16 scale, int8 quants.
    Q8_0,
    /// 32 elements: f16 scale and sum, int8 quants.
    Q8_1,
    /// 256 elements: 2-bit quants, 4-bit scales and mins.
    Q2_K,
    /// 256 elements: 3-bit quants, 6-bit scales.
    Q3_K,
    /// 256 elements: 4-bit quants, 6-bit scales and mins.
    Q4_K,
    /// 256 elements: 5-bit quants, 6-bit scales and mins.
    Q5_K,
    /// 256 elements: 6-bit quants, int8 scales.
    Q6_K,
    /// 256 elements: f32 scale, int8 quants, block sums.
    Q8_K,
    /// 32 elements: f16 scale, 4-bit indices into a non-linear codebook.
    IQ4_NL,
    /// 256 elements: f16 scale, 6-bit sub-block scales, IQ4_NL codebook indices.
    IQ4_XS,
    /// 32 elements: E8M0 shared exponent, 4-bit E2M1 values.
    MXFP4,
}

impl Block {
    /// `(elements, bytes)` per block: the one block layout table (the GGUF reader and the
    /// block dtypes take their sizes from it). Sizes follow ggml.
    pub const fn size(self) -> (usize, usize) {
        match self {
            Block::Q4_0 => (32, 18),
            Block::Q4_1 => (32, 20),
            Block::Q5_0 => (32, 22),
            Block::Q5_1 => (32, 24),
            Block::Q8_0 => (32, 34),
            Block::Q8_1 => (32, 36),
            Block::Q2_K => (256, 84),
            Block::Q3_K => (256, 110),
            Block::Q4_K => (256, 144),
            Block::Q5_K => (256, 176),
            Block::Q6_K => (256, 210),
            Block::Q8_K => (256, 292),
            Block::IQ4_NL => (32, 18),
            Block::IQ4_XS => (256, 136),
            Block::MXFP4 => (32, 17),
        }
    }
}

/// Decodes consecutive blocks of `kind` from `bytes` into `out` on this thread (wide vectors).
/// `bytes` holds whole blocks, `out` their elements.
fn decode_serial(kind: Block, bytes: &[u8], out: &mut [f32]) {
    let (elems, size) = kind.size();
    wide(
        #[inline(always)]
        |_| {
            for_kind!(kind, |k| {
                for (y, b) in out.chunks_exact_mut(elems).zip(bytes.chunks_exact(size)) {
                    decode::block(k, b, y);
                }
            })
        },
    )
}

/// Dequantizes whole blocks of `kind` from `bytes` into `out` (FP32). Panics unless `bytes`
/// is a whole number of blocks and `out` holds their elements.
pub fn dequantize(kind: Block, bytes: &[u8], out: &mut [f32]) {
    dequantize_to(kind, bytes, out);
}

/// [`dequantize`] into any float storage: the FP32 values, rounded to nearest even for F16 /
/// BF16 (one block run at a time through a small buffer, never a whole FP32 copy). Panics
/// unless `bytes` is a whole number of blocks and `out` holds their elements.
pub fn dequantize_to<O: FloatElem>(kind: Block, bytes: &[u8], out: &mut [O]) {
    let (elems, size) = kind.size();
    assert!(
        bytes.len().is_multiple_of(size) && out.len() == bytes.len() / size * elems,
        "dequantize: lengths"
    );
    let chunks = out
        .par_chunks_mut(elems * BLOCKS_PER_TASK)
        .zip(bytes.par_chunks(size * BLOCKS_PER_TASK));
    if TypeId::of::<O>() == TypeId::of::<f32>() {
        chunks.for_each(|(y, b)| decode_serial(kind, b, bytemuck::cast_slice_mut(y)));
    } else {
        chunks.for_each_init(Vec::new, |buf, (y, b)| {
            buf.resize(y.len(), 0.0);
            decode_serial(kind, b, buf);
            O::narrow(buf, y);
        });
    }
}

/// Random blocks and the float64 check shared by the product tests.
#[cfg(test)]
mod testing {
    use super::{dequantize, Block};

    /// Every block kind.
    pub(super) const KINDS: [Block; 15] = [
        Block::Q4_0,
        Block::Q4_1,
        Block::Q5_0,
        Block::Q5_1,
        Block::Q8_0,
        Block::Q8_1,
        Block::Q2_K,
        Block::Q3_K,
        Block::Q4_K,
        Block::Q5_K,
        Block::Q6_K,
        Block::Q8_K,
        Block::IQ4_NL,
        Block::IQ4_XS,
        Block::MXFP4,
    ];

    /// xorshift64 bytes.
    fn random_bytes(n: usize, mut s: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 24) as u8
            })
            .collect()
    }

    /// `n` rows of `k` elements of random valid blocks of `kind`: random quants, every
    /// scale finite (f16 scales 0.01, f16 minimums -0.01, MXFP4 exponents near 1).
    pub(super) fn blocks(kind: Block, n: usize, k: usize) -> Vec<u8> {
        let (elems, size) = kind.size();
        let mut w = random_bytes(n * k / elems * size, 1 + size as u64);
        let (d_at, min_at) = match kind {
            Block::Q4_1 | Block::Q5_1 | Block::Q4_K | Block::Q5_K => (0, Some(2)),
            Block::Q2_K => (80, Some(82)),
            Block::Q3_K => (108, None),
            Block::Q6_K => (208, None),
            _ => (0, None),
        };
        for b in w.chunks_exact_mut(size) {
            match kind {
                Block::MXFP4 => b[0] = 120 + b[0] % 16,
                Block::Q8_K => b[..4].copy_from_slice(&0.01f32.to_le_bytes()),
                _ => b[d_at..d_at + 2].copy_from_slice(&0x211Fu16.to_le_bytes()),
            }
            if let Some(at) = min_at {
                b[at..at + 2].copy_from_slice(&0xA11Fu16.to_le_bytes());
            }
        }
        w
    }

    /// `n` random activations in [-2, 2).
    pub(super) fn floats(n: usize, seed: u64) -> Vec<f32> {
        random_bytes(n, seed)
            .iter()
            .map(|&v| v as f32 / 64.0 - 2.0)
            .collect()
    }

    /// Asserts that `t (n, m)` is `w . x^T` for the blocks `w` (`n` rows) and `x (m, k)`
    /// (`t[r * m + i] = w[r] . x[i]`) within FP32 accumulation error: 1e-6 of the sum of the products' magnitudes.
    pub(super) fn check(kind: Block, w: &[u8], x: &[f32], m: usize, t: &[f32]) {
        let (elems, size) = kind.size();
        let mut wf = vec![0.0f32; w.len() / size * elems];
        dequantize(kind, w, &mut wf);
        let (k, n) = (x.len() / m, t.len() / m);
        for r in 0..n {
            for i in 0..m {
                let (w, x) = (&wf[r * k..][..k], &x[i * k..][..k]);
                let want: f64 = w.iter().zip(x).map(|(&a, &b)| a as f64 * b as f64).sum();
                let scale: f64 = w.iter().zip(x).map(|(&a, &b)| (a * b).abs() as f64).sum();
                let got = t[r * m + i] as f64;
                assert!(
                    (got - want).abs() <= 1e-6 * scale,
                    "{kind:?} m={m} ({r}, {i}): {got} vs {want}"
                );
            }
        }
    }
}
