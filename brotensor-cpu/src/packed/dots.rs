//! `C = A . B^T` for a few rows of `A`: every output is a dot product of two contiguous
//! rows (an activation row and a weight row, as a linear layer stores them), so neither
//! operand is packed. A register tile of `MT` rows of `A` by `NT` rows of `B` keeps
//! `MT x NT` vector accumulators along `k`, summed across lanes once at the end; `B`'s rows
//! are read once per `MT` rows of `A`.

use rayon::prelude::*;

#[cfg(target_arch = "aarch64")]
use super::vectors::Neon;
#[cfg(target_arch = "x86_64")]
use super::vectors::{Avx2, Avx512};
use super::vectors::{Portable, Vector};
use super::Kernel;

/// The most rows of `A` the dot-product path is meant for: past it, packed products
/// reuse each loaded weight more.
pub const MAX_ROWS: usize = 16;

/// `c (m x n) = a (m x k) . b (n x k)^T`, or `c +=` that when `accumulate`; FP32
/// accumulation. Parallel over blocks of `b`'s rows when the product is large enough.
///
/// # Panics
/// If a slice length differs from its dimensions (`m k`, `n k`, `m n`) or one of those
/// products overflows.
pub fn a_bt(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    (m, n, k): (usize, usize, usize),
    accumulate: bool,
) {
    let len = |x: usize, y: usize| x.checked_mul(y).expect("a_bt: a size overflows");
    assert!(
        a.len() == len(m, k) && b.len() == len(n, k) && c.len() == len(m, n),
        "a_bt: lengths {} {} {} for m {m} n {n} k {k}",
        a.len(),
        b.len(),
        c.len()
    );
    if m == 0 || n == 0 {
        return;
    }
    let kernel = Kernel::detect();
    let work = m.saturating_mul(n).saturating_mul(k);
    let threads = rayon::current_num_threads();
    // Blocks of b's rows, a multiple of 8 (every tile width divides it).
    let per_block = if work < 1 << 16 || threads == 1 {
        n
    } else {
        n.div_ceil(4 * threads).next_multiple_of(8)
    };
    let run = |j0: usize, out: &mut [f32], width: usize| {
        let bj = &b[j0 * k..(j0 + width) * k];
        // SAFETY (each arm): `Kernel::detect` picks a kernel only where the CPU runs its
        // tier's instructions.
        match kernel {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe {
                Avx512::enter(
                    #[inline(always)]
                    || block::<Avx512, 4, 4>(a, bj, out, (m, width, k)),
                )
            },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe {
                Avx2::enter(
                    #[inline(always)]
                    || block::<Avx2, 4, 2>(a, bj, out, (m, width, k)),
                )
            },
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon => unsafe {
                Neon::enter(
                    #[inline(always)]
                    || block::<Neon, 4, 4>(a, bj, out, (m, width, k)),
                )
            },
            Kernel::Portable => unsafe {
                Portable::enter(
                    #[inline(always)]
                    || block::<Portable, 4, 2>(a, bj, out, (m, width, k)),
                )
            },
        }
    };
    if per_block >= n {
        // One block: straight into `c` unless it must be added to what `c` holds.
        if accumulate {
            let mut out = vec![0f32; m * n];
            run(0, &mut out, n);
            store(c, &out, 0, n, n, true);
        } else {
            run(0, c, n);
        }
        return;
    }
    let parts: Vec<(usize, Vec<f32>)> = (0..n)
        .step_by(per_block)
        .collect::<Vec<_>>()
        .into_par_iter()
        .map(|j0| {
            let width = per_block.min(n - j0);
            let mut out = vec![0f32; m * width];
            run(j0, &mut out, width);
            (j0, out)
        })
        .collect();
    for (j0, out) in parts {
        store(c, &out, j0, out.len() / m, n, accumulate);
    }
}

/// Writes (or adds) the `m x width` block `out` into columns `j0..j0 + width` of `c`
/// (rows of `n`).
fn store(c: &mut [f32], out: &[f32], j0: usize, width: usize, n: usize, accumulate: bool) {
    for (row, src) in c.chunks_exact_mut(n).zip(out.chunks_exact(width)) {
        let dst = &mut row[j0..j0 + width];
        if accumulate {
            dst.iter_mut().zip(src).for_each(|(d, s)| *d += s);
        } else {
            dst.copy_from_slice(src);
        }
    }
}

/// `out (m x n) = a (m x k) . b (n x k)^T` with `MT x NT` tiles (smaller ones at the
/// edges).
///
/// # Safety
/// The CPU must run `S`'s instructions.
#[inline(always)]
unsafe fn block<S: Vector, const MT: usize, const NT: usize>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    (m, n, k): (usize, usize, usize),
) {
    let mut i = 0;
    while i < m {
        let rows = MT.min(m - i);
        match rows {
            r if r == MT => row_tiles::<S, MT, NT>(a, b, out, i, (n, k)),
            1 => row_tiles::<S, 1, NT>(a, b, out, i, (n, k)),
            2 => row_tiles::<S, 2, NT>(a, b, out, i, (n, k)),
            3 => row_tiles::<S, 3, NT>(a, b, out, i, (n, k)),
            _ => {
                for r in 0..rows {
                    row_tiles::<S, 1, NT>(a, b, out, i + r, (n, k));
                }
            }
        }
        i += rows;
    }
}

/// Rows `i..i + R` of `out`: tiles of `R x NT`, the last columns `R x 1` at a time (every
/// tile keeps at least `min(R, NT)` independent chains of multiply-adds).
///
/// # Safety
/// The CPU must run `S`'s instructions.
#[inline(always)]
unsafe fn row_tiles<S: Vector, const R: usize, const NT: usize>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    i: usize,
    (n, k): (usize, usize),
) {
    let mut j = 0;
    while j + NT <= n {
        put(out, n, i, j, &tile::<S, R, NT>(a, b, i, j, k));
        j += NT;
    }
    while j < n {
        put(out, n, i, j, &tile::<S, R, 1>(a, b, i, j, k));
        j += 1;
    }
}

/// Stores a tile's dot products at row `i`, column `j` of `out` (rows of `n`).
#[inline(always)]
fn put<const MT: usize, const NT: usize>(
    out: &mut [f32],
    n: usize,
    i: usize,
    j: usize,
    t: &[[f32; NT]; MT],
) {
    for (r, row) in t.iter().enumerate() {
        out[(i + r) * n + j..][..NT].copy_from_slice(row);
    }
}

/// The `MT x NT` dot products of rows `i..i + MT` of `a` with rows `j..j + NT` of `b`
/// (rows of `k`).
///
/// # Safety
/// The CPU must run `S`'s instructions; the rows must exist (checked by the slicing).
#[inline(always)]
unsafe fn tile<S: Vector, const MT: usize, const NT: usize>(
    a: &[f32],
    b: &[f32],
    i: usize,
    j: usize,
    k: usize,
) -> [[f32; NT]; MT] {
    let (a, b) = (&a[i * k..(i + MT) * k], &b[j * k..(j + NT) * k]);
    let l = S::LANES;
    let body = k / l * l;
    let mut acc = [[S::zero(); NT]; MT];
    // SAFETY (the loads below): `a` and `b` were sliced to MT and NT rows of k, and each load
    // reads LANES floats at p, p + LANES <= body <= k, within one row.
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut p = 0;
    while p < body {
        // In bounds: p + LANES <= k within each row of the checked slices.
        let mut bv = [S::zero(); NT];
        for (q, v) in bv.iter_mut().enumerate() {
            *v = S::load(pb.add(q * k + p));
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let av = S::load(pa.add(r * k + p));
            for q in 0..NT {
                row[q] = S::mul_add(av, bv[q], row[q]);
            }
        }
        p += l;
    }
    let mut out = [[0f32; NT]; MT];
    for r in 0..MT {
        for q in 0..NT {
            let tail: f32 = (body..k).map(|p| a[r * k + p] * b[q * k + p]).sum();
            out[r][q] = S::sum(acc[r][q]) + tail;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_products_match_a_float64_reference() {
        let values = |n: usize, s: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (((i * 37 + s * 11) % 23) as f32 - 11.0) / 7.0)
                .collect()
        };
        // Ragged m, n and k (tails past the lanes), large enough to split over threads.
        for &(m, n, k) in &[
            (1, 1, 1),
            (5, 7, 19),
            (4, 4, 16),
            (10, 1153, 384),
            (16, 33, 100),
            (3, 0, 4),
        ] {
            let (a, b) = (values(m * k, 1), values(n * k, 2));
            let mut c = vec![f32::NAN; m * n];
            a_bt(&a, &b, &mut c, (m, n, k), false);
            let mut twice = c.clone();
            a_bt(&a, &b, &mut twice, (m, n, k), true);
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|p| a[i * k + p] as f64 * b[j * k + p] as f64)
                        .sum();
                    let tol = 1e-5 * (k as f64).sqrt() * 3.0;
                    assert!(
                        (c[i * n + j] as f64 - want).abs() <= tol,
                        "{m}x{n}x{k} [{i},{j}]"
                    );
                    assert!((twice[i * n + j] as f64 - 2.0 * want).abs() <= 2.0 * tol);
                }
            }
        }
        assert!(std::panic::catch_unwind(|| a_bt(
            &[1.0; 3],
            &[1.0; 2],
            &mut [0.0; 1],
            (1, 1, 2),
            false
        ))
        .is_err());
    }
}
