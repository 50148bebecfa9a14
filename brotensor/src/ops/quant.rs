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
//!
//! The INT8-weight ops (per-row scales: [`quantize_int8_per_row_host`],
//! [`linear_forward_batched_int8w_fp16`], [`matmul_int8w_fp16`]) live here too: the weight is
//! dequantized on the device, then multiplied in 16 bits.

use super::linear::{
    check_16bit, dims, linear_forward_batched_fp16, product_16bit, shape_error, NN,
};
use super::Act;
use super::{check_float, declare, dispatch, input, input_opt, written};
use crate::backend::Gemm;
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
    dequantize_as("dequantize", w, dtype, out)
}

/// [`dequantize`] under the name of the op that called it.
fn dequantize_as(op: &'static str, w: &Tensor, dtype: Dtype, out: &mut Tensor) -> Result<()> {
    let be = dispatch(op, &[input("w", w), written("out", out)])?;
    check_weight(op, w, be)?;
    if !dtype.is_float() || !be.converts(dtype) {
        return Err(Error::UnsupportedDtype {
            op,
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
    let be = dispatch(
        op,
        &[
            input("w", w),
            input_opt("bias", bias),
            input("x", x),
            written("y", y),
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
            const OP: &str = stringify!($dequant);
            declare(OP, &[input("w", w), written("out", out)])?;
            check_kind(OP, w, Dtype::$kind)?;
            dequantize_as(OP, w, Dtype::F16, out)
        }

        #[doc = concat!("`y (out, 1) = W (out, in) . x + bias` with `W` ", stringify!($kind), " and `x` F16 holding `in` elements (C++ `", stringify!($gemv), "`; the GEMV path of [`quant_linear`]); `y` is resized, F16.")]
        pub fn $gemv(w: &Tensor, bias: Option<&Tensor>, x: &Tensor, y: &mut Tensor) -> Result<()> {
            const OP: &str = stringify!($gemv);
            declare(OP, &[input("w", w), input_opt("bias", bias), input("x", x), written("y", y)])?;
            check_kind(OP, w, Dtype::$kind)?;
            check_f16(OP, "x", x)?;
            let row = x.reshaped(1, x.numel())?;
            quant_linear_as(OP, w, bias, &row, Act::None, y)?;
            y.reshape_(&[w.rows(), 1])
        }

        #[doc = concat!("`Y (B, out) = X (B, in) . W^T + bias` with `W` ", stringify!($kind), " and `X` F16 (C++ `", stringify!($batched), "`; [`quant_linear`]); `Y` is resized, F16.")]
        pub fn $batched(w: &Tensor, bias: Option<&Tensor>, x: &Tensor, y: &mut Tensor) -> Result<()> {
            const OP: &str = stringify!($batched);
            declare(OP, &[input("w", w), input_opt("bias", bias), input("x", x), written("y", y)])?;
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

// ---- INT8 weights (per-row scales): host quantization and the 16-bit products ----

/// Per-row symmetric INT8 quantization on the host (C++ `quantize_int8_per_row_host`):
/// `scale = max|w| / 127` per row (0 for an all-zero row) and
/// `q = clamp(round_half_even(w / scale), -127, 127)`. `w` is `rows x cols` row-major.
pub fn quantize_int8_per_row_host(
    w: &[f32],
    rows: usize,
    cols: usize,
) -> Result<(Vec<i8>, Vec<f32>)> {
    let op = "quantize_int8_per_row_host";
    if rows.checked_mul(cols) != Some(w.len()) {
        return Err(shape_error(
            op,
            format!("{} values for {rows} x {cols}", w.len()),
        ));
    }
    let mut q = vec![0i8; w.len()];
    // With `cols == 0`, `rows` is not bounded by `w`: allocate its scales fallibly.
    let mut scales = Vec::new();
    scales
        .try_reserve_exact(rows)
        .map_err(|_| shape_error(op, format!("{rows} row scales cannot be allocated")))?;
    scales.resize(rows, 0.0f32);
    for r in 0..rows {
        let row = &w[r * cols..(r + 1) * cols];
        let max = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 0.0 };
        scales[r] = scale;
        if scale > 0.0 {
            for (o, &v) in q[r * cols..(r + 1) * cols].iter_mut().zip(row) {
                *o = (v / scale).round_ties_even().clamp(-127.0, 127.0) as i8;
            }
        }
    }
    Ok((q, scales))
}

/// `Y (B, out) = X (B, in) . (W_i8 * scales)^T + bias` (C++
/// `linear_forward_batched_int8w_fp16`): `W` is I8 `(out, in)` with F32 per-row `scales`
/// `(out, 1)`; `X`, `bias` and `Y` are F16 or BF16; FP32 accumulation. The weight is
/// dequantized on the device, then multiplied.
pub fn linear_forward_batched_int8w_fp16(
    w: &Tensor,
    scales: &Tensor,
    bias: Option<&Tensor>,
    x: &Tensor,
    y: &mut Tensor,
) -> Result<()> {
    let op = "linear_forward_batched_int8w_fp16";
    let be = dispatch(
        op,
        &[
            input("w", w),
            input("scales", scales),
            input_opt("bias", bias),
            input("x", x),
            written("y", y),
        ],
    )?;
    let w16 = int8_weight_as(op, be, w, scales, x)?;
    linear_forward_batched_fp16(&w16, bias, x, y)
}

/// The I8 weight `w (out, in)` times its F32 per-row `scales`, in `x`'s 16-bit dtype (checked
/// here), dequantized on the device.
pub(crate) fn int8_weight_as(
    op: &'static str,
    be: Dispatched,
    w: &Tensor,
    scales: &Tensor,
    x: &Tensor,
) -> Result<Tensor> {
    if w.dtype() != crate::Dtype::I8 {
        return Err(Error::Dtype {
            op,
            operand: "w",
            expected: "must be I8".into(),
            found: w.dtype(),
        });
    }
    if scales.dtype() != crate::Dtype::F32 || scales.numel() != w.rows() {
        return Err(shape_error(
            op,
            format!(
                "`scales` must be F32 with one value per row of `w` ({})",
                w.rows()
            ),
        ));
    }
    check_16bit(op, "x", x, None)?;
    let mut wide = Tensor::empty_on(be.device(), w.rows(), w.cols(), crate::Dtype::F32)?;
    if w.numel() > 0 {
        be.dequant_i8_rows(w, scales, &mut wide)?;
    }
    wide.to_dtype(x.dtype())
}

/// `Y (out, B) = (W_i8 * scales) . X` (C++ `matmul_int8w_fp16`, the `(M, K) . (K, N)`
/// convention of [`matmul`](super::matmul)): `W` is I8 `(out, in)` with F32 per-row `scales` `(out, 1)`; `X
/// (in, B)` and `Y` are F16 or BF16; FP32 accumulation; `Y` is resized. The weight is
/// dequantized on the device, then multiplied (the CPU computes in F32 on widened copies).
pub fn matmul_int8w_fp16(w: &Tensor, scales: &Tensor, x: &Tensor, y: &mut Tensor) -> Result<()> {
    let op = "matmul_int8w_fp16";
    let be = dispatch(
        op,
        &[
            input("w", w),
            input("scales", scales),
            input("x", x),
            written("y", y),
        ],
    )?;
    if x.rows() != w.cols() {
        return Err(shape_error(
            op,
            format!(
                "`w` is {} and `x` is {}: inner dimensions differ",
                dims(w),
                dims(x)
            ),
        ));
    }
    let w16 = int8_weight_as(op, be, w, scales, x)?;
    be.out("y", y, &[w.rows(), x.cols()], x.dtype())?;
    if y.numel() == 0 {
        return Ok(());
    }
    if w.cols() == 0 {
        return y.zero();
    }
    let (m, k, n) = (w.rows(), w.cols(), x.cols());
    let g = Gemm {
        m,
        n,
        k,
        strides: (m * k, k * n, m * n),
        ..NN
    };
    product_16bit(be, op, (&w16, x, None), y, g)
}
