//! Tests of the flash_grad ops: the three backward passes on every device and dtype against
//! float64 attention gradients written here (the softmax Jacobian spelled out), which are
//! themselves checked against central finite differences of the f64 forward.

use brotensor::{ops, Device, Dtype, Error, Tensor};
use brotensor_tests::{read_f32, reference_with, tensor, tolerance, Check, Input};

mod errors;
mod long;
mod passes;
mod qkvo;
mod reference;

// ---------------------------------------------------------------------------------------
// The float64 reference.

/// An attention problem: heads, head dim, causal, an optional key mask, the segments.
#[derive(Clone)]
struct Attn {
    heads: usize,
    hd: usize,
    causal: bool,
    mask: Option<Vec<f32>>,
    cu_q: Vec<usize>,
    cu_k: Vec<usize>,
}

impl Attn {
    /// One segment of `lq` queries and `lk` keys.
    fn dense(lq: usize, lk: usize, heads: usize, hd: usize, causal: bool) -> Self {
        Attn {
            heads,
            hd,
            causal,
            mask: None,
            cu_q: vec![0, lq],
            cu_k: vec![0, lk],
        }
    }

    fn width(&self) -> usize {
        self.heads * self.hd
    }

    fn rows_q(&self) -> usize {
        *self.cu_q.last().unwrap()
    }

    fn rows_k(&self) -> usize {
        *self.cu_k.last().unwrap()
    }

    /// The keys query `i` of segment `b` attends.
    fn keys(&self, b: usize, i: usize) -> Vec<usize> {
        let (qs, ks, ke) = (self.cu_q[b], self.cu_k[b], self.cu_k[b + 1]);
        (ks..ke)
            .filter(|&j| self.mask.as_ref().is_none_or(|m| m[j] > 0.5))
            .filter(|&j| !self.causal || j - ks <= i - qs)
            .collect()
    }
}

/// `[O, dQ, dK, dV]` of attention in f64: per row the softmax `p` of the scaled scores, then
/// `dS_j = sum_l (dp_l / ds_j) dP_l` with the Jacobian `dp_l / ds_j = p_l (delta_lj - p_j)`.
fn attention_grads(a: &Attn, q: &[f64], k: &[f64], v: &[f64], d_o: &[f64]) -> [Vec<f64>; 4] {
    let w = a.width();
    let scale = 1.0 / (a.hd as f64).sqrt();
    let mut o = vec![0.0; q.len()];
    let mut dq = vec![0.0; q.len()];
    let mut dk = vec![0.0; k.len()];
    let mut dv = vec![0.0; v.len()];
    for b in 0..a.cu_q.len() - 1 {
        for i in a.cu_q[b]..a.cu_q[b + 1] {
            let keys = a.keys(b, i);
            if keys.is_empty() {
                continue;
            }
            for h in 0..a.heads {
                let at = |r: usize, d: usize| r * w + h * a.hd + d;
                let s: Vec<f64> = keys
                    .iter()
                    .map(|&j| scale * (0..a.hd).map(|d| q[at(i, d)] * k[at(j, d)]).sum::<f64>())
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                let p: Vec<f64> = e.iter().map(|x| x / z).collect();
                let dp: Vec<f64> = keys
                    .iter()
                    .map(|&j| (0..a.hd).map(|d| d_o[at(i, d)] * v[at(j, d)]).sum::<f64>())
                    .collect();
                for (jj, &j) in keys.iter().enumerate() {
                    let ds: f64 = (0..keys.len())
                        .map(|l| p[l] * (if l == jj { 1.0 } else { 0.0 } - p[jj]) * dp[l])
                        .sum();
                    for d in 0..a.hd {
                        o[at(i, d)] += p[jj] * v[at(j, d)];
                        dq[at(i, d)] += scale * ds * k[at(j, d)];
                        dk[at(j, d)] += scale * ds * q[at(i, d)];
                        dv[at(j, d)] += p[jj] * d_o[at(i, d)];
                    }
                }
            }
        }
    }
    [o, dq, dk, dv]
}

/// `y (n, out) = x (n, in) w^T + b`.
fn linear(x: &[f64], w: &[f64], b: Option<&[f64]>, out: usize) -> Vec<f64> {
    let inp = w.len() / out;
    let n = x.len() / inp;
    let mut y = vec![0.0; n * out];
    for r in 0..n {
        for c in 0..out {
            y[r * out + c] = (0..inp)
                .map(|t| x[r * inp + t] * w[c * inp + t])
                .sum::<f64>()
                + b.map_or(0.0, |b| b[c]);
        }
    }
    y
}

/// `dx = dy w` (dy (n, out), w (out, in)), `dW = dy^T x`, `db = sum_rows dy`.
fn linear_back(x: &[f64], w: &[f64], dy: &[f64], out: usize) -> [Vec<f64>; 3] {
    let inp = w.len() / out;
    let n = dy.len() / out;
    let mut dx = vec![0.0; n * inp];
    let mut dw = vec![0.0; out * inp];
    let mut db = vec![0.0; out];
    for r in 0..n {
        for c in 0..out {
            let g = dy[r * out + c];
            db[c] += g;
            for t in 0..inp {
                dx[r * inp + t] += g * w[c * inp + t];
                dw[c * inp + t] += g * x[r * inp + t];
            }
        }
    }
    [dx, dw, db]
}

/// The parameters of attention with projections, in f64: `[x, ctx, wq, bq, wk, bk, wv, bv,
/// wo, bo]` (`ctx` empty for self-attention, biases empty when absent).
struct Qkvo {
    attn: Attn,
    p: Vec<Vec<f64>>,
}

impl Qkvo {
    fn d(&self) -> usize {
        self.attn.width()
    }

    fn ctx(&self) -> &[f64] {
        if self.p[1].is_empty() {
            &self.p[0]
        } else {
            &self.p[1]
        }
    }

    fn bias(&self, at: usize) -> Option<&[f64]> {
        Some(&self.p[at][..]).filter(|b| !b.is_empty())
    }

    /// `(Q, K, V)`.
    fn projections(&self) -> [Vec<f64>; 3] {
        let d = self.d();
        [
            linear(&self.p[0], &self.p[2], self.bias(3), d),
            linear(self.ctx(), &self.p[4], self.bias(5), d),
            linear(self.ctx(), &self.p[6], self.bias(7), d),
        ]
    }

    /// The forward output `O = attention(Q, K, V) Wo^T + bo`.
    fn forward(&self) -> Vec<f64> {
        let [q, k, v] = self.projections();
        let zeros = vec![0.0; q.len()];
        let [a, ..] = attention_grads(&self.attn, &q, &k, &v, &zeros);
        linear(&a, &self.p[8], self.bias(9), self.d())
    }

    /// The gradients of `sum O * d_o` by each parameter, in `p`'s order (`dctx` folded into
    /// `dx` for self-attention and left empty).
    fn grads(&self, d_o: &[f64]) -> Vec<Vec<f64>> {
        let d = self.d();
        let [q, k, v] = self.projections();
        // dA = dO Wo.
        let lq = d_o.len() / d;
        let mut da = vec![0.0; lq * d];
        for r in 0..lq {
            for m in 0..d {
                da[r * d + m] = (0..d).map(|n| d_o[r * d + n] * self.p[8][n * d + m]).sum();
            }
        }
        let [a, dq, dk, dv] = attention_grads(&self.attn, &q, &k, &v, &da);
        let [_, dwo, dbo] = linear_back(&a, &self.p[8], d_o, d);
        let [dxq, dwq, dbq] = linear_back(&self.p[0], &self.p[2], &dq, d);
        let [dck, dwk, dbk] = linear_back(self.ctx(), &self.p[4], &dk, d);
        let [dcv, dwv, dbv] = linear_back(self.ctx(), &self.p[6], &dv, d);
        let dc: Vec<f64> = dck.iter().zip(&dcv).map(|(a, b)| a + b).collect();
        let (dx, dctx) = if self.p[1].is_empty() {
            (dxq.iter().zip(&dc).map(|(a, b)| a + b).collect(), vec![])
        } else {
            (dxq, dc)
        };
        let keep = |g: Vec<f64>, at: usize| if self.p[at].is_empty() { vec![] } else { g };
        vec![
            dx,
            dctx,
            dwq,
            keep(dbq, 3),
            dwk,
            keep(dbk, 5),
            dwv,
            keep(dbv, 7),
            dwo,
            keep(dbo, 9),
        ]
    }
}

fn random(seed: u64, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    let mut rng = brotensor_tests::SplitMix64::new(seed);
    (0..n)
        .map(|_| lo + (hi - lo) * rng.next_f01() as f64)
        .collect()
}

/// Central differences of `f` at `x`, every element.
fn central_differences(x: &[f64], f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let h = 1e-6;
    (0..x.len())
        .map(|i| {
            let mut up = x.to_vec();
            let mut down = x.to_vec();
            up[i] += h;
            down[i] -= h;
            (f(&up) - f(&down)) / (2.0 * h)
        })
        .collect()
}

/// Checks `analytic` against `numeric`; `nonzero` also demands a gradient that is not
/// (numerically) zero, so the comparison means something.
fn assert_fd(tag: &str, analytic: &[f64], numeric: &[f64], nonzero: bool) {
    assert_eq!(analytic.len(), numeric.len(), "{tag}");
    let scale = numeric.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(!nonzero || scale > 1e-3, "{tag}: a vacuous gradient");
    for (i, (a, n)) in analytic.iter().zip(numeric).enumerate() {
        assert!(
            (a - n).abs() <= 1e-6 * scale.max(1.0),
            "{tag}[{i}]: analytic {a} vs finite difference {n}"
        );
    }
}

/// Scale-relative tolerances of the core's gradients: FP32 sums of many terms; 16-bit results
/// differ from the reference by their own rounding ([`tolerance`]).
fn grad_tol(dtype: Dtype) -> (f32, f32) {
    match dtype {
        Dtype::F32 => (2e-5, 2e-4),
        other => tolerance(other),
    }
}

/// The qkvo backward's tolerances: 16-bit runs round every intermediate (the projections,
/// `dA`, the core's gradients), and the bias gradients sum rounded rows.
fn qkvo_tol(dtype: Dtype) -> (f32, f32) {
    match dtype {
        Dtype::F16 => (1e-2, 2e-2),
        Dtype::BF16 => (5e-2, 5e-2),
        _ => (2e-5, 2e-4),
    }
}

const ALL: &[Dtype] = &[Dtype::F32, Dtype::F16, Dtype::BF16];

/// `dQ`, `dK`, `dV` stacked by rows into one tensor on `like`'s device and dtype.
fn stacked(like: &Tensor, parts: &[&Tensor]) -> brotensor::Result<Tensor> {
    let mut all = Vec::new();
    let mut rows = 0;
    for p in parts {
        all.extend(read_f32(p)?);
        rows += p.rows();
    }
    tensor(like.device(), &all, rows, like.cols(), like.dtype())
}

fn mask_on(device: Device, mask: &Option<Vec<f32>>) -> Option<Tensor> {
    mask.as_ref()
        .map(|m| Tensor::from_slice_on(device, m, 1, m.len()).expect("mask"))
}

fn zeros(rows: usize, cols: usize) -> Tensor {
    Tensor::zeros(rows, cols, Dtype::F32).unwrap()
}

fn backward(
    (q, k, v, d_o): (&Tensor, &Tensor, &Tensor, &Tensor),
    mask: Option<&Tensor>,
    heads: usize,
    causal: bool,
) -> brotensor::Result<()> {
    let (mut dq, mut dk, mut dv) = Default::default();
    ops::flash_attention_backward(
        q,
        k,
        v,
        &Tensor::default(),
        d_o,
        mask,
        heads,
        causal,
        &mut dq,
        &mut dk,
        &mut dv,
    )
}

fn expect_err(tag: &str, r: brotensor::Result<()>, op: &str, what: &str) -> Error {
    let e = r.expect_err(tag);
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("brotensor: {op}:")) && msg.contains(what),
        "{tag}: unexpected error: {msg}"
    );
    e
}
