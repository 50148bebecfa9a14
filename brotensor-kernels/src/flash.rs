//! Kernels of the flash category: flash attention forward passes, decode and the KV cache.
//!
//! `flash_kernel`: `O[i, h] = sum_j softmax_j(s_ij) V[j, kvh]` with
//! `s_ij = (Q[i, h] . K[j, kvh]) / sqrt(hd)` (soft-capped when asked), over the keys kept by
//! the mask, causal and window rules, `kvh = h / (nq / nkv)`. One cube of [`UNITS`] units
//! takes `tile` rows (query row, query head) of one KV head's group, so the group's heads
//! share every K/V tile it reads, and walks the keys `tile` at a time: the query, key
//! and value tiles sit in shared memory, each unit scores one key against up to four query
//! rows, one unit per row keeps the running maximum and sum (online softmax), and each unit
//! keeps its share of the rows' FP32 accumulators in registers, adding each weight times its
//! value row. No score matrix beyond `tile x tile` exists.
//!
//! Split-KV (decode: few queries over a long cache): the keys are cut into chunks along the
//! grid's z, each cube writes its unnormalised partial `(max, sum, acc)` in FP32, and
//! `flash_combine_kernel` merges the chunks. Varlen runs one sequence per z instead.
//! `kv_append_kernel` copies new rows into a cache.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, grid_1d, sum, Buf, LaunchError};

/// Units per attention cube.
pub const UNITS: usize = 64;
/// Floats of each shared query, key and value tile: `tile * hd` never exceeds it.
const TILE_FLOATS: usize = 1024;
/// The largest `tile` (queries per cube, keys per step).
const MAX_TILE: usize = 16;
/// Accumulator slots per unit: `tile * hd / UNITS <= TILE_FLOATS / UNITS`.
const ACC: usize = TILE_FLOATS / UNITS;
/// The largest head dimension the kernel takes (`tile = 2`).
pub const MAX_HEAD_DIM: usize = TILE_FLOATS / 2;
/// A score that marks a dropped key (below any real score).
#[cube]
fn dropped() -> f32 {
    f32::new(-1.0e30f32)
}
/// Key steps one cube may take (lavapipe ends loops after 65535 iterations).
const MAX_STEPS: usize = 32_768;

/// The tile (queries per cube) for head dim `hd`: the largest of 16, 8, 4, 2 with
/// `tile * hd <= 1024`.
pub fn tile_for(hd: usize) -> usize {
    [16usize, 8, 4, 2]
        .into_iter()
        .find(|t| t * hd <= TILE_FLOATS)
        .unwrap_or(2)
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

/// See the module docs. Grid: x = blocks of `tile` (query row, group head) slots, y = KV
/// heads, z = the sequence (varlen) or the key chunk (split). `o` is written when not
/// `split`; `part_ml` (`(row, head, chunk)` pairs of max and sum) and `part_acc`
/// (`(row, head, chunk, hd)`) when `split`.
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
    #[comptime] tile: usize,
    #[comptime] split: bool,
) {
    let lanes = comptime!(UNITS / tile);
    let none = dropped();
    let tid = UNIT_POS as usize;
    let qi = tid / lanes;
    let lane = tid % lanes;
    // Rows of the cube are slots `(query row, query head of this KV head's group)`, slot
    // `i * group + hh`: the group's heads share each K/V tile.
    let kvh = CUBE_POS_Y as usize;
    let z = CUBE_POS_Z as usize;
    let group = nq / nkv;
    let (dq, dkv) = (nq * hd, nkv * hd);
    let mut qs = SharedMemory::<f32>::new(TILE_FLOATS);
    let mut ks = SharedMemory::<f32>::new(TILE_FLOATS);
    let mut vs = SharedMemory::<f32>::new(TILE_FLOATS);
    let mut ss = SharedMemory::<f32>::new(MAX_TILE * MAX_TILE);
    let mut row_m = SharedMemory::<f32>::new(MAX_TILE);
    let mut row_l = SharedMemory::<f32>::new(MAX_TILE);
    let mut row_a = SharedMemory::<f32>::new(MAX_TILE);
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
    let row0 = CUBE_POS_X as usize * tile;
    let slots = q_len * group;
    let rows = slots.min(row0 + tile).max(row0) - row0;
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

    // The query tile, pre-scaled; the row statistics.
    let mut idx = tid;
    loop {
        if idx >= tile * hd {
            break;
        }
        let r = idx / hd;
        let d = idx % hd;
        let mut x = f32::new(0.0f32);
        if r < rows {
            let slot = row0 + r;
            let h = kvh * group + slot % group;
            x = f32::cast_from(q[(q_start + slot / group) * dq + h * hd + d]) * scale;
        }
        qs[idx] = x;
        idx += UNITS;
    }
    if tid < tile {
        row_m[tid] = none;
        row_l[tid] = 0.0;
    }
    let mut acc = Array::<f32>::new(ACC);
    #[unroll]
    for t in 0..ACC {
        acc[t] = 0.0;
    }
    sync_cube();

    let mut j0 = lo;
    loop {
        if j0 >= hi {
            break;
        }
        // The key and value tiles.
        let mut idx = tid;
        loop {
            if idx >= tile * hd {
                break;
            }
            let c = idx / hd;
            let d = idx % hd;
            let j = j0 + c;
            let mut kx = f32::new(0.0f32);
            let mut vx = f32::new(0.0f32);
            if j < hi {
                let at = (k_start + j) * dkv + kvh * hd + d;
                kx = f32::cast_from(k[at]);
                vx = f32::cast_from(v[at]);
            }
            ks[idx] = kx;
            vs[idx] = vx;
            idx += UNITS;
        }
        sync_cube();
        // Scores of the tile x tile pairs: each unit takes key `c` against `per_unit` query
        // rows `step` apart (`tile` divides `UNITS`), so one key read serves them all.
        let step = comptime!(UNITS / tile);
        let per_unit = comptime!(if tile * tile > UNITS {
            tile * tile / UNITS
        } else {
            1
        });
        let c = tid % tile;
        let r0 = tid / tile;
        let j = j0 + c;
        let mut dots = Array::<f32>::new(per_unit);
        #[unroll]
        for g in 0..per_unit {
            dots[g] = 0.0;
        }
        if r0 < tile && j < hi {
            for d in 0..hd {
                let kx = ks[c * hd + d];
                #[unroll]
                for g in 0..per_unit {
                    dots[g] += qs[(r0 + g * step) * hd + d] * kx;
                }
            }
        }
        #[unroll]
        for g in 0..per_unit {
            let r = r0 + g * step;
            if r < tile {
                let mut s = none;
                if r < rows && j < hi && keeps(mask, (row0 + r) / group, j, pos0, window, flags) {
                    let mut dot = dots[g];
                    if softcap > 0.0 {
                        dot = softcap * (dot / softcap).tanh();
                    }
                    s = dot;
                }
                ss[r * tile + c] = s;
            }
        }
        sync_cube();
        // Online softmax, one unit per row: scores become weights.
        if tid < tile {
            let mut tmax = none;
            for c in 0..tile {
                tmax = f32::max(tmax, ss[tid * tile + c]);
            }
            let m_old = row_m[tid];
            let mut alpha = f32::new(1.0f32);
            if tmax > none {
                let m_new = f32::max(m_old, tmax);
                alpha = (m_old - m_new).exp();
                let mut sum = f32::new(0.0f32);
                for c in 0..tile {
                    let s = ss[tid * tile + c];
                    let mut p = f32::new(0.0f32);
                    if s > none {
                        p = (s - m_new).exp();
                    }
                    ss[tid * tile + c] = p;
                    sum += p;
                }
                row_l[tid] = row_l[tid] * alpha + sum;
                row_m[tid] = m_new;
            } else {
                for c in 0..tile {
                    ss[tid * tile + c] = 0.0;
                }
            }
            row_a[tid] = alpha;
        }
        sync_cube();
        // The accumulators: this unit's dims of its row.
        let alpha = row_a[qi];
        #[unroll]
        for t in 0..ACC {
            acc[t] *= alpha;
        }
        #[unroll]
        for c in 0..tile {
            let p = ss[qi * tile + c];
            #[unroll]
            for t in 0..ACC {
                let d = lane + t * lanes;
                if d < hd {
                    acc[t] += p * vs[c * hd + d];
                }
            }
        }
        sync_cube();
        j0 += tile;
    }

    if qi < rows {
        let slot = row0 + qi;
        let row = q_start + slot / group;
        let h = kvh * group + slot % group;
        if comptime!(split) {
            let part = (row * nq + h) * chunks + z;
            if lane == 0 {
                part_ml[part * 2] = row_m[qi];
                part_ml[part * 2 + 1] = row_l[qi];
            }
            #[unroll]
            for t in 0..ACC {
                let d = lane + t * lanes;
                if d < hd {
                    part_acc[part * hd + d] = acc[t];
                }
            }
        } else {
            let l = row_l[qi];
            let mut inv = f32::new(0.0f32);
            if l > 0.0 {
                inv = 1.0 / l;
            }
            #[unroll]
            for t in 0..ACC {
                let d = lane + t * lanes;
                if d < hd {
                    o[row * dq + h * hd + d] = F::cast_from(acc[t] * inv);
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
/// per chunk (a multiple of `tile`): enough chunks to give a GPU ~256 cubes when there are
/// few, and always few enough key steps per cube for lavapipe's loop limit.
fn split_plan(cubes: usize, keys: usize, tile: usize) -> (usize, usize) {
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
    let tile = tile_for(g.hd);
    let (max_x, _, max_z) = client.properties().hardware.max_cube_count;
    let (q_span, layers, cu) = match &varlen {
        Some(s) => {
            let cu_q = Buf::new("cu_seqlens_q", s.cu_q, s.batch + 1, 4)?;
            let cu_k = Buf::new("cu_seqlens_k", s.cu_k, s.batch + 1, 4)?;
            (s.max_q, s.batch, Some((cu_q, cu_k)))
        }
        None => (g.q_rows, 1, None),
    };
    // One cube per `tile` slots (query row, query head of a KV head's group), per KV head.
    let group = g.nq / g.nkv;
    let blocks = extent("rows * group", &[q_span, group])?.div_ceil(tile);
    let cubes = extent("blocks * nkv", &[blocks, g.nkv])?;
    let (chunks, chunk) = match varlen {
        // A varlen sequence's keys must fit one cube's loop.
        Some(_) => (1, g.k_rows.max(1)),
        None => split_plan(cubes, g.k_rows, tile),
    };
    let layers = layers.max(chunks);
    if blocks == 0 || layers == 0 {
        return Ok(());
    }
    if blocks > (max_x as usize).min(65_535) || g.nkv > 65_535 || layers > max_z as usize {
        return Err(LaunchError::TooLarge { vectors: cubes });
    }
    if varlen.is_some() && g.k_rows.div_ceil(tile) > 65_535 {
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
            tile,
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
        for tile in [16usize, 8, 4, 2] {
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
                    tile,
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
                for tile in [2usize, 4, 8, 16] {
                    let (chunks, chunk) = split_plan(cubes, keys, tile);
                    assert!(
                        chunk % tile == 0 && chunks * chunk >= keys,
                        "{keys} {cubes}"
                    );
                    assert!(
                        (chunks - 1) * chunk < keys.max(1),
                        "{keys} {cubes}: empty chunk"
                    );
                    assert!(chunk / tile <= MAX_STEPS, "{keys} {cubes}: long loop");
                }
            }
        }
    }
}
