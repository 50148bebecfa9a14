//! F16 and BF16 on the CPU: every op family computes with FP32 math and one rounding on the
//! way out (the GPU's dtype policy), checked against float64 formulas written here from each
//! op's definition, applied to the same 16-bit-rounded inputs.
//!
//! Every element must lie within two units of the dtype's spacing at 1 times the output's
//! largest magnitude: one rounding costs at most half of that, so the check passes only for
//! FP32 math rounded once, and it rejects an all-zero, a halved or a one-element-wrong result
//! (each check proves so on its own data). The sizes span several of the 16-bit paths'
//! blocks and chunks, and end mid-block. Parameter gradients start non-zero (they must
//! accumulate, in the 16-bit tensor), input gradients start from unrelated values (they
//! must be overwritten).

use brotensor::{ops, Device, Dtype, Error, Result, Tensor};
use brotensor_tests::{assert_close_rows, read_f32, round_through, tensor, SplitMix64};

const HALVES: [Dtype; 2] = [Dtype::F16, Dtype::BF16];

/// The spacing of `dtype`'s values just above 1.
fn spacing(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F16 => 2f64.powi(-10),
        _ => 2f64.powi(-7),
    }
}

/// Seeded CPU inputs of one dtype, with their rounded values in f64 for the references.
struct Inputs {
    rng: SplitMix64,
    dtype: Dtype,
}

impl Inputs {
    fn new(seed: u64, dtype: Dtype) -> Self {
        Inputs {
            rng: SplitMix64::new(seed),
            dtype,
        }
    }

    /// A `rows x cols` CPU tensor uniform in `[lo, hi)`, and its values.
    fn make(&mut self, rows: usize, cols: usize, lo: f32, hi: f32) -> (Tensor, Vec<f64>) {
        let v = round_through(self.dtype, &self.rng.uniform(rows * cols, lo, hi));
        let t = tensor(Device::Cpu, &v, rows, cols, self.dtype).unwrap();
        (t, v.into_iter().map(f64::from).collect())
    }
}

/// Asserts that `got` is a CPU tensor of `dtype` within two spacings of `dtype` times the
/// largest `|want|` of every element of `want`.
fn check(tag: &str, dtype: Dtype, got: &Tensor, want: &[f64]) {
    let tag = format!("{tag} {dtype}");
    assert_eq!(got.device(), Device::Cpu, "{tag}");
    assert_eq!(got.dtype(), dtype, "{tag}: output dtype");
    let got = read_f32(got).unwrap();
    let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
    let tol = (2.0 * spacing(dtype)) as f32;
    assert_close_rows(&tag, &want, &got, want.len(), (tol, 0.0));
}

/// Asserts an F32 output (a statistic) to FP32 accuracy.
fn check_f32(tag: &str, got: &Tensor, want: &[f64]) {
    assert_eq!(got.dtype(), Dtype::F32, "{tag}");
    let got = read_f32(got).unwrap();
    let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
    assert_close_rows(tag, &want, &got, want.len(), (1e-5, 1e-5));
}

/// A tensor like `t` filled with unrelated values, for an output that must be overwritten.
fn stale(t: &Tensor) -> Tensor {
    let mut s = t.try_clone().unwrap();
    ops::fill(&mut s, 1234.0).unwrap();
    s
}

fn map1(v: &[f64], f: impl Fn(f64) -> f64) -> Vec<f64> {
    v.iter().map(|&x| f(x)).collect()
}

fn map2(a: &[f64], b: &[f64], f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

const GELU_C: f64 = 0.044715;

fn gelu(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (k * (x + GELU_C * x * x * x)).tanh())
}

fn gelu_grad(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    let t = (k * (x + GELU_C * x * x * x)).tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * GELU_C * x * x)
}

fn silu_grad(x: f64) -> f64 {
    let s = sigmoid(x);
    s * (1.0 + x * (1.0 - s))
}

/// Element-wise sizes: several parallel chunks, ending mid-block.
const MAP: (usize, usize) = (301, 233);
/// Row-op sizes: more than one parallel block of rows. The ops that accumulate across
/// blocks (parameter gradients, column sums) take more than one of their larger blocks.
const ROWS: (usize, usize) = (300, 250);

#[test]
fn cpu_computes_sixteen_bit_floats() {
    for dtype in HALVES {
        assert!(
            brotensor::supports_dtype(Device::Cpu, dtype).unwrap(),
            "{dtype}"
        );
    }
    // Models still default to F32 on the CPU.
    assert_eq!(
        brotensor::compute_dtype_on(Device::Cpu).unwrap(),
        Dtype::F32
    );
}

#[test]
fn elementwise_maps_round_once() -> Result<()> {
    let (r, c) = MAP;
    for dtype in HALVES {
        let mut inp = Inputs::new(0xC160, dtype);
        let (a, av) = inp.make(r, c, -2.0, 2.0);
        let (b, bv) = inp.make(r, c, 0.5, 2.0);
        check(
            "add",
            dtype,
            &ops::add(&a, &b)?,
            &map2(&av, &bv, |x, y| x + y),
        );
        check(
            "mul",
            dtype,
            &ops::mul(&a, &b)?,
            &map2(&av, &bv, |x, y| x * y),
        );
        check(
            "div",
            dtype,
            &ops::div(&a, &b)?,
            &map2(&av, &bv, |x, y| x / y),
        );
        check("exp", dtype, &ops::exp(&a)?, &map1(&av, f64::exp));
        check("log", dtype, &ops::log(&b)?, &map1(&bv, f64::ln));
        check(
            "rsqrt",
            dtype,
            &ops::rsqrt(&b)?,
            &map1(&bv, |x| 1.0 / x.sqrt()),
        );
        let mut dx = stale(&a);
        ops::exp_backward(&a, &b, &mut dx)?;
        check(
            "exp_backward",
            dtype,
            &dx,
            &map2(&av, &bv, |x, dy| dy * x.exp()),
        );
        // In place: unary, fused unary, and binary on the first operand.
        let mut y = a.try_clone()?;
        y.mul_scalar_(3.0)?;
        check("mul_scalar_", dtype, &y, &map1(&av, |x| 3.0 * x));
        let mut y = a.try_clone()?;
        y.exp_()?;
        check("exp_", dtype, &y, &map1(&av, f64::exp));
        let mut y = a.try_clone()?;
        y.sub_(&b)?;
        check("sub_", dtype, &y, &map2(&av, &bv, |x, y| x - y));
        // Broadcast operands are copied densely and take the same maps.
        let (row, rv) = inp.make(1, c, -1.0, 1.0);
        let want: Vec<f64> = (0..r * c).map(|i| av[i] * rv[i % c]).collect();
        check("mul broadcast row", dtype, &ops::mul(&a, &row)?, &want);
        let mut f = stale(&a);
        ops::fill(&mut f, 0.1)?;
        let tenth = f64::from(round_through(dtype, &[0.1])[0]);
        check("fill", dtype, &f, &vec![tenth; r * c]);
    }
    Ok(())
}

#[test]
fn trig_leaves_the_fast_path_where_it_does_not_hold() -> Result<()> {
    // Both 16-bit types hold values past 2^13, where the fast sine does not hold: blocks
    // holding one take the exact path (BF16 also past 2^24, where the f32 argument itself
    // is coarser than pi).
    let (r, c) = MAP;
    for (dtype, big) in [(Dtype::F16, 6e4f32), (Dtype::BF16, 3e7)] {
        let mut inp = Inputs::new(0xC161, dtype);
        let (x, xv) = inp.make(r, c, -big, big);
        let (dy, dyv) = inp.make(r, c, -1.0, 1.0);
        check("sin", dtype, &ops::sin(&x)?, &map1(&xv, f64::sin));
        check("cos", dtype, &ops::cos(&x)?, &map1(&xv, f64::cos));
        let mut dx = stale(&x);
        ops::sin_backward(&x, &dy, &mut dx)?;
        check(
            "sin_backward",
            dtype,
            &dx,
            &map2(&xv, &dyv, |x, d| d * x.cos()),
        );
    }
    Ok(())
}

/// A gradient op, its name and the derivative of its forward in f64.
type Grad = (
    &'static str,
    fn(&Tensor, &Tensor, &mut Tensor) -> Result<()>,
    fn(f64) -> f64,
);

#[test]
fn activations_forward_and_backward() -> Result<()> {
    let (r, c) = MAP;
    for dtype in HALVES {
        let mut inp = Inputs::new(0xC162, dtype);
        let (x, xv) = inp.make(r, c, -5.0, 5.0);
        let (dy, dyv) = inp.make(r, c, -1.0, 1.0);
        check("gelu", dtype, &ops::gelu(&x)?, &map1(&xv, gelu));
        check(
            "silu",
            dtype,
            &ops::silu(&x)?,
            &map1(&xv, |v| v * sigmoid(v)),
        );
        let grads: [Grad; 3] = [
            ("relu_backward", ops::relu_backward, |v| f64::from(v > 0.0)),
            ("gelu_backward", ops::gelu_backward, gelu_grad),
            ("silu_backward", ops::silu_backward, silu_grad),
        ];
        for (name, op, grad) in grads {
            let mut dx = stale(&x);
            op(&x, &dy, &mut dx)?;
            check(name, dtype, &dx, &map2(&xv, &dyv, |v, d| d * grad(v)));
        }

        // A gated unit: rows of `[a | g]`, more rows than one block holds.
        let (rows, d) = ROWS;
        let (x, xv) = inp.make(rows, 2 * d, -4.0, 4.0);
        let (dy, dyv) = inp.make(rows, d, -1.0, 1.0);
        let at = |i: usize| (xv[i / d * 2 * d + i % d], xv[i / d * 2 * d + d + i % d]);
        let mut y = Tensor::default();
        ops::swiglu_forward(&x, &mut y)?;
        let want: Vec<f64> = (0..rows * d)
            .map(|i| {
                let (a, g) = at(i);
                a * sigmoid(a) * g
            })
            .collect();
        check("swiglu_forward", dtype, &y, &want);
        let mut dx = stale(&x);
        ops::swiglu_backward(&x, &dy, &mut dx)?;
        let mut want = vec![0.0; rows * 2 * d];
        for (i, &dyi) in dyv.iter().enumerate() {
            let (a, g) = at(i);
            let (row, j) = (i / d, i % d);
            want[row * 2 * d + j] = dyi * g * silu_grad(a);
            want[row * 2 * d + d + j] = dyi * a * sigmoid(a);
        }
        check("swiglu_backward", dtype, &dx, &want);
    }
    Ok(())
}

/// Softmax of each `cols`-wide row of `x` (entries whose `keep` is false get 0).
fn softmax_rows(x: &[f64], cols: usize, keep: impl Fn(usize) -> bool) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(cols) {
        let max = (0..cols)
            .filter(|&j| keep(j))
            .map(|j| row[j])
            .fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = (0..cols)
            .map(|j| if keep(j) { (row[j] - max).exp() } else { 0.0 })
            .collect();
        let s: f64 = e.iter().sum();
        out.extend(e.iter().map(|v| v / s));
    }
    out
}

#[test]
fn softmax_forward_backward_and_masked() -> Result<()> {
    let (r, c) = ROWS;
    for dtype in HALVES {
        let mut inp = Inputs::new(0xC163, dtype);
        let (x, xv) = inp.make(r, c, -6.0, 6.0);
        let want = softmax_rows(&xv, c, |_| true);
        let mut y = stale(&x);
        ops::softmax_rows_forward(&x, &mut y)?;
        check("softmax_rows_forward", dtype, &y, &want);
        let mut y = x.try_clone()?;
        y.softmax_rows_()?;
        check("softmax_rows_", dtype, &y, &want);

        // The flat gradient: one row of every element.
        let (p, pv) = inp.make(r, c, 0.0, 1.0);
        let (dp, dpv) = inp.make(r, c, -1.0, 1.0);
        let s: f64 = pv.iter().zip(&dpv).map(|(a, b)| a * b).sum();
        let mut dl = stale(&p);
        ops::softmax_backward(&p, &dp, &mut dl)?;
        check(
            "softmax_backward",
            dtype,
            &dl,
            &map2(&pv, &dpv, |p, d| p * (d - s)),
        );

        // The loss category's flat softmax with an F32 mask.
        let n = 3000;
        let (logits, lv) = inp.make(1, n, -4.0, 4.0);
        let keep = |j: usize| j % 7 != 3;
        let m: Vec<f32> = (0..n).map(|j| if keep(j) { 1.0 } else { 0.0 }).collect();
        let mask = Tensor::from_slice_on(Device::Cpu, &m, 1, n)?;
        let mut probs = Tensor::default();
        ops::softmax_forward(&logits, Some(&mask), &mut probs)?;
        check(
            "softmax_forward masked",
            dtype,
            &probs,
            &softmax_rows(&lv, n, keep),
        );
    }
    Ok(())
}

const EPS: f64 = 1e-5;

/// Per row of `cols`: mean and `1 / sqrt(var + eps)`, the variance two-pass and biased.
fn row_stats(x: &[f64], cols: usize) -> Vec<(f64, f64)> {
    x.chunks(cols)
        .map(|row| {
            let m = row.iter().sum::<f64>() / cols as f64;
            let var = row.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / cols as f64;
            (m, 1.0 / (var + EPS).sqrt())
        })
        .collect()
}

#[test]
fn layernorm_with_accumulated_parameter_gradients() -> Result<()> {
    let (r, c) = (1100, 256);
    for dtype in HALVES {
        let mut inp = Inputs::new(0xC164, dtype);
        let (x, xv) = inp.make(r, c, -1.0, 3.0);
        let (g, gv) = inp.make(c, 1, 0.5, 1.5);
        let (b, bv) = inp.make(c, 1, -0.5, 0.5);
        let (mut y, mut xh, mut mean, mut rstd) =
            (stale(&x), stale(&x), Tensor::default(), Tensor::default());
        ops::layernorm_forward_batched_with_caches(
            &x, &g, &b, EPS as f32, &mut y, &mut xh, &mut mean, &mut rstd,
        )?;
        let st = row_stats(&xv, c);
        let xhat: Vec<f64> = (0..r * c)
            .map(|i| (xv[i] - st[i / c].0) * st[i / c].1)
            .collect();
        let want_y: Vec<f64> = (0..r * c)
            .map(|i| gv[i % c] * xhat[i] + bv[i % c])
            .collect();
        check("layernorm y", dtype, &y, &want_y);
        check("layernorm xhat", dtype, &xh, &xhat);
        check_f32(
            "layernorm mean",
            &mean,
            &st.iter().map(|s| s.0).collect::<Vec<_>>(),
        );
        check_f32(
            "layernorm rstd",
            &rstd,
            &st.iter().map(|s| s.1).collect::<Vec<_>>(),
        );

        // The backward from given caches: dx overwritten, dgamma and dbeta accumulated.
        let (dy, dyv) = inp.make(r, c, -1.0, 1.0);
        let (xh, xhv) = inp.make(r, c, -2.0, 2.0);
        let rs: Vec<f32> = SplitMix64::new(7).uniform(r, 0.5, 2.0);
        let rstd = Tensor::from_slice_on(Device::Cpu, &rs, r, 1)?;
        let (mut dg, dg0) = inp.make(c, 1, 4.0, 8.0);
        let (mut db, db0) = inp.make(c, 1, 4.0, 8.0);
        let mut dx = stale(&dy);
        ops::layernorm_backward_batched_with_caches(
            &dy, &xh, &g, &rstd, &mut dx, &mut dg, &mut db,
        )?;
        let (mut want_dx, mut want_dg, mut want_db) = (vec![0.0; r * c], dg0, db0);
        for (row, &rsr) in rs.iter().enumerate() {
            let at = row * c;
            let rsv = f64::from(rsr);
            let s1: f64 = (0..c).map(|j| dyv[at + j] * gv[j]).sum();
            let s2: f64 = (0..c).map(|j| dyv[at + j] * gv[j] * xhv[at + j]).sum();
            for j in 0..c {
                let n = c as f64;
                want_dx[at + j] = rsv / n * (n * dyv[at + j] * gv[j] - s1 - xhv[at + j] * s2);
                want_dg[j] += dyv[at + j] * xhv[at + j];
                want_db[j] += dyv[at + j];
            }
        }
        check("layernorm dx", dtype, &dx, &want_dx);
        check("layernorm dgamma (accumulated)", dtype, &dg, &want_dg);
        check("layernorm dbeta (accumulated)", dtype, &db, &want_db);
    }
    Ok(())
}

#[test]
fn rms_norm_with_an_accumulated_gamma_gradient() -> Result<()> {
    let (r, c) = (1100, 256);
    for dtype in HALVES {
        let mut inp = Inputs::new(0xC165, dtype);
        let (x, xv) = inp.make(r, c, -2.0, 2.0);
        let (g, gv) = inp.make(c, 1, 0.5, 1.5);
        let (dy, dyv) = inp.make(r, c, -1.0, 1.0);
        let rr: Vec<f64> = xv
            .chunks(c)
            .map(|row| 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / c as f64 + EPS).sqrt())
            .collect();
        let mut y = stale(&x);
        ops::rms_norm_forward(&x, &g, EPS as f32, &mut y)?;
        let want: Vec<f64> = (0..r * c).map(|i| xv[i] * gv[i % c] * rr[i / c]).collect();
        check("rms_norm y", dtype, &y, &want);

        let (mut dg, dg0) = inp.make(c, 1, 4.0, 8.0);
        let mut dx = stale(&x);
        ops::rms_norm_backward(&x, &g, &dy, EPS as f32, &mut dx, &mut dg)?;
        let (mut want_dx, mut want_dg) = (vec![0.0; r * c], dg0);
        for (row, &rrow) in rr.iter().enumerate() {
            let at = row * c;
            let s: f64 = (0..c).map(|j| xv[at + j] * dyv[at + j] * gv[j]).sum();
            let k = rrow * rrow / c as f64 * s;
            for j in 0..c {
                want_dx[at + j] = rrow * (gv[j] * dyv[at + j] - xv[at + j] * k);
                want_dg[j] += dyv[at + j] * xv[at + j] * rrow;
            }
        }
        check("rms_norm dx", dtype, &dx, &want_dx);
        check("rms_norm dgamma (accumulated)", dtype, &dg, &want_dg);
    }
    Ok(())
}

#[test]
fn reductions_sum_in_fp32() -> Result<()> {
    let (r, c) = (1100, 257);
    for dtype in HALVES {
        let mut inp = Inputs::new(0xC166, dtype);
        let (x, xv) = inp.make(r, c, -1.0, 1.5);
        let mut y = Tensor::default();
        ops::sum_rows(&x, &mut y)?;
        let want: Vec<f64> = xv.chunks(c).map(|row| row.iter().sum()).collect();
        check("sum_rows", dtype, &y, &want);
        ops::sum_cols(&x, &mut y)?;
        let want: Vec<f64> = (0..c)
            .map(|j| (0..r).map(|i| xv[i * c + j]).sum())
            .collect();
        check("sum_cols", dtype, &y, &want);
        let mut idx = Tensor::default();
        ops::argmax_rows_i32(&x, &mut idx)?;
        // The first of the largest (rounded) values.
        let want: Vec<i32> = xv
            .chunks(c)
            .map(|row| {
                let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                row.iter().position(|&v| v == max).unwrap() as i32
            })
            .collect();
        assert_eq!(idx.to_vec::<i32>()?, want, "argmax_rows_i32 {dtype}");
    }
    Ok(())
}

/// `a (m, k) . b (k, n)` in f64.
fn product(a: &[f64], b: &[f64], (m, k, n): (usize, usize, usize)) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                c[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    c
}

#[test]
fn matmul_and_linear() -> Result<()> {
    let (m, k, n) = (64, 96, 80);
    for dtype in HALVES {
        let mut inp = Inputs::new(0xC167, dtype);
        let (a, av) = inp.make(m, k, -1.0, 1.0);
        let (b, bv) = inp.make(k, n, -1.0, 1.0);
        let mut c = Tensor::default();
        ops::matmul(&a, &b, &mut c)?;
        check("matmul", dtype, &c, &product(&av, &bv, (m, k, n)));
        // Y = X W^T + bias with W (n, k).
        let (w, wv) = inp.make(n, k, -1.0, 1.0);
        let (bias, biasv) = inp.make(n, 1, -1.0, 1.0);
        let mut y = Tensor::default();
        ops::linear_forward_batched(&w, Some(&bias), &a, &mut y)?;
        let wt: Vec<f64> = (0..k * n).map(|i| wv[(i % n) * k + i / n]).collect();
        let want: Vec<f64> = product(&av, &wt, (m, k, n))
            .iter()
            .enumerate()
            .map(|(i, v)| v + biasv[i % n])
            .collect();
        check("linear_forward_batched", dtype, &y, &want);
    }
    Ok(())
}

#[test]
fn flash_attention_forward() -> Result<()> {
    let (lq, lk, heads, hd) = (16, 24, 2, 32);
    let d = heads * hd;
    for dtype in HALVES {
        let mut inp = Inputs::new(0xC168, dtype);
        let (q, qv) = inp.make(lq, d, -1.0, 1.0);
        let (k, kv) = inp.make(lk, d, -1.0, 1.0);
        let (v, vv) = inp.make(lk, d, -1.0, 1.0);
        let mut o = Tensor::default();
        ops::flash_attention_forward(&q, &k, &v, None, heads, false, &mut o)?;
        let mut want = vec![0.0; lq * d];
        let scale = 1.0 / (hd as f64).sqrt();
        for h in 0..heads {
            for i in 0..lq {
                let s: Vec<f64> = (0..lk)
                    .map(|j| {
                        (0..hd)
                            .map(|e| qv[i * d + h * hd + e] * kv[j * d + h * hd + e])
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let p = softmax_rows(&s, lk, |_| true);
                for e in 0..hd {
                    want[i * d + h * hd + e] = (0..lk).map(|j| p[j] * vv[j * d + h * hd + e]).sum();
                }
            }
        }
        check("flash_attention_forward", dtype, &o, &want);
    }
    Ok(())
}

#[test]
fn embedding_gradient_accumulates_in_the_table() -> Result<()> {
    let (m, rows, cols) = (500, 300, 40);
    for dtype in HALVES {
        let mut inp = Inputs::new(0xC169, dtype);
        let (d_out, dv) = inp.make(m, cols, -1.0, 1.0);
        let (mut table, t0) = inp.make(rows, cols, 2.0, 4.0);
        let ids: Vec<i32> = (0..m).map(|i| ((i * 37) % (rows - 7)) as i32).collect();
        let idt = Tensor::from_slice_on(Device::Cpu, &ids, m, 1)?;
        ops::embedding_lookup_backward(&d_out, &idt, &mut table)?;
        let mut want = t0;
        for (i, &id) in ids.iter().enumerate() {
            for j in 0..cols {
                want[id as usize * cols + j] += dv[i * cols + j];
            }
        }
        check("embedding_lookup_backward", dtype, &table, &want);
    }
    Ok(())
}

#[test]
fn ops_that_stay_fp32_still_refuse_sixteen_bit() {
    for dtype in HALVES {
        let x = tensor(Device::Cpu, &[0.5; 12], 3, 4, dtype).unwrap();
        let refused = |r: Result<()>| matches!(r, Err(Error::Dtype { .. }));
        // The losses are FP32 by design.
        assert!(
            matches!(ops::mse_vec_forward(&x, &x), Err(Error::Dtype { .. })),
            "mse {dtype}"
        );
        // Top-k is F32 only; the wide-dtype reductions take F32 and F64.
        let (mut vals, mut idx) = (Tensor::default(), Tensor::default());
        assert!(
            refused(ops::top_k_rows(&x, 2, &mut vals, &mut idx)),
            "top_k {dtype}"
        );
        assert!(ops::reduce_max(&x, 1).is_err(), "reduce_max {dtype}");
    }
}

/// `rows x cols` weights of a GGUF block dtype from random bytes, each block's f16 scale
/// fields (byte offsets `scales`) set to small finite values; `(elements, bytes)` per block.
fn random_blocks(
    rng: &mut SplitMix64,
    (elems, bytes): (usize, usize),
    scales: &[usize],
    (rows, cols): (usize, usize),
) -> Vec<u8> {
    let blocks = rows * cols / elems;
    let mut raw: Vec<u8> = (0..blocks * bytes).map(|_| rng.next_u64() as u8).collect();
    for b in raw.chunks_mut(bytes) {
        for &at in scales {
            let d = half::f16::from_f32(0.002 + 0.008 * rng.next_f01());
            b[at..at + 2].copy_from_slice(&d.to_le_bytes());
        }
    }
    raw
}

#[test]
fn quantized_products_take_sixteen_bit_activations() -> Result<()> {
    use ops::Act;
    let (n, k) = (24, 512);
    let mut rng = SplitMix64::new(0xC16A);
    let kinds = [
        (Dtype::Q8_0, (32, 34), &[0][..]),
        (Dtype::Q4_K, (256, 144), &[0, 2][..]),
        (Dtype::Q6_K, (256, 210), &[208][..]),
    ];
    for (kind, geometry, scales) in kinds {
        let raw = random_blocks(&mut rng, geometry, scales, (n, k));
        let w = Tensor::from_raw_bytes_on(Device::Cpu, &raw, n, k, kind)?;
        // The decoder's values (exact in F32) are the reference's weights.
        let mut wf = Tensor::default();
        ops::dequantize(&w, Dtype::F32, &mut wf)?;
        let wv: Vec<f64> = wf.to_vec::<f32>()?.into_iter().map(f64::from).collect();
        let wt: Vec<f64> = (0..k * n).map(|i| wv[(i % n) * k + i / n]).collect();
        for dtype in HALVES {
            let mut inp = Inputs::new(0xC16B, dtype);
            let (bias, bv) = inp.make(n, 1, -1.0, 1.0);
            // The GEMV path (a few rows) and the GEMM path.
            for m in [3, 20] {
                let (x, xv) = inp.make(m, k, -1.0, 1.0);
                let want: Vec<f64> = product(&xv, &wt, (m, k, n))
                    .iter()
                    .enumerate()
                    .map(|(i, v)| v + bv[i % n])
                    .collect();
                let mut y = Tensor::default();
                ops::quant_linear(&w, Some(&bias), &x, Act::None, &mut y)?;
                check(&format!("quant_linear {kind} m={m}"), dtype, &y, &want);
            }
        }
        // The C++-named F16 wrappers.
        let mut inp = Inputs::new(0xC16C, Dtype::F16);
        let (x, xv) = inp.make(1, k, -1.0, 1.0);
        let (xb, xbv) = inp.make(11, k, -1.0, 1.0);
        let (mut y, mut yb) = (Tensor::default(), Tensor::default());
        type Wrapper = fn(&Tensor, Option<&Tensor>, &Tensor, &mut Tensor) -> Result<()>;
        let (gemv, batched): (Wrapper, Wrapper) = match kind {
            Dtype::Q8_0 => (
                ops::linear_forward_q8_0_fp16,
                ops::linear_forward_batched_q8_0_fp16,
            ),
            Dtype::Q4_K => (
                ops::linear_forward_q4k_fp16,
                ops::linear_forward_batched_q4k_fp16,
            ),
            _ => (
                ops::linear_forward_q6k_fp16,
                ops::linear_forward_batched_q6k_fp16,
            ),
        };
        gemv(&w, None, &x, &mut y)?;
        check(
            &format!("linear_forward_{kind}_fp16"),
            Dtype::F16,
            &y,
            &product(&xv, &wt, (1, k, n)),
        );
        batched(&w, None, &xb, &mut yb)?;
        check(
            &format!("linear_forward_batched_{kind}_fp16"),
            Dtype::F16,
            &yb,
            &product(&xbv, &wt, (11, k, n)),
        );
    }
    Ok(())
}
