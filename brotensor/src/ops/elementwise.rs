//! Element-wise ops: arithmetic (tensor-tensor and tensor-scalar, each allocating, `_out`
//! and in place), the C++ in-place names, math functions with their gradients, `cast` and
//! `fill`.
//!
//! Shape contract: every operand has the same `(rows, cols)` and dtype. On the CPU the
//! arithmetic dtype is F32; GPUs also compute F16 and BF16 (where
//! [`supports_dtype`](crate::supports_dtype) says so), with FP32 math inside.

use super::algebra::{in_place, wide_map};
use super::{check_float, check_same, dispatch, input, updated, written};
use crate::backend::{Binary, ComplexMap, FloatMap, Src, Unary};
use crate::{Dtype, Error, Result, Tensor};

/// The tensor-algebra instructions of a math function, for F64, C64 and C128 operands.
fn wide_unary(op: Unary) -> (Option<FloatMap>, Option<ComplexMap>) {
    let (f, c) = match op {
        Unary::Exp => (FloatMap::Exp, ComplexMap::Exp),
        Unary::Log => (FloatMap::Log, ComplexMap::Log),
        Unary::Sin => (FloatMap::Sin, ComplexMap::Sin),
        Unary::Cos => (FloatMap::Cos, ComplexMap::Cos),
        Unary::Rsqrt => (FloatMap::Rsqrt, ComplexMap::Rsqrt),
        Unary::Tanh => (FloatMap::Tanh, ComplexMap::Tanh),
        _ => return (None, None),
    };
    (Some(f), Some(c))
}

/// The tensor-algebra instructions of an arithmetic op, for F64, C64 and C128 operands.
fn wide_binary(op: Binary) -> (Option<FloatMap>, Option<ComplexMap>) {
    match op {
        Binary::Add => (Some(FloatMap::Add), Some(ComplexMap::Add)),
        Binary::Sub => (Some(FloatMap::Sub), Some(ComplexMap::Sub)),
        Binary::Mul => (Some(FloatMap::Mul), Some(ComplexMap::Mul)),
        Binary::Div => (Some(FloatMap::Div), Some(ComplexMap::Div)),
        _ => (None, None),
    }
}

/// `out = op(x; a, b)`, `out` resized to `x`.
pub(crate) fn unary_out(
    name: &'static str,
    op: Unary,
    x: &Tensor,
    out: &mut Tensor,
    (a, b): (f32, f32),
) -> Result<()> {
    if let Some(r) = wide_map(name, wide_unary(op), &[("x", x)], out) {
        return r;
    }
    let be = dispatch(name, &[input("x", x).float(), written("out", out)])?;
    be.out("out", out, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    be.unary(name, op, Src::Tensor(x), out, a, b)
}

/// `y = op(y; a, b)` in place.
pub(crate) fn unary_inplace(
    name: &'static str,
    op: Unary,
    y: &mut Tensor,
    (a, b): (f32, f32),
) -> Result<()> {
    if !y.dtype().is_float() {
        return in_place(y, |x, out| {
            wide_map(name, wide_unary(op), &[("x", x)], out)
                .unwrap_or_else(|| check_float_dtype(name, x))
        });
    }
    let be = dispatch(name, &[updated("y", y).float()])?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.unary(name, op, Src::Out, y, a, b)
}

/// The dtype error of an op that computes F32, F16 and BF16 only.
fn check_float_dtype(op: &'static str, x: &Tensor) -> Result<()> {
    Err(Error::Dtype {
        op,
        operand: "x",
        expected: "expected F32, F16 or BF16".into(),
        found: x.dtype(),
    })
}

/// `out = op(x, y; a, b)`, `out` resized to `x`.
pub(crate) fn binary_out(
    name: &'static str,
    op: Binary,
    (xn, x): (&'static str, &Tensor),
    (yn, y): (&'static str, &Tensor),
    out: &mut Tensor,
    (a, b): (f32, f32),
) -> Result<()> {
    let be = dispatch(
        name,
        &[input(xn, x).float(), input(yn, y), written("out", out)],
    )?;
    check_same(name, (yn, y), (xn, x))?;
    be.out("out", out, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    be.binary(name, op, Src::Tensor(x), Src::Tensor(y), out, a, b)
}

/// `y = op(y, x; a, b)` in place on `y`.
fn binary_inplace(
    name: &'static str,
    op: Binary,
    y: &mut Tensor,
    x: &Tensor,
    (a, b): (f32, f32),
) -> Result<()> {
    let be = dispatch(name, &[updated("y", y).float(), input("x", x)])?;
    check_same(name, ("x", x), ("y", y))?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.binary(name, op, Src::Out, Src::Tensor(x), y, a, b)
}

/// `out = op(a, b)` with numpy broadcasting: operands of different dims are broadcast to
/// their common shape (as stride-0 views, read without copying the smaller operand's
/// elements into a full-size buffer first where the device reads views directly).
fn arith_out(
    name: &'static str,
    op: Binary,
    a: &Tensor,
    b: &Tensor,
    out: &mut Tensor,
) -> Result<()> {
    if let Some(r) = wide_map(name, wide_binary(op), &[("a", a), ("b", b)], out) {
        return r;
    }
    let dense = |t: &Tensor| !t.is_committed() || t.layout().is_dense();
    if a.dims() == b.dims() && dense(a) && dense(b) {
        return binary_out(name, op, ("a", a), ("b", b), out, (0.0, 0.0));
    }
    let dims = crate::layout::broadcast_dims(name, a.dims(), b.dims())?;
    let (a, b) = (a.broadcast_to(&dims)?, b.broadcast_to(&dims)?);
    if arith_views(name, op, &a, &b, out)? {
        return Ok(());
    }
    binary_out(name, op, ("a", &a), ("b", &b), out, (0.0, 0.0))
}

/// [`arith_out`] on views of one dims that the backend reads in place (broadcast rows,
/// strided layouts); `Ok(false)` when it needs dense copies instead.
fn arith_views(
    name: &'static str,
    op: Binary,
    a: &Tensor,
    b: &Tensor,
    out: &mut Tensor,
) -> Result<bool> {
    if !a.is_committed() || !b.is_committed() {
        return Ok(false);
    }
    let be = super::Dispatched::on(
        name,
        super::declare(name, &[input("a", a), input("b", b), written("out", out)])?,
    )?;
    check_float(name, "a", a, be)?;
    super::check_dtypes_match(name, ("a", a), &[("b", b)])?;
    be.out("out", out, a.dims(), a.dtype())?;
    if a.numel() == 0 {
        return Ok(true);
    }
    be.binary_views(name, op, a, b, out)
}

/// `a = op(a, b)` in place, `b` broadcast to `a`'s dims (numpy rules).
fn arith_inplace(name: &'static str, op: Binary, a: &mut Tensor, b: &Tensor) -> Result<()> {
    if !a.dtype().is_float() {
        return in_place(a, |x, out| {
            wide_map(name, wide_binary(op), &[("a", x), ("b", b)], out)
                .unwrap_or_else(|| check_float_dtype(name, x))
        });
    }
    if a.dims() == b.dims() {
        return binary_inplace(name, op, a, b, (0.0, 0.0));
    }
    let b = b.broadcast_to(a.dims()).map_err(|_| {
        Error::shape(
            name,
            format!(
                "`b` ({}) does not broadcast to the in-place operand's {}",
                crate::layout::show_dims(b.dims(), "x"),
                crate::layout::show_dims(a.dims(), "x")
            ),
        )
    })?;
    binary_inplace(name, op, a, &b, (0.0, 0.0))
}

/// Defines the three forms of a tensor-tensor arithmetic op.
macro_rules! tensor_tensor {
    ($($math:literal: $alloc:ident, $out:ident, $inplace:ident => $op:ident;)*) => {$(
        #[doc = concat!("`", $math, "` into a new tensor on the operands' device. Dtypes must match; dims broadcast by numpy's rules (aligned at the end, each pair equal or 1).")]
        pub fn $alloc(a: &Tensor, b: &Tensor) -> Result<Tensor> {
            let mut out = Tensor::default();
            $out(a, b, &mut out)?;
            Ok(out)
        }

        #[doc = concat!("`", $math, "` into `out`, which is resized to the broadcast dims of `a` and `b` and keeps its allocation when it fits.")]
        pub fn $out(a: &Tensor, b: &Tensor, out: &mut Tensor) -> Result<()> {
            arith_out(stringify!($out), Binary::$op, a, b, out)
        }

        impl Tensor {
            #[doc = concat!("`", $math, "` in place on `self` (`a`); `b` must match its dtype and broadcast to its dims.")]
            pub fn $inplace(&mut self, b: &Tensor) -> Result<()> {
                arith_inplace(stringify!($inplace), Binary::$op, self, b)
            }
        }
    )*};
}

tensor_tensor! {
    "a + b": add, add_out, add_ => Add;
    "a - b": sub, sub_out, sub_ => Sub;
    "a * b": mul, mul_out, mul_ => Mul;
    "a / b": div, div_out, div_ => Div;
}

/// Defines the three forms of a tensor-scalar arithmetic op.
macro_rules! tensor_scalar {
    ($($math:literal: $alloc:ident, $out:ident, $inplace:ident => $op:ident;)*) => {$(
        #[doc = concat!("`", $math, "` into a new tensor.")]
        pub fn $alloc(x: &Tensor, s: f32) -> Result<Tensor> {
            let mut out = Tensor::default();
            $out(x, s, &mut out)?;
            Ok(out)
        }

        #[doc = concat!("`", $math, "` into `out`, which is resized to `x`.")]
        pub fn $out(x: &Tensor, s: f32, out: &mut Tensor) -> Result<()> {
            unary_out(stringify!($out), Unary::$op, x, out, (s, 0.0))
        }

        impl Tensor {
            #[doc = concat!("`", $math, "` in place on `self` (`x`).")]
            pub fn $inplace(&mut self, s: f32) -> Result<()> {
                unary_inplace(stringify!($inplace), Unary::$op, self, (s, 0.0))
            }
        }
    )*};
}

tensor_scalar! {
    "x + s": add_scalar, add_scalar_out, add_scalar_ => AddScalar;
    "x - s": sub_scalar, sub_scalar_out, sub_scalar_ => SubScalar;
    "x * s": mul_scalar, mul_scalar_out, mul_scalar_ => MulScalar;
    "x / s": div_scalar, div_scalar_out, div_scalar_ => DivScalar;
}

/// Defines a math function: `<name>_forward(x, y)` (the body, resizing `y`), the allocating
/// `<name>(x)` and the in-place `Tensor::<name>_()`.
macro_rules! math_fn {
    ($($math:literal: $fwd:ident, $alloc:ident, $inplace:ident => $op:ident;)*) => {$(
        #[doc = concat!("`y = ", $math, "`; `y` is resized to `x` (shape and dtype).")]
        pub fn $fwd(x: &Tensor, y: &mut Tensor) -> Result<()> {
            unary_out(stringify!($fwd), Unary::$op, x, y, (0.0, 0.0))
        }

        #[doc = concat!("`", $math, "` into a new tensor.")]
        pub fn $alloc(x: &Tensor) -> Result<Tensor> {
            let mut y = Tensor::default();
            $fwd(x, &mut y)?;
            Ok(y)
        }

        impl Tensor {
            #[doc = concat!("`x = ", $math, "` in place.")]
            pub fn $inplace(&mut self) -> Result<()> {
                unary_inplace(stringify!($inplace), Unary::$op, self, (0.0, 0.0))
            }
        }
    )*};
}

math_fn! {
    "e^x": exp_forward, exp, exp_ => Exp;
    "ln x (0 gives -inf, negatives NaN)": log_forward, log, log_ => Log;
    "sin x": sin_forward, sin, sin_ => Sin;
    "cos x": cos_forward, cos, cos_ => Cos;
    "1/sqrt(x)": rsqrt_forward, rsqrt, rsqrt_ => Rsqrt;
    "round(x), half to even": round_forward, round, round_ => Round;
}

/// Defines a gradient `<name>_backward(p, dy, dx)`: `dx` is overwritten (resized to `dy`).
macro_rules! math_grad {
    ($($math:literal: $bwd:ident($p:ident) => $op:ident;)*) => {$(
        #[doc = concat!("`dx = ", $math, "`; `", stringify!($p), "` and `dy` must match; `dx` is overwritten.")]
        pub fn $bwd($p: &Tensor, dy: &Tensor, dx: &mut Tensor) -> Result<()> {
            binary_out(
                stringify!($bwd),
                Binary::$op,
                (stringify!($p), $p),
                ("dy", dy),
                dx,
                (0.0, 0.0),
            )
        }
    )*};
}

math_grad! {
    "dy * e^x (x the forward input)": exp_backward(x) => ExpBackward;
    "dy / x (x the forward input)": log_backward(x) => LogBackward;
    "dy * cos x (x the forward input)": sin_backward(x) => SinBackward;
    "-dy * sin x (x the forward input)": cos_backward(x) => CosBackward;
    "-0.5 * dy * y^3 (y the forward output)": rsqrt_backward(y) => RsqrtBackward;
}

/// Straight-through gradient of round: `dx = dy` (resized to `dy`).
pub fn round_backward(dy: &Tensor, dx: &mut Tensor) -> Result<()> {
    unary_out("round_backward", Unary::Identity, dy, dx, (0.0, 0.0))
}

/// `y += x` (C++ `add_inplace`).
pub fn add_inplace(y: &mut Tensor, x: &Tensor) -> Result<()> {
    binary_inplace("add_inplace", Binary::Add, y, x, (0.0, 0.0))
}

/// `Y += X` for `(B, D)` batches of rows (C++ `add_inplace_batched`; same contract as
/// [`add_inplace`]).
pub fn add_inplace_batched(y: &mut Tensor, x: &Tensor) -> Result<()> {
    binary_inplace("add_inplace_batched", Binary::Add, y, x, (0.0, 0.0))
}

/// `y *= x` element-wise (C++ `mul_inplace`).
pub fn mul_inplace(y: &mut Tensor, x: &Tensor) -> Result<()> {
    binary_inplace("mul_inplace", Binary::Mul, y, x, (0.0, 0.0))
}

/// `y = a*y + b*x` (C++ `axpby_inplace`).
pub fn axpby_inplace(y: &mut Tensor, x: &Tensor, a: f32, b: f32) -> Result<()> {
    binary_inplace("axpby_inplace", Binary::Axpby, y, x, (a, b))
}

/// `y += s` (C++ `add_scalar_inplace`).
pub fn add_scalar_inplace(y: &mut Tensor, s: f32) -> Result<()> {
    unary_inplace("add_scalar_inplace", Unary::AddScalar, y, (s, 0.0))
}

/// `y *= s` (C++ `scale_inplace`).
pub fn scale_inplace(y: &mut Tensor, s: f32) -> Result<()> {
    unary_inplace("scale_inplace", Unary::MulScalar, y, (s, 0.0))
}

/// Clamps `y` to `[lo, hi]` in place (C++ `clamp`): values below `lo` become `lo`, above
/// `hi` become `hi`; NaN passes through, and `lo > hi` yields `hi`.
pub fn clamp(y: &mut Tensor, lo: f32, hi: f32) -> Result<()> {
    unary_inplace("clamp", Unary::Clamp, y, (lo, hi))
}

/// [`clamp`] from `x` into `out` (resized to `x`).
pub fn clamp_out(x: &Tensor, lo: f32, hi: f32, out: &mut Tensor) -> Result<()> {
    unary_out("clamp_out", Unary::Clamp, x, out, (lo, hi))
}

/// Sets every element of `y` to `value` (converted to `y`'s float dtype).
pub fn fill(y: &mut Tensor, value: f32) -> Result<()> {
    let be = dispatch("fill", &[updated("y", y).float()])?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.fill(y, value)
}

/// Converts `src` into `dst` as `dtype` (C++ `cast`, extended to every dtype that holds
/// values: F32, F16, BF16, F64, I32, I64, C64, C128, in any pair, on every device that
/// computes both dtypes). `dst` is resized to `src`'s dims and `dtype`. The rules:
/// - float to narrower float rounds to nearest even; NaN stays NaN, overflow gives infinity;
///   widening is exact. F64 to F16/BF16 goes through F32 (two roundings, which can differ from
///   one in the last bit for values within 2^-24 of a 16-bit halfway point);
/// - integer to float rounds to nearest even (exact up to 2^24 in magnitude for F32, 2^53 for
///   F64); to F16/BF16 through F32 (exact up to 2^24, then two roundings);
/// - float to integer truncates toward zero, and NaN, infinities and values out of the
///   integer's range are errors (nothing is written);
/// - I64 to I32 errors on values out of range; I32 to I64 is exact;
/// - real to complex has a zero imaginary part; complex to real keeps the real part;
/// - the same dtype is a byte-exact copy, for every dtype.
pub fn cast(src: &Tensor, dst: &mut Tensor, dtype: Dtype) -> Result<()> {
    let be = dispatch("cast", &[input("src", src), written("dst", dst)])?;
    if src.dtype() == dtype {
        be.out("dst", dst, src.dims(), dtype)?;
        let bytes = src.storage_bytes();
        return match (src.storage(), dst.storage_mut()) {
            (Some(s), Some(d)) => be.copy(s, d, bytes),
            _ => Ok(()),
        };
    }
    let sixteen = |d: Dtype| matches!(d, Dtype::F16 | Dtype::BF16);
    let kernel_cast = |d: Dtype| d.is_float();
    for (name, d) in [("src", src.dtype()), ("dtype", dtype)] {
        if !kernel_cast(d) && !super::algebra::CONVERTIBLE.contains(&d) {
            return Err(Error::Dtype {
                op: "cast",
                operand: name,
                expected: "cast converts between F32, F16, BF16, F64, I32, I64, C64 and C128"
                    .into(),
                found: d,
            });
        }
        // The F32/F16/BF16 cast kernel's dtypes, or the convert kernel's (I32 everywhere).
        let computes = if kernel_cast(d) {
            be.converts(d)
        } else {
            d == Dtype::I32 || be.supports(d)
        };
        if !computes {
            return Err(Error::UnsupportedDtype {
                op: "cast",
                dtype: d,
                device: be.device(),
            });
        }
    }
    if kernel_cast(src.dtype()) && kernel_cast(dtype) {
        be.out("dst", dst, src.dims(), dtype)?;
        if src.numel() == 0 {
            return Ok(());
        }
        return be.cast(src, dst);
    }
    // A 16-bit end goes through F32 (exact from 16 bits); the rest is the convert kernel.
    if sixteen(dtype) {
        let wide = super::algebra::convert(src, Dtype::F32)?;
        return cast(&wide, dst, dtype);
    }
    let converted = if sixteen(src.dtype()) {
        super::algebra::convert(&src.to_dtype(Dtype::F32)?, dtype)?
    } else {
        super::algebra::convert(src, dtype)?
    };
    // `dst` passed the device check in dispatch; it takes the result's storage.
    dst.check_writable("cast", "dst")?;
    *dst = converted;
    Ok(())
}

impl Tensor {
    /// A copy converted to `dtype`: any pair of F32, F16, BF16, F64, I32, I64, C64 and C128
    /// (see [`cast`] for the rounding and range rules).
    pub fn to_dtype(&self, dtype: Dtype) -> Result<Tensor> {
        let mut out = Tensor::default();
        cast(self, &mut out, dtype)?;
        Ok(out)
    }
}

/// `y[c * l + i] += bias[c]` for a channel-major `y` of `c * l` elements and a `bias` of `c`
/// elements (C++ `add_channel_bias_inplace`).
pub fn add_channel_bias_inplace(y: &mut Tensor, bias: &Tensor, c: usize, l: usize) -> Result<()> {
    let op = "add_channel_bias_inplace";
    let be = dispatch(op, &[updated("y", y).float(), input("bias", bias)])?;
    let cl = c
        .checked_mul(l)
        .ok_or_else(|| Error::shape(op, "C*L overflows"))?;
    if y.numel() != cl {
        return Err(Error::shape(
            op,
            format!("y size {} != C*L = {c}*{l}", y.numel()),
        ));
    }
    if bias.numel() != c {
        return Err(Error::shape(
            op,
            format!("bias has {} elements, C = {c}", bias.numel()),
        ));
    }
    super::check_dtypes_match(op, ("y", y), &[("bias", bias)])?;
    if cl == 0 {
        return Ok(());
    }
    let b = crate::backend::Broadcast {
        inner: l,
        v_len: c,
        per_row: true,
        repeat: usize::MAX,
        multiply: false,
    };
    be.broadcast(op, y, bias, b)
}

/// `y = (x > t)` as I8 1 / 0 (C++ `threshold_u8`; NaN gives 0); `x` F32 or F16, `y` resized
/// to `x`'s shape as I8.
pub fn threshold_u8(x: &Tensor, t: f32, y: &mut Tensor) -> Result<()> {
    let op = "threshold_u8";
    let be = dispatch(op, &[input("x", x), written("y", y)])?;
    if !matches!(x.dtype(), Dtype::F32 | Dtype::F16) {
        return Err(Error::Dtype {
            op,
            operand: "x",
            expected: "X must be FP32 or FP16".into(),
            found: x.dtype(),
        });
    }
    if x.dtype() == Dtype::F16 && be.device().is_gpu() {
        check_float(op, "x", x, be)?;
    }
    be.out("y", y, x.dims(), Dtype::I8)?;
    if x.numel() == 0 {
        return Ok(());
    }
    be.threshold_u8(x, t, y)
}
