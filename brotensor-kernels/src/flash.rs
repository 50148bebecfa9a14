//! Kernels of the flash category: flash attention forward passes, decode and the KV cache.
//!
//! `flash_kernel`: `O[i, h] = sum_j softmax_j(s_ij) V[j, kvh]` with
//! `s_ij = (Q[i, h] . K[j, kvh]) / sqrt(hd)` (soft-capped when asked), over the keys kept by
//! the mask, causal and window rules, `kvh = h / (nq / nkv)`. One cube of [`UNITS`] units
//! (an `8 x 8` grid) takes `8 * rq` rows (query row, query head) of one KV head's group, so
//! the group's heads share every K/V tile it reads, and walks the keys `KEYS` (32) at a time, as
//! two register-blocked products:
//! - scores: each unit keeps an `rq x 4` block of the `rows x KEYS` scores in registers,
//!   summed over `DEPTH`-deep (16) slices of the (pre-scaled) queries and the keys staged
//!   transposed in shared memory, so every shared read serves `rq` or 4 products;
//! - one unit per row turns its scores into weights (online softmax: running maximum and
//!   sum), through a `rows x KEYS` tile in shared memory;
//! - values: each unit keeps an `rq x dpu` block of the rows' FP32 accumulators
//!   (dims `lane + 8 t`), adding weight times value over the values staged in shared memory.
//!
//! `(rq, dpu)` follow the head dim ([`blocking`]), so a unit never holds more than 64
//! accumulators. No score matrix beyond `rows x KEYS` exists. (Per shared read this does 2 to
//! 3 times the arithmetic of one-row-per-unit designs: software devices, which read shared
//! memory one lane at a time, run it that much faster.)
//!
//! Split-KV (decode: few queries over a long cache): the keys are cut into chunks along the
//! grid's z, each cube writes its unnormalised partial `(max, sum, acc)` in FP32, and
//! `flash_combine_kernel` merges the chunks. Varlen runs one sequence per z instead.
//! `kv_append_kernel` copies new rows into a cache.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, grid_1d, sum, Buf, LaunchError};

/// Units per attention cube, a `SIDE x SIDE` grid.
pub const UNITS: usize = 64;
const SIDE: usize = 8;
/// Keys per unit in a score block (`KEYS / SIDE`).
const KPU: usize = KEYS / SIDE;
/// Keys per step of a cube.
const KEYS: usize = 32;
/// Head dims per staged slice of the score product.
const DEPTH: usize = 16;
/// Floats of the shared staging buffer (a query and a key slice, or a run of value rows).
const STAGE: usize = 2048;
/// Where the key slice starts in the staging buffer (after the query slice, `DEPTH` rows of
/// up to 32 + 1 floats).
const KEY_SLICE: usize = DEPTH * ROW;
/// The row stride of the key slice and of the score tile: [`KEYS`] plus one, so that units
/// reading down a column hit different shared-memory banks.
const ROW: usize = KEYS + 1;
/// The most rows (slots) of a cube.
const MAX_ROWS: usize = 32;
/// The largest head dimension the kernel takes.
pub const MAX_HEAD_DIM: usize = 512;
/// A score that marks a dropped key (below any real score).
#[cube]
fn dropped() -> f32 {
    f32::new(-1.0e30f32)
}
/// Key steps one cube may take (lavapipe ends loops after 65535 iterations).
const MAX_STEPS: usize = 32_768;

/// The register blocking `(rq, dpu)` for head dim `hd`: rows per unit (the cube takes
/// `8 * rq` rows) and accumulator dims per unit (`8 * dpu >= hd`), with `rq * dpu <= 64`.
pub fn blocking(hd: usize) -> (usize, usize) {
    match hd {
        0..=64 => (4, 8),
        65..=128 => (4, 16),
        129..=256 => (2, 32),
        _ => (1, 64),
    }
}

/// Whether query row `i` (at position `i + q_offset`) keeps key `j`.
#[cube]
fn keeps(mask: &Array<f32>, i: usize, j: usize, pos0: usize, window: usize, flags: u32) -> bool {
    let mut keep = true;
    if flags & 1 != 0 {
        keep = mask[j] > 0.5;
    }
    if flags & 2 != 0 {
        let pos = i + pos0;
        keep = keep && j <= pos;
        if window > 0 {
            keep = keep && j + window > pos;
        }
    }
    keep
}

/// The index of the mask's last kept key plus one (0: none), found by the whole cube.
#[cube]
fn last_kept(mask: &Array<f32>, lk: usize, smem: &mut SharedMemory<u32>) -> usize {
    let u = UNIT_POS as usize;
    let mut best = u32::new(0);
    let mut j = u;
    loop {
        if j >= lk {
            break;
        }
        if mask[j] > 0.5 {
            best = j as u32 + 1;
        }
        j += UNITS;
    }
    smem[u] = best;
    sync_cube();
    let mut found = u32::new(0);
    for t in 0..UNITS {
        if smem[t] > found {
            found = smem[t];
        }
    }
    sync_cube();
    found as usize
}

/// See the module docs. Grid: x = blocks of `8 * rq` (query row, group head) slots, y = KV
/// heads, z = the sequence (varlen) or the key chunk (split). `o` is written when not
/// `split`; `part_ml` (`(row, head, chunk)` pairs of max and sum) and `part_acc`
/// (`(row, head, chunk, hd)`) when `split`. `hd <= 8 * dpu`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn flash_kernel<F: Float>(
    q: &Array<F>,
    k: &Array<F>,
    v: &Array<F>,
    mask: &Array<f32>,
    cu_q: &Array<i32>,
    cu_k: &Array<i32>,
    o: &mut Array<F>,
    part_ml: &mut Array<f32>,
    part_acc: &mut Array<f32>,
    lq: usize,
    lk: usize,
    nq: usize,
    nkv: usize,
    hd: usize,
    q_offset: usize,
    window: usize,
    chunk: usize,
    chunks: usize,
    scale: f32,
    softcap: f32,
    flags: u32,
    #[comptime] rq: usize,
    #[comptime] dpu: usize,
    #[comptime] split: bool,
) {
    let bq = comptime!(8 * rq);
    // Value rows per staged run.
    let vk = comptime!(if STAGE / (8 * dpu) < KEYS {
        STAGE / (8 * dpu)
    } else {
        KEYS
    });
    let none = dropped();
    let tid = UNIT_POS as usize;
    // This unit's rows are `ry + 8 i` (i < rq); its keys `lane + 8 jj` (jj < 4) in the
    // score block and its dims `lane + 8 t` (t < dpu) in the accumulators.
    let ry = tid / SIDE;
    let lane = tid % SIDE;
    // Rows of the cube are slots `(query row, query head of this KV head's group)`, slot
    // `i * group + hh`: the group's heads share each K/V tile.
    let kvh = CUBE_POS_Y as usize;
    let z = CUBE_POS_Z as usize;
    let group = nq / nkv;
    let (dq, dkv) = (nq * hd, nkv * hd);
    let mut stage = SharedMemory::<f32>::new(STAGE);
    let mut ss = SharedMemory::<f32>::new(MAX_ROWS * ROW);
    let mut row_m = SharedMemory::<f32>::new(MAX_ROWS);
    let mut row_l = SharedMemory::<f32>::new(MAX_ROWS);
    let mut row_a = SharedMemory::<f32>::new(MAX_ROWS);
    let mut found = SharedMemory::<u32>::new(UNITS);

    // This cube's sequence: its query rows and its keys.
    let mut q_start = usize::new(0);
    let mut q_len = lq;
    let mut k_start = usize::new(0);
    let mut k_len = lk;
    if flags & 4 != 0 {
        // Clamped so a bad prefix sum cannot reach past the buffers (checked on the host).
        q_start = lq.min(cu_q[z] as usize);
        q_len = lq.min(cu_q[z + 1] as usize).max(q_start) - q_start;
        k_start = lk.min(cu_k[z] as usize);
        k_len = lk.min(cu_k[z + 1] as usize).max(k_start) - k_start;
    }
    let mut pos0 = q_offset;
    if flags & 8 != 0 {
        let last = last_kept(mask, lk, &mut found);
        pos0 = last.max(1) - 1;
    }
    // The keys of this cube: the chunk (split), narrowed to what its rows can see.
    let mut lo = usize::new(0);
    let mut hi = k_len;
    if comptime!(split) {
        lo = z * chunk;
        hi = k_len.min(lo + chunk);
    }
    let row0 = CUBE_POS_X as usize * bq;
    let slots = q_len * group;
    let rows = slots.min(row0 + bq).max(row0) - row0;
    if rows == 0 {
        hi = lo;
    }
    if flags & 2 != 0 && rows > 0 {
        // The first and last query rows of the cube's slots bound the keys.
        hi = hi.min((row0 + rows - 1) / group + 1 + pos0);
        if window > 0 {
            let first = row0 / group + pos0 + 1;
            if first > window {
                lo = lo.max(first - window);
            }
        }
    }

    if tid < bq {
        row_m[tid] = none;
        row_l[tid] = 0.0;
    }
    let mut acc = Array::<f32>::new(rq * dpu);
    #[unroll]
    for t in 0..rq * dpu {
        acc[t] = 0.0;
    }

    let mut j0 = lo;
    loop {
        if j0 >= hi {
            break;
        }
        // Scores: `sc[i * KPU + jj]` of row `ry + 8 i`, key `j0 + lane + 8 jj`.
        let mut sc = Array::<f32>::new(rq * KPU);
        #[unroll]
        for t in 0..rq * KPU {
            sc[t] = 0.0;
        }
        let mut d0 = usize::new(0);
        loop {
            if d0 >= hd {
                break;
            }
            // The slices, transposed (`[dim][row]`, `[dim][key]`, rows padded by one against
            // bank conflicts), consecutive units along the stored rows so global reads
            // coalesce.
            #[unroll]
            for rr in 0..comptime!(DEPTH * 8 * rq / UNITS) {
                let e = tid + rr * UNITS;
                let r = e / DEPTH;
                let dd = e % DEPTH;
                let mut x = f32::new(0.0f32);
                if r < rows && d0 + dd < hd {
                    let slot = row0 + r;
                    let h = kvh * group + slot % group;
                    x = f32::cast_from(q[(q_start + slot / group) * dq + h * hd + d0 + dd]) * scale;
                }
                stage[dd * (bq + 1) + r] = x;
            }
            #[unroll]
            for rr in 0..comptime!(DEPTH * KEYS / UNITS) {
                let e = tid + rr * UNITS;
                let c = e / DEPTH;
                let dd = e % DEPTH;
                let j = j0 + c;
                let mut x = f32::new(0.0f32);
                if j < hi && d0 + dd < hd {
                    x = f32::cast_from(k[(k_start + j) * dkv + kvh * hd + d0 + dd]);
                }
                stage[KEY_SLICE + dd * ROW + c] = x;
            }
            sync_cube();
            let mut qa = Array::<f32>::new(rq);
            let mut kb = Array::<f32>::new(KPU);
            #[unroll]
            for dd in 0..DEPTH {
                #[unroll]
                for i in 0..rq {
                    qa[i] = stage[dd * (bq + 1) + ry + SIDE * i];
                }
                #[unroll]
                for jj in 0..KPU {
                    kb[jj] = stage[KEY_SLICE + dd * ROW + lane + SIDE * jj];
                }
                #[unroll]
                for i in 0..rq {
                    #[unroll]
                    for jj in 0..KPU {
                        sc[i * KPU + jj] += qa[i] * kb[jj];
                    }
                }
            }
            sync_cube();
            d0 += DEPTH;
        }
        // The kept scores (soft-capped) into the shared tile; the rest dropped.
        #[unroll]
        for i in 0..rq {
            #[unroll]
            for jj in 0..KPU {
                let r = ry + SIDE * i;
                let c = lane + SIDE * jj;
                let j = j0 + c;
                let mut s = none;
                if r < rows && j < hi && keeps(mask, (row0 + r) / group, j, pos0, window, flags) {
                    let mut dot = sc[i * KPU + jj];
                    if softcap > 0.0 {
                        dot = softcap * (dot / softcap).tanh();
                    }
                    s = dot;
                }
                ss[r * ROW + c] = s;
            }
        }
        sync_cube();
        // Online softmax, one unit per row: scores become weights.
        if tid < bq {
            let mut tmax = none;
            for c in 0..KEYS {
                tmax = f32::max(tmax, ss[tid * ROW + c]);
            }
            let m_old = row_m[tid];
            let mut alpha = f32::new(1.0f32);
            if tmax > none {
                let m_new = f32::max(m_old, tmax);
                alpha = (m_old - m_new).exp();
                let mut sum = f32::new(0.0f32);
                for c in 0..KEYS {
                    let s = ss[tid * ROW + c];
                    let mut p = f32::new(0.0f32);
                    if s > none {
                        p = (s - m_new).exp();
                    }
                    ss[tid * ROW + c] = p;
                    sum += p;
                }
                row_l[tid] = row_l[tid] * alpha + sum;
                row_m[tid] = m_new;
            } else {
                for c in 0..KEYS {
                    ss[tid * ROW + c] = 0.0;
                }
            }
            row_a[tid] = alpha;
        }
        sync_cube();
        // The accumulators: rescaled, then weight times value over runs of `vk` value rows.
        #[unroll]
        for i in 0..rq {
            let alpha = row_a[ry + SIDE * i];
            #[unroll]
            for t in 0..dpu {
                acc[i * dpu + t] *= alpha;
            }
        }
        let mut c0 = usize::new(0);
        loop {
            if c0 >= KEYS {
                break;
            }
            let mut idx = tid;
            loop {
                if idx >= vk * hd {
                    break;
                }
                let j = j0 + c0 + idx / hd;
                let mut x = f32::new(0.0f32);
                if j < hi {
                    x = f32::cast_from(v[(k_start + j) * dkv + kvh * hd + idx % hd]);
                }
                stage[idx] = x;
                idx += UNITS;
            }
            sync_cube();
            let mut p = Array::<f32>::new(rq);
            for c in 0..vk {
                #[unroll]
                for i in 0..rq {
                    p[i] = ss[(ry + SIDE * i) * ROW + c0 + c];
                }
                #[unroll]
                for t in 0..dpu {
                    let d = lane + SIDE * t;
                    if d < hd {
                        let x = stage[c * hd + d];
                        #[unroll]
                        for i in 0..rq {
                            acc[i * dpu + t] += p[i] * x;
                        }
                    }
                }
            }
            sync_cube();
            c0 += vk;
        }
        j0 += KEYS;
    }

    // A cube with no key step wrote its row statistics without a barrier since.
    sync_cube();
    #[unroll]
    for i in 0..rq {
        let r = ry + SIDE * i;
        if r < rows {
            let slot = row0 + r;
            let row = q_start + slot / group;
            let h = kvh * group + slot % group;
            if comptime!(split) {
                let part = (row * nq + h) * chunks + z;
                if lane == 0 {
                    part_ml[part * 2] = row_m[r];
                    part_ml[part * 2 + 1] = row_l[r];
                }
                #[unroll]
                for t in 0..dpu {
                    let d = lane + SIDE * t;
                    if d < hd {
                        part_acc[part * hd + d] = acc[i * dpu + t];
                    }
                }
            } else {
                let l = row_l[r];
                let mut inv = f32::new(0.0f32);
                if l > 0.0 {
                    inv = 1.0 / l;
                }
                #[unroll]
                for t in 0..dpu {
                    let d = lane + SIDE * t;
                    if d < hd {
                        o[row * dq + h * hd + d] = F::cast_from(acc[i * dpu + t] * inv);
                    }
                }
            }
        }
    }
}

/// Merges split-KV partials: `o[row, h, d] = sum_c acc_c e^(m_c - M) / sum_c l_c e^(m_c - M)`
/// over the chunks with a kept key (`M` their largest max); zero when there is none.
#[cube(launch_unchecked)]
fn flash_combine_kernel<F: Float>(
    part_ml: &Array<f32>,
    part_acc: &Array<f32>,
    o: &mut Array<F>,
    rows_heads: usize,
    hd: usize,
    chunks: usize,
) {
    let i = ABSOLUTE_POS;
    if i < rows_heads * hd {
        let none = dropped();
        let rh = i / hd;
        let d = i % hd;
        let mut m = none;
        for c in 0..chunks {
            let slot = rh * chunks + c;
            if part_ml[slot * 2 + 1] > 0.0 {
                m = f32::max(m, part_ml[slot * 2]);
            }
        }
        let mut l = f32::new(0.0f32);
        let mut x = f32::new(0.0f32);
        for c in 0..chunks {
            let slot = rh * chunks + c;
            let lc = part_ml[slot * 2 + 1];
            if lc > 0.0 {
                let w = (part_ml[slot * 2] - m).exp();
                l += lc * w;
                x += part_acc[slot * hd + d] * w;
            }
        }
        let mut out = f32::new(0.0f32);
        if l > 0.0 {
            out = x / l;
        }
        o[i] = F::cast_from(out);
    }
}

/// `cache[at + i] = src[i]` for `i < len`.
#[cube(launch_unchecked)]
fn kv_append_kernel<F: Float>(src: &Array<F>, cache: &mut Array<F>, at: usize, len: usize) {
    let i = ABSOLUTE_POS;
    if i < len {
        cache[at + i] = src[i];
    }
}

/// Geometry of one attention launch over `q (q_rows, nq*hd)` and `k, v (>= k_rows, nkv*hd)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Flash {
    /// Query rows (the packed total when varlen).
    pub q_rows: usize,
    /// Keys read: rows `[0, k_rows)` (the packed total when varlen).
    pub k_rows: usize,
    /// Query heads.
    pub nq: usize,
    /// KV heads (divides `nq`).
    pub nkv: usize,
    /// Head dimension (at most [`MAX_HEAD_DIM`]).
    pub hd: usize,
    /// Causal masking aligned by `q_offset`.
    pub causal: bool,
    /// Position of query row 0.
    pub q_offset: usize,
    /// Sliding window (0: unbounded; one past every query position is unbounded too).
    pub window: usize,
    /// Soft-cap (0: none).
    pub softcap: f32,
    /// `q_offset` is the mask's last kept key.
    pub offset_from_mask: bool,
}

impl Flash {
    /// The window the kernel applies: 0 (unbounded) when `window` reaches past every query
    /// position. A query sits at most at `q_offset + q_rows - 1`, or `k_rows - 1 + q_rows - 1`
    /// when its offset is the mask's last kept key, so a window of at least
    /// `q_offset + k_rows + q_rows` keeps every key the causal rule keeps, as the CPU's
    /// `max(0, pos + 1 - window)` does; the kernel's `j + window` then stays in 32 bits.
    pub fn effective_window(&self) -> usize {
        let beyond = self
            .q_offset
            .saturating_add(self.k_rows)
            .saturating_add(self.q_rows);
        if self.window >= beyond {
            0
        } else {
            self.window
        }
    }
}

/// The packed sequences of a varlen launch: the I32 prefix sums (`batch + 1` values each)
/// and the longest query sequence.
pub struct Varlen<'a> {
    /// Query prefix sums.
    pub cu_q: &'a Handle,
    /// Key prefix sums.
    pub cu_k: &'a Handle,
    /// Sequences.
    pub batch: usize,
    /// The longest query sequence.
    pub max_q: usize,
}

/// How many key chunks a launch of `cubes` cubes over `keys` keys splits into, and the keys
/// per chunk (a multiple of the step, [`KEYS`]): enough chunks to give a GPU ~256 cubes
/// when there are few, and always few enough key steps per cube for lavapipe's loop limit.
fn split_plan(cubes: usize, keys: usize) -> (usize, usize) {
    let tile = KEYS;
    let for_fill = if cubes < 64 && keys >= 512 {
        (256 / cubes.max(1)).min(keys / 256).max(1)
    } else {
        1
    };
    let for_loops = keys.div_ceil(MAX_STEPS * tile);
    let chunks = for_fill.max(for_loops).max(1);
    let chunk = keys.div_ceil(chunks).div_ceil(tile) * tile;
    (keys.div_ceil(chunk.max(1)).max(1), chunk.max(tile))
}

/// Attention as `flash_kernel` describes, written to `o (q_rows, nq*hd)`; `mask` holds
/// `k_rows` F32 values. With `varlen`, one sequence per z (no split); otherwise long key
/// ranges over few cubes take the split-KV path.
pub fn launch_flash_attention<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (q, k, v): (&Handle, &Handle, &Handle),
    mask: Option<&Handle>,
    varlen: Option<Varlen<'_>>,
    o: &Handle,
    g: &Flash,
) -> Result<(), LaunchError> {
    if g.q_rows == 0 || g.hd == 0 || g.nq == 0 {
        return Ok(());
    }
    if g.hd > MAX_HEAD_DIM {
        return Err(LaunchError::TooLarge { vectors: g.hd });
    }
    if g.nkv == 0 || !g.nq.is_multiple_of(g.nkv) {
        return Err(LaunchError::Invalid {
            what: "nkv must be nonzero and divide nq",
        });
    }
    let e = core::mem::size_of::<F>();
    let q_len = extent("q_rows * nq * hd", &[g.q_rows, g.nq, g.hd])?;
    let k_len = extent("k_rows * nkv * hd", &[g.k_rows, g.nkv, g.hd])?;
    let window = g.effective_window();
    // Every index the kernel forms: element offsets, query positions `i + q_offset` (causal)
    // and `j + window`.
    check_u32(&[("q_rows * nq * hd", q_len), ("k_rows * nkv * hd", k_len)])?;
    if g.causal {
        check_u32(&[
            (
                "q_offset + q_rows + k_rows",
                sum("q_offset + q_rows", g.q_offset, g.q_rows)
                    .and_then(|p| sum("q_offset + q_rows + k_rows", p, g.k_rows))?,
            ),
            ("k_rows + window", g.k_rows.saturating_add(window)),
        ])?;
    }
    let q = Buf::new("q", q, q_len, e)?;
    let k = Buf::new("k", k, k_len, e)?;
    let v = Buf::new("v", v, k_len, e)?;
    let o = Buf::new("o", o, q_len, e)?;
    let mask = mask.map(|m| Buf::new("mask", m, g.k_rows, 4)).transpose()?;
    let (rq, dpu) = blocking(g.hd);
    let (max_x, _, max_z) = client.properties().hardware.max_cube_count;
    let (q_span, layers, cu) = match &varlen {
        Some(s) => {
            let cu_q = Buf::new("cu_seqlens_q", s.cu_q, s.batch + 1, 4)?;
            let cu_k = Buf::new("cu_seqlens_k", s.cu_k, s.batch + 1, 4)?;
            (s.max_q, s.batch, Some((cu_q, cu_k)))
        }
        None => (g.q_rows, 1, None),
    };
    // One cube per `8 * rq` slots (query row, query head of a KV head's group), per KV head.
    let group = g.nq / g.nkv;
    let blocks = extent("rows * group", &[q_span, group])?.div_ceil(8 * rq);
    let cubes = extent("blocks * nkv", &[blocks, g.nkv])?;
    let (chunks, chunk) = match varlen {
        // A varlen sequence's keys must fit one cube's loop.
        Some(_) => (1, g.k_rows.max(1)),
        None => split_plan(cubes, g.k_rows),
    };
    let layers = layers.max(chunks);
    if blocks == 0 || layers == 0 {
        return Ok(());
    }
    if blocks > (max_x as usize).min(65_535) || g.nkv > 65_535 || layers > max_z as usize {
        return Err(LaunchError::TooLarge { vectors: cubes });
    }
    if varlen.is_some() && g.k_rows.div_ceil(KEYS) > 65_535 {
        return Err(LaunchError::TooLarge { vectors: g.k_rows });
    }
    let split = chunks > 1;
    let flags = u32::from(mask.is_some())
        | (u32::from(g.causal) << 1)
        | (u32::from(varlen.is_some()) << 2)
        | (u32::from(g.offset_from_mask) << 3);
    let slots = if split {
        extent("q_rows * nq * chunks", &[g.q_rows, g.nq, chunks])?
    } else {
        0
    };
    let ml_len = extent("slots * 2", &[slots, 2])?.max(1);
    let acc_len = extent("slots * hd", &[slots, g.hd])?.max(1);
    check_u32(&[
        ("partial slots * hd", acc_len),
        (
            "chunks * chunk",
            extent("chunks * chunk", &[chunks, chunk])?,
        ),
    ])?;
    let part_ml = client.empty(extent("partial bytes", &[ml_len, 4])?);
    let part_ml = Buf::new("part_ml", &part_ml, ml_len, 4)?;
    let part_acc = client.empty(extent("partial bytes", &[acc_len, 4])?);
    let part_acc = Buf::new("part_acc", &part_acc, acc_len, 4)?;
    let (cu_q, cu_k) = cu.unzip();
    // SAFETY: every buffer holds what the launch reads (checked `Buf`s; the mask and the
    // prefix sums stand in with a length of one when absent and are then never read, as
    // the flags say). A cube reads query rows `< q_rows` (varlen: clamped into them), keys
    // `< k_rows`, and writes `o` rows `< q_rows`, or partial slots `< q_rows * nq * chunks`.
    unsafe {
        flash_kernel::launch_unchecked::<F, R>(
            client,
            CubeCount::Static(blocks as u32, g.nkv as u32, layers as u32),
            CubeDim::new_1d(UNITS as u32),
            q.arg(),
            k.arg(),
            v.arg(),
            q.stand_in_for(mask.as_ref()).arg(),
            q.stand_in_for(cu_q.as_ref()).arg(),
            q.stand_in_for(cu_k.as_ref()).arg(),
            o.arg(),
            part_ml.arg(),
            part_acc.arg(),
            g.q_rows,
            g.k_rows,
            g.nq,
            g.nkv,
            g.hd,
            g.q_offset,
            window,
            chunk,
            chunks,
            1.0 / (g.hd as f32).sqrt(),
            g.softcap,
            flags,
            rq,
            dpu,
            split,
        );
    }
    if split {
        let rows_heads = extent("q_rows * nq", &[g.q_rows, g.nq])?;
        let (count, dim) = grid_1d(client, q_len)?;
        // SAFETY: units past `q_len` return; the others read slots `< rows_heads * chunks`
        // (written by the launch above) and write `o[i]`, `i < q_len` (checked `Buf`s).
        unsafe {
            flash_combine_kernel::launch_unchecked::<F, R>(
                client,
                count,
                dim,
                part_ml.arg(),
                part_acc.arg(),
                o.arg(),
                rows_heads,
                g.hd,
                chunks,
            );
        }
    }
    Ok(())
}

/// Copies `src` (`rows * cols` elements) into `cache` from row `at` on; the cache holds
/// `cache_rows * cols`.
pub fn launch_kv_append<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    src: &Handle,
    cache: &Handle,
    (rows, cols, at, cache_rows): (usize, usize, usize, usize),
) -> Result<(), LaunchError> {
    let len = extent("rows * cols", &[rows, cols])?;
    if len == 0 {
        return Ok(());
    }
    let total = extent("cache_rows * cols", &[cache_rows, cols])?;
    let start = extent("at * cols", &[at, cols])?;
    if start.checked_add(len).is_none_or(|end| end > total) {
        return Err(LaunchError::Overflow { what: "at + rows" });
    }
    let e = core::mem::size_of::<F>();
    let src = Buf::new("src", src, len, e)?;
    let cache = Buf::new("cache", cache, total, e)?;
    check_u32(&[("cache_rows * cols", total)])?;
    let (count, dim) = grid_1d(client, len)?;
    // SAFETY: units past `len` return; the others read `src[i]`, `i < len`, and write
    // `cache[start + i] < total` (both checked `Buf`s).
    unsafe {
        kv_append_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            src.arg(),
            cache.arg(),
            start,
            len,
        );
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
    for_floats!(|F| {
        for (rq, dpu) in [64usize, 128, 256, 512].map(blocking) {
            for split in [false, true] {
                l.lower(flash_kernel::FlashKernel::<F, Rt>::new(
                    L::settings(CubeDim::new_1d(UNITS as u32)),
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
                    rq,
                    dpu,
                    split,
                ));
            }
        }
        l.lower(flash_combine_kernel::FlashCombineKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            a(),
            (),
            (),
            (),
        ));
        l.lower(kv_append_kernel::KvAppendKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            (),
            (),
        ));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_plan_covers_the_keys() {
        for keys in [1usize, 100, 511, 512, 2048, 16_384, 1 << 20, 1 << 24] {
            for cubes in [1usize, 8, 63, 64, 1000] {
                let (chunks, chunk) = split_plan(cubes, keys);
                assert!(
                    chunk % KEYS == 0 && chunks * chunk >= keys,
                    "{keys} {cubes}"
                );
                assert!(
                    (chunks - 1) * chunk < keys.max(1),
                    "{keys} {cubes}: empty chunk"
                );
                assert!(chunk / KEYS <= MAX_STEPS, "{keys} {cubes}: long loop");
            }
        }
    }
}
