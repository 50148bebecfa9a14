//! The mask builders and the token moments of an attention map.

use super::super::{checked_product, dispatch, input, written};
use crate::{Dtype, Error, Result, Tensor};

/// `mask (k, 1) F32`: `mask[i] = x[offset + i stride] > 0.5 ? 1 : 0` for `i < k`, reading
/// `x`'s elements as one flat vector (C++ `build_slot_mask`). Errors when the last index
/// read, `offset + (k - 1) stride`, is outside `x`.
pub fn build_slot_mask(
    x: &Tensor,
    offset: usize,
    k: usize,
    stride: usize,
    mask: &mut Tensor,
) -> Result<()> {
    let op = "build_slot_mask";
    let be = dispatch(op, &[input("x", x).float(), written("mask", mask)])?;
    if k > 0 {
        let last = checked_product(op, "(k - 1) * stride", &[k - 1, stride])?
            .checked_add(offset)
            .ok_or_else(|| Error::shape(op, "offset + (k - 1) * stride overflows usize"))?;
        if last >= x.numel() {
            return Err(Error::shape(
                op,
                format!(
                    "index offset + (k - 1) * stride = {last} is outside `x` ({} elements)",
                    x.numel()
                ),
            ));
        }
    }
    be.out("mask", mask, &[k, 1], Dtype::F32)?;
    if k == 0 {
        return Ok(());
    }
    be.slot_mask(x, offset, stride, mask)
}

/// `mask (l, 1) F32`: `mask[k] = k <= q ? 1 : 0`, the causal key mask of query row `q`
/// (C++ `build_causal_mask_row`). Runs on `mask`'s device (the CPU for a new tensor).
pub fn build_causal_mask_row(l: usize, q: usize, mask: &mut Tensor) -> Result<()> {
    let op = "build_causal_mask_row";
    let be = dispatch(op, &[written("mask", mask)])?;
    be.out("mask", mask, &[l, 1], Dtype::F32)?;
    if l == 0 {
        return Ok(());
    }
    be.causal_mask_row(q, mask)
}

/// Per key column `k` of `attn (Lq, Lk)` with `Lq = h_lat w_lat` a row-major token grid
/// (`q = y w_lat + x`): `mass[k] = sum_q attn[q, k]` and `centroid[k] = (sum_q y attn,
/// sum_q x attn) / mass[k]` (`(0, 0)` when the mass is at most 1e-8). `mass (Lk, 1)` and
/// `centroid (Lk, 2)` are F32 and overwritten (C++ `attention_token_moments`, whose GPU path
/// takes FP16; here `attn` is any float dtype the device computes in, with FP32 sums).
pub fn attention_token_moments(
    attn: &Tensor,
    h_lat: usize,
    w_lat: usize,
    mass: &mut Tensor,
    centroid: &mut Tensor,
) -> Result<()> {
    let op = "attention_token_moments";
    let be = dispatch(
        op,
        &[
            input("attn", attn).float(),
            written("mass", mass),
            written("centroid", centroid),
        ],
    )?;
    let lq = checked_product(op, "h_lat * w_lat", &[h_lat, w_lat])?;
    if attn.rows() != lq {
        return Err(Error::shape(
            op,
            format!(
                "`attn` has {} rows but h_lat * w_lat = {h_lat} * {w_lat} = {lq}",
                attn.rows()
            ),
        ));
    }
    let lk = attn.cols();
    be.out("mass", mass, &[lk, 1], Dtype::F32)?;
    be.out("centroid", centroid, &[lk, 2], Dtype::F32)?;
    if lk == 0 {
        return Ok(());
    }
    be.token_moments(attn, w_lat, mass, centroid)
}
