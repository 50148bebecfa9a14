//! The row pieces of `sample_logits_kernel`: the cube-wide barrier, the bitonic
//! compare-exchange of ranked entries, and the searches over chunked partial sums.

use cubecl::prelude::*;

use crate::primitives::REDUCE_UNITS;

/// Waits for every unit of the cube and makes their global writes visible to each other.
#[cube]
pub(super) fn barrier() {
    sync_storage();
    sync_cube();
}

/// Puts ranked entries `a < b` of one row's `(keys, ids)` in order: larger key first, equal
/// keys by smaller id.
#[cube]
pub(super) fn order_pair(s: &mut Array<f32>, keys: usize, ids: usize, a: usize, b: usize) {
    let ka = s[keys + a];
    let kb = s[keys + b];
    let ia = s[ids + a];
    let ib = s[ids + b];
    if kb > ka || (kb == ka && ib < ia) {
        s[keys + a] = kb;
        s[keys + b] = ka;
        s[ids + a] = ib;
        s[ids + b] = ia;
    }
}

/// Whether partial sum `cum` satisfies the search: `threshold < cum` when `strict`, else
/// `cum >= threshold`.
#[cube]
fn reaches(cum: f32, threshold: f32, strict: bool) -> bool {
    let mut r = cum >= threshold;
    if strict {
        r = threshold < cum;
    }
    r
}

/// The first ranked position `j < len` whose partial sum reaches `threshold` (see
/// [`reaches`]), else `len`. `pre[c]` is the sum of chunks before `c`; a partial sum is
/// `pre[c] + (the in-order sum of its chunk up to it)`, so it is non-decreasing and the
/// search only walks the first chunk whose total reaches.
#[cube]
#[allow(clippy::manual_div_ceil)] // `div_ceil` has no #[cube] expansion
pub(super) fn first_reaching(
    s: &Array<f32>,
    weights: usize,
    pre: &SharedMemory<f32>,
    chunk: usize,
    len: usize,
    threshold: f32,
    strict: bool,
) -> usize {
    // Loops without `break`: cubecl 0.10's SPIR-V compiler drops the selection merge of a
    // loop with two conditional breaks, which Vulkan drivers refuse ("Selection must be
    // structured"), so each search runs to its bound and keeps its first hit.
    let units = usize::new(REDUCE_UNITS as i64);
    let chunks = ((len + chunk - 1) / chunk).min(units);
    let mut hit = units;
    for c in 0..chunks {
        if hit == units && reaches(pre[c + 1], threshold, strict) {
            hit = c;
        }
    }
    let mut found = len;
    if hit < units {
        let end = len.min((hit + 1) * chunk);
        let mut local = f32::new(0.0);
        for j in hit * chunk..end {
            if found == len {
                local += s[weights + j];
                if reaches(pre[hit] + local, threshold, strict) {
                    found = j;
                }
            }
        }
    }
    found
}

/// The partial sum at ranked position `j` (as [`first_reaching`] defines it).
#[cube]
pub(super) fn partial_sum(
    s: &Array<f32>,
    weights: usize,
    pre: &SharedMemory<f32>,
    chunk: usize,
    j: usize,
) -> f32 {
    let c = j / chunk;
    let mut local = f32::new(0.0);
    for t in c * chunk..j + 1 {
        local += s[weights + t];
    }
    pre[c] + local
}
