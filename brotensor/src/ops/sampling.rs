//! The sampling ops: token sampling and the Philox random-number ops.
//!
//! Every random value comes from Philox 4x32-10 (Random123's `philox4x32`, 10 rounds): the
//! 64-bit `key` is the key (low word first) and element `i` of a fill (row `n` of a sampled
//! batch) uses the counter block `{lo(s), hi(s), 0, 0}` with `s = counter + i` (`counter + n`),
//! wrapping. So a result depends on `(key, counter)` only, every device gives the same bits,
//! and `counter += numel` continues a stream. A uniform is `(out0 >> 8) / 2^24` in `[0, 1)`;
//! a normal is Box-Muller on `u1 = 1 - uniform(out0)`, `u2 = uniform(out1)` (`out2`, `out3`
//! unused), computed in integers to about 1e-5 and rounded once. The random fills take `y`
//! F32 and pre-sized (committed; never resized).
//!
//! `sample_logits` picks the same ids on every device: its softmax numerators come from an
//! integer fixed-point `exp`, and the partial sums, thresholds and comparisons are the same
//! f32 additions, products and compares in the same order on the CPU and in the kernel (the
//! row's ranked weights cut into 256 chunks, each summed in order, the chunk totals added in
//! order), arranged so that an FMA a GPU compiler may form changes no result. The C++ CPU
//! accumulates in float64 instead; ours can differ from that only for a draw within about
//! 1e-6 (relative) of a bucket boundary. The residual risk is a runtime that compiles f32
//! adds and multiplies with other than IEEE round-to-nearest (a fast-math mode; none of the
//! runtimes used here enables one).

use super::{check_dtype, checked_product, dispatch, input, updated, written};
use crate::backend::Draw;
use crate::ops::Dispatched;
use crate::{Dtype, Error, Result, Tensor};

/// The largest vocabulary a sampled (`temperature > 0`) draw takes.
pub const SAMPLE_MAX_VOCAB: usize = (1 << 24) - 1;

pub(super) fn check_committed(op: &'static str, name: &'static str, t: &Tensor) -> Result<()> {
    if !t.is_committed() {
        return Err(Error::invalid(
            op,
            format!("`{name}` must be pre-sized (it is uncommitted)"),
        ));
    }
    Ok(())
}

/// Validates the sampling settings against `logits (N, V)`; the draw, or `None` for greedy
/// decoding (`temperature == 0`).
fn draw_for(
    op: &'static str,
    logits: &Tensor,
    (temperature, top_k, top_p): (f32, i32, f32),
    (key, counter): (u64, u64),
) -> Result<Option<Draw>> {
    check_dtype(op, "logits", logits, Dtype::F32)?;
    if temperature.is_nan() || temperature < 0.0 {
        return Err(Error::invalid(
            op,
            format!("temperature must be >= 0 (got {temperature})"),
        ));
    }
    if top_k < 0 {
        return Err(Error::invalid(
            op,
            format!("top_k must be >= 0 (got {top_k})"),
        ));
    }
    if top_p.is_nan() || top_p < 0.0 {
        return Err(Error::invalid(
            op,
            format!("top_p must be >= 0 (got {top_p})"),
        ));
    }
    let (rows, v) = logits.shape();
    if v == 0 && rows > 0 {
        return Err(Error::shape(op, "V == 0 with N > 0: no token to pick"));
    }
    // A temperature whose reciprocal overflows f32 (below ~3e-39) is greedy decoding too.
    if temperature == 0.0 || !(1.0 / temperature).is_finite() {
        return Ok(None);
    }
    if v > SAMPLE_MAX_VOCAB {
        return Err(Error::shape(
            op,
            format!("V = {v} exceeds the largest vocabulary a draw takes ({SAMPLE_MAX_VOCAB})"),
        ));
    }
    Ok(Some(Draw {
        inv_temperature: 1.0 / temperature,
        top_k: top_k as usize,
        top_p,
        key,
        counter,
    }))
}

/// `indices (N, 1)` I32 (resized): one token id per row of `logits (N, V)` F32.
///
/// `temperature == 0`, or one so small that `1 / temperature` overflows f32, is the argmax
/// of each row (the lowest index on ties; no random number used). Otherwise, per row `n`:
/// rank the tokens by logit, descending, equal logits by ascending index (NaN ranks as
/// `-f32::MAX`); weigh them `exp((x - x_max) / temperature)` (the softmax numerators; a
/// logit equal to `x_max` weighs 1, so `+inf` logits share all the probability, drawn among
/// in rank order); a row with no logit above `-f32::MAX` (only `-inf` and NaN) picks its
/// first ranked token (index 0 when all are `-inf` or all NaN); keep the first `top_k`
/// (`0`: all); if `top_p < 1`, keep only the
/// shortest ranked prefix whose weight reaches `top_p` of the total (at least one token);
/// draw `u = uniform(counter + n)` and pick the first kept token whose ranked cumulative
/// weight exceeds `u` times the kept total (the last kept if none does).
/// Errors for `temperature`, `top_k` or `top_p` below 0 (or NaN), `V == 0` with `N > 0`,
/// and a `logits` that is not F32. `top_p > 1` keeps everything, as `top_p == 1` does.
pub fn sample_logits(
    logits: &Tensor,
    temperature: f32,
    top_k: i32,
    top_p: f32,
    key: u64,
    counter: u64,
    indices: &mut Tensor,
) -> Result<()> {
    let op = "sample_logits";
    let be = dispatch(op, &[input("logits", logits), written("indices", indices)])?;
    let draw = draw_for(op, logits, (temperature, top_k, top_p), (key, counter))?;
    be.out("indices", indices, &[logits.rows(), 1], Dtype::I32)?;
    if logits.rows() == 0 {
        return Ok(());
    }
    match draw {
        None => be.argmax_rows(logits, indices),
        Some(d) => be.sample_logits(logits, &d, indices),
    }
}

/// [`sample_logits`] for a captured decode loop: the base counter is `counter[0]` (an I32
/// tensor with at least one element, read as unsigned) and is advanced by `N` on the device
/// after the draw (not for `temperature == 0`); `scratch` (F32, at least `3 N V` elements)
/// is the workspace and `indices` (I32, `N` elements) is written in place. Nothing is
/// allocated. Errors as [`sample_logits`] does, and for an uncommitted, mistyped or short
/// `counter`, `scratch` or `indices`.
#[allow(clippy::too_many_arguments)]
pub fn sample_logits_into(
    logits: &Tensor,
    temperature: f32,
    top_k: i32,
    top_p: f32,
    key: u64,
    counter: &mut Tensor,
    scratch: &mut Tensor,
    indices: &mut Tensor,
) -> Result<()> {
    let op = "sample_logits_into";
    let be = dispatch(
        op,
        &[
            input("logits", logits),
            updated("counter", counter),
            written("scratch", scratch),
            written("indices", indices),
        ],
    )?;
    for (name, t) in [
        ("counter", &*counter),
        ("scratch", scratch),
        ("indices", indices),
    ] {
        check_committed(op, name, t)?;
    }
    let draw = draw_for(op, logits, (temperature, top_k, top_p), (key, 0))?;
    let (rows, v) = logits.shape();
    check_dtype(op, "counter", counter, Dtype::I32)?;
    if counter.numel() < 1 {
        return Err(Error::shape(op, "`counter` must hold at least one element"));
    }
    check_dtype(op, "scratch", scratch, Dtype::F32)?;
    let need = checked_product(op, "3 N V", &[3, rows, v])?;
    if scratch.numel() < need {
        return Err(Error::shape(
            op,
            format!(
                "`scratch` holds {} elements but 3 N V = {need} are needed",
                scratch.numel()
            ),
        ));
    }
    check_dtype(op, "indices", indices, Dtype::I32)?;
    if indices.numel() != rows {
        return Err(Error::shape(
            op,
            format!(
                "`indices` holds {} elements but N = {rows} rows are sampled",
                indices.numel()
            ),
        ));
    }
    if rows == 0 {
        return Ok(());
    }
    match draw {
        None => be.argmax_rows(logits, indices),
        Some(d) => be.sample_logits_into(logits, &d, counter, scratch, indices),
    }
}

/// The backend of a random fill into `y`, after checking that `y` is F32 and pre-sized.
fn fill_target(op: &'static str, y: &Tensor) -> Result<Dispatched> {
    let be = dispatch(op, &[written("y", y)])?;
    check_committed(op, "y", y)?;
    check_dtype(op, "y", y, Dtype::F32)?;
    Ok(be)
}

/// `y` (F32, pre-sized, any shape): `y[i]` standard normal from substream `counter + i`.
pub fn randn(key: u64, counter: u64, y: &mut Tensor) -> Result<()> {
    let be = fill_target("randn", y)?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.randn(key, counter, y)
}

/// `y` (F32, pre-sized, any shape): `y[i]` uniform in `[0, 1)` from substream `counter + i`.
pub fn rand_uniform(key: u64, counter: u64, y: &mut Tensor) -> Result<()> {
    let be = fill_target("rand_uniform", y)?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.rand_uniform(key, counter, y)
}

/// `y` (F32, pre-sized, any shape): `y[i] = 1` if `uniform(counter + i) < p`, else 0.
/// `p` must lie in `[0, 1]`.
pub fn rand_bernoulli(p: f32, key: u64, counter: u64, y: &mut Tensor) -> Result<()> {
    let op = "rand_bernoulli";
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::invalid(op, format!("p must be in [0, 1] (got {p})")));
    }
    let be = fill_target(op, y)?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.rand_bernoulli(p, key, counter, y)
}

/// `y` (F32, pre-sized, any shape): a standard normal restricted to `[lo, hi]`: `y[i]` is
/// the first normal of substreams `counter + i + r numel` (`r = 0..64`) inside the bounds,
/// else the 64th clamped to them. Requires `lo < hi`.
pub fn randn_truncated(lo: f32, hi: f32, key: u64, counter: u64, y: &mut Tensor) -> Result<()> {
    let op = "randn_truncated";
    if lo.is_nan() || hi.is_nan() || lo >= hi {
        return Err(Error::invalid(
            op,
            format!("lo must be < hi (got {lo}, {hi})"),
        ));
    }
    let be = fill_target(op, y)?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.randn_truncated(lo, hi, key, counter, y)
}
