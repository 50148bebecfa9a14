//! Kernels of the flash_grad category: flash attention backward passes, FA-2 style and
//! recompute-based (no forward caches are read).
//!
//! Attention per head `h` and query row `i` of segment `b` (one segment without varlen):
//! `s_ij = scale q_i . k_j`, `P_ij = softmax_j(s_ij)` over the valid keys `j` of the segment
//! (key mask `> 0.5`, causal `j - ks <= i - qs`), `O_i = sum_j P_ij v_j`. With
//! `dP_ij = dO_i . v_j`, `D_i = dO_i . O_i` and `dS_ij = P_ij (dP_ij - D_i)`:
//! `dQ_i = scale sum_j dS_ij k_j`, `dK_j = scale sum_i dS_ij q_i`, `dV_j = sum_i P_ij dO_i`.
//!
//! Three kernels, one cube of [`REDUCE_UNITS`] units per `(row, head)`, head columns on the
//! units (so `head_dim <= MAX_HEAD_DIM`), keys or queries in shared-memory tiles of
//! `REDUCE_UNITS`:
//! - `flash_bwd_stats_kernel`: per query row, the row's max and sum (one pass), `O_i`
//!   (second pass), the log-sum-exp and `D_i` (FP32 scratch);
//! - `flash_bwd_dq_kernel`: per query row, `dQ_i` over the key tiles;
//! - `flash_bwd_dkv_kernel`: per key row, `dK_j` and `dV_j` over the query tiles.
//!
//! No unit writes what another cube writes, so no atomics are needed. Every accumulation is
//! FP32 whatever the storage type. Segment bounds read from `cu_*` are clamped to the rows,
//! so no index leaves its buffer whatever the prefix sums hold (the caller validates them).

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, Buf, LaunchError};
use crate::primitives::{cube_max, cube_sum, row_grid, REDUCE_UNITS};

/// The largest head dimension the kernels take (one unit per head column).
pub const MAX_HEAD_DIM: usize = REDUCE_UNITS as usize;

/// The segment holding row `r`: the last `b < batch` with `cu[b] <= r` (0 if none).
#[cube]
fn segment_of(cu: &Array<i32>, batch: usize, r: usize) -> usize {
    let mut seg = usize::new(0);
    for b in 1..batch {
        if cu[b] >= 0 && usize::cast_from(cu[b]) <= r {
            seg = b;
        }
    }
    seg
}

/// `cu[at]` clamped to `[0, rows]`.
#[cube]
fn bound(cu: &Array<i32>, at: usize, rows: usize) -> usize {
    let v = cu[at];
    let mut out = usize::new(0);
    if v > 0 {
        out = usize::cast_from(v).min(rows);
    }
    out
}

/// Whether key `j` takes part: always without a mask, else where `mask[j] > 0.5`.
#[cube]
fn key_kept(mask: &Array<f32>, j: usize, #[comptime] masked: bool) -> bool {
    let mut keep = true;
    if comptime!(masked) {
        keep = mask[j] > 0.5;
    }
    keep
}

/// `sum_d s[d] x[base + d]` over `d < n` (`s` in shared memory, FP32).
#[cube]
fn dot_shared<F: Float>(s: &SharedMemory<f32>, x: &Array<F>, base: usize, n: usize) -> f32 {
    let mut acc = f32::new(0.0f32);
    for d in 0..n {
        acc += s[d] * f32::cast_from(x[base + d]);
    }
    acc
}

/// Per `(query row i, head h)`: writes `O_i`, `lse[h, i]` and `delta[h, i] = dO_i . O_i`
/// (a row with no valid key gets zeros).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn flash_bwd_stats_kernel<F: Float>(
    q: &Array<F>,
    k: &Array<F>,
    v: &Array<F>,
    d_o: &Array<F>,
    mask: &Array<f32>,
    cu_q: &Array<i32>,
    cu_k: &Array<i32>,
    o: &mut Array<F>,
    lse: &mut Array<f32>,
    delta: &mut Array<f32>,
    rows_q: usize,
    rows_k: usize,
    heads: usize,
    head_dim: usize,
    batch: usize,
    scale: f32,
    #[comptime] masked: bool,
    #[comptime] causal: bool,
) {
    let cube = CUBE_POS;
    if cube < rows_q * heads {
        let i = cube / heads;
        let h = cube % heads;
        let u = UNIT_POS as usize;
        let width = heads * head_dim;
        let col = h * head_dim;
        let b = segment_of(cu_q, batch, i);
        let qs = bound(cu_q, b, rows_q).min(i);
        let ks = bound(cu_k, b, rows_k);
        let mut end = bound(cu_k, b + 1, rows_k).max(ks);
        if comptime!(causal) {
            end = end.min(ks + (i - qs) + 1);
        }
        let mut sq = SharedMemory::<f32>::new(MAX_HEAD_DIM);
        let mut sp = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let mut red = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        if u < head_dim {
            sq[u] = f32::cast_from(q[i * width + col + u]) * scale;
        }
        sync_cube();
        // Pass 1: this unit's running max and sum over its keys, then the row's.
        let mut m = f32::new(-1e30f32);
        let mut l = f32::new(0.0f32);
        let mut j = ks + u;
        loop {
            if j >= end {
                break;
            }
            if key_kept(mask, j, masked) {
                let s = dot_shared::<F>(&sq, k, j * width + col, head_dim);
                if s > m {
                    l = l * (m - s).exp() + 1.0;
                    m = s;
                } else {
                    l += (s - m).exp();
                }
            }
            j += REDUCE_UNITS as usize;
        }
        let m_row = cube_max(m, &mut red);
        let l_row = cube_sum::<f32>(l * (m - m_row).exp(), &mut red);
        let mut inv = f32::new(0.0f32);
        if l_row > 0.0 {
            inv = 1.0 / l_row;
        }
        // Pass 2: O_i over key tiles; unit u owns head column u.
        let mut acc = f32::new(0.0f32);
        let mut t = ks;
        loop {
            if t >= end {
                break;
            }
            let j = t + u;
            let mut p = f32::new(0.0f32);
            if j < end && key_kept(mask, j.min(end - 1), masked) {
                p = (dot_shared::<F>(&sq, k, j * width + col, head_dim) - m_row).exp() * inv;
            }
            sp[u] = p;
            sync_cube();
            if u < head_dim {
                let n = (end - t).min(REDUCE_UNITS as usize);
                for jj in 0..n {
                    acc += sp[jj] * f32::cast_from(v[(t + jj) * width + col + u]);
                }
            }
            sync_cube();
            t += REDUCE_UNITS as usize;
        }
        let mut so = SharedMemory::<f32>::new(MAX_HEAD_DIM);
        if u < head_dim {
            o[i * width + col + u] = F::cast_from(acc);
            so[u] = acc;
        }
        sync_cube();
        if u == 0 {
            // D_i summed in the order the other kernels sum dO_i . v_j, so that a row with one
            // kept key (O_i = v_j) gets dS = 0 exactly.
            let mut d_row = f32::new(0.0f32);
            for d in 0..head_dim {
                d_row += f32::cast_from(d_o[i * width + col + d]) * so[d];
            }
            let mut row_lse = f32::new(0.0f32);
            if l_row > 0.0 {
                row_lse = m_row + l_row.ln();
            }
            lse[h * rows_q + i] = row_lse;
            delta[h * rows_q + i] = d_row;
        }
    }
}

/// Per `(query row i, head h)`: `dQ_i = scale sum_j dS_ij k_j` over the key tiles.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn flash_bwd_dq_kernel<F: Float>(
    q: &Array<F>,
    k: &Array<F>,
    v: &Array<F>,
    d_o: &Array<F>,
    mask: &Array<f32>,
    cu_q: &Array<i32>,
    cu_k: &Array<i32>,
    lse: &Array<f32>,
    delta: &Array<f32>,
    dq: &mut Array<F>,
    rows_q: usize,
    rows_k: usize,
    heads: usize,
    head_dim: usize,
    batch: usize,
    scale: f32,
    #[comptime] masked: bool,
    #[comptime] causal: bool,
) {
    let cube = CUBE_POS;
    if cube < rows_q * heads {
        let i = cube / heads;
        let h = cube % heads;
        let u = UNIT_POS as usize;
        let width = heads * head_dim;
        let col = h * head_dim;
        let b = segment_of(cu_q, batch, i);
        let qs = bound(cu_q, b, rows_q).min(i);
        let ks = bound(cu_k, b, rows_k);
        let mut end = bound(cu_k, b + 1, rows_k).max(ks);
        if comptime!(causal) {
            end = end.min(ks + (i - qs) + 1);
        }
        let mut sq = SharedMemory::<f32>::new(MAX_HEAD_DIM);
        let mut sdo = SharedMemory::<f32>::new(MAX_HEAD_DIM);
        let mut sds = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        if u < head_dim {
            sq[u] = f32::cast_from(q[i * width + col + u]) * scale;
            sdo[u] = f32::cast_from(d_o[i * width + col + u]);
        }
        sync_cube();
        let row_lse = lse[h * rows_q + i];
        let row_delta = delta[h * rows_q + i];
        let mut acc = f32::new(0.0f32);
        let mut t = ks;
        loop {
            if t >= end {
                break;
            }
            let j = t + u;
            let mut ds = f32::new(0.0f32);
            if j < end && key_kept(mask, j.min(end - 1), masked) {
                let p = (dot_shared::<F>(&sq, k, j * width + col, head_dim) - row_lse).exp();
                let dp = dot_shared::<F>(&sdo, v, j * width + col, head_dim);
                ds = p * (dp - row_delta);
            }
            sds[u] = ds;
            sync_cube();
            if u < head_dim {
                let n = (end - t).min(REDUCE_UNITS as usize);
                for jj in 0..n {
                    acc += sds[jj] * f32::cast_from(k[(t + jj) * width + col + u]);
                }
            }
            sync_cube();
            t += REDUCE_UNITS as usize;
        }
        if u < head_dim {
            dq[i * width + col + u] = F::cast_from(acc * scale);
        }
    }
}

/// Per `(key row j, head h)`: `dK_j = scale sum_i dS_ij q_i` and `dV_j = sum_i P_ij dO_i`
/// over the query tiles (zeros for a masked key).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn flash_bwd_dkv_kernel<F: Float>(
    q: &Array<F>,
    k: &Array<F>,
    v: &Array<F>,
    d_o: &Array<F>,
    mask: &Array<f32>,
    cu_q: &Array<i32>,
    cu_k: &Array<i32>,
    lse: &Array<f32>,
    delta: &Array<f32>,
    dk: &mut Array<F>,
    dv: &mut Array<F>,
    rows_q: usize,
    rows_k: usize,
    heads: usize,
    head_dim: usize,
    batch: usize,
    scale: f32,
    #[comptime] masked: bool,
    #[comptime] causal: bool,
) {
    let cube = CUBE_POS;
    if cube < rows_k * heads {
        let j = cube / heads;
        let h = cube % heads;
        let u = UNIT_POS as usize;
        let width = heads * head_dim;
        let col = h * head_dim;
        let b = segment_of(cu_k, batch, j);
        let ks = bound(cu_k, b, rows_k).min(j);
        let qs = bound(cu_q, b, rows_q);
        let qe = bound(cu_q, b + 1, rows_q).max(qs);
        let mut start = qs;
        if comptime!(causal) {
            start = (qs + (j - ks)).min(qe);
        }
        if !key_kept(mask, j, masked) {
            start = qe;
        }
        let mut sk = SharedMemory::<f32>::new(MAX_HEAD_DIM);
        let mut sv = SharedMemory::<f32>::new(MAX_HEAD_DIM);
        let mut sp = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        let mut sds = SharedMemory::<f32>::new(REDUCE_UNITS as usize);
        if u < head_dim {
            sk[u] = f32::cast_from(k[j * width + col + u]);
            sv[u] = f32::cast_from(v[j * width + col + u]);
        }
        sync_cube();
        let mut acc_k = f32::new(0.0f32);
        let mut acc_v = f32::new(0.0f32);
        let mut t = start;
        loop {
            if t >= qe {
                break;
            }
            let i = t + u;
            let mut p = f32::new(0.0f32);
            let mut ds = f32::new(0.0f32);
            if i < qe {
                // The score in the stats kernel's rounding: (q scale) . k.
                let mut s = f32::new(0.0f32);
                let mut dp = f32::new(0.0f32);
                for d in 0..head_dim {
                    s += f32::cast_from(q[i * width + col + d]) * scale * sk[d];
                    dp += f32::cast_from(d_o[i * width + col + d]) * sv[d];
                }
                p = (s - lse[h * rows_q + i]).exp();
                ds = p * (dp - delta[h * rows_q + i]);
            }
            sp[u] = p;
            sds[u] = ds;
            sync_cube();
            if u < head_dim {
                let n = (qe - t).min(REDUCE_UNITS as usize);
                for ii in 0..n {
                    let at = (t + ii) * width + col + u;
                    acc_v += sp[ii] * f32::cast_from(d_o[at]);
                    acc_k += sds[ii] * f32::cast_from(q[at]);
                }
            }
            sync_cube();
            t += REDUCE_UNITS as usize;
        }
        if u < head_dim {
            dk[j * width + col + u] = F::cast_from(acc_k * scale);
            dv[j * width + col + u] = F::cast_from(acc_v);
        }
    }
}

/// The geometry of a backward launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlashBwdShape {
    /// Rows of `Q`, `dO`, `O`, `dQ` (all segments).
    pub rows_q: usize,
    /// Rows of `K`, `V`, `dK`, `dV` (all segments).
    pub rows_k: usize,
    /// Heads; every tensor has `heads * head_dim` columns.
    pub heads: usize,
    /// Columns per head, `1..=MAX_HEAD_DIM`.
    pub head_dim: usize,
    /// Segments: `cu_q` and `cu_k` hold `batch + 1` prefix sums.
    pub batch: usize,
    /// Key `j` of a segment serves its query `i` only when `j - ks <= i - qs`.
    pub causal: bool,
}

/// The loop iterations the software Vulkan device (lavapipe) lets one thread run: it ends a
/// kernel's loops after this many iterations in all, nested loops counted.
pub const SOFTWARE_LOOP_LIMIT: u64 = 65_535;

/// An upper bound on the loop iterations one unit of the backward kernels runs for `shape`:
/// the segment search, then one step per [`REDUCE_UNITS`]-wide tile of the longer side, each
/// a `head_dim` dot plus two tile-wide passes (counted generously: an estimate that errs
/// high only refuses early). Where it passes [`SOFTWARE_LOOP_LIMIT`] the
/// software device would cut the loops short (the kernels do not split long walks yet), so
/// its glue refuses such shapes there.
pub fn unit_iterations(shape: &FlashBwdShape) -> u64 {
    let tiles = shape
        .rows_q
        .max(shape.rows_k)
        .div_ceil(REDUCE_UNITS as usize) as u64;
    shape.batch as u64 + tiles * (shape.head_dim as u64 + 2 * u64::from(REDUCE_UNITS))
}

/// The device buffers of a backward launch: inputs `q, k, v, d_o` in the storage type,
/// an optional F32 key mask (`rows_k` values), the I32 prefix sums, and the outputs `o`
/// (the recomputed forward output), `dq`, `dk`, `dv` (all overwritten).
pub struct FlashBwdBuffers<'a> {
    /// `Q (rows_q, width)`, `K`, `V (rows_k, width)`, `dO (rows_q, width)`.
    pub inputs: [&'a Handle; 4],
    /// The key mask, or none.
    pub mask: Option<&'a Handle>,
    /// `cu_seqlens_q` and `cu_seqlens_k`, `batch + 1` I32 each.
    pub cu: [&'a Handle; 2],
    /// `O`, `dQ (rows_q, width)`, `dK`, `dV (rows_k, width)`.
    pub outputs: [&'a Handle; 4],
}

/// Launches the three backward kernels (stats, dK/dV, dQ) for `shape` on `buffers`.
pub fn launch_flash_attention_backward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    buffers: &FlashBwdBuffers<'_>,
    shape: FlashBwdShape,
) -> Result<(), LaunchError> {
    let FlashBwdShape {
        rows_q,
        rows_k,
        heads,
        head_dim,
        batch,
        causal,
    } = shape;
    if head_dim == 0 || head_dim > MAX_HEAD_DIM || heads == 0 || batch == 0 {
        return Err(LaunchError::ZeroDivisor {
            what: "heads, head_dim (at most MAX_HEAD_DIM) and batch",
        });
    }
    let e = core::mem::size_of::<F>();
    let width = extent("heads * head_dim", &[heads, head_dim])?;
    let len_q = extent("rows_q * width", &[rows_q, width])?;
    let len_k = extent("rows_k * width", &[rows_k, width])?;
    let stats = extent("heads * rows_q", &[heads, rows_q])?;
    let [q, k, v, d_o] = buffers.inputs;
    let [o, dq, dk, dv] = buffers.outputs;
    let [cu_q, cu_k] = buffers.cu;
    let q = Buf::new("q", q, len_q, e)?;
    let k = Buf::new("k", k, len_k, e)?;
    let v = Buf::new("v", v, len_k, e)?;
    let d_o = Buf::new("d_o", d_o, len_q, e)?;
    let o = Buf::new("o", o, len_q, e)?;
    let dq = Buf::new("dq", dq, len_q, e)?;
    let dk = Buf::new("dk", dk, len_k, e)?;
    let dv = Buf::new("dv", dv, len_k, e)?;
    let cu_q = Buf::new("cu_seqlens_q", cu_q, batch + 1, 4)?;
    let cu_k = Buf::new("cu_seqlens_k", cu_k, batch + 1, 4)?;
    let mask = buffers
        .mask
        .map(|m| Buf::new("mask", m, rows_k, 4))
        .transpose()?;
    // Element offsets, statistics and cube indices (`row * heads + h`) are 32-bit.
    check_u32(&[
        ("rows_q * heads * head_dim", len_q),
        ("rows_k * heads * head_dim", len_k),
        ("heads * rows_q", stats),
        (
            "rows * heads",
            extent("rows * heads", &[rows_q.max(rows_k), heads])?,
        ),
    ])?;
    let masked = mask.is_some();
    let lse = Buf::new("lse", &client.empty(stats.max(1) * 4), stats, 4)?;
    let delta = Buf::new("delta", &client.empty(stats.max(1) * 4), stats, 4)?;
    // Unmasked, a one-element stand-in the kernels never read.
    let mask = match mask {
        Some(m) => m.nonempty(),
        None => Buf::upload(client, &[1.0f32]),
    };
    let scale = 1.0 / (head_dim as f32).sqrt();
    if rows_q > 0 {
        let (count, dim) = row_grid(client, rows_q * heads)?;
        // SAFETY: every buffer holds the elements of its checked `Buf`; cubes past
        // `rows_q * heads` return; rows come from segment bounds clamped to
        // `rows_q`/`rows_k`, columns stay under `width`, the mask is read only when present
        // (`rows_k` values).
        unsafe {
            flash_bwd_stats_kernel::launch_unchecked::<F, R>(
                client,
                count.clone(),
                dim,
                q.arg(),
                k.arg(),
                v.arg(),
                d_o.arg(),
                mask.arg(),
                cu_q.arg(),
                cu_k.arg(),
                o.arg(),
                lse.arg(),
                delta.arg(),
                rows_q,
                rows_k,
                heads,
                head_dim,
                batch,
                scale,
                masked,
                causal,
            );
            flash_bwd_dq_kernel::launch_unchecked::<F, R>(
                client,
                count,
                dim,
                q.arg(),
                k.arg(),
                v.arg(),
                d_o.arg(),
                mask.arg(),
                cu_q.arg(),
                cu_k.arg(),
                lse.arg(),
                delta.arg(),
                dq.arg(),
                rows_q,
                rows_k,
                heads,
                head_dim,
                batch,
                scale,
                masked,
                causal,
            );
        }
    }
    if rows_k > 0 {
        let (count, dim) = row_grid(client, rows_k * heads)?;
        // SAFETY: as above, with query rows clamped to `rows_q` and the statistics holding
        // `heads * rows_q` values (written by the stats kernel when `rows_q > 0`; with no
        // query rows no statistic is read).
        unsafe {
            flash_bwd_dkv_kernel::launch_unchecked::<F, R>(
                client,
                count,
                dim,
                q.arg(),
                k.arg(),
                v.arg(),
                d_o.arg(),
                mask.arg(),
                cu_q.arg(),
                cu_k.arg(),
                lse.nonempty().arg(),
                delta.nonempty().arg(),
                dk.arg(),
                dv.arg(),
                rows_q,
                rows_k,
                heads,
                head_dim,
                batch,
                scale,
                masked,
                causal,
            );
        }
    }
    Ok(())
}

/// Every kernel of this file, in every specialisation the library launches, lowered to CUDA
/// C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{for_floats, Lowering as L, Rt};
    let c = l.client.clone();
    let a = L::array;
    let units = || L::settings(CubeDim::new_1d(REDUCE_UNITS));
    for_floats!(|F| {
        for masked in [false, true] {
            for causal in [false, true] {
                l.lower(flash_bwd_stats_kernel::FlashBwdStatsKernel::<F, Rt>::new(
                    units(),
                    c.clone(),
                    a(),
                    a(),
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
                    (),
                    (),
                    masked,
                    causal,
                ));
                l.lower(flash_bwd_dq_kernel::FlashBwdDqKernel::<F, Rt>::new(
                    units(),
                    c.clone(),
                    a(),
                    a(),
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
                    (),
                    (),
                    masked,
                    causal,
                ));
                l.lower(flash_bwd_dkv_kernel::FlashBwdDkvKernel::<F, Rt>::new(
                    units(),
                    c.clone(),
                    a(),
                    a(),
                    a(),
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
                    (),
                    (),
                    masked,
                    causal,
                ));
            }
        }
    });
}
