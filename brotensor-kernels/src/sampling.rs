//! Kernels of the sampling category: token sampling and the Philox random-number ops.
//!
//! Element `i` of a random fill (row `n` of a sampled batch) draws from the Philox substream
//! `counter + i` (`counter + n`): the bits depend on the key and the counter only, never on
//! the launch geometry, and equal the CPU reference's (`brotensor_cpu::sampling`), whose
//! arithmetic [`philox`] repeats in integers.

pub mod philox;
mod rank;

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, grid_1d, Buf, LaunchError};
use crate::primitives::{row_grid, REDUCE_UNITS};
use philox::{add_u64, exp_neg, normal, philox4x32_10, uniform24};
use rank::{barrier, first_reaching, order_pair, partial_sum};

/// Attempts of a truncated normal before it clamps its last draw.
pub const TRUNCATED_TRIES: u32 = 64;

/// The largest vocabulary [`launch_sample_logits`] takes (token ids travel as f32 in the
/// scratch buffer).
pub const MAX_VOCAB: usize = 1 << 24;

/// `out[4 b ..]` = the Philox block of counter `ctr_key[6 b .. 6 b + 4]` under key
/// `ctr_key[6 b + 4 ..]` (for checks against published vectors).
#[cube(launch_unchecked)]
fn philox_blocks_kernel(ctr_key: &Array<u32>, out: &mut Array<u32>, blocks: usize) {
    let b = ABSOLUTE_POS;
    if b < blocks {
        let i = b * 6;
        let (w0, w1, w2, w3) = philox4x32_10(
            ctr_key[i],
            ctr_key[i + 1],
            ctr_key[i + 2],
            ctr_key[i + 3],
            ctr_key[i + 4],
            ctr_key[i + 5],
        );
        out[b * 4] = w0;
        out[b * 4 + 1] = w1;
        out[b * 4 + 2] = w2;
        out[b * 4 + 3] = w3;
    }
}

/// The block of substream `(ctr_lo, ctr_hi) + i` under `(key_lo, key_hi)`.
#[cube]
fn substream_block(i: usize, k0: u32, k1: u32, c0: u32, c1: u32) -> (u32, u32, u32, u32) {
    let (s0, s1) = add_u64(c0, c1, u32::cast_from(i), 0u32);
    philox4x32_10(s0, s1, 0u32, 0u32, k0, k1)
}

/// `y[i] = uniform24(out0)` of substream `counter + i`.
#[cube(launch_unchecked)]
fn rand_uniform_kernel(y: &mut Array<f32>, len: usize, k0: u32, k1: u32, c0: u32, c1: u32) {
    let i = ABSOLUTE_POS;
    if i < len {
        let (w0, _w1, _w2, _w3) = substream_block(i, k0, k1, c0, c1);
        y[i] = uniform24(w0);
    }
}

/// `y[i] = 1` if `uniform24(out0) < p` for substream `counter + i`, else 0.
#[cube(launch_unchecked)]
fn rand_bernoulli_kernel(
    y: &mut Array<f32>,
    len: usize,
    p: f32,
    k0: u32,
    k1: u32,
    c0: u32,
    c1: u32,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        let (w0, _w1, _w2, _w3) = substream_block(i, k0, k1, c0, c1);
        let mut v = f32::new(0.0);
        if uniform24(w0) < p {
            v = 1.0;
        }
        y[i] = v;
    }
}

/// `y[i]` = the Box-Muller normal of words 0 and 1 of substream `counter + i`.
#[cube(launch_unchecked)]
fn randn_kernel(y: &mut Array<f32>, len: usize, k0: u32, k1: u32, c0: u32, c1: u32) {
    let i = ABSOLUTE_POS;
    if i < len {
        let (w0, w1, _w2, _w3) = substream_block(i, k0, k1, c0, c1);
        y[i] = normal(w0, w1);
    }
}

/// `y[i]`: the first normal of substreams `counter + i + r len` in `[lo, hi]`, else the
/// last of [`TRUNCATED_TRIES`] clamped.
#[cube(launch_unchecked)]
fn randn_truncated_kernel(
    y: &mut Array<f32>,
    len: usize,
    lo: f32,
    hi: f32,
    k0: u32,
    k1: u32,
    c0: u32,
    c1: u32,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        let (mut s0, mut s1) = add_u64(c0, c1, u32::cast_from(i), 0u32);
        let mut z = f32::new(0.0);
        let mut accepted = false;
        for _ in 0..TRUNCATED_TRIES {
            if !accepted {
                let (w0, w1, _w2, _w3) = philox4x32_10(s0, s1, 0u32, 0u32, k0, k1);
                z = normal(w0, w1);
                accepted = z >= lo && z <= hi;
                // The next try's substream: `len` further on (len < 2^32).
                let (n0, n1) = add_u64(s0, s1, u32::cast_from(len), 0u32);
                s0 = n0;
                s1 = n1;
            }
        }
        if !accepted {
            z = f32::min(f32::max(z, lo), hi);
        }
        y[i] = z;
    }
}

/// One token per row (one cube per row). `scratch` holds `3 rows v` values: ranked keys,
/// ranked ids (as f32) and ranked weights, each `(rows, v)`. The ranking is a bitonic sort
/// (`pow2` = the power of two at or above `v`; pairs reaching past `v` are skipped, which is
/// what sorting behind virtual last-ranked padding does); the weights and their chunked
/// partial sums (`chunk = ceil(v / REDUCE_UNITS)`, one chunk per unit) follow
/// `brotensor_cpu::sampling::sample_logits` operation for operation. The base counter is
/// `counter[0]` (zero-extended) when `from_tensor`, else `ctr`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn sample_logits_kernel(
    logits: &Array<f32>,
    counter: &Array<i32>,
    scratch: &mut Array<f32>,
    indices: &mut Array<i32>,
    rows: usize,
    v: usize,
    pow2: usize,
    chunk: usize,
    inv_t: f32,
    top_k: usize,
    top_p: f32,
    k0: u32,
    k1: u32,
    c0: u32,
    c1: u32,
    #[comptime] from_tensor: bool,
) {
    let row = CUBE_POS;
    if row < rows {
        let units = REDUCE_UNITS as usize;
        let t = UNIT_POS as usize;
        let keys = row * v;
        let ids = (rows + row) * v;
        let weights = (2 * rows + row) * v;
        let mut i = t;
        loop {
            if i >= v {
                break;
            }
            let x = logits[row * v + i];
            let mut k = x;
            if x.is_nan() {
                k = -f32::MAX;
            }
            scratch[keys + i] = k;
            scratch[ids + i] = f32::cast_from(i);
            i += units;
        }
        barrier();
        let pairs = pow2 / 2;
        let mut k = usize::new(2);
        loop {
            if k > pow2 {
                break;
            }
            let h = k / 2;
            let mut p = t;
            loop {
                if p >= pairs {
                    break;
                }
                let base = (p / h) * k;
                let off = p % h;
                let b = base + k - 1 - off;
                if b < v {
                    order_pair(scratch, keys, ids, base + off, b);
                }
                p += units;
            }
            barrier();
            let mut j = h / 2;
            loop {
                if j == 0 {
                    break;
                }
                let mut p = t;
                loop {
                    if p >= pairs {
                        break;
                    }
                    let a = (p / j) * 2 * j + p % j;
                    if a + j < v {
                        order_pair(scratch, keys, ids, a, a + j);
                    }
                    p += units;
                }
                barrier();
                j /= 2;
            }
            k *= 2;
        }
        let max = scratch[keys];
        let end = v.min((t + 1) * chunk);
        let mut local = f32::new(0.0);
        let mut j = t * chunk;
        loop {
            if j >= end {
                break;
            }
            // A key equal to the largest weighs 1, also `+inf` (whose difference is NaN).
            let key = scratch[keys + j];
            let mut d = key - max;
            if key == max {
                d = 0.0;
            }
            let w = exp_neg(d * inv_t);
            scratch[weights + j] = w;
            local += w;
            j += 1;
        }
        let mut pre = SharedMemory::<f32>::new(REDUCE_UNITS as usize + 1);
        pre[t + 1] = local;
        barrier();
        if t == 0 {
            pre[0] = 0.0;
            for c in 0..units {
                pre[c + 1] = pre[c] + pre[c + 1];
            }
            let total = pre[units];
            let mut kept = v;
            if top_k > 0 && top_k < v {
                kept = top_k;
            }
            if max <= -f32::MAX {
                // Only -inf and NaN: the first ranked token, the argmax's pick.
                kept = 1;
            }
            if top_p < 1.0 {
                let at = first_reaching(scratch, weights, &pre, chunk, kept, top_p * total, false);
                if at < kept {
                    kept = at + 1;
                }
            }
            let mut b0 = c0;
            let mut b1 = c1;
            if comptime!(from_tensor) {
                b0 = u32::cast_from(counter[0]);
                b1 = 0u32;
            }
            let (w0, _w1, _w2, _w3) = substream_block(row, k0, k1, b0, b1);
            let target = uniform24(w0) * partial_sum(scratch, weights, &pre, chunk, kept - 1);
            let mut chosen = first_reaching(scratch, weights, &pre, chunk, kept, target, true);
            if chosen >= kept {
                chosen = kept - 1;
            }
            indices[row] = i32::cast_from(scratch[ids + chosen]);
        }
    }
}

/// `counter[0] += by` (wrapping).
#[cube(launch_unchecked)]
fn advance_counter_kernel(counter: &mut Array<i32>, by: u32) {
    if ABSOLUTE_POS == 0 {
        counter[0] = i32::cast_from(u32::cast_from(counter[0]) + by);
    }
}

/// Splits a 64-bit value into its `(low, high)` words.
fn words(v: u64) -> (u32, u32) {
    (v as u32, (v >> 32) as u32)
}

/// The Philox blocks of `blocks` `(counter words 0..4, key words 0..2)` sextuples of `ctr_key`
/// (u32) into `out` (`4 blocks` u32).
pub fn launch_philox_blocks<R: Runtime>(
    client: &ComputeClient<R>,
    ctr_key: &Handle,
    out: &Handle,
    blocks: usize,
) -> Result<(), LaunchError> {
    if blocks == 0 {
        return Ok(());
    }
    let ins = extent("blocks * 6", &[blocks, 6])?;
    let outs = extent("blocks * 4", &[blocks, 4])?;
    let ctr_key = Buf::new("ctr_key", ctr_key, ins, 4)?;
    let out = Buf::new("out", out, outs, 4)?;
    check_u32(&[("blocks * 6", ins)])?;
    let (count, dim) = grid_1d(client, blocks)?;
    // SAFETY: units past `blocks` return; unit `b` reads `6 b .. 6 b + 6 <= ins` and writes
    // `4 b .. 4 b + 4 <= outs` (both checked `Buf`s).
    unsafe {
        philox_blocks_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            ctr_key.arg(),
            out.arg(),
            blocks,
        );
    }
    Ok(())
}

/// What a random fill draws per element.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RandomFill {
    /// Uniform in `[0, 1)`.
    Uniform,
    /// 1 with probability `p`, else 0.
    Bernoulli(f32),
    /// Standard normal.
    Normal,
    /// Standard normal restricted to `[lo, hi]`.
    Truncated(f32, f32),
}

/// Fills the `len` f32 values of `y` from substreams `counter + i` under `key`.
pub fn launch_random_fill<R: Runtime>(
    client: &ComputeClient<R>,
    y: &Handle,
    len: usize,
    fill: RandomFill,
    (key, counter): (u64, u64),
) -> Result<(), LaunchError> {
    if len == 0 {
        return Ok(());
    }
    let y = Buf::new("y", y, len, 4)?;
    check_u32(&[("len", len)])?;
    let (count, dim) = grid_1d(client, len)?;
    let ((k0, k1), (c0, c1)) = (words(key), words(counter));
    let y = y.arg();
    // SAFETY: units past `len` return; unit `i` writes `y[i]`, `i < len` (a checked `Buf`).
    unsafe {
        match fill {
            RandomFill::Uniform => rand_uniform_kernel::launch_unchecked::<R>(
                client, count, dim, y, len, k0, k1, c0, c1,
            ),
            RandomFill::Bernoulli(p) => rand_bernoulli_kernel::launch_unchecked::<R>(
                client, count, dim, y, len, p, k0, k1, c0, c1,
            ),
            RandomFill::Normal => {
                randn_kernel::launch_unchecked::<R>(client, count, dim, y, len, k0, k1, c0, c1)
            }
            RandomFill::Truncated(lo, hi) => randn_truncated_kernel::launch_unchecked::<R>(
                client, count, dim, y, len, lo, hi, k0, k1, c0, c1,
            ),
        }
    }
    Ok(())
}

/// The settings of a sampled draw (see `sample_logits_kernel`).
#[derive(Clone, Copy, Debug)]
pub struct SampleArgs {
    /// `1 / temperature` as f32.
    pub inv_temperature: f32,
    /// Keep at most this many tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest ranked prefix reaching this share of the total weight.
    pub top_p: f32,
    /// Philox key.
    pub key: u64,
    /// Base counter (used when no counter buffer is given).
    pub counter: u64,
}

/// One token per row of `logits (rows, v)` (F32) into `indices` (`rows` I32), with `scratch`
/// (`3 rows v` F32) as workspace. With `counter` (an I32 buffer), the base counter is its
/// element 0, zero-extended; else `args.counter`. Requires `1 <= v <= MAX_VOCAB`.
pub fn launch_sample_logits<R: Runtime>(
    client: &ComputeClient<R>,
    logits: &Handle,
    counter: Option<&Handle>,
    (scratch, indices): (&Handle, &Handle),
    (rows, v): (usize, usize),
    args: SampleArgs,
) -> Result<(), LaunchError> {
    if rows == 0 {
        return Ok(());
    }
    if v == 0 || v > MAX_VOCAB {
        return Err(LaunchError::TooLarge { vectors: v });
    }
    let len = extent("rows * v", &[rows, v])?;
    let work = extent("3 * rows * v", &[3, rows, v])?;
    check_u32(&[("3 * rows * v", work)])?;
    let logits = Buf::new("logits", logits, len, 4)?;
    let scratch = Buf::new("scratch", scratch, work, 4)?;
    let indices = Buf::new("indices", indices, rows, 4)?;
    let counter = counter.map(|c| Buf::new("counter", c, 1, 4)).transpose()?;
    let (count, dim) = row_grid(client, rows)?;
    let chunk = v.div_ceil(REDUCE_UNITS as usize);
    let pow2 = v.next_power_of_two();
    let ((k0, k1), (c0, c1)) = (words(args.key), words(args.counter));
    // SAFETY: lengths from checked `Buf`s. Cube `row < rows` reads `logits[row v + i]`,
    // `i < v`, and touches `scratch` only at `(m rows + row) v + i` for `m < 3`, `i < v`
    // (bitonic pairs reaching `v` or past are skipped; chunk walks stop at `v`); it writes
    // `indices[row]`, and reads `counter[0]` only when a counter buffer is given (else the
    // indices buffer stands in, unread).
    unsafe {
        sample_logits_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            logits.arg(),
            indices.stand_in_for(counter.as_ref()).arg(),
            scratch.arg(),
            indices.arg(),
            rows,
            v,
            pow2,
            chunk,
            args.inv_temperature,
            args.top_k,
            args.top_p,
            k0,
            k1,
            c0,
            c1,
            counter.is_some(),
        );
    }
    Ok(())
}

/// `counter[0] += by` (I32, wrapping), after every earlier launch on the stream.
pub fn launch_advance_counter<R: Runtime>(
    client: &ComputeClient<R>,
    counter: &Handle,
    by: u32,
) -> Result<(), LaunchError> {
    let counter = Buf::new("counter", counter, 1, 4)?;
    // SAFETY: one unit writes `counter[0]` (a checked `Buf` of one element).
    unsafe {
        advance_counter_kernel::launch_unchecked::<R>(
            client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(1),
            counter.arg(),
            by,
        );
    }
    Ok(())
}

/// Every kernel of this file, in every specialisation the library launches, lowered to CUDA
/// C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::Lowering as L;
    let c = l.client.clone();
    let a = L::array;
    let s = L::settings_1d;
    l.lower(philox_blocks_kernel::PhiloxBlocksKernel::<Rt>::new(
        s(),
        c.clone(),
        a(),
        a(),
        (),
    ));
    // The fills: `y`, `len`, (`p` / `lo, hi`), the key and counter words.
    l.lower(rand_uniform_kernel::RandUniformKernel::<Rt>::new(
        s(),
        c.clone(),
        a(),
        (),
        (),
        (),
        (),
        (),
    ));
    l.lower(rand_bernoulli_kernel::RandBernoulliKernel::<Rt>::new(
        s(),
        c.clone(),
        a(),
        (),
        (),
        (),
        (),
        (),
        (),
    ));
    l.lower(randn_kernel::RandnKernel::<Rt>::new(
        s(),
        c.clone(),
        a(),
        (),
        (),
        (),
        (),
        (),
    ));
    l.lower(randn_truncated_kernel::RandnTruncatedKernel::<Rt>::new(
        s(),
        c.clone(),
        a(),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
    ));
    for from_tensor in [false, true] {
        l.lower(sample_logits_kernel::SampleLogitsKernel::<Rt>::new(
            L::settings(CubeDim::new_1d(REDUCE_UNITS)),
            c.clone(),
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
            from_tensor,
        ));
    }
    l.lower(advance_counter_kernel::AdvanceCounterKernel::<Rt>::new(
        L::settings(CubeDim::new_1d(1)),
        c,
        a(),
        (),
    ));
}

#[cfg(test)]
use crate::cuda_lowering::Rt;
