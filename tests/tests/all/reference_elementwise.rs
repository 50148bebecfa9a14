//! Element-wise ops against float64 references written here from each op's definition (not
//! the CPU crate's code), on every device and float dtype, through every public form: the
//! allocating one, `_out` / `_forward` into a stale destination, and in place.

use brotensor::{ops, Dtype, Result, Tensor};
use brotensor_tests::reference::{all_forms, map1, one, stale, Reference};
use brotensor_tests::{reference_with, Check, Input};

/// Not a multiple of the vector width: the scalar path.
const ODD: (usize, usize) = (37, 19);
/// A multiple of 4 spanning a few cubes: the vectorized path.
const VEC: (usize, usize) = (16, 64);

fn two((r, c): (usize, usize), (lo, hi): (f32, f32), (lo2, hi2): (f32, f32)) -> [Input; 2] {
    [Input::new(r, c, lo, hi), Input::new(r, c, lo2, hi2)]
}

/// `f` applied to the elements of the first two inputs, pairwise.
fn map2(f: impl Fn(f64, f64) -> f64 + 'static) -> Reference {
    Box::new(move |v| v[0].iter().zip(&v[1]).map(|(&a, &b)| f(a, b)).collect())
}

/// Equality: the op's result is exactly representable in every dtype.
fn exact(_: Dtype) -> (f32, f32) {
    (0.0, 0.0)
}

const EXACT: Check = Check {
    dtypes: &[Dtype::F32, Dtype::F16, Dtype::BF16],
    same_dtype: true,
    tol: Some(exact),
};

/// A scalar function of two arguments in f64.
type F2 = fn(f64, f64) -> f64;
/// An input range.
type Range = (f32, f32);
type Bin = fn(&Tensor, &Tensor) -> Result<Tensor>;
type BinOut = fn(&Tensor, &Tensor, &mut Tensor) -> Result<()>;
type BinInPlace = fn(&mut Tensor, &Tensor) -> Result<()>;

#[test]
fn tensor_tensor_arithmetic_all_forms() {
    let cases: [(&str, Bin, BinOut, BinInPlace, F2, Range); 4] = [
        (
            "add",
            ops::add,
            ops::add_out,
            Tensor::add_,
            |a, b| a + b,
            (-2.0, 2.0),
        ),
        (
            "sub",
            ops::sub,
            ops::sub_out,
            Tensor::sub_,
            |a, b| a - b,
            (-2.0, 2.0),
        ),
        (
            "mul",
            ops::mul,
            ops::mul_out,
            Tensor::mul_,
            |a, b| a * b,
            (-2.0, 2.0),
        ),
        (
            "div",
            ops::div,
            ops::div_out,
            Tensor::div_,
            |a, b| a / b,
            (0.5, 2.0),
        ),
    ];
    for (i, (name, alloc, out, inplace, f, b_range)) in cases.into_iter().enumerate() {
        let seed = 0x5100 + 0x10 * i as u64;
        reference_with(
            name,
            seed,
            &two(VEC, (-2.0, 2.0), b_range),
            Check::default(),
            move |t| alloc(&t[0], &t[1]),
            map2(f),
        );
        reference_with(
            &format!("{name}_out"),
            seed + 1,
            &two(ODD, (-2.0, 2.0), b_range),
            Check::default(),
            move |t| {
                let mut y = stale(&t[0])?;
                out(&t[0], &t[1], &mut y)?;
                Ok(y)
            },
            map2(f),
        );
        reference_with(
            &format!("{name}_"),
            seed + 2,
            &two(VEC, (-2.0, 2.0), b_range),
            Check::default(),
            move |t| {
                let mut y = t[0].clone();
                inplace(&mut y, &t[1])?;
                Ok(y)
            },
            map2(f),
        );
    }
}

#[test]
fn cpp_in_place_names() {
    let cases: [(&str, BinInPlace, F2); 3] = [
        ("add_inplace", ops::add_inplace, |y, x| y + x),
        ("add_inplace_batched", ops::add_inplace_batched, |y, x| {
            y + x
        }),
        ("mul_inplace", ops::mul_inplace, |y, x| y * x),
    ];
    for (i, (name, f, r)) in cases.into_iter().enumerate() {
        reference_with(
            name,
            0x5200 + i as u64,
            &two(ODD, (-1.5, 1.5), (-1.5, 1.5)),
            Check::default(),
            move |t| {
                let mut y = t[0].clone();
                f(&mut y, &t[1])?;
                Ok(y)
            },
            map2(r),
        );
    }
    reference_with(
        "axpby_inplace",
        0x5210,
        &two(VEC, (-1.0, 1.0), (-1.0, 1.0)),
        Check::default(),
        |t| {
            let mut y = t[0].clone();
            ops::axpby_inplace(&mut y, &t[1], 0.75, -1.25)?;
            Ok(y)
        },
        map2(|y, x| 0.75 * y - 1.25 * x),
    );
    reference_with(
        "add_scalar_inplace",
        0x5211,
        &one(ODD, -1.0, 1.0),
        Check::default(),
        |t| {
            let mut y = t[0].clone();
            ops::add_scalar_inplace(&mut y, -0.75)?;
            Ok(y)
        },
        map1(|y| y - 0.75),
    );
    reference_with(
        "scale_inplace",
        0x5212,
        &one(VEC, -1.0, 1.0),
        Check::default(),
        |t| {
            let mut y = t[0].clone();
            ops::scale_inplace(&mut y, 1.5)?;
            Ok(y)
        },
        map1(|y| 1.5 * y),
    );
}

type Scal = fn(&Tensor, f32) -> Result<Tensor>;
type ScalOut = fn(&Tensor, f32, &mut Tensor) -> Result<()>;
type ScalInPlace = fn(&mut Tensor, f32) -> Result<()>;

#[test]
fn tensor_scalar_arithmetic_all_forms() {
    // Scalars that are not exact in binary, so the op's use of `s` in FP32 is visible.
    let cases: [(&str, Scal, ScalOut, ScalInPlace, F2, f32); 4] = [
        (
            "add_scalar",
            ops::add_scalar,
            ops::add_scalar_out,
            Tensor::add_scalar_,
            |x, s| x + s,
            0.3,
        ),
        (
            "sub_scalar",
            ops::sub_scalar,
            ops::sub_scalar_out,
            Tensor::sub_scalar_,
            |x, s| x - s,
            -0.7,
        ),
        (
            "mul_scalar",
            ops::mul_scalar,
            ops::mul_scalar_out,
            Tensor::mul_scalar_,
            |x, s| x * s,
            -2.9,
        ),
        (
            "div_scalar",
            ops::div_scalar,
            ops::div_scalar_out,
            Tensor::div_scalar_,
            |x, s| x / s,
            3.1,
        ),
    ];
    for (i, (name, alloc, out, inplace, f, s)) in cases.into_iter().enumerate() {
        let seed = 0x5300 + 0x10 * i as u64;
        let sf = f64::from(s);
        reference_with(
            name,
            seed,
            &one(ODD, -2.0, 2.0),
            Check::default(),
            move |t| alloc(&t[0], s),
            map1(move |x| f(x, sf)),
        );
        reference_with(
            &format!("{name}_out"),
            seed + 1,
            &one(VEC, -2.0, 2.0),
            Check::default(),
            move |t| {
                let mut y = stale(&t[0])?;
                out(&t[0], s, &mut y)?;
                Ok(y)
            },
            map1(move |x| f(x, sf)),
        );
        reference_with(
            &format!("{name}_"),
            seed + 2,
            &one(ODD, -2.0, 2.0),
            Check::default(),
            move |t| {
                let mut y = t[0].clone();
                inplace(&mut y, s)?;
                Ok(y)
            },
            map1(move |x| f(x, sf)),
        );
    }
}

#[test]
fn math_functions_all_forms() {
    let d = Check::default();
    all_forms(
        "exp",
        0x5400,
        (VEC, ODD),
        (-4.0, 4.0),
        (ops::exp_forward, ops::exp, Tensor::exp_),
        f64::exp,
        d,
    );
    all_forms(
        "log",
        0x5410,
        (VEC, ODD),
        (0.05, 8.0),
        (ops::log_forward, ops::log, Tensor::log_),
        f64::ln,
        d,
    );
    all_forms(
        "sin",
        0x5420,
        (VEC, ODD),
        (-6.0, 6.0),
        (ops::sin_forward, ops::sin, Tensor::sin_),
        f64::sin,
        d,
    );
    all_forms(
        "cos",
        0x5430,
        (VEC, ODD),
        (-6.0, 6.0),
        (ops::cos_forward, ops::cos, Tensor::cos_),
        f64::cos,
        d,
    );
    all_forms(
        "rsqrt",
        0x5440,
        (VEC, ODD),
        (0.05, 9.0),
        (ops::rsqrt_forward, ops::rsqrt, Tensor::rsqrt_),
        |x| 1.0 / x.sqrt(),
        d,
    );
    // In [-20, 20) the 16-bit grids hold many exact halves (BF16 steps by 1/8 above 16), so
    // ties to even are exercised; the result is an integer, exact in every dtype.
    all_forms(
        "round",
        0x5450,
        (VEC, ODD),
        (-20.0, 20.0),
        (ops::round_forward, ops::round, Tensor::round_),
        f64::round_ties_even,
        EXACT,
    );
}

#[test]
fn round_ties_to_even_in_f32() {
    // Inputs in [-2^20, 2^20) on a grid of 1/8 (2^21 * k / 2^24): one in eight is a tie.
    reference_with(
        "round ties f32",
        0x5460,
        &one(ODD, -1_048_576.0, 1_048_576.0),
        Check {
            dtypes: &[Dtype::F32],
            ..EXACT
        },
        |t| ops::round(&t[0]),
        map1(f64::round_ties_even),
    );
}

#[test]
fn math_gradients() {
    let grads: [(&str, BinOut, Range, F2); 5] = [
        ("exp_backward", ops::exp_backward, (-3.0, 3.0), |x, dy| {
            dy * x.exp()
        }),
        ("log_backward", ops::log_backward, (0.1, 4.0), |x, dy| {
            dy / x
        }),
        ("sin_backward", ops::sin_backward, (-6.0, 6.0), |x, dy| {
            dy * x.cos()
        }),
        ("cos_backward", ops::cos_backward, (-6.0, 6.0), |x, dy| {
            -dy * x.sin()
        }),
        // Reads the forward output y = 1/sqrt(x): d/dx x^-1/2 = -x^-3/2 / 2 = -y^3 / 2.
        (
            "rsqrt_backward",
            ops::rsqrt_backward,
            (0.2, 2.0),
            |y, dy| -0.5 * dy * y * y * y,
        ),
    ];
    for (i, (name, f, range, r)) in grads.into_iter().enumerate() {
        reference_with(
            name,
            0x5500 + i as u64,
            &two(if i % 2 == 0 { VEC } else { ODD }, range, (-1.0, 1.0)),
            Check::default(),
            move |t| {
                // Input gradients are overwritten: a stale destination must not leak through.
                let mut dx = stale(&t[0])?;
                f(&t[0], &t[1], &mut dx)?;
                Ok(dx)
            },
            map2(r),
        );
    }
    reference_with(
        "round_backward",
        0x5510,
        &one(ODD, -1.0, 1.0),
        Check::default(),
        |t| {
            let mut dx = stale(&t[0])?;
            ops::round_backward(&t[0], &mut dx)?;
            Ok(dx)
        },
        map1(|dy| dy),
    );
}

#[test]
fn clamp_and_fill() {
    reference_with(
        "clamp",
        0x5600,
        &one(VEC, -3.0, 3.0),
        EXACT,
        |t| {
            let mut y = t[0].clone();
            ops::clamp(&mut y, -1.0, 0.5)?;
            Ok(y)
        },
        map1(|x| x.clamp(-1.0, 0.5)),
    );
    reference_with(
        "clamp_out",
        0x5601,
        &one(ODD, -3.0, 3.0),
        EXACT,
        |t| {
            let mut y = stale(&t[0])?;
            ops::clamp_out(&t[0], -0.5, 2.0, &mut y)?;
            Ok(y)
        },
        map1(|x| x.clamp(-0.5, 2.0)),
    );
    // The documented `lo > hi` rule: everything becomes `hi`.
    reference_with(
        "clamp lo > hi",
        0x5602,
        &one(ODD, -3.0, 3.0),
        EXACT,
        |t| {
            let mut y = t[0].clone();
            ops::clamp(&mut y, 1.0, -0.5)?;
            Ok(y)
        },
        map1(|_| -0.5),
    );
    // 0.3 is not exact in any dtype: the fill value is rounded to the tensor's dtype.
    reference_with(
        "fill",
        0x5603,
        &one(ODD, -3.0, 3.0),
        Check::default(),
        |t| {
            let mut y = t[0].clone();
            ops::fill(&mut y, 0.3)?;
            Ok(y)
        },
        map1(|_| 0.3),
    );
}

/// `x` rounded to nearest, ties to even, on a binary floating-point grid with `mant` fraction
/// bits, smallest normal exponent `emin` (a fixed quantum below it: subnormals) and largest
/// finite value `max` (beyond it, after rounding: infinity).
fn round_to_grid(x: f64, mant: i32, emin: i32, max: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    // The unbiased binary exponent of a normal f64.
    let e = ((x.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let quantum = 2f64.powi(e.max(emin) - mant);
    let r = (x / quantum).round_ties_even() * quantum;
    if r.abs() > max {
        f64::INFINITY.copysign(x)
    } else {
        r
    }
}

fn to_f16_grid(x: f64) -> f64 {
    round_to_grid(x, 10, -14, 65504.0)
}

fn to_bf16_grid(x: f64) -> f64 {
    round_to_grid(x, 7, -126, (2.0 - 2f64.powi(-7)) * 2f64.powi(127))
}

#[test]
fn cast_and_to_dtype() {
    let from = |dtype: &'static [Dtype]| Check {
        dtypes: dtype,
        same_dtype: false,
        tol: Some(exact),
    };
    const F32: &[Dtype] = &[Dtype::F32];
    const F16: &[Dtype] = &[Dtype::F16];
    const BF16: &[Dtype] = &[Dtype::BF16];
    let cast = |to: Dtype| {
        move |t: &[Tensor]| {
            let mut y = stale(&t[0])?;
            ops::cast(&t[0], &mut y, to)?;
            assert_eq!(y.dtype(), to);
            Ok(y)
        }
    };
    // F32 -> F16: normals, values past the largest finite F16 (65504; >= 65520 overflows),
    // and subnormals (below 2^-14, a quantum of 2^-24).
    for (i, (lo, hi)) in [(-100.0, 100.0), (-70000.0, 70000.0), (-1e-4, 1e-4)]
        .into_iter()
        .enumerate()
    {
        reference_with(
            &format!("cast F32->F16 in [{lo}, {hi})"),
            0x5700 + i as u64,
            &one(ODD, lo, hi),
            from(F32),
            cast(Dtype::F16),
            map1(to_f16_grid),
        );
    }
    reference_with(
        "cast F32->BF16",
        0x5710,
        &one(VEC, -1000.0, 1000.0),
        from(F32),
        cast(Dtype::BF16),
        map1(to_bf16_grid),
    );
    reference_with(
        "to_dtype F32->BF16",
        0x5711,
        &one(ODD, -3e30, 3e30),
        from(F32),
        |t| t[0].to_dtype(Dtype::BF16),
        map1(to_bf16_grid),
    );
    // Widening is exact; across the 16-bit types F16's 10 fraction bits meet BF16's 7 and
    // BF16's range meets F16's (values above 65504 overflow).
    reference_with(
        "cast F16->F32",
        0x5720,
        &one(ODD, -1000.0, 1000.0),
        from(F16),
        cast(Dtype::F32),
        map1(|x| x),
    );
    reference_with(
        "cast BF16->F32",
        0x5721,
        &one(ODD, -1e30, 1e30),
        from(BF16),
        |t| t[0].to_dtype(Dtype::F32),
        map1(|x| x),
    );
    reference_with(
        "cast F16->BF16",
        0x5722,
        &one(VEC, -1000.0, 1000.0),
        from(F16),
        cast(Dtype::BF16),
        map1(to_bf16_grid),
    );
    reference_with(
        "cast BF16->F16",
        0x5723,
        &one(VEC, -70000.0, 70000.0),
        from(BF16),
        cast(Dtype::F16),
        map1(to_f16_grid),
    );
    // The same dtype is a copy.
    reference_with(
        "to_dtype same dtype",
        0x5724,
        &one(ODD, -5.0, 5.0),
        EXACT,
        |t| t[0].to_dtype(t[0].dtype()),
        map1(|x| x),
    );
}

#[test]
fn channel_bias() {
    // y holds C = 12 channels of L = 33 positions, shaped 4 x 99 so that its rows are not
    // its channels.
    let (c, l) = (12usize, 33usize);
    reference_with(
        "add_channel_bias_inplace",
        0x5800,
        &[Input::new(4, 99, -1.0, 1.0), Input::new(c, 1, -1.0, 1.0)],
        Check::default(),
        move |t| {
            let mut y = t[0].clone();
            ops::add_channel_bias_inplace(&mut y, &t[1], c, l)?;
            Ok(y)
        },
        move |v| (0..c * l).map(|i| v[0][i] + v[1][i / l]).collect(),
    );
}

#[test]
fn threshold_to_bytes() {
    // I8 results come back as F32 through the host: the harness reads float tensors.
    reference_with(
        "threshold_u8",
        0x5900,
        &one(ODD, -1.0, 1.0),
        Check {
            dtypes: &[Dtype::F32, Dtype::F16],
            same_dtype: false,
            tol: Some(exact),
        },
        |t| {
            let mut y = stale(&t[0])?;
            ops::threshold_u8(&t[0], 0.25, &mut y)?;
            assert_eq!(y.dtype(), Dtype::I8);
            let v: Vec<f32> = y.to_vec::<i8>()?.into_iter().map(f32::from).collect();
            Tensor::from_slice_on(t[0].device(), &v, y.rows(), y.cols())
        },
        map1(|x| if x > 0.25 { 1.0 } else { 0.0 }),
    );
}
