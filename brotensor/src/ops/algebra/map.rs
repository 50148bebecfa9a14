//! Element-wise maps of the wide dtypes (F64 through the real-float kernel, C64/C128 through
//! the complex one), comparisons and selects.

use super::super::{dispatch, input, written, Operand};
use crate::backend::{ComplexMap, FloatMap};
use crate::{Dtype, Error, Result, Tensor};

use super::*;

/// An element-wise instruction of either kernel.
#[derive(Clone, Copy)]
enum MapInstr {
    Real(FloatMap),
    Complex(ComplexMap),
}

/// `out = instr(operands)`: real instructions take F32/F64, complex ones C64/C128.
fn map_op(
    op: &'static str,
    instr: MapInstr,
    operands: &[(&'static str, &Tensor)],
    out: &mut Tensor,
) -> Result<()> {
    let mut all: Vec<Operand<'_>> = operands.iter().map(|&(n, t)| input(n, t)).collect();
    all.push(written("out", out));
    let be = dispatch(op, &all)?;
    let (name, x) = operands[0];
    let dtypes = match instr {
        MapInstr::Real(_) => [Dtype::F32, Dtype::F64],
        MapInstr::Complex(_) => [Dtype::C64, Dtype::C128],
    };
    check_dtype(op, name, x, &dtypes, be)?;
    check_alike(op, operands)?;
    be.out("out", out, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    let inputs: Vec<&Tensor> = operands.iter().map(|(_, t)| *t).collect();
    match instr {
        MapInstr::Real(f) => be.float_map(op, f, &inputs, out),
        MapInstr::Complex(c) => be.complex_map(op, c, &inputs, out),
    }
}

/// [`map_op`] with a real-float instruction.
fn float_op(
    op: &'static str,
    instr: FloatMap,
    operands: &[(&'static str, &Tensor)],
    out: &mut Tensor,
) -> Result<()> {
    map_op(op, MapInstr::Real(instr), operands, out)
}

/// [`map_op`] with a complex instruction.
fn complex_op(
    op: &'static str,
    instr: ComplexMap,
    operands: &[(&'static str, &Tensor)],
    out: &mut Tensor,
) -> Result<()> {
    map_op(op, MapInstr::Complex(instr), operands, out)
}

/// The element-wise route of the arithmetic and math ops for the wide dtypes: F64 through
/// the real-float kernel, C64/C128 through the complex one. `None` when `x`'s dtype is not
/// wide (the caller keeps its F32/F16/BF16 path).
pub(crate) fn wide_map(
    op: &'static str,
    (real, complex): (Option<FloatMap>, Option<ComplexMap>),
    operands: &[(&'static str, &Tensor)],
    out: &mut Tensor,
) -> Option<Result<()>> {
    let dtype = operands[0].1.dtype();
    match (dtype, real, complex) {
        (Dtype::F64, Some(f), _) => Some(float_op(op, f, operands, out)),
        (Dtype::C64 | Dtype::C128, _, Some(c)) => Some(complex_op(op, c, operands, out)),
        (Dtype::F64 | Dtype::I64 | Dtype::C64 | Dtype::C128, _, _) => Some(Err(Error::Dtype {
            op,
            operand: operands[0].0,
            expected: "a dtype this op computes (F32, F16, BF16; F64 or complex where listed)"
                .into(),
            found: dtype,
        })),
        _ => None,
    }
}

/// Defines the allocating, `_out` and in-place forms of a real-float map.
macro_rules! float_maps {
    ($($math:literal: $alloc:ident, $out:ident, $inplace:ident ($($arg:ident),+) => $instr:ident;)*) => {$(
        #[doc = concat!("`", $math, "` element-wise into a new tensor (F32 or F64; operands of one dims and dtype).")]
        pub fn $alloc($($arg: &Tensor),+) -> Result<Tensor> {
            let mut out = Tensor::default();
            $out($($arg,)+ &mut out)?;
            Ok(out)
        }

        #[doc = concat!("`", $math, "` element-wise into `out` (resized to the operands' dims and dtype; keeps its allocation when it fits).")]
        pub fn $out($($arg: &Tensor,)+ out: &mut Tensor) -> Result<()> {
            float_op(stringify!($alloc), FloatMap::$instr, &[$((stringify!($arg), $arg)),+], out)
        }

        impl Tensor {
            #[doc = concat!("`", $math, "` in place on `self` (the first operand).")]
            pub fn $inplace(&mut self $(, $arg: &Tensor)*) -> Result<()> {
                in_place(self, |x, out| float_op(stringify!($inplace), FloatMap::$instr, &[("x", x) $(, (stringify!($arg), $arg))*], out))
            }
        }
    )*};
}

/// Runs `f(self, tmp)` and copies `tmp` back into `self`'s storage (keeping its allocation).
pub(crate) fn in_place(
    x: &mut Tensor,
    f: impl FnOnce(&Tensor, &mut Tensor) -> Result<()>,
) -> Result<()> {
    x.check_writable("in_place", "self")?;
    let mut tmp = Tensor::default();
    f(x, &mut tmp)?;
    super::super::copy_into(&tmp, x)
}

float_maps! {
    "sqrt x": sqrt, sqrt_out, sqrt_(x) => Sqrt;
    "e^x - 1 (accurate near 0)": expm1, expm1_out, expm1_(x) => Expm1;
    "ln(1 + x) (accurate near 0)": log1p, log1p_out, log1p_(x) => Log1p;
    "|x|": abs, abs_out, abs_(x) => Abs;
    "sign x (-1, 0 with its sign, 1; NaN stays NaN)": sign, sign_out, sign_(x) => Sign;
    "max(x, y), NaN if either is": maximum, maximum_out, maximum_(x, y) => Maximum;
    "min(x, y), NaN if either is": minimum, minimum_out, minimum_(x, y) => Minimum;
    "x^y (numpy's rules: negative bases take integral exponents)": pow, pow_out, pow_(x, y) => Pow;
    "min(max(x, lower), upper), NaN propagating": clamp_between, clamp_between_out, clamp_between_(x, lower, upper) => Clamp;
}

/// `-x` element-wise into a new tensor (F32, F64, C64 or C128).
pub fn neg(x: &Tensor) -> Result<Tensor> {
    let mut out = Tensor::default();
    neg_out(x, &mut out)?;
    Ok(out)
}

/// `-x` element-wise into `out` (resized to `x`).
pub fn neg_out(x: &Tensor, out: &mut Tensor) -> Result<()> {
    if x.dtype().is_complex() {
        complex_op("neg", ComplexMap::Neg, &[("x", x)], out)
    } else {
        float_op("neg", FloatMap::Neg, &[("x", x)], out)
    }
}

/// The complex conjugate of `x` (C64 or C128) into a new tensor.
pub fn conj(x: &Tensor) -> Result<Tensor> {
    let mut out = Tensor::default();
    conj_out(x, &mut out)?;
    Ok(out)
}

/// The complex conjugate of `x` into `out` (resized to `x`).
pub fn conj_out(x: &Tensor, out: &mut Tensor) -> Result<()> {
    complex_op("conj", ComplexMap::Conj, &[("x", x)], out)
}

/// A comparison of [`compare`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    /// `x == y`.
    Eq,
    /// `x != y` (true for NaN).
    Ne,
    /// `x < y`.
    Lt,
    /// `x <= y`.
    Le,
    /// `x > y`.
    Gt,
    /// `x >= y`.
    Ge,
}

/// `1` where `x <cmp> y` holds, else `0`, in `x`'s dtype (F32 or F64; one dims). NaN
/// compares false except under `Ne`.
pub fn compare(x: &Tensor, y: &Tensor, cmp: Comparison) -> Result<Tensor> {
    let mut out = Tensor::default();
    compare_out(x, y, cmp, &mut out)?;
    Ok(out)
}

/// [`compare`] into `out` (resized to `x`).
pub fn compare_out(x: &Tensor, y: &Tensor, cmp: Comparison, out: &mut Tensor) -> Result<()> {
    let instr = match cmp {
        Comparison::Eq => FloatMap::Eq,
        Comparison::Ne => FloatMap::Ne,
        Comparison::Lt => FloatMap::Lt,
        Comparison::Le => FloatMap::Le,
        Comparison::Gt => FloatMap::Gt,
        Comparison::Ge => FloatMap::Ge,
    };
    float_op("compare", instr, &[("x", x), ("y", y)], out)
}

/// `on_true` where `pred != 0` (NaN counts as non-zero), else `on_false`; all three of one
/// dims and dtype (F32 or F64).
pub fn select(pred: &Tensor, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
    let mut out = Tensor::default();
    select_out(pred, on_true, on_false, &mut out)?;
    Ok(out)
}

/// [`select`] into `out` (resized to `pred`).
pub fn select_out(
    pred: &Tensor,
    on_true: &Tensor,
    on_false: &Tensor,
    out: &mut Tensor,
) -> Result<()> {
    float_op(
        "select",
        FloatMap::Select,
        &[("pred", pred), ("on_true", on_true), ("on_false", on_false)],
        out,
    )
}
