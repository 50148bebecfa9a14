//! The LSTM on every device against a float64 step loop written here (PyTorch `nn.LSTM`'s
//! equations): the training forward with its caches and final states, the inference
//! forward, the streaming cell, and the full backward against float64 central finite
//! differences of `sum(dy * y)` (parameter gradients accumulating onto planted values,
//! `db_ih` and `db_hh` both), with and without initial states and biases; the error cases.

use brotensor::ops::{self, LstmCache, LstmGrads, LstmWeights};
use brotensor::{Device, Dtype, Error, Tensor};
use brotensor_tests::{assert_close_rows, gpu_devices, SplitMix64};

fn devices() -> Vec<Device> {
    std::iter::once(Device::Cpu).chain(gpu_devices()).collect()
}

const T: usize = 5;
const B: usize = 3;
const I: usize = 4;
const H: usize = 6;

/// The float64 problem: every input as a flat vector.
#[derive(Clone)]
struct Problem {
    x: Vec<f64>,
    w_ih: Vec<f64>,
    w_hh: Vec<f64>,
    b_ih: Vec<f64>,
    b_hh: Vec<f64>,
    h0: Vec<f64>,
    c0: Vec<f64>,
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

impl Problem {
    fn new(seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let mut v = |n: usize, scale: f32| -> Vec<f64> {
            rng.uniform(n, -scale, scale)
                .into_iter()
                .map(f64::from)
                .collect()
        };
        Problem {
            x: v(T * B * I, 1.0),
            w_ih: v(4 * H * I, 0.5),
            w_hh: v(4 * H * H, 0.5),
            b_ih: v(4 * H, 0.3),
            b_hh: v(4 * H, 0.3),
            h0: v(B * H, 0.8),
            c0: v(B * H, 0.8),
        }
    }

    /// The float64 forward: `(y, gates, c)` of every step, with or without biases and
    /// initial states.
    fn forward(&self, bias: bool, state: bool) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let (mut y, mut gates, mut cs) = (vec![], vec![], vec![]);
        let mut h = if state {
            self.h0.clone()
        } else {
            vec![0.0; B * H]
        };
        let mut c = if state {
            self.c0.clone()
        } else {
            vec![0.0; B * H]
        };
        for t in 0..T {
            let (mut nh, mut nc) = (vec![0.0; B * H], vec![0.0; B * H]);
            for b in 0..B {
                let x = &self.x[(t * B + b) * I..][..I];
                let mut z = [0.0; 4 * H];
                for (r, z) in z.iter_mut().enumerate() {
                    let mut s = if bias {
                        self.b_ih[r] + self.b_hh[r]
                    } else {
                        0.0
                    };
                    s += (0..I).map(|j| self.w_ih[r * I + j] * x[j]).sum::<f64>();
                    s += (0..H)
                        .map(|j| self.w_hh[r * H + j] * h[b * H + j])
                        .sum::<f64>();
                    *z = s;
                }
                let mut g4 = vec![0.0; 4 * H];
                for k in 0..H {
                    let (i, f, g, o) = (
                        sigmoid(z[k]),
                        sigmoid(z[H + k]),
                        z[2 * H + k].tanh(),
                        sigmoid(z[3 * H + k]),
                    );
                    let cell = f * c[b * H + k] + i * g;
                    nc[b * H + k] = cell;
                    nh[b * H + k] = o * cell.tanh();
                    g4[k] = i;
                    g4[H + k] = f;
                    g4[2 * H + k] = g;
                    g4[3 * H + k] = o;
                }
                gates.extend(g4);
            }
            y.extend(&nh);
            cs.extend(&nc);
            h = nh;
            c = nc;
        }
        (y, gates, cs)
    }
}

fn narrow(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

fn t2(dev: Device, v: &[f64], rows: usize, cols: usize) -> Tensor {
    Tensor::from_slice_on(dev, &narrow(v), rows, cols).unwrap()
}

const TOL: (f32, f32) = (2e-5, 1e-5);

#[test]
fn forward_forms_follow_the_float64_step_loop() {
    let pr = Problem::new(1);
    for dev in devices() {
        for (bias, state) in [(true, true), (false, false), (true, false)] {
            let (want_y, want_g, want_c) = pr.forward(bias, state);
            let tag = |what: &str| format!("{what} bias {bias} state {state} on {dev}");
            let (w_ih, w_hh) = (t2(dev, &pr.w_ih, 4 * H, I), t2(dev, &pr.w_hh, 4 * H, H));
            let b_ih = Tensor::from_slice_nd_on(dev, &narrow(&pr.b_ih), &[4 * H]).unwrap();
            let b_hh = t2(dev, &pr.b_hh, 4 * H, 1);
            let w = LstmWeights {
                w_ih: &w_ih,
                w_hh: &w_hh,
                b_ih: bias.then_some(&b_ih),
                b_hh: bias.then_some(&b_hh),
            };
            let (h0, c0) = (t2(dev, &pr.h0, B, H), t2(dev, &pr.c0, B, H));
            let init = if state {
                (Some(&h0), Some(&c0))
            } else {
                (None, None)
            };
            let x = t2(dev, &pr.x, T * B, I);
            let (mut y, mut gates, mut c) =
                (Tensor::default(), Tensor::default(), Tensor::default());
            let (mut h_t, mut c_t) = (Tensor::default(), Tensor::default());
            ops::lstm_forward_train(
                &x,
                &w,
                init,
                (T, B),
                (&mut y, &mut gates, &mut c),
                Some((&mut h_t, &mut c_t)),
            )
            .unwrap();
            let last = (T - 1) * B * H;
            assert_close_rows(
                &tag("y"),
                &narrow(&want_y),
                &y.to_vec::<f32>().unwrap(),
                H,
                TOL,
            );
            assert_close_rows(
                &tag("gates"),
                &narrow(&want_g),
                &gates.to_vec::<f32>().unwrap(),
                4 * H,
                TOL,
            );
            assert_close_rows(
                &tag("c"),
                &narrow(&want_c),
                &c.to_vec::<f32>().unwrap(),
                H,
                TOL,
            );
            assert_close_rows(
                &tag("h_T"),
                &narrow(&want_y[last..]),
                &h_t.to_vec::<f32>().unwrap(),
                H,
                TOL,
            );
            assert_close_rows(
                &tag("c_T"),
                &narrow(&want_c[last..]),
                &c_t.to_vec::<f32>().unwrap(),
                H,
                TOL,
            );

            let mut yi = Tensor::default();
            let (mut hi, mut ci) = (Tensor::default(), Tensor::default());
            ops::lstm_forward(&x, &w, init, (T, B), &mut yi, Some((&mut hi, &mut ci))).unwrap();
            assert_close_rows(
                &tag("lstm_forward y"),
                &narrow(&want_y),
                &yi.to_vec::<f32>().unwrap(),
                H,
                TOL,
            );
            assert_close_rows(
                &tag("lstm_forward c_T"),
                &narrow(&want_c[last..]),
                &ci.to_vec::<f32>().unwrap(),
                H,
                TOL,
            );

            // The streaming cell, one step at a time from the same state.
            let zeros = vec![0.0; B * H];
            let (mut h, mut cc) = if state {
                (t2(dev, &pr.h0, B, H), t2(dev, &pr.c0, B, H))
            } else {
                (t2(dev, &zeros, B, H), t2(dev, &zeros, B, H))
            };
            for s in 0..T {
                let xs = t2(dev, &pr.x[s * B * I..][..B * I], B, I);
                ops::lstm_cell(&xs, &w, &mut h, &mut cc).unwrap();
                let want = narrow(&want_y[s * B * H..][..B * H]);
                assert_close_rows(
                    &tag(&format!("lstm_cell step {s}")),
                    &want,
                    &h.to_vec::<f32>().unwrap(),
                    H,
                    TOL,
                );
            }
            assert_close_rows(
                &tag("lstm_cell c"),
                &narrow(&want_c[last..]),
                &cc.to_vec::<f32>().unwrap(),
                H,
                TOL,
            );
        }
    }
}

/// `sum(dy * y)` of the float64 forward.
fn loss(pr: &Problem, dy: &[f64], bias: bool, state: bool) -> f64 {
    pr.forward(bias, state)
        .0
        .iter()
        .zip(dy)
        .map(|(a, b)| a * b)
        .sum()
}

/// Central differences of [`loss`] with respect to the field `pick` selects.
fn numeric(
    pr: &Problem,
    dy: &[f64],
    (bias, state): (bool, bool),
    pick: fn(&mut Problem) -> &mut Vec<f64>,
) -> Vec<f64> {
    let eps = 1e-6;
    let n = pick(&mut pr.clone()).len();
    (0..n)
        .map(|i| {
            let (mut up, mut down) = (pr.clone(), pr.clone());
            pick(&mut up)[i] += eps;
            pick(&mut down)[i] -= eps;
            (loss(&up, dy, bias, state) - loss(&down, dy, bias, state)) / (2.0 * eps)
        })
        .collect()
}

#[test]
fn backward_matches_float64_finite_differences() {
    let pr = Problem::new(2);
    let dy: Vec<f64> = SplitMix64::new(3)
        .uniform(T * B * H, -1.0, 1.0)
        .into_iter()
        .map(f64::from)
        .collect();
    for (bias, state) in [(true, true), (false, false)] {
        let flags = (bias, state);
        let want_dx = numeric(&pr, &dy, flags, |p| &mut p.x);
        let want_dw_ih = numeric(&pr, &dy, flags, |p| &mut p.w_ih);
        let want_dw_hh = numeric(&pr, &dy, flags, |p| &mut p.w_hh);
        let want_db = numeric(&pr, &dy, (true, state), |p| &mut p.b_ih);
        let want_dh0 = numeric(&pr, &dy, (bias, true), |p| &mut p.h0);
        let want_dc0 = numeric(&pr, &dy, (bias, true), |p| &mut p.c0);
        for dev in devices() {
            let tag = |what: &str| format!("{what} bias {bias} state {state} on {dev}");
            let (w_ih, w_hh) = (t2(dev, &pr.w_ih, 4 * H, I), t2(dev, &pr.w_hh, 4 * H, H));
            let (b_ih, b_hh) = (t2(dev, &pr.b_ih, 4 * H, 1), t2(dev, &pr.b_hh, 4 * H, 1));
            let w = LstmWeights {
                w_ih: &w_ih,
                w_hh: &w_hh,
                b_ih: bias.then_some(&b_ih),
                b_hh: bias.then_some(&b_hh),
            };
            let (h0, c0) = (t2(dev, &pr.h0, B, H), t2(dev, &pr.c0, B, H));
            let init = if state {
                (Some(&h0), Some(&c0))
            } else {
                (None, None)
            };
            let x = t2(dev, &pr.x, T * B, I);
            let (mut y, mut gates, mut c) =
                (Tensor::default(), Tensor::default(), Tensor::default());
            ops::lstm_forward_train(&x, &w, init, (T, B), (&mut y, &mut gates, &mut c), None)
                .unwrap();
            // Planted starting values: the parameter gradients must add to them.
            let planted = |n: usize, seed: u64| -> Vec<f64> {
                SplitMix64::new(seed)
                    .uniform(n, -0.5, 0.5)
                    .into_iter()
                    .map(f64::from)
                    .collect()
            };
            let (p_ih, p_hh, p_b) = (
                planted(4 * H * I, 10),
                planted(4 * H * H, 11),
                planted(4 * H, 12),
            );
            let mut dw_ih = t2(dev, &p_ih, 4 * H, I);
            let mut dw_hh = t2(dev, &p_hh, 4 * H, H);
            let mut db_ih = t2(dev, &p_b, 4 * H, 1);
            let mut db_hh = Tensor::from_slice_nd_on(dev, &narrow(&p_b), &[4 * H]).unwrap();
            let mut dx = t2(dev, &planted(T * B * I, 13), T * B, I);
            let (mut dh0, mut dc0) = (Tensor::default(), Tensor::default());
            let dyt = t2(dev, &dy, T * B, H);
            ops::lstm_backward(
                &x,
                &w,
                init,
                &LstmCache {
                    y: &y,
                    gates: &gates,
                    c: &c,
                },
                &dyt,
                (T, B),
                LstmGrads {
                    dx: &mut dx,
                    dw_ih: &mut dw_ih,
                    dw_hh: &mut dw_hh,
                    db_ih: Some(&mut db_ih),
                    db_hh: Some(&mut db_hh),
                    dh0: Some(&mut dh0),
                    dc0: Some(&mut dc0),
                },
            )
            .unwrap();
            let plus = |a: &[f64], b: &[f64]| -> Vec<f32> {
                a.iter().zip(b).map(|(a, b)| (a + b) as f32).collect()
            };
            let tol = (1e-4, 1e-4);
            assert_close_rows(
                &tag("dx"),
                &narrow(&want_dx),
                &dx.to_vec::<f32>().unwrap(),
                I,
                tol,
            );
            assert_close_rows(
                &tag("dw_ih"),
                &plus(&p_ih, &want_dw_ih),
                &dw_ih.to_vec::<f32>().unwrap(),
                I,
                tol,
            );
            assert_close_rows(
                &tag("dw_hh"),
                &plus(&p_hh, &want_dw_hh),
                &dw_hh.to_vec::<f32>().unwrap(),
                H,
                tol,
            );
            // The bias gradient does not depend on whether the forward had biases' values
            // in it except through the activations: compare against the run with biases.
            if bias {
                assert_close_rows(
                    &tag("db_ih"),
                    &plus(&p_b, &want_db),
                    &db_ih.to_vec::<f32>().unwrap(),
                    4 * H,
                    tol,
                );
                assert_close_rows(
                    &tag("db_hh"),
                    &plus(&p_b, &want_db),
                    &db_hh.to_vec::<f32>().unwrap(),
                    4 * H,
                    tol,
                );
            }
            if state {
                assert_close_rows(
                    &tag("dh0"),
                    &narrow(&want_dh0),
                    &dh0.to_vec::<f32>().unwrap(),
                    H,
                    tol,
                );
                assert_close_rows(
                    &tag("dc0"),
                    &narrow(&want_dc0),
                    &dc0.to_vec::<f32>().unwrap(),
                    H,
                    tol,
                );
            } else {
                // Without initial states their gradients are still the chain's at zero state.
                assert_eq!(dh0.dims(), [B, H]);
            }
        }
    }
}

fn assert_err(r: brotensor::Result<()>, op: &str, needle: &str) {
    match r {
        Err(e @ (Error::Shape { .. } | Error::Dtype { .. })) => {
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("brotensor: {op}: ")), "{msg}");
            assert!(msg.contains(needle), "`{msg}` lacks `{needle}`");
        }
        other => panic!("{op}: expected an error about {needle}, got {other:?}"),
    }
}

#[test]
fn bad_shapes_are_errors_naming_the_operand() {
    let w_ih = Tensor::zeros(8, 3, Dtype::F32).unwrap();
    let w_hh = Tensor::zeros(8, 2, Dtype::F32).unwrap();
    let bad_hh = Tensor::zeros(8, 3, Dtype::F32).unwrap();
    let bias5 = Tensor::zeros(5, 1, Dtype::F32).unwrap();
    let x = Tensor::zeros(6, 3, Dtype::F32).unwrap();
    let w = LstmWeights {
        w_ih: &w_ih,
        w_hh: &w_hh,
        b_ih: None,
        b_hh: None,
    };
    let mut y = Tensor::default();
    let bad = LstmWeights { w_hh: &bad_hh, ..w };
    assert_err(
        ops::lstm_forward(&x, &bad, (None, None), (3, 2), &mut y, None),
        "lstm_forward",
        "w_hh must be (4H, H)",
    );
    let bad = LstmWeights {
        b_ih: Some(&bias5),
        ..w
    };
    assert_err(
        ops::lstm_forward(&x, &bad, (None, None), (3, 2), &mut y, None),
        "lstm_forward",
        "b_ih must hold 4H = 8",
    );
    assert_err(
        ops::lstm_forward(&x, &w, (None, None), (4, 2), &mut y, None),
        "lstm_forward",
        "T * B",
    );
    let odd = Tensor::zeros(7, 3, Dtype::F32).unwrap();
    let bad = LstmWeights { w_ih: &odd, ..w };
    assert_err(
        ops::lstm_forward(&x, &bad, (None, None), (3, 2), &mut y, None),
        "lstm_forward",
        "w_ih must be (4H, I)",
    );
    let h0 = Tensor::zeros(3, 2, Dtype::F32).unwrap();
    assert_err(
        ops::lstm_forward(&x, &w, (Some(&h0), None), (3, 2), &mut y, None),
        "lstm_forward",
        "h0 must be (B, H)",
    );
    let xh = Tensor::zeros(6, 3, Dtype::F16).unwrap();
    assert_err(
        ops::lstm_forward(&xh, &w, (None, None), (3, 2), &mut y, None),
        "lstm_forward",
        "x",
    );
    let (mut g, mut c) = (Tensor::default(), Tensor::default());
    ops::lstm_forward_train(&x, &w, (None, None), (3, 2), (&mut y, &mut g, &mut c), None).unwrap();
    let dy = Tensor::zeros(6, 2, Dtype::F32).unwrap();
    let (mut dx, mut dw_ih) = (Tensor::default(), Tensor::default());
    let mut dw_hh = Tensor::zeros(8, 2, Dtype::F32).unwrap();
    let r = ops::lstm_backward(
        &x,
        &w,
        (None, None),
        &LstmCache {
            y: &y,
            gates: &g,
            c: &c,
        },
        &dy,
        (3, 2),
        LstmGrads {
            dx: &mut dx,
            dw_ih: &mut dw_ih,
            dw_hh: &mut dw_hh,
            db_ih: None,
            db_hh: None,
            dh0: None,
            dc0: None,
        },
    );
    assert_err(r, "lstm_backward", "dw_ih must be pre-sized");
}
