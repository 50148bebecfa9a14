//! Image input (C++ `ops/image.h`): per-channel normalisation of NCHW, and decoded
//! interleaved bytes (`H x W x C`, as image decoders give them) to scaled F32 NCHW on any
//! device. (Files to tensors and back: [`crate::io::image`].)
//!
//! There is no U8 dtype: the bytes come from the host as a slice and are uploaded once,
//! packed four to a 32-bit word, by the GPU path. A byte dtype would have to be refused by
//! every other op; image bytes essentially always start on the host, from a decoder.

use super::conv::{check_activation, output_dims};
use super::{check_dtypes_match, checked_product, dispatch, input, written, Nchw};
use crate::{Dtype, Error, Result, Tensor};

/// `y[n, c] = (x[n, c] - mean[c]) / std[c]` (C++ `image_normalize`; the ImageNet / CLIP /
/// SAM preprocess). A zero `std[c]` gives IEEE inf or NaN (the values are not read back to
/// check). `x`: `(N, C*H*W)` for `dims = (N, C, H, W)`; `mean`, `std`: `C` values of `x`'s
/// dtype; `y` is resized to `x`'s dims.
pub fn image_normalize(
    x: &Tensor,
    mean: &Tensor,
    std: &Tensor,
    dims: impl Into<Nchw>,
    y: &mut Tensor,
) -> Result<()> {
    let op = "image_normalize";
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input("mean", mean).float(),
            input("std", std).float(),
            written("y", y),
        ],
    )?;
    check_dtypes_match(op, ("x", x), &[("mean", mean), ("std", std)])?;
    let d: Nchw = dims.into();
    check_activation(op, "x", x, d)?;
    for (name, t) in [("mean", mean), ("std", std)] {
        if t.numel() != d.c {
            return Err(Error::shape(
                op,
                format!("`{name}` must hold C = {} values, has {}", d.c, t.numel()),
            ));
        }
    }
    let plane = d.plane().map_err(|e| Error::shape(op, e))?;
    be.out("y", y, &output_dims(x, d), x.dtype())?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.image_normalize(op, plane, x, mean, std, y)
}

/// Interleaved image bytes to F32 NCHW (C++ `image_u8_to_f32_nhwc_to_nchw`): `y[n, c, h,
/// w] = src[((n H + h) W + w) C + c] * scale + bias` (`scale = 1/255, bias = 0` maps to [0,
/// 1]; `2/255, -1` to [-1, 1]). `src`: `N*H*W*C` host bytes for `dims = (N, H, W, C)`; `y`
/// is resized to `(N, C*H*W)` F32 on its own device (a `Tensor::default()` is on the CPU;
/// `Tensor::empty_on(device, 0, 0, Dtype::F32)?` lands the image on `device`).
pub fn image_u8_to_f32_nhwc_to_nchw(
    src: &[u8],
    (n, h, w, c): (usize, usize, usize, usize),
    scale: f32,
    bias: f32,
    y: &mut Tensor,
) -> Result<()> {
    let op = "image_u8_to_f32_nhwc_to_nchw";
    let be = dispatch(op, &[written("y", y)])?;
    let pixels = checked_product(op, "H*W", &[h, w])?;
    let len = checked_product(op, "N*H*W*C", &[n, pixels, c])?;
    if src.len() != len {
        return Err(Error::shape(
            op,
            format!(
                "`src` must hold N*H*W*C = {len} bytes for (N, H, W, C) = ({n}, {h}, {w}, {c}), has {}",
                src.len()
            ),
        ));
    }
    let per_item = checked_product(op, "C*H*W", &[c, pixels])?;
    be.out("y", y, &[n, per_item], Dtype::F32)?;
    if len == 0 {
        return Ok(());
    }
    be.image_u8_to_nchw(op, src, (n, pixels, c), (scale, bias), y)
}
