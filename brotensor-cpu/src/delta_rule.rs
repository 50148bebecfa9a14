//! The gated delta rule: the linear attention of Qwen3-Next-class models, a `d_v x d_k`
//! state matrix per head updated token by token (the FLA / Hugging Face order, decay
//! before the delta read):
//!
//! ```text
//! alpha_t = exp(-softplus(a_raw_t) e^{log_A})      beta_t = sigmoid(beta_raw_t)
//! S       = alpha_t S
//! S       = S + beta_t (v_t - S k_t) k_t^T
//! o_t     = S q_t
//! ```
//!
//! Row `i` of a head's state only ever meets `v_t[i]` and the head's `k_t`, `q_t`: the rows
//! evolve independently, so they are the unit of parallel work (on the GPU one unit each),
//! every token in order within a row.

use rayon::prelude::*;

use crate::simd::{wide, MulAdd};

/// The sizes of a gated-delta-rule call: `tokens` rows of `heads` heads, keys and queries of
/// `d_k` and values of `d_v` elements per head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaDims {
    /// Tokens (rows of `q`, `k`, `v`, `o`).
    pub tokens: usize,
    /// Heads.
    pub heads: usize,
    /// Key and query width per head.
    pub d_k: usize,
    /// Value width per head (rows of each head's state).
    pub d_v: usize,
}

/// `ln(1 + e^x)`, and `x` itself above 20 (PyTorch's threshold, where the two agree in f32).
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// `1 / (1 + e^-x)` without overflow: with `e = e^-|x|`, `1 / (1 + e)` for `x >= 0` and
/// `e / (1 + e)` below.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    let e = (-x.abs()).exp();
    if x >= 0.0 {
        1.0 / (1.0 + e)
    } else {
        e / (1.0 + e)
    }
}

/// The gates of one token and head: the decay `alpha = exp(-softplus(a_raw) e^{log_a})` and
/// the write strength `beta = sigmoid(beta_raw)`.
#[inline]
pub fn gates(a_raw: f32, beta_raw: f32, log_a: f32) -> (f32, f32) {
    ((-softplus(a_raw) * log_a.exp()).exp(), sigmoid(beta_raw))
}

/// State rows per rayon job.
const ROWS_PER_JOB: usize = 8;

/// `sum a[j] b[j]` in eight interleaved partial sums (so it vectorizes) with the
/// multiply-adds `m` says, added pairwise.
#[inline(always)]
fn dot(m: MulAdd, a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let mut tail = 0.0f32;
    for (&x, &y) in ac.remainder().iter().zip(bc.remainder()) {
        tail = m.apply(x, y, tail);
    }
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] = m.apply(x[l], y[l], acc[l]);
        }
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// The gated delta rule over `dims.tokens` tokens, every head: `q`, `k` (`(tokens, heads
/// d_k)`), `v` (`(tokens, heads d_v)`), `a_raw` and `beta_raw` (`(tokens, heads)`), `log_a`
/// (`heads`); `state` (`(heads, d_v d_k)`, head `h`'s `S[i][j]` at `h d_v d_k + i d_k + j`)
/// is read and left holding the state after the last token; `o` (`(tokens, heads d_v)`)
/// gets `S q_t` after each token's update. FP32 throughout; nothing happens unless every
/// size is at least 1 (the op refuses empty heads).
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (a_raw, beta_raw, log_a): (&[f32], &[f32], &[f32]),
    dims: DeltaDims,
    state: &mut [f32],
    o: &mut [f32],
) {
    let DeltaDims {
        tokens,
        heads,
        d_k,
        d_v,
    } = dims;
    if tokens == 0 || heads == 0 || d_k == 0 || d_v == 0 {
        return;
    }
    let g: Vec<(f32, f32)> = (0..tokens * heads)
        .map(|i| gates(a_raw[i], beta_raw[i], log_a[i % heads]))
        .collect();
    let width = heads * d_v;
    // Each job: a block of state rows through every token; its outputs, token-major.
    let outs: Vec<(usize, Vec<f32>)> = state
        .par_chunks_mut(ROWS_PER_JOB * d_k)
        .enumerate()
        .map(|(job, rows)| {
            let r0 = job * ROWS_PER_JOB;
            let n = rows.len() / d_k;
            let mut out = vec![0.0f32; tokens * n];
            wide(
                #[inline(always)]
                |m| {
                    for t in 0..tokens {
                        for i in 0..n {
                            let r = r0 + i;
                            let h = r / d_v;
                            let (alpha, beta) = g[t * heads + h];
                            let kt = &k[(t * heads + h) * d_k..][..d_k];
                            let qt = &q[(t * heads + h) * d_k..][..d_k];
                            let s = &mut rows[i * d_k..(i + 1) * d_k];
                            let bu = beta * (v[t * width + r] - alpha * dot(m, s, kt));
                            for (sj, &kj) in s.iter_mut().zip(kt) {
                                *sj = m.apply(alpha, *sj, bu * kj);
                            }
                            out[t * n + i] = dot(m, s, qt);
                        }
                    }
                },
            );
            (r0, out)
        })
        .collect();
    for (r0, out) in outs {
        let n = out.len() / tokens;
        for t in 0..tokens {
            o[t * width + r0..][..n].copy_from_slice(&out[t * n..(t + 1) * n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_token_from_a_zero_state_writes_beta_v_k() {
        // S = beta v k^T, o = beta v (k.q); alpha does not matter from zero.
        let dims = DeltaDims {
            tokens: 1,
            heads: 1,
            d_k: 2,
            d_v: 3,
        };
        let (q, k, v) = ([1.0f32, 2.0], [0.5f32, -1.0], [1.0f32, 2.0, 3.0]);
        let mut state = vec![0.0f32; 6];
        let mut o = vec![0.0f32; 3];
        gated_delta_rule(
            &q,
            &k,
            &v,
            (&[0.3], &[0.0], &[0.1]),
            dims,
            &mut state,
            &mut o,
        );
        let kq = 0.5 - 2.0;
        assert_eq!(o, [0.5 * kq, 1.0 * kq, 1.5 * kq]);
        assert_eq!(state, [0.25, -0.5, 0.5, -1.0, 0.75, -1.5]);
    }

    #[test]
    fn gates_saturate_without_overflow() {
        assert_eq!(sigmoid(-200.0), 0.0);
        assert_eq!(sigmoid(200.0), 1.0);
        assert_eq!(softplus(30.0), 30.0);
        let (alpha, beta) = gates(200.0, 0.0, 0.0);
        assert_eq!((alpha, beta), (0.0, 0.5));
    }
}
