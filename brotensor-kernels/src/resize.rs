//! Resampling kernels over NCHW planes, one unit per output element: the separable resample
//! `Y = A_h X A_w^T` (every interpolation and average pool; the per-axis tables come from
//! the host, uploaded), its adjoint as a gather through the transposed tables (one unit per
//! input element, no scatter, no atomics), RAFT's convex upsampler and the DC-AE
//! channel-to-space upsampler. All in FP32 whatever the storage type.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, grid_1d, Buf, LaunchError};

/// One axis of a separable resample by output position: output `o` reads `index[o taps +
/// t]` with `weight[o taps + t]` for `t < taps` (both `len_out * taps` long).
#[derive(Clone, Copy, Debug)]
pub struct AxisTaps<'a> {
    /// Input length.
    pub len_in: usize,
    /// Output length.
    pub len_out: usize,
    /// Entries per output.
    pub taps: usize,
    /// Input positions.
    pub index: &'a [u32],
    /// Weights.
    pub weight: &'a [f32],
}

/// The transpose of an [`AxisTaps`] by input position (CSR): input `i`'s entries are
/// `start[i]..start[i + 1]` of `index` (output positions) and `weight`.
#[derive(Clone, Copy, Debug)]
pub struct AxisGather<'a> {
    /// Output length.
    pub len_out: usize,
    /// Row starts, input length + 1.
    pub start: &'a [u32],
    /// Output positions.
    pub index: &'a [u32],
    /// Weights.
    pub weight: &'a [f32],
}

fn invalid(what: &'static str) -> LaunchError {
    LaunchError::Invalid { what }
}

impl AxisTaps<'_> {
    /// Refuses a table whose lengths disagree or which reads past the input.
    fn check(&self) -> Result<(), LaunchError> {
        let n = extent("resample table", &[self.len_out, self.taps])?;
        if self.index.len() != n || self.weight.len() != n || self.taps == 0 {
            return Err(invalid(
                "a resample table holds len_out * taps entries, taps > 0",
            ));
        }
        if self.index.iter().any(|&i| i as usize >= self.len_in) {
            return Err(invalid("a resample table reads past its input"));
        }
        Ok(())
    }
}

impl AxisGather<'_> {
    /// Refuses a transposed table whose starts are not a partition of its entries or which
    /// reads past the output; returns the input length.
    fn check(&self) -> Result<usize, LaunchError> {
        let Some((&last, _)) = self.start.split_last() else {
            return Err(invalid("a transposed resample table needs its row starts"));
        };
        let ordered = self.start.first() == Some(&0)
            && self.start.windows(2).all(|w| w[0] <= w[1])
            && last as usize == self.index.len();
        if !ordered || self.weight.len() != self.index.len() {
            return Err(invalid(
                "a transposed resample table's rows do not partition it",
            ));
        }
        if self.index.iter().any(|&o| o as usize >= self.len_out) {
            return Err(invalid("a transposed resample table reads past its output"));
        }
        Ok(self.start.len() - 1)
    }
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn resample_forward_kernel<F: Float>(
    x: &Array<F>,
    y: &mut Array<F>,
    row_index: &Array<u32>,
    row_weight: &Array<f32>,
    col_index: &Array<u32>,
    col_weight: &Array<f32>,
    h_in: usize,
    w_in: usize,
    h_out: usize,
    w_out: usize,
    row_taps: usize,
    col_taps: usize,
) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let ow = i % w_out;
        let t = i / w_out;
        let oh = t % h_out;
        let p = t / h_out;
        let mut acc = 0.0f32;
        for a in 0..row_taps {
            let e = oh * row_taps + a;
            let base = (p * h_in + usize::cast_from(row_index[e])) * w_in;
            let mut line = 0.0f32;
            for b in 0..col_taps {
                let f = ow * col_taps + b;
                line += col_weight[f] * f32::cast_from(x[base + usize::cast_from(col_index[f])]);
            }
            acc += row_weight[e] * line;
        }
        y[i] = F::cast_from(acc);
    }
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn resample_backward_kernel<F: Float>(
    dy: &Array<F>,
    dx: &mut Array<F>,
    row_start: &Array<u32>,
    row_index: &Array<u32>,
    row_weight: &Array<f32>,
    col_start: &Array<u32>,
    col_index: &Array<u32>,
    col_weight: &Array<f32>,
    h_in: usize,
    w_in: usize,
    h_out: usize,
    w_out: usize,
) {
    let i = ABSOLUTE_POS;
    if i < dx.len() {
        let j = i % w_in;
        let t = i / w_in;
        let r = t % h_in;
        let p = t / h_in;
        let mut acc = 0.0f32;
        let c0 = usize::cast_from(col_start[j]);
        let c1 = usize::cast_from(col_start[j + 1]);
        for e in usize::cast_from(row_start[r])..usize::cast_from(row_start[r + 1]) {
            let base = (p * h_out + usize::cast_from(row_index[e])) * w_out;
            let mut line = 0.0f32;
            for f in c0..c1 {
                line += col_weight[f] * f32::cast_from(dy[base + usize::cast_from(col_index[f])]);
            }
            acc += row_weight[e] * line;
        }
        dx[i] = F::cast_from(acc);
    }
}

/// `y` = the separable resample of `planes` planes of `x` by the tables `rows` (H) and
/// `cols` (W), overwritten.
pub fn launch_resample_forward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    x: &Handle,
    y: &Handle,
    planes: usize,
    (rows, cols): (&AxisTaps, &AxisTaps),
) -> Result<(), LaunchError> {
    rows.check()?;
    cols.check()?;
    let x_len = extent("N*C*H_in*W_in", &[planes, rows.len_in, cols.len_in])?;
    let y_len = extent("N*C*H_out*W_out", &[planes, rows.len_out, cols.len_out])?;
    check_u32(&[("x", x_len), ("y", y_len)])?;
    if y_len == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let xb = Buf::new("x", x, x_len, b)?;
    let yb = Buf::new("y", y, y_len, b)?;
    let (ri, rw) = (
        Buf::upload(client, rows.index),
        Buf::upload(client, rows.weight),
    );
    let (ci, cw) = (
        Buf::upload(client, cols.index),
        Buf::upload(client, cols.weight),
    );
    let (count, dim) = grid_1d(client, y_len)?;
    // SAFETY: units below `y_len` only; a unit reads table entries below `len_out * taps`
    // (their uploaded lengths) and `x` at rows and columns below `H_in`, `W_in` (every
    // index checked above) of its plane `p < planes`: inside the checked `x`.
    unsafe {
        resample_forward_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            xb.arg(),
            yb.arg(),
            ri.arg(),
            rw.arg(),
            ci.arg(),
            cw.arg(),
            rows.len_in,
            cols.len_in,
            rows.len_out,
            cols.len_out,
            rows.taps,
            cols.taps,
        );
    }
    Ok(())
}

/// `dx` = the adjoint of the separable resample (the transposed tables `rows`, `cols`)
/// applied to `planes` planes of `dy`, overwritten.
pub fn launch_resample_backward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    dy: &Handle,
    dx: &Handle,
    planes: usize,
    (rows, cols): (&AxisGather, &AxisGather),
) -> Result<(), LaunchError> {
    let (h_in, w_in) = (rows.check()?, cols.check()?);
    let dx_len = extent("N*C*H_in*W_in", &[planes, h_in, w_in])?;
    let dy_len = extent("N*C*H_out*W_out", &[planes, rows.len_out, cols.len_out])?;
    check_u32(&[("dx", dx_len), ("dy", dy_len)])?;
    if dx_len == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let dyb = Buf::new("dy", dy, dy_len, b)?.nonempty();
    let dxb = Buf::new("dx", dx, dx_len, b)?;
    let up = |v: &[u32]| Buf::upload(client, v).nonempty();
    let (rs, ri, rw) = (
        up(rows.start),
        up(rows.index),
        Buf::upload(client, rows.weight).nonempty(),
    );
    let (cs, ci, cw) = (
        up(cols.start),
        up(cols.index),
        Buf::upload(client, cols.weight).nonempty(),
    );
    let (count, dim) = grid_1d(client, dx_len)?;
    // SAFETY: units below `dx_len` only; a unit reads its rows' starts (`H_in + 1` and
    // `W_in + 1` uploaded), entries between consecutive starts (a partition of the uploaded
    // entries, checked) and `dy` at output rows and columns below `H_out`, `W_out` (checked)
    // of its plane: inside the checked `dy`. Empty tables are bound as one element never read.
    unsafe {
        resample_backward_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            dyb.arg(),
            dxb.arg(),
            rs.arg(),
            ri.arg(),
            rw.arg(),
            cs.arg(),
            ci.arg(),
            cw.arg(),
            h_in,
            w_in,
            rows.len_out,
            cols.len_out,
        );
    }
    Ok(())
}

/// The 3x3 neighbour `m`'s coordinate along an axis: `c - 1 + d` clamped to `0..len`.
#[cube]
fn neighbour(c: usize, d: usize, len: usize) -> usize {
    let mut v = c + d;
    if v >= 1 {
        v -= 1;
    }
    if v >= len {
        v = len - 1;
    }
    v
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn convex_upsample_kernel<F: Float>(
    x: &Array<F>,
    mask: &Array<F>,
    y: &mut Array<F>,
    c: usize,
    h: usize,
    w: usize,
    k: usize,
) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let fx = i % (k * w);
        let t = i / (k * w);
        let fy = t % (k * h);
        let img = t / (k * h);
        let plane = h * w;
        let cy = fy / k;
        let cx = fx / k;
        let kk = k * k;
        let m0 = (img / c) * 9 * kk * plane + ((fy % k) * k + fx % k) * plane + cy * w + cx;
        let step = kk * plane;
        let mut top = f32::cast_from(mask[m0]);
        for m in 1..9usize {
            top = f32::max(top, f32::cast_from(mask[m0 + m * step]));
        }
        let src = img * plane;
        let mut num = 0.0f32;
        let mut den = 0.0f32;
        for m in 0..9usize {
            let e = f32::exp(f32::cast_from(mask[m0 + m * step]) - top);
            let ny = neighbour(cy, m / 3, h);
            let nx = neighbour(cx, m % 3, w);
            num += e * f32::cast_from(x[src + ny * w + nx]);
            den += e;
        }
        y[i] = F::cast_from(num / den);
    }
}

/// RAFT's convex upsample of `x` (`(n, c, h, w)`) by `k` with `mask` (`(n, 9 k^2, h, w)`)
/// into `y` (`(n, c, k h, k w)`), overwritten; the softmax in FP32.
pub fn launch_convex_upsample<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (x, mask, y): (&Handle, &Handle, &Handle),
    (n, c, h, w): (usize, usize, usize, usize),
    k: usize,
) -> Result<(), LaunchError> {
    let x_len = extent("N*C*H*W", &[n, c, h, w])?;
    let mask_len = extent("N*9*k*k*H*W", &[n, 9, k, k, h, w])?;
    let y_len = extent("N*C*kH*kW", &[x_len, k, k])?;
    check_u32(&[("x", x_len), ("mask", mask_len), ("y", y_len)])?;
    if y_len == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let xb = Buf::new("x", x, x_len, b)?;
    let mb = Buf::new("mask", mask, mask_len, b)?;
    let yb = Buf::new("y", y, y_len, b)?;
    let (count, dim) = grid_1d(client, y_len)?;
    // SAFETY: units below `y_len` only (so `c`, `h`, `w`, `k` are nonzero); a unit of image
    // `img < n c` reads `mask` at `(img / c) 9 k^2 h w + (m k^2 + s) h w + pixel` with `m <
    // 9`, `s < k^2`: below `n 9 k^2 h w`; and `x` at clamped neighbours inside its plane.
    unsafe {
        convex_upsample_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            xb.arg(),
            mb.arg(),
            yb.arg(),
            c,
            h,
            w,
            k,
        );
    }
    Ok(())
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn pixel_shuffle_2x_kernel<F: Float>(
    x: &Array<F>,
    y: &mut Array<F>,
    c_in: usize,
    c_out: usize,
    h: usize,
    w: usize,
    repeats: usize,
) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let fx = i % (2 * w);
        let t = i / (2 * w);
        let fy = t % (2 * h);
        let img = t / (2 * h);
        let co = img % c_out;
        let src_c = (4 * co + 2 * (fy % 2) + fx % 2) / repeats;
        y[i] = x[(((img / c_out) * c_in + src_c) * h + fy / 2) * w + fx / 2];
    }
}

/// The DC-AE up-shortcut: `y[n, co, 2h + i, 2w + j] = x[n, (4 co + 2 i + j) / repeats, h,
/// w]` with `repeats = 4 c_out / c_in`; `x`: `(n, c_in, h, w)`, `y`: `(n, c_out, 2h, 2w)`.
pub fn launch_pixel_shuffle_upsample_2x<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    x: &Handle,
    y: &Handle,
    (n, c_in, h, w): (usize, usize, usize, usize),
    c_out: usize,
) -> Result<(), LaunchError> {
    let four_out = extent("4*C_out", &[4, c_out])?;
    if c_in == 0 || four_out % c_in != 0 {
        return Err(invalid("C_in must divide 4*C_out"));
    }
    let x_len = extent("N*C_in*H*W", &[n, c_in, h, w])?;
    let y_len = extent("N*C_out*2H*2W", &[n, four_out, h, w])?;
    check_u32(&[("x", x_len), ("y", y_len)])?;
    if y_len == 0 {
        return Ok(());
    }
    let b = core::mem::size_of::<F>();
    let xb = Buf::new("x", x, x_len, b)?;
    let yb = Buf::new("y", y, y_len, b)?;
    let (count, dim) = grid_1d(client, y_len)?;
    // SAFETY: units below `y_len` only; the source channel `(4 co + 2i + j) / repeats` is
    // below `4 c_out / repeats = c_in`, the source pixel inside the `h x w` plane: every
    // read is inside the checked `x`.
    unsafe {
        pixel_shuffle_2x_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            xb.arg(),
            yb.arg(),
            c_in,
            c_out,
            h,
            w,
            four_out / c_in,
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
        l.lower(
            resample_forward_kernel::ResampleForwardKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                a(),
                a(),
                a(),
                a(),
                (),
                (),
                (),
                (),
                (),
                (),
            ),
        );
        l.lower(
            resample_backward_kernel::ResampleBackwardKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                a(),
                a(),
                a(),
                a(),
                a(),
                a(),
                a(),
                (),
                (),
                (),
                (),
            ),
        );
        l.lower(convex_upsample_kernel::ConvexUpsampleKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            a(),
            (),
            (),
            (),
            (),
        ));
        l.lower(pixel_shuffle_2x_kernel::PixelShuffle2xKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            (),
            (),
            (),
            (),
            (),
        ));
    });
}
