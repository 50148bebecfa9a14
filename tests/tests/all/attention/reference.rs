//! Float64 attention written from the definitions (not the library's code): projections
//! `x W^T + b`, per-head masked softmax, and the backward pass through the softmax Jacobian.

/// `x (n, din) . w^T (w: (dout, din)) + b`.
pub fn linear(
    x: &[f64],
    n: usize,
    din: usize,
    w: &[f64],
    dout: usize,
    b: Option<&[f64]>,
) -> Vec<f64> {
    let mut y = vec![0.0; n * dout];
    for i in 0..n {
        for o in 0..dout {
            let mut acc = b.map_or(0.0, |b| b[o]);
            for k in 0..din {
                acc += x[i * din + k] * w[o * din + k];
            }
            y[i * dout + o] = acc;
        }
    }
    y
}

/// `a^T (a: (n, p)) . b (n, q)` as `(p, q)`.
pub fn at_b(a: &[f64], b: &[f64], n: usize, p: usize, q: usize) -> Vec<f64> {
    let mut c = vec![0.0; p * q];
    for i in 0..n {
        for r in 0..p {
            for s in 0..q {
                c[r * q + s] += a[i * p + r] * b[i * q + s];
            }
        }
    }
    c
}

/// `a (n, p) . b (p, q)`.
pub fn a_b(a: &[f64], b: &[f64], n: usize, p: usize, q: usize) -> Vec<f64> {
    let mut c = vec![0.0; n * q];
    for i in 0..n {
        for r in 0..p {
            for s in 0..q {
                c[i * q + s] += a[i * p + r] * b[r * q + s];
            }
        }
    }
    c
}

/// Column sums of `a (n, p)`.
pub fn col_sums(a: &[f64], n: usize, p: usize) -> Vec<f64> {
    (0..p).map(|c| (0..n).map(|i| a[i * p + c]).sum()).collect()
}

/// A pre-softmax term.
#[derive(Clone, Copy)]
pub enum Bias<'a> {
    None,
    /// `(nh lq, lk)`.
    PerHead(&'a [f64]),
    /// `(lq, lk)`, every head.
    Shared(&'a [f64]),
    /// SAM's decomposed relative position over a `gh x gw` grid.
    RelPos {
        rh: &'a [f64],
        rw: &'a [f64],
        gh: usize,
        gw: usize,
    },
}

/// One attention problem.
#[derive(Clone, Copy)]
pub struct Problem<'a> {
    pub x: &'a [f64],
    pub lq: usize,
    pub d: usize,
    /// Keys/values input (`None`: `x`), `(lk, dkv)`.
    pub ctx: Option<&'a [f64]>,
    pub lk: usize,
    pub dkv: usize,
    /// `wq, wk, wv, wo`.
    pub w: [&'a [f64]; 4],
    pub b: [Option<&'a [f64]>; 4],
    pub mask: Option<&'a [f64]>,
    pub nh: usize,
    pub scale: f64,
    pub gate: bool,
    pub bias: Bias<'a>,
}

impl<'a> Problem<'a> {
    /// Self attention over `x (l, d)` with the standard scale and query gating.
    pub fn selfish(x: &'a [f64], l: usize, d: usize, w: [&'a [f64]; 4], nh: usize) -> Self {
        Problem {
            x,
            lq: l,
            d,
            ctx: None,
            lk: l,
            dkv: d,
            w,
            b: [None; 4],
            mask: None,
            nh,
            scale: 1.0 / ((d / nh) as f64).sqrt(),
            gate: true,
            bias: Bias::None,
        }
    }

    fn kv(&self) -> &'a [f64] {
        self.ctx.unwrap_or(self.x)
    }

    fn valid(&self, i: usize) -> bool {
        self.mask.is_none_or(|m| m[i] >= 0.5)
    }

    fn gated(&self, i: usize) -> bool {
        self.gate && !self.valid(i)
    }
}

/// Forward results, in the library's cache layouts.
pub struct Fwd {
    pub qh: Vec<f64>,
    pub kh: Vec<f64>,
    pub vh: Vec<f64>,
    pub attn: Vec<f64>,
    pub y: Vec<f64>,
    pub o: Vec<f64>,
}

/// `(l, nh hd)` to `(nh l, hd)`.
fn split(t: &[f64], l: usize, nh: usize, hd: usize) -> Vec<f64> {
    let mut out = vec![0.0; t.len()];
    for h in 0..nh {
        for i in 0..l {
            for c in 0..hd {
                out[(h * l + i) * hd + c] = t[i * nh * hd + h * hd + c];
            }
        }
    }
    out
}

/// `(nh l, hd)` to `(l, nh hd)`.
fn merge(t: &[f64], l: usize, nh: usize, hd: usize) -> Vec<f64> {
    let mut out = vec![0.0; t.len()];
    for h in 0..nh {
        for i in 0..l {
            for c in 0..hd {
                out[i * nh * hd + h * hd + c] = t[(h * l + i) * hd + c];
            }
        }
    }
    out
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

pub fn forward(p: &Problem<'_>) -> Fwd {
    let (lq, lk, d, nh) = (p.lq, p.lk, p.d, p.nh);
    let hd = d / nh;
    let q = linear(p.x, lq, d, p.w[0], d, p.b[0]);
    let k = linear(p.kv(), lk, p.dkv, p.w[1], d, p.b[1]);
    let v = linear(p.kv(), lk, p.dkv, p.w[2], d, p.b[2]);
    let (qh, kh, vh) = (
        split(&q, lq, nh, hd),
        split(&k, lk, nh, hd),
        split(&v, lk, nh, hd),
    );
    let mut attn = vec![0.0; nh * lq * lk];
    for h in 0..nh {
        for i in 0..lq {
            if p.gated(i) {
                continue;
            }
            let qi = &qh[(h * lq + i) * hd..(h * lq + i + 1) * hd];
            let mut s = vec![f64::NEG_INFINITY; lk];
            for j in (0..lk).filter(|&j| p.valid(j)) {
                let kj = &kh[(h * lk + j) * hd..(h * lk + j + 1) * hd];
                s[j] = p.scale * dot(qi, kj)
                    + match p.bias {
                        Bias::None => 0.0,
                        Bias::PerHead(b) => b[(h * lq + i) * lk + j],
                        Bias::Shared(b) => b[i * lk + j],
                        Bias::RelPos { rh, rw, gh, gw } => {
                            let (iy, ix, jy, jx) = (i / gw, i % gw, j / gw, j % gw);
                            let r = iy + gh - 1 - jy;
                            let c = ix + gw - 1 - jx;
                            dot(qi, &rh[r * hd..(r + 1) * hd]) + dot(qi, &rw[c * hd..(c + 1) * hd])
                        }
                    };
            }
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            if m == f64::NEG_INFINITY {
                continue;
            }
            let e: Vec<f64> = s.iter().map(|&v| (v - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for j in 0..lk {
                attn[(h * lq + i) * lk + j] = e[j] / z;
            }
        }
    }
    let mut yh = vec![0.0; nh * lq * hd];
    for h in 0..nh {
        for i in 0..lq {
            for j in 0..lk {
                let a = attn[(h * lq + i) * lk + j];
                for c in 0..hd {
                    yh[(h * lq + i) * hd + c] += a * vh[(h * lk + j) * hd + c];
                }
            }
        }
    }
    let y = merge(&yh, lq, nh, hd);
    let mut o = linear(&y, lq, d, p.w[3], d, p.b[3]);
    for i in (0..lq).filter(|&i| p.gated(i)) {
        o[i * d..(i + 1) * d].fill(0.0);
    }
    Fwd {
        qh,
        kh,
        vh,
        attn,
        y,
        o,
    }
}

/// Backward results: input gradients and the parameter gradients (`dw`, `db` in
/// `q, k, v, o` order).
pub struct Bwd {
    pub dx: Vec<f64>,
    pub dctx: Vec<f64>,
    pub dw: [Vec<f64>; 4],
    pub db: [Vec<f64>; 4],
}

pub fn backward(p: &Problem<'_>, f: &Fwd, d_o: &[f64]) -> Bwd {
    let (lq, lk, d, nh, dkv) = (p.lq, p.lk, p.d, p.nh, p.dkv);
    let hd = d / nh;
    let mut dom = d_o.to_vec();
    for i in (0..lq).filter(|&i| p.gated(i)) {
        dom[i * d..(i + 1) * d].fill(0.0);
    }
    let dwo = at_b(&dom, &f.y, lq, d, d);
    let dbo = col_sums(&dom, lq, d);
    let dy = a_b(&dom, p.w[3], lq, d, d);
    let dyh = split(&dy, lq, nh, hd);
    let mut dqh = vec![0.0; nh * lq * hd];
    let mut dkh = vec![0.0; nh * lk * hd];
    let mut dvh = vec![0.0; nh * lk * hd];
    for h in 0..nh {
        for i in 0..lq {
            let row = h * lq + i;
            let a = &f.attn[row * lk..(row + 1) * lk];
            let dyi = &dyh[row * hd..(row + 1) * hd];
            let da: Vec<f64> = (0..lk)
                .map(|j| dot(dyi, &f.vh[(h * lk + j) * hd..(h * lk + j + 1) * hd]))
                .collect();
            let inner = dot(a, &da);
            for j in 0..lk {
                for c in 0..hd {
                    dvh[(h * lk + j) * hd + c] += a[j] * dyi[c];
                }
                // The softmax Jacobian: dS_j = a_j (dA_j - sum_l a_l dA_l), times the scale.
                let ds = a[j] * (da[j] - inner) * p.scale;
                for c in 0..hd {
                    dqh[row * hd + c] += ds * f.kh[(h * lk + j) * hd + c];
                    dkh[(h * lk + j) * hd + c] += ds * f.qh[row * hd + c];
                }
            }
        }
    }
    let (dq, dk, dv) = (
        merge(&dqh, lq, nh, hd),
        merge(&dkh, lk, nh, hd),
        merge(&dvh, lk, nh, hd),
    );
    let kv = p.kv();
    let mut dx = a_b(&dq, p.w[0], lq, d, d);
    let mut dctx = a_b(&dk, p.w[1], lk, d, dkv);
    for (t, g) in dctx.iter_mut().zip(a_b(&dv, p.w[2], lk, d, dkv)) {
        *t += g;
    }
    if p.ctx.is_none() {
        for (t, g) in dx.iter_mut().zip(&dctx) {
            *t += g;
        }
    }
    Bwd {
        dx,
        dctx,
        dw: [
            at_b(&dq, p.x, lq, d, d),
            at_b(&dk, kv, lk, d, dkv),
            at_b(&dv, kv, lk, d, dkv),
            dwo,
        ],
        db: [
            col_sums(&dq, lq, d),
            col_sums(&dk, lk, d),
            col_sums(&dv, lk, d),
            dbo,
        ],
    }
}
