//! The diffusion family against float64 math written here from the definitions: the row
//! affine maps, each sampler step as its formula reads (`x0` first, then the step), the
//! timestep embedding as diffusers writes it, and the residual block as the chain of
//! float64 GroupNorm, SiLU and convolution loops (with rows near 400 and a small spread,
//! where a one-pass variance fails), its gradients by central finite differences of that
//! chain. Every device and float dtype, plus the error cases.

use brotensor::ops::{self, Dpmpp2mCoefficients, ResBlock, ResBlockGrads, ResBlockSpec};
use brotensor::{Device, Dtype, Error, Result, Tensor};
use brotensor_tests::reference::finite_differences;
use brotensor_tests::{reference_with, tolerance, Check, Input};

#[test]
fn modulate_and_broadcast_mul_against_float64() {
    let (l, d) = (5, 7);
    let ins = [
        Input::new(l, d, -2.0, 2.0),
        Input::new(1, d, -0.5, 0.5),
        Input::new(1, d, -1.0, 1.0),
    ];
    reference_with(
        "modulate",
        0xd1f,
        &ins,
        Check::default(),
        |t| {
            let mut y = Tensor::default();
            ops::modulate(&t[0], &t[1], &t[2].reshape(&[d, 1])?, &mut y)?;
            Ok(y)
        },
        |v| {
            let (x, s, b) = (&v[0], &v[1], &v[2]);
            (0..l * d)
                .map(|i| x[i] * (1.0 + s[i % d]) + b[i % d])
                .collect()
        },
    );
    reference_with(
        "broadcast_mul",
        0xd20,
        &ins[..2],
        Check::default(),
        |t| {
            let mut y = Tensor::default();
            ops::broadcast_mul(&t[0], &t[1], &mut y)?;
            Ok(y)
        },
        |v| (0..l * d).map(|i| v[0][i] * v[1][i % d]).collect(),
    );
}

#[test]
fn sampler_steps_against_their_formulas() {
    let ins = [
        Input::new(3, 50, -2.0, 2.0),
        Input::new(3, 50, -1.0, 1.0),
        Input::new(3, 50, -1.5, 1.5),
    ];
    for (alpha_t, alpha_prev, sigma) in [(0.3f32, 0.6f32, 0.0f32), (0.05, 0.4, 0.3)] {
        reference_with(
            &format!("ddim_step a_t {alpha_t} a_prev {alpha_prev} sigma {sigma}"),
            0xdd1,
            &ins[..2],
            Check::default(),
            |t| {
                let mut y = Tensor::default();
                ops::ddim_step(&t[0], &t[1], alpha_t, alpha_prev, sigma, &mut y)?;
                Ok(y)
            },
            |v| {
                let [at, ap, s] = [alpha_t, alpha_prev, sigma].map(f64::from);
                v[0].iter()
                    .zip(&v[1])
                    .map(|(&x, &e)| {
                        let x0 = (x - (1.0 - at).sqrt() * e) / at.sqrt();
                        ap.sqrt() * x0 + (1.0 - ap - s * s).sqrt() * e
                    })
                    .collect()
            },
        );
    }
    reference_with(
        "euler_step",
        0xe01,
        &ins[..2],
        Check::default(),
        |t| {
            let mut y = Tensor::default();
            ops::euler_step(&t[0], &t[1], 2.5, 1.75, &mut y)?;
            Ok(y)
        },
        |v| {
            v[0].iter()
                .zip(&v[1])
                .map(|(&x, &e)| x + (1.75 - 2.5) * e)
                .collect()
        },
    );
    // DPM++ 2M from sigma 3 to 2, after a step from 5 to 3 (k-diffusion's formulas).
    let (sl, st, sn) = (5.0f64, 3.0f64, 2.0f64);
    let c = Dpmpp2mCoefficients::new(sl as f32, st as f32, sn as f32).unwrap();
    let (h, h_last) = (st.ln() - sn.ln(), sl.ln() - st.ln());
    let r = h_last / h;
    let k = 1.0 - (-h).exp();
    let want = [sn / st, k * (1.0 + 0.5 / r), -k * 0.5 / r];
    let got = [c.c_xt, c.c_x0t, c.c_x0prev].map(f64::from);
    for (w, g) in want.iter().zip(got) {
        assert!(
            (w - g).abs() <= 1e-6 * w.abs(),
            "DPM++ 2M coefficients {got:?} vs {want:?}"
        );
    }
    for (which, out) in [("x_prev", 0), ("x0_out", 1)] {
        reference_with(
            &format!("dpmpp_2m_step {which}"),
            0xd33,
            &ins,
            Check::default(),
            |t| {
                let (mut y, mut x0) = (Tensor::default(), Tensor::default());
                ops::dpmpp_2m_step(&t[0], &t[1], &t[2], st as f32, c, &mut y, &mut x0)?;
                Ok(if out == 0 { y } else { x0 })
            },
            |v| {
                let [cx, c0, cp] = [c.c_xt, c.c_x0t, c.c_x0prev].map(f64::from);
                (0..v[0].len())
                    .map(|i| {
                        let x0 = v[0][i] - st * v[1][i];
                        if out == 0 {
                            cx * v[0][i] + c0 * x0 + cp * v[2][i]
                        } else {
                            x0
                        }
                    })
                    .collect()
            },
        );
    }
}

#[test]
fn timestep_embedding_against_float64() {
    // The argument t f is rounded to FP32 as diffusers computes it: up to 1000 * 2^-24 off.
    let tol = |dtype| match dtype {
        Dtype::F32 => (1.5e-4, 0.0),
        d => tolerance(d),
    };
    for dim in [32usize, 33] {
        reference_with(
            &format!("timestep_embedding dim {dim}"),
            0x7e0 + dim as u64,
            &[Input::new(5, 1, 0.0, 1000.0)],
            Check {
                tol: Some(tol),
                ..Check::default()
            },
            |t| {
                let mut y = Tensor::default();
                ops::timestep_embedding(&t[0], dim, 10000.0, &mut y)?;
                Ok(y)
            },
            |v| {
                let half = dim / 2;
                let mut y = vec![0.0; v[0].len() * dim];
                for (i, &t) in v[0].iter().enumerate() {
                    for j in 0..half {
                        let f = (-(10000f64.ln()) * j as f64 / half as f64).exp();
                        y[i * dim + j] = (t * f).cos();
                        y[i * dim + half + j] = (t * f).sin();
                    }
                }
                y
            },
        );
    }
}

/// The sizes of the residual-block tests.
#[derive(Clone, Copy)]
struct Sizes {
    n: usize,
    c_in: usize,
    c_out: usize,
    h: usize,
    w: usize,
    groups: usize,
}

impl Sizes {
    fn hw(self) -> usize {
        self.h * self.w
    }
    fn spec(self) -> ResBlockSpec {
        ResBlockSpec {
            dims: (self.n, self.c_in, self.h, self.w).into(),
            c_out: self.c_out,
            num_groups: self.groups,
            eps: EPS as f32,
        }
    }
}

const EPS: f64 = 1e-5;

/// GroupNorm of `(n, c, hw)` with the two-pass float64 variance.
fn group_norm(
    x: &[f64],
    g: &[f64],
    b: &[f64],
    (n, c, hw): (usize, usize, usize),
    groups: usize,
) -> Vec<f64> {
    let m = c / groups * hw;
    let mut y = vec![0.0; x.len()];
    for s in 0..n * groups {
        let row = &x[s * m..][..m];
        let mean = row.iter().sum::<f64>() / m as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / m as f64;
        let rstd = 1.0 / (var + EPS).sqrt();
        for j in 0..m {
            let ch = (s % groups) * (c / groups) + j / hw;
            y[s * m + j] = (row[j] - mean) * rstd * g[ch] + b[ch];
        }
    }
    y
}

fn silu(v: &[f64]) -> Vec<f64> {
    v.iter().map(|&x| x / (1.0 + (-x).exp())).collect()
}

/// A stride-1 "same" convolution with a `k x k` kernel (`k` odd), zero padding `k / 2`.
fn conv_same(
    x: &[f64],
    w: &[f64],
    bias: Option<&[f64]>,
    (n, ci, h, wd): (usize, usize, usize, usize),
    co: usize,
    k: usize,
) -> Vec<f64> {
    let p = (k / 2) as isize;
    let mut y = vec![0.0; n * co * h * wd];
    for s in 0..n {
        for o in 0..co {
            for oy in 0..h {
                for ox in 0..wd {
                    let mut acc = bias.map_or(0.0, |b| b[o]);
                    for i in 0..ci {
                        for ky in 0..k {
                            for kx in 0..k {
                                let (iy, ix) =
                                    (oy as isize + ky as isize - p, ox as isize + kx as isize - p);
                                if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < wd {
                                    acc += x[((s * ci + i) * h + iy as usize) * wd + ix as usize]
                                        * w[((o * ci + i) * k + ky) * k + kx];
                                }
                            }
                        }
                    }
                    y[((s * co + o) * h + oy) * wd + ox] = acc;
                }
            }
        }
    }
    y
}

/// The block in float64 from its inputs, in the order of [`block_inputs`]: `x, gamma1,
/// beta1, w1, b1, t, gamma2, beta2, w2, b2, w_skip, b_skip` (`w_skip`, `b_skip` empty for
/// the identity skip; `t` of `C_out` or `N C_out` values).
fn resblock_f64(v: &[Vec<f64>], s: Sizes) -> Vec<f64> {
    let (n, hw) = (s.n, s.hw());
    let dims_in = (n, s.c_in, s.h, s.w);
    let dims_out = (n, s.c_out, s.h, s.w);
    let h1 = silu(&group_norm(&v[0], &v[1], &v[2], (n, s.c_in, hw), s.groups));
    let mut c1 = conv_same(&h1, &v[3], Some(&v[4]), dims_in, s.c_out, 3);
    for (i, c) in c1.iter_mut().enumerate() {
        let plane = i / hw;
        *c += v[5][plane % v[5].len()];
    }
    let h2 = silu(&group_norm(&c1, &v[6], &v[7], (n, s.c_out, hw), s.groups));
    let mut y = conv_same(&h2, &v[8], Some(&v[9]), dims_out, s.c_out, 3);
    let skip = if v[10].is_empty() {
        v[0].clone()
    } else {
        conv_same(&v[0], &v[10], Some(&v[11]), dims_in, s.c_out, 1)
    };
    for (y, s) in y.iter_mut().zip(skip) {
        *y += s;
    }
    y
}

/// The random inputs of a block: `x` in `x_range`, norms near 1, weights scaled to keep
/// activations of order 1; `per_sample` picks an `(N, C_out)` time shift over `C_out`.
fn block_inputs(s: Sizes, x_range: (f32, f32), skip: bool, per_sample: bool) -> Vec<Input> {
    let (ci, co) = (s.c_in, s.c_out);
    let k1 = 1.0 / ((ci * 9) as f32).sqrt();
    let k2 = 1.0 / ((co * 9) as f32).sqrt();
    let ks = 1.0 / (ci as f32).sqrt();
    let nskip = usize::from(skip);
    vec![
        Input::new(s.n, ci * s.hw(), x_range.0, x_range.1),
        Input::new(1, ci, 0.5, 1.5),
        Input::new(1, ci, -0.5, 0.5),
        Input::new(co, ci * 9, -k1, k1),
        Input::new(1, co, -0.3, 0.3),
        Input::new(if per_sample { s.n } else { 1 }, co, -0.5, 0.5),
        Input::new(1, co, 0.5, 1.5),
        Input::new(1, co, -0.5, 0.5),
        Input::new(co, co * 9, -k2, k2),
        Input::new(1, co, -0.3, 0.3),
        Input::new(co * nskip, ci, -ks, ks),
        Input::new(nskip, co, -0.3, 0.3),
    ]
}

fn block(t: &[Tensor]) -> ResBlock<'_> {
    let skip = t[10].numel() > 0;
    ResBlock {
        gamma1: &t[1],
        beta1: &t[2],
        w1: &t[3],
        b1: Some(&t[4]),
        t_emb_shift: Some(&t[5]),
        gamma2: &t[6],
        beta2: &t[7],
        w2: &t[8],
        b2: Some(&t[9]),
        w_skip: skip.then_some(&t[10]),
        b_skip: skip.then_some(&t[11]),
    }
}

/// The block's tolerance: two convolutions and two norms with every intermediate stored in
/// the dtype.
fn block_tol(dtype: Dtype) -> (f32, f32) {
    match dtype {
        Dtype::F16 => (1e-2, 1e-2),
        Dtype::BF16 => (6e-2, 2e-2),
        _ => (3e-5, 1e-4),
    }
}

/// A forward case: name, sizes, the range of `x`, a 1x1 skip, a per-sample time shift, and
/// the tolerance.
type ForwardCase = (
    &'static str,
    Sizes,
    (f32, f32),
    bool,
    bool,
    fn(Dtype) -> (f32, f32),
);

#[test]
fn resblock_forward_against_the_float64_chain() {
    let s = Sizes {
        n: 2,
        c_in: 4,
        c_out: 6,
        h: 3,
        w: 5,
        groups: 2,
    };
    let same = Sizes { c_out: 4, ..s };
    // Rows near 400 with a spread of 0.1: E[x^2] - E[x]^2 in FP32 loses all of it, while
    // the FP32 rounding of the sum (not of the variance) bounds a two-pass result to about
    // 1e-3 of the normalized values.
    let far: fn(Dtype) -> (f32, f32) = |d| match d {
        Dtype::F32 => (1e-2, 0.0),
        d => block_tol(d),
    };
    let cases: [ForwardCase; 3] = [
        (
            "1x1 skip, per-sample t",
            s,
            (-1.5, 1.5),
            true,
            true,
            block_tol,
        ),
        (
            "identity skip, shared t",
            same,
            (-1.5, 1.5),
            false,
            false,
            block_tol,
        ),
        (
            "identity skip, rows near 400",
            same,
            (399.95, 400.05),
            false,
            true,
            far,
        ),
    ];
    for (k, (name, sz, range, skip, per_sample, tol)) in cases.into_iter().enumerate() {
        reference_with(
            &format!("resblock_forward {name}"),
            0x5b0 + k as u64,
            &block_inputs(sz, range, skip, per_sample),
            Check {
                tol: Some(tol),
                ..Check::default()
            },
            |t| {
                let mut y = brotensor_tests::reference::stale(&t[0])?;
                ops::resblock_forward(&t[0], &block(t), &sz.spec(), &mut y)?;
                Ok(y)
            },
            |v| resblock_f64(v, sz),
        );
    }
}

#[test]
fn resblock_forward_int8w_against_the_float64_chain() {
    use brotensor_tests::{assert_close_rows, round_through, tensor, SplitMix64};
    let s = Sizes {
        n: 2,
        c_in: 4,
        c_out: 6,
        h: 3,
        w: 4,
        groups: 2,
    };
    let ins = block_inputs(s, (-1.5, 1.5), true, true);
    let mut rng = SplitMix64::new(0x18);
    let data: Vec<Vec<f32>> = ins
        .iter()
        .map(|i| rng.uniform(i.rows * i.cols, i.lo, i.hi))
        .collect();
    let quant = |len: usize, seed: usize| -> Vec<i8> {
        (0..len)
            .map(|i| (((i * 37 + seed * 11) % 255) as i32 - 127) as i8)
            .collect()
    };
    let (q1, q2, qs) = (quant(6 * 36, 1), quant(6 * 54, 2), quant(6 * 4, 3));
    let (s1, s2, ss) = (
        rng.uniform(6, 0.001, 0.003),
        rng.uniform(6, 0.001, 0.003),
        rng.uniform(6, 0.003, 0.006),
    );
    let deq = |q: &[i8], sc: &[f32]| -> Vec<f64> {
        let row = q.len() / sc.len();
        q.iter()
            .enumerate()
            .map(|(i, &v)| f64::from(v) * f64::from(sc[i / row]))
            .collect()
    };
    for dtype in [Dtype::F16, Dtype::BF16] {
        let mut v: Vec<Vec<f64>> = data
            .iter()
            .map(|d| round_through(dtype, d).into_iter().map(f64::from).collect())
            .collect();
        (v[3], v[8], v[10]) = (deq(&q1, &s1), deq(&q2, &s2), deq(&qs, &ss));
        let want: Vec<f32> = resblock_f64(&v, s).into_iter().map(|x| x as f32).collect();
        for dev in std::iter::once(Device::Cpu).chain(brotensor_tests::gpu_devices()) {
            let t: Vec<Tensor> = ins
                .iter()
                .zip(&data)
                .map(|(i, d)| tensor(dev, d, i.rows, i.cols, dtype).unwrap())
                .collect();
            let i8t = |q: &[i8], rows: usize| {
                Tensor::from_slice_on(dev, q, rows, q.len() / rows).unwrap()
            };
            let f32t = |v: &[f32]| Tensor::from_slice_on(dev, v, v.len(), 1).unwrap();
            let mut y = Tensor::default();
            ops::resblock_forward_int8w_fp16(
                &t[0],
                &block(&t),
                (&i8t(&q1, 6), &f32t(&s1)),
                (&i8t(&q2, 6), &f32t(&s2)),
                Some((&i8t(&qs, 6), &f32t(&ss))),
                &s.spec(),
                &mut y,
            )
            .unwrap();
            assert_eq!(y.dtype(), dtype);
            let got = brotensor_tests::read_f32(&y).unwrap();
            let tag = format!("resblock_forward_int8w_fp16 on {dev} {dtype}");
            assert_close_rows(&tag, &want, &got, s.c_out * s.hw(), block_tol(dtype));
        }
    }
}

/// Rows padded with zeros to one width, as one `(rows, width)` table.
fn table(rows: &[Vec<f64>]) -> (Vec<f64>, usize) {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(rows.len() * width);
    for r in rows {
        out.extend(r);
        out.extend(std::iter::repeat_n(0.0, width - r.len()));
    }
    (out, width)
}

#[test]
fn resblock_backward_against_finite_differences() {
    let s = Sizes {
        n: 2,
        c_in: 4,
        c_out: 6,
        h: 3,
        w: 3,
        groups: 2,
    };
    let same = Sizes { c_out: 4, ..s };
    // Gradients start at 0.25 (they accumulate); dx starts stale (it is overwritten).
    const START: f64 = 0.25;
    for (k, (name, sz, skip, per_sample)) in [
        ("1x1 skip, per-sample t", s, true, true),
        ("identity skip, shared t", same, false, false),
    ]
    .into_iter()
    .enumerate()
    {
        let mut ins = block_inputs(sz, (-1.5, 1.5), skip, per_sample);
        ins.push(Input::new(sz.n, sz.c_out * sz.hw(), -1.0, 1.0));
        let params = if skip { 11 } else { 9 };
        reference_with(
            &format!("resblock_backward {name}"),
            0x5c0 + k as u64,
            &ins,
            Check {
                tol: Some(block_tol),
                same_dtype: false,
                ..Check::default()
            },
            |t| {
                let b = block(t);
                let start = |i: usize| -> Result<Tensor> {
                    let mut g = t[i].try_clone()?;
                    ops::fill(&mut g, START as f32)?;
                    Ok(g)
                };
                let mut g: Vec<Tensor> = (1..12).map(start).collect::<Result<_>>()?;
                let mut dx = brotensor_tests::reference::stale(&t[0])?;
                let [dg1, dbe1, dw1, db1, dt, dg2, dbe2, dw2, db2, dws, dbs] = &mut g[..] else {
                    unreachable!()
                };
                ops::resblock_backward(
                    &t[0],
                    &b,
                    &sz.spec(),
                    &t[12],
                    &mut dx,
                    ResBlockGrads {
                        dgamma1: dg1,
                        dbeta1: dbe1,
                        dw1,
                        db1: Some(db1),
                        dt_emb_shift: Some(dt),
                        dgamma2: dg2,
                        dbeta2: dbe2,
                        dw2,
                        db2: Some(db2),
                        dw_skip: skip.then_some(dws),
                        db_skip: skip.then_some(dbs),
                    },
                )?;
                assert_eq!(dx.dims(), t[0].dims());
                let mut rows = vec![brotensor_tests::read_f32(&dx)?];
                for g in &g[..params] {
                    rows.push(brotensor_tests::read_f32(g)?);
                }
                let rows: Vec<Vec<f64>> = rows
                    .iter()
                    .map(|r| r.iter().map(|&v| f64::from(v)).collect())
                    .collect();
                let (flat, width) = table(&rows);
                let flat: Vec<f32> = flat.into_iter().map(|v| v as f32).collect();
                Tensor::from_slice_on(t[0].device(), &flat, rows.len(), width)
            },
            |v| {
                let inputs: Vec<usize> = (0..=params).collect();
                let fd = finite_differences(&v[..12], &v[12], &inputs, |w| resblock_f64(w, sz));
                let rows: Vec<Vec<f64>> = fd
                    .into_iter()
                    .enumerate()
                    .map(|(k, r)| {
                        if k == 0 {
                            r
                        } else {
                            r.into_iter().map(|g| g + START).collect()
                        }
                    })
                    .collect();
                table(&rows).0
            },
        );
    }
}

#[test]
fn bad_arguments_are_errors_naming_the_operand() {
    let s = Sizes {
        n: 1,
        c_in: 4,
        c_out: 6,
        h: 2,
        w: 2,
        groups: 2,
    };
    let ins = block_inputs(s, (-1.0, 1.0), true, true);
    let t: Vec<Tensor> = ins
        .iter()
        .map(|i| Tensor::zeros(i.rows, i.cols, Dtype::F32).unwrap())
        .collect();
    let mut y = Tensor::default();
    let run = |b: &ResBlock<'_>, spec: ResBlockSpec, y: &mut Tensor| {
        ops::resblock_forward(&t[0], b, &spec, y)
    };
    assert!(run(&block(&t), s.spec(), &mut y).is_ok());
    let msg = |r: Result<()>| r.unwrap_err().to_string();
    let e = msg(run(
        &block(&t),
        ResBlockSpec {
            num_groups: 3,
            ..s.spec()
        },
        &mut y,
    ));
    assert!(e.contains("num_groups 3 must divide"), "{e}");
    let wide_t = Tensor::zeros(1, 7, Dtype::F32).unwrap();
    let e = msg(run(
        &ResBlock {
            t_emb_shift: Some(&wide_t),
            ..block(&t)
        },
        s.spec(),
        &mut y,
    ));
    assert!(e.contains("`t_emb_shift` must be"), "{e}");
    let e = msg(run(
        &ResBlock {
            w_skip: None,
            b_skip: None,
            ..block(&t)
        },
        s.spec(),
        &mut y,
    ));
    assert!(e.contains("`w_skip` is required"), "{e}");
    let e = msg(run(
        &ResBlock {
            w2: &t[3],
            ..block(&t)
        },
        s.spec(),
        &mut y,
    ));
    assert!(e.contains("`w2` must be shaped"), "{e}");
    let short = Tensor::zeros(1, 3, Dtype::F32).unwrap();
    let e = msg(run(
        &ResBlock {
            gamma2: &short,
            ..block(&t)
        },
        s.spec(),
        &mut y,
    ));
    assert!(e.contains("`gamma2` must hold 6"), "{e}");
    // Samplers: mismatched sizes and impossible schedules.
    let (a, b) = (
        Tensor::zeros(2, 3, Dtype::F32).unwrap(),
        Tensor::zeros(3, 2, Dtype::F32).unwrap(),
    );
    let e = ops::euler_step(&a, &b, 1.0, 0.5, &mut y).unwrap_err();
    assert!(
        matches!(e, Error::Shape { .. }) && e.to_string().contains("eps_pred"),
        "{e}"
    );
    let e = ops::ddim_step(&a, &a, 0.5, 0.9, 0.5, &mut y).unwrap_err();
    assert!(e.to_string().contains("must not be negative"), "{e}");
    let e = ops::ddim_step(&a, &a, 0.0, 0.5, 0.0, &mut y).unwrap_err();
    assert!(e.to_string().contains("`alpha_t` must be in (0, 1]"), "{e}");
    let (mut y2, c) = (
        Tensor::default(),
        Dpmpp2mCoefficients::new(3.0, 2.0, 1.0).unwrap(),
    );
    let e = ops::dpmpp_2m_step(&a, &a, &b, 2.0, c, &mut y, &mut y2).unwrap_err();
    assert!(e.to_string().contains("x0_prev"), "{e}");
    assert!(Dpmpp2mCoefficients::new(1.0, 2.0, 0.5).is_err());
    let e = ops::euler_step(&a, &a, f32::NAN, 0.5, &mut y).unwrap_err();
    assert!(e.to_string().contains("`sigma_t` must be finite"), "{e}");
    // Row affine and embedding.
    let pair = Tensor::zeros(1, 2, Dtype::F32).unwrap();
    let e = ops::modulate(&a, &pair, &short, &mut y).unwrap_err();
    assert!(e.to_string().contains("`scale` must hold 3"), "{e}");
    let e = ops::modulate(&a, &short, &pair, &mut y).unwrap_err();
    assert!(e.to_string().contains("`shift` must hold 3"), "{e}");
    let e = ops::broadcast_mul(&a, &b, &mut y).unwrap_err();
    assert!(e.to_string().contains("`v` must hold 3"), "{e}");
    let e = ops::timestep_embedding(&short, 1, 10000.0, &mut y).unwrap_err();
    assert!(e.to_string().contains("`dim` must be at least 2"), "{e}");
    let e = ops::timestep_embedding(&short, 8, 0.0, &mut y).unwrap_err();
    assert!(e.to_string().contains("`max_period`"), "{e}");
}

#[test]
fn empty_batches_give_empty_outputs() {
    let s = Sizes {
        n: 0,
        c_in: 4,
        c_out: 4,
        h: 3,
        w: 3,
        groups: 2,
    };
    let ins = block_inputs(s, (-1.0, 1.0), false, false);
    let t: Vec<Tensor> = ins
        .iter()
        .map(|i| Tensor::zeros(i.rows, i.cols, Dtype::F32).unwrap())
        .collect();
    let mut y = Tensor::default();
    ops::resblock_forward(&t[0], &block(&t), &s.spec(), &mut y).unwrap();
    assert_eq!(y.dims(), [0, 36]);
    let mut e = Tensor::default();
    ops::timestep_embedding(
        &Tensor::zeros(0, 1, Dtype::F32).unwrap(),
        8,
        10000.0,
        &mut e,
    )
    .unwrap();
    assert_eq!(e.dims(), [0, 8]);
    ops::euler_step(&t[0], &t[0], 1.0, 0.5, &mut y).unwrap();
    assert_eq!(y.numel(), 0);
}

#[test]
fn methods_match_the_functions() {
    let x = Tensor::from_slice(&[1.0f32, -2.0, 3.0, 0.5, 0.25, -1.0], 2, 3).unwrap();
    let (s, b) = (
        Tensor::from_slice(&[0.5f32, -1.0, 2.0], 1, 3).unwrap(),
        Tensor::from_slice(&[1.0f32, 0.0, -1.0], 1, 3).unwrap(),
    );
    let y = x.modulate(&s, &b).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), [2.5, 0.0, 8.0, 1.75, 0.0, -4.0]);
    let t = Tensor::from_slice(&[0.0f32, 500.0], 2, 1).unwrap();
    let e = t.timestep_embedding(6).unwrap();
    let mut want = Tensor::default();
    ops::timestep_embedding(&t, 6, 10000.0, &mut want).unwrap();
    assert_eq!(e.dims(), [2, 6]);
    assert_eq!(e.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    // t = 0: cos 0 = 1 in the first half, sin 0 = 0 in the second.
    assert_eq!(
        &e.to_vec::<f32>().unwrap()[..6],
        [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    );
}
