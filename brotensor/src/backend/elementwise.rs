//! The element-wise op category: maps of one or two same-shaped operands, casts and fills.
//!
//! The map ops share one trait method per arity, keyed by an instruction ([`Unary`],
//! [`Binary`]); every backend turns an instruction into one instance of its single generic
//! kernel (CubeCL) or map (CPU). The public ops that use each instruction are listed on it.

pub(crate) use brotensor_kernels::elementwise::Broadcast;

use super::OnDevice;
use crate::{Error, Result, Tensor};

/// One-input element-wise instructions: `out = f(x; a, b)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unary {
    /// `x` (round_backward).
    Identity,
    /// `x + a` (add_scalar, add_scalar_inplace).
    AddScalar,
    /// `x - a` (sub_scalar).
    SubScalar,
    /// `x * a` (mul_scalar, scale_inplace).
    MulScalar,
    /// `x / a` (div_scalar).
    DivScalar,
    /// clamp to `[a, b]` with NaN passing through (clamp).
    Clamp,
    /// `e^x` (exp_forward).
    Exp,
    /// `ln x` (log_forward).
    Log,
    /// `sin x` (sin_forward).
    Sin,
    /// `cos x` (cos_forward).
    Cos,
    /// `1/sqrt(x)` (rsqrt_forward).
    Rsqrt,
    /// round half to even (round_forward).
    Round,
    /// `max(x, 0)` (relu_forward).
    Relu,
    /// `tanh x` (tanh_forward).
    Tanh,
    /// `1/(1+e^-x)` (sigmoid_forward).
    Sigmoid,
    /// `x sigmoid(x)` (silu_forward).
    Silu,
    /// tanh-GELU (gelu_forward).
    Gelu,
    /// erf-GELU (gelu_exact_forward).
    GeluExact,
    /// `x sigmoid(1.702 x)` (quick_gelu_forward).
    QuickGelu,
    /// ELU with `alpha = a` (elu_forward).
    Elu,
    /// leaky ReLU with slope `a` (leaky_relu_forward).
    LeakyRelu,
}

/// Two-input element-wise instructions: `out = f(x, y; a, b)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Binary {
    /// `x + y` (add, add_inplace, add_inplace_batched).
    Add,
    /// `x - y` (sub).
    Sub,
    /// `x * y` (mul, mul_inplace).
    Mul,
    /// `x / y` (div).
    Div,
    /// `a*x + b*y` (axpby_inplace).
    Axpby,
    /// `y * e^x` (exp_backward).
    ExpBackward,
    /// `y / x` (log_backward).
    LogBackward,
    /// `y * cos x` (sin_backward).
    SinBackward,
    /// `-y * sin x` (cos_backward).
    CosBackward,
    /// `-0.5 * y * x^3`, x the forward output (rsqrt_backward).
    RsqrtBackward,
    /// relu_backward (x the forward input, y = dy).
    ReluBackward,
    /// tanh_backward (x the forward output).
    TanhBackward,
    /// sigmoid_backward (x the forward output).
    SigmoidBackward,
    /// silu_backward.
    SiluBackward,
    /// gelu_backward.
    GeluBackward,
    /// gelu_exact_backward.
    GeluExactBackward,
    /// quick_gelu_backward.
    QuickGeluBackward,
    /// elu_backward with `alpha = a`.
    EluBackward,
    /// leaky_relu_backward with slope `a`.
    LeakyReluBackward,
}

/// Where an operand of a map comes from.
#[derive(Clone, Copy)]
pub(crate) enum Src<'a> {
    /// Another tensor, of the output's shape, dtype and device.
    Tensor(&'a Tensor),
    /// The output tensor itself: the op runs in place.
    Out,
}

/// Element-wise ops. Callers guarantee: operands and `out` share one device, dtype and
/// element count, and `out` is committed and sized.
pub(crate) trait ElementwiseOps: OnDevice {
    /// `out = op(x; a, b)`.
    fn unary(
        &self,
        name: &'static str,
        _op: Unary,
        _x: Src<'_>,
        _out: &mut Tensor,
        _a: f32,
        _b: f32,
    ) -> Result<()> {
        Err(not_implemented(name, self))
    }

    /// `out = op(x, y; a, b)`.
    #[allow(clippy::too_many_arguments)]
    fn binary(
        &self,
        name: &'static str,
        _op: Binary,
        _x: Src<'_>,
        _y: Src<'_>,
        _out: &mut Tensor,
        _a: f32,
        _b: f32,
    ) -> Result<()> {
        Err(not_implemented(name, self))
    }

    /// `out = x` converted to `out`'s float dtype (round to nearest even).
    fn cast(&self, _x: &Tensor, _out: &mut Tensor) -> Result<()> {
        Err(not_implemented("cast", self))
    }

    /// Every element of `out` set to `value` (converted to `out`'s float dtype).
    fn fill(&self, _out: &mut Tensor, _value: f32) -> Result<()> {
        Err(not_implemented("fill", self))
    }

    /// `out (I8) = x > t` (1 or 0).
    fn threshold_u8(&self, _x: &Tensor, _t: f32, _out: &mut Tensor) -> Result<()> {
        Err(not_implemented("threshold_u8", self))
    }

    /// `out (F32) = q (I8, rows x cols) * scales[row]` (weight-only INT8 dequantization).
    fn dequant_i8_rows(&self, _q: &Tensor, _scales: &Tensor, _out: &mut Tensor) -> Result<()> {
        Err(not_implemented("dequant_i8_rows", self))
    }

    /// `out = op(x, y)` (add, sub, mul or div) for operands that are views (broadcast,
    /// strided) of `out`'s dims, read where their layouts say, with no dense copy;
    /// `Ok(false)` (nothing done) where this backend cannot read these layouts or this dtype
    /// in place, and the caller makes dense copies instead.
    fn binary_views(
        &self,
        _name: &'static str,
        _op: Binary,
        _x: &Tensor,
        _y: &Tensor,
        _out: &mut Tensor,
    ) -> Result<bool> {
        Ok(false)
    }

    /// `y (+|*)= v` broadcast as `b` says (per row cycling through `v`, or per column), over
    /// all of `y`'s elements; `v` holds `b.v_len` elements of `y`'s dtype.
    fn broadcast(
        &self,
        name: &'static str,
        _y: &mut Tensor,
        _v: &Tensor,
        _b: Broadcast,
    ) -> Result<()> {
        Err(not_implemented(name, self))
    }
}

fn not_implemented<B: OnDevice + ?Sized>(op: &'static str, backend: &B) -> Error {
    Error::NotImplemented {
        op,
        device: backend.device(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;

    /// A backend that implements no element-wise op.
    struct Bare;

    impl OnDevice for Bare {
        fn device(&self) -> Device {
            Device::Wgpu(7)
        }
    }

    impl ElementwiseOps for Bare {}

    #[test]
    fn missing_ops_report_not_implemented_with_the_device() {
        let mut t = Tensor::default();
        let x = Tensor::default();
        let errors = [
            Bare.unary("exp_forward", Unary::Exp, Src::Tensor(&x), &mut t, 0.0, 0.0),
            Bare.binary("add_out", Binary::Add, Src::Out, Src::Out, &mut t, 0.0, 0.0),
            Bare.cast(&x, &mut t),
            Bare.fill(&mut t, 1.0),
            Bare.broadcast(
                "add_channel_bias_inplace",
                &mut t,
                &x,
                Broadcast {
                    inner: 1,
                    v_len: 1,
                    per_row: true,
                    repeat: usize::MAX,
                    multiply: false,
                },
            ),
        ];
        let ops = [
            "exp_forward",
            "add_out",
            "cast",
            "fill",
            "add_channel_bias_inplace",
        ];
        for (e, op) in errors.into_iter().zip(ops) {
            assert_eq!(
                e.unwrap_err(),
                Error::NotImplemented {
                    op,
                    device: Device::Wgpu(7)
                }
            );
        }
        let msg = Bare.fill(&mut t, 0.0).unwrap_err().to_string();
        assert_eq!(msg, "brotensor: fill: not implemented on wgpu:7");
    }
}
