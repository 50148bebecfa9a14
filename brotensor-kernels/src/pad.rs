//! Padding and neighbourhood gathers over NCHW planes: `unfold2d` (one unit per output
//! element: each output pixel's `kH x kW` window, the spatial grid kept) with zero, reflect
//! or replicate borders, of which 2-D and 1-D padding are the one-tap case, and the adjoint
//! of a padding as a gather (one unit per input element, summing in FP32 the padded pixels
//! that read it: no scatter, no atomics).

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, grid_1d, sum, Buf, LaunchError};

/// Padding modes, as the kernels' comptime code (the C++ codes).
pub const PAD_ZERO: u32 = 0;
/// Mirror about the end samples, which are not repeated.
pub const PAD_REFLECT: u32 = 1;
/// Repeat the end samples.
pub const PAD_REPLICATE: u32 = 2;

/// The geometry of an unfold of `H x W` planes: per axis `[h, w]` the input, the window,
/// the stride, the padding before and after, and the output (`(in + before + after -
/// kernel) / stride + 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window2d {
    /// Input `[H, W]`.
    pub input: [usize; 2],
    /// Window `[kH, kW]`.
    pub kernel: [usize; 2],
    /// Stride.
    pub stride: [usize; 2],
    /// Padding before (top, left).
    pub before: [usize; 2],
    /// Padding after (bottom, right).
    pub after: [usize; 2],
    /// Output `[H_out, W_out]`.
    pub out: [usize; 2],
}

impl Window2d {
    /// Refuses a geometry whose windows reach past the padded input, a zero window or
    /// stride, a mode that cannot pad an axis, or sizes past 32 bits; returns the padded
    /// size `[H_p, W_p]`.
    fn check(&self, mode: u32) -> Result<[usize; 2], LaunchError> {
        let refused = |what| Err(LaunchError::Invalid { what });
        let mut padded = [0; 2];
        for (a, size) in padded.iter_mut().enumerate() {
            let (len, k, s) = (self.input[a], self.kernel[a], self.stride[a]);
            if k == 0 || s == 0 {
                return refused("window and stride must be at least 1");
            }
            *size = sum(
                "padded size",
                sum("padded size", len, self.before[a])?,
                self.after[a],
            )?;
            if self.out[a] > 0 {
                let reach = sum(
                    "window reach",
                    extent("window reach", &[self.out[a] - 1, s])?,
                    k,
                )?;
                if reach > *size {
                    return refused("the windows reach past the padded input");
                }
            }
            match mode {
                PAD_REFLECT if self.before[a] >= len || self.after[a] >= len => {
                    return refused("reflect padding needs each pad below the size")
                }
                PAD_REPLICATE if len == 0 && *size > 0 => {
                    return refused("replicate padding needs a nonempty axis")
                }
                PAD_ZERO | PAD_REFLECT | PAD_REPLICATE => {}
                _ => return refused("padding mode must be 0, 1 or 2"),
            }
        }
        check_u32(&[("padded H", padded[0]), ("padded W", padded[1])])?;
        Ok(padded)
    }
}

/// The input position that padded position `j` of an axis of `len` padded by `before`
/// reads, or `len` (no position) for a zero.
#[cube]
fn pad_source(j: usize, len: usize, before: usize, #[comptime] mode: u32) -> usize {
    let mut s = len;
    if j >= before && j - before < len {
        s = j - before;
    } else if comptime!(mode == PAD_REFLECT) {
        // Before the signal: mirrored about position 0; after it: about position len - 1.
        if j < before {
            s = before - j;
        } else {
            s = 2 * (len - 1) + before - j;
        }
    } else if comptime!(mode == PAD_REPLICATE) {
        if j < before {
            s = 0;
        } else {
            s = len - 1;
        }
    }
    s
}

/// `y[p, ky kW + kx, oy, ox] = x[p, src(oy sy + ky), src(ox sx + kx)]`, zero where `src`
/// has no position.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn unfold2d_kernel<F: Float>(
    x: &Array<F>,
    y: &mut Array<F>,
    h: usize,
    w: usize,
    kw: usize,
    taps: usize,
    sh: usize,
    sw: usize,
    top: usize,
    left: usize,
    ho: usize,
    wo: usize,
    #[comptime] mode: u32,
) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let ox = i % wo;
        let t = i / wo;
        let oy = t % ho;
        let t = t / ho;
        let k = t % taps;
        let p = t / taps;
        let sy = pad_source(oy * sh + k / kw, h, top, mode);
        let sx = pad_source(ox * sw + k % kw, w, left, mode);
        let mut v = F::new(0.0);
        if sy < h && sx < w {
            v = x[(p * h + sy) * w + sx];
        }
        y[i] = v;
    }
}

/// The padded positions of an axis that read input position `s`: the range `lo..=hi` (the
/// position itself, or for replicate the whole run of copies of an end), and two mirrored
/// positions (reflect), each `padded` where there is none.
#[derive(CubeType)]
struct Readers {
    lo: usize,
    hi: usize,
    m1: usize,
    m2: usize,
}

#[cube]
fn readers(s: usize, len: usize, before: usize, padded: usize, #[comptime] mode: u32) -> Readers {
    let mut r = Readers {
        lo: s + before,
        hi: s + before,
        m1: padded,
        m2: padded,
    };
    if comptime!(mode == PAD_REPLICATE) {
        if s == 0 {
            r.lo = 0;
        }
        if s + 1 == len {
            r.hi = padded - 1;
        }
    } else if comptime!(mode == PAD_REFLECT) {
        let after = padded - len - before;
        if s >= 1 && s <= before {
            r.m1 = before - s;
        }
        if s + 1 < len && len - 1 - s <= after {
            r.m2 = 2 * (len - 1) + before - s;
        }
    }
    r
}

/// The sum of row `base`'s entries at the column readers `c`.
#[cube]
fn sum_row<F: Float>(dy: &Array<F>, base: usize, c: &Readers, padded: usize) -> f32 {
    let mut acc = 0.0f32;
    for b in c.lo..c.hi + 1 {
        acc += f32::cast_from(dy[base + b]);
    }
    if c.m1 < padded {
        acc += f32::cast_from(dy[base + c.m1]);
    }
    if c.m2 < padded {
        acc += f32::cast_from(dy[base + c.m2]);
    }
    acc
}

/// The adjoint of a padding: `dx[p, i, j]` sums `dy[p, a, b]` over the padded pixels that
/// read `(i, j)`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn pad2d_backward_kernel<F: Float>(
    dy: &Array<F>,
    dx: &mut Array<F>,
    h: usize,
    w: usize,
    hp: usize,
    wp: usize,
    top: usize,
    left: usize,
    #[comptime] mode: u32,
) {
    let i = ABSOLUTE_POS;
    if i < dx.len() {
        let j = i % w;
        let t = i / w;
        let r = t % h;
        let plane = (t / h) * hp * wp;
        let rows = readers(r, h, top, hp, mode);
        let cols = readers(j, w, left, wp, mode);
        let mut acc = 0.0f32;
        for a in rows.lo..rows.hi + 1 {
            acc += sum_row::<F>(dy, plane + a * wp, &cols, wp);
        }
        if rows.m1 < hp {
            acc += sum_row::<F>(dy, plane + rows.m1 * wp, &cols, wp);
        }
        if rows.m2 < hp {
            acc += sum_row::<F>(dy, plane + rows.m2 * wp, &cols, wp);
        }
        dx[i] = F::cast_from(acc);
    }
}

/// `y` = the unfold of `planes` planes of `x` by `g` in `mode` ([`PAD_ZERO`],
/// [`PAD_REFLECT`], [`PAD_REPLICATE`]): planes of `kH kW H_out W_out`, overwritten.
pub fn launch_unfold2d<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    x: &Handle,
    y: &Handle,
    planes: usize,
    g: &Window2d,
    mode: u32,
) -> Result<(), LaunchError> {
    g.check(mode)?;
    let taps = extent("kH*kW", &g.kernel)?;
    let x_len = extent("N*C*H*W", &[planes, g.input[0], g.input[1]])?;
    let y_len = extent("N*C*kH*kW*H_out*W_out", &[planes, taps, g.out[0], g.out[1]])?;
    check_u32(&[("x", x_len), ("y", y_len)])?;
    if y_len == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let xb = Buf::new("x", x, x_len, b)?.nonempty();
    let yb = Buf::new("y", y, y_len, b)?;
    let (count, dim) = grid_1d(client, y_len)?;
    // SAFETY: units below `y_len` (the checked length of `y`) only. A unit reads `x` only
    // where both sources are positions (`sy < H`, `sx < W`) of plane `p < planes`: inside
    // the checked `x`. The windows stay inside the padded input and the mode was checked
    // against the pads, so the mirrored positions do not wrap.
    unsafe {
        unfold2d_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            xb.arg(),
            yb.arg(),
            g.input[0],
            g.input[1],
            g.kernel[1],
            taps,
            g.stride[0],
            g.stride[1],
            g.before[0],
            g.before[1],
            g.out[0],
            g.out[1],
            mode,
        );
    }
    Ok(())
}

/// `dx` = the adjoint of the padding of `planes` planes by `g` (a one-tap window, stride
/// 1) in `mode`, from `dy` (padded planes); overwritten.
pub fn launch_pad2d_backward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    dy: &Handle,
    dx: &Handle,
    planes: usize,
    g: &Window2d,
    mode: u32,
) -> Result<(), LaunchError> {
    let padded = g.check(mode)?;
    if g.kernel != [1, 1] || g.stride != [1, 1] || g.out != padded {
        return Err(LaunchError::Invalid {
            what: "a padding's adjoint takes a one-tap window of stride 1",
        });
    }
    let dx_len = extent("N*C*H*W", &[planes, g.input[0], g.input[1]])?;
    let dy_len = extent("N*C*H_p*W_p", &[planes, padded[0], padded[1]])?;
    check_u32(&[("dx", dx_len), ("dy", dy_len)])?;
    if dx_len == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let dyb = Buf::new("dy", dy, dy_len, b)?;
    let dxb = Buf::new("dx", dx, dx_len, b)?;
    let (count, dim) = grid_1d(client, dx_len)?;
    // SAFETY: units below `dx_len` only; a unit of plane `p < planes` reads `dy` at padded
    // rows and columns below `H_p` and `W_p` (the readers of a position stay inside the
    // padded axis: its mirrors only where the pads reach them), inside the checked `dy`.
    unsafe {
        pad2d_backward_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            dyb.arg(),
            dxb.arg(),
            g.input[0],
            g.input[1],
            padded[0],
            padded[1],
            g.before[0],
            g.before[1],
            mode,
        );
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
        for mode in [PAD_ZERO, PAD_REFLECT, PAD_REPLICATE] {
            l.lower(unfold2d_kernel::Unfold2dKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
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
                mode,
            ));
            l.lower(pad2d_backward_kernel::Pad2dBackwardKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                (),
                (),
                (),
                (),
                (),
                (),
                mode,
            ));
        }
    });
}
