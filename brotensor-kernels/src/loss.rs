//! Fused FP32 losses on the row-reduce skeleton: masked softmax cross-entropy over column
//! segments, and binary cross-entropy with logits, one cube per (row, segment) or per row;
//! and the squared error's sum, one cube per part of the elements.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{extent, grid_1d, sum, Buf, LaunchError};
use crate::primitives::{cube_max, cube_sum, is_valid, row_grid, REDUCE_UNITS};

/// Cube `row * heads + h` handles row `row`, columns `[offsets[h], offsets[h + 1])`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn xent_kernel(
    logits: &Array<f32>,
    target: &Array<f32>,
    mask: &Array<f32>,
    offsets: &Array<u32>,
    probs: &mut Array<f32>,
    dlogits: &mut Array<f32>,
    loss: &mut Array<f32>,
    rows: usize,
    cols: usize,
    heads: usize,
    #[comptime] masked: bool,
) {
    let cube = CUBE_POS;
    if cube < rows * heads {
        let row = cube / heads;
        let h = cube % heads;
        // Offsets live on the device and are not validated on the host: clamp them into
        // the row (and the end to at least the start) so a bad one cannot reach another row
        // or past the buffer.
        let lo = cols.min(offsets[h] as usize);
        let hi = cols.min(offsets[h + 1] as usize).max(lo);
        let start = row * cols + lo;
        let end = row * cols + hi;
        let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let mut m = f32::new(-1e30f32);
        let mut i = start + UNIT_POS as usize;
        loop {
            if i >= end {
                break;
            }
            if is_valid(mask, i, masked) && logits[i] > m {
                m = logits[i];
            }
            i += REDUCE_UNITS as usize;
        }
        let m = cube_max(m, &mut smem);
        let mut s = f32::new(0.0f32);
        i = start + UNIT_POS as usize;
        loop {
            if i >= end {
                break;
            }
            if is_valid(mask, i, masked) {
                s += (logits[i] - m).exp();
            }
            i += REDUCE_UNITS as usize;
        }
        let s = cube_sum::<f32>(s, &mut smem);
        let mut inv = f32::new(0.0f32);
        if s > 0.0 {
            inv = 1.0 / s;
        }
        let mut part = f32::new(0.0f32);
        i = start + UNIT_POS as usize;
        loop {
            if i >= end {
                break;
            }
            if is_valid(mask, i, masked) {
                let p = (logits[i] - m).exp() * inv;
                let t = target[i];
                probs[i] = p;
                dlogits[i] = p - t;
                if t > 0.0 {
                    part -= t * f32::max(p, 1e-12).ln();
                }
            } else {
                probs[i] = 0.0;
                dlogits[i] = 0.0;
            }
            i += REDUCE_UNITS as usize;
        }
        let total = cube_sum::<f32>(part, &mut smem);
        if UNIT_POS == 0 {
            loss[cube] = total;
        }
    }
}

#[cube]
fn softplus(z: f32) -> f32 {
    f32::max(z, 0.0) + (-f32::abs(z)).exp().log1p()
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn bce_kernel(
    logits: &Array<f32>,
    target: &Array<f32>,
    mask: &Array<f32>,
    probs: &mut Array<f32>,
    dlogits: &mut Array<f32>,
    loss: &mut Array<f32>,
    rows: usize,
    cols: usize,
    pos_weight: f32,
    #[comptime] masked: bool,
) {
    let row = CUBE_POS;
    if row < rows {
        let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let mut part = f32::new(0.0f32);
        let mut j = UNIT_POS as usize;
        loop {
            if j >= cols {
                break;
            }
            let i = row * cols + j;
            if is_valid(mask, i, masked) {
                let z = logits[i];
                let y = target[i];
                // The sigmoid without overflow: e^-|z| never exceeds 1.
                let e = (-f32::abs(z)).exp();
                let mut s = 1.0 / (1.0 + e);
                if z < 0.0 {
                    s = e / (1.0 + e);
                }
                probs[i] = s;
                dlogits[i] = s * (pos_weight * y + 1.0 - y) - pos_weight * y;
                part += pos_weight * y * softplus(-z) + (1.0 - y) * softplus(z);
            } else {
                probs[i] = 0.0;
                dlogits[i] = 0.0;
            }
            j += REDUCE_UNITS as usize;
        }
        let total = cube_sum::<f32>(part, &mut smem);
        if UNIT_POS == 0 {
            loss[row] = total;
        }
    }
}

/// The buffers of a fused loss over `(rows, cols)` FP32 matrices.
pub struct LossBuffers<'a> {
    /// Logits.
    pub logits: &'a Handle,
    /// Targets.
    pub target: &'a Handle,
    /// Per-element mask (valid when at least 0.5), if any.
    pub mask: Option<&'a Handle>,
    /// Probabilities out.
    pub probs: &'a Handle,
    /// Logit gradients out.
    pub dlogits: &'a Handle,
    /// Loss out: one value per (row, head) for cross-entropy, per row for BCE.
    pub loss: &'a Handle,
}

/// The checked buffers of a fused loss, each the one of [`LossBuffers`] of its name.
struct LossBufs {
    logits: Buf,
    target: Buf,
    mask: Option<Buf>,
    probs: Buf,
    dlogits: Buf,
    loss: Buf,
}

impl LossBufs {
    /// Checks `b` for `elems` elements and `losses` loss values.
    fn new(b: &LossBuffers<'_>, elems: usize, losses: usize) -> Result<Self, LaunchError> {
        let logits = Buf::new("logits", b.logits, elems, 4)?;
        let target = Buf::new("target", b.target, elems, 4)?;
        let probs = Buf::new("probs", b.probs, elems, 4)?;
        let dlogits = Buf::new("dlogits", b.dlogits, elems, 4)?;
        let mask = b.mask.map(|m| Buf::new("mask", m, elems, 4)).transpose()?;
        Ok(LossBufs {
            logits,
            target,
            mask,
            probs,
            dlogits,
            loss: Buf::new("loss", b.loss, losses, 4)?,
        })
    }

    /// The mask's argument, `logits` standing in when there is none.
    fn mask_arg<R: Runtime>(&self) -> ArrayArg<R> {
        self.logits.stand_in_for(self.mask.as_ref()).arg()
    }
}

/// Masked softmax cross-entropy for each row and each head `[offsets[h], offsets[h+1])`
/// (`offsets`: `heads + 1` u32 values, non-decreasing, at most `cols`; the kernel clamps
/// each head into its row, so bad offsets give wrong values, never an access outside it).
pub fn launch_xent<R: Runtime>(
    client: &ComputeClient<R>,
    bufs: LossBuffers<'_>,
    offsets: &Handle,
    (rows, cols, heads): (usize, usize, usize),
) -> Result<(), LaunchError> {
    if rows == 0 || heads == 0 {
        return Ok(());
    }
    let elems = extent("rows * cols", &[rows, cols])?;
    let losses = extent("rows * heads", &[rows, heads])?;
    let bounds = sum("heads + 1", heads, 1)?;
    let bufs = LossBufs::new(&bufs, elems, losses)?;
    let offsets = Buf::new("offsets", offsets, bounds, 4)?;
    // One cube per (row, head); too many saturate into a grid the device refuses.
    let (count, _) = grid_1d(client, losses.saturating_mul(REDUCE_UNITS as usize))?;
    let masked = bufs.mask.is_some();
    // SAFETY: lengths from checked `Buf`s; indices are `row * cols + j` with `j` inside a
    // head's range, which the caller keeps within `cols`; the mask is read only when given.
    unsafe {
        xent_kernel::launch_unchecked::<R>(
            client,
            count,
            CubeDim::new_1d(REDUCE_UNITS),
            bufs.logits.arg(),
            bufs.target.arg(),
            bufs.mask_arg(),
            offsets.arg(),
            bufs.probs.arg(),
            bufs.dlogits.arg(),
            bufs.loss.arg(),
            rows,
            cols,
            heads,
            masked,
        );
    }
    Ok(())
}

/// Binary cross-entropy with logits per row, positive weight `pos_weight`.
pub fn launch_bce<R: Runtime>(
    client: &ComputeClient<R>,
    bufs: LossBuffers<'_>,
    (rows, cols): (usize, usize),
    pos_weight: f32,
) -> Result<(), LaunchError> {
    if rows == 0 {
        return Ok(());
    }
    let elems = extent("rows * cols", &[rows, cols])?;
    let bufs = LossBufs::new(&bufs, elems, rows)?;
    // One cube per row; too many saturate into a grid the device refuses.
    let (count, _) = grid_1d(client, rows.saturating_mul(REDUCE_UNITS as usize))?;
    let masked = bufs.mask.is_some();
    // SAFETY: as in `launch_xent`.
    unsafe {
        bce_kernel::launch_unchecked::<R>(
            client,
            count,
            CubeDim::new_1d(REDUCE_UNITS),
            bufs.logits.arg(),
            bufs.target.arg(),
            bufs.mask_arg(),
            bufs.probs.arg(),
            bufs.dlogits.arg(),
            bufs.loss.arg(),
            rows,
            cols,
            pos_weight,
            masked,
        );
    }
    Ok(())
}

/// Elements one cube of [`launch_squared_error_parts`] sums (16 per unit).
pub const SQUARED_ERROR_PART: usize = REDUCE_UNITS as usize * 16;

/// Cube `p < parts` writes `sum (a[i] - b[i])^2` over elements `[p PART, (p + 1) PART)`
/// (up to `len`) to `partials[p]`.
#[cube(launch_unchecked)]
fn squared_error_parts_kernel(
    a: &Array<f32>,
    b: &Array<f32>,
    partials: &mut Array<f32>,
    len: usize,
    parts: usize,
) {
    let part = CUBE_POS;
    if part < parts {
        let end = len.min((part + 1) * SQUARED_ERROR_PART);
        let mut s = f32::new(0.0f32);
        let mut i = part * SQUARED_ERROR_PART + UNIT_POS as usize;
        loop {
            if i >= end {
                break;
            }
            let d = a[i] - b[i];
            s += d * d;
            i += REDUCE_UNITS as usize;
        }
        let mut smem = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let total = cube_sum::<f32>(s, &mut smem);
        if UNIT_POS == 0 {
            partials[part] = total;
        }
    }
}

/// `partials[p] = sum (a[i] - b[i])^2` over part `p` of [`SQUARED_ERROR_PART`] elements of
/// the `len`-element F32 buffers: `len.div_ceil(SQUARED_ERROR_PART)` values, which the
/// caller adds in order for the total.
pub fn launch_squared_error_parts<R: Runtime>(
    client: &ComputeClient<R>,
    a: &Handle,
    b: &Handle,
    partials: &Handle,
    len: usize,
) -> Result<(), LaunchError> {
    if len == 0 {
        return Ok(());
    }
    let parts = len.div_ceil(SQUARED_ERROR_PART);
    let a = Buf::new("a", a, len, 4)?;
    let b = Buf::new("b", b, len, 4)?;
    let partials = Buf::new("partials", partials, parts, 4)?;
    let (count, dim) = row_grid(client, parts)?;
    // SAFETY: lengths from checked `Buf`s; cube `p < parts` reads `a`, `b` below `len` and
    // writes `partials[p]`; cubes of the folded grid past `parts` do nothing.
    unsafe {
        squared_error_parts_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            a.arg(),
            b.arg(),
            partials.arg(),
            len,
            parts,
        );
    }
    Ok(())
}

/// Every kernel of this file in every specialisation the library can launch, lowered to
/// CUDA C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{Lowering as L, Rt};
    let c = l.client.clone();
    let a = L::array;
    let reduce = || L::settings(CubeDim::new_1d(REDUCE_UNITS));
    for masked in [false, true] {
        l.lower(xent_kernel::XentKernel::<Rt>::new(
            reduce(),
            c.clone(),
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
            masked,
        ));
        l.lower(bce_kernel::BceKernel::<Rt>::new(
            reduce(),
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
            masked,
        ));
    }
    l.lower(
        squared_error_parts_kernel::SquaredErrorPartsKernel::<Rt>::new(
            reduce(),
            c,
            a(),
            a(),
            a(),
            (),
            (),
        ),
    );
}
