//! Building blocks of the float64 reference tests: the math written from each op's
//! definition (never the CPU crate's code) and the tensors those tests compare through.

use brotensor::ops::{self, Act};
use brotensor::{Result, Tensor};

use crate::Input;

/// A float64 reference: the inputs (row-major, after rounding through the dtype) to the
/// expected output (row-major).
pub type Reference = Box<dyn Fn(&[Vec<f64>]) -> Vec<f64>>;

/// One input of `(rows, cols)` uniform in `[lo, hi)`.
pub fn one((r, c): (usize, usize), lo: f32, hi: f32) -> [Input; 1] {
    [Input::new(r, c, lo, hi)]
}

/// `f` applied to every element of the first input.
pub fn map1(f: impl Fn(f64) -> f64 + 'static) -> Reference {
    Box::new(move |v| v[0].iter().map(|&x| f(x)).collect())
}

/// A committed destination larger than `like` (two rows and three columns more) and full of
/// 7s: an op writing into it must resize it and overwrite every element of its result.
pub fn stale(like: &Tensor) -> Result<Tensor> {
    let mut t = Tensor::zeros_on(
        like.device(),
        like.rows() + 2,
        like.cols() + 3,
        like.dtype(),
    )?;
    ops::fill(&mut t, 7.0)?;
    Ok(t)
}

/// `t` seen as one row, so that a column vector's elements share one scale in the comparison.
pub fn as_row(mut t: Tensor) -> Result<Tensor> {
    let n = t.numel();
    t.reshape_(&[1, n])?;
    Ok(t)
}

/// `erf(x)` to f64 accuracy: for `|x| <= 3` the series `2/sqrt(pi) e^(-x^2) sum_n 2^n
/// x^(2n+1) / (1 3 5 ... (2n+1))`, whose terms all have `x`'s sign (no cancellation); beyond,
/// one minus the continued fraction of `erfc`.
pub fn erf(x: f64) -> f64 {
    let pi = std::f64::consts::PI;
    if x.abs() > 3.0 {
        let a = x.abs();
        let mut t = a;
        for k in (1..=80).rev() {
            t = a + (k as f64 / 2.0) / t;
        }
        return (1.0 - (-a * a).exp() / (pi.sqrt() * t)).copysign(x);
    }
    let (mut term, mut sum, mut n) = (x, x, 0.0);
    while term.abs() > 1e-17 * sum.abs() {
        n += 1.0;
        term *= 2.0 * x * x / (2.0 * n + 1.0);
        sum += term;
    }
    2.0 / pi.sqrt() * (-x * x).exp() * sum
}

/// The matmul epilogue activations from their definitions (C++ codes 0-5).
pub fn epilogue(act: Act, x: f64) -> f64 {
    let sigmoid = |v: f64| 1.0 / (1.0 + (-v).exp());
    match act {
        Act::None => x,
        Act::Relu => x.max(0.0),
        Act::Gelu => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        Act::GeluExact => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        Act::Silu => x * sigmoid(x),
        Act::QuickGelu => x * sigmoid(1.702 * x),
    }
}

/// `y = f(x)` as `fwd(x, y)` into a stale destination.
pub type Fwd = fn(&Tensor, &mut Tensor) -> Result<()>;
/// `f(x)` into a new tensor.
pub type Alloc = fn(&Tensor) -> Result<Tensor>;
/// `x = f(x)` in place.
pub type InPlace = fn(&mut Tensor) -> Result<()>;

/// The three forms of a point-wise function against the float64 `f`, on inputs in
/// `[lo, hi)`: `_forward` into a stale destination of shape `a`, the allocating form on
/// shape `b`, in place on shape `a` (seeds `seed`, `seed + 1`, `seed + 2`).
pub fn all_forms(
    name: &str,
    seed: u64,
    (a, b): ((usize, usize), (usize, usize)),
    (lo, hi): (f32, f32),
    (fwd, alloc, inplace): (Fwd, Alloc, InPlace),
    f: fn(f64) -> f64,
    check: crate::Check,
) {
    crate::reference_with(
        &format!("{name}_forward"),
        seed,
        &one(a, lo, hi),
        check,
        move |t| {
            let mut y = stale(&t[0])?;
            fwd(&t[0], &mut y)?;
            Ok(y)
        },
        map1(f),
    );
    crate::reference_with(
        name,
        seed + 1,
        &one(b, lo, hi),
        check,
        move |t| alloc(&t[0]),
        map1(f),
    );
    crate::reference_with(
        &format!("{name}_"),
        seed + 2,
        &one(a, lo, hi),
        check,
        move |t| {
            let mut y = t[0].clone();
            inplace(&mut y)?;
            Ok(y)
        },
        map1(f),
    );
}

/// Central finite differences of `<dy, f(v)>` with respect to every element of the inputs
/// `which` of `v`, in float64 (step `1e-5 (1 + |v|)`): the reference gradients of an op whose
/// float64 forward `f` is written in the test.
pub fn finite_differences(
    v: &[Vec<f64>],
    dy: &[f64],
    which: &[usize],
    f: impl Fn(&[Vec<f64>]) -> Vec<f64>,
) -> Vec<Vec<f64>> {
    let loss = |v: &[Vec<f64>]| f(v).iter().zip(dy).map(|(a, b)| a * b).sum::<f64>();
    let mut work = v.to_vec();
    which
        .iter()
        .map(|&k| {
            (0..v[k].len())
                .map(|i| {
                    let h = 1e-5 * (1.0 + v[k][i].abs());
                    work[k][i] = v[k][i] + h;
                    let up = loss(&work);
                    work[k][i] = v[k][i] - h;
                    let down = loss(&work);
                    work[k][i] = v[k][i];
                    (up - down) / (2.0 * h)
                })
                .collect()
        })
        .collect()
}
