//! Activations and their gradients against float64 references written here from each op's
//! definition (not the CPU crate's code), on every device and float dtype, through every
//! public form.

use std::f64::consts::PI;

use brotensor::{ops, Dtype, Result, Tensor};
use brotensor_tests::reference::{
    all_forms, erf, map1, one, stale, Alloc, Fwd, InPlace, Reference,
};
use brotensor_tests::{reference_with, Check, Input};

/// Not a multiple of the vector width: the scalar path.
const ODD: (usize, usize) = (33, 21);
/// A multiple of 4 spanning a few cubes: the vectorized path.
const VEC: (usize, usize) = (8, 128);

/// The forward input (or output) in `[lo, hi)` and an upstream gradient in `[-1, 1)`.
fn with_grad((r, c): (usize, usize), lo: f32, hi: f32) -> [Input; 2] {
    [Input::new(r, c, lo, hi), Input::new(r, c, -1.0, 1.0)]
}

/// `dy * f'(x)` for gradients: `df(x)` times the second input.
fn chain(df: impl Fn(f64) -> f64 + 'static) -> Reference {
    Box::new(move |v| v[0].iter().zip(&v[1]).map(|(&x, &g)| g * df(x)).collect())
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn relu(x: f64) -> f64 {
    x.max(0.0)
}

fn silu(x: f64) -> f64 {
    x * sigmoid(x)
}

/// `sqrt(2/pi)` and the cubic coefficient of the tanh approximation.
const GELU_K: f64 = 0.797_884_560_802_865_4;
const GELU_C: f64 = 0.044_715;

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (GELU_K * (x + GELU_C * x * x * x)).tanh())
}

/// d/dx of [`gelu`]: `0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)`, `t = tanh(k (x + c x^3))`.
fn gelu_grad(x: f64) -> f64 {
    let t = (GELU_K * (x + GELU_C * x * x * x)).tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_C * x * x)
}

fn gelu_exact(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / 2f64.sqrt()))
}

/// `Phi(x) + x phi(x)`.
fn gelu_exact_grad(x: f64) -> f64 {
    0.5 * (1.0 + erf(x / 2f64.sqrt())) + x * (-0.5 * x * x).exp() / (2.0 * PI).sqrt()
}

fn quick_gelu(x: f64) -> f64 {
    x * sigmoid(1.702 * x)
}

fn silu_grad(x: f64) -> f64 {
    let s = sigmoid(x);
    s * (1.0 + x * (1.0 - s))
}

fn quick_gelu_grad(x: f64) -> f64 {
    let s = sigmoid(1.702 * x);
    s + 1.702 * x * s * (1.0 - s)
}

#[test]
fn erf_of_the_reference_is_right() {
    // Tabulated values (Abramowitz and Stegun, table 7.1) and the odd symmetry.
    for (x, want) in [
        (0.5, 0.520_499_877_813_046_5),
        (1.0, 0.842_700_792_949_714_9),
        (2.0, 0.995_322_265_018_952_7),
        (3.0, 0.999_977_909_503_001_4),
    ] {
        assert!((erf(x) - want).abs() < 1e-15, "erf({x}) = {}", erf(x));
        assert!((erf(-x) + want).abs() < 1e-15);
    }
}

type Bwd = fn(&Tensor, &Tensor, &mut Tensor) -> Result<()>;
/// A scalar function in f64.
type F1 = fn(f64) -> f64;
/// An input range.
type Range = (f32, f32);
/// A point-wise case: its name, its three forms, its f64 math and its input range.
type PointwiseCase = (&'static str, (Fwd, Alloc, InPlace), F1, Range);

#[test]
fn pointwise_forward_all_forms() {
    let cases: [PointwiseCase; 7] = [
        (
            "relu",
            (ops::relu_forward, ops::relu, Tensor::relu_),
            relu,
            (-2.0, 2.0),
        ),
        (
            "tanh",
            (ops::tanh_forward, ops::tanh, Tensor::tanh_),
            f64::tanh,
            (-4.0, 4.0),
        ),
        (
            "sigmoid",
            (ops::sigmoid_forward, ops::sigmoid, Tensor::sigmoid_),
            sigmoid,
            (-6.0, 6.0),
        ),
        (
            "silu",
            (ops::silu_forward, ops::silu, Tensor::silu_),
            silu,
            (-6.0, 6.0),
        ),
        (
            "gelu",
            (ops::gelu_forward, ops::gelu, Tensor::gelu_),
            gelu,
            (-5.0, 5.0),
        ),
        (
            "gelu_exact",
            (
                ops::gelu_exact_forward,
                ops::gelu_exact,
                Tensor::gelu_exact_,
            ),
            gelu_exact,
            (-5.0, 5.0),
        ),
        (
            "quick_gelu",
            (
                ops::quick_gelu_forward,
                ops::quick_gelu,
                Tensor::quick_gelu_,
            ),
            quick_gelu,
            (-5.0, 5.0),
        ),
    ];
    for (i, (name, forms, f, range)) in cases.into_iter().enumerate() {
        let seed = 0x6000 + 0x10 * i as u64;
        all_forms(name, seed, (VEC, ODD), range, forms, f, Check::default());
    }
    let batched: [(&str, Fwd, F1, Range); 2] = [
        (
            "relu_forward_batched",
            ops::relu_forward_batched,
            relu,
            (-2.0, 2.0),
        ),
        (
            "tanh_forward_batched",
            ops::tanh_forward_batched,
            f64::tanh,
            (-4.0, 4.0),
        ),
    ];
    for (i, (name, fwd, f, (lo, hi))) in batched.into_iter().enumerate() {
        reference_with(
            name,
            0x6080 + i as u64,
            &one(ODD, lo, hi),
            Check::default(),
            move |t| {
                let mut y = stale(&t[0])?;
                fwd(&t[0], &mut y)?;
                Ok(y)
            },
            map1(f),
        );
    }
}

#[test]
fn pointwise_backward() {
    let cases: [(&str, Bwd, F1, Range); 9] = [
        (
            "relu_backward",
            ops::relu_backward,
            |x| f64::from(u8::from(x > 0.0)),
            (-2.0, 2.0),
        ),
        (
            "relu_backward_batched",
            ops::relu_backward_batched,
            |x| f64::from(u8::from(x > 0.0)),
            (-2.0, 2.0),
        ),
        // tanh and sigmoid gradients read the forward output y.
        (
            "tanh_backward",
            ops::tanh_backward,
            |y| 1.0 - y * y,
            (-0.99, 0.99),
        ),
        (
            "tanh_backward_batched",
            ops::tanh_backward_batched,
            |y| 1.0 - y * y,
            (-0.99, 0.99),
        ),
        (
            "sigmoid_backward",
            ops::sigmoid_backward,
            |y| y * (1.0 - y),
            (0.01, 0.99),
        ),
        ("silu_backward", ops::silu_backward, silu_grad, (-6.0, 6.0)),
        ("gelu_backward", ops::gelu_backward, gelu_grad, (-5.0, 5.0)),
        (
            "gelu_exact_backward",
            ops::gelu_exact_backward,
            gelu_exact_grad,
            (-5.0, 5.0),
        ),
        (
            "quick_gelu_backward",
            ops::quick_gelu_backward,
            quick_gelu_grad,
            (-5.0, 5.0),
        ),
    ];
    for (i, (name, f, df, (lo, hi))) in cases.into_iter().enumerate() {
        reference_with(
            name,
            0x6100 + i as u64,
            &with_grad(if i % 2 == 0 { VEC } else { ODD }, lo, hi),
            Check::default(),
            move |t| {
                // Input gradients are overwritten: a stale destination must not leak through.
                let mut dx = stale(&t[0])?;
                f(&t[0], &t[1], &mut dx)?;
                Ok(dx)
            },
            chain(df),
        );
    }
}

#[test]
fn hardswish_and_hard_sigmoid_all_forms() {
    const ALPHA: f32 = 0.2;
    const BETA: f32 = 0.5;
    let (a, b) = (f64::from(ALPHA), f64::from(BETA));
    let hardswish = |x: f64| x * (x + 3.0).clamp(0.0, 6.0) / 6.0;
    let hard_sigmoid = move |x: f64| (a * x + b).clamp(0.0, 1.0);
    // Ranges past both kinks (+-3 for hardswish, -2.5 and 2.5 for the gate).
    reference_with(
        "hardswish_forward",
        0x6220,
        &one(ODD, -5.0, 5.0),
        Check::default(),
        |t| {
            let mut y = stale(&t[0])?;
            ops::hardswish_forward(&t[0], &mut y)?;
            Ok(y)
        },
        map1(hardswish),
    );
    reference_with(
        "hardswish_",
        0x6221,
        &one(VEC, -5.0, 5.0),
        Check::default(),
        |t| {
            let mut y = t[0].clone();
            y.hardswish_()?;
            Ok(y)
        },
        map1(hardswish),
    );
    reference_with(
        "hard_sigmoid_forward",
        0x6222,
        &one(VEC, -4.0, 4.0),
        Check::default(),
        |t| {
            let mut y = stale(&t[0])?;
            ops::hard_sigmoid_forward(&t[0], ALPHA, BETA, &mut y)?;
            Ok(y)
        },
        map1(hard_sigmoid),
    );
    reference_with(
        "hard_sigmoid_",
        0x6223,
        &one(ODD, -4.0, 4.0),
        Check::default(),
        |t| {
            let mut y = t[0].clone();
            y.hard_sigmoid_(ALPHA, BETA)?;
            Ok(y)
        },
        map1(hard_sigmoid),
    );
}

#[test]
fn elu_and_leaky_relu_all_forms() {
    const ALPHA: f32 = 0.7;
    const SLOPE: f32 = 0.15;
    let (a, s) = (f64::from(ALPHA), f64::from(SLOPE));
    let elu = move |x: f64| if x > 0.0 { x } else { a * (x.exp() - 1.0) };
    let leaky = move |x: f64| if x > 0.0 { x } else { s * x };
    reference_with(
        "elu_forward",
        0x6200,
        &one(ODD, -3.0, 3.0),
        Check::default(),
        |t| {
            let mut y = stale(&t[0])?;
            ops::elu_forward(&t[0], ALPHA, &mut y)?;
            Ok(y)
        },
        map1(elu),
    );
    reference_with(
        "elu_",
        0x6201,
        &one(VEC, -3.0, 3.0),
        Check::default(),
        |t| {
            let mut y = t[0].clone();
            y.elu_(ALPHA)?;
            Ok(y)
        },
        map1(elu),
    );
    reference_with(
        "elu_backward",
        0x6202,
        &with_grad(VEC, -3.0, 3.0),
        Check::default(),
        |t| {
            let mut dx = stale(&t[0])?;
            ops::elu_backward(&t[0], &t[1], ALPHA, &mut dx)?;
            Ok(dx)
        },
        chain(move |x| if x > 0.0 { 1.0 } else { a * x.exp() }),
    );
    reference_with(
        "leaky_relu_forward",
        0x6210,
        &one(VEC, -3.0, 3.0),
        Check::default(),
        |t| {
            let mut y = stale(&t[0])?;
            ops::leaky_relu_forward(&t[0], SLOPE, &mut y)?;
            Ok(y)
        },
        map1(leaky),
    );
    reference_with(
        "leaky_relu_",
        0x6211,
        &one(ODD, -3.0, 3.0),
        Check::default(),
        |t| {
            let mut y = t[0].clone();
            y.leaky_relu_(SLOPE)?;
            Ok(y)
        },
        map1(leaky),
    );
    reference_with(
        "leaky_relu_backward",
        0x6212,
        &with_grad(ODD, -3.0, 3.0),
        Check::default(),
        |t| {
            let mut dx = stale(&t[0])?;
            ops::leaky_relu_backward(&t[0], &t[1], SLOPE, &mut dx)?;
            Ok(dx)
        },
        chain(move |x| if x > 0.0 { 1.0 } else { s }),
    );
}

/// A gated unit `y = u(a) v(g)` of `x = [a | g]`, given as `(u, u', v, v')`.
type Gate = (
    fn(f64) -> f64,
    fn(f64) -> f64,
    fn(f64) -> f64,
    fn(f64) -> f64,
);

fn gate_forward((u, _, v, _): Gate, (b, d): (usize, usize)) -> Reference {
    Box::new(move |i| {
        let x = &i[0];
        (0..b * d)
            .map(|k| {
                let (r, j) = (k / d, k % d);
                u(x[r * 2 * d + j]) * v(x[r * 2 * d + d + j])
            })
            .collect()
    })
}

fn gate_backward((u, du, v, dv): Gate, (b, d): (usize, usize)) -> Reference {
    Box::new(move |i| {
        let (x, dy) = (&i[0], &i[1]);
        let mut dx = vec![0.0; b * 2 * d];
        for r in 0..b {
            for j in 0..d {
                let (a, g, gy) = (x[r * 2 * d + j], x[r * 2 * d + d + j], dy[r * d + j]);
                dx[r * 2 * d + j] = gy * du(a) * v(g);
                dx[r * 2 * d + d + j] = gy * u(a) * dv(g);
            }
        }
        dx
    })
}

#[test]
fn gated_units() {
    type GluFwd = fn(&Tensor, &mut Tensor) -> Result<()>;
    let id: fn(f64) -> f64 = |a| a;
    let one_: fn(f64) -> f64 = |_| 1.0;
    let cases: [(&str, GluFwd, Bwd, Gate); 3] = [
        (
            "geglu",
            ops::geglu_forward,
            ops::geglu_backward,
            (id, one_, gelu, gelu_grad),
        ),
        (
            "geglu_exact",
            ops::geglu_exact_forward,
            ops::geglu_exact_backward,
            (id, one_, gelu_exact, gelu_exact_grad),
        ),
        (
            "swiglu",
            ops::swiglu_forward,
            ops::swiglu_backward,
            (silu, silu_grad, id, one_),
        ),
    ];
    for (i, (name, fwd, bwd, gate)) in cases.into_iter().enumerate() {
        // One shape with D a multiple of 4, one without.
        let (b, d) = if i % 2 == 0 { (6, 64) } else { (9, 37) };
        reference_with(
            &format!("{name}_forward"),
            0x6300 + 0x10 * i as u64,
            &[Input::new(b, 2 * d, -4.0, 4.0)],
            Check::default(),
            move |t| {
                let mut y = stale(&t[0])?;
                fwd(&t[0], &mut y)?;
                assert_eq!(y.shape(), (b, d));
                Ok(y)
            },
            gate_forward(gate, (b, d)),
        );
        reference_with(
            &format!("{name}_backward"),
            0x6301 + 0x10 * i as u64,
            &[Input::new(b, 2 * d, -4.0, 4.0), Input::new(b, d, -1.0, 1.0)],
            Check::default(),
            move |t| {
                let mut dx = stale(&t[0])?;
                bwd(&t[0], &t[1], &mut dx)?;
                assert_eq!(dx.shape(), (b, 2 * d));
                Ok(dx)
            },
            gate_backward(gate, (b, d)),
        );
    }
}

/// Snake's inputs: `x (N, C*L)`, `alpha (C, 1)`, `beta (C, 1)`, `dy (N, C*L)` and the prior
/// contents of the accumulated parameter gradients (`(C, 1)` each).
const N: usize = 3;
const C: usize = 4;
const L: usize = 25;

fn snake_inputs(alpha: (f32, f32), beta: (f32, f32)) -> [Input; 6] {
    [
        Input::new(N, C * L, -2.0, 2.0),
        Input::new(C, 1, alpha.0, alpha.1),
        Input::new(C, 1, beta.0, beta.1),
        Input::new(N, C * L, -1.0, 1.0),
        Input::new(C, 1, -1.0, 1.0),
        Input::new(C, 1, -1.0, 1.0),
    ]
}

/// Per element of `x`: `(y, dx, d alpha term, d beta term)` of snake, `d` = beta when
/// `with_beta`, else alpha (`|d|` is far from the 1e-9 floor in these cases).
fn snake_terms(v: &[Vec<f64>], with_beta: bool) -> Vec<(f64, f64, f64, f64)> {
    (0..N * C * L)
        .map(|i| {
            let ch = (i % (C * L)) / L;
            let (x, g, a) = (v[0][i], v[3][i], v[1][ch]);
            let d = if with_beta { v[2][ch] } else { a };
            let r = 1.0 / d;
            let (s, c) = ((a * x).sin(), (a * x).cos());
            let y = x + r * s * s;
            // dy/dx = 1 + 2 a r s c; dy/da (through sin only) = 2 r x s c; dy/dd = -r^2 s^2.
            (
                y,
                g * (1.0 + 2.0 * a * r * s * c),
                g * 2.0 * r * x * s * c,
                -g * r * r * s * s,
            )
        })
        .collect()
}

/// Sums of one term per channel, on top of the prior gradient `prior`.
fn per_channel(terms: impl Iterator<Item = f64>, prior: &[f64]) -> Vec<f64> {
    let mut out = prior.to_vec();
    for (i, t) in terms.enumerate() {
        out[(i % (C * L)) / L] += t;
    }
    out
}

/// Which output of snake a case checks.
#[derive(Clone, Copy, PartialEq)]
enum SnakeOut {
    Y,
    Dx,
    DAlpha,
    DBeta,
}

fn snake_case(name: &str, seed: u64, with_beta: bool, alpha: (f32, f32), out: SnakeOut) {
    let f32_only = Check {
        dtypes: &[Dtype::F32],
        ..Check::default()
    };
    reference_with(
        name,
        seed,
        &snake_inputs(alpha, (0.5, 1.5)),
        f32_only,
        move |t| {
            let beta = with_beta.then_some(&t[2]);
            if out == SnakeOut::Y {
                let mut y = stale(&t[0])?;
                ops::snake_forward(&t[0], &t[1], beta, (N, C, L), &mut y)?;
                return Ok(y);
            }
            // Parameter gradients accumulate onto their prior contents; dx is overwritten.
            let mut dx = stale(&t[0])?;
            let mut dalpha = t[4].clone();
            let mut dbeta = t[5].clone();
            ops::snake_backward(
                &t[0],
                &t[1],
                beta,
                &t[3],
                (N, C, L),
                &mut dx,
                &mut dalpha,
                with_beta.then_some(&mut dbeta),
            )?;
            let mut g = match out {
                SnakeOut::Dx => return Ok(dx),
                SnakeOut::DAlpha => dalpha,
                _ => dbeta,
            };
            // One row: the channels share a scale (a channel's sum may cancel to near 0).
            g.reshape_(&[1, C])?;
            Ok(g)
        },
        move |v| {
            let terms = snake_terms(v, with_beta);
            match out {
                SnakeOut::Y => terms.iter().map(|t| t.0).collect(),
                SnakeOut::Dx => terms.iter().map(|t| t.1).collect(),
                // Plain snake: d is alpha, so both parameter terms are alpha's.
                SnakeOut::DAlpha if !with_beta => {
                    per_channel(terms.iter().map(|t| t.2 + t.3), &v[4])
                }
                SnakeOut::DAlpha => per_channel(terms.iter().map(|t| t.2), &v[4]),
                SnakeOut::DBeta => per_channel(terms.iter().map(|t| t.3), &v[5]),
            }
        },
    );
}

#[test]
fn snake() {
    use SnakeOut::*;
    // Plain snake (d = alpha, kept away from 0) and snakebeta with alphas of both signs.
    let pos = (0.4, 1.4);
    let both = (-1.2, 1.2);
    snake_case("snake_forward", 0x6400, false, pos, Y);
    snake_case("snake_forward beta", 0x6401, true, both, Y);
    snake_case("snake_backward dx", 0x6402, false, pos, Dx);
    snake_case("snake_backward dx beta", 0x6403, true, both, Dx);
    snake_case("snake_backward dalpha", 0x6404, false, pos, DAlpha);
    snake_case("snake_backward dalpha beta", 0x6405, true, both, DAlpha);
    snake_case("snake_backward dbeta", 0x6406, true, both, DBeta);
}
