//! Neural-codec quantizers (C++ `ops/codec.h`): vector quantization, the bottleneck of
//! EnCodec / DAC residual VQ (residual stacks are composed by the caller: encode, subtract,
//! encode again), and finite scalar quantization (NanoCodec). FP32 only. Both backward
//! passes are the straight-through estimator: the upstream gradient copied through.
//!
//! ```
//! # fn main() -> brotensor::Result<()> {
//! use brotensor::{ops, Tensor};
//! let codebook = Tensor::from_slice(&[0.0f32, 0.0, 1.0, 1.0, -1.0, 0.5], 3, 2)?;
//! let x = Tensor::from_slice(&[0.9f32, 1.2, -0.8, 0.4], 2, 2)?;
//! let (mut idx, mut q) = (Tensor::default(), Tensor::default());
//! ops::vq_encode_forward(&x, &codebook, &mut idx, &mut q)?;
//! assert_eq!(idx.to_vec::<i32>()?, [1, 2]);
//! assert_eq!(q.to_vec::<f32>()?, [1.0, 1.0, -1.0, 0.5]);
//! # Ok(())
//! # }
//! ```

use super::{check_dtype, checked_product, copy_into, dispatch, input, written};
use crate::{Dtype, Error, Result, Tensor};

/// `(N, D)` of a rank-2 operand, or the error naming it.
fn matrix(op: &'static str, name: &'static str, t: &Tensor) -> Result<(usize, usize)> {
    match t.dims() {
        &[n, d] => Ok((n, d)),
        dims => Err(Error::shape(
            op,
            format!("{name} must be a matrix (N, D), got dims {dims:?}"),
        )),
    }
}

/// Vector-quantization encode (C++ `vq_encode_forward`): for each row of `x` `(N, D)`, the
/// codeword of `codebook` `(K, D)` nearest by squared distance, ties to the lowest index.
/// `indices` is resized to `(N, 1)` I32 (decode it with the embedding lookup) and
/// `quantized` to `(N, D)` F32, the chosen codewords. NaN distances never win (a row whose
/// every distance is NaN or infinite takes codeword 0). FP32; `K >= 1` when `N > 0`.
pub fn vq_encode_forward(
    x: &Tensor,
    codebook: &Tensor,
    indices: &mut Tensor,
    quantized: &mut Tensor,
) -> Result<()> {
    let op = "vq_encode_forward";
    let be = dispatch(
        op,
        &[
            input("x", x),
            input("codebook", codebook),
            written("indices", indices),
            written("quantized", quantized),
        ],
    )?;
    check_dtype(op, "x", x, Dtype::F32)?;
    check_dtype(op, "codebook", codebook, Dtype::F32)?;
    let (n, d) = matrix(op, "x", x)?;
    let (k, dc) = matrix(op, "codebook", codebook)?;
    if dc != d {
        return Err(Error::shape(
            op,
            format!("codebook has codewords of {dc} coordinates, x has rows of {d}"),
        ));
    }
    if n > 0 && (k == 0 || d == 0) {
        return Err(Error::shape(
            op,
            format!("codebook (K, D) = ({k}, {d}) has no codeword to choose"),
        ));
    }
    checked_product(op, "K * D", &[k, d])?;
    be.out("indices", indices, &[n, 1], Dtype::I32)?;
    be.out("quantized", quantized, &[n, d], Dtype::F32)?;
    if n == 0 {
        return Ok(());
    }
    be.vq_encode(op, x, codebook, indices, quantized)
}

/// The straight-through gradient of a quantizer's output: `dx = dquantized` (F32), resized
/// to its dims and overwritten.
fn straight_through(op: &'static str, dquantized: &Tensor, dx: &mut Tensor) -> Result<()> {
    dispatch(op, &[input("dquantized", dquantized), written("dx", dx)])?;
    check_dtype(op, "dquantized", dquantized, Dtype::F32)?;
    // The copy sizes `dx` to `dquantized`.
    copy_into(dquantized, dx)
}

/// Backward of [`vq_encode_forward`] for the encoder (C++ `vq_encode_backward`): the
/// straight-through estimator, `dx = dquantized` (`(N, D)` F32; `dx` resized and
/// overwritten). The codebook and commitment losses are separate terms of the caller's.
pub fn vq_encode_backward(dquantized: &Tensor, dx: &mut Tensor) -> Result<()> {
    straight_through("vq_encode_backward", dquantized, dx)
}

/// Finite scalar quantization (C++ `fsq_quantize_forward`): each coordinate `d` of each row
/// of `x` `(N, D)` (bounded into `[-1, 1]` by the caller, usually with tanh) snapped to one
/// of `L_d = levels[d]` evenly spaced levels: `v = clamp(x, -1, 1)` (NaN counts as -1),
/// `i_d = round((v + 1) / 2 (L_d - 1))` (halves away from zero), `quantized = i_d / h_d - 1`
/// with `h_d = (L_d - 1) / 2`. `packed_indices` gets `i_0 + L_0 (i_1 + L_1 (i_2 + ...))`
/// (dimension 0 least significant). `levels`: `D` I32 values (any shape, `(D, 1)` in the
/// C++ contract), each >= 2, their product at most `i32::MAX`. `quantized` is resized to
/// `(N, D)` F32, `packed_indices` to `(N, 1)` I32.
pub fn fsq_quantize_forward(
    x: &Tensor,
    levels: &Tensor,
    quantized: &mut Tensor,
    packed_indices: &mut Tensor,
) -> Result<()> {
    let op = "fsq_quantize_forward";
    let be = dispatch(
        op,
        &[
            input("x", x),
            input("levels", levels),
            written("quantized", quantized),
            written("packed_indices", packed_indices),
        ],
    )?;
    check_dtype(op, "x", x, Dtype::F32)?;
    check_dtype(op, "levels", levels, Dtype::I32)?;
    let (n, d) = matrix(op, "x", x)?;
    if levels.numel() != d {
        return Err(Error::shape(
            op,
            format!("levels must hold D = {d} counts, has {}", levels.numel()),
        ));
    }
    let counts = levels.to_vec::<i32>()?;
    let mut product = 1i64;
    for (dim, &l) in counts.iter().enumerate() {
        if l < 2 {
            return Err(Error::invalid(
                op,
                format!("levels[{dim}] = {l}: every dimension needs at least 2 levels"),
            ));
        }
        product *= i64::from(l);
        if product > i64::from(i32::MAX) {
            return Err(Error::invalid(
                op,
                format!(
                    "the product of the levels passes i32::MAX by dimension {dim}: the packed \
                     indices would not fit in I32"
                ),
            ));
        }
    }
    if n > 0 && d == 0 {
        return Err(Error::shape(op, "x has rows of no coordinates to quantize"));
    }
    be.out("quantized", quantized, &[n, d], Dtype::F32)?;
    be.out("packed_indices", packed_indices, &[n, 1], Dtype::I32)?;
    if n == 0 {
        return Ok(());
    }
    be.fsq_quantize(op, x, levels, quantized, packed_indices)
}

/// Backward of [`fsq_quantize_forward`] (C++ `fsq_quantize_backward`): the straight-through
/// estimator, `dx = dquantized` (`(N, D)` F32; `dx` resized and overwritten).
pub fn fsq_quantize_backward(dquantized: &Tensor, dx: &mut Tensor) -> Result<()> {
    straight_through("fsq_quantize_backward", dquantized, dx)
}
