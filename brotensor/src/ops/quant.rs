//! GGUF block-quantized compute: weights stay in their blocks on every device.
//!
//! A quantized weight is a tensor of a block dtype ([`Dtype::is_quant`]), e.g. from
//! [`crate::io::gguf::upload_raw_on`]: `(rows, cols)` elements with `cols` a whole number of
//! blocks (blocks run along the contiguous axis, as in ggml). [`dequantize`] decodes it to
//! F32/F16/BF16; [`quant_linear`] multiplies activations by it while reading the blocks
//! directly (no dequantized copy of the weight), with FP32 accumulation: up to
//! [`QUANT_GEMV_MAX_ROWS`] activation rows take the GEMV path (decode: each weight byte read
//! once for all rows), more rows the GEMM path (prefill: blocks decoded into tiles).
//! [`supports_dtype`](crate::supports_dtype) says which devices compute with which block
//! dtypes. The C++ names (`dequant_q4k_to_fp16`, `linear_forward_q4k_fp16`,
//! `linear_forward_batched_q4k_fp16`, and the same for Q8_0 and Q6_K) are thin wrappers.

use super::Act;
use super::{check_float, dispatch};
use crate::ops::Dispatched;
use crate::{Dtype, Error, Result, Tensor};

/// The most activation rows [`quant_linear`] sends down the GEMV (decode) path; more rows take
/// the GEMM (prefill) path.
pub const QUANT_GEMV_MAX_ROWS: usize = 8;

/// The block dtypes the quantized ops compute with (every GGUF weight type the host decoder
/// knows; Q8_1 and Q8_K are ggml's activation formats and are not weight types).
pub const QUANT_WEIGHT_DTYPES: [Dtype; 13] = [
    Dtype::Q4_0,
    Dtype::Q4_1,
    Dtype::Q5_0,
    Dtype::Q5_1,
    Dtype::Q8_0,
    Dtype::Q2_K,
    Dtype::Q3_K,
    Dtype::Q4_K,
    Dtype::Q5_K,
    Dtype::Q6_K,
    Dtype::IQ4_NL,
    Dtype::IQ4_XS,
    Dtype::MXFP4,
];

/// Checks that `w` is a committed, dense `(rows, cols)` tensor of a block dtype the device
/// computes with.
fn check_weight(op: &'static str, w: &Tensor, be: Dispatched) -> Result<()> {
    if !QUANT_WEIGHT_DTYPES.contains(&w.dtype()) {
        return Err(Error::Dtype {
            op,
            operand: "w",
            expected: "expected a GGUF weight block dtype (Q4_0 ... MXFP4)".into(),
            found: w.dtype(),
        });
    }
    if !w.is_committed() {
        return Err(Error::invalid(op, "`w` holds no data (uncommitted)"));
    }
    if !be.computes_quant(w.dtype()) {
        return Err(Error::UnsupportedDtype {
            op,
            dtype: w.dtype(),
            device: be.device(),
        });
    }
    if !w.cols().is_multiple_of(w.dtype().block_size()) {
        return Err(Error::shape(
            op,
            format!(
                "`w` has {} columns, not a whole number of {} blocks of {}",
                w.cols(),
                w.dtype(),
                w.dtype().block_size()
            ),
        ));
    }
    Ok(())
}

/// `out (rows, cols)` of `dtype` (F32, F16 or BF16): the elements of the block-quantized
/// `w (rows, cols)` decoded (bit-exact with ggml's decoder in F32; F16/BF16 round that to
/// nearest even). `out` is resized.
pub fn dequantize(w: &Tensor, dtype: Dtype, out: &mut Tensor) -> Result<()> {
    const OP: &str = "dequantize";
    let be = dispatch(OP, &[("w", w), ("out", out)])?;
    check_weight(OP, w, be)?;
    if !dtype.is_float() || !be.converts(dtype) {
        return Err(Error::UnsupportedDtype {
            op: OP,
            dtype,
            device: be.device(),
        });
    }
    be.out("out", out, &[w.rows(), w.cols()], dtype)?;
    if out.numel() == 0 {
        return Ok(());
    }
    be.dequantize(w, out)
}

/// `y (m, n) = act(x (m, k) . dequant(w)^T + bias)`: `w (n, k)` of a block dtype, read as
/// blocks (never dequantized whole); `x` F32, F16 or BF16 the device computes in; `bias`
/// optional, `n` elements of `x`'s dtype; FP32 accumulation; `y` is resized and takes `x`'s
/// dtype. `m <= QUANT_GEMV_MAX_ROWS` takes the GEMV path, larger `m` the GEMM path.
pub fn quant_linear(
    w: &Tensor,
    bias: Option<&Tensor>,
    x: &Tensor,
    act: Act,
    y: &mut Tensor,
) -> Result<()> {
    quant_linear_as("quant_linear", w, bias, x, act, y)
}

fn quant_linear_as(
    op: &'static str,
    w: &Tensor,
    bias: Option<&Tensor>,
    x: &Tensor,
    act: Act,
    y: &mut Tensor,
) -> Result<()> {
    let none = Tensor::default();
    let be = dispatch(
        op,
        &[
            ("w", w),
            ("bias", bias.unwrap_or(&none)),
            ("x", x),
            ("y", y),
        ],
    )?;
    check_weight(op, w, be)?;
    check_float(op, "x", x, be)?;
    if x.cols() != w.cols() {
        return Err(Error::shape(
            op,
            format!(
                "`x` rows have {} elements but `w` rows have {}",
                x.cols(),
                w.cols()
            ),
        ));
    }
    if let Some(b) = bias {
        if b.dtype() != x.dtype() || b.numel() != w.rows() {
            return Err(Error::shape(
                op,
                format!(
                    "`bias` must hold {} elements of {} (one per row of `w`), not {} of {}",
                    w.rows(),
                    x.dtype(),
                    b.numel(),
                    b.dtype()
                ),
            ));
        }
    }
    be.out("y", y, &[x.rows(), w.rows()], x.dtype())?;
    if y.numel() == 0 {
        return Ok(());
    }
    if x.rows() <= QUANT_GEMV_MAX_ROWS {
        be.quant_gemv(w, bias, x, act, y)
    } else {
        be.quant_gemm(w, bias, x, act, y)
    }
}

/// Checks that `w` has the dtype a C++-named wrapper is for.
fn check_kind(op: &'static str, w: &Tensor, kind: Dtype) -> Result<()> {
    if w.dtype() != kind {
        return Err(Error::Dtype {
            op,
            operand: "w",
            expected: format!("must be {kind}"),
            found: w.dtype(),
        });
    }
    Ok(())
}

/// Checks that an activation is F16 (the `_fp16` wrappers).
fn check_f16(op: &'static str, name: &'static str, t: &Tensor) -> Result<()> {
    if t.dtype() != Dtype::F16 {
        return Err(Error::Dtype {
            op,
            operand: name,
            expected: "must be F16".into(),
            found: t.dtype(),
        });
    }
    Ok(())
}

macro_rules! cpp_quant_names {
    ($($kind:ident: $dequant:ident, $gemv:ident, $batched:ident;)*) => {$(
        #[doc = concat!("`out (rows, cols)` F16: the ", stringify!($kind), " blocks of `w` decoded (C++ `", stringify!($dequant), "`; see [`dequantize`]).")]
        pub fn $dequant(w: &Tensor, out: &mut Tensor) -> Result<()> {
            check_kind(stringify!($dequant), w, Dtype::$kind)?;
            dequantize(w, Dtype::F16, out)
        }

        #[doc = concat!("`y (out, 1) = W (out, in) . x + bias` with `W` ", stringify!($kind), " and `x` F16 holding `in` elements (C++ `", stringify!($gemv), "`; the GEMV path of [`quant_linear`]); `y` is resized, F16.")]
        pub fn $gemv(w: &Tensor, bias: Option<&Tensor>, x: &Tensor, y: &mut Tensor) -> Result<()> {
            const OP: &str = stringify!($gemv);
            check_kind(OP, w, Dtype::$kind)?;
            check_f16(OP, "x", x)?;
            let row = x.reshaped(1, x.numel())?;
            quant_linear_as(OP, w, bias, &row, Act::None, y)?;
            y.reshape_(&[w.rows(), 1])
        }

        #[doc = concat!("`Y (B, out) = X (B, in) . W^T + bias` with `W` ", stringify!($kind), " and `X` F16 (C++ `", stringify!($batched), "`; [`quant_linear`]); `Y` is resized, F16.")]
        pub fn $batched(w: &Tensor, bias: Option<&Tensor>, x: &Tensor, y: &mut Tensor) -> Result<()> {
            const OP: &str = stringify!($batched);
            check_kind(OP, w, Dtype::$kind)?;
            check_f16(OP, "x", x)?;
            quant_linear_as(OP, w, bias, x, Act::None, y)
        }
    )*};
}

cpp_quant_names! {
    Q4_K: dequant_q4k_to_fp16, linear_forward_q4k_fp16, linear_forward_batched_q4k_fp16;
    Q8_0: dequant_q8_0_to_fp16, linear_forward_q8_0_fp16, linear_forward_batched_q8_0_fp16;
    Q6_K: dequant_q6k_to_fp16, linear_forward_q6k_fp16, linear_forward_batched_q6k_fp16;
}
