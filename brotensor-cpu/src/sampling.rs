//! CPU reference of the sampling category: token sampling and the Philox random-number ops.
//!
//! Element `i` of a random tensor (row `n` of a sampled batch) draws from the Philox
//! substream `counter + i` (`counter + n`), so the result depends on the key and the
//! counter only. The arithmetic is the one `brotensor_kernels::sampling` runs on a GPU, in
//! the same order, so both give the same bits (see [`philox`]).

pub mod philox;

use rayon::prelude::*;

use philox::{block, exp_neg, normal, uniform24};

/// Attempts of [`randn_truncated`] before it clamps the last draw.
pub const TRUNCATED_TRIES: u64 = 64;
/// Partial sums of one row of [`sample_logits`]: the row (in ranked order) is cut into this
/// many equal chunks, each summed in order, and the chunk sums added in order.
pub const SAMPLE_CHUNKS: usize = 256;

/// Elements per rayon task of the random fills.
const FILL_GRAIN: usize = 4096;

/// Fills `y` with `f(counter + i)`, `i` the element index.
fn fill(y: &mut [f32], counter: u64, f: impl Fn(u64) -> f32 + Sync) {
    y.par_chunks_mut(FILL_GRAIN)
        .enumerate()
        .for_each(|(c, out)| {
            let start = counter.wrapping_add((c * FILL_GRAIN) as u64);
            for (i, v) in out.iter_mut().enumerate() {
                *v = f(start.wrapping_add(i as u64));
            }
        });
}

/// `y[i] = uniform24(out0)` of substream `counter + i`: uniform in `[0, 1)`.
pub fn rand_uniform(key: u64, counter: u64, y: &mut [f32]) {
    fill(y, counter, |s| uniform24(block(key, s)[0]));
}

/// `y[i] = 1` if `uniform24(out0) < p` for substream `counter + i`, else 0.
pub fn rand_bernoulli(p: f32, key: u64, counter: u64, y: &mut [f32]) {
    fill(y, counter, |s| {
        if uniform24(block(key, s)[0]) < p {
            1.0
        } else {
            0.0
        }
    });
}

/// `y[i]` = the Box-Muller normal of words 0 and 1 of substream `counter + i`.
pub fn randn(key: u64, counter: u64, y: &mut [f32]) {
    fill(y, counter, |s| {
        let [w0, w1, _, _] = block(key, s);
        normal(w0, w1)
    });
}

/// `y[i]`: the first of the normals of substreams `counter + i + r len` (`r = 0, 1, ...`,
/// `len = y.len()`) in `[lo, hi]`; after [`TRUNCATED_TRIES`] misses, the last clamped to it.
pub fn randn_truncated(lo: f32, hi: f32, key: u64, counter: u64, y: &mut [f32]) {
    let len = y.len() as u64;
    fill(y, counter, |s| {
        let mut z = 0.0f32;
        for r in 0..TRUNCATED_TRIES {
            let [w0, w1, _, _] = block(key, s.wrapping_add(r.wrapping_mul(len)));
            z = normal(w0, w1);
            if z >= lo && z <= hi {
                return z;
            }
        }
        z.clamp(lo, hi)
    });
}

/// The settings of a sampled draw (`temperature > 0`; greedy decoding is an argmax).
#[derive(Clone, Copy, Debug)]
pub struct SampleParams {
    /// `1 / temperature`, rounded to f32 (the logits' differences are multiplied by it).
    pub inv_temperature: f32,
    /// Keep at most this many tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest ranked prefix whose probability reaches this (`>= 1`: all).
    pub top_p: f32,
    /// Philox key.
    pub key: u64,
    /// Row `n` draws from substream `counter + n`.
    pub counter: u64,
}

/// The ranking key of a logit: NaN ranks as `-f32::MAX`.
pub fn rank_key(x: f32) -> f32 {
    if x.is_nan() {
        -f32::MAX
    } else {
        x
    }
}

/// One token per row of `logits (rows, v)` into `indices (rows)`, using `scratch` (at least
/// `3 rows v` values, overwritten) so that nothing is allocated. Per row: rank the tokens by
/// logit, descending, equal logits by ascending index; weigh ranked token `j` by
/// `e_j = exp((x_j - x_max) / T)`; with `cum_j` the ranked partial sums (chunked as
/// [`SAMPLE_CHUNKS`] says) and `Z` the total, keep the first `min(top_k, v)` tokens, then
/// (when `top_p < 1`) only up to the first with `cum_j >= top_p Z`; draw
/// `u = uniform24(out0)` of substream `counter + row` and pick the first kept token with
/// `u cum_last < cum_j`, else the last kept. A token whose key equals the largest weighs 1
/// (so `+inf` logits share the draw); a row whose largest key is `-f32::MAX` or less (only
/// `-inf` and NaN) keeps only its first ranked token. Requires `v >= 1`, `v < 2^24` and a
/// finite `inv_temperature` (the ops treat an overflowing one as greedy decoding).
pub fn sample_logits(
    logits: &[f32],
    v: usize,
    params: SampleParams,
    scratch: &mut [f32],
    indices: &mut [i32],
) {
    let rows = indices.len();
    assert!(
        v >= 1 && logits.len() == rows * v && scratch.len() >= 3 * rows * v,
        "sample_logits: lengths"
    );
    let (weights, rest) = scratch.split_at_mut(rows * v);
    let (order, rest) = rest.split_at_mut(rows * v);
    let cums = &mut rest[..rows * v];
    indices
        .par_iter_mut()
        .zip(logits.par_chunks(v))
        .zip(weights.par_chunks_mut(v))
        .zip(order.par_chunks_mut(v).zip(cums.par_chunks_mut(v)))
        .enumerate()
        .for_each(|(n, (((out, row), e), (order, cum)))| {
            let sub = params.counter.wrapping_add(n as u64);
            *out = sample_row(row, params, sub, e, order, cum) as i32;
        });
}

/// The token [`sample_logits`] picks from `row`, with substream `sub` and `e`, `order`,
/// `cum` (each `row.len()` long) as workspace.
fn sample_row(
    row: &[f32],
    p: SampleParams,
    sub: u64,
    e: &mut [f32],
    order: &mut [f32],
    cum: &mut [f32],
) -> usize {
    let v = row.len();
    for (i, o) in order.iter_mut().enumerate() {
        *o = i as f32;
    }
    // Descending key, then ascending index: a total order, whatever the logits hold.
    order.sort_unstable_by(|&a, &b| {
        let (ka, kb) = (rank_key(row[a as usize]), rank_key(row[b as usize]));
        kb.partial_cmp(&ka)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.total_cmp(&b))
    });
    let max = rank_key(row[order[0] as usize]);
    for (w, &o) in e.iter_mut().zip(order.iter()) {
        // A key equal to the largest weighs 1, also when both are `+inf` (whose difference
        // is NaN): `+inf` logits share all the probability.
        let k = rank_key(row[o as usize]);
        let d = if k == max { 0.0 } else { k - max };
        *w = exp_neg(d * p.inv_temperature);
    }
    // Chunked partial sums: cum_j = (sum of the earlier chunks) + (sum within j's chunk).
    let chunk = v.div_ceil(SAMPLE_CHUNKS);
    let mut prefix = 0.0f32;
    for (c, w) in cum.chunks_mut(chunk).zip(e.chunks(chunk)) {
        let mut local = 0.0f32;
        for (c, &w) in c.iter_mut().zip(w) {
            local += w;
            *c = prefix + local;
        }
        prefix += local;
    }
    let total = prefix;
    let mut kept = if p.top_k > 0 { p.top_k.min(v) } else { v };
    if max <= -f32::MAX {
        // No logit above `-f32::MAX` (only `-inf` and NaN): the first ranked token, the
        // argmax's pick.
        kept = 1;
    }
    if p.top_p < 1.0 {
        let threshold = p.top_p * total;
        if let Some(j) = cum[..kept].iter().position(|&c| c >= threshold) {
            kept = j + 1;
        }
    }
    let u = uniform24(block(p.key, sub)[0]);
    let target = u * cum[kept - 1];
    let chosen = cum[..kept]
        .iter()
        .position(|&c| target < c)
        .unwrap_or(kept - 1);
    order[chosen] as usize
}
