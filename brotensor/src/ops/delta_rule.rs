//! The gated delta rule (C++ `ops/delta_rule.h`): the linear attention of Qwen3-Next-class
//! models. Each head keeps a `d_v x d_k` FP32 state `S`, read and updated in place; per
//! token, in the FLA / Hugging Face order (decay before the delta read):
//!
//! ```text
//! alpha = exp(-softplus(a_raw) exp(log_A))     beta = sigmoid(beta_raw)
//! S = alpha S;   S = S + beta (v - S k) k^T;   o = S q
//! ```
//!
//! `q`, `k`: `(L, H d_k)`; `v`, `o`: `(L, H d_v)`, heads contiguous within a row (as RoPE
//! and the row norms lay them out), in one float dtype (F32, F16, BF16; FP32 arithmetic);
//! `a_raw`, `beta`: `(L, H)` F32 raw gates (softplus and sigmoid are applied here); `log_A`:
//! `H` F32 values; `state`: `(H, d_v d_k)` F32, head `h`'s `S[i][j]` at `(h, i d_k + j)`
//! (zeros for a fresh sequence). Forward only.
//!
//! ```
//! # fn main() -> brotensor::Result<()> {
//! use brotensor::{ops, Dtype, Tensor};
//! // One head, d_k = 2, d_v = 1, two tokens, from a zero state.
//! let q = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0], 2, 2)?;
//! let k = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0], 2, 2)?;
//! let v = Tensor::from_slice(&[2.0f32, 3.0], 2, 1)?;
//! let gates = Tensor::from_slice(&[-30.0f32, -30.0], 2, 1)?; // alpha ~ 1
//! let beta = Tensor::from_slice(&[30.0f32, 30.0], 2, 1)?; // beta ~ 1: S k = v exactly
//! let log_a = Tensor::from_slice(&[0.0f32], 1, 1)?;
//! let mut state = Tensor::zeros(1, 2, Dtype::F32)?;
//! let mut o = Tensor::default();
//! ops::gated_delta_rule_step(&q, &k, &v, &gates, &beta, &log_a, (1, 2, 1), &mut state, &mut o)?;
//! assert_eq!(o.to_vec::<f32>()?, [2.0, 3.0]);
//! assert_eq!(state.to_vec::<f32>()?, [2.0, 3.0]);
//! # Ok(())
//! # }
//! ```

use super::{check_dtype, check_dtypes_match, checked_product, dispatch, input, updated, written};
use crate::backend::DeltaDims;
use crate::{Dtype, Error, Result, Tensor};

/// The name of the prompt form, which may run chunked.
const CHUNKED: &str = "gated_delta_rule_chunked";

/// Errors unless `t` is shaped `(rows, cols)` (any dims with that matrix view and count).
fn check_matrix(
    op: &'static str,
    name: &'static str,
    t: &Tensor,
    (rows, cols): (usize, usize),
    formula: &str,
) -> Result<()> {
    if t.rank() != 2 || t.shape() != (rows, cols) {
        return Err(Error::shape(
            op,
            format!(
                "{name} must be {formula} = ({rows}, {cols}), got dims {:?}",
                t.dims()
            ),
        ));
    }
    Ok(())
}

/// The shared body of both entry points.
#[allow(clippy::too_many_arguments)]
fn delta_rule(
    op: &'static str,
    [q, k, v]: [&Tensor; 3],
    [a_raw, beta, log_a]: [&Tensor; 3],
    (num_heads, d_k, d_v): (usize, usize, usize),
    state: &mut Tensor,
    o: &mut Tensor,
) -> Result<()> {
    let be = dispatch(
        op,
        &[
            input("q", q).float(),
            input("k", k).float(),
            input("v", v).float(),
            input("a_raw", a_raw),
            input("beta", beta),
            input("log_a", log_a),
            updated("state", state),
            written("o", o),
        ],
    )?;
    check_dtypes_match(op, ("q", q), &[("k", k), ("v", v)])?;
    for (name, t) in [
        ("a_raw", a_raw),
        ("beta", beta),
        ("log_a", log_a),
        ("state", &*state),
    ] {
        check_dtype(op, name, t, Dtype::F32)?;
    }
    if num_heads == 0 || d_k == 0 || d_v == 0 {
        return Err(Error::shape(
            op,
            format!("num_heads, d_k and d_v must be at least 1, got ({num_heads}, {d_k}, {d_v})"),
        ));
    }
    let tokens = q.rows();
    let qk_cols = checked_product(op, "num_heads * d_k", &[num_heads, d_k])?;
    let v_cols = checked_product(op, "num_heads * d_v", &[num_heads, d_v])?;
    let state_cols = checked_product(op, "d_v * d_k", &[d_v, d_k])?;
    checked_product(op, "num_heads * d_v * d_k", &[num_heads, state_cols])?;
    check_matrix(op, "q", q, (tokens, qk_cols), "(L, num_heads*d_k)")?;
    check_matrix(op, "k", k, (tokens, qk_cols), "(L, num_heads*d_k)")?;
    check_matrix(op, "v", v, (tokens, v_cols), "(L, num_heads*d_v)")?;
    check_matrix(op, "a_raw", a_raw, (tokens, num_heads), "(L, num_heads)")?;
    check_matrix(op, "beta", beta, (tokens, num_heads), "(L, num_heads)")?;
    if log_a.numel() != num_heads {
        return Err(Error::shape(
            op,
            format!(
                "log_a must hold num_heads = {num_heads} values, has {}",
                log_a.numel()
            ),
        ));
    }
    check_matrix(
        op,
        "state",
        state,
        (num_heads, state_cols),
        "(num_heads, d_v*d_k)",
    )?;
    be.out("o", o, &[tokens, v_cols], q.dtype())?;
    if tokens == 0 {
        return Ok(());
    }
    let dims = DeltaDims {
        tokens,
        heads: num_heads,
        d_k,
        d_v,
    };
    if op == CHUNKED {
        be.gated_delta_rule_chunked(op, [q, k, v], [a_raw, beta, log_a], dims, state, o)
    } else {
        be.gated_delta_rule(op, [q, k, v], [a_raw, beta, log_a], dims, state, o)
    }
}

/// The gated delta rule for `L` new tokens against `state` (C++ `gated_delta_rule_step`):
/// the per-token recurrence of the module docs, token after token (`L = 1` is one decode
/// step). `(num_heads, d_k, d_v)` are the head count and widths, each at least 1; `state`
/// is read and left holding `S` after the last token; `o` is resized to `(L, num_heads
/// d_v)` in `q`'s dtype.
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule_step(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    a_raw: &Tensor,
    beta: &Tensor,
    log_a: &Tensor,
    heads: (usize, usize, usize),
    state: &mut Tensor,
    o: &mut Tensor,
) -> Result<()> {
    delta_rule(
        "gated_delta_rule_step",
        [q, k, v],
        [a_raw, beta, log_a],
        heads,
        state,
        o,
    )
}

/// The gated delta rule over a prompt of `L` tokens (C++ `gated_delta_rule_chunked`, the
/// prefill form): the same contract as [`gated_delta_rule_step`] and its result to FP32
/// rounding. On the CPU it runs the chunked (WY) form, chunks of 64 tokens as dense
/// products (`brotensor_cpu::delta_rule::gated_delta_rule_chunked`); GPUs run the token
/// scan (every state row in parallel).
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule_chunked(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    a_raw: &Tensor,
    beta: &Tensor,
    log_a: &Tensor,
    heads: (usize, usize, usize),
    state: &mut Tensor,
    o: &mut Tensor,
) -> Result<()> {
    delta_rule(CHUNKED, [q, k, v], [a_raw, beta, log_a], heads, state, o)
}
