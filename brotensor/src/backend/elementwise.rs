//! The element-wise op category: maps of one or two same-shaped operands, casts and fills.
//!
//! The map ops share one trait method per arity, keyed by an instruction ([`Unary`],
//! [`Binary`]); every backend turns an instruction into one instance of its single generic
//! kernel (CubeCL, where the instruction is a comptime parameter) or map (CPU). The
//! instruction sets are defined once, with their GPU math, in the kernel crate
//! (`brotensor_kernels::elementwise`); the public ops that use each are listed on it there.

/// Two-input element-wise instructions: `out = f(x, y; a, b)`.
pub(crate) use brotensor_kernels::elementwise::BinaryInstr as Binary;
pub(crate) use brotensor_kernels::elementwise::Broadcast;
/// One-input element-wise instructions: `out = f(x; a, b)`.
pub(crate) use brotensor_kernels::elementwise::UnaryInstr as Unary;

use super::OnDevice;
use crate::{Error, Result, Tensor};

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

#[cfg(feature = "internals")]
/// The module's internal checks, run by the workspace's tests through
/// `brotensor::internals` (so the library is not compiled again as its own test harness).
pub mod checks {
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

    pub fn missing_ops_report_not_implemented_with_the_device() {
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
