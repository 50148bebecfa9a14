//! 2-D convolution over NCHW rows (PyTorch's `conv2d` with per-axis stride, zero padding and
//! dilation, and channel groups), forward and backward, FP32 with FP32 accumulation.
//!
//! Layouts (the C++ contract): `x (N, C_in*H*W)`, the weight OIHW `(C_out, C_in/groups*kH*kW)`,
//! the bias `(C_out)`, `y (N, C_out*H_out*W_out)`. The forward pass and the input gradient
//! overwrite their output; the weight and bias gradients accumulate into theirs.
//!
//! The products are implicit GEMMs through [`matmul`]: for each batch entry and group, tiles
//! of [`tile_pixels`] output pixels have their input patches gathered into a
//! `(C_in/groups*kH*kW) x tile` matrix in cache (im2col one tile at a time, never the whole
//! matrix), which one product with the group's weight rows turns into the tile's outputs. A
//! 1x1 convolution with stride 1 and no padding needs no gather (NCHW rows are already the
//! product's right operand); batch entries with small output planes share one product (their
//! patches side by side in the tile); and a depthwise convolution (one input and one output channel per
//! group) runs as a direct loop, where a product of one row would waste the GEMM.

use rayon::prelude::*;

use crate::linear::{matmul, Mat};
use crate::packed::{self, PackedLhs};
use crate::simd::wide;
use crate::spatial::{Conv2dSpec, Nchw};

/// The fewest output pixels per im2col tile: enough columns for the product to run at speed
/// (a 3x3 convolution over 320 channels, 2880 patch rows, takes tiles of this size).
pub const TILE_PIXELS: usize = 512;

/// Output pixels per im2col tile for patches of `k` rows: about 1 MiB of patches (the
/// product then sees wide right operands where `k` is small, a stem's 147 rows say), at
/// least [`TILE_PIXELS`] and at most 8 times that, in multiples of 64.
pub fn tile_pixels(k: usize) -> usize {
    ((1usize << 18) / k.max(1) / 64 * 64).clamp(TILE_PIXELS, 8 * TILE_PIXELS)
}

/// One 2-D convolution: the input dims, the output channels and the spec, with every derived
/// size checked ([`Conv2d::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    /// Input dims `(N, C_in, H, W)`.
    pub x: Nchw,
    /// Output channels.
    pub c_out: usize,
    /// Kernel, stride, padding, dilation and groups.
    pub spec: Conv2dSpec,
    /// Output height and width.
    pub out: [usize; 2],
    /// Elements of `x`, the weight and `y`.
    pub lens: [usize; 3],
}

impl Conv2d {
    /// The convolution of an `x` of `dims` into `c_out` channels by `spec`, or the reason it
    /// has none: `groups` not dividing both channel counts, an output size below 1, a zero
    /// stride, kernel or dilation, or a size that overflows.
    pub fn new(x: Nchw, c_out: usize, spec: Conv2dSpec) -> Result<Self, String> {
        spec.check_channels(x.c, c_out)?;
        let out = spec.out_size([x.h, x.w])?;
        Self::sized(x, c_out, spec, out)
    }

    /// The convolution of [`Conv2d::new`] computing only the first `out` rows and columns of
    /// its output grid: the geometry of a transposed convolution, whose output padding can
    /// make the forward grid larger than its input. Errors as `new`, or when `out` is empty
    /// or larger than the grid.
    pub fn with_out(
        x: Nchw,
        c_out: usize,
        spec: Conv2dSpec,
        out: [usize; 2],
    ) -> Result<Self, String> {
        spec.check_channels(x.c, c_out)?;
        let grid = spec.out_size([x.h, x.w])?;
        if out[0] == 0 || out[1] == 0 || out[0] > grid[0] || out[1] > grid[1] {
            return Err(format!(
                "an output of {out:?} is not within the convolution's grid {grid:?}"
            ));
        }
        Self::sized(x, c_out, spec, out)
    }

    fn sized(x: Nchw, c_out: usize, spec: Conv2dSpec, out: [usize; 2]) -> Result<Self, String> {
        let overflow = |what: &str| format!("the {what} size overflows");
        let x_len = x.numel()?;
        let w_len = [x.c / spec.groups, spec.kernel[0], spec.kernel[1]]
            .into_iter()
            .try_fold(c_out, usize::checked_mul)
            .ok_or_else(|| overflow("weight"))?;
        // Per batch entry first: an empty batch must not hide an entry size that overflows.
        let y_len = [out[0], out[1], x.n]
            .into_iter()
            .try_fold(c_out, usize::checked_mul)
            .ok_or_else(|| overflow("output"))?;
        // The passes slice by the output plane and the im2col rows even when the batch or
        // the output channels are empty (the products above are then 0 whatever follows).
        out[0]
            .checked_mul(out[1])
            .ok_or_else(|| overflow("output plane"))?;
        [spec.kernel[0], spec.kernel[1]]
            .into_iter()
            .try_fold(x.c / spec.groups, usize::checked_mul)
            .ok_or_else(|| overflow("patch (C_in/groups*kH*kW)"))?;
        Ok(Conv2d {
            x,
            c_out,
            spec,
            out,
            lens: [x_len, w_len, y_len],
        })
    }

    /// Input channels per group.
    pub fn group_in(&self) -> usize {
        self.x.c / self.spec.groups
    }

    /// Output channels per group.
    pub fn group_out(&self) -> usize {
        self.c_out / self.spec.groups
    }

    /// Rows of the im2col matrix: `C_in/groups * kH * kW`.
    fn patch(&self) -> usize {
        self.group_in() * self.spec.kernel[0] * self.spec.kernel[1]
    }

    /// Output pixels per channel.
    fn out_pixels(&self) -> usize {
        self.out[0] * self.out[1]
    }

    /// Whether the input rows are the product's operand as they are (1x1, stride 1, no
    /// padding, and the output grid is the input grid).
    fn is_pointwise(&self) -> bool {
        let s = &self.spec;
        s.kernel == [1, 1]
            && s.stride == [1, 1]
            && s.padding == [0, 0]
            && self.out == [self.x.h, self.x.w]
    }

    /// Whether [`conv2d_forward`] runs on packed weights (so [`PackedWeights::forward`]
    /// serves it): every case but depthwise ones and small planes of several images.
    pub fn forward_packs_weights(&self) -> bool {
        !self.is_depthwise() && self.images_per_product().min(self.x.n) < 2
    }

    /// Whether each group has one input and one output channel.
    fn is_depthwise(&self) -> bool {
        self.group_in() == 1 && self.group_out() == 1
    }

    fn assert_lens(&self, x: usize, w: usize, y: usize) {
        assert!(
            [x, w, y] == self.lens,
            "conv2d: lengths {:?}, expected {:?}",
            [x, w, y],
            self.lens
        );
    }

    /// The output columns `ox` in `0..run` past `ox0` whose tap `kx` lands inside the
    /// input row, as a range of `0..run` (empty when none does), and the input column of
    /// its first element. With stride 1 the taps of a run are contiguous in the input row.
    #[inline(always)]
    fn valid_run(&self, ox0: usize, run: usize, kx: usize) -> (std::ops::Range<usize>, usize) {
        let s = &self.spec;
        let (sw, off) = (s.stride[1], kx * s.dilation[1]);
        // ix(j) = (ox0 + j) sw + off - pad must lie in [0, W): ox from the first column
        // whose tap reaches `pad` to the first that reaches `W + pad`.
        let first_reaching = |t: usize| t.saturating_sub(off).div_ceil(sw);
        let lo = first_reaching(s.padding[1]).saturating_sub(ox0).min(run);
        let hi = first_reaching(self.x.w + s.padding[1])
            .saturating_sub(ox0)
            .min(run);
        if lo >= hi {
            return (0..0, 0);
        }
        (lo..hi, (ox0 + lo) * sw + off - s.padding[1])
    }

    /// Walks output pixels `pixels` row run by row run: `f(t, run, oy, ox0)` for each
    /// stretch of `run` pixels of output row `oy` from column `ox0`, `t` its offset in the
    /// tile.
    #[inline(always)]
    fn runs(&self, pixels: std::ops::Range<usize>, mut f: impl FnMut(usize, usize, usize, usize)) {
        let wo = self.out[1];
        let (mut p, mut t) = (pixels.start, 0);
        while p < pixels.end {
            let (oy, ox0) = (p / wo, p % wo);
            let run = (wo - ox0).min(pixels.end - p);
            f(t, run, oy, ox0);
            p += run;
            t += run;
        }
    }

    /// The input row that tap row `ky` of output row `oy` reads, or `None` in the padding.
    #[inline(always)]
    fn input_row(&self, oy: usize, ky: usize) -> Option<usize> {
        let s = &self.spec;
        let iy = (oy * s.stride[0] + ky * s.dilation[0]).checked_sub(s.padding[0])?;
        (iy < self.x.h).then_some(iy)
    }

    /// Gathers the patches of output pixels `pixels` from one group's input planes `x`
    /// (`C_in/groups` planes of `H*W`) into `col`, row `(ci, ky, kx)`, column `pixel - start`;
    /// zero where a tap falls in the padding.
    fn im2col(&self, x: &[f32], pixels: std::ops::Range<usize>, col: &mut [f32]) {
        let plane = self.x.h * self.x.w;
        if plane == 0 {
            // An empty input: every tap is padding.
            col.fill(0.0);
            return;
        }
        if col.len() <= 1 << 14 {
            // A small tile (one short spectrogram's, say) costs less than a parallel split.
            return self.im2col_serial(x, pixels, col);
        }
        // One task per input channel (its kH*kW rows of `col`).
        let per_channel = self.spec.kernel[0] * self.spec.kernel[1] * pixels.len();
        col.par_chunks_exact_mut(per_channel)
            .enumerate()
            .for_each(|(ci, block)| {
                self.im2col_channel(&x[ci * plane..][..plane], pixels.clone(), block)
            });
    }

    /// [`Conv2d::im2col`] on the calling thread, for callers that parallelise over batch
    /// entries instead.
    fn im2col_serial(&self, x: &[f32], pixels: std::ops::Range<usize>, col: &mut [f32]) {
        let plane = self.x.h * self.x.w;
        if plane == 0 {
            col.fill(0.0);
            return;
        }
        let per_channel = self.spec.kernel[0] * self.spec.kernel[1] * pixels.len();
        for (ci, block) in col.chunks_exact_mut(per_channel).enumerate() {
            self.im2col_channel(&x[ci * plane..][..plane], pixels.clone(), block);
        }
    }

    /// The `kH*kW` im2col rows of one input channel's plane `src` for output `pixels`.
    fn im2col_channel(&self, src: &[f32], pixels: std::ops::Range<usize>, block: &mut [f32]) {
        let kw = self.spec.kernel[1];
        for (t, row) in block.chunks_exact_mut(pixels.len()).enumerate() {
            self.patch_row(src, (t / kw, t % kw), pixels.clone(), row);
        }
    }

    /// Rows `rows` of one group's im2col matrix (row `(ci, ky, kx)` flattened) for output
    /// `pixels`, gathered from the group's input planes `x` into `dst` (`rows.len()` rows
    /// of `pixels.len()`, `stride` apart).
    fn patch_rows(
        &self,
        x: &[f32],
        rows: std::ops::Range<usize>,
        pixels: std::ops::Range<usize>,
        dst: &mut [f32],
        stride: usize,
    ) {
        let plane = self.x.h * self.x.w;
        let (kh, kw) = (self.spec.kernel[0], self.spec.kernel[1]);
        for (r, row) in rows.zip(dst.chunks_mut(stride)) {
            let row = &mut row[..pixels.len()];
            let (ci, tap) = (r / (kh * kw), r % (kh * kw));
            if plane == 0 {
                // An empty input: every tap is padding.
                row.fill(0.0);
                continue;
            }
            self.patch_row(
                &x[ci * plane..][..plane],
                (tap / kw, tap % kw),
                pixels.clone(),
                row,
            );
        }
    }

    /// The im2col row of tap `(ky, kx)` of one input plane `src` for output `pixels`:
    /// the input value each pixel's tap reads, zero in the padding.
    #[inline(always)]
    fn patch_row(
        &self,
        src: &[f32],
        (ky, kx): (usize, usize),
        pixels: std::ops::Range<usize>,
        row: &mut [f32],
    ) {
        let (w, sw) = (self.x.w, self.spec.stride[1]);
        // One fill for the whole row (the taps in the padding stay zero), not one per run:
        // rows of narrow planes have many short runs.
        row.fill(0.0);
        self.runs(pixels, |t, run, oy, ox0| {
            let dst = &mut row[t..t + run];
            let Some(iy) = self.input_row(oy, ky) else {
                return;
            };
            let line = &src[iy * w..][..w];
            let (valid, ix) = self.valid_run(ox0, run, kx);
            let dst = &mut dst[valid.clone()];
            if sw == 1 {
                dst.copy_from_slice(&line[ix..ix + dst.len()]);
            } else {
                // Every sw-th input from ix: the first of each group of sw (the last group
                // may be short), without a bounds check per element.
                for (d, group) in dst.iter_mut().zip(line[ix..].chunks(sw)) {
                    *d = group[0];
                }
            }
        });
    }

    /// Adds the im2col rows in `col` (rows `stride` apart, row `(ci, ky, kx)` for the
    /// channels whose planes `dx` holds, output `pixels` from column `offset`) back into
    /// those planes: the adjoint of the gather, on the calling thread.
    fn col2im(
        &self,
        (col, stride, offset): (&[f32], usize, usize),
        pixels: std::ops::Range<usize>,
        dx: &mut [f32],
    ) {
        let (kh, kw) = (self.spec.kernel[0], self.spec.kernel[1]);
        let (w, plane, sw) = (self.x.w, self.x.h * self.x.w, self.spec.stride[1]);
        let width = pixels.len();
        if plane == 0 || width == 0 {
            return;
        }
        // Each channel's kH*kW rows of `col` add into its own plane.
        let per_channel = kh * kw * stride;
        for (dst, block) in dx
            .chunks_exact_mut(plane)
            .zip(col.chunks_exact(per_channel))
        {
            let mut rows = block.chunks_exact(stride);
            for ky in 0..kh {
                for kx in 0..kw {
                    let row = rows.next().expect("a channel's block holds kH*kW rows");
                    let row = &row[offset..offset + width];
                    self.runs(pixels.clone(), |t, run, oy, ox0| {
                        let Some(iy) = self.input_row(oy, ky) else {
                            return;
                        };
                        let line = &mut dst[iy * w..][..w];
                        let (valid, ix) = self.valid_run(ox0, run, kx);
                        let src = &row[t..t + run][valid];
                        if sw == 1 {
                            for (d, &v) in line[ix..ix + src.len()].iter_mut().zip(src) {
                                *d += v;
                            }
                        } else {
                            // Every sw-th element from ix, without a bounds check per element.
                            for (d, &v) in line[ix..].iter_mut().step_by(sw).zip(src) {
                                *d += v;
                            }
                        }
                    });
                }
            }
        }
    }

    /// Batch entries whose output pixels share one product: as many as fill an im2col tile
    /// when a plane is smaller than half a tile (a 4-frame spectrogram, say), else 1.
    fn images_per_product(&self) -> usize {
        let pixels = self.out_pixels().max(1);
        let tile = tile_pixels(self.patch());
        if 2 * pixels > tile {
            1
        } else {
            tile / pixels
        }
    }

    /// The tiles of the output pixels.
    fn tiles(&self) -> impl Iterator<Item = std::ops::Range<usize>> {
        let (n, tile) = (self.out_pixels(), tile_pixels(self.patch()));
        (0..n).step_by(tile).map(move |p| p..(p + tile).min(n))
    }
}

/// The sizes every pass over a [`Conv2d`] slices by.
struct Sizes {
    /// Elements of one batch entry of `x` and of `y`.
    per_x: usize,
    per_y: usize,
    /// Input and output channels per group.
    cg_in: usize,
    cg_out: usize,
    /// Output pixels and input pixels per channel.
    pixels: usize,
    plane: usize,
    /// Rows of the im2col matrix.
    k: usize,
}

impl Conv2d {
    fn sizes(&self) -> Sizes {
        Sizes {
            per_x: self.lens[0] / self.x.n.max(1),
            per_y: self.lens[2] / self.x.n.max(1),
            cg_in: self.group_in(),
            cg_out: self.group_out(),
            pixels: self.out_pixels(),
            plane: self.x.h * self.x.w,
            k: self.patch(),
        }
    }
}

/// Columns `tile` of the rows of `rows` (rows of `width`), packed into `out`.
fn columns(rows: &[f32], width: usize, tile: std::ops::Range<usize>, out: &mut Vec<f32>) {
    out.clear();
    for row in rows.chunks_exact(width) {
        out.extend_from_slice(&row[tile.clone()]);
    }
}

/// A convolution's weights packed for its product, one packing per group: `W` for the
/// forward convolution, `W^T` for the input gradient (and so the transposed convolution).
/// Made once and passed back to the op while the weights stay the same.
pub struct PackedWeights {
    groups: Vec<PackedLhs>,
    transposed: bool,
}

impl PackedWeights {
    /// `w` (`conv`'s weight) packed for [`conv2d_forward`].
    ///
    /// # Panics
    /// If `w`'s length differs from `conv.lens`.
    pub fn forward(conv: &Conv2d, w: &[f32]) -> Self {
        Self::pack(conv, w, false)
    }

    /// `w` (`conv`'s weight) packed for [`conv2d_backward_input`].
    ///
    /// # Panics
    /// If `w`'s length differs from `conv.lens`.
    pub fn input_gradient(conv: &Conv2d, w: &[f32]) -> Self {
        Self::pack(conv, w, true)
    }

    fn pack(conv: &Conv2d, w: &[f32], transposed: bool) -> Self {
        assert_eq!(w.len(), conv.lens[1], "PackedWeights: weight length");
        let Sizes { cg_out, k, .. } = conv.sizes();
        let groups = (0..conv.spec.groups)
            .map(|g| {
                let wg = &w[g * cg_out * k..][..cg_out * k];
                if transposed {
                    PackedLhs::transposed(wg, cg_out, k)
                } else {
                    PackedLhs::new(wg, cg_out, k)
                }
            })
            .collect();
        PackedWeights { groups, transposed }
    }

    /// Whether this packing serves `conv` in the given direction on the tier the CPU runs.
    fn fits(&self, conv: &Conv2d, transposed: bool) -> bool {
        let Sizes { cg_out, k, .. } = conv.sizes();
        let (m, depth) = if transposed { (k, cg_out) } else { (cg_out, k) };
        self.transposed == transposed
            && self.groups.len() == conv.spec.groups
            && self.groups.iter().all(|p| p.fits(m, depth))
    }
}

/// The packed weights of `conv` in one direction: `packed` when it fits, else packed now
/// into `own`.
fn packed_groups<'a>(
    conv: &Conv2d,
    w: &[f32],
    packed: Option<&'a PackedWeights>,
    transposed: bool,
    own: &'a mut Option<PackedWeights>,
) -> &'a [PackedLhs] {
    match packed.filter(|p| p.fits(conv, transposed)) {
        Some(p) => &p.groups,
        None => &own.insert(PackedWeights::pack(conv, w, transposed)).groups,
    }
}

/// The most floats of im2col matrices [`conv2d_forward`] gathers ahead for small planes
/// (16 MiB).
const SHARED_PATCHES: usize = 1 << 22;

/// `y = conv2d(x, w) + bias`, overwriting `y`. `packed`, when it is
/// [`PackedWeights::forward`] of these weights, saves packing them again (it is trusted to
/// hold `w`'s elements; one made for another geometry or direction is ignored).
///
/// # Panics
/// If a slice length differs from `conv.lens` (the bias must hold `C_out` values).
pub fn conv2d_forward(
    conv: &Conv2d,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    packed: Option<&PackedWeights>,
) {
    conv.assert_lens(x.len(), w.len(), y.len());
    assert!(
        bias.is_none_or(|b| b.len() == conv.c_out),
        "conv2d: bias length"
    );
    let Sizes {
        per_x,
        per_y,
        cg_in,
        cg_out,
        pixels,
        plane,
        k,
    } = conv.sizes();
    if per_y == 0 {
        return;
    }
    let add_bias = |y: &mut [f32]| {
        if let Some(b) = bias {
            for (row, &b) in y.chunks_exact_mut(pixels).zip(b) {
                row.iter_mut().for_each(|v| *v += b);
            }
        }
    };
    if conv.is_depthwise() {
        let columns: Vec<_> = (0..conv.spec.kernel[1])
            .map(|kx| conv.valid_run(0, conv.out[1], kx))
            .collect();
        y.par_chunks_mut(pixels)
            .enumerate()
            .for_each_init(Vec::new, |bordered, (row, out)| {
                let (n, c) = (row / conv.c_out, row % conv.c_out);
                let src = &x[n * per_x + c * plane..][..plane];
                let taps = &w[c * k..][..k];
                let b = bias.map_or(0.0, |b| b[c]);
                if conv.spec.stride[1] == 1 {
                    depthwise_plane_unit_stride(conv, src, taps, b, out, bordered);
                    return;
                }
                wide(
                    #[inline(always)]
                    |_| depthwise_plane(conv, &columns, src, taps, out),
                );
                if bias.is_some() {
                    out.iter_mut().for_each(|v| *v += b);
                }
            });
        return;
    }
    // At most N entries per product, so `images * per_y` stays within `y`'s length.
    let images = conv.images_per_product().min(conv.x.n);
    if !conv.forward_packs_weights() {
        // Small output planes: one product covers the pixels of several batch entries.
        y.par_chunks_mut(images * per_y)
            .enumerate()
            .for_each(|(chunk, ys)| {
                let first = chunk * images;
                let count = ys.len() / per_y;
                let width = count * pixels;
                let (mut col, mut patch) = (vec![0f32; k * width], vec![0f32; k * pixels]);
                let mut out = vec![0f32; cg_out * width];
                for g in 0..conv.spec.groups {
                    for i in 0..count {
                        let xg = &x[(first + i) * per_x + g * cg_in * plane..][..cg_in * plane];
                        conv.im2col_serial(xg, 0..pixels, &mut patch);
                        for (row, src) in
                            col.chunks_exact_mut(width).zip(patch.chunks_exact(pixels))
                        {
                            row[i * pixels..][..pixels].copy_from_slice(src);
                        }
                    }
                    let wg = Mat::new(&w[g * cg_out * k..][..cg_out * k], cg_out, k);
                    matmul(wg, Mat::new(&col, k, width), &mut out, false);
                    for (i, yn) in ys.chunks_exact_mut(per_y).enumerate() {
                        let yg = &mut yn[g * cg_out * pixels..][..cg_out * pixels];
                        for (dst, src) in yg.chunks_exact_mut(pixels).zip(out.chunks_exact(width)) {
                            dst.copy_from_slice(&src[i * pixels..][..pixels]);
                        }
                    }
                }
                ys.chunks_exact_mut(per_y).for_each(add_bias);
            });
        return;
    }
    // Each group's weights packed once; then blocks of output pixels (and, when they are
    // too few to keep every thread busy, of output channels) run in parallel, each
    // gathering its patches one cache-sized block of im2col rows at a time.
    let mut own = None;
    let lhs = packed_groups(conv, w, packed, false, &mut own);
    let cols = packed::block_cols(k).min(pixels);
    let blocks = pixels.div_ceil(cols);
    let jobs = conv.x.n * conv.spec.groups * blocks;
    let row_chunk = packed::row_chunk(cg_out, jobs, lhs[0].panel_rows());
    // When the output channels are split, the items of one pixel block would each gather
    // the same patches: small planes gather every im2col matrix once instead (rows padded
    // to whole register tiles), and the products read it in place.
    let ld = pixels.next_multiple_of(64);
    let shared_len = (conv.x.n * conv.spec.groups)
        .checked_mul(k)
        .and_then(|v| v.checked_mul(ld))
        .filter(|&len| k > 0 && row_chunk < cg_out && len <= SHARED_PATCHES);
    let shared = shared_len.map(|len| {
        let mut col = vec![0f32; len];
        col.par_chunks_mut(ld).enumerate().for_each(|(i, row)| {
            let (image, r) = (i / k, i % k);
            let (n, g) = (image / conv.spec.groups, image % conv.spec.groups);
            let xg = &x[n * per_x + g * cg_in * plane..][..cg_in * plane];
            conv.patch_rows(xg, r..r + 1, 0..pixels, row, ld);
        });
        col
    });
    let mut items = Vec::with_capacity(jobs * cg_out.div_ceil(row_chunk));
    for (n, yn) in y.chunks_exact_mut(per_y).enumerate() {
        for (g, yg) in yn.chunks_exact_mut(cg_out * pixels).enumerate() {
            for (b, outs) in packed::column_blocks(yg, pixels, cols)
                .into_iter()
                .enumerate()
            {
                packed::split_rows(outs, row_chunk, |rows, outs| {
                    items.push((n, g, b * cols, rows, outs))
                });
            }
        }
    }
    items.into_par_iter().for_each_init(
        packed::Scratch::default,
        |scratch, (n, g, c0, rows, mut outs)| {
            // (An input plane may be empty: then every tap reads padding.)
            let xg = &x[n * per_x + g * cg_in * plane..][..cg_in * plane];
            let width = outs[0].len();
            let bias = bias.map(|b| &b[g * cg_out..][..cg_out]);
            if let Some(col) = &shared {
                let b = &col[(n * conv.spec.groups + g) * k * ld + c0..];
                packed::product_block_in_place(&lhs[g], rows, &mut outs, width, bias, (b, ld));
                return;
            }
            let pixels = c0..c0 + width;
            packed::product_block(
                &lhs[g],
                rows,
                &mut outs,
                width,
                bias,
                |kr, dst, stride| conv.patch_rows(xg, kr, pixels.clone(), dst, stride),
                scratch,
            );
        },
    );
}

/// One output plane of a depthwise convolution with horizontal stride 1, plus `bias`: the
/// input plane copied once into `bordered` with zeros around it (the padding, and room for
/// whole runs), then [`packed::depthwise::depthwise_rows`] accumulates each run of outputs
/// in registers.
fn depthwise_plane_unit_stride(
    conv: &Conv2d,
    x: &[f32],
    w: &[f32],
    bias: f32,
    out: &mut [f32],
    bordered: &mut Vec<f32>,
) {
    let s = &conv.spec;
    let ([kh, kw], [dh, dw], [ph, pw]) = (s.kernel, s.dilation, s.padding);
    let ([hi, wi], [ho, wo]) = ([conv.x.h, conv.x.w], conv.out);
    if ho == 0 || wo == 0 {
        return;
    }
    // Bordered column j holds input column j - pw; row r input row r - ph (zero outside).
    let width = wo.next_multiple_of(packed::depthwise::RUN) + (kw - 1) * dw;
    let rows = (ho - 1) * s.stride[0] + (kh - 1) * dh + 1;
    bordered.clear();
    bordered.resize(rows * width, 0.0);
    let cols = pw.min(width)..(pw + wi).min(width);
    for (r, dst) in bordered.chunks_exact_mut(width).enumerate() {
        let Some(iy) = r.checked_sub(ph).filter(|&iy| iy < hi) else {
            continue;
        };
        dst[cols.clone()].copy_from_slice(&x[iy * wi..][..cols.len()]);
    }
    let geometry = packed::depthwise::Bordered {
        width,
        kernel: [kh, kw],
        dilation: [dh, dw],
        stride_h: s.stride[0],
        wo,
    };
    packed::depthwise::depthwise_rows(bordered, geometry, w, bias, out);
}

/// One output plane of a depthwise convolution: for each output row, each tap adds its
/// weight times the input row it reads (a contiguous run at stride 1, which vectorizes).
/// Inline into a [`wide`] body.
#[inline(always)]
/// `columns[kx]` is `conv.valid_run(0, W_out, kx)`, the same for every row.
fn depthwise_plane(
    conv: &Conv2d,
    columns: &[(std::ops::Range<usize>, usize)],
    x: &[f32],
    w: &[f32],
    out: &mut [f32],
) {
    let (kh, kw) = (conv.spec.kernel[0], conv.spec.kernel[1]);
    let (wi, wo, sw) = (conv.x.w, conv.out[1], conv.spec.stride[1]);
    for (oy, row) in out.chunks_exact_mut(wo).enumerate() {
        row.fill(0.0);
        for ky in 0..kh {
            let Some(iy) = conv.input_row(oy, ky) else {
                continue;
            };
            let line = &x[iy * wi..][..wi];
            for (kx, (valid, ix)) in columns.iter().enumerate() {
                let (tap, ix) = (w[ky * kw + kx], *ix);
                let dst = &mut row[valid.clone()];
                if sw == 1 {
                    let n = dst.len();
                    for (d, &v) in dst.iter_mut().zip(&line[ix..ix + n]) {
                        *d += tap * v;
                    }
                } else {
                    for (j, d) in dst.iter_mut().enumerate() {
                        *d += tap * line[ix + j * sw];
                    }
                }
            }
        }
    }
}

/// `dx`, the gradient of the input, from `dy` and the weight: the transposed convolution,
/// overwriting `dx`. `packed`, when it is [`PackedWeights::input_gradient`] of these
/// weights, saves packing them again (trusted to hold `w`'s elements; one made for another
/// geometry or direction is ignored).
///
/// # Panics
/// If a slice length differs from `conv.lens` (`dx` as `x`, `dy` as `y`).
pub fn conv2d_backward_input(
    conv: &Conv2d,
    dy: &[f32],
    w: &[f32],
    dx: &mut [f32],
    packed: Option<&PackedWeights>,
) {
    conv.assert_lens(dx.len(), w.len(), dy.len());
    dx.fill(0.0);
    let Sizes {
        per_x,
        per_y,
        cg_in,
        cg_out,
        pixels,
        plane,
        ..
    } = conv.sizes();
    if per_x == 0 || per_y == 0 {
        return;
    }
    // dx's im2col rows are W^T . dY: W^T packed once per group (rows (ci, ky, kx), inner
    // dimension the output channels), dY's rows read block by block as they are. Each work
    // item owns some input channels of one image (their planes of dx): it computes their
    // im2col rows one pixel block at a time into a cache-sized buffer and adds them back.
    let taps = conv.spec.kernel[0] * conv.spec.kernel[1];
    let mut own = None;
    let lhs = packed_groups(conv, w, packed, true, &mut own);
    // Small dY planes (a transposed convolution's first layers): the pixels of several
    // images side by side in one block.
    let cols = packed::block_cols(cg_out);
    let images = if 2 * pixels <= cols {
        (cols / pixels.max(1)).min(conv.x.n)
    } else {
        1
    };
    let cols = cols.min(pixels);
    let jobs = conv.x.n.div_ceil(images) * conv.spec.groups;
    let wanted = 4 * rayon::current_num_threads();
    let for_threads = if jobs >= wanted {
        cg_in
    } else {
        (cg_in * jobs).div_ceil(wanted)
    };
    let for_cache = (1usize << 16) / (taps * cols * images);
    let channels = for_threads.min(for_cache).max(1);
    // Items: (first image, group, first channel, the channels' planes in each image).
    let mut items = Vec::new();
    for (chunk, dxs) in dx.chunks_mut(images * per_x).enumerate() {
        let mut slots: Vec<_> = dxs
            .chunks_exact_mut(per_x)
            .map(|dxn| {
                dxn.chunks_exact_mut(cg_in * plane)
                    .flat_map(|dxg| dxg.chunks_mut(channels * plane))
                    .collect::<Vec<_>>()
                    .into_iter()
            })
            .collect();
        for g in 0..conv.spec.groups {
            for c0 in (0..cg_in).step_by(channels) {
                let planes: Vec<&mut [f32]> = slots
                    .iter_mut()
                    .map(|it| it.next().expect("one chunk per group and channel block"))
                    .collect();
                items.push((chunk * images, g, c0, planes));
            }
        }
    }
    if items.len() < wanted && pixels > cols {
        // Too few channels to keep the threads busy (a transposed convolution into one or
        // three channels): each item's pixel blocks run in parallel into one im2col buffer
        // of all its pixels, then add back on this thread (neighbouring blocks' taps can
        // reach the same input pixels).
        for (n0, g, c0, mut planes) in items {
            let rows = c0 * taps..(c0 + planes[0].len() / plane) * taps;
            let dyg = &dy[n0 * per_y + g * cg_out * pixels..][..cg_out * pixels];
            let mut col = vec![0f32; rows.len() * pixels];
            let per_block = packed::column_blocks(&mut col, pixels, cols);
            per_block.into_par_iter().enumerate().for_each_init(
                packed::Scratch::default,
                |scratch, (b, mut outs)| {
                    let (p0, width) = (b * cols, outs[0].len());
                    packed::product_block(
                        &lhs[g],
                        rows.clone(),
                        &mut outs,
                        width,
                        None,
                        |kr, dst, stride| dy_columns(&[dyg], (p0, width), pixels, kr, dst, stride),
                        scratch,
                    );
                },
            );
            // (One image per item: the planes are too large to share a block.)
            conv.col2im((&col, pixels, 0), 0..pixels, planes[0]);
        }
        return;
    }
    items.into_par_iter().for_each_init(
        || (packed::Scratch::default(), Vec::new()),
        |(scratch, col), (n0, g, c0, mut planes)| {
            let count = planes.len();
            let rows = c0 * taps..(c0 + planes[0].len() / plane) * taps;
            let dys: Vec<&[f32]> = (0..count)
                .map(|i| &dy[(n0 + i) * per_y + g * cg_out * pixels..][..cg_out * pixels])
                .collect();
            for p0 in (0..pixels).step_by(cols) {
                let per_image = cols.min(pixels - p0);
                let width = count * per_image;
                col.resize(rows.len() * width, 0.0);
                let mut outs: Vec<&mut [f32]> = col.chunks_exact_mut(width).collect();
                packed::product_block(
                    &lhs[g],
                    rows.clone(),
                    &mut outs,
                    width,
                    None,
                    |kr, dst, stride| dy_columns(&dys, (p0, per_image), pixels, kr, dst, stride),
                    scratch,
                );
                for (i, dst) in planes.iter_mut().enumerate() {
                    conv.col2im((col, width, i * per_image), p0..p0 + per_image, dst);
                }
            }
        },
    );
}

/// The input-gradient product's right-operand rows `kr` (output channels): for each image's
/// dY planes in `dys` (planes of `pixels`), columns `p0..p0 + width` side by side, into
/// `dst` (rows `stride` apart).
fn dy_columns(
    dys: &[&[f32]],
    (p0, width): (usize, usize),
    pixels: usize,
    kr: std::ops::Range<usize>,
    dst: &mut [f32],
    stride: usize,
) {
    for (c, row) in kr.zip(dst.chunks_mut(stride)) {
        for (part, dy) in row[..dys.len() * width].chunks_exact_mut(width).zip(dys) {
            part.copy_from_slice(&dy[c * pixels + p0..][..width]);
        }
    }
}

/// `dw += dy (x patches)^T`, the weight gradient, accumulated into `dw`.
///
/// # Panics
/// If a slice length differs from `conv.lens` (`dw` as the weight, `dy` as `y`).
pub fn conv2d_backward_weight(conv: &Conv2d, x: &[f32], dy: &[f32], dw: &mut [f32]) {
    conv.assert_lens(x.len(), dw.len(), dy.len());
    let Sizes {
        per_x,
        per_y,
        cg_in,
        cg_out,
        pixels,
        plane,
        k,
    } = conv.sizes();
    if per_x == 0 || per_y == 0 {
        return;
    }
    // Each group's rows of `dw` are its own: the groups run in parallel, the batch entries
    // and tiles of one group in order (so the sums are deterministic).
    dw.par_chunks_mut(cg_out * k)
        .enumerate()
        .for_each(|(g, dwg)| {
            let mut col = Vec::new();
            let mut tile_dy = Vec::new();
            for (xn, dyn_) in x.chunks_exact(per_x).zip(dy.chunks_exact(per_y)) {
                let xg = &xn[g * cg_in * plane..][..cg_in * plane];
                let dyg = &dyn_[g * cg_out * pixels..][..cg_out * pixels];
                if conv.is_pointwise() {
                    matmul(
                        Mat::new(dyg, cg_out, pixels),
                        Mat::new(xg, cg_in, plane).t(),
                        dwg,
                        true,
                    );
                    continue;
                }
                for tile in conv.tiles() {
                    columns(dyg, pixels, tile.clone(), &mut tile_dy);
                    col.resize(k * tile.len(), 0.0);
                    conv.im2col(xg, tile.clone(), &mut col);
                    matmul(
                        Mat::new(&tile_dy, cg_out, tile.len()),
                        Mat::new(&col, k, tile.len()).t(),
                        dwg,
                        true,
                    );
                }
            }
        });
}

/// `db[c] += sum over the batch and pixels of dy[n, c, :]` for a `dy` of `n` entries of `c`
/// planes of `pixels`, accumulated into `db` (`c` values).
///
/// # Panics
/// If `dy` is not `n * c * pixels` long or `db` not `c`.
pub fn conv2d_backward_bias(dy: &[f32], (n, c, pixels): (usize, usize, usize), db: &mut [f32]) {
    assert!(
        n.checked_mul(c).and_then(|v| v.checked_mul(pixels)) == Some(dy.len()) && db.len() == c,
        "conv2d_backward_bias: lengths"
    );
    if pixels == 0 {
        return;
    }
    db.par_iter_mut().enumerate().for_each(|(ch, d)| {
        let mut sum = 0.0f32;
        for b in 0..n {
            sum += crate::reduction::sum(&dy[(b * c + ch) * pixels..][..pixels]);
        }
        *d += sum;
    });
}

/// `y[n, c, :] += bias[c]` for a `y` of entries of `bias.len()` planes of `pixels`.
///
/// # Panics
/// If `y` is not a whole number of such entries.
pub fn add_channel_bias(y: &mut [f32], bias: &[f32], pixels: usize) {
    let per = bias.len() * pixels;
    assert!(
        per == 0 || y.len().is_multiple_of(per),
        "add_channel_bias: lengths"
    );
    if per == 0 {
        return;
    }
    y.par_chunks_mut(pixels)
        .enumerate()
        .for_each(|(row, plane)| {
            let b = bias[row % bias.len()];
            plane.iter_mut().for_each(|v| *v += b);
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The direct definition in float64: `y[n, o, oy, ox] = b[o] + sum x[n, g cg_in + ci, oy
    /// s - p + ky d, ox s - p + kx d] w[o, ci, ky, kx]` over the taps inside the input.
    fn reference(conv: &Conv2d, x: &[f32], w: &[f32], b: Option<&[f32]>) -> Vec<f64> {
        let s = conv.spec;
        let (xd, [ho, wo]) = (conv.x, conv.out);
        let (cg_in, cg_out) = (conv.group_in(), conv.group_out());
        let mut y = vec![0.0f64; conv.lens[2]];
        for n in 0..xd.n {
            for o in 0..conv.c_out {
                let g = o / cg_out;
                for oy in 0..ho {
                    for ox in 0..wo {
                        let mut acc = b.map_or(0.0, |b| f64::from(b[o]));
                        for ci in 0..cg_in {
                            for ky in 0..s.kernel[0] {
                                for kx in 0..s.kernel[1] {
                                    let iy = (oy * s.stride[0] + ky * s.dilation[0]) as isize
                                        - s.padding[0] as isize;
                                    let ix = (ox * s.stride[1] + kx * s.dilation[1]) as isize
                                        - s.padding[1] as isize;
                                    if iy < 0
                                        || ix < 0
                                        || iy >= xd.h as isize
                                        || ix >= xd.w as isize
                                    {
                                        continue;
                                    }
                                    let c = g * cg_in + ci;
                                    let xv = x[((n * xd.c + c) * xd.h + iy as usize) * xd.w
                                        + ix as usize];
                                    let wv =
                                        w[((o * cg_in + ci) * s.kernel[0] + ky) * s.kernel[1] + kx];
                                    acc += f64::from(xv) * f64::from(wv);
                                }
                            }
                        }
                        y[((n * conv.c_out + o) * ho + oy) * wo + ox] = acc;
                    }
                }
            }
        }
        y
    }

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Every element within `1e-5` of the largest reference magnitude (FP32 sums of at most
    /// a few hundred products): rejects a zero output, a halved one or one wrong element.
    fn close(got: &[f32], want: &[f64], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!(
                (f64::from(g) - w).abs() <= 1e-5 * scale,
                "{what}: [{i}] = {g}, want {w} (scale {scale})"
            );
        }
    }

    /// Ragged shapes: stride, padding and dilation per axis, groups 1, 2 and depthwise, 1x1
    /// (the plain product), a kernel larger than the input with padding, batches of 0, 1
    /// and 3, and outputs of more than one tile.
    fn cases() -> Vec<Conv2d> {
        // N, C_in, H, W, C_out, kernel, stride, padding, dilation, groups; the last two
        // have empty input planes with padding (the output is the bias alone).
        type Case = ([usize; 4], usize, [[usize; 2]; 4], usize);
        let cases: [Case; 15] = [
            ([2, 3, 7, 9], 4, [[3, 3], [1, 1], [1, 1], [1, 1]], 1),
            ([1, 4, 11, 6], 6, [[3, 2], [2, 1], [0, 2], [1, 2]], 2),
            ([3, 5, 6, 5], 5, [[3, 3], [1, 2], [1, 1], [2, 1]], 5),
            ([2, 6, 5, 7], 4, [[1, 1], [1, 1], [0, 0], [1, 1]], 2),
            ([1, 2, 3, 2], 3, [[5, 4], [1, 1], [2, 2], [1, 1]], 1),
            ([0, 3, 5, 5], 2, [[3, 3], [1, 1], [1, 1], [1, 1]], 1),
            ([1, 2, 30, 41], 3, [[3, 3], [1, 1], [1, 1], [1, 1]], 1),
            // 4900 output pixels of 18-row patches: two tiles of `tile_pixels(18)` = 4096.
            ([1, 2, 70, 70], 3, [[3, 3], [1, 1], [1, 1], [1, 1]], 1),
            ([2, 3, 9, 8], 3, [[2, 3], [3, 2], [1, 0], [1, 1]], 3),
            ([2, 2, 0, 3], 2, [[1, 1], [1, 1], [1, 0], [1, 1]], 1),
            ([1, 2, 4, 0], 2, [[1, 3], [1, 1], [0, 2], [1, 1]], 2),
            // Enough output channels per group that they are split between work items: the
            // small planes' patches are gathered once, ahead.
            ([2, 5, 9, 7], 40, [[3, 3], [1, 1], [1, 1], [1, 1]], 1),
            ([1, 6, 6, 10], 52, [[3, 3], [2, 1], [1, 1], [1, 1]], 2),
            // Depthwise with horizontal stride 1 (the 3x3 one is in the streamed-rows test):
            // padding and dilation per axis, a run tail.
            ([2, 4, 7, 19], 4, [[2, 3], [2, 1], [1, 2], [1, 2]], 4),
            // No input channels (the output is the bias), more pixels than one block and
            // enough output channels to be split between work items.
            ([1, 0, 33, 33], 64, [[1, 1], [1, 1], [0, 0], [1, 1]], 1),
        ];
        cases
            .into_iter()
            .map(
                |([n, c, h, w], c_out, [kernel, stride, padding, dilation], groups)| {
                    let spec = Conv2dSpec {
                        kernel,
                        stride,
                        padding,
                        dilation,
                        groups,
                    };
                    Conv2d::new(Nchw::new(n, c, h, w), c_out, spec).expect("a valid case")
                },
            )
            .collect()
    }

    #[test]
    fn forward_matches_the_float64_definition() {
        for (i, conv) in cases().into_iter().enumerate() {
            let [nx, nw, ny] = conv.lens;
            let (x, w, b) = (
                values(nx, 1 + i as u64),
                values(nw, 50 + i as u64),
                values(conv.c_out, 99),
            );
            let mut y = vec![f32::NAN; ny];
            conv2d_forward(&conv, &x, &w, Some(&b), &mut y, None);
            close(
                &y,
                &reference(&conv, &x, &w, Some(&b)),
                &format!("{conv:?}"),
            );
            conv2d_forward(&conv, &x, &w, None, &mut y, None);
            close(
                &y,
                &reference(&conv, &x, &w, None),
                &format!("{conv:?} without bias"),
            );
            // Weights packed ahead give the same result; a packing for the other direction
            // does not fit and is not used.
            let unpacked = y.clone();
            for packed in [
                PackedWeights::forward(&conv, &w),
                PackedWeights::input_gradient(&conv, &w),
            ] {
                y.fill(f32::NAN);
                conv2d_forward(&conv, &x, &w, None, &mut y, Some(&packed));
                assert!(
                    y.iter().zip(&unpacked).all(|(a, b)| a == b),
                    "{conv:?}: packed ahead"
                );
            }
        }
    }

    /// A large depthwise output (16 MiB, the size from which element-wise ops stream), rows
    /// of odd widths, strides 1 and 2.
    #[test]
    fn depthwise_streamed_rows_match_the_float64_definition() {
        for (w, stride) in [(257, 1), (515, 2)] {
            let spec = Conv2dSpec {
                padding: [1, 1],
                stride: [1, stride],
                groups: 64,
                ..Conv2dSpec::new([3, 3])
            };
            let conv = Conv2d::new(Nchw::new(1, 64, 256, w), 64, spec).expect("valid");
            let [nx, nw, ny] = conv.lens;
            assert!(ny * 4 >= crate::stream::STREAM_MIN_BYTES, "16 MiB");
            let (x, wt, b) = (values(nx, 3), values(nw, 4), values(64, 5));
            let mut y = vec![f32::NAN; ny];
            conv2d_forward(&conv, &x, &wt, Some(&b), &mut y, None);
            close(
                &y,
                &reference(&conv, &x, &wt, Some(&b)),
                &format!("depthwise W {w} stride {stride}"),
            );
        }
    }

    /// Each gradient element against the float64 forward: the forward is linear in `x` and
    /// in `w`, so the gradient of `<conv(x, w), dy>` with respect to one element is `dy`
    /// dotted with the reference forward of a one-hot input (or weight).
    #[test]
    fn backward_is_the_adjoint_of_the_forward() {
        for (i, conv) in cases().into_iter().enumerate() {
            let [nx, nw, ny] = conv.lens;
            let (x, w, dy) = (
                values(nx, 7 + i as u64),
                values(nw, 70 + i as u64),
                values(ny, 700 + i as u64),
            );
            let what = format!("{conv:?}");
            let mut dx = vec![f32::NAN; nx];
            conv2d_backward_input(&conv, &dy, &w, &mut dx, None);
            for packed in [
                PackedWeights::input_gradient(&conv, &w),
                PackedWeights::forward(&conv, &w),
            ] {
                let mut again = vec![f32::NAN; nx];
                conv2d_backward_input(&conv, &dy, &w, &mut again, Some(&packed));
                assert!(
                    again.iter().zip(&dx).all(|(a, b)| a == b),
                    "{what}: packed ahead"
                );
            }
            // dx[j] = <conv(e_j, w), dy>: the forward of a one-hot input, in float64. Every
            // element up to 2048 inputs; beyond, 2048 elements spread over all of them and
            // the last (each one costs a whole reference forward, and this suite also runs
            // under qemu in CI).
            let step = nx.div_ceil(2048).max(1);
            let picked: Vec<usize> = (0..nx)
                .step_by(step)
                .chain([nx.saturating_sub(1)])
                .filter(|&j| j < nx)
                .collect();
            let want_dx: Vec<f64> = picked
                .iter()
                .map(|&j| {
                    let mut e = vec![0.0f32; nx];
                    e[j] = 1.0;
                    dot(&reference(&conv, &e, &w, None), &dy)
                })
                .collect();
            let got_dx: Vec<f32> = picked.iter().map(|&j| dx[j]).collect();
            close(&got_dx, &want_dx, &format!("{what} dx"));
            // dw accumulates onto what it held.
            let start = values(nw, 5);
            let mut dw = start.clone();
            conv2d_backward_weight(&conv, &x, &dy, &mut dw);
            let want_dw: Vec<f64> = (0..nw)
                .map(|j| {
                    let mut e = vec![0.0f32; nw];
                    e[j] = 1.0;
                    f64::from(start[j]) + dot(&reference(&conv, &x, &e, None), &dy)
                })
                .collect();
            close(&dw, &want_dw, &format!("{what} dw"));
            let mut db = vec![0.5f32; conv.c_out];
            conv2d_backward_bias(
                &dy,
                (conv.x.n, conv.c_out, conv.out[0] * conv.out[1]),
                &mut db,
            );
            let pixels = conv.out[0] * conv.out[1];
            let want_db: Vec<f64> = (0..conv.c_out)
                .map(|c| {
                    0.5 + (0..conv.x.n)
                        .flat_map(|n| &dy[(n * conv.c_out + c) * pixels..][..pixels])
                        .map(|&v| f64::from(v))
                        .sum::<f64>()
                })
                .collect();
            close(&db, &want_db, &format!("{what} db"));
        }
    }

    fn dot(a: &[f64], b: &[f32]) -> f64 {
        a.iter().zip(b).map(|(&a, &b)| a * f64::from(b)).sum()
    }

    #[test]
    fn shapes_without_an_output_are_refused() {
        let spec = Conv2dSpec::new([3, 3]);
        assert!(
            Conv2d::new(Nchw::new(1, 3, 2, 5), 4, spec).is_err(),
            "kernel past the input"
        );
        let grouped = Conv2dSpec { groups: 2, ..spec };
        assert!(
            Conv2d::new(Nchw::new(1, 3, 5, 5), 4, grouped).is_err(),
            "groups not dividing C_in"
        );
        let huge = Nchw::new(usize::MAX / 2, 3, 5, 5);
        assert!(Conv2d::new(huge, 4, spec).is_err(), "overflowing input");
        // Sizes that overflow behind an empty batch or no output channels.
        let padded = Conv2dSpec {
            padding: [1 << 40, 1 << 40],
            ..Conv2dSpec::new([1, 1])
        };
        assert!(
            Conv2d::new(Nchw::new(0, 1, 1, 1), 1, padded).is_err(),
            "output plane"
        );
        let wide_kernel = Conv2dSpec {
            kernel: [1 << 33, 1 << 33],
            padding: [1 << 32, 1 << 32],
            ..Conv2dSpec::new([1, 1])
        };
        assert!(
            Conv2d::new(Nchw::new(1, 2, 1, 1), 0, wide_kernel).is_err(),
            "patch"
        );
    }
}
