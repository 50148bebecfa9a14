//! FP32 products with a packed left operand and a right operand produced block by block
//! by the caller: the engine under the convolutions, whose right operand (the im2col patches)
//! exists only one cache-sized block at a time.
//!
//! `C (m x n) = A (m x k) . B (k x n) (+ bias per row)`. [`PackedLhs`] holds `A` in panels of
//! the tier's register-tile height (`MR` rows, every `k` step's `MR` values side by side), packed
//! once. [`product_block`] computes the rows of one block of columns: the caller's `rhs`
//! writes `B`'s rows `k0..k1` for those columns (at most [`K_BLOCK`] rows at a time, so the
//! block stays in L2; its rows padded with zeros to a multiple of `NR` columns), and the engine
//! runs a register tile of `MR x NR` accumulators over each `A` panel and `NR` columns of the
//! block, FP32 accumulation throughout.
//!
//! The register tiles: AVX-512 12 x 32, AVX2 6 x 16, NEON 8 x 8, the baseline 4 x 8
//! (module `vectors`). The tier is [`crate::simd::tier`]'s (so `BROTENSOR_CPU_TIER` caps it).

pub mod depthwise;
pub mod dots;
mod rhs;
mod vectors;

pub use rhs::{matmul_packed, PackedRhs};

use std::ops::Range;

use rayon::prelude::*;

#[cfg(target_arch = "aarch64")]
use vectors::Neon;
#[cfg(target_arch = "x86_64")]
use vectors::{Avx2, Avx512};
use vectors::{Portable, Vector};

/// Rows of `B` (the inner dimension) per pass: a block of `K_BLOCK x cols` floats and a
/// panel of `A` (`K_BLOCK x MR`) stay in L2 and L1.
pub const K_BLOCK: usize = 256;

/// The register tile a tier runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "aarch64")]
    Neon,
    Portable,
}

impl Kernel {
    /// The kernel of the tier the CPU runs ([`crate::simd::tier`]).
    fn detect() -> Kernel {
        use crate::simd::Tier;
        match crate::simd::tier() {
            #[cfg(target_arch = "x86_64")]
            Tier::Avx512 => Kernel::Avx512,
            #[cfg(target_arch = "x86_64")]
            Tier::Avx2 => Kernel::Avx2,
            #[cfg(target_arch = "aarch64")]
            Tier::Neon => Kernel::Neon,
            _ => Kernel::Portable,
        }
    }

    /// Rows of the register tile.
    fn mr(self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => 12,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => 6,
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon => 8,
            Kernel::Portable => 4,
        }
    }

    /// Columns of the register tile (two vectors).
    fn nr(self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => 32,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => 16,
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon => 8,
            Kernel::Portable => 8,
        }
    }
}

/// A row-major `m x k` matrix packed into panels of the register tile's height: panel `i`
/// holds rows `i MR .. i MR + MR` as `k` groups of `MR` values (rows past `m` are zero).
pub struct PackedLhs {
    data: Vec<f32>,
    m: usize,
    k: usize,
    kernel: Kernel,
}

impl PackedLhs {
    /// Packs `a`, a row-major `m x k` matrix, for the tier this CPU runs.
    ///
    /// # Panics
    /// If `a` does not hold exactly `m * k` elements (or that product overflows).
    pub fn new(a: &[f32], m: usize, k: usize) -> Self {
        Self::with_kernel(a, m, k, Kernel::detect())
    }

    /// Packs the transpose of `a`, a row-major `rows x cols` matrix: the packed matrix is
    /// `cols x rows` (`m = cols`, `k = rows`), without materializing the transpose.
    ///
    /// # Panics
    /// If `a` does not hold exactly `rows * cols` elements (or that product overflows).
    pub fn transposed(a: &[f32], rows: usize, cols: usize) -> Self {
        let kernel = Kernel::detect();
        assert!(
            rows.checked_mul(cols) == Some(a.len()),
            "PackedLhs: {} elements for {rows} x {cols}",
            a.len()
        );
        let (m, k, mr) = (cols, rows, kernel.mr());
        let panels = m.div_ceil(mr);
        let len = (panels * mr)
            .checked_mul(k)
            .expect("PackedLhs: the packed size overflows");
        let mut data = vec![0f32; len];
        for (i, panel) in data
            .chunks_exact_mut(mr * k.max(1))
            .enumerate()
            .take(panels)
        {
            let (r0, take) = (i * mr, mr.min(m - i * mr));
            for (p, dst) in panel.chunks_exact_mut(mr).enumerate() {
                dst[..take].copy_from_slice(&a[p * cols + r0..][..take]);
            }
        }
        PackedLhs { data, m, k, kernel }
    }

    fn with_kernel(a: &[f32], m: usize, k: usize, kernel: Kernel) -> Self {
        assert!(
            m.checked_mul(k) == Some(a.len()),
            "PackedLhs: {} elements for {m} x {k}",
            a.len()
        );
        let mr = kernel.mr();
        let panels = m.div_ceil(mr);
        // `data` holds exactly `panels` chunks of mr * k (none when k == 0).
        // panels * mr <= m + mr - 1 rows of k: at most (m + mr) k, which fits when m k does
        // unless k is huge; checked.
        let len = (panels * mr)
            .checked_mul(k)
            .expect("PackedLhs: the packed size overflows");
        let mut data = vec![0f32; len];
        let pack = |(i, panel): (usize, &mut [f32])| {
            let rows = &a[i * mr * k..][..mr.min(m - i * mr) * k];
            // Steps of 16 columns, so the panel's writes stay within a few cache lines.
            for p0 in (0..k).step_by(16) {
                let steps = 16.min(k - p0);
                for (r, row) in rows.chunks_exact(k).enumerate() {
                    for (p, &v) in row[p0..p0 + steps].iter().enumerate() {
                        panel[(p0 + p) * mr + r] = v;
                    }
                }
            }
        };
        if m * k >= 1 << 16 {
            data.par_chunks_exact_mut(mr * k.max(1))
                .enumerate()
                .for_each(pack);
        } else {
            data.chunks_exact_mut(mr * k.max(1))
                .enumerate()
                .for_each(pack);
        }
        PackedLhs { data, m, k, kernel }
    }

    /// Rows (`m`).
    pub fn rows(&self) -> usize {
        self.m
    }

    /// Rows per panel (the register tile's height): row ranges that start on a multiple of
    /// it waste no work.
    pub fn panel_rows(&self) -> usize {
        self.kernel.mr()
    }

    /// The inner dimension (`k`).
    pub fn depth(&self) -> usize {
        self.k
    }

    /// Whether this packing is of an `m x k` matrix for the tier the CPU runs now.
    pub fn fits(&self, m: usize, k: usize) -> bool {
        self.m == m && self.k == k && self.kernel == Kernel::detect()
    }
}

/// Reusable buffers for [`product_block`] (one per thread).
#[derive(Default)]
pub struct Scratch {
    rows: Vec<f32>,
}

/// Columns per block for an inner dimension `k`: about 256 KiB of one pass's `B` rows
/// (`min(k, K_BLOCK)` of them), in multiples of 64, from 64 to 1024.
pub fn block_cols(k: usize) -> usize {
    ((1usize << 16) / k.clamp(1, K_BLOCK) / 64 * 64).clamp(64, 1024)
}

/// Rows `rows` of `C = A . B` (+ `bias[row]`) for one block of `cols` columns, written
/// into `out` (`out[i]` receives row `rows.start + i`, its first `cols` elements; each
/// slice may be longer). `rhs(k_range, dst, stride)` writes `B`'s rows `k_range` for these
/// columns into `dst`, row `i` at `dst[i stride..][..cols]` (the rest of each row must be
/// left as it is); it is called for consecutive ranges of at
/// most [`K_BLOCK`] rows covering `0..k`. With `k == 0`, `out` receives the bias (or zeros).
///
/// # Panics
/// If `rows` is not within `A`'s rows, `out` does not hold `rows.len()` slices of at least
/// `cols` elements, or `bias` is shorter than `A`'s rows.
pub fn product_block(
    lhs: &PackedLhs,
    rows: Range<usize>,
    out: &mut [&mut [f32]],
    cols: usize,
    bias: Option<&[f32]>,
    rhs: impl FnMut(Range<usize>, &mut [f32], usize),
    scratch: &mut Scratch,
) {
    check_block(lhs, &rows, out, cols, bias);
    if cols == 0 || rows.is_empty() {
        return;
    }
    dispatch(lhs, rows, out, cols, bias, Source::Gather(rhs, scratch));
}

/// [`product_block`] with `B` read in place: row `p` of the block's columns is
/// `b[p ld .. p ld + cols]`. The register tiles read whole tiles of columns, so every row
/// must hold `cols` rounded up to a multiple of 64 (zero past `cols`, else those columns'
/// products are computed but never stored).
///
/// # Panics
/// As [`product_block`], and if `b` is shorter than `(k - 1) ld` plus the rounded columns
/// or `ld` is below them.
pub fn product_block_in_place(
    lhs: &PackedLhs,
    rows: Range<usize>,
    out: &mut [&mut [f32]],
    cols: usize,
    bias: Option<&[f32]>,
    (b, ld): (&[f32], usize),
) {
    check_block(lhs, &rows, out, cols, bias);
    if cols == 0 || rows.is_empty() {
        return;
    }
    // What the register tiles read of each row: `cols` up to whole tiles.
    let padded = cols.next_multiple_of(lhs.kernel.nr());
    let needed = lhs
        .k
        .saturating_sub(1)
        .checked_mul(ld)
        .and_then(|v| v.checked_add(padded));
    assert!(
        ld >= padded && needed.is_some_and(|n| lhs.k == 0 || b.len() >= n),
        "product_block_in_place: {} elements of B for {} rows of {padded} columns {ld} apart",
        b.len(),
        lhs.k
    );
    dispatch(
        lhs,
        rows,
        out,
        cols,
        bias,
        Source::<NoGather>::InPlace(b, ld),
    );
}

/// The gatherer type of a [`Source::InPlace`] (never called).
type NoGather = fn(Range<usize>, &mut [f32], usize);

/// Where [`block`] finds `B`'s rows.
enum Source<'a, F> {
    /// Written block by block by the caller's closure into the scratch.
    Gather(F, &'a mut Scratch),
    /// In place, rows `ld` apart.
    InPlace(&'a [f32], usize),
}

/// Runs [`block`] on the kernel `lhs` was packed for.
fn dispatch(
    lhs: &PackedLhs,
    rows: Range<usize>,
    out: &mut [&mut [f32]],
    cols: usize,
    bias: Option<&[f32]>,
    source: Source<'_, impl FnMut(Range<usize>, &mut [f32], usize)>,
) {
    // SAFETY (each arm): `Kernel::detect` chose this kernel only on a CPU whose tier runs
    // its instructions (the tier checks every feature it enables), and `lhs` was packed
    // for it.
    match lhs.kernel {
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => unsafe {
            Avx512::enter(
                #[inline(always)]
                || block::<Avx512, 12, 2>(lhs, rows, out, cols, bias, source),
            )
        },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => unsafe {
            Avx2::enter(
                #[inline(always)]
                || block::<Avx2, 6, 2>(lhs, rows, out, cols, bias, source),
            )
        },
        #[cfg(target_arch = "aarch64")]
        Kernel::Neon => unsafe {
            Neon::enter(
                #[inline(always)]
                || block::<Neon, 8, 2>(lhs, rows, out, cols, bias, source),
            )
        },
        Kernel::Portable => unsafe {
            Portable::enter(
                #[inline(always)]
                || block::<Portable, 4, 2>(lhs, rows, out, cols, bias, source),
            )
        },
    }
}

/// The checks [`product_block`] and [`product_block_in_place`] share.
fn check_block(
    lhs: &PackedLhs,
    rows: &Range<usize>,
    out: &[&mut [f32]],
    cols: usize,
    bias: Option<&[f32]>,
) {
    assert!(
        rows.end <= lhs.m,
        "product_block: rows {rows:?} of {}",
        lhs.m
    );
    assert!(
        out.len() == rows.len() && out.iter().all(|r| r.len() >= cols),
        "product_block: output rows"
    );
    assert!(
        bias.is_none_or(|b| b.len() >= lhs.m),
        "product_block: bias length"
    );
}

/// Rows per work item when `jobs` blocks of columns share an `m`-row product: all of them
/// when the blocks alone keep every thread busy (4 per thread), else fewer, a multiple of
/// the panel height `panel`.
pub fn row_chunk(m: usize, jobs: usize, panel: usize) -> usize {
    let wanted = 4 * rayon::current_num_threads();
    if jobs >= wanted {
        m.max(1)
    } else {
        (m * jobs)
            .div_ceil(wanted)
            .next_multiple_of(panel)
            .max(panel)
    }
}

/// The rows of `c` (rows of `row_len`) cut into blocks of `cols` columns: entry `b` holds
/// every row's columns `b cols ..` (the last block may be narrower).
pub fn column_blocks(c: &mut [f32], row_len: usize, cols: usize) -> Vec<Vec<&mut [f32]>> {
    let rows = c.len() / row_len.max(1);
    let mut blocks: Vec<Vec<&mut [f32]>> = (0..row_len.div_ceil(cols.max(1)))
        .map(|_| Vec::with_capacity(rows))
        .collect();
    for row in c.chunks_exact_mut(row_len.max(1)) {
        for (b, piece) in row.chunks_mut(cols.max(1)).enumerate() {
            blocks[b].push(piece);
        }
    }
    blocks
}

/// Cuts the output rows `outs` of one column block into items of at most `chunk` rows:
/// `item(rows, outs)` with the rows' range.
pub fn split_rows<'a>(
    mut outs: Vec<&'a mut [f32]>,
    chunk: usize,
    mut item: impl FnMut(Range<usize>, Vec<&'a mut [f32]>),
) {
    let mut r0 = 0;
    while !outs.is_empty() {
        let rest = outs.split_off(chunk.min(outs.len()));
        let rows = r0..r0 + outs.len();
        r0 = rows.end;
        item(rows, outs);
        outs = rest;
    }
}

/// [`product_block`] on tier `S` with an `MR x NV*LANES` register tile.
///
/// # Safety
/// The CPU must run `S`'s instructions; `lhs` is packed with `MR`-row panels.
#[inline(always)]
unsafe fn block<S: Vector, const MR: usize, const NV: usize>(
    lhs: &PackedLhs,
    rows: Range<usize>,
    out: &mut [&mut [f32]],
    cols: usize,
    bias: Option<&[f32]>,
    mut source: Source<'_, impl FnMut(Range<usize>, &mut [f32], usize)>,
) {
    let nr = NV * S::LANES;
    let k = lhs.k;
    let col_panels = cols.div_ceil(nr);
    if k == 0 {
        // No rows: the bias (or zeros) alone.
        for (r, dst) in rows.clone().zip(out.iter_mut()) {
            dst[..cols].fill(bias.map_or(0.0, |b| b[r]));
        }
        return;
    }
    let mut k0 = 0;
    while k0 < k {
        let kc = (k - k0).min(K_BLOCK);
        let first = k0 == 0;
        // B's rows k0..k0+kc, `stride` apart (the columns past `cols` zero, so the last
        // register tile reads zeros there).
        let (b_rows, stride) = match &mut source {
            Source::Gather(rhs, scratch) => {
                let stride = col_panels * nr;
                scratch.rows.resize(kc * stride, 0.0);
                let block = &mut scratch.rows[..kc * stride];
                if stride > cols {
                    for row in block.chunks_exact_mut(stride) {
                        row[cols..].fill(0.0);
                    }
                }
                rhs(k0..k0 + kc, block, stride);
                (scratch.rows.as_ptr(), stride)
            }
            // SAFETY: `product_block_in_place` checked that `b` holds k rows `ld` apart of
            // at least col_panels * nr floats, so row k0 starts inside it.
            Source::InPlace(b, ld) => (b.as_ptr().add(k0 * *ld), *ld),
        };
        // Row panels of A (packed MR at a time); rows.start need not be a panel boundary.
        let mut r = rows.start;
        while r < rows.end {
            let (panel, offset) = (r / MR, r % MR);
            let take = (MR - offset).min(rows.end - r);
            // SAFETY: panel `panel` holds MR * k floats from panel * MR * k, and the tile reads
            // its steps k0..k0 + kc, all inside it (k0 + kc <= k).
            let a = lhs.data.as_ptr().add(panel * MR * k + k0 * MR);
            let dst = &mut out[r - rows.start..][..take];
            for j in 0..col_panels {
                let (c0, width) = (j * nr, nr.min(cols - j * nr));
                // SAFETY: `b_rows` addresses kc rows `stride` apart of at least col_panels * nr
                // floats (the scratch block, or B in place as checked), and j * nr + nr is
                // within that, so the tile's kc reads of nr floats stay inside it.
                let b = b_rows.add(j * nr);
                tile::<S, MR, NV>(
                    (kc, stride),
                    Panel::<MR>(a),
                    b,
                    Rows {
                        out: dst,
                        skip: offset,
                        c0,
                        width,
                    },
                    if first {
                        Start::Bias(bias.map(|b| &b[panel * MR..]))
                    } else {
                        Start::Add
                    },
                );
            }
            r += take;
        }
        k0 += kc;
    }
}

/// Where a register tile's results go: tile rows `skip..skip + out.len()` into `out`,
/// columns `c0..c0 + width`.
struct Rows<'a, 'b> {
    out: &'a mut [&'b mut [f32]],
    skip: usize,
    c0: usize,
    width: usize,
}

/// How a register tile starts.
#[derive(Clone, Copy)]
enum Start<'a> {
    /// From the bias of the panel's rows (`b[r]` for tile row `r`), or zero: overwrite.
    Bias(Option<&'a [f32]>),
    /// From zero, adding into what the output holds.
    Add,
}

/// Where a register tile reads `A`'s value of tile row `r` at step `p`.
trait Lhs: Copy {
    /// # Safety
    /// `(p, r)` must lie within the tile's steps and rows.
    unsafe fn at(self, p: usize, r: usize) -> f32;
}

/// A packed panel: step `p`'s `MR` values side by side.
#[derive(Clone, Copy)]
struct Panel<const MR: usize>(*const f32);

impl<const MR: usize> Lhs for Panel<MR> {
    #[inline(always)]
    unsafe fn at(self, p: usize, r: usize) -> f32 {
        // SAFETY: the caller keeps (p, r) within the panel.
        unsafe { *self.0.add(p * MR + r) }
    }
}

/// `MR` rows of a row-major matrix, `lda` floats apart.
#[derive(Clone, Copy)]
struct RowMajor {
    a: *const f32,
    lda: usize,
}

impl Lhs for RowMajor {
    #[inline(always)]
    unsafe fn at(self, p: usize, r: usize) -> f32 {
        // SAFETY: the caller keeps (p, r) within the rows.
        unsafe { *self.a.add(r * self.lda + p) }
    }
}

/// One `MR x NV*LANES` register tile: `acc = start + A (kc x MR) . B (kc x NR, rows `ldb`
/// apart)`.
///
/// # Safety
/// The CPU must run `S`'s instructions; `a` addresses `kc` steps of `MR` rows and `b` `kc`
/// rows of `NR` floats, `ldb` apart.
#[inline(always)]
unsafe fn tile<S: Vector, const MR: usize, const NV: usize>(
    (kc, ldb): (usize, usize),
    a: impl Lhs,
    b: *const f32,
    to: Rows<'_, '_>,
    start: Start<'_>,
) {
    let l = S::LANES;
    let nr = NV * l;
    let mut acc = [[S::zero(); NV]; MR];
    if let Start::Bias(Some(bias)) = start {
        for (r, row) in acc.iter_mut().enumerate() {
            // Rows past the matrix have no bias (and are never stored).
            let v = S::splat(bias.get(r).copied().unwrap_or(0.0));
            *row = [v; NV];
        }
    }
    for p in 0..kc {
        let mut bv = [S::zero(); NV];
        for (v, x) in bv.iter_mut().enumerate() {
            *x = S::load(b.add(p * ldb + v * l));
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let av = S::splat(a.at(p, r));
            for v in 0..NV {
                row[v] = S::mul_add(av, bv[v], row[v]);
            }
        }
    }
    let add = matches!(start, Start::Add);
    for (i, dst) in to.out.iter_mut().enumerate() {
        let row = &acc[to.skip + i];
        let dst = &mut dst[to.c0..to.c0 + to.width];
        if to.width == nr {
            for (v, &x) in row.iter().enumerate() {
                // In bounds: `dst` holds nr = NV * LANES floats.
                let p = dst.as_mut_ptr().add(v * l);
                S::store(p, if add { S::add(S::load(p), x) } else { x });
            }
        } else {
            let mut lanes = [0f32; 64];
            for (v, &x) in row.iter().enumerate() {
                S::store(lanes.as_mut_ptr().add(v * l), x);
            }
            for (d, &x) in dst.iter_mut().zip(&lanes[..to.width]) {
                *d = if add { *d + x } else { x };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel this CPU can run.
    pub(super) fn kernels() -> Vec<Kernel> {
        let mut ks = vec![Kernel::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            use crate::simd::Tier;
            let t = crate::simd::tier();
            if t == Tier::Avx2 || t == Tier::Avx512 {
                ks.push(Kernel::Avx2);
            }
            if t == Tier::Avx512 {
                ks.push(Kernel::Avx512);
            }
        }
        #[cfg(target_arch = "aarch64")]
        if crate::simd::tier() == crate::simd::Tier::Neon {
            ks.push(Kernel::Neon);
        }
        ks
    }

    pub(super) fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let h = (i as u32)
                    .wrapping_mul(2654435761)
                    .wrapping_add(seed.wrapping_mul(97));
                ((h >> 8) % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// `A . B + bias` in float64.
    fn reference(
        a: &[f32],
        b: &[f32],
        bias: Option<&[f32]>,
        m: usize,
        k: usize,
        n: usize,
    ) -> Vec<f64> {
        let mut c = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = bias.map_or(0.0, |b| b[i] as f64);
                for p in 0..k {
                    s += a[i * k + p] as f64 * b[p * n + j] as f64;
                }
                c[i * n + j] = s;
            }
        }
        c
    }

    #[test]
    fn ragged_blocks_match_a_float64_product_on_every_kernel() {
        // Sizes off every tile and block boundary; k past two K_BLOCKs; k = 0.
        let cases = [
            (1, 1, 1),
            (13, 37, 45),
            (25, 600, 70),
            (7, 3, 33),
            (30, 0, 9),
            (12, 257, 32),
        ];
        for kernel in kernels() {
            for &(m, k, n) in &cases {
                let a = values(m * k, 1);
                let b = values(k * n, 2);
                let bias = values(m, 3);
                let lhs = PackedLhs::with_kernel(&a, m, k, kernel);
                for with_bias in [false, true] {
                    let bias = with_bias.then_some(&bias[..]);
                    let want = reference(&a, &b, bias, m, k, n);
                    let scale = want.iter().fold(1e-30f64, |s, v| s.max(v.abs()));
                    // Rows split at a place off the panel boundary, columns in two blocks,
                    // outputs wider than the block (stride 3 n) and full of stale values.
                    let mut c = vec![f32::NAN; m * 3 * n];
                    let split = m / 3;
                    let half = n / 2;
                    let mut scratch = Scratch::default();
                    for rows in [0..split, split..m] {
                        for cs in [0..half, half..n] {
                            let mut outs: Vec<&mut [f32]> = c
                                .chunks_exact_mut(3 * n)
                                .skip(rows.start)
                                .take(rows.len())
                                .map(|r| &mut r[cs.start..])
                                .collect();
                            let rhs = |kr: Range<usize>, dst: &mut [f32], stride: usize| {
                                for (p, row) in kr.zip(dst.chunks_exact_mut(stride)) {
                                    row[..cs.len()]
                                        .copy_from_slice(&b[p * n + cs.start..p * n + cs.end]);
                                }
                            };
                            product_block(
                                &lhs,
                                rows.clone(),
                                &mut outs,
                                cs.len(),
                                bias,
                                rhs,
                                &mut scratch,
                            );
                        }
                    }
                    for i in 0..m {
                        for j in 0..n {
                            let (got, w) = (c[i * 3 * n + j] as f64, want[i * n + j]);
                            assert!(
                                (got - w).abs() <= 2e-6 * scale * (k as f64).sqrt().max(1.0),
                                "{kernel:?} {m}x{k}x{n} bias {with_bias}: [{i},{j}] {got} vs {w}"
                            );
                        }
                        // Past the block's columns nothing was written.
                        assert!(c[i * 3 * n + n..(i + 1) * 3 * n].iter().all(|v| v.is_nan()));
                    }
                }
            }
        }
    }

    #[test]
    fn blocks_read_in_place_match_a_float64_product_on_every_kernel() {
        for kernel in kernels() {
            for &(m, k, n) in &[
                (13usize, 37usize, 45usize),
                (25, 600, 70),
                (7, 3, 130),
                (30, 0, 9),
            ] {
                let ld = n.next_multiple_of(64);
                // B's rows padded with zeros to `ld`.
                let b: Vec<f32> = values(k * n, 8)
                    .chunks(n.max(1))
                    .take(k)
                    .flat_map(|row| row.iter().copied().chain(std::iter::repeat_n(0.0, ld - n)))
                    .collect();
                let dense: Vec<f32> = (0..k * n).map(|i| b[i / n * ld + i % n]).collect();
                let a = values(m * k, 9);
                let bias = values(m, 10);
                let lhs = PackedLhs::with_kernel(&a, m, k, kernel);
                let want = reference(&a, &dense, Some(&bias), m, k, n);
                let scale = want.iter().fold(1e-30f64, |s, v| s.max(v.abs()));
                let mut c = vec![f32::NAN; m * n];
                // Two column blocks, the second starting at column 64.
                for cs in [0..64.min(n), 64.min(n)..n] {
                    let mut outs: Vec<&mut [f32]> =
                        c.chunks_exact_mut(n).map(|r| &mut r[cs.clone()]).collect();
                    product_block_in_place(
                        &lhs,
                        0..m,
                        &mut outs,
                        cs.len(),
                        Some(&bias),
                        (b.get(cs.start..).unwrap_or(&[]), ld),
                    );
                }
                for (i, (&got, &w)) in c.iter().zip(&want).enumerate() {
                    assert!(
                        (got as f64 - w).abs() <= 2e-6 * scale * (k as f64).sqrt().max(1.0),
                        "{kernel:?} {m}x{k}x{n}: [{i}] {got} vs {w}"
                    );
                }
            }
        }
        // B short of its last row's columns rounded to a whole tile on any tier.
        let lhs = PackedLhs::new(&[1.0; 6], 2, 3);
        let b = vec![1.0; 2 * 64 + 3];
        let mut row = [0f32; 4];
        let mut outs: Vec<&mut [f32]> = vec![&mut row];
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            product_block_in_place(&lhs, 0..1, &mut outs, 4, None, (&b, 64))
        }))
        .is_err());
        let b = vec![1.0; 2 * 64 + 64];
        product_block_in_place(&lhs, 0..1, &mut outs, 4, None, (&b, 64));
        assert_eq!(row, [3.0; 4]);
    }

    #[test]
    fn packing_a_transpose_equals_packing_the_transposed_matrix() {
        for &(rows, cols) in &[(1, 1), (5, 13), (13, 5), (0, 7), (7, 0), (40, 25)] {
            let a = values(rows * cols, 4);
            let at: Vec<f32> = (0..cols)
                .flat_map(|j| (0..rows).map(move |i| (i, j)))
                .map(|(i, j)| a[i * cols + j])
                .collect();
            let direct = PackedLhs::transposed(&a, rows, cols);
            let via = PackedLhs::new(&at, cols, rows);
            assert_eq!((direct.m, direct.k), (cols, rows));
            assert_eq!(direct.data, via.data, "{rows} x {cols}");
        }
        assert!(std::panic::catch_unwind(|| PackedLhs::transposed(&[1.0; 5], 2, 3)).is_err());
    }

    #[test]
    fn bad_arguments_are_refused() {
        let lhs = PackedLhs::new(&[1.0; 6], 2, 3);
        let mut row = [0f32; 4];
        let mut outs: Vec<&mut [f32]> = vec![&mut row];
        let rhs = |_: Range<usize>, d: &mut [f32], _: usize| d.fill(1.0);
        let mut s = Scratch::default();
        // Rows past A, output shorter than the block, short bias.
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            product_block(&lhs, 2..3, &mut outs, 4, None, rhs, &mut s)
        }))
        .is_err());
        let mut row = [0f32; 4];
        let mut outs: Vec<&mut [f32]> = vec![&mut row];
        let mut s = Scratch::default();
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            product_block(&lhs, 0..1, &mut outs, 5, None, rhs, &mut s)
        }))
        .is_err());
        let mut row = [0f32; 4];
        let mut outs: Vec<&mut [f32]> = vec![&mut row];
        let mut s = Scratch::default();
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            product_block(&lhs, 0..1, &mut outs, 4, Some(&[1.0]), rhs, &mut s)
        }))
        .is_err());
        assert!(std::panic::catch_unwind(|| PackedLhs::new(&[1.0; 5], 2, 3)).is_err());
        let mut row = [0f32; 4];
        let mut outs: Vec<&mut [f32]> = vec![&mut row];
        product_block(&lhs, 1..2, &mut outs, 4, Some(&[0.5, 0.25]), rhs, &mut s);
        assert_eq!(row, [3.25; 4]);
    }
}
