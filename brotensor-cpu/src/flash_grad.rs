//! CPU reference of the flash_grad category: flash attention backward passes, FP32 and
//! recompute-based (FA-2 style: per query row the log-sum-exp and `D_i = dO_i . O_i`, then
//! `dQ` per query row and `dK`, `dV` per key row; no `Lq x Lk` matrix is ever stored).
//!
//! Per head `h` (columns `h hd ..`), query row `i` of segment `b`, key `j` of the same
//! segment: `s_ij = q_i . k_j / sqrt(hd)`, kept when the key mask is `> 0.5` and, if causal,
//! `j - ks <= i - qs`; `P = softmax_j(s)`, `O_i = sum_j P_ij v_j`;
//! `dS_ij = P_ij (dO_i . v_j - dO_i . O_i)`, `dQ_i = scale sum_j dS_ij k_j`,
//! `dK_j = scale sum_i dS_ij q_i`, `dV_j = sum_i P_ij dO_i`. A query row with no kept key has
//! a zero output and zero gradient; a key no query keeps has zero `dK`, `dV`.

use rayon::prelude::*;

/// The geometry of a backward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlashBwdGeometry {
    /// Heads; every matrix has `heads * head_dim` columns.
    pub heads: usize,
    /// Columns per head (at least 1).
    pub head_dim: usize,
    /// Key `j` serves query `i` of its segment only when `j - ks <= i - qs`.
    pub causal: bool,
}

/// The operands of a backward pass: `q`, `d_o (rows_q, width)`, `k`, `v (rows_k, width)`,
/// an optional key mask of `rows_k` values, and the segments as prefix sums
/// `cu_q`, `cu_k` (`batch + 1` entries each, starting at 0, nondecreasing, ending at
/// `rows_q` and `rows_k`; one segment `[0, rows_q]`, `[0, rows_k]` without varlen).
#[derive(Debug, Clone, Copy)]
pub struct FlashBwdInputs<'a> {
    /// `Q (rows_q, width)`.
    pub q: &'a [f32],
    /// `K (rows_k, width)`.
    pub k: &'a [f32],
    /// `V (rows_k, width)`.
    pub v: &'a [f32],
    /// `dO (rows_q, width)`.
    pub d_o: &'a [f32],
    /// Key mask (`<= 0.5` drops the key), or none.
    pub mask: Option<&'a [f32]>,
    /// Query-row prefix sums.
    pub cu_q: &'a [usize],
    /// Key-row prefix sums.
    pub cu_k: &'a [usize],
}

/// `sum a[d] b[d]` with eight partial sums (vectorises).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// `sum (a[d] scale) b[d]`, rounded as [`dot`] of the scaled `a` and `b`.
fn dot_scaled(a: &[f32], scale: f32, b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += (x[l] * scale) * y[l];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| (x * scale) * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// `y += a x`.
fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (yv, xv) in y.iter_mut().zip(x) {
        *yv += a * xv;
    }
}

/// The segment holding row `r` (the last `b` with `cu[b] <= r`).
fn segment_of(cu: &[usize], r: usize) -> usize {
    cu[1..cu.len() - 1].partition_point(|&c| c <= r)
}

/// The backward pass: writes the recomputed forward output `o (rows_q, width)` and the
/// gradients `dq (rows_q, width)`, `dk`, `dv (rows_k, width)` (all overwritten).
pub fn flash_attention_backward(
    x: &FlashBwdInputs<'_>,
    g: FlashBwdGeometry,
    o: &mut [f32],
    dq: &mut [f32],
    dk: &mut [f32],
    dv: &mut [f32],
) {
    let (heads, hd) = (g.heads, g.head_dim);
    let width = heads * hd;
    if width == 0 {
        return;
    }
    let rows_q = x.q.len() / width;
    let scale = 1.0 / (hd as f32).sqrt();
    let kept = |j: usize| x.mask.is_none_or(|m| m[j] > 0.5);
    // The keys query `i` attends: its segment's, cut at the diagonal when causal.
    let keys_of = |i: usize| {
        let b = segment_of(x.cu_q, i);
        let (qs, ks, ke) = (x.cu_q[b], x.cu_k[b], x.cu_k[b + 1]);
        let end = if g.causal {
            ke.min(ks + (i - qs) + 1)
        } else {
            ke
        };
        ks..end.max(ks)
    };
    // Pass 1, per query row: O_i, lse and D_i per head, then dQ_i.
    let mut lse = vec![0.0f32; rows_q * heads];
    let mut delta = vec![0.0f32; rows_q * heads];
    o.par_chunks_mut(width)
        .zip(dq.par_chunks_mut(width))
        .zip(lse.par_chunks_mut(heads).zip(delta.par_chunks_mut(heads)))
        .enumerate()
        .for_each(|(i, ((o_row, dq_row), (lse_row, delta_row)))| {
            let keys = keys_of(i);
            let mut s = vec![0.0f32; keys.len()];
            for h in 0..heads {
                let c = h * hd..(h + 1) * hd;
                let qi: Vec<f32> = x.q[i * width..][c.clone()]
                    .iter()
                    .map(|v| v * scale)
                    .collect();
                let doi = &x.d_o[i * width..][c.clone()];
                let mut m = f32::NEG_INFINITY;
                for (sj, j) in s.iter_mut().zip(keys.clone()) {
                    *sj = if kept(j) {
                        dot(&qi, &x.k[j * width..][c.clone()])
                    } else {
                        f32::NEG_INFINITY
                    };
                    m = m.max(*sj);
                }
                let (oi, dqi) = (&mut o_row[c.clone()], &mut dq_row[c.clone()]);
                oi.fill(0.0);
                dqi.fill(0.0);
                if m == f32::NEG_INFINITY {
                    // No kept key: zero output, zero gradient.
                    lse_row[h] = 0.0;
                    delta_row[h] = 0.0;
                    continue;
                }
                let mut l = 0.0f32;
                for (sj, j) in s.iter().zip(keys.clone()) {
                    if *sj > f32::NEG_INFINITY {
                        let p = (sj - m).exp();
                        l += p;
                        axpy(p, &x.v[j * width..][c.clone()], oi);
                    }
                }
                oi.iter_mut().for_each(|v| *v /= l);
                let row_lse = m + l.ln();
                let d = dot(doi, oi);
                lse_row[h] = row_lse;
                delta_row[h] = d;
                for (sj, j) in s.iter().zip(keys.clone()) {
                    if *sj > f32::NEG_INFINITY {
                        let p = (sj - row_lse).exp();
                        let ds = p * (dot(doi, &x.v[j * width..][c.clone()]) - d);
                        axpy(ds * scale, &x.k[j * width..][c.clone()], dqi);
                    }
                }
            }
        });
    // Pass 2, per key row: dK_j and dV_j over the queries that keep it.
    dk.par_chunks_mut(width)
        .zip(dv.par_chunks_mut(width))
        .enumerate()
        .for_each(|(j, (dk_row, dv_row))| {
            dk_row.fill(0.0);
            dv_row.fill(0.0);
            if !kept(j) {
                return;
            }
            let b = segment_of(x.cu_k, j);
            let (ks, qs, qe) = (x.cu_k[b], x.cu_q[b], x.cu_q[b + 1]);
            let start = if g.causal {
                (qs + (j - ks)).min(qe)
            } else {
                qs
            };
            for h in 0..heads {
                let c = h * hd..(h + 1) * hd;
                let kj = &x.k[j * width..][c.clone()];
                let vj = &x.v[j * width..][c.clone()];
                let (dkj, dvj) = (&mut dk_row[c.clone()], &mut dv_row[c.clone()]);
                for i in start..qe {
                    let qi = &x.q[i * width..][c.clone()];
                    let doi = &x.d_o[i * width..][c.clone()];
                    // The score in pass 1's rounding: (q scale) . k.
                    let s = dot_scaled(qi, scale, kj);
                    let p = (s - lse[i * heads + h]).exp();
                    let ds = p * (dot(doi, vj) - delta[i * heads + h]);
                    axpy(p, doi, dvj);
                    axpy(ds * scale, qi, dkj);
                }
            }
        });
}
