//! 3-D convolution over NCDHW rows (PyTorch's `conv3d`: per-axis stride, zero padding and
//! dilation, channel groups), forward only as in the C++ contract, FP32 with FP32
//! accumulation: for each batch entry and group, tiles of output voxels have their input
//! patches gathered (im2col, one tile at a time) and multiplied by the group's weight rows.
//!
//! Layouts: `x (N, C_in*D*H*W)`, the weight `(C_out, C_in/groups*kD*kH*kW)`, the bias
//! `(C_out)`, `y (N, C_out*D_out*H_out*W_out)`, overwritten.

use rayon::prelude::*;

use crate::conv::tile_pixels;
use crate::linear::{matmul, Mat};
use crate::spatial::Conv3dSpec;

/// One 3-D convolution with every derived size checked ([`Conv3d::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv3d {
    /// Batch entries.
    pub n: usize,
    /// Input channels.
    pub c_in: usize,
    /// Input depth, height and width.
    pub input: [usize; 3],
    /// Output channels.
    pub c_out: usize,
    /// Kernel, stride, padding, dilation and groups.
    pub spec: Conv3dSpec,
    /// Output depth, height and width.
    pub out: [usize; 3],
    /// Elements of `x`, the weight and `y`.
    pub lens: [usize; 3],
}

impl Conv3d {
    /// The convolution of an `x` of `(n, c_in, input)` into `c_out` channels by `spec`, or
    /// the reason it has none (groups not dividing both channel counts, an output size below
    /// 1, a zero stride, kernel or dilation, a size that overflows).
    pub fn new(
        n: usize,
        c_in: usize,
        input: [usize; 3],
        c_out: usize,
        spec: Conv3dSpec,
    ) -> Result<Self, String> {
        spec.check_channels(c_in, c_out)?;
        let out = spec.out_size(input)?;
        let product = |what: &str, f: &[usize]| {
            f.iter()
                .try_fold(1usize, |a, &b| a.checked_mul(b))
                .ok_or_else(|| format!("the {what} size overflows"))
        };
        let cg_in = c_in / spec.groups;
        let [kd, kh, kw] = spec.kernel;
        product("patch (C_in/groups*kD*kH*kW)", &[cg_in, kd, kh, kw])?;
        product("output volume", &out)?;
        product("input volume", &input)?;
        product("kernel volume", &spec.kernel)?;
        // Per batch entry first: an empty batch must not hide an entry size that overflows.
        let lens = [
            product("input", &[c_in, input[0], input[1], input[2], n])?,
            product("weight", &[c_out, cg_in, kd, kh, kw])?,
            product("output", &[c_out, out[0], out[1], out[2], n])?,
        ];
        Ok(Conv3d {
            n,
            c_in,
            input,
            c_out,
            spec,
            out,
            lens,
        })
    }

    /// Gathers the patches of output voxels `voxels` from one group's input volumes `x`
    /// into `col`, row `((ci kD + kz) kH + ky) kW + kx`, column `voxel - start`.
    fn im2col(&self, x: &[f32], voxels: std::ops::Range<usize>, col: &mut [f32]) {
        let s = &self.spec;
        let [d, h, w] = self.input;
        let [_, oh, ow] = self.out;
        let [kd, kh, kw] = s.kernel;
        let width = voxels.len();
        let volume = d * h * w;
        // The input coordinate of output coordinate `o` through tap `k` on axis `a`.
        let source = |a: usize, o: usize, k: usize, n: usize| -> Option<usize> {
            (o * s.stride[a] + k * s.dilation[a])
                .checked_sub(s.padding[a])
                .filter(|&i| i < n)
        };
        col.par_chunks_exact_mut(width)
            .enumerate()
            .for_each(|(r, row)| {
                let (kx, ky, kz, ci) = (
                    r % kw,
                    (r / kw) % kh,
                    (r / (kw * kh)) % kd,
                    r / (kw * kh * kd),
                );
                let plane = &x[ci * volume..][..volume];
                for (t, v) in row.iter_mut().enumerate() {
                    let p = voxels.start + t;
                    let (oz, oy, ox) = (p / (oh * ow), (p / ow) % oh, p % ow);
                    *v = match (
                        source(0, oz, kz, d),
                        source(1, oy, ky, h),
                        source(2, ox, kx, w),
                    ) {
                        (Some(iz), Some(iy), Some(ix)) => plane[(iz * h + iy) * w + ix],
                        _ => 0.0,
                    };
                }
            });
    }
}

/// `y = conv3d(x, w) + bias`, overwriting `y`.
///
/// # Panics
/// If a slice length differs from `conv.lens` (the bias must hold `C_out` values).
pub fn conv3d_forward(conv: &Conv3d, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
    assert!(
        [x.len(), w.len(), y.len()] == conv.lens && bias.is_none_or(|b| b.len() == conv.c_out),
        "conv3d: lengths"
    );
    let voxels: usize = conv.out.iter().product();
    let volume: usize = conv.input.iter().product();
    let groups = conv.spec.groups;
    let (cg_in, cg_out) = (conv.c_in / groups, conv.c_out / groups);
    let k = cg_in * conv.spec.kernel.iter().product::<usize>();
    if y.is_empty() {
        return;
    }
    let (per_x, per_y) = (conv.c_in * volume, conv.c_out * voxels);
    let mut col = Vec::new();
    let mut out = Vec::new();
    for (n, yn) in y.chunks_exact_mut(per_y).enumerate() {
        let xn = &x[n * per_x..][..per_x];
        for g in 0..groups {
            let xg = &xn[g * cg_in * volume..][..cg_in * volume];
            let wg = Mat::new(&w[g * cg_out * k..][..cg_out * k], cg_out, k);
            let yg = &mut yn[g * cg_out * voxels..][..cg_out * voxels];
            for t0 in (0..voxels).step_by(tile_pixels(k)) {
                let tile = t0..(t0 + tile_pixels(k)).min(voxels);
                col.resize(k * tile.len(), 0.0);
                out.resize(cg_out * tile.len(), 0.0);
                conv.im2col(xg, tile.clone(), &mut col);
                matmul(wg, Mat::new(&col, k, tile.len()), &mut out, false);
                for (dst, src) in yg
                    .chunks_exact_mut(voxels)
                    .zip(out.chunks_exact(tile.len()))
                {
                    dst[tile.clone()].copy_from_slice(src);
                }
            }
        }
        if let Some(b) = bias {
            crate::conv::add_channel_bias(yn, b, voxels);
        }
    }
}
