//! Tests of the flash_grad ops: the three backward passes on every device and dtype against
//! float64 attention gradients written here (the softmax Jacobian spelled out), which are
//! themselves checked against central finite differences of the f64 forward.

use brotensor::{ops, Device, Dtype, Error, Tensor};
use brotensor_tests::{read_f32, reference_with, tensor, tolerance, Check, Input};

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

#[test]
fn reference_gradients_match_finite_differences() {
    let mut masked = Attn::dense(3, 5, 2, 3, false);
    masked.mask = Some(vec![1.0, 0.0, 1.0, 1.0, 0.7]);
    let mut causal = Attn::dense(4, 4, 2, 3, true);
    // Key 0 hidden: query 0 keeps no key (a zero row).
    causal.mask = Some(vec![0.0, 1.0, 1.0, 1.0]);
    let mut varlen = Attn::dense(0, 0, 1, 4, true);
    varlen.cu_q = vec![0, 2, 5, 6];
    varlen.cu_k = vec![0, 2, 5, 6];
    for (tag, a) in [("masked", masked), ("causal", causal), ("varlen", varlen)] {
        let w = a.width();
        let (nq, nk) = (a.rows_q() * w, a.rows_k() * w);
        let q = random(1, nq, -1.5, 1.5);
        let k = random(2, nk, -1.5, 1.5);
        let v = random(3, nk, -1.0, 1.0);
        let d_o = random(4, nq, -1.0, 1.0);
        let loss = |q: &[f64], k: &[f64], v: &[f64]| {
            let [o, ..] = attention_grads(&a, q, k, v, &d_o);
            o.iter().zip(&d_o).map(|(a, b)| a * b).sum::<f64>()
        };
        let [_, dq, dk, dv] = attention_grads(&a, &q, &k, &v, &d_o);
        assert_fd(
            &format!("{tag} dq"),
            &dq,
            &central_differences(&q, |x| loss(x, &k, &v)),
            true,
        );
        assert_fd(
            &format!("{tag} dk"),
            &dk,
            &central_differences(&k, |x| loss(&q, x, &v)),
            true,
        );
        assert_fd(
            &format!("{tag} dv"),
            &dv,
            &central_differences(&v, |x| loss(&q, &k, x)),
            true,
        );
    }
}

#[test]
fn qkvo_reference_matches_finite_differences() {
    for cross in [false, true] {
        let (lq, d, dc) = (3, 4, 3);
        let lk = if cross { 5 } else { lq };
        let mut attn = Attn::dense(lq, lk, 2, 2, !cross);
        attn.mask = Some(if cross {
            vec![1.0, 0.0, 1.0, 1.0, 1.0]
        } else {
            vec![1.0; lk]
        });
        let dctx = if cross { dc } else { d };
        let sizes = [
            lq * d,
            if cross { lk * dc } else { 0 },
            d * d,
            d,
            d * dctx,
            if cross { 0 } else { d },
            d * dctx,
            d,
            d * d,
            d,
        ];
        let p: Vec<Vec<f64>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| random(10 + i as u64, n, -1.0, 1.0))
            .collect();
        let m = Qkvo { attn, p };
        let d_o = random(9, lq * d, -1.0, 1.0);
        let grads = m.grads(&d_o);
        for (at, g) in grads.iter().enumerate() {
            if m.p[at].is_empty() {
                continue;
            }
            let numeric = central_differences(&m.p[at], |x| {
                let mut p = m.p.clone();
                p[at] = x.to_vec();
                let moved = Qkvo {
                    attn: m.attn.clone(),
                    p,
                };
                moved.forward().iter().zip(&d_o).map(|(a, b)| a * b).sum()
            });
            // The key bias shifts every score of a row by the same amount: softmax ignores
            // it, so its gradient is zero (and checked to be).
            assert_fd(
                &format!("qkvo cross={cross} param {at}"),
                g,
                &numeric,
                at != 5,
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// The ops against the reference, on every device and dtype.

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

/// Runs `flash_attention_backward` (or the varlen form when `varlen`) for `a` on every
/// device and dtype against [`attention_grads`].
fn check_backward(case: &str, seed: u64, a: &Attn, varlen: bool) {
    let w = a.width();
    let (lq, lk) = (a.rows_q(), a.rows_k());
    let inputs = [
        Input::new(lq, w, -2.0, 2.0),
        Input::new(lk, w, -2.0, 2.0),
        Input::new(lk, w, -1.0, 1.0),
        Input::new(lq, w, -1.0, 1.0),
    ];
    let check = Check {
        dtypes: ALL,
        tol: Some(grad_tol),
        ..Check::default()
    };
    let op = |t: &[Tensor]| {
        let device = t[0].device();
        // Stale values in the outputs must not survive: they are overwritten.
        let junk = |rows| tensor(device, &vec![7.0; rows * w], rows, w, t[0].dtype());
        let (mut dq, mut dk, mut dv) = (junk(lq)?, junk(lk)?, junk(lk)?);
        if varlen {
            let cu = |c: &[usize]| {
                let c: Vec<i32> = c.iter().map(|&v| v as i32).collect();
                Tensor::from_slice_on(device, &c, 1, c.len())
            };
            let longest = |c: &[usize]| c.windows(2).map(|p| p[1] - p[0]).max().unwrap_or(0);
            ops::flash_attention_varlen_backward(
                &t[0],
                &t[1],
                &t[2],
                &Tensor::default(),
                &t[3],
                &cu(&a.cu_q)?,
                &cu(&a.cu_k)?,
                a.cu_q.len() - 1,
                longest(&a.cu_q),
                longest(&a.cu_k),
                a.heads,
                a.hd,
                a.causal,
                &mut dq,
                &mut dk,
                &mut dv,
            )?;
        } else {
            let mask = mask_on(device, &a.mask);
            ops::flash_attention_backward(
                &t[0],
                &t[1],
                &t[2],
                &Tensor::default(),
                &t[3],
                mask.as_ref(),
                a.heads,
                a.causal,
                &mut dq,
                &mut dk,
                &mut dv,
            )?;
        }
        stacked(&t[0], &[&dq, &dk, &dv])
    };
    reference_with(case, seed, &inputs, check, op, |x| {
        let [_, dq, dk, dv] = attention_grads(a, &x[0], &x[1], &x[2], &x[3]);
        [dq, dk, dv].concat()
    });
}

#[test]
fn backward_rectangular_head_dims() {
    for (i, (lq, lk, heads, hd)) in [(20, 33, 2, 40), (9, 40, 2, 64), (24, 17, 1, 128)]
        .into_iter()
        .enumerate()
    {
        let a = Attn::dense(lq, lk, heads, hd, false);
        check_backward(
            &format!("flash_attention_backward {lq}x{lk} h{heads} hd{hd}"),
            0xF1A0 + i as u64,
            &a,
            false,
        );
    }
}

#[test]
fn backward_causal() {
    for (i, (l, heads, hd)) in [(17, 2, 64), (30, 1, 40), (12, 1, 128)]
        .into_iter()
        .enumerate()
    {
        let a = Attn::dense(l, l, heads, hd, true);
        check_backward(
            &format!("flash_attention_backward causal {l} h{heads} hd{hd}"),
            0xF1B0 + i as u64,
            &a,
            false,
        );
    }
}

#[test]
fn backward_masked_keys_and_rows() {
    // Some keys hidden (including values at and near the 0.5 threshold).
    let mut a = Attn::dense(14, 26, 2, 64, false);
    a.mask = Some(
        (0..26)
            .map(|j| match j % 5 {
                0 => 0.0,
                1 => 0.5,
                2 => 0.51,
                _ => 1.0,
            })
            .collect(),
    );
    check_backward("flash_attention_backward masked keys", 0xF1C0, &a, false);
    // Causal with keys 0 and 1 hidden: query rows 0 and 1 keep no key (zero gradient rows).
    let mut a = Attn::dense(19, 19, 2, 40, true);
    a.mask = Some(
        (0..19)
            .map(|j| if j < 2 || j == 7 { 0.0 } else { 1.0 })
            .collect(),
    );
    check_backward("flash_attention_backward masked rows", 0xF1C1, &a, false);
    // Every key hidden: every gradient is zero.
    let mut a = Attn::dense(6, 9, 1, 64, false);
    a.mask = Some(vec![0.0; 9]);
    check_backward("flash_attention_backward all masked", 0xF1C2, &a, false);
}

#[test]
fn backward_without_queries_or_keys() {
    // No key: every query row is empty (zero dQ); no query: zero dK, dV.
    for (i, (lq, lk)) in [(5, 0), (0, 6)].into_iter().enumerate() {
        let a = Attn::dense(lq, lk, 2, 40, false);
        check_backward(
            &format!("flash_attention_backward {lq}x{lk}"),
            0xF1C8 + i as u64,
            &a,
            false,
        );
    }
}

#[test]
fn gpu_backward_refuses_head_dims_past_the_kernel_limit() {
    // The GPU kernels hold one head row per cube (256 columns); the CPU has no limit.
    let (l, hd) = (3, 264);
    for device in brotensor_tests::gpu_devices() {
        let t = Tensor::zeros_on(device, l, hd, Dtype::F32).unwrap();
        let (mut dq, mut dk, mut dv) = Default::default();
        let r = ops::flash_attention_backward(
            &t,
            &t,
            &t,
            &Tensor::default(),
            &t,
            None,
            1,
            false,
            &mut dq,
            &mut dk,
            &mut dv,
        );
        expect_err(
            "head_dim 264",
            r,
            "flash_attention_backward",
            "exceeds the GPU kernels' 256",
        );
    }
    let t = zeros(l, hd);
    backward((&t, &t, &t, &t), None, 1, false).expect("the CPU takes any head_dim");
}

#[test]
fn varlen_backward_three_sequences() {
    let mut a = Attn::dense(0, 0, 2, 64, false);
    a.cu_q = vec![0, 5, 14, 17];
    a.cu_k = vec![0, 7, 11, 17];
    check_backward("flash_attention_varlen_backward", 0xF1D0, &a, true);
    let mut a = Attn::dense(0, 0, 2, 40, true);
    a.cu_q = vec![0, 6, 16, 19];
    a.cu_k = a.cu_q.clone();
    check_backward("flash_attention_varlen_backward causal", 0xF1D1, &a, true);
    // A sequence with no keys, and one with no queries: zero gradients there.
    let mut a = Attn::dense(0, 0, 1, 128, false);
    a.cu_q = vec![0, 4, 4, 9];
    a.cu_k = vec![0, 3, 8, 8];
    check_backward("flash_attention_varlen_backward empty", 0xF1D2, &a, true);
}

/// Runs `flash_attention_qkvo_backward` on every device and dtype against [`Qkvo::grads`]
/// (each gradient checked in its own pass), with the parameter gradients pre-filled.
fn check_qkvo(case: &str, seed: u64, cross: bool, causal: bool) {
    let (lq, heads, hd, dc) = (11, 2, 32, 24);
    let d = heads * hd;
    let lk = if cross { 15 } else { lq };
    let dctx = if cross { dc } else { d };
    let mut attn = Attn::dense(lq, lk, heads, hd, causal);
    if cross {
        attn.mask = Some(
            (0..lk)
                .map(|j| if j % 4 == 1 { 0.0 } else { 1.0 })
                .collect(),
        );
    }
    let biased = !cross;
    // x, ctx, wq, bq, wk, bk, wv, bv, wo, bo, d_o, then the pre-filled dW*, db*.
    let wr = 0.3;
    let mut inputs = vec![
        Input::new(lq, d, -1.0, 1.0),
        Input::new(lk, dctx, -1.0, 1.0),
        Input::new(d, d, -wr, wr),
        Input::new(d, 1, -0.5, 0.5),
        Input::new(d, dctx, -wr, wr),
        Input::new(d, 1, -0.5, 0.5),
        Input::new(d, dctx, -wr, wr),
        Input::new(d, 1, -0.5, 0.5),
        Input::new(d, d, -wr, wr),
        Input::new(d, 1, -0.5, 0.5),
        Input::new(lq, d, -1.0, 1.0),
    ];
    let grad_shapes = [
        (d, d),
        (d, 1),
        (d, dctx),
        (d, 1),
        (d, dctx),
        (d, 1),
        (d, d),
        (d, 1),
    ];
    inputs.extend(
        grad_shapes
            .iter()
            .map(|&(r, c)| Input::new(r, c, -0.2, 0.2)),
    );
    let check = Check {
        dtypes: ALL,
        tol: Some(qkvo_tol),
        ..Check::default()
    };
    let names = [
        "dx", "dctx", "dwq", "dbq", "dwk", "dbk", "dwv", "dbv", "dwo", "dbo",
    ];
    for (which, name) in names.iter().enumerate() {
        let is_bias = matches!(which, 3 | 5 | 7 | 9);
        if (which == 1 && !cross) || (is_bias && !biased) {
            continue;
        }
        let op = |t: &[Tensor]| {
            let device = t[0].device();
            let b = |i: usize| biased.then_some(&t[i]);
            let mut dx = tensor(device, &vec![7.0; lq * d], lq, d, t[0].dtype())?;
            let mut dctx = Tensor::default();
            // The accumulators start from the pre-filled inputs 11.. (deep copies).
            let mut acc: Vec<Tensor> = t[11..].to_vec();
            let [dwq, dbq, dwk, dbk, dwv, dbv, dwo, dbo] = &mut acc[..] else {
                unreachable!()
            };
            let grads = ops::QkvoGrads {
                dx: &mut dx,
                dctx: cross.then_some(&mut dctx),
                dwq,
                dbq: biased.then_some(dbq),
                dwk,
                dbk: biased.then_some(dbk),
                dwv,
                dbv: biased.then_some(dbv),
                dwo,
                dbo: biased.then_some(dbo),
            };
            let mask = mask_on(device, &attn.mask);
            ops::flash_attention_qkvo_backward(
                &t[0],
                cross.then_some(&t[1]),
                &t[2],
                b(3),
                &t[4],
                b(5),
                &t[6],
                b(7),
                &t[8],
                b(9),
                mask.as_ref(),
                heads,
                causal,
                &t[10],
                grads,
            )?;
            Ok(match which {
                0 => dx,
                1 => dctx,
                _ => acc[which - 2].clone(),
            })
        };
        reference_with(&format!("{case} {name}"), seed, &inputs, check, op, |x| {
            let mut p: Vec<Vec<f64>> = x[..10].to_vec();
            if !cross {
                p[1].clear();
            }
            if !biased {
                for at in [3, 5, 7, 9] {
                    p[at].clear();
                }
            }
            let m = Qkvo {
                attn: attn.clone(),
                p,
            };
            let mut g = m.grads(&x[10]).swap_remove(which);
            if which >= 2 {
                // Parameter gradients accumulate onto the pre-filled values.
                for (v, pre) in g.iter_mut().zip(&x[11 + which - 2]) {
                    *v += pre;
                }
            }
            g
        });
    }
}

#[test]
fn qkvo_backward_self_attention_causal_with_biases() {
    check_qkvo("flash_attention_qkvo_backward self", 0xF1E0, false, true);
}

#[test]
fn qkvo_backward_cross_attention_masked() {
    check_qkvo("flash_attention_qkvo_backward cross", 0xF1E1, true, false);
}

// ---------------------------------------------------------------------------------------
// Errors.

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

#[test]
fn backward_rejects_bad_arguments() {
    let op = "flash_attention_backward";
    let (q, k) = (zeros(4, 8), zeros(6, 8));
    let e = expect_err(
        "k columns",
        backward((&q, &zeros(6, 4), &zeros(6, 4), &q), None, 2, false),
        op,
        "need q, d_o (Lq, D)",
    );
    assert!(matches!(e, Error::Shape { .. }));
    expect_err(
        "v rows",
        backward((&q, &k, &zeros(5, 8), &q), None, 2, false),
        op,
        "need q",
    );
    expect_err(
        "d_o shape",
        backward((&q, &k, &k, &zeros(4, 6)), None, 2, false),
        op,
        "need q",
    );
    expect_err(
        "heads",
        backward((&q, &k, &k, &q), None, 3, false),
        op,
        "must divide D",
    );
    expect_err(
        "zero heads",
        backward((&q, &k, &k, &q), None, 0, false),
        op,
        "must divide D",
    );
    expect_err(
        "causal",
        backward((&q, &k, &k, &q), None, 2, true),
        op,
        "causal requires Lq == Lk",
    );
    expect_err(
        "mask length",
        backward((&q, &k, &k, &q), Some(&zeros(1, 5)), 2, false),
        op,
        "`mask` has 5 values",
    );
    let half_mask = Tensor::zeros(1, 6, Dtype::F16).unwrap();
    let e = expect_err(
        "mask dtype",
        backward((&q, &k, &k, &q), Some(&half_mask), 2, false),
        op,
        "mask",
    );
    assert!(matches!(e, Error::Dtype { .. }));
    let k16 = Tensor::zeros(6, 8, Dtype::F16).unwrap();
    let e = expect_err(
        "dtype mismatch",
        backward((&q, &k16, &k, &q), None, 2, false),
        op,
        "`k`",
    );
    assert!(matches!(e, Error::Dtype { .. }));
    let q16 = Tensor::zeros(4, 8, Dtype::F16).unwrap();
    let e = backward((&q16, &k16, &k16, &q16), None, 2, false).expect_err("cpu f16");
    assert!(matches!(e, Error::UnsupportedDtype { .. }), "{e}");
    let idx = Tensor::zeros(4, 8, Dtype::I32).unwrap();
    let e = backward((&idx, &k, &k, &q), None, 2, false).expect_err("int q");
    assert!(matches!(e, Error::Dtype { .. }), "{e}");
}

fn varlen(
    (q, k): (&Tensor, &Tensor),
    cu: (&[i32], &[i32]),
    batch: usize,
    heads_hd: (usize, usize),
    max: usize,
) -> brotensor::Result<()> {
    let cu_q = Tensor::from_slice(cu.0, 1, cu.0.len()).unwrap();
    let cu_k = Tensor::from_slice(cu.1, 1, cu.1.len()).unwrap();
    let (mut dq, mut dk, mut dv) = Default::default();
    ops::flash_attention_varlen_backward(
        q,
        k,
        k,
        &Tensor::default(),
        q,
        &cu_q,
        &cu_k,
        batch,
        max,
        max,
        heads_hd.0,
        heads_hd.1,
        false,
        &mut dq,
        &mut dk,
        &mut dv,
    )
}

#[test]
fn varlen_backward_rejects_bad_arguments() {
    let op = "flash_attention_varlen_backward";
    let (q, k) = (zeros(5, 8), zeros(7, 8));
    let good_q: &[i32] = &[0, 2, 5];
    let good_k: &[i32] = &[0, 3, 7];
    varlen((&q, &k), (good_q, good_k), 2, (2, 4), 8).expect("valid");
    for (tag, cu_q, what) in [
        ("start", &[1, 2, 5][..], "must start at 0"),
        ("decrease", &[0, 3, 2, 5][..], "decreases"),
        ("end", &[0, 2, 4][..], "ends at 4"),
        ("length", &[0, 5][..], "batch_size + 1"),
    ] {
        let batch = if tag == "decrease" { 3 } else { 2 };
        let cu_k: &[i32] = if tag == "decrease" {
            &[0, 3, 5, 7]
        } else {
            good_k
        };
        expect_err(
            tag,
            varlen((&q, &k), (cu_q, cu_k), batch, (2, 4), 8),
            op,
            what,
        );
    }
    expect_err(
        "max_seqlen",
        varlen((&q, &k), (good_q, good_k), 2, (2, 4), 3),
        op,
        "more than the max_seqlen 3",
    );
    expect_err(
        "head_dim",
        varlen((&q, &k), (good_q, good_k), 2, (2, 3), 8),
        op,
        "num_heads * head_dim",
    );
    let f32_cu = Tensor::from_slice(&[0.0f32, 2.0, 5.0], 1, 3).unwrap();
    let cu_k = Tensor::from_slice(good_k, 1, 3).unwrap();
    let (mut dq, mut dk, mut dv) = Default::default();
    let e = ops::flash_attention_varlen_backward(
        &q,
        &k,
        &k,
        &Tensor::default(),
        &q,
        &f32_cu,
        &cu_k,
        2,
        8,
        8,
        2,
        4,
        false,
        &mut dq,
        &mut dk,
        &mut dv,
    )
    .expect_err("f32 prefix sums");
    assert!(matches!(e, Error::Dtype { .. }), "{e}");
}

#[test]
fn qkvo_backward_rejects_bad_arguments() {
    let op = "flash_attention_qkvo_backward";
    let (lq, d) = (3, 4);
    let x = zeros(lq, d);
    let w = zeros(d, d);
    let b = zeros(d, 1);
    let run = |ctx: Option<&Tensor>,
               bq: Option<&Tensor>,
               heads: usize,
               causal: bool,
               with_dctx: bool,
               with_dbq: bool,
               dwq: Tensor| {
        let (mut dx, mut dctx) = (Tensor::default(), Tensor::default());
        let (mut dwq, mut dwk, mut dwv, mut dwo) = (dwq, zeros(d, d), zeros(d, d), zeros(d, d));
        let mut dbq = zeros(d, 1);
        ops::flash_attention_qkvo_backward(
            &x,
            ctx,
            &w,
            bq,
            &w,
            None,
            &w,
            None,
            &w,
            None,
            None,
            heads,
            causal,
            &x,
            ops::QkvoGrads {
                dx: &mut dx,
                dctx: with_dctx.then_some(&mut dctx),
                dwq: &mut dwq,
                dbq: with_dbq.then_some(&mut dbq),
                dwk: &mut dwk,
                dbk: None,
                dwv: &mut dwv,
                dbv: None,
                dwo: &mut dwo,
                dbo: None,
            },
        )
    };
    run(None, Some(&b), 2, true, false, true, zeros(d, d)).expect("valid");
    expect_err(
        "dctx without ctx",
        run(None, None, 2, false, true, false, zeros(d, d)),
        op,
        "`dctx` must be given exactly when `ctx` is",
    );
    expect_err(
        "bias without grad",
        run(None, Some(&b), 2, false, false, false, zeros(d, d)),
        op,
        "`dbq` must be given exactly when `bq` is",
    );
    expect_err(
        "grad without bias",
        run(None, None, 2, false, false, true, zeros(d, d)),
        op,
        "`dbq` must be given exactly when `bq` is",
    );
    expect_err(
        "heads",
        run(None, None, 3, false, false, false, zeros(d, d)),
        op,
        "must divide D",
    );
    let ctx = zeros(5, d);
    expect_err(
        "causal cross",
        run(Some(&ctx), None, 2, true, true, false, zeros(d, d)),
        op,
        "causal requires Lq == Lk",
    );
    expect_err(
        "dwq not pre-sized",
        run(None, None, 2, false, false, false, Tensor::default()),
        op,
        "`dwq` must be pre-sized",
    );
    expect_err(
        "dwq shape",
        run(None, None, 2, false, false, false, zeros(d, 2)),
        op,
        "`dwq` is 4x2",
    );
    expect_err(
        "ctx width",
        run(Some(&zeros(5, 3)), None, 2, false, true, false, zeros(d, d)),
        op,
        "`wk` is 4x4, 4x3 needed",
    );
}

#[test]
fn qkvo_backward_accumulates_parameter_gradients_only() {
    // Twice with the same inputs: dW doubles, dX stays.
    let (lq, d) = (5, 8);
    let mut rng = brotensor_tests::SplitMix64::new(77);
    let mut t = |r, c| Tensor::from_slice(&rng.uniform(r * c, -1.0, 1.0), r, c).unwrap();
    let (x, wq, wk, wv, wo, d_o) = (t(lq, d), t(d, d), t(d, d), t(d, d), t(d, d), t(lq, d));
    let mut dx = Tensor::default();
    let mut dw: Vec<Tensor> = (0..4).map(|_| zeros(d, d)).collect();
    let mut firsts = Vec::new();
    for _ in 0..2 {
        let [dwq, dwk, dwv, dwo] = &mut dw[..] else {
            unreachable!()
        };
        ops::flash_attention_qkvo_backward(
            &x,
            None,
            &wq,
            None,
            &wk,
            None,
            &wv,
            None,
            &wo,
            None,
            None,
            2,
            false,
            &d_o,
            ops::QkvoGrads {
                dx: &mut dx,
                dctx: None,
                dwq,
                dbq: None,
                dwk,
                dbk: None,
                dwv,
                dbv: None,
                dwo,
                dbo: None,
            },
        )
        .unwrap();
        firsts.push((dx.to_vec::<f32>().unwrap(), dw[0].to_vec::<f32>().unwrap()));
    }
    assert_eq!(firsts[0].0, firsts[1].0, "dX is overwritten");
    for (a, b) in firsts[0].1.iter().zip(&firsts[1].1) {
        assert!(
            (2.0 * a - b).abs() <= 1e-5 * a.abs().max(1.0),
            "dWq accumulates"
        );
    }
}
