//! 2-D (and 3-D) convolution over NCHW (NCDHW) rows, forward and backward, as im2col tiles
//! and the tiled GEMM ([`crate::matmul::launch_gemm`], tensor cores where the device has
//! them), and the deformable convolution's bilinear gather.
//!
//! Layouts (the C++ contract): `x (N, C_in*H*W)`, the weight OIHW `(C_out, C_in/groups*kH*kW)`,
//! `y (N, C_out*H_out*W_out)`. The output pixels of all batch entries are one axis of
//! `N*H_out*W_out` columns (entry-major), cut into tiles; a tile may span several entries, so a
//! large batch of small images (an audio model's frames) takes a few large products, not one
//! small product per entry:
//! - forward: the tile's input patches are gathered into `col (C_in*kH*kW, tile)`
//!   (`im2col_kernel`), one product per group turns them into `(C_out, tile)` outputs, and
//!   `place_tile_kernel` stores them into `y` with the bias;
//! - input gradient (per batch entry, as each entry's input pixels are written once per
//!   tile): the tile of `dy` times each group's transposed weight gives the patch gradients
//!   in `col`, which `col2im_kernel` gathers back per input pixel (each input pixel sums the
//!   taps that read it: no scatter, no atomics);
//! - weight gradient: the tile of `dy` times the transposed patches, accumulated into `dw`
//!   per group.
//!
//! A 1x1 stride-1 unpadded convolution with one group is a batched product over the batch
//! entries on the tensors as they are. Tiles hold at most [`COL_BUDGET`] patch elements, so
//! the gathered matrix never grows with the image beyond that.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_divisors, check_u32, extent, grid_1d, Buf, LaunchError};
use crate::matmul::{launch_gemm, GemmSpec};
use crate::primitives::{cube_sum, row_grid, REDUCE_UNITS};

/// The most elements of gathered patches one tile holds (64 MiB in FP32).
pub const COL_BUDGET: usize = 1 << 24;

/// The sizes of one convolution over up to three spatial axes (depth, height, width; a 2-D
/// convolution has a depth of 1 with a one-deep kernel), all nonzero but the batch and the
/// channels (the caller checked them and their products): input `(n, c_in, D, H, W)`,
/// `c_out` channels of `out` voxels, and the kernel, stride, padding and dilation per axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvGeometry {
    /// Batch entries.
    pub n: usize,
    /// Input channels.
    pub c_in: usize,
    /// Input depth, height and width.
    pub input: [usize; 3],
    /// Output channels.
    pub c_out: usize,
    /// Output depth, height and width (at most what the spec gives: a transposed
    /// convolution may use fewer).
    pub out: [usize; 3],
    /// Kernel depth, height and width.
    pub kernel: [usize; 3],
    /// Stride per axis.
    pub stride: [usize; 3],
    /// Zero padding per axis.
    pub padding: [usize; 3],
    /// Dilation per axis.
    pub dilation: [usize; 3],
    /// Channel groups.
    pub groups: usize,
}

/// The derived sizes every launch slices by.
struct Dims {
    /// Elements of one batch entry of `x` and of `y`.
    per_x: usize,
    per_y: usize,
    /// Input pixels and output pixels per channel.
    plane: usize,
    pixels: usize,
    /// Output channels per group.
    cg_out: usize,
    /// Rows of one group's patch matrix: `cg_in kH kW`; and of all groups', `C_in kH kW`.
    k: usize,
    k_all: usize,
    /// Elements of `x`, the weight, `y`.
    lens: [usize; 3],
}

impl ConvGeometry {
    fn dims(&self) -> Result<Dims, LaunchError> {
        check_divisors(&[
            ("groups", self.groups),
            ("kernel depth", self.kernel[0]),
            ("kernel height", self.kernel[1]),
            ("kernel width", self.kernel[2]),
            ("stride depth", self.stride[0]),
            ("stride height", self.stride[1]),
            ("stride width", self.stride[2]),
            ("dilation depth", self.dilation[0]),
            ("dilation height", self.dilation[1]),
            ("dilation width", self.dilation[2]),
        ])?;
        if !self.c_in.is_multiple_of(self.groups) || !self.c_out.is_multiple_of(self.groups) {
            return Err(LaunchError::Invalid {
                what: "groups must divide both channel counts",
            });
        }
        let plane = extent("D*H*W", &self.input)?;
        let pixels = extent("D_out*H_out*W_out", &self.out)?;
        let (cg_in, cg_out) = (self.c_in / self.groups, self.c_out / self.groups);
        let [kd, kh, kw] = self.kernel;
        let k = extent("C_in/groups*kD*kH*kW", &[cg_in, kd, kh, kw])?;
        let per_x = extent("C_in*H*W", &[self.c_in, plane])?;
        let per_y = extent("C_out*H_out*W_out", &[self.c_out, pixels])?;
        let lens = [
            extent("x", &[self.n, per_x])?,
            extent("weight", &[self.c_out, k])?,
            extent("y", &[self.n, per_y])?,
        ];
        let k_all = extent("C_in*kH*kW", &[k, self.groups])?;
        // Kernel indices are 32-bit: every element a launch reaches must be addressable.
        check_u32(&[
            ("x", lens[0]),
            ("weight", lens[1]),
            ("y", lens[2]),
            ("C_in*kH*kW*H_out*W_out", k_all.saturating_mul(pixels)),
        ])?;
        Ok(Dims {
            per_x,
            per_y,
            plane,
            pixels,
            cg_out,
            k,
            k_all,
            lens,
        })
    }

    /// Whether the output grid is the input grid read one pixel per tap (1x1, stride 1, no
    /// padding, as many output pixels as input ones).
    fn is_pointwise(&self) -> bool {
        self.kernel == [1, 1, 1]
            && self.stride == [1, 1, 1]
            && self.padding == [0, 0, 0]
            && self.out == self.input
    }
}

/// Columns per tile for patch matrices of `k_all` rows over `columns` output pixels: all of
/// them when they fit [`COL_BUDGET`], else a multiple of 64 (at least 64). The tile's
/// patch matrix must stay 32-bit addressable.
fn tile_pixels(k_all: usize, columns: usize) -> Result<usize, LaunchError> {
    let fit = (COL_BUDGET / k_all.max(1)) / 64 * 64;
    let tile = columns.min(fit.max(64));
    check_u32(&[("C_in*kH*kW*tile", k_all.saturating_mul(tile))])?;
    Ok(tile)
}

impl Dims {
    /// The output pixels of every batch entry, one column each.
    fn columns(&self, n: usize) -> Result<usize, LaunchError> {
        extent("N*H_out*W_out", &[n, self.pixels])
    }
}

impl ConvGeometry {
    /// The geometry words the gather kernels read ([`Taps`]): the input, output and kernel
    /// sizes, strides, paddings and dilations, each `[depth, height, width]`, each checked to
    /// fit in 32 bits.
    fn taps<R: Runtime>(&self, client: &ComputeClient<R>) -> Result<Buf, LaunchError> {
        let groups = [
            ("input size", self.input),
            ("output size", self.out),
            ("kernel size", self.kernel),
            ("stride", self.stride),
            ("padding", self.padding),
            ("dilation", self.dilation),
        ];
        let named: Vec<(&'static str, usize)> = groups
            .iter()
            .flat_map(|&(what, v)| v.map(|x| (what, x)))
            .collect();
        check_u32(&named)?;
        // Tap coordinates reach `in + 2 pad - 1` before the padding is taken off.
        for a in 0..3 {
            let padded = extent("2 * padding", &[self.padding[a], 2])
                .and_then(|p| crate::launch::sum("input + 2 * padding", p, self.input[a]))?;
            check_u32(&[("input + 2 * padding", padded)])?;
        }
        let words: Vec<u32> = named.iter().map(|&(_, v)| v as u32).collect();
        Ok(Buf::upload(client, &words))
    }
}

/// The geometry of [`ConvGeometry::taps`], read from its words: per axis (depth `z`, height
/// `y`, width `x`) the input size, output size, kernel, stride, padding and dilation.
#[derive(CubeType)]
struct Taps {
    d: usize,
    h: usize,
    w: usize,
    od: usize,
    oh: usize,
    ow: usize,
    kd: usize,
    kh: usize,
    kw: usize,
    sd: usize,
    sh: usize,
    sw: usize,
    pd: usize,
    ph: usize,
    pw: usize,
    dd: usize,
    dh: usize,
    dw: usize,
}

#[cube]
fn read_taps(g: &Array<u32>) -> Taps {
    Taps {
        d: usize::cast_from(g[0]),
        h: usize::cast_from(g[1]),
        w: usize::cast_from(g[2]),
        od: usize::cast_from(g[3]),
        oh: usize::cast_from(g[4]),
        ow: usize::cast_from(g[5]),
        kd: usize::cast_from(g[6]),
        kh: usize::cast_from(g[7]),
        kw: usize::cast_from(g[8]),
        sd: usize::cast_from(g[9]),
        sh: usize::cast_from(g[10]),
        sw: usize::cast_from(g[11]),
        pd: usize::cast_from(g[12]),
        ph: usize::cast_from(g[13]),
        pw: usize::cast_from(g[14]),
        dd: usize::cast_from(g[15]),
        dh: usize::cast_from(g[16]),
        dw: usize::cast_from(g[17]),
    }
}

/// The input index one output coordinate `o` reads through kernel tap `k` on an axis of
/// input size `n`, stride `s`, padding `p` and dilation `d`, or `n` when it falls in the
/// padding.
#[cube]
fn tap_source(o: usize, k: usize, n: usize, s: usize, p: usize, d: usize) -> usize {
    let i = o * s + k * d;
    let mut src = n;
    if i >= p && i - p < n {
        src = i - p;
    }
    src
}

/// The output coordinate whose tap `k` reads input coordinate `i` on an axis (output size
/// `n`, stride `s`, padding `p`, dilation `d`), or `n` when none does.
// `%` stays: the kernel language has no `is_multiple_of`.
#[allow(clippy::manual_is_multiple_of)]
#[cube]
fn tap_reader(i: usize, k: usize, n: usize, s: usize, p: usize, d: usize) -> usize {
    let t = i + p;
    let off = k * d;
    let mut o = n;
    if t >= off && (t - off) % s == 0 && (t - off) / s < n {
        o = (t - off) / s;
    }
    o
}

/// Patch rows gathered per unit by [`im2col_kernel`]: the geometry words and the decomposition
/// of the row index are read and computed once per run, not once per element (software
/// devices load every word one lane at a time).
const IM2COL_RUN: usize = 16;

/// `col[r, t]` (`r = ((ci kD + kz) kH + ky) kW + kx`, `t < tile`) = the input voxel that tap
/// `(kz, ky, kx)` of output column `q = q0 + t` (voxel `q % pixels` of batch entry
/// `q / pixels`, whose input starts at `(q / pixels) per_x`) reads in channel `ci`, zero in
/// the padding. Unit `u` fills column `t = u % tile` of rows `(u / tile) * IM2COL_RUN ..`
/// (at most `rows`), so consecutive units touch consecutive pixels.
// The division stays spelled out: the kernel language has no `div_ceil`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments, clippy::manual_div_ceil)]
fn im2col_kernel<F: Float>(
    x: &Array<F>,
    col: &mut Array<F>,
    q0: usize,
    per_x: usize,
    tile: usize,
    rows: usize,
    taps: &Array<u32>,
) {
    let u = ABSOLUTE_POS;
    if u < tile * ((rows + IM2COL_RUN - 1) / IM2COL_RUN) {
        let g = read_taps(taps);
        let t = u % tile;
        let r0 = (u / tile) * IM2COL_RUN;
        let q = q0 + t;
        let pixels = g.od * g.oh * g.ow;
        let p = q % pixels;
        let x_base = (q / pixels) * per_x;
        let ox = p % g.ow;
        let oy = (p / g.ow) % g.oh;
        let oz = p / (g.ow * g.oh);
        let mut kx = r0 % g.kw;
        let mut ky = (r0 / g.kw) % g.kh;
        let mut kz = (r0 / (g.kw * g.kh)) % g.kd;
        let mut ci = r0 / (g.kw * g.kh * g.kd);
        let plane = g.d * g.h * g.w;
        let mut end = r0 + IM2COL_RUN;
        if end > rows {
            end = rows;
        }
        for r in r0..end {
            let ix = tap_source(ox, kx, g.w, g.sw, g.pw, g.dw);
            let iy = tap_source(oy, ky, g.h, g.sh, g.ph, g.dh);
            let iz = tap_source(oz, kz, g.d, g.sd, g.pd, g.dd);
            let mut v = F::new(0.0);
            if ix < g.w && iy < g.h && iz < g.d {
                v = x[x_base + ci * plane + (iz * g.h + iy) * g.w + ix];
            }
            col[r * tile + t] = v;
            kx += 1;
            if kx == g.kw {
                kx = 0;
                ky += 1;
                if ky == g.kh {
                    ky = 0;
                    kz += 1;
                    if kz == g.kd {
                        kz = 0;
                        ci += 1;
                    }
                }
            }
        }
    }
}

/// The adjoint of [`im2col_kernel`] for one tile: each input voxel of the batch entry at
/// `x_base` sums, over its taps, the patch gradients `col` of the tile's output voxels that
/// read it, in FP32; it overwrites `dx` for the first tile (`first` = 1) and adds after.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn col2im_kernel<F: Float>(
    col: &Array<F>,
    dx: &mut Array<F>,
    x_base: usize,
    per_x: usize,
    p0: usize,
    tile: usize,
    first: u32,
    taps: &Array<u32>,
) {
    let j = ABSOLUTE_POS;
    if j < per_x {
        let g = read_taps(taps);
        let ix = j % g.w;
        let iy = (j / g.w) % g.h;
        let iz = (j / (g.w * g.h)) % g.d;
        let ci = j / (g.w * g.h * g.d);
        let mut acc = 0.0f32;
        for kz in 0..g.kd {
            let oz = tap_reader(iz, kz, g.od, g.sd, g.pd, g.dd);
            if oz < g.od {
                for ky in 0..g.kh {
                    let oy = tap_reader(iy, ky, g.oh, g.sh, g.ph, g.dh);
                    if oy < g.oh {
                        for kx in 0..g.kw {
                            let ox = tap_reader(ix, kx, g.ow, g.sw, g.pw, g.dw);
                            let p = (oz * g.oh + oy) * g.ow + ox;
                            if ox < g.ow && p >= p0 && p < p0 + tile {
                                let r = ((ci * g.kd + kz) * g.kh + ky) * g.kw + kx;
                                acc += f32::cast_from(col[r * tile + p - p0]);
                            }
                        }
                    }
                }
            }
        }
        if first == 0 {
            acc += f32::cast_from(dx[x_base + j]);
        }
        dx[x_base + j] = F::cast_from(acc);
    }
}

/// A device buffer of `rows * tile` elements of `F` for the tiles of a pass, contents
/// undefined.
fn scratch<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    name: &'static str,
    rows: usize,
    tile: usize,
) -> Result<Buf, LaunchError> {
    let b = core::mem::size_of::<F>();
    let len = extent(name, &[rows, tile])?;
    Buf::new(name, &client.empty(extent(name, &[len, b])?), len, b)
}

/// The element of channel `c` at output column `q` (pixel `q % pixels` of batch entry
/// `q / pixels`) in a tensor of `per` elements per entry, channel planes of `pixels`.
#[cube]
fn column_at(q: usize, c: usize, pixels: usize, per: usize) -> usize {
    (q / pixels) * per + c * pixels + q % pixels
}

/// `dst[c, t] = src[column_at(q0 + t, c, pixels, per)]`: a tile of columns of the channel
/// planes.
#[cube(launch_unchecked)]
fn take_tile_kernel<F: Float>(
    src: &Array<F>,
    dst: &mut Array<F>,
    q0: usize,
    pixels: usize,
    per: usize,
    tile: usize,
) {
    let i = ABSOLUTE_POS;
    if i < dst.len() {
        dst[i] = src[column_at(q0 + i % tile, i / tile, pixels, per)];
    }
}

/// `y[column_at(q0 + t, c, pixels, per_y)] = src[c, t] (+ bias[c])`: a tile of output
/// columns into the channel planes, the bias added in FP32.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn place_tile_kernel<F: Float>(
    src: &Array<F>,
    bias: &Array<F>,
    y: &mut Array<F>,
    q0: usize,
    pixels: usize,
    per_y: usize,
    tile: usize,
    #[comptime] has_bias: bool,
) {
    let i = ABSOLUTE_POS;
    if i < src.len() {
        let c = i / tile;
        let mut v = src[i];
        if comptime!(has_bias) {
            v = F::cast_from(f32::cast_from(v) + f32::cast_from(bias[c]));
        }
        y[column_at(q0 + i % tile, c, pixels, per_y)] = v;
    }
}

/// `y[i] += bias[(i / pixels) % c]` in FP32.
#[cube(launch_unchecked)]
fn channel_bias_kernel<F: Float>(bias: &Array<F>, y: &mut Array<F>, c: usize, pixels: usize) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let b = bias[(i / pixels) % c];
        y[i] = F::cast_from(f32::cast_from(y[i]) + f32::cast_from(b));
    }
}

/// One cube per channel: `db[ch] += sum over n, p of dy[n, ch, p]`, summed in FP32.
#[cube(launch_unchecked)]
fn bias_grad_kernel<F: Float>(dy: &Array<F>, db: &mut Array<F>, c: usize, n: usize, pixels: usize) {
    let ch = CUBE_POS;
    if ch < c {
        let m = n * pixels;
        let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let mut s = 0.0f32;
        let mut t = UNIT_POS as usize;
        loop {
            if t >= m {
                break;
            }
            s += f32::cast_from(dy[(t / pixels) * c * pixels + ch * pixels + t % pixels]);
            t += REDUCE_UNITS as usize;
        }
        let total = cube_sum::<f32>(s, &mut smem);
        if UNIT_POS == 0 {
            db[ch] = F::cast_from(f32::cast_from(db[ch]) + total);
        }
    }
}

/// `y = conv(x, w) (+ bias)` over 2 or 3 spatial axes, overwriting `y`; the bias holds
/// `c_out` values.
pub fn launch_conv_forward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, w, bias): (&Handle, &Handle, Option<&Handle>),
    y: &Handle,
    geo: ConvGeometry,
) -> Result<(), LaunchError> {
    let d = geo.dims()?;
    if d.lens[2] == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let xb = Buf::new("x", x, d.lens[0], b)?;
    let wb = Buf::new("w", w, d.lens[1], b)?;
    let yb = Buf::new("y", y, d.lens[2], b)?;
    let bias = bias
        .map(|h| Buf::new("bias", h, geo.c_out, b))
        .transpose()?;
    if geo.groups == 1 && geo.is_pointwise() {
        // y[n] = W . x[n] for every batch entry at once.
        let mut spec = GemmSpec::new(geo.c_out, d.pixels, geo.c_in);
        spec.batch = geo.n;
        spec.strides = (0, d.per_x, d.per_y);
        launch_gemm::<R, F>(client, w, x, None, y, spec)?;
        if let Some(bias) = &bias {
            let (count, dim) = grid_1d(client, d.lens[2])?;
            // SAFETY: `bias` holds `c_out` values and `y` its length (checked `Buf`s); units
            // past `y.len()` return and the channel index is `% c_out` (`pixels` nonzero:
            // `lens[2]` is).
            unsafe {
                channel_bias_kernel::launch_unchecked::<F, R>(
                    client,
                    count,
                    dim,
                    bias.arg(),
                    yb.arg(),
                    geo.c_out,
                    d.pixels,
                );
            }
        }
        return Ok(());
    }
    let taps = geo.taps(client)?;
    let gather = |(q0, len): (usize, usize), col: &Buf| {
        im2col::<R, F>(client, (&xb, &taps), col, (q0, len), (d.per_x, d.k_all))
    };
    forward_tiles::<R, F>(client, &geo, &d, (&wb, bias.as_ref()), &yb, gather)
}

/// The tiled forward pass: for each tile of output columns (the pixels of all batch entries,
/// entry-major), `gather` fills the tile's patch matrix `col (C_in kH kW, len)`, one product
/// per group gives the tile's outputs, and they are stored into `y` with the bias.
fn forward_tiles<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    geo: &ConvGeometry,
    d: &Dims,
    (wb, bias): (&Buf, Option<&Buf>),
    yb: &Buf,
    mut gather: impl FnMut((usize, usize), &Buf) -> Result<(), LaunchError>,
) -> Result<(), LaunchError> {
    let columns = d.columns(geo.n)?;
    let tile = tile_pixels(d.k_all, columns)?;
    let col = scratch::<R, F>(client, "col", d.k_all, tile)?;
    let out = scratch::<R, F>(client, "out", geo.c_out, tile)?;
    for q0 in (0..columns).step_by(tile) {
        let len = tile.min(columns - q0);
        gather((q0, len), &col)?;
        let mut spec = GemmSpec::new(d.cg_out, len, d.k);
        spec.batch = geo.groups;
        spec.strides = (d.cg_out * d.k, d.k * len, d.cg_out * len);
        launch_gemm::<R, F>(
            client,
            &wb.handle(),
            &col.handle(),
            None,
            &out.handle(),
            spec,
        )?;
        let src = out.prefix(geo.c_out * len);
        let (count, dim) = grid_1d(client, geo.c_out * len)?;
        let has_bias = bias.is_some();
        let bias = wb.stand_in_for(bias);
        // SAFETY: `src` holds `c_out * len` values (a prefix of a checked buffer); each unit
        // writes `y[(q / pixels) per_y + c pixels + q % pixels]` with `c < c_out` and
        // `q < N pixels` (so entry `q / pixels < N`), inside `y`'s checked `N per_y` elements;
        // the bias is read only when bound with `c_out` values.
        unsafe {
            place_tile_kernel::launch_unchecked::<F, R>(
                client,
                count,
                dim,
                src.arg(),
                bias.arg(),
                yb.arg(),
                q0,
                d.pixels,
                d.per_y,
                len,
                has_bias,
            );
        }
    }
    Ok(())
}

/// `col[r, t]` of a deformable convolution (`r = (ci kH + ky) kW + kx`): the input plane of
/// channel `ci` of the batch entry at `x_base` sampled bilinearly (zero outside, torchvision's
/// rule) at tap `(ky, kx)`'s grid point of output column `q = q0 + t` (pixel `p = q % pixels`
/// of batch entry `n = q / pixels`) moved by its offsets (`off[n off_per + (dg 2 kk + 2 tap)
/// pixels + p]` the row, the next channel the column, `dg = ci / (C_in / deform_groups)`),
/// times its mask when `has_mask`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn deform_im2col_kernel<F: Float>(
    x: &Array<F>,
    off: &Array<F>,
    mask: &Array<F>,
    col: &mut Array<F>,
    per: &Array<u32>,
    q0: usize,
    tile: usize,
    taps: &Array<u32>,
    #[comptime] has_mask: bool,
) {
    let i = ABSOLUTE_POS;
    if i < col.len() {
        let g = read_taps(taps);
        let pixels = g.oh * g.ow;
        let q = q0 + i % tile;
        let n = q / pixels;
        let p = q % pixels;
        // `per`: x, offset and mask elements per batch entry, channels per deform group.
        let x_base = n * usize::cast_from(per[0]);
        let off_base = n * usize::cast_from(per[1]);
        let mask_base = n * usize::cast_from(per[2]);
        let per_group = usize::cast_from(per[3]);
        let r = i / tile;
        let kk = g.kh * g.kw;
        let tap = r % kk;
        let ci = r / kk;
        let dg = ci / per_group;
        let oy = p / g.ow;
        let ox = p % g.ow;
        let ky = tap / g.kw;
        let kx = tap % g.kw;
        let oy_at = off_base + (dg * 2 * kk + 2 * tap) * pixels + p;
        let sy = f32::cast_from(oy * g.sh + ky * g.dh) - f32::cast_from(g.ph)
            + f32::cast_from(off[oy_at]);
        let sx = f32::cast_from(ox * g.sw + kx * g.dw) - f32::cast_from(g.pw)
            + f32::cast_from(off[oy_at + pixels]);
        let hf = f32::cast_from(g.h);
        let wf = f32::cast_from(g.w);
        let mut v = 0.0f32;
        if sy > -1.0f32 && sy < hf && sx > -1.0f32 && sx < wf {
            let fy = f32::floor(sy);
            let fx = f32::floor(sx);
            let ly = sy - fy;
            let lx = sx - fx;
            let plane = x_base + ci * g.h * g.w;
            // Corners as signed offsets from -1: `y0 + 1` and `x0 + 1` are in [0, H] / [0, W].
            let y1 = usize::cast_from(fy + 1.0f32);
            let x1 = usize::cast_from(fx + 1.0f32);
            let mut c00 = 0.0f32;
            let mut c01 = 0.0f32;
            let mut c10 = 0.0f32;
            let mut c11 = 0.0f32;
            if y1 >= 1 && x1 >= 1 {
                c00 = f32::cast_from(x[plane + (y1 - 1) * g.w + x1 - 1]);
            }
            if y1 >= 1 && x1 < g.w {
                c01 = f32::cast_from(x[plane + (y1 - 1) * g.w + x1]);
            }
            if y1 < g.h && x1 >= 1 {
                c10 = f32::cast_from(x[plane + y1 * g.w + x1 - 1]);
            }
            if y1 < g.h && x1 < g.w {
                c11 = f32::cast_from(x[plane + y1 * g.w + x1]);
            }
            v = (1.0f32 - ly) * (1.0f32 - lx) * c00
                + (1.0f32 - ly) * lx * c01
                + ly * (1.0f32 - lx) * c10
                + ly * lx * c11;
        }
        if comptime!(has_mask) {
            v *= f32::cast_from(mask[mask_base + (dg * kk + tap) * pixels + p]);
        }
        col[i] = F::cast_from(v);
    }
}

/// `y = deform_conv2d(x, offset, mask, w) (+ bias)` (DCNv2) over `deform_groups` offset
/// groups, overwriting `y`: `geo` is 2-D (depth 1); `offset` holds `N * deform_groups * 2 kH
/// kW * H_out W_out` values, `mask` (optional) half as many, the bias `c_out`.
#[allow(clippy::too_many_arguments)]
pub fn launch_deform_conv2d_forward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, offset, mask): (&Handle, &Handle, Option<&Handle>),
    (w, bias): (&Handle, Option<&Handle>),
    y: &Handle,
    geo: ConvGeometry,
    deform_groups: usize,
) -> Result<(), LaunchError> {
    let d = geo.dims()?;
    check_divisors(&[("deform_groups", deform_groups)])?;
    if geo.input[0] != 1 || geo.kernel[0] != 1 || !geo.c_in.is_multiple_of(deform_groups) {
        return Err(LaunchError::Invalid {
            what: "deform_conv2d is 2-D and deform_groups must divide C_in",
        });
    }
    if d.lens[2] == 0 {
        return Ok(());
    }
    let taps_per_item = extent(
        "deform_groups*kH*kW*H_out*W_out",
        &[deform_groups, geo.kernel[1], geo.kernel[2], d.pixels],
    )?;
    let off_len = extent("offset", &[geo.n, taps_per_item, 2])?;
    let mask_len = extent("mask", &[geo.n, taps_per_item])?;
    check_u32(&[("offset", off_len)])?;
    let b = core::mem::size_of::<F>();
    let xb = Buf::new("x", x, d.lens[0], b)?;
    let wb = Buf::new("w", w, d.lens[1], b)?;
    let yb = Buf::new("y", y, d.lens[2], b)?;
    let offb = Buf::new("offset", offset, off_len, b)?;
    let maskb = mask.map(|h| Buf::new("mask", h, mask_len, b)).transpose()?;
    let bias = bias
        .map(|h| Buf::new("bias", h, geo.c_out, b))
        .transpose()?;
    let taps = geo.taps(client)?;
    let has_mask = maskb.is_some();
    let maskb = offb.stand_in_for(maskb.as_ref());
    // Per batch entry: x, offset and mask elements; and channels per deform group (every
    // value below the checked 32-bit lengths).
    let per = [
        d.per_x,
        2 * taps_per_item,
        taps_per_item,
        geo.c_in / deform_groups,
    ];
    let per: Vec<u32> = per.iter().map(|&v| v as u32).collect();
    let per = Buf::upload(client, &per);
    let gather = |(q0, len): (usize, usize), col: &Buf| {
        let col = col.prefix(d.k_all * len);
        let (count, dim) = grid_1d(client, d.k_all * len)?;
        // SAFETY: `col` holds `k_all * len` values (a checked prefix); a unit of column
        // `q < N pixels` reads `x` in channel `ci < C_in` of batch entry `q / pixels < N` at a
        // corner inside the plane (each corner guarded), `offset` and, when bound, `mask` at
        // tap and pixel indices of that entry (inside their checked lengths); all indices fit
        // in 32 bits (checked).
        unsafe {
            deform_im2col_kernel::launch_unchecked::<F, R>(
                client,
                count,
                dim,
                xb.arg(),
                offb.arg(),
                maskb.arg(),
                col.arg(),
                per.arg(),
                q0,
                len,
                taps.arg(),
                has_mask,
            );
        }
        Ok(())
    };
    forward_tiles::<R, F>(client, &geo, &d, (&wb, bias.as_ref()), &yb, gather)
}

/// Gathers the patches of output columns `q0..q0 + len` (entry-major pixels of every batch
/// entry, `per_x` input elements per entry) into the first `k_all * len` elements of `col`.
fn im2col<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, taps): (&Buf, &Buf),
    col: &Buf,
    (q0, len): (usize, usize),
    (per_x, k_all): (usize, usize),
) -> Result<(), LaunchError> {
    let col = col.prefix(k_all * len);
    let (count, dim) = grid_1d(client, k_all.div_ceil(IM2COL_RUN) * len)?;
    // SAFETY: `col` holds `k_all * len` values (a checked prefix); each unit writes
    // `col[r len + t]` with `r < k_all`, `t < len` and, for the caller's column
    // `q = q0 + t < N pixels`, reads the input pixel `(q / pixels) per_x + (ci D + iz) H W +
    // iy W + ix` with `ci < C_in` (as `r < k_all`), `iz < D`, `iy < H`, `ix < W` (guarded),
    // inside batch entry `q / pixels < N`, which the caller's checked `x` holds.
    unsafe {
        im2col_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            col.arg(),
            q0,
            per_x,
            len,
            k_all,
            taps.arg(),
        );
    }
    Ok(())
}

/// `dx = conv2d_backward_input(w, dy)` (the transposed convolution), overwriting `dx`; with
/// `bias` (`c_in` values), `dx += bias` per channel after (a transposed convolution's bias).
pub fn launch_conv2d_backward_input<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (w, dy, bias): (&Handle, &Handle, Option<&Handle>),
    dx: &Handle,
    geo: ConvGeometry,
) -> Result<(), LaunchError> {
    let d = geo.dims()?;
    if d.lens[0] == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let dxb = Buf::new("dx", dx, d.lens[0], b)?;
    Buf::new("w", w, d.lens[1], b)?;
    let dyb = Buf::new("dy", dy, d.lens[2], b)?;
    let bias = bias.map(|h| Buf::new("bias", h, geo.c_in, b)).transpose()?;
    if d.per_y == 0 {
        // No output channels: no tap reads any input pixel.
        crate::elementwise::launch_fill::<R, F>(client, dx, d.lens[0], 0.0)?;
    } else if geo.groups == 1 && geo.is_pointwise() {
        // dx[n] = W^T . dy[n] for every batch entry at once.
        let mut spec = GemmSpec::new(geo.c_in, d.pixels, geo.c_out);
        spec.trans_a = true;
        spec.batch = geo.n;
        spec.strides = (0, d.per_y, d.per_x);
        launch_gemm::<R, F>(client, w, dy, None, dx, spec)?;
    } else {
        let tile = tile_pixels(d.k_all, d.pixels)?;
        let taps = geo.taps(client)?;
        let col = scratch::<R, F>(client, "col", d.k_all, tile)?;
        let part = scratch::<R, F>(client, "dy tile", geo.c_out, tile)?;
        for n in 0..geo.n {
            for p0 in (0..d.pixels).step_by(tile) {
                let len = tile.min(d.pixels - p0);
                take_tile::<R, F>(
                    client,
                    &dyb,
                    &part,
                    (n * d.pixels + p0, len),
                    (d.pixels, d.per_y),
                    geo.c_out,
                )?;
                let mut spec = GemmSpec::new(d.k, len, d.cg_out);
                spec.trans_a = true;
                spec.batch = geo.groups;
                spec.strides = (d.cg_out * d.k, d.cg_out * len, d.k * len);
                launch_gemm::<R, F>(client, w, &part.handle(), None, &col.handle(), spec)?;
                let (count, dim) = grid_1d(client, d.per_x)?;
                let col = col.prefix(d.k_all * len);
                let first = u32::from(p0 == 0);
                // SAFETY: units below `per_x` write `dx[n per_x + j]`, inside the checked
                // `dx`; each reads `col[r len + p - p0]` with `r < k_all` and
                // `p0 <= p < p0 + len` (guarded), inside the checked `k_all * len` prefix.
                unsafe {
                    col2im_kernel::launch_unchecked::<F, R>(
                        client,
                        count,
                        dim,
                        col.arg(),
                        dxb.arg(),
                        n * d.per_x,
                        d.per_x,
                        p0,
                        len,
                        first,
                        taps.arg(),
                    );
                }
            }
        }
    }
    if let Some(bias) = &bias {
        let (count, dim) = grid_1d(client, d.lens[0])?;
        // SAFETY: `bias` holds `c_in` values, `dx` its length (checked `Buf`s); the channel
        // index is `% c_in` (`plane` nonzero: `lens[0]` is).
        unsafe {
            channel_bias_kernel::launch_unchecked::<F, R>(
                client,
                count,
                dim,
                bias.arg(),
                dxb.arg(),
                geo.c_in,
                d.plane,
            );
        }
    }
    Ok(())
}

/// `dw += conv2d_backward_weight(x, dy)`, accumulated in `dw`'s dtype once per tile of
/// output columns (FP32 within each product).
pub fn launch_conv2d_backward_weight<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, dy): (&Handle, &Handle),
    dw: &Handle,
    geo: ConvGeometry,
) -> Result<(), LaunchError> {
    let d = geo.dims()?;
    if d.lens[1] == 0 || d.lens[2] == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let xb = Buf::new("x", x, d.lens[0], b)?;
    Buf::new("dw", dw, d.lens[1], b)?;
    let dyb = Buf::new("dy", dy, d.lens[2], b)?;
    let columns = d.columns(geo.n)?;
    let tile = tile_pixels(d.k_all, columns)?;
    let taps = geo.taps(client)?;
    let col = scratch::<R, F>(client, "col", d.k_all, tile)?;
    let part = scratch::<R, F>(client, "dy tile", geo.c_out, tile)?;
    for q0 in (0..columns).step_by(tile) {
        let len = tile.min(columns - q0);
        im2col::<R, F>(client, (&xb, &taps), &col, (q0, len), (d.per_x, d.k_all))?;
        take_tile::<R, F>(
            client,
            &dyb,
            &part,
            (q0, len),
            (d.pixels, d.per_y),
            geo.c_out,
        )?;
        let mut spec = GemmSpec::new(d.cg_out, d.k, len);
        spec.trans_b = true;
        spec.accumulate = true;
        spec.batch = geo.groups;
        spec.strides = (d.cg_out * len, d.k * len, d.cg_out * d.k);
        launch_gemm::<R, F>(client, &part.handle(), &col.handle(), None, dw, spec)?;
    }
    Ok(())
}

/// Copies output columns `q0..q0 + len` (entry-major pixels of every batch entry) of the
/// `channels` planes (of `pixels` each, `per` elements per entry) into the first
/// `channels * len` elements of `dst`.
fn take_tile<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    src: &Buf,
    dst: &Buf,
    (q0, len): (usize, usize),
    (pixels, per): (usize, usize),
    channels: usize,
) -> Result<(), LaunchError> {
    let dst = dst.prefix(channels * len);
    let (count, dim) = grid_1d(client, channels * len)?;
    // SAFETY: `dst` holds `channels * len` values (a checked prefix); each unit reads
    // `src[(q / pixels) per + c pixels + q % pixels]` with `c < channels` and the caller's
    // column `q = q0 + t < N pixels`, inside batch entry `q / pixels < N` of the checked `src`.
    unsafe {
        take_tile_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            src.arg(),
            dst.arg(),
            q0,
            pixels,
            per,
            len,
        );
    }
    Ok(())
}

/// `db[c] += sum over the batch and pixels of dy[n, c, :]` (`dy` of `n * c * pixels`
/// values), summed in FP32.
pub fn launch_conv2d_backward_bias<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    dy: &Handle,
    db: &Handle,
    (n, c, pixels): (usize, usize, usize),
) -> Result<(), LaunchError> {
    let len = extent("dy", &[n, c, pixels])?;
    if len == 0 {
        return Ok(());
    }
    check_u32(&[("dy", len)])?;
    let b = core::mem::size_of::<F>();
    let dy = Buf::new("dy", dy, len, b)?;
    let db = Buf::new("db", db, c, b)?;
    let (count, dim) = row_grid(client, c)?;
    // SAFETY: one cube per channel below `c`; every index read is below `n c pixels`, the
    // checked length of `dy`, and `db` holds `c` values.
    unsafe {
        bias_grad_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            dy.arg(),
            db.arg(),
            c,
            n,
            pixels,
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
        l.lower(im2col_kernel::Im2colKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            (),
            (),
            (),
            (),
            a(),
        ));
        l.lower(col2im_kernel::Col2imKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            (),
            (),
            (),
            (),
            (),
            a(),
        ));
        l.lower(take_tile_kernel::TakeTileKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            (),
            (),
            (),
            (),
        ));
        for has_bias in [false, true] {
            l.lower(place_tile_kernel::PlaceTileKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                a(),
                (),
                (),
                (),
                (),
                has_bias,
            ));
        }
        for has_mask in [false, true] {
            l.lower(deform_im2col_kernel::DeformIm2colKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                a(),
                a(),
                a(),
                (),
                (),
                a(),
                has_mask,
            ));
        }
        l.lower(channel_bias_kernel::ChannelBiasKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            (),
            (),
        ));
        l.lower(bias_grad_kernel::BiasGradKernel::<F, Rt>::new(
            L::settings(CubeDim::new_1d(REDUCE_UNITS)),
            c.clone(),
            a(),
            a(),
            (),
            (),
            (),
        ));
    });
}
