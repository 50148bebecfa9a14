//! Deformable 2-D convolution (DCNv2, torchvision's `deform_conv2d`), forward only: each
//! tap of each output pixel samples the input bilinearly at its grid position moved by a
//! learned offset, scaled by an optional mask, and the samples are reduced by the weight as
//! a convolution's patches are. FP32 with FP32 accumulation; im2col tiles and the GEMM.
//!
//! Layouts (the C++ contract): `x (N, C_in*H*W)`; `offset (N, G*2*kH*kW*H_out*W_out)`,
//! channel `g*2*kH*kW + 2*(ky*kW + kx)` the row (y) offset of tap `(ky, kx)` for the input
//! channels of deform group `g`, the next channel the column (x) offset; `mask (N,
//! G*kH*kW*H_out*W_out)` (channel `g*kH*kW + ky*kW + kx`) or none (all ones); the weight
//! OIHW `(C_out, C_in/groups*kH*kW)`; `y (N, C_out*H_out*W_out)`, overwritten.

use rayon::prelude::*;

use crate::conv::{tile_pixels, Conv2d};
use crate::linear::{matmul, Mat};

/// The bilinear sample of the `h x w` plane `p` at `(y, x)`, zero outside `(-1, h) x (-1,
/// w)` and for each corner outside the plane (torchvision's rule).
pub fn bilinear(p: &[f32], (h, w): (usize, usize), y: f32, x: f32) -> f32 {
    if y <= -1.0 || y >= h as f32 || x <= -1.0 || x >= w as f32 {
        return 0.0;
    }
    let (y0, x0) = (y.floor(), x.floor());
    let (ly, lx) = (y - y0, x - x0);
    let (y0, x0) = (y0 as isize, x0 as isize);
    let at = |yy: isize, xx: isize| {
        if yy < 0 || xx < 0 || yy >= h as isize || xx >= w as isize {
            0.0
        } else {
            p[yy as usize * w + xx as usize]
        }
    };
    (1.0 - ly) * (1.0 - lx) * at(y0, x0)
        + (1.0 - ly) * lx * at(y0, x0 + 1)
        + ly * (1.0 - lx) * at(y0 + 1, x0)
        + ly * lx * at(y0 + 1, x0 + 1)
}

/// The sampling point of tap `(ky, kx)` of output pixel `p` of `conv`, before its offset.
fn grid_point(conv: &Conv2d, p: usize, (ky, kx): (usize, usize)) -> (f32, f32) {
    let s = &conv.spec;
    let (oy, ox) = (p / conv.out[1], p % conv.out[1]);
    let y = (oy * s.stride[0] + ky * s.dilation[0]) as f32 - s.padding[0] as f32;
    let x = (ox * s.stride[1] + kx * s.dilation[1]) as f32 - s.padding[1] as f32;
    (y, x)
}

/// `y = deform_conv2d(x, offset, mask, w) + bias` over `deform_groups` offset groups,
/// overwriting `y`. Sizes as [`Conv2d`] (the output grid by the conv2d formula).
///
/// # Panics
/// If a slice length differs from the layouts above.
#[allow(clippy::too_many_arguments)]
pub fn deform_conv2d_forward(
    conv: &Conv2d,
    deform_groups: usize,
    x: &[f32],
    offset: &[f32],
    mask: Option<&[f32]>,
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
) {
    let [kh, kw] = conv.spec.kernel;
    let (n, c_in) = (conv.x.n, conv.x.c);
    let pixels = conv.out[0] * conv.out[1];
    let taps = kh * kw;
    let (per_off, per_mask) = (
        deform_groups * 2 * taps * pixels,
        deform_groups * taps * pixels,
    );
    assert!(
        [x.len(), w.len(), y.len()] == conv.lens
            && offset.len() == n * per_off
            && mask.is_none_or(|m| m.len() == n * per_mask)
            && bias.is_none_or(|b| b.len() == conv.c_out)
            && deform_groups > 0
            && c_in.is_multiple_of(deform_groups),
        "deform_conv2d: lengths"
    );
    if y.is_empty() {
        return;
    }
    let groups = conv.spec.groups;
    let (cg_in, cg_out) = (conv.group_in(), conv.group_out());
    let k = cg_in * taps;
    let plane = conv.x.h * conv.x.w;
    let per_group_channels = c_in / deform_groups;
    let (per_x, per_y) = (c_in * plane, conv.c_out * pixels);
    let mut col = Vec::new();
    let mut out = Vec::new();
    for (b, yn) in y.chunks_exact_mut(per_y).enumerate() {
        let (xn, offn) = (&x[b * per_x..][..per_x], &offset[b * per_off..][..per_off]);
        let maskn = mask.map(|m| &m[b * per_mask..][..per_mask]);
        for g in 0..groups {
            let wg = Mat::new(&w[g * cg_out * k..][..cg_out * k], cg_out, k);
            let yg = &mut yn[g * cg_out * pixels..][..cg_out * pixels];
            for t0 in (0..pixels).step_by(tile_pixels(k)) {
                let tile = t0..(t0 + tile_pixels(k)).min(pixels);
                col.resize(k * tile.len(), 0.0);
                out.resize(cg_out * tile.len(), 0.0);
                // Row `(ci, ky, kx)` of the tile's deformed patches.
                col.par_chunks_exact_mut(tile.len())
                    .enumerate()
                    .for_each(|(r, row)| {
                        let (tap, ci) = (r % taps, g * cg_in + r / taps);
                        let dg = ci / per_group_channels;
                        let src = &xn[ci * plane..][..plane];
                        let off_y = &offn[(dg * 2 * taps + 2 * tap) * pixels..][..pixels];
                        let off_x = &offn[(dg * 2 * taps + 2 * tap + 1) * pixels..][..pixels];
                        let m = maskn.map(|m| &m[(dg * taps + tap) * pixels..][..pixels]);
                        for (j, v) in row.iter_mut().enumerate() {
                            let p = tile.start + j;
                            let (gy, gx) = grid_point(conv, p, (tap / kw, tap % kw));
                            let s =
                                bilinear(src, (conv.x.h, conv.x.w), gy + off_y[p], gx + off_x[p]);
                            *v = m.map_or(s, |m| s * m[p]);
                        }
                    });
                matmul(wg, Mat::new(&col, k, tile.len()), &mut out, false);
                for (dst, src) in yg
                    .chunks_exact_mut(pixels)
                    .zip(out.chunks_exact(tile.len()))
                {
                    dst[tile.clone()].copy_from_slice(src);
                }
            }
        }
        if let Some(bias) = bias {
            crate::conv::add_channel_bias(yn, bias, pixels);
        }
    }
}
