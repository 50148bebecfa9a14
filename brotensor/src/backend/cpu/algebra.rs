//! CPU glue of the tensor-algebra ops: instructions become closures over
//! `brotensor_cpu::algebra`'s generic slice functions.

use brotensor_cpu::algebra as alg;
use num_complex::Complex;
use num_traits::Float;

use super::CpuBackend;
use crate::backend::{AlgebraOps, ComplexMap, FloatMap, IndexMap, PadSpec, ReduceOp};
use crate::{Dtype, Error, Result, Tensor};

/// Calls `$body` with `$W` bound to a plain word type of `$dtype`'s element size.
macro_rules! with_words {
    ($dtype:expr, |$W:ident| $body:expr) => {
        match $dtype.size_bytes() {
            Some(1) => {
                type $W = u8;
                $body
            }
            Some(2) => {
                type $W = u16;
                $body
            }
            Some(4) => {
                type $W = u32;
                $body
            }
            Some(8) => {
                type $W = u64;
                $body
            }
            _ => {
                type $W = [u64; 2];
                $body
            }
        }
    };
}

/// The real-float function of a unary or binary instruction.
fn float_fn<T: Float>(instr: FloatMap) -> fn(T, T, T) -> T {
    use FloatMap::*;
    match instr {
        Exp => |x, _, _| x.exp(),
        Log => |x, _, _| x.ln(),
        Sin => |x, _, _| x.sin(),
        Cos => |x, _, _| x.cos(),
        Tanh => |x, _, _| x.tanh(),
        Sqrt => |x, _, _| x.sqrt(),
        Rsqrt => |x, _, _| T::one() / x.sqrt(),
        Expm1 => |x, _, _| x.exp_m1(),
        Log1p => |x, _, _| x.ln_1p(),
        Abs => |x, _, _| x.abs(),
        Sign => |x, _, _| alg::sign(x),
        Neg => |x, _, _| -x,
        Add => |x, y, _| x + y,
        Sub => |x, y, _| x - y,
        Mul => |x, y, _| x * y,
        Div => |x, y, _| x / y,
        Maximum => |x, y, _| alg::maximum(x, y),
        Minimum => |x, y, _| alg::minimum(x, y),
        Pow => |x, y, _| alg::power(x, y),
        Eq => |x, y, _| alg::indicator(x == y),
        Ne => |x, y, _| alg::indicator(x != y),
        Lt => |x, y, _| alg::indicator(x < y),
        Le => |x, y, _| alg::indicator(x <= y),
        Gt => |x, y, _| alg::indicator(x > y),
        Ge => |x, y, _| alg::indicator(x >= y),
        Select => |p, t, f| if p != T::zero() { t } else { f },
        Clamp => |x, lo, hi| alg::minimum(alg::maximum(x, lo), hi),
    }
}

fn float_map_typed<T: Float + crate::Element>(
    instr: FloatMap,
    inputs: &[&Tensor],
    out: &mut Tensor,
) {
    let f = float_fn::<T>(instr);
    match inputs {
        [x] => alg::map1(x.host::<T>(), out.host_mut::<T>(), |x| f(x, x, x)),
        [x, y] => alg::map2(x.host::<T>(), y.host::<T>(), out.host_mut::<T>(), |x, y| {
            f(x, y, x)
        }),
        [x, y, z] => alg::map3(x.host(), y.host(), z.host(), out.host_mut::<T>(), f),
        _ => unreachable!("the op checked the arity"),
    }
}

fn complex_map_typed<T: Float + Send + Sync>(
    instr: ComplexMap,
    inputs: &[&Tensor],
    out: &mut Tensor,
) where
    Complex<T>: crate::Element,
{
    type C<T> = Complex<T>;
    let f: fn(C<T>, C<T>) -> C<T> = match instr {
        ComplexMap::Add => |x, y| x + y,
        ComplexMap::Sub => |x, y| x - y,
        ComplexMap::Mul => alg::complex_mul,
        ComplexMap::Div => alg::complex_div,
        ComplexMap::Neg => |x, _| Complex::new(-x.re, -x.im),
        ComplexMap::Conj => |x, _| Complex::new(x.re, -x.im),
        ComplexMap::Exp => |x, _| alg::complex_exp(x),
        ComplexMap::Log => |x, _| alg::complex_ln(x),
        ComplexMap::Sin => |x, _| alg::complex_sin(x),
        ComplexMap::Cos => |x, _| alg::complex_cos(x),
        ComplexMap::Tanh => |x, _| alg::complex_tanh(x),
        ComplexMap::Rsqrt => |x, _| alg::complex_rsqrt(x),
    };
    match inputs {
        [x] => alg::map1(x.host::<C<T>>(), out.host_mut::<C<T>>(), |x| f(x, x)),
        [x, y] => alg::map2(
            x.host::<C<T>>(),
            y.host::<C<T>>(),
            out.host_mut::<C<T>>(),
            f,
        ),
        _ => unreachable!("the op checked the arity"),
    }
}

/// The reduction of real floats: identity and step (NaN sticks in max/min). Each arm is its
/// own instance of `reduce_axis`, so the step inlines and vectorizes.
fn reduce_float<T: Float + crate::Element>(
    op: ReduceOp,
    x: &Tensor,
    shape: (usize, usize, usize),
    out: &mut Tensor,
) {
    let (x, y) = (x.host::<T>(), out.host_mut::<T>());
    match op {
        ReduceOp::Sum => alg::reduce_axis(x, shape, y, T::zero(), |a, b| a + b),
        ReduceOp::Prod => alg::reduce_axis(x, shape, y, T::one(), |a, b| a * b),
        ReduceOp::Max => alg::reduce_axis(x, shape, y, T::neg_infinity(), |a, b| {
            if b > a || b.is_nan() {
                b
            } else {
                a
            }
        }),
        ReduceOp::Min => alg::reduce_axis(x, shape, y, T::infinity(), |a, b| {
            if b < a || b.is_nan() {
                b
            } else {
                a
            }
        }),
    }
}

fn reduce_complex<T: Float + Send + Sync>(
    op: ReduceOp,
    x: &Tensor,
    shape: (usize, usize, usize),
    out: &mut Tensor,
) where
    Complex<T>: crate::Element,
{
    let (x, y) = (x.host::<Complex<T>>(), out.host_mut::<Complex<T>>());
    match op {
        ReduceOp::Sum => {
            alg::reduce_axis(x, shape, y, Complex::new(T::zero(), T::zero()), |a, b| {
                a + b
            })
        }
        _ => alg::reduce_axis(
            x,
            shape,
            y,
            Complex::new(T::one(), T::zero()),
            alg::complex_mul,
        ),
    }
}

/// A host value of one of the conversion dtypes, widened to `(re, im)` in f64 or held as
/// an exact integer.
#[derive(Clone, Copy)]
enum Value {
    Real(f64, f64),
    Int(i64),
}

fn read_values(x: &Tensor) -> Vec<Value> {
    match x.dtype() {
        Dtype::F32 => x
            .host::<f32>()
            .iter()
            .map(|&v| Value::Real(v as f64, 0.0))
            .collect(),
        Dtype::F64 => x
            .host::<f64>()
            .iter()
            .map(|&v| Value::Real(v, 0.0))
            .collect(),
        Dtype::C64 => x
            .host::<Complex<f32>>()
            .iter()
            .map(|v| Value::Real(v.re as f64, v.im as f64))
            .collect(),
        Dtype::C128 => x
            .host::<Complex<f64>>()
            .iter()
            .map(|v| Value::Real(v.re, v.im))
            .collect(),
        Dtype::I64 => x.host::<i64>().iter().map(|&v| Value::Int(v)).collect(),
        Dtype::I32 => x
            .host::<i32>()
            .iter()
            .map(|&v| Value::Int(v as i64))
            .collect(),
        other => unreachable!("convert checked the source dtype ({other})"),
    }
}

/// A float value as an integer in `[lo, hi]` (truncated toward zero), or an error naming it.
fn to_int(v: f64, lo: i64, hi: i64, dtype: Dtype) -> Result<i64> {
    // `hi + 1` is a power of two, exact in f64: the test is exact for every finite `v`.
    if v.is_finite() && v >= lo as f64 && v < hi as f64 + 1.0 {
        Ok(v.trunc() as i64)
    } else {
        Err(Error::invalid(
            "convert",
            format!("{v} is not a finite value in the range of {dtype}"),
        ))
    }
}

impl AlgebraOps for CpuBackend {
    fn float_map(
        &self,
        _: &'static str,
        instr: FloatMap,
        inputs: &[&Tensor],
        out: &mut Tensor,
    ) -> Result<()> {
        match out.dtype() {
            Dtype::F64 => float_map_typed::<f64>(instr, inputs, out),
            _ => float_map_typed::<f32>(instr, inputs, out),
        }
        Ok(())
    }

    fn complex_map(
        &self,
        _: &'static str,
        instr: ComplexMap,
        inputs: &[&Tensor],
        out: &mut Tensor,
    ) -> Result<()> {
        match out.dtype() {
            Dtype::C128 => complex_map_typed::<f64>(instr, inputs, out),
            _ => complex_map_typed::<f32>(instr, inputs, out),
        }
        Ok(())
    }

    fn reduce_axis(
        &self,
        _: &'static str,
        op: ReduceOp,
        x: &Tensor,
        shape: (usize, usize, usize),
        out: &mut Tensor,
    ) -> Result<()> {
        match x.dtype() {
            Dtype::F32 => reduce_float::<f32>(op, x, shape, out),
            Dtype::F64 => reduce_float::<f64>(op, x, shape, out),
            Dtype::C64 => reduce_complex::<f32>(op, x, shape, out),
            Dtype::C128 => reduce_complex::<f64>(op, x, shape, out),
            _ => {
                let (x, y) = (x.host::<i64>(), out.host_mut::<i64>());
                match op {
                    ReduceOp::Sum => alg::reduce_axis(x, shape, y, 0, |a, b| a.wrapping_add(b)),
                    _ => alg::reduce_axis(x, shape, y, 1, |a, b| a.wrapping_mul(b)),
                }
            }
        }
        Ok(())
    }

    fn convert(&self, x: &Tensor, out: &mut Tensor) -> Result<()> {
        let values = read_values(x);
        let to = out.dtype();
        let real = |v: &Value| match *v {
            Value::Real(re, im) => (re, im),
            Value::Int(i) => (i as f64, 0.0),
        };
        match to {
            // Integers to f32 round once (not through f64, which would round twice).
            Dtype::F32 => {
                for (o, v) in out.host_mut::<f32>().iter_mut().zip(&values) {
                    *o = match *v {
                        Value::Int(i) => i as f32,
                        Value::Real(re, _) => re as f32,
                    };
                }
            }
            Dtype::C64 => {
                for (o, v) in out.host_mut::<Complex<f32>>().iter_mut().zip(&values) {
                    *o = match *v {
                        Value::Int(i) => Complex::new(i as f32, 0.0),
                        Value::Real(re, im) => Complex::new(re as f32, im as f32),
                    };
                }
            }
            Dtype::F64 => {
                for (o, v) in out.host_mut::<f64>().iter_mut().zip(&values) {
                    *o = real(v).0;
                }
            }
            Dtype::C128 => {
                for (o, v) in out.host_mut::<Complex<f64>>().iter_mut().zip(&values) {
                    let (re, im) = real(v);
                    *o = Complex::new(re, im);
                }
            }
            Dtype::I64 | Dtype::I32 => {
                let (lo, hi) = if to == Dtype::I64 {
                    (i64::MIN, i64::MAX)
                } else {
                    (i32::MIN as i64, i32::MAX as i64)
                };
                let ints = values
                    .iter()
                    .map(|v| match *v {
                        Value::Int(i) if to == Dtype::I64 => Ok(i),
                        Value::Int(i) => Ok(i as i32 as i64),
                        Value::Real(re, _) => to_int(re, lo, hi, to),
                    })
                    .collect::<Result<Vec<i64>>>()?;
                if to == Dtype::I64 {
                    out.host_mut::<i64>().copy_from_slice(&ints);
                } else {
                    for (o, i) in out.host_mut::<i32>().iter_mut().zip(ints) {
                        *o = i as i32;
                    }
                }
            }
            other => unreachable!("convert checked the destination dtype ({other})"),
        }
        Ok(())
    }

    fn pad(&self, x: &Tensor, pads: &[PadSpec], out: &mut Tensor) -> Result<()> {
        let dims = x.dims().to_vec();
        with_words!(x.dtype(), |W| alg::pad(
            x.host_words::<W>(),
            &dims,
            pads,
            bytemuck::Zeroable::zeroed(),
            out.host_words_mut::<W>()
        ));
        Ok(())
    }

    fn place(
        &self,
        _: &'static str,
        src: &Tensor,
        dims: &[usize],
        strides: &[usize],
        offset: usize,
        out: &mut Tensor,
    ) -> Result<()> {
        with_words!(src.dtype(), |W| alg::place(
            src.host_words::<W>(),
            dims,
            strides,
            offset,
            out.host_words_mut::<W>()
        ));
        Ok(())
    }

    fn triangle(
        &self,
        _: &'static str,
        x: &Tensor,
        k: i64,
        lower: bool,
        out: &mut Tensor,
    ) -> Result<()> {
        let r = x.rank();
        let shape = (x.dims()[r - 2], x.dims()[r - 1]);
        with_words!(x.dtype(), |W| alg::triangle(
            x.host_words::<W>(),
            shape,
            k,
            lower,
            bytemuck::Zeroable::zeroed(),
            out.host_words_mut::<W>()
        ));
        Ok(())
    }

    fn gather(&self, src: &Tensor, map: &IndexMap<'_>, out: &mut Tensor) -> Result<()> {
        with_words!(src.dtype(), |W| alg::gather(
            src.host_words::<W>(),
            map,
            out.host_words_mut::<W>()
        ));
        Ok(())
    }

    fn scatter_add(&self, updates: &Tensor, map: &IndexMap<'_>, out: &mut Tensor) -> Result<()> {
        match out.dtype() {
            Dtype::F32 => {
                alg::scatter_add(updates.host::<f32>(), map, out.host_mut::<f32>(), |a, b| {
                    a + b
                })
            }
            Dtype::F64 => {
                alg::scatter_add(updates.host::<f64>(), map, out.host_mut::<f64>(), |a, b| {
                    a + b
                })
            }
            Dtype::I64 => {
                alg::scatter_add(updates.host::<i64>(), map, out.host_mut::<i64>(), |a, b| {
                    a.wrapping_add(b)
                })
            }
            Dtype::C64 => alg::scatter_add(
                updates.host::<Complex<f32>>(),
                map,
                out.host_mut::<Complex<f32>>(),
                |a, b| a + b,
            ),
            _ => alg::scatter_add(
                updates.host::<Complex<f64>>(),
                map,
                out.host_mut::<Complex<f64>>(),
                |a, b| a + b,
            ),
        }
        Ok(())
    }
}
