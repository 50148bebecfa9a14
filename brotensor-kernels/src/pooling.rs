//! Pooling kernels: 2-D max pooling with the winner's index (one unit per output), its
//! gradient as a gather (one unit per input pixel, scanning only the outputs whose window
//! can cover it: no scatter, no atomics), and the masked mean over the rows of a `(K, D)`
//! matrix and its gradient (one unit per column). FP32 compares and sums.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, grid_1d, Buf, LaunchError};

/// The geometry of a 2-D max pool on `H x W` planes: per axis `[h, w]` the input, output,
/// window, stride, padding (both sides) and dilation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolWindow {
    /// Input `[H, W]`.
    pub input: [usize; 2],
    /// Output `[H_out, W_out]`.
    pub out: [usize; 2],
    /// Window.
    pub kernel: [usize; 2],
    /// Stride.
    pub stride: [usize; 2],
    /// Padding.
    pub padding: [usize; 2],
    /// Dilation.
    pub dilation: [usize; 2],
}

impl PoolWindow {
    /// Refuses zero windows, strides or dilations and sizes past 32 bits (window reach
    /// included); returns `(H W, H_out W_out)`.
    fn check(&self, planes: usize) -> Result<(usize, usize), LaunchError> {
        crate::launch::check_divisors(&[
            ("kernel", self.kernel[0].min(self.kernel[1])),
            ("stride", self.stride[0].min(self.stride[1])),
            ("dilation", self.dilation[0].min(self.dilation[1])),
        ])?;
        for a in 0..2 {
            let reach = extent("pool window reach", &[self.kernel[a], self.dilation[a]])?;
            let last = extent("pool window start", &[self.out[a], self.stride[a]])?;
            let far = crate::launch::sum("pool window reach", reach, last)?;
            let padded = crate::launch::sum("padded input", self.input[a], self.padding[a])?;
            check_u32(&[("pool window reach", far), ("padded input", padded)])?;
        }
        let plane_in = extent("N*C*H*W", &[planes, self.input[0], self.input[1]])?;
        let plane_out = extent("N*C*H_out*W_out", &[planes, self.out[0], self.out[1]])?;
        check_u32(&[("x", plane_in), ("y", plane_out)])?;
        Ok((plane_in, plane_out))
    }
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn max_pool2d_kernel<F: Float>(
    x: &Array<F>,
    y: &mut Array<F>,
    idx: &mut Array<i32>,
    h: usize,
    w: usize,
    ho: usize,
    wo: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    ph: usize,
    pw: usize,
    dh: usize,
    dw: usize,
) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let ow = i % wo;
        let t = i / wo;
        let oh = t % ho;
        let p = t / ho;
        let mut best = f32::new(0.0);
        let mut at = i32::new(-1);
        for a in 0..kh {
            let yy = oh * sh + a * dh;
            if yy >= ph && yy - ph < h {
                let ih = yy - ph;
                for b in 0..kw {
                    let xx = ow * sw + b * dw;
                    if xx >= pw && xx - pw < w {
                        let pos = ih * w + xx - pw;
                        let v = f32::cast_from(x[p * h * w + pos]);
                        if at < 0 || v > best {
                            best = v;
                            at = i32::cast_from(pos);
                        }
                    }
                }
            }
        }
        if at < 0 {
            // -inf, its bits from a variable (WGSL has no infinite literal; CUDA cannot
            // reinterpret a literal): `at + 1` is 0 here.
            let bits = u32::cast_from(at + 1i32) + u32::new(0xFF80_0000_i64);
            best = f32::reinterpret(bits);
        }
        y[i] = F::cast_from(best);
        idx[i] = at;
    }
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments, clippy::manual_div_ceil)]
fn max_pool2d_backward_kernel<F: Float>(
    dy: &Array<F>,
    idx: &Array<i32>,
    dx: &mut Array<F>,
    h: usize,
    w: usize,
    ho: usize,
    wo: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    ph: usize,
    pw: usize,
    dh: usize,
    dw: usize,
) {
    let i = ABSOLUTE_POS;
    if i < dx.len() {
        let iw = i % w;
        let t = i / w;
        let ih = t % h;
        let p = t / h;
        let me = i32::cast_from(ih * w + iw);
        // The outputs whose window can cover (ih, iw), per axis.
        let py = ih + ph;
        let reach_y = (kh - 1) * dh;
        let mut oy0 = 0usize;
        if py > reach_y {
            oy0 = (py - reach_y + sh - 1) / sh;
        }
        let oy1 = (py / sh + 1).min(ho);
        let px = iw + pw;
        let reach_x = (kw - 1) * dw;
        let mut ox0 = 0usize;
        if px > reach_x {
            ox0 = (px - reach_x + sw - 1) / sw;
        }
        let ox1 = (px / sw + 1).min(wo);
        let base = p * ho * wo;
        let mut acc = 0.0f32;
        for oy in oy0..oy1 {
            for ox in ox0..ox1 {
                let o = base + oy * wo + ox;
                if idx[o] == me {
                    acc += f32::cast_from(dy[o]);
                }
            }
        }
        dx[i] = F::cast_from(acc);
    }
}

/// `y`, `idx` = the max pool of `planes` planes of `x` by `g`: each output the largest
/// input of its window (first of equals; padding never wins) and its position `h W + w`, or
/// `-inf` and -1 for a window entirely in the padding.
pub fn launch_max_pool2d<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, y, idx): (&Handle, &Handle, &Handle),
    planes: usize,
    g: &PoolWindow,
) -> Result<(), LaunchError> {
    let (x_len, y_len) = g.check(planes)?;
    if y_len == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let xb = Buf::new("x", x, x_len, b)?.nonempty();
    let yb = Buf::new("y", y, y_len, b)?;
    let ib = Buf::new("idx", idx, y_len, 4)?;
    let (count, dim) = grid_1d(client, y_len)?;
    // SAFETY: units below `y_len` (the checked lengths of `y` and `idx`) only; a unit of plane
    // `p < planes` reads `x` only at rows below `H` and columns below `W` of that plane
    // (each tap tested): inside the checked `x`. All coordinates fit 32 bits (checked).
    unsafe {
        max_pool2d_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            xb.arg(),
            yb.arg(),
            ib.arg(),
            g.input[0],
            g.input[1],
            g.out[0],
            g.out[1],
            g.kernel[0],
            g.kernel[1],
            g.stride[0],
            g.stride[1],
            g.padding[0],
            g.padding[1],
            g.dilation[0],
            g.dilation[1],
        );
    }
    Ok(())
}

/// `dx` = the gradient of the max pool `g` of `planes` planes from `dy` and the forward's
/// `idx`: each input pixel sums the `dy` of the outputs that picked it; overwritten.
pub fn launch_max_pool2d_backward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (dy, idx, dx): (&Handle, &Handle, &Handle),
    planes: usize,
    g: &PoolWindow,
) -> Result<(), LaunchError> {
    let (x_len, y_len) = g.check(planes)?;
    if x_len == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let dyb = Buf::new("dy", dy, y_len, b)?.nonempty();
    let ib = Buf::new("idx", idx, y_len, 4)?.nonempty();
    let dxb = Buf::new("dx", dx, x_len, b)?;
    let (count, dim) = grid_1d(client, x_len)?;
    // SAFETY: units below `x_len` only; a unit of plane `p` reads `dy` and `idx` at output
    // rows below `H_out` and columns below `W_out` of that plane (the covering ranges are
    // clamped to them): inside the checked buffers. With no outputs the ranges are empty.
    unsafe {
        max_pool2d_backward_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            dyb.arg(),
            ib.arg(),
            dxb.arg(),
            g.input[0],
            g.input[1],
            g.out[0],
            g.out[1],
            g.kernel[0],
            g.kernel[1],
            g.stride[0],
            g.stride[1],
            g.padding[0],
            g.padding[1],
            g.dilation[0],
            g.dilation[1],
        );
    }
    Ok(())
}

/// Whether row `k` counts: `mask[k] >= 0.5`, or every row without a mask.
#[cube]
fn valid(mask: &Array<f32>, k: usize, #[comptime] has_mask: bool) -> bool {
    let mut ok = true;
    if comptime!(has_mask) {
        ok = mask[k] >= 0.5f32;
    }
    ok
}

#[cube(launch_unchecked)]
fn masked_mean_pool_kernel<F: Float>(
    x: &Array<F>,
    mask: &Array<f32>,
    y: &mut Array<F>,
    k_rows: usize,
    d: usize,
    #[comptime] has_mask: bool,
) {
    let j = ABSOLUTE_POS;
    if j < d {
        let mut acc = 0.0f32;
        let mut count = u32::new(0);
        for k in 0..k_rows {
            if valid(mask, k, has_mask) {
                acc += f32::cast_from(x[k * d + j]);
                count += 1u32;
            }
        }
        let mut v = 0.0f32;
        if count > 0u32 {
            v = acc / f32::cast_from(count);
        }
        y[j] = F::cast_from(v);
    }
}

#[cube(launch_unchecked)]
fn masked_mean_pool_backward_kernel<F: Float>(
    dy: &Array<F>,
    mask: &Array<f32>,
    dx: &mut Array<F>,
    k_rows: usize,
    d: usize,
    #[comptime] has_mask: bool,
) {
    let j = ABSOLUTE_POS;
    if j < d {
        let mut count = u32::new(0);
        for k in 0..k_rows {
            if valid(mask, k, has_mask) {
                count += 1u32;
            }
        }
        let mut g = 0.0f32;
        if count > 0u32 {
            g = f32::cast_from(dy[j]) * (1.0f32 / f32::cast_from(count));
        }
        for k in 0..k_rows {
            let mut v = 0.0f32;
            if valid(mask, k, has_mask) {
                v = g;
            }
            dx[k * d + j] = F::cast_from(v);
        }
    }
}

/// The masked mean over the `k_rows` rows of `x` (`(k_rows, d)`) into `y` (`d`), or with
/// `backward` its gradient `dx` (`(k_rows, d)`) from `dy` (`d`); `mask`: `k_rows` F32
/// values, row `k` valid where `mask[k] >= 0.5`, or every row without it.
pub fn launch_masked_mean_pool<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (src, mask, dst): (&Handle, Option<&Handle>, &Handle),
    (k_rows, d): (usize, usize),
    backward: bool,
) -> Result<(), LaunchError> {
    let rows_len = extent("K*D", &[k_rows, d])?;
    check_u32(&[("K*D", rows_len), ("K", k_rows)])?;
    if d == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let (src_len, dst_len) = if backward {
        (d, rows_len)
    } else {
        (rows_len, d)
    };
    let sb = Buf::new(if backward { "dy" } else { "x" }, src, src_len, b)?.nonempty();
    let db = Buf::new(if backward { "dx" } else { "y" }, dst, dst_len, b)?.nonempty();
    let mb = mask.map(|m| Buf::new("mask", m, k_rows, 4)).transpose()?;
    let has_mask = mb.is_some();
    // Without a mask the kernel never reads it: `y` stands in.
    let mb = mb.map_or_else(|| db.stand_in(), |m| m.nonempty());
    let (count, dim) = grid_1d(client, d)?;
    // SAFETY: units below `d` only; column `j` touches `(k, j)` for `k < K` (below the
    // checked `K d`) and `j` of the `d`-long side, and reads the mask (when bound, checked
    // to hold `K` values) below `K`. With `K = 0` nothing of the `(K, d)` side is touched.
    unsafe {
        if backward {
            masked_mean_pool_backward_kernel::launch_unchecked::<F, R>(
                client,
                count,
                dim,
                sb.arg(),
                mb.arg(),
                db.arg(),
                k_rows,
                d,
                has_mask,
            );
        } else {
            masked_mean_pool_kernel::launch_unchecked::<F, R>(
                client,
                count,
                dim,
                sb.arg(),
                mb.arg(),
                db.arg(),
                k_rows,
                d,
                has_mask,
            );
        }
    }
    Ok(())
}

/// Every kernel of this file in every specialisation the library can launch, lowered to
/// CUDA C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{for_floats, Lowering as L, Rt};
    let c = l.client.clone();
    let a = L::array;
    for_floats!(|F| {
        l.lower(max_pool2d_kernel::MaxPool2dKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            a(),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
        ));
        l.lower(
            max_pool2d_backward_kernel::MaxPool2dBackwardKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                a(),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
            ),
        );
        for has_mask in [false, true] {
            l.lower(masked_mean_pool_kernel::MaskedMeanPoolKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                a(),
                (),
                (),
                has_mask,
            ));
            l.lower(
                masked_mean_pool_backward_kernel::MaskedMeanPoolBackwardKernel::<F, Rt>::new(
                    L::settings_1d(),
                    c.clone(),
                    a(),
                    a(),
                    a(),
                    (),
                    (),
                    has_mask,
                ),
            );
        }
    });
}
