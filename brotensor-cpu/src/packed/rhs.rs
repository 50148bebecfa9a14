//! A right operand packed once and kept: a linear layer's weight `W (n x k)`, read as
//! `B = W^T (k x n)` by every product `C = A . W^T` with more rows than [`super::dots`] takes.
//!
//! [`PackedRhs`] stores `B` in column panels of the register tile's width `NR`: panel `j` holds
//! columns `j NR .. j NR + NR` as `k` rows of `NR` values side by side (columns past `n` are
//! zero), so a tile streams its panel contiguously. [`matmul_packed`] reads `A` (the
//! activation, `m x k`) in place, `MR` rows at a time, packing only the rows past its last
//! whole panel, and runs the same register tiles as [`super::product_block`] over blocks of
//! columns and rows in parallel.

use std::ops::Range;

use rayon::prelude::*;

#[cfg(target_arch = "aarch64")]
use super::vectors::Neon;
#[cfg(target_arch = "x86_64")]
use super::vectors::{Avx2, Avx512};
use super::vectors::{Portable, Vector};
use super::{
    block_cols, column_blocks, row_chunk, split_rows, tile, Kernel, PackedLhs, Panel, RowMajor,
    Rows, Start, K_BLOCK,
};

/// `B = W^T` for a row-major `n x k` matrix `W`, packed in column panels of the tier's
/// register-tile width.
pub struct PackedRhs {
    data: Vec<f32>,
    k: usize,
    n: usize,
    kernel: Kernel,
}

impl PackedRhs {
    /// Packs `B = W^T (k x n)` from `w`, a row-major `n x k` matrix (one row per output
    /// column), for the tier this CPU runs.
    ///
    /// # Panics
    /// If `w` does not hold exactly `n * k` elements (or that product overflows).
    pub fn transposed(w: &[f32], n: usize, k: usize) -> Self {
        Self::with_kernel(w, n, k, Kernel::detect())
    }

    fn with_kernel(w: &[f32], n: usize, k: usize, kernel: Kernel) -> Self {
        assert!(
            n.checked_mul(k) == Some(w.len()),
            "PackedRhs: {} elements for {n} x {k}",
            w.len()
        );
        let nr = kernel.nr();
        let panels = n.div_ceil(nr);
        let len = (panels * nr)
            .checked_mul(k)
            .expect("PackedRhs: the packed size overflows");
        let mut data = vec![0f32; len];
        for (j, panel) in data
            .chunks_exact_mut(nr * k.max(1))
            .enumerate()
            .take(panels)
        {
            let c0 = j * nr;
            for c in 0..nr.min(n - c0) {
                let row = &w[(c0 + c) * k..][..k];
                for (p, &v) in row.iter().enumerate() {
                    panel[p * nr + c] = v;
                }
            }
        }
        PackedRhs { data, k, n, kernel }
    }

    /// Whether this packing serves a product with `n` columns and inner dimension `k` on the
    /// tier the CPU runs now.
    pub fn fits(&self, n: usize, k: usize) -> bool {
        self.n == n && self.k == k && self.kernel == Kernel::detect()
    }
}

/// `C (m x n) = A (m x k) . B`, or `C += A . B` when `accumulate`: `a` and `c` row-major,
/// `B` packed. With `k == 0`, `C` is zeroed (or left as is when accumulating). Blocks of
/// columns and rows run in parallel.
///
/// # Panics
/// If `a` does not hold `m * k` elements or `c` `m * n` (or those products overflow).
pub fn matmul_packed(a: &[f32], m: usize, rhs: &PackedRhs, c: &mut [f32], accumulate: bool) {
    let (k, n) = (rhs.k, rhs.n);
    assert!(
        m.checked_mul(k) == Some(a.len()),
        "matmul_packed: {} elements of A for {m} x {k}",
        a.len()
    );
    assert!(
        m.checked_mul(n) == Some(c.len()),
        "matmul_packed: {} elements of C for {m} x {n}",
        c.len()
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c.fill(0.0);
        }
        return;
    }
    // `A` is read in place, `MR` rows at a time; only the rows past the last whole panel
    // are packed (with zeros below them).
    let mr = rhs.kernel.mr();
    let whole = m / mr * mr;
    let tail = PackedLhs::with_kernel(&a[whole * k..], m - whole, k, rhs.kernel);
    let lhs = Lhs { a, k, whole, tail };
    // A multiple of 64 columns, so every block starts on a panel boundary.
    let cols = block_cols(k);
    let blocks = column_blocks(c, n, cols);
    let chunk = row_chunk(m, blocks.len(), mr);
    let mut items = Vec::new();
    for (b, outs) in blocks.into_iter().enumerate() {
        split_rows(outs, chunk, |rows, outs| items.push((b * cols, rows, outs)));
    }
    items.into_par_iter().for_each(|(c0, rows, mut outs)| {
        // SAFETY (each arm): `rhs.kernel` was chosen by `Kernel::detect` on this CPU, whose
        // tier runs its instructions, and `lhs` and `rhs` were both packed for it.
        match rhs.kernel {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe {
                Avx512::enter(
                    #[inline(always)]
                    || columns::<Avx512, 12, 2>(&lhs, rhs, c0, rows, &mut outs, accumulate),
                )
            },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe {
                Avx2::enter(
                    #[inline(always)]
                    || columns::<Avx2, 6, 2>(&lhs, rhs, c0, rows, &mut outs, accumulate),
                )
            },
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon => unsafe {
                Neon::enter(
                    #[inline(always)]
                    || columns::<Neon, 8, 2>(&lhs, rhs, c0, rows, &mut outs, accumulate),
                )
            },
            Kernel::Portable => unsafe {
                Portable::enter(
                    #[inline(always)]
                    || columns::<Portable, 4, 2>(&lhs, rhs, c0, rows, &mut outs, accumulate),
                )
            },
        }
    });
}

/// `A` of [`matmul_packed`]: its rows `0..whole` (whole panels) read in place, the rest
/// packed.
struct Lhs<'a> {
    a: &'a [f32],
    k: usize,
    whole: usize,
    tail: PackedLhs,
}

/// Rows `rows` of `C`'s columns `c0 .. c0 + width` (`width` = the length of `out`'s slices,
/// `c0` a multiple of `NR`) on tier `S`.
///
/// # Safety
/// The CPU must run `S`'s instructions; `lhs.tail` and `rhs` are packed with `MR`-row and
/// `NV * LANES`-column panels; `rows` lies within `A`'s rows, starting on a multiple of `MR`,
/// and the columns within `rhs`'s.
#[inline(always)]
unsafe fn columns<S: Vector, const MR: usize, const NV: usize>(
    lhs: &Lhs<'_>,
    rhs: &PackedRhs,
    c0: usize,
    rows: Range<usize>,
    out: &mut [&mut [f32]],
    accumulate: bool,
) {
    let nr = NV * S::LANES;
    debug_assert_eq!(nr, rhs.kernel.nr());
    assert!(rows.start.is_multiple_of(MR) && rows.end <= lhs.whole + lhs.tail.m);
    let k = lhs.k;
    let width = out.first().map_or(0, |r| r.len());
    let mut k0 = 0;
    while k0 < k {
        let kc = (k - k0).min(K_BLOCK);
        let start = if k0 == 0 && !accumulate {
            Start::Bias(None)
        } else {
            Start::Add
        };
        let mut r = rows.start;
        while r < rows.end {
            let take = MR.min(rows.end - r);
            let dst = &mut out[r - rows.start..][..take];
            for j in 0..width.div_ceil(nr) {
                let cj = j * nr;
                // SAFETY: column panel (c0 + cj) / nr of B holds k rows of nr floats from
                // ((c0 + cj) / nr) k nr; the tile reads rows k0 .. k0 + kc <= k of it.
                let b = rhs.data.as_ptr().add(((c0 + cj) / nr * k + k0) * nr);
                let to = Rows {
                    out: dst,
                    skip: 0,
                    c0: cj,
                    width: nr.min(width - cj),
                };
                if r + MR <= lhs.whole {
                    // SAFETY: rows r .. r + MR <= whole of A hold k floats each; the tile
                    // reads their steps k0 .. k0 + kc <= k.
                    let a = RowMajor {
                        a: lhs.a.as_ptr().add(r * k + k0),
                        lda: k,
                    };
                    tile::<S, MR, NV>((kc, nr), a, b, to, start);
                } else {
                    // SAFETY: the tail is one packed panel of MR * k floats; the tile reads
                    // its steps k0 .. k0 + kc <= k.
                    let a = Panel::<MR>(lhs.tail.data.as_ptr().add(k0 * MR));
                    tile::<S, MR, NV>((kc, nr), a, b, to, start);
                }
            }
            r += take;
        }
        k0 += kc;
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{kernels, values};
    use super::*;

    #[test]
    fn packed_weights_match_a_float64_product_on_every_kernel() {
        // Sizes off every tile, panel and block boundary; k past two K_BLOCKs; many columns
        // (several blocks); k = 0.
        let cases = [
            (1, 1, 1),
            (17, 37, 45),
            (40, 600, 70),
            (13, 3, 1100),
            (30, 0, 9),
            (25, 257, 33),
        ];
        for kernel in kernels() {
            for &(m, k, n) in &cases {
                let a = values(m * k, 5);
                let w = values(n * k, 6);
                let packed = PackedRhs::with_kernel(&w, n, k, kernel);
                let mut want = vec![0f64; m * n];
                for i in 0..m {
                    for j in 0..n {
                        want[i * n + j] = (0..k)
                            .map(|p| a[i * k + p] as f64 * w[j * k + p] as f64)
                            .sum();
                    }
                }
                let scale = want.iter().fold(1e-30f64, |s, v| s.max(v.abs()));
                let tol = 2e-6 * scale * (k as f64).sqrt().max(1.0);
                let stale = values(m * n, 7);
                for accumulate in [false, true] {
                    let mut c = stale.clone();
                    matmul_packed(&a, m, &packed, &mut c, accumulate);
                    for (i, (&got, &w)) in c.iter().zip(&want).enumerate() {
                        let w = w + if accumulate { stale[i] as f64 } else { 0.0 };
                        assert!(
                            (got as f64 - w).abs() <= tol,
                            "{kernel:?} {m}x{k}x{n} acc {accumulate}: [{i}] {got} vs {w}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn bad_sizes_are_refused() {
        let packed = PackedRhs::transposed(&[1.0; 6], 2, 3);
        assert!(packed.fits(2, 3) && !packed.fits(3, 2));
        assert!(std::panic::catch_unwind(|| PackedRhs::transposed(&[1.0; 5], 2, 3)).is_err());
        let mut c = [0f32; 4];
        // A of the wrong length, C of the wrong length.
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            matmul_packed(&[1.0; 5], 2, &packed, &mut c, false)
        }))
        .is_err());
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            matmul_packed(&[1.0; 6], 2, &packed, &mut c[..3], false)
        }))
        .is_err());
        matmul_packed(&[1.0; 6], 2, &packed, &mut c, false);
        assert_eq!(c, [3.0; 4]);
    }
}
