//! Dense matrix products on row-major FP32 matrices, through the `gemm` crate (packed SIMD
//! kernels, parallel with rayon). Transposes are expressed as strides, never materialized.

use gemm::Parallelism;

use crate::activation as act;
use crate::packed::PackedRhs;

/// A row-major matrix operand, possibly read transposed. Its fields are private so that
/// `data` always holds exactly `rows * cols` elements ([`Mat::new`] checks it), which
/// [`matmul`]'s unsafe call relies on.
#[derive(Clone, Copy)]
pub struct Mat<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    trans: bool,
}

impl<'a> Mat<'a> {
    /// `data` as a `rows x cols` row-major matrix.
    ///
    /// # Panics
    /// If `rows * cols` overflows or differs from `data.len()`.
    pub fn new(data: &'a [f32], rows: usize, cols: usize) -> Self {
        assert!(
            rows.checked_mul(cols) == Some(data.len()),
            "Mat: {} elements for {rows} x {cols}",
            data.len()
        );
        Mat {
            data,
            rows,
            cols,
            trans: false,
        }
    }

    /// The transpose (a view).
    pub fn t(self) -> Self {
        Mat {
            trans: !self.trans,
            ..self
        }
    }

    /// `(rows, cols)` as the product sees it.
    pub fn shape(&self) -> (usize, usize) {
        if self.trans {
            (self.cols, self.rows)
        } else {
            (self.rows, self.cols)
        }
    }

    /// `(column stride, row stride)` of the logical matrix, in elements.
    fn strides(&self) -> (isize, isize) {
        if self.trans {
            (self.cols as isize, 1)
        } else {
            (1, self.cols as isize)
        }
    }
}

/// `c (m, n) = a (m, k) . b (k, n)`, or `c += a . b` when `accumulate`. FP32 throughout.
/// With `k == 0`, `c` is zeroed (or left as is when accumulating).
///
/// # Panics
/// If the shapes do not chain or `c` does not hold exactly `m * n` elements.
pub fn matmul(a: Mat<'_>, b: Mat<'_>, c: &mut [f32], accumulate: bool) {
    let (m, n) = (a.shape().0, b.shape().1);
    assert!(
        m.checked_mul(n) == Some(c.len()),
        "matmul: output length {} for {m} x {n}",
        c.len()
    );
    matmul_strided(a, b, c, n, accumulate);
}

/// [`matmul`] into rows `ldc` elements apart: row `i` of the `m x n` product is
/// `c[i ldc .. i ldc + n]` (a tile of a wider matrix); the elements between rows are not
/// touched.
///
/// # Panics
/// If the shapes do not chain, `ldc < n`, or `c` is shorter than `(m - 1) ldc + n`.
pub fn matmul_strided(a: Mat<'_>, b: Mat<'_>, c: &mut [f32], ldc: usize, accumulate: bool) {
    let (m, k) = a.shape();
    let (kb, n) = b.shape();
    assert_eq!(k, kb, "matmul: inner dimensions {k} and {kb}");
    if m == 0 || n == 0 {
        return;
    }
    assert!(ldc >= n, "matmul: row stride {ldc} below {n} columns");
    assert!(
        isize::try_from(ldc).is_ok(),
        "matmul: row stride {ldc} past isize::MAX"
    );
    let span = (m - 1)
        .checked_mul(ldc)
        .and_then(|v| v.checked_add(n))
        .expect("matmul: the output span overflows");
    assert!(
        c.len() >= span,
        "matmul: output length {} below the {m} x {n} span {span} at stride {ldc}",
        c.len()
    );
    if k == 0 {
        if !accumulate {
            for row in c[..span].chunks_mut(ldc) {
                row[..n].fill(0.0);
            }
        }
        return;
    }
    let (a_cs, a_rs) = a.strides();
    let (b_cs, b_rs) = b.strides();
    let parallelism = if m.saturating_mul(n).saturating_mul(k) >= 1 << 15 {
        Parallelism::Rayon(0)
    } else {
        Parallelism::None
    };
    // SAFETY: every pointer covers the matrix its dimensions and strides describe: `c` holds
    // at least (m-1)*ldc + n elements (checked, without overflow) and is addressed with
    // strides (1, ldc), ldc >= n, so the m rows of n columns stay inside it and do not
    // overlap; `a` and `b` hold exactly rows*cols elements (checked without overflow in
    // `Mat::new`, the only way to build a `Mat`) and their strides address only those. Slice
    // lengths are at most isize::MAX, so the strides convert to isize exactly (`ldc` is
    // checked to, for the one-row case where it need not fit in `c`). `c` is a
    // unique borrow, so it aliases neither input.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            ldc as isize,
            accumulate,
            a.data.as_ptr(),
            a_cs,
            a_rs,
            b.data.as_ptr(),
            b_cs,
            b_rs,
            if accumulate { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// `y[r, :] += bias` for every row of `y (rows, bias.len())`.
pub fn add_row_bias(y: &mut [f32], bias: &[f32]) {
    if bias.is_empty() {
        return;
    }
    for row in y.chunks_mut(bias.len()) {
        row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
    }
}

/// The activation fused after a product (the C++ epilogue codes 0-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Act {
    /// No activation (code 0; also what any unknown code means).
    #[default]
    None,
    /// `max(x, 0)` (code 1).
    Relu,
    /// tanh-GELU (code 2).
    Gelu,
    /// erf-GELU (code 3).
    GeluExact,
    /// `x sigmoid(x)` (code 4).
    Silu,
    /// `x sigmoid(1.702 x)` (code 5).
    QuickGelu,
}

impl Act {
    /// The C++ epilogue code.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The activation of a C++ epilogue code; unknown codes are [`Act::None`], as there.
    pub fn from_code(code: u32) -> Act {
        match code {
            1 => Act::Relu,
            2 => Act::Gelu,
            3 => Act::GeluExact,
            4 => Act::Silu,
            5 => Act::QuickGelu,
            _ => Act::None,
        }
    }

    /// The activation of one value.
    pub fn apply(self, v: f32) -> f32 {
        match self {
            Act::None => v,
            Act::Relu => act::relu(v),
            Act::Gelu => act::gelu(v),
            Act::GeluExact => act::gelu_exact(v),
            Act::Silu => act::silu(v),
            Act::QuickGelu => act::quick_gelu(v),
        }
    }
}

/// `C[z] = act(op(A[z]) . op(B[z]) (+ C[z]) + bias)` for `z < batch`: `op(A)` is `m x k`,
/// `op(B)` is `k x n`; stored operands are read transposed when asked; batch entries sit
/// `strides` elements apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gemm {
    /// Rows of `C` (and of `op(A)`).
    pub m: usize,
    /// Columns of `C` (and of `op(B)`).
    pub n: usize,
    /// The inner dimension.
    pub k: usize,
    /// `A` is stored `k x m` and read transposed.
    pub trans_a: bool,
    /// `B` is stored `n x k` and read transposed.
    pub trans_b: bool,
    /// `C += ...` instead of `C = ...`.
    pub accumulate: bool,
    /// Independent products.
    pub batch: usize,
    /// Element strides between consecutive batch entries of `A`, `B`, `C`.
    pub strides: (usize, usize, usize),
    /// The activation applied last.
    pub act: Act,
}

/// Rows of `d` from `at` as a stored `rows x cols` matrix, read transposed when `trans`.
fn view(d: &[f32], at: usize, (rows, cols): (usize, usize), trans: bool) -> Mat<'_> {
    let m = Mat::new(&d[at..at + rows * cols], rows, cols);
    if trans {
        m.t()
    } else {
        m
    }
}

/// The product [`Gemm`] describes, with an optional bias of `n` elements added to every row
/// before the activation. `packed_b`, when given, is `b` packed for a product with its
/// shape ([`PackedRhs::transposed`] of the stored `n x k` matrix, so only with `trans_b`,
/// and one matrix for every batch entry); it serves every product of more rows than the
/// dot-product path takes, and is trusted to hold `b`'s elements.
///
/// # Panics
/// When a batch entry the dimensions and strides reach lies outside its slice, or
/// `packed_b` does not fit the product (or the batch entries have `B`s of their own).
pub fn gemm(
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    c: &mut [f32],
    g: Gemm,
    packed_b: Option<&PackedRhs>,
) {
    let (m, n, k) = (g.m, g.n, g.k);
    let stored =
        |trans: bool, rows: usize, cols: usize| if trans { (cols, rows) } else { (rows, cols) };
    let (a_shape, b_shape) = (stored(g.trans_a, m, k), stored(g.trans_b, k, n));
    for z in 0..g.batch {
        let out = &mut c[z * g.strides.2..z * g.strides.2 + m * n];
        if let Some(packed) = packed_b.filter(|_| m > crate::packed::dots::MAX_ROWS) {
            assert!(
                !g.trans_a && g.trans_b && packed.fits(n, k) && (g.batch == 1 || g.strides.1 == 0),
                "gemm: the packed right operand does not fit the product"
            );
            let az = z * g.strides.0;
            crate::packed::matmul_packed(&a[az..az + m * k], m, packed, out, g.accumulate);
        } else if !g.trans_a && g.trans_b && m <= crate::packed::dots::MAX_ROWS {
            // A few rows against a weight stored as rows: dot products of contiguous rows.
            let (az, bz) = (z * g.strides.0, z * g.strides.1);
            crate::packed::dots::a_bt(
                &a[az..az + m * k],
                &b[bz..bz + n * k],
                out,
                (m, n, k),
                g.accumulate,
            );
        } else {
            matmul(
                view(a, z * g.strides.0, a_shape, g.trans_a),
                view(b, z * g.strides.1, b_shape, g.trans_b),
                out,
                g.accumulate,
            );
        }
        if let Some(b) = bias {
            add_row_bias(out, b);
        }
        if g.act != Act::None {
            out.iter_mut().for_each(|v| *v = g.act.apply(*v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut c = vec![0.0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                for p in 0..k {
                    c[i * n + j] += a[i * k + p] as f64 * b[p * n + j] as f64;
                }
            }
        }
        c.into_iter().map(|v| v as f32).collect()
    }

    fn transpose(x: &[f32], r: usize, c: usize) -> Vec<f32> {
        (0..c)
            .flat_map(|j| (0..r).map(move |i| x[i * c + j]))
            .collect()
    }

    #[test]
    fn products_and_transposes_match_a_float64_reference() {
        let (m, k, n) = (37, 53, 29);
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i * 5) % 11) as f32 * 0.25).collect();
        let want = naive(&a, &b, m, k, n);
        let mut c = vec![9.0; m * n];
        matmul(Mat::new(&a, m, k), Mat::new(&b, k, n), &mut c, false);
        assert_eq!(c, want);
        let at = transpose(&a, m, k);
        let bt = transpose(&b, k, n);
        let mut c2 = vec![0.0; m * n];
        matmul(
            Mat::new(&at, k, m).t(),
            Mat::new(&bt, n, k).t(),
            &mut c2,
            false,
        );
        assert_eq!(c2, want);
        matmul(Mat::new(&a, m, k), Mat::new(&b, k, n), &mut c2, true);
        assert_eq!(c2, want.iter().map(|v| 2.0 * v).collect::<Vec<_>>());
        let mut z = vec![5.0; 6];
        matmul(Mat::new(&[], 2, 0), Mat::new(&[], 0, 3), &mut z, false);
        assert_eq!(z, vec![0.0; 6]);
    }

    #[test]
    fn wrapping_sizes_are_refused_before_the_product() {
        // 2^63 * 2 wraps to 0 in unchecked arithmetic: an empty slice must not pass.
        let huge = std::panic::catch_unwind(|| Mat::new(&[], 1 << 63, 2));
        assert!(huge.is_err(), "a wrapping shape must be refused");
        let one = [1.0f32];
        let a = Mat::new(&one, 1, 1);
        let mut c = [0.0f32; 1];
        let mut empty: [f32; 0] = [];
        // Output length checked with the real product.
        assert!(std::panic::catch_unwind(move || matmul(a, a, &mut empty, false)).is_err());
        matmul(a, a, &mut c, false);
        assert_eq!(c, [1.0]);
    }
}
