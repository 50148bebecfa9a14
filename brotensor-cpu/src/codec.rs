//! Neural-codec quantizers (FP32): vector quantization, which picks the nearest codeword of
//! a codebook, and finite scalar quantization, which snaps each coordinate to one of its
//! dimension's evenly spaced levels and packs the level indices mixed-radix.
//!
//! Vector quantization ranks codeword `k` for row `x` by `s_k = |c_k|^2 - 2 x.c_k`, which is
//! `|x - c_k|^2 - |x|^2`: the same order as the squared distance, from one product per pair
//! (the form a GEMM computes). Both sums run over the coordinates in order, so identical
//! codewords score identically and the lowest index wins a tie. The GPU kernel computes the
//! same sums in the same order.

use rayon::prelude::*;

use crate::simd::{wide, MulAdd};

/// Codewords scored together: the vector lanes of the scoring loop, two registers per row
/// (16 on AVX2 and narrower tiers, 32 on AVX-512), so that the [`ROW_BLOCK`] rows give eight
/// independent multiply-add chains.
const PANEL: usize = 16;
/// [`PANEL`] on the AVX-512 tier.
const WIDE_PANEL: usize = 32;
/// Rows scored together against one panel (their accumulators stay in registers).
const ROW_BLOCK: usize = 4;
/// Rows per rayon job.
const ROWS_PER_JOB: usize = 64;

/// `|c_k|^2` of every codeword of `codebook` (`(K, d)` row-major), summed over the
/// coordinates in order with the multiply-adds `m` says.
#[inline(always)]
fn codeword_norms(m: MulAdd, codebook: &[f32], d: usize) -> Vec<f32> {
    let mut norms = Vec::with_capacity(codebook.len() / d);
    for c in codebook.chunks_exact(d) {
        let mut s = 0.0f32;
        for &v in c {
            s = m.apply(v, v, s);
        }
        norms.push(s);
    }
    norms
}

/// The codebook as panels of `P` codewords, coordinate-major within a panel
/// (`panels[(p d + j) P + lane] = c[p P + lane][j]`), and the panels' norms
/// (`norms[p P + lane]`); the last panel is padded with zero codewords of norm
/// infinity, which never win.
fn panels<const P: usize>(codebook: &[f32], norms: &[f32], d: usize) -> (Vec<f32>, Vec<f32>) {
    let count = norms.len().div_ceil(P);
    let mut out = vec![0.0f32; count * d * P];
    for (ki, c) in codebook.chunks_exact(d).enumerate() {
        let (p, lane) = (ki / P, ki % P);
        for (j, &v) in c.iter().enumerate() {
            out[(p * d + j) * P + lane] = v;
        }
    }
    let mut padded = norms.to_vec();
    padded.resize(count * P, f32::INFINITY);
    (out, padded)
}

/// The index of the best codeword for each of the [`ROW_BLOCK`] rows whose coordinates
/// `xt` holds transposed (`xt[j ROW_BLOCK + r]`): the lowest `k` with the smallest score
/// below `f32::MAX` (NaN scores never win; a row with no such score takes 0). Each lane
/// keeps the best of the codewords it sees (`lane`, `lane + P`, ... in order, strictly
/// smaller to replace), then the lanes are merged by score and, on equal scores, by index.
#[inline(always)]
fn nearest_block<const P: usize>(
    m: MulAdd,
    xt: &[f32],
    panels: &[f32],
    norms: &[f32],
    d: usize,
) -> [usize; ROW_BLOCK] {
    let mut best = [[f32::MAX; P]; ROW_BLOCK];
    let mut best_k = [[0u32; P]; ROW_BLOCK];
    for (p, panel) in panels.chunks_exact(d * P).enumerate() {
        // One accumulator array per row, so each stays in vector registers.
        let (mut a0, mut a1, mut a2, mut a3) = ([0.0f32; P], [0.0f32; P], [0.0f32; P], [0.0f32; P]);
        for (c, x) in panel.chunks_exact(P).zip(xt.chunks_exact(ROW_BLOCK)) {
            let c: &[f32; P] = c.try_into().expect("P floats");
            for lane in 0..P {
                a0[lane] = m.apply(x[0], c[lane], a0[lane]);
                a1[lane] = m.apply(x[1], c[lane], a1[lane]);
                a2[lane] = m.apply(x[2], c[lane], a2[lane]);
                a3[lane] = m.apply(x[3], c[lane], a3[lane]);
            }
        }
        let n: &[f32; P] = norms[p * P..][..P].try_into().expect("P norms");
        for (r, acc) in [a0, a1, a2, a3].iter().enumerate() {
            for lane in 0..P {
                let s = n[lane] - 2.0 * acc[lane];
                if s < best[r][lane] {
                    best[r][lane] = s;
                    best_k[r][lane] = (p * P + lane) as u32;
                }
            }
        }
    }
    let mut found = [0usize; ROW_BLOCK];
    for r in 0..ROW_BLOCK {
        let (mut s, mut k) = (best[r][0], best_k[r][0]);
        for lane in 1..P {
            let (ls, lk) = (best[r][lane], best_k[r][lane]);
            if ls < s || (ls == s && lk < k) {
                (s, k) = (ls, lk);
            }
        }
        found[r] = k as usize;
    }
    found
}

/// Vector-quantization encode: for each row of `x` (`(N, d)`), the index of the nearest
/// codeword of `codebook` (`(K, d)`, `1 <= K <= u32::MAX`) by squared distance, lowest
/// index on ties, into `indices` (`N`), and that codeword into `quantized` (`(N, d)`).
/// `d >= 1`.
pub fn vq_encode(
    x: &[f32],
    codebook: &[f32],
    d: usize,
    indices: &mut [i32],
    quantized: &mut [f32],
) {
    if crate::simd::tier() == crate::simd::Tier::Avx512 {
        vq_encode_with::<WIDE_PANEL>(x, codebook, d, indices, quantized);
    } else {
        vq_encode_with::<PANEL>(x, codebook, d, indices, quantized);
    }
}

/// [`vq_encode`] with panels of `P` codewords.
fn vq_encode_with<const P: usize>(
    x: &[f32],
    codebook: &[f32],
    d: usize,
    indices: &mut [i32],
    quantized: &mut [f32],
) {
    let norms = wide(
        #[inline(always)]
        |m| codeword_norms(m, codebook, d),
    );
    let (panels, norms) = panels::<P>(codebook, &norms, d);
    x.par_chunks(ROWS_PER_JOB * d)
        .zip(indices.par_chunks_mut(ROWS_PER_JOB))
        .zip(quantized.par_chunks_mut(ROWS_PER_JOB * d))
        .for_each(|((xs, idx), qs)| {
            let mut xt = vec![0.0f32; ROW_BLOCK * d];
            let mut r0 = 0;
            while r0 < idx.len() {
                // A short last block scores zero rows in the spare places.
                let n = ROW_BLOCK.min(idx.len() - r0);
                for r in 0..ROW_BLOCK {
                    for j in 0..d {
                        xt[j * ROW_BLOCK + r] = if r < n { xs[(r0 + r) * d + j] } else { 0.0 };
                    }
                }
                let found = wide(
                    #[inline(always)]
                    |m| nearest_block::<P>(m, &xt, &panels, &norms, d),
                );
                for (r, &k) in found.iter().enumerate().take(n) {
                    idx[r0 + r] = k as i32;
                    qs[(r0 + r) * d..(r0 + r + 1) * d]
                        .copy_from_slice(&codebook[k * d..(k + 1) * d]);
                }
                r0 += n;
            }
        });
}

/// The level index of `x` on `levels` evenly spaced levels over `[-1, 1]`: `x` clamped to
/// `[-1, 1]` (NaN counts as -1), then `round((v + 1) / 2 (levels - 1))`, halves away from
/// zero. `levels >= 2`.
#[inline(always)]
pub fn fsq_level(x: f32, levels: i32) -> i32 {
    let v = if x > -1.0 { x.min(1.0) } else { -1.0 };
    ((v + 1.0) * 0.5 * (levels - 1) as f32).round() as i32
}

/// Finite scalar quantization: for each row of `x` (`(N, D)`, `D = levels.len()`), every
/// coordinate `d` snapped to level `i_d = fsq_level(x, L_d)` of its `L_d = levels[d]`
/// levels, written back as `i_d / h_d - 1` (`h_d = (L_d - 1) / 2`) into `quantized`, and the
/// indices packed as `i_0 + L_0 (i_1 + L_1 (i_2 + ...))` into `packed` (`N`). Every
/// `L_d >= 2` and the product of the `L_d` fits in `i32` (the caller checks).
pub fn fsq_quantize(x: &[f32], levels: &[i32], quantized: &mut [f32], packed: &mut [i32]) {
    let d = levels.len();
    x.par_chunks(ROWS_PER_JOB * d)
        .zip(quantized.par_chunks_mut(ROWS_PER_JOB * d))
        .zip(packed.par_chunks_mut(ROWS_PER_JOB))
        .for_each(|((xs, qs), ps)| {
            wide(
                #[inline(always)]
                |_| {
                    for ((xr, qr), p) in xs
                        .chunks_exact(d)
                        .zip(qs.chunks_exact_mut(d))
                        .zip(ps.iter_mut())
                    {
                        let (mut code, mut stride) = (0i32, 1i32);
                        for ((&v, q), &l) in xr.iter().zip(qr.iter_mut()).zip(levels) {
                            let i = fsq_level(v, l);
                            *q = i as f32 / ((l - 1) as f32 * 0.5) - 1.0;
                            code += i * stride;
                            stride = stride.wrapping_mul(l);
                        }
                        *p = code;
                    }
                },
            )
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nearest codeword by the squared distance in float64, lowest index on ties.
    fn nearest64(x: &[f32], codebook: &[f32], d: usize) -> usize {
        let mut best = (f64::INFINITY, 0);
        for (k, c) in codebook.chunks_exact(d).enumerate() {
            let dist: f64 = x
                .iter()
                .zip(c)
                .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
                .sum();
            if dist < best.0 {
                best = (dist, k);
            }
        }
        best.1
    }

    #[test]
    fn vq_picks_the_nearest_codeword_and_the_lowest_index_on_ties() {
        let (n, k, d) = (37usize, 35usize, 5usize);
        let mut s = 12345u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let mut codebook: Vec<f32> = (0..k * d).map(|_| next()).collect();
        // Codeword 30 repeats codeword 3: any row nearest to it must take 3.
        let dup: Vec<f32> = codebook[3 * d..4 * d].to_vec();
        codebook[30 * d..31 * d].copy_from_slice(&dup);
        let mut x: Vec<f32> = (0..n * d).map(|_| next()).collect();
        x[..d].copy_from_slice(&dup);
        let (mut idx, mut q) = (vec![-1i32; n], vec![0.0f32; n * d]);
        vq_encode(&x, &codebook, d, &mut idx, &mut q);
        assert_eq!(idx[0], 3);
        for r in 0..n {
            let want = nearest64(&x[r * d..(r + 1) * d], &codebook, d);
            assert_eq!(idx[r] as usize, want, "row {r}");
            assert_eq!(&q[r * d..(r + 1) * d], &codebook[want * d..(want + 1) * d]);
        }
    }

    #[test]
    fn fsq_levels_round_halves_up_and_clamp() {
        // 2 levels: 0.5 of the way rounds up; NaN and anything below -1 take level 0.
        assert_eq!(fsq_level(0.0, 2), 1);
        assert_eq!(fsq_level(-0.000_001, 2), 0);
        assert_eq!(fsq_level(f32::NAN, 5), 0);
        assert_eq!(fsq_level(-7.0, 5), 0);
        assert_eq!(fsq_level(7.0, 5), 4);
        let (mut q, mut p) = (vec![0.0f32; 3], vec![0i32; 1]);
        fsq_quantize(&[0.2, -1.0, 1.0], &[5, 3, 4], &mut q, &mut p);
        // 0.2 -> 0.6 * 4 = 2.4 -> 2 -> 2/2 - 1 = 0; -1 -> 0 -> -1; 1 -> 3 -> 1.
        assert_eq!(q, [0.0, -1.0, 1.0]);
        assert_eq!(p[0], 2 + 5 * 3 * 3); // i = (2, 0, 3), strides 1, 5, 15
    }
}
