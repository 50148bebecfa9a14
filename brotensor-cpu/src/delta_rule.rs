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

use crate::linear::{matmul, Mat};
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

/// Tokens per chunk of [`gated_delta_rule_chunked`].
pub const CHUNK: usize = 64;

/// One head's rows of a token-major `(tokens, heads w)` tensor for tokens `t0 .. t0 + c`,
/// gathered contiguous (`c x w`).
fn head_rows(
    x: &[f32],
    (t0, c): (usize, usize),
    (heads, h, w): (usize, usize, usize),
    out: &mut Vec<f32>,
) {
    out.clear();
    for t in t0..t0 + c {
        out.extend_from_slice(&x[(t * heads + h) * w..][..w]);
    }
}

/// `y += a x` over the slices' common length.
#[inline(always)]
fn axpy(m: MulAdd, a: f32, x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = m.apply(a, x, *y);
    }
}

/// The gated delta rule over a prompt in the chunked (WY) form: the same result as
/// [`gated_delta_rule`] to FP32 rounding, with the work of each chunk of [`CHUNK`] tokens as
/// dense products instead of a token-by-token scan. Per head and chunk, with `G_t` the
/// running sum of the chunk's log-decays and `S_0` the state before it:
///
/// ```text
/// u_t = beta_t (v_t - e^{G_t} S_0 k_t) - beta_t sum_{s<t} e^{G_t - G_s} (k_t . k_s) u_s
/// o_t = e^{G_t} S_0 q_t + sum_{s<=t} e^{G_t - G_s} (q_t . k_s) u_s
/// S   = e^{G_c} S_0 + sum_s e^{G_c - G_s} u_s k_s^T
/// ```
///
/// (the first line a forward substitution through the chunk's unit lower-triangular
/// system; `K S_0^T`, `Q S_0^T`, `K K^T`, `Q K^T` and the state update are GEMMs). The
/// decay ratios `e^{G_t - G_s}` are running products of the tokens' `alpha`
/// (at most 1, so nothing overflows; one multiply each instead of an exponential). Heads
/// run in parallel. Arguments as [`gated_delta_rule`].
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule_chunked(
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
    let outs: Vec<Vec<f32>> = state
        .par_chunks_mut(d_v * d_k)
        .enumerate()
        .map(|(h, s)| {
            let mut out = vec![0.0f32; tokens * d_v];
            let (mut qc, mut kc, mut vc) = (Vec::new(), Vec::new(), Vec::new());
            let mut u = vec![0.0f32; CHUNK * d_v];
            let mut qs = vec![0.0f32; CHUNK * d_v];
            let mut kk = vec![0.0f32; CHUNK * CHUNK];
            let mut qk = vec![0.0f32; CHUNK * CHUNK];
            let mut alpha = [0.0f32; CHUNK];
            let mut beta = [0.0f32; CHUNK];
            let mut t0 = 0;
            while t0 < tokens {
                let c = CHUNK.min(tokens - t0);
                head_rows(q, (t0, c), (heads, h, d_k), &mut qc);
                head_rows(k, (t0, c), (heads, h, d_k), &mut kc);
                head_rows(v, (t0, c), (heads, h, d_v), &mut vc);
                for t in 0..c {
                    let i = (t0 + t) * heads + h;
                    (alpha[t], beta[t]) = gates(a_raw[i], beta_raw[i], log_a[h]);
                }
                let (u, qs) = (&mut u[..c * d_v], &mut qs[..c * d_v]);
                let (kk, qk) = (&mut kk[..c * c], &mut qk[..c * c]);
                let (km, qm) = (Mat::new(&kc, c, d_k), Mat::new(&qc, c, d_k));
                // K S_0^T, Q S_0^T, K K^T and Q K^T as products.
                let s0 = Mat::new(s, d_v, d_k).t();
                matmul(km, s0, u, false);
                matmul(qm, s0, qs, false);
                matmul(km, km.t(), kk, false);
                matmul(qm, km.t(), qk, false);
                let mut e = 1.0f32;
                wide(
                    #[inline(always)]
                    |m| {
                        // u_t = beta_t (v_t - e^{G_t} S_0 k_t), qs_t = e^{G_t} S_0 q_t.
                        for t in 0..c {
                            e *= alpha[t];
                            let b = beta[t];
                            let (ut, vt) = (&mut u[t * d_v..][..d_v], &vc[t * d_v..][..d_v]);
                            for (x, &y) in ut.iter_mut().zip(vt) {
                                *x = b * (y - e * *x);
                            }
                            for x in &mut qs[t * d_v..][..d_v] {
                                *x *= e;
                            }
                        }
                        // Forward substitution (e^{G_t - G_s} as a running product of
                        // alpha, s = t - 1 down to 0), then o_t from the finished rows.
                        for t in 0..c {
                            let (done, rest) = u.split_at_mut(t * d_v);
                            let ut = &mut rest[..d_v];
                            let mut ratio = 1.0f32;
                            for sidx in (0..t).rev() {
                                ratio *= alpha[sidx + 1];
                                let w = beta[t] * ratio * kk[t * c + sidx];
                                axpy(m, -w, &done[sidx * d_v..][..d_v], ut);
                            }
                            let ot = &mut out[(t0 + t) * d_v..][..d_v];
                            ot.copy_from_slice(&qs[t * d_v..][..d_v]);
                            axpy(m, qk[t * c + t], ut, ot);
                            let mut ratio = 1.0f32;
                            for sidx in (0..t).rev() {
                                ratio *= alpha[sidx + 1];
                                axpy(m, ratio * qk[t * c + sidx], &done[sidx * d_v..][..d_v], ot);
                            }
                        }
                        // S = e^{G_c} S_0 + sum_s e^{G_c - G_s} u_s k_s^T: the rows of u
                        // scaled by their ratio, then one product.
                        for x in s.iter_mut() {
                            *x *= e;
                        }
                        let mut ratio = 1.0f32;
                        for sidx in (0..c).rev() {
                            if sidx + 1 < c {
                                ratio *= alpha[sidx + 1];
                            }
                            for x in &mut u[sidx * d_v..][..d_v] {
                                *x *= ratio;
                            }
                        }
                    },
                );
                matmul(Mat::new(u, c, d_v).t(), km, s, true);
                t0 += c;
            }
            out
        })
        .collect();
    let width = heads * d_v;
    for (h, out) in outs.iter().enumerate() {
        for t in 0..tokens {
            o[t * width + h * d_v..][..d_v].copy_from_slice(&out[t * d_v..][..d_v]);
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
    fn the_chunked_form_follows_the_scan_across_chunks() {
        let dims = DeltaDims {
            tokens: 150,
            heads: 2,
            d_k: 9,
            d_v: 5,
        };
        let mut seed = 7u64;
        let mut draw = |n: usize, scale: f32| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
                })
                .collect()
        };
        let (t, h) = (dims.tokens, dims.heads);
        let (q, k) = (draw(t * h * 9, 0.5), draw(t * h * 9, 0.5));
        let v = draw(t * h * 5, 1.0);
        let (a, b, la) = (draw(t * h, 3.0), draw(t * h, 3.0), draw(h, 1.0));
        let s0 = draw(h * 45, 0.5);
        let (mut s1, mut s2) = (s0.clone(), s0);
        let (mut o1, mut o2) = (vec![0.0; t * h * 5], vec![0.0; t * h * 5]);
        gated_delta_rule(&q, &k, &v, (&a, &b, &la), dims, &mut s1, &mut o1);
        gated_delta_rule_chunked(&q, &k, &v, (&a, &b, &la), dims, &mut s2, &mut o2);
        let scale = o1.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        for (x, y) in o1.iter().zip(&o2).chain(s1.iter().zip(&s2)) {
            assert!((x - y).abs() <= 1e-5 * scale.max(1.0), "{x} vs {y}");
        }
        assert!(scale > 0.1);
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
