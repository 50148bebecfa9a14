//! CPU glue of the elementwise ops: instruction maps, casts, fills, broadcasts.

use brotensor_cpu::cast::FloatElem;
use brotensor_cpu::simd::MulAdd;
use brotensor_cpu::{activation as act, cast as cpu_cast, elementwise as ew, half_float as hf};
use half::{bf16, f16};

use super::dtype_policy::{is_half, with_half};
use super::CpuBackend;
use crate::backend::{Binary, Broadcast, ElementwiseOps, Src, Unary};
use crate::layout::{shared_row_patterns, RowPattern};
use crate::{Device, Dtype, Element, Error, Result, Tensor};

/// Runs `$go!(f)` with `f` the scalar math of a unary instruction, one monomorphic map per
/// instruction so the inner loop has no branch on the op; `$go!(fused f)` where `f` also
/// takes the vector path's [`MulAdd`]; `$go!(fitted fits, fast, exact)` for log, sin and
/// cos, whose vector form `fast` holds where `fits` and which fall back to `exact` per chunk.
macro_rules! with_unary_fn {
    ($op:expr, $a:expr, $b:expr, $go:ident) => {{
        let (a, b) = ($a, $b);
        match $op {
            Unary::Identity => $go!(|x: f32| x),
            Unary::AddScalar => $go!(move |x: f32| x + a),
            Unary::SubScalar => $go!(move |x: f32| x - a),
            Unary::MulScalar => $go!(move |x: f32| x * a),
            Unary::DivScalar => $go!(move |x: f32| x / a),
            Unary::Clamp => $go!(move |x: f32| ew::clamp(x, a, b)),
            Unary::Exp => $go!(fused ew::exp_with),
            Unary::Log => $go!(fitted ew::log_fits, ew::log_with, ew::log),
            Unary::Sin => $go!(
                fitted ew::trig_fits,
                |m: MulAdd, v: f32| ew::sin_cos_with(m, v).0,
                ew::sin
            ),
            Unary::Cos => $go!(
                fitted ew::trig_fits,
                |m: MulAdd, v: f32| ew::sin_cos_with(m, v).1,
                ew::cos
            ),
            Unary::Rsqrt => $go!(ew::rsqrt),
            Unary::Round => $go!(ew::round),
            Unary::Relu => $go!(act::relu),
            Unary::Tanh => $go!(fused ew::tanh_with),
            Unary::Sigmoid => $go!(fused act::sigmoid_with),
            Unary::Silu => $go!(fused act::silu_with),
            Unary::Gelu => $go!(fused act::gelu_with),
            Unary::GeluExact => $go!(fused act::gelu_exact_with),
            Unary::QuickGelu => $go!(act::quick_gelu),
            Unary::Elu => $go!(move |x: f32| act::elu(x, a)),
            Unary::LeakyRelu => $go!(move |x: f32| act::leaky_relu(x, a)),
            Unary::HardSwish => $go!(act::hardswish),
            Unary::HardSigmoid => $go!(move |x: f32| act::hard_sigmoid(x, a, b)),
        }
    }};
}

/// As [`with_unary_fn`], for binary instructions.
macro_rules! with_binary_fn {
    ($op:expr, $a:expr, $b:expr, $go:ident) => {{
        let (a, b) = ($a, $b);
        match $op {
            Binary::Add => $go!(|x: f32, y: f32| x + y),
            Binary::Sub => $go!(|x: f32, y: f32| x - y),
            Binary::Mul => $go!(|x: f32, y: f32| x * y),
            Binary::Div => $go!(|x: f32, y: f32| x / y),
            Binary::Axpby => $go!(move |x: f32, y: f32| ew::axpby(x, y, a, b)),
            Binary::ExpBackward => $go!(ew::exp_backward),
            Binary::LogBackward => $go!(ew::log_backward),
            Binary::SinBackward => $go!(trig |(_, c): (f32, f32), dy: f32| dy * c, ew::sin_backward),
            Binary::CosBackward => $go!(trig |(s, _): (f32, f32), dy: f32| -dy * s, ew::cos_backward),
            Binary::RsqrtBackward => $go!(ew::rsqrt_backward),
            Binary::ReluBackward => $go!(act::relu_backward),
            Binary::TanhBackward => $go!(act::tanh_backward),
            Binary::SigmoidBackward => $go!(act::sigmoid_backward),
            Binary::SiluBackward => $go!(act::silu_backward),
            Binary::GeluBackward => $go!(fused act::gelu_backward_with),
            Binary::GeluExactBackward => $go!(fused act::gelu_exact_backward_with),
            Binary::QuickGeluBackward => $go!(act::quick_gelu_backward),
            Binary::EluBackward => $go!(move |x: f32, y: f32| act::elu_backward(x, y, a)),
            Binary::LeakyReluBackward => {
                $go!(move |x: f32, y: f32| act::leaky_relu_backward(x, y, a))
            }
        }
    }};
}

impl ElementwiseOps for CpuBackend {
    fn unary(
        &self,
        _name: &'static str,
        op: Unary,
        x: Src<'_>,
        out: &mut Tensor,
        a: f32,
        b: f32,
    ) -> Result<()> {
        if is_half(out.dtype()) {
            with_half!(out.dtype(), |E| unary_half::<E>(op, x, out, a, b));
            return Ok(());
        }
        // `$f` is called from an `#[inline(always)]` closure rather than handed to the map:
        // a function handed over is called through a generic `Fn::call` shim, which LLVM
        // may leave uninlined for a large body (exact GELU), and then the body runs without
        // the vector path's instruction set, fused multiply-adds as library calls. The
        // closure takes `f` by value (`move`): borrowed, the scalars `f` captured could
        // alias the output for all LLVM knew and were reloaded per element (in-place scale
        // and axpby ran 1.5x slower).
        macro_rules! go {
            (fused $f:expr) => {{
                let f = $f;
                match x {
                    Src::Out => ew::map_unary_inplace(
                        out.host_mut::<f32>(),
                        #[inline(always)]
                        move |m, v| f(m, v),
                    ),
                    Src::Tensor(x) => ew::map_unary(
                        x.host::<f32>(),
                        out.host_mut::<f32>(),
                        #[inline(always)]
                        move |m, v| f(m, v),
                    ),
                }
            }};
            (fitted $fits:expr, $fast:expr, $exact:expr) => {{
                let (fits, fast, exact) = ($fits, $fast, $exact);
                match x {
                    Src::Out => ew::map_unary_fitted_inplace(
                        out.host_mut::<f32>(),
                        #[inline(always)]
                        move |v| fits(v),
                        #[inline(always)]
                        move |m, v| fast(m, v),
                        exact,
                    ),
                    Src::Tensor(x) => ew::map_unary_fitted(
                        x.host::<f32>(),
                        out.host_mut::<f32>(),
                        #[inline(always)]
                        move |v| fits(v),
                        #[inline(always)]
                        move |m, v| fast(m, v),
                        exact,
                    ),
                }
            }};
            ($f:expr) => {{
                let f = $f;
                go!(fused move |_: MulAdd, v: f32| f(v))
            }};
        }
        with_unary_fn!(op, a, b, go);
        Ok(())
    }

    fn binary(
        &self,
        _name: &'static str,
        op: Binary,
        x: Src<'_>,
        y: Src<'_>,
        out: &mut Tensor,
        a: f32,
        b: f32,
    ) -> Result<()> {
        if is_half(out.dtype()) {
            with_half!(out.dtype(), |E| binary_half::<E>(op, x, y, out, a, b));
            return Ok(());
        }
        // As in `unary`: `$f` is called from `#[inline(always)]` closures. `trig` (the sin
        // and cos gradients) takes the fast sine and cosine where they hold for two input
        // tensors; an operand written in place takes `exact` throughout.
        macro_rules! go {
            (trig $pick:expr, $exact:expr) => {{
                let (pick, exact) = ($pick, $exact);
                match (x, y) {
                    (Src::Tensor(x), Src::Tensor(y)) => ew::map_binary_fitted(
                        x.host::<f32>(),
                        y.host::<f32>(),
                        out.host_mut::<f32>(),
                        #[inline(always)]
                        |v| ew::trig_fits(v),
                        #[inline(always)]
                        move |m, v, dy| pick(ew::sin_cos_with(m, v), dy),
                        exact,
                    ),
                    _ => go!(exact),
                }
            }};
            (fused $f:expr) => {{
                let f = $f;
                match (x, y) {
                    (Src::Tensor(x), Src::Tensor(y)) => ew::map_binary(
                        x.host::<f32>(),
                        y.host::<f32>(),
                        out.host_mut::<f32>(),
                        #[inline(always)]
                        move |m, a, b| f(m, a, b),
                    ),
                    (Src::Out, Src::Tensor(y)) => ew::map_binary_inplace(
                        out.host_mut::<f32>(),
                        y.host(),
                        #[inline(always)]
                        move |m, o, b| f(m, o, b),
                    ),
                    (Src::Tensor(x), Src::Out) => ew::map_binary_inplace(
                        out.host_mut::<f32>(),
                        x.host(),
                        #[inline(always)]
                        move |m, o, x| f(m, x, o),
                    ),
                    (Src::Out, Src::Out) => ew::map_unary_inplace(
                        out.host_mut::<f32>(),
                        #[inline(always)]
                        move |m, o| f(m, o, o),
                    ),
                }
            }};
            ($f:expr) => {{
                let f = $f;
                go!(fused move |_: MulAdd, x: f32, y: f32| f(x, y))
            }};
        }
        with_binary_fn!(op, a, b, go);
        Ok(())
    }

    fn cast(&self, x: &Tensor, out: &mut Tensor) -> Result<()> {
        macro_rules! convert {
            ($i:ty) => {
                match out.dtype() {
                    Dtype::F32 => cpu_cast::convert(x.host::<$i>(), out.host_mut::<f32>()),
                    Dtype::F16 => cpu_cast::convert(x.host::<$i>(), out.host_mut::<f16>()),
                    Dtype::BF16 => cpu_cast::convert(x.host::<$i>(), out.host_mut::<bf16>()),
                    other => return Err(cast_error(other)),
                }
            };
        }
        match x.dtype() {
            Dtype::F32 => convert!(f32),
            Dtype::F16 => convert!(f16),
            Dtype::BF16 => convert!(bf16),
            other => return Err(cast_error(other)),
        }
        Ok(())
    }

    fn fill(&self, out: &mut Tensor, value: f32) -> Result<()> {
        match out.dtype() {
            Dtype::F16 => hf::fill(out.host_mut::<f16>(), value),
            Dtype::BF16 => hf::fill(out.host_mut::<bf16>(), value),
            _ => ew::fill(out.host_mut::<f32>(), value),
        }
        Ok(())
    }

    fn threshold_u8(&self, x: &Tensor, t: f32, out: &mut Tensor) -> Result<()> {
        let o = out.host_mut::<i8>();
        match x.dtype() {
            Dtype::F16 => ew::threshold(x.host::<f16>(), t, o),
            Dtype::BF16 => ew::threshold(x.host::<bf16>(), t, o),
            _ => ew::threshold(x.host::<f32>(), t, o),
        }
        Ok(())
    }

    fn dequant_i8_rows(&self, q: &Tensor, scales: &Tensor, out: &mut Tensor) -> Result<()> {
        ew::dequant_i8_rows(q.host(), scales.host(), q.cols(), out.host_mut());
        Ok(())
    }

    fn binary_views(
        &self,
        _name: &'static str,
        op: Binary,
        x: &Tensor,
        y: &Tensor,
        out: &mut Tensor,
    ) -> Result<bool> {
        // 16-bit views are copied densely by the caller and take the 16-bit maps.
        if out.dtype() != Dtype::F32 {
            return Ok(false);
        }
        let Some((px, py, cols)) = shared_row_patterns(x.layout(), y.layout()) else {
            return Ok(false);
        };
        if cols == 0 {
            return Ok(true);
        }
        let rows = out.numel() / cols;
        let (xo, yo) = (
            row_operand(x, px, rows, cols),
            row_operand(y, py, rows, cols),
        );
        macro_rules! go {
            ($f:expr) => {
                ew::map_binary_rows(xo, yo, out.host_mut::<f32>(), cols, $f)
            };
        }
        match op {
            Binary::Add => go!(|_, a, b| a + b),
            Binary::Sub => go!(|_, a, b| a - b),
            Binary::Mul => go!(|_, a, b| a * b),
            Binary::Div => go!(|_, a, b| a / b),
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn broadcast(
        &self,
        _name: &'static str,
        y: &mut Tensor,
        v: &Tensor,
        b: Broadcast,
    ) -> Result<()> {
        if is_half(y.dtype()) {
            with_half!(y.dtype(), |E| hf::broadcast(
                y.host_mut::<E>(),
                v.host::<E>(),
                b.inner,
                b.per_row,
                b.v_len,
                b.repeat,
                b.multiply
            ));
            return Ok(());
        }
        let (y, v) = (y.host_mut(), v.host());
        ew::broadcast(y, v, b.inner, b.per_row, b.v_len, b.repeat, b.multiply);
        Ok(())
    }
}

/// [`ElementwiseOps::unary`] on 16-bit storage: the FP32 map of each instruction over
/// blocks widened in registers, each result rounded once.
fn unary_half<E: FloatElem + Element>(op: Unary, x: Src<'_>, out: &mut Tensor, a: f32, b: f32) {
    macro_rules! run {
        ($fits:expr, $fast:expr, $exact:expr) => {
            match x {
                Src::Out => hf::map_unary_inplace(out.host_mut::<E>(), $fits, $fast, $exact),
                Src::Tensor(x) => {
                    hf::map_unary(x.host::<E>(), out.host_mut::<E>(), $fits, $fast, $exact)
                }
            }
        };
    }
    macro_rules! go {
        (fused $f:expr) => {{
            let f = $f;
            run!(
                |_| true,
                #[inline(always)]
                move |m, v| f(m, v),
                |_| f32::NAN
            )
        }};
        (fitted $fits:expr, $fast:expr, $exact:expr) => {{
            let (fits, fast, exact) = ($fits, $fast, $exact);
            run!(
                #[inline(always)]
                move |v| fits(v),
                #[inline(always)]
                move |m, v| fast(m, v),
                exact
            )
        }};
        ($f:expr) => {{
            let f = $f;
            go!(fused move |_: MulAdd, v: f32| f(v))
        }};
    }
    with_unary_fn!(op, a, b, go);
}

/// [`ElementwiseOps::binary`] on 16-bit storage, as [`unary_half`]. The sin and cos gradients
/// take the fast sine and cosine where they hold for two input tensors, `exact` otherwise.
fn binary_half<E: FloatElem + Element>(
    op: Binary,
    x: Src<'_>,
    y: Src<'_>,
    out: &mut Tensor,
    a: f32,
    b: f32,
) {
    macro_rules! go {
        (trig $pick:expr, $exact:expr) => {{
            let (pick, exact) = ($pick, $exact);
            match (x, y) {
                (Src::Tensor(x), Src::Tensor(y)) => hf::map_binary(
                    x.host::<E>(),
                    y.host::<E>(),
                    out.host_mut::<E>(),
                    #[inline(always)]
                    |v| ew::trig_fits(v),
                    #[inline(always)]
                    move |m, v, dy| pick(ew::sin_cos_with(m, v), dy),
                    exact,
                ),
                _ => go!(exact),
            }
        }};
        (fused $f:expr) => {{
            let f = $f;
            let nan = |_: f32, _: f32| f32::NAN;
            match (x, y) {
                (Src::Tensor(x), Src::Tensor(y)) => hf::map_binary(
                    x.host::<E>(),
                    y.host::<E>(),
                    out.host_mut::<E>(),
                    |_| true,
                    #[inline(always)]
                    move |m, a, b| f(m, a, b),
                    nan,
                ),
                (Src::Out, Src::Tensor(y)) => hf::map_binary_inplace(
                    out.host_mut::<E>(),
                    y.host::<E>(),
                    |_| true,
                    #[inline(always)]
                    move |m, o, b| f(m, o, b),
                    nan,
                ),
                (Src::Tensor(x), Src::Out) => hf::map_binary_inplace(
                    out.host_mut::<E>(),
                    x.host::<E>(),
                    |_| true,
                    #[inline(always)]
                    move |m, o, x| f(m, x, o),
                    nan,
                ),
                (Src::Out, Src::Out) => hf::map_unary_inplace(
                    out.host_mut::<E>(),
                    |_| true,
                    #[inline(always)]
                    move |m, o| f(m, o, o),
                    |_| f32::NAN,
                ),
            }
        }};
        ($f:expr) => {{
            let f = $f;
            go!(fused move |_: MulAdd, x: f32, y: f32| f(x, y))
        }};
    }
    with_binary_fn!(op, a, b, go);
}

fn cast_error(dtype: Dtype) -> Error {
    Error::UnsupportedDtype {
        op: "cast",
        dtype,
        device: Device::Cpu,
    }
}

/// A view's elements as [`ew::RowOperand`] over `rows` rows of `cols`, read from its base's
/// storage in place.
fn row_operand(t: &Tensor, p: RowPattern, rows: usize, cols: usize) -> ew::RowOperand<'_> {
    let v = t.base_host::<f32>();
    match p {
        RowPattern::Dense { offset } => ew::RowOperand::Dense(&v[offset..offset + rows * cols]),
        RowPattern::Row { offset, cols } => ew::RowOperand::Row(&v[offset..offset + cols]),
        RowPattern::PerRow { offset, .. } => ew::RowOperand::PerRow(&v[offset..offset + rows]),
        RowPattern::Scalar { offset } => ew::RowOperand::Scalar(v[offset]),
    }
}
