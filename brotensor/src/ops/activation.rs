//! Activations and their gradients.
//!
//! Shape contract: point-wise activations keep the shape; outputs are resized to the input
//! (shape and dtype) and gradients `dx` are overwritten. Gradients read the forward input `x`,
//! except `tanh_backward` and `sigmoid_backward`, which read the forward output `y`. The gated
//! units take `x (B, 2D)` split into `a` = columns `[0, D)` and `g` = `[D, 2D)`, give
//! `y (B, D)`, and their backward writes `dx (B, 2D) = [d a | d g]`. The `_batched` names are
//! the C++ `(B, D)` entry points and behave exactly like the plain ones.

use super::elementwise::{binary_out, unary_inplace, unary_out};
use super::{dispatch, input, input_opt, updated, updated_opt, written};
use crate::backend::{Binary, Glu, Unary};
use crate::{Error, Result, Tensor};

math_fn! {
    "max(x, 0)": relu_forward, relu, relu_ => Relu;
    "tanh x": tanh_forward, tanh, tanh_ => Tanh;
    "1 / (1 + e^-x)": sigmoid_forward, sigmoid, sigmoid_ => Sigmoid;
    "x sigmoid(x)": silu_forward, silu, silu_ => Silu;
    "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))": gelu_forward, gelu, gelu_ => Gelu;
    "0.5 x (1 + erf(x / sqrt 2))": gelu_exact_forward, gelu_exact, gelu_exact_ => GeluExact;
    "x sigmoid(1.702 x)": quick_gelu_forward, quick_gelu, quick_gelu_ => QuickGelu;
}

math_grad! {
    "dy where x > 0, else 0": relu_backward(x) => ReluBackward;
    "dy (1 - y^2) (y the forward output)": tanh_backward(y) => TanhBackward;
    "dy y (1 - y) (y the forward output)": sigmoid_backward(y) => SigmoidBackward;
    "dy s (1 + x (1 - s)), s = sigmoid(x)": silu_backward(x) => SiluBackward;
    "dy gelu'(x) (tanh approximation)": gelu_backward(x) => GeluBackward;
    "dy (Phi(x) + x phi(x))": gelu_exact_backward(x) => GeluExactBackward;
    "dy (s + 1.702 x s (1 - s)), s = sigmoid(1.702 x)": quick_gelu_backward(x) => QuickGeluBackward;
}

/// [`relu_forward`] under its C++ `(B, D)` name.
pub fn relu_forward_batched(x: &Tensor, y: &mut Tensor) -> Result<()> {
    unary_out("relu_forward_batched", Unary::Relu, x, y, (0.0, 0.0))
}

/// [`tanh_forward`] under its C++ `(B, D)` name.
pub fn tanh_forward_batched(x: &Tensor, y: &mut Tensor) -> Result<()> {
    unary_out("tanh_forward_batched", Unary::Tanh, x, y, (0.0, 0.0))
}

/// [`relu_backward`] under its C++ `(B, D)` name.
pub fn relu_backward_batched(x: &Tensor, dy: &Tensor, dx: &mut Tensor) -> Result<()> {
    binary_out(
        "relu_backward_batched",
        Binary::ReluBackward,
        ("x", x),
        ("dy", dy),
        dx,
        (0.0, 0.0),
    )
}

/// [`tanh_backward`] under its C++ `(B, D)` name (`y` the forward output).
pub fn tanh_backward_batched(y: &Tensor, dy: &Tensor, dx: &mut Tensor) -> Result<()> {
    binary_out(
        "tanh_backward_batched",
        Binary::TanhBackward,
        ("y", y),
        ("dy", dy),
        dx,
        (0.0, 0.0),
    )
}

/// `y = x` for `x > 0`, else `alpha (e^x - 1)`; `y` is resized to `x`.
pub fn elu_forward(x: &Tensor, alpha: f32, y: &mut Tensor) -> Result<()> {
    unary_out("elu_forward", Unary::Elu, x, y, (alpha, 0.0))
}

/// `dx = dy` for `x > 0`, else `dy alpha e^x`; overwritten.
pub fn elu_backward(x: &Tensor, dy: &Tensor, alpha: f32, dx: &mut Tensor) -> Result<()> {
    binary_out(
        "elu_backward",
        Binary::EluBackward,
        ("x", x),
        ("dy", dy),
        dx,
        (alpha, 0.0),
    )
}

/// `y = x` for `x > 0`, else `negative_slope x`; `y` is resized to `x`.
pub fn leaky_relu_forward(x: &Tensor, negative_slope: f32, y: &mut Tensor) -> Result<()> {
    unary_out(
        "leaky_relu_forward",
        Unary::LeakyRelu,
        x,
        y,
        (negative_slope, 0.0),
    )
}

/// `dx = dy` for `x > 0`, else `negative_slope dy`; overwritten.
pub fn leaky_relu_backward(
    x: &Tensor,
    dy: &Tensor,
    negative_slope: f32,
    dx: &mut Tensor,
) -> Result<()> {
    binary_out(
        "leaky_relu_backward",
        Binary::LeakyReluBackward,
        ("x", x),
        ("dy", dy),
        dx,
        (negative_slope, 0.0),
    )
}

/// MobileNetV3's hard swish: `y = x min(max(x + 3, 0), 6) / 6` (NaN stays NaN); `y` is
/// resized to `x`. F32 math in every float dtype.
pub fn hardswish_forward(x: &Tensor, y: &mut Tensor) -> Result<()> {
    unary_out("hardswish_forward", Unary::HardSwish, x, y, (0.0, 0.0))
}

/// The piecewise-linear sigmoid `y = min(max(alpha x + beta, 0), 1)` (NaN stays NaN), as
/// squeeze-excite gates use it (`alpha` 1/6 or 0.2, `beta` 0.5); `y` is resized to `x`.
pub fn hard_sigmoid_forward(x: &Tensor, alpha: f32, beta: f32, y: &mut Tensor) -> Result<()> {
    unary_out(
        "hard_sigmoid_forward",
        Unary::HardSigmoid,
        x,
        y,
        (alpha, beta),
    )
}

impl Tensor {
    /// [`hardswish_forward`] in place.
    pub fn hardswish_(&mut self) -> Result<()> {
        unary_inplace("hardswish_", Unary::HardSwish, self, (0.0, 0.0))
    }

    /// [`hard_sigmoid_forward`] in place.
    pub fn hard_sigmoid_(&mut self, alpha: f32, beta: f32) -> Result<()> {
        unary_inplace("hard_sigmoid_", Unary::HardSigmoid, self, (alpha, beta))
    }

    /// [`elu_forward`] in place.
    pub fn elu_(&mut self, alpha: f32) -> Result<()> {
        unary_inplace("elu_", Unary::Elu, self, (alpha, 0.0))
    }

    /// [`leaky_relu_forward`] in place.
    pub fn leaky_relu_(&mut self, negative_slope: f32) -> Result<()> {
        unary_inplace("leaky_relu_", Unary::LeakyRelu, self, (negative_slope, 0.0))
    }
}

/// `D` for an `x` of `(B, 2D)`, or the C++ error for an odd column count.
fn glu_half(name: &'static str, x: &Tensor) -> Result<usize> {
    if !x.cols().is_multiple_of(2) {
        return Err(Error::shape(
            name,
            format!("X.cols must be even (2*D), got {}", x.cols()),
        ));
    }
    Ok(x.cols() / 2)
}

fn glu_forward(name: &'static str, op: Glu, x: &Tensor, y: &mut Tensor) -> Result<()> {
    let be = dispatch(name, &[input("x", x).float(), written("y", y)])?;
    let d = glu_half(name, x)?;
    be.out("y", y, &[x.rows(), d], x.dtype())?;
    if y.numel() == 0 {
        return Ok(());
    }
    be.glu_forward(name, op, x, y)
}

fn glu_backward(
    name: &'static str,
    op: Glu,
    x: &Tensor,
    dy: &Tensor,
    dx: &mut Tensor,
) -> Result<()> {
    let be = dispatch(
        name,
        &[input("x", x).float(), input("dy", dy), written("dx", dx)],
    )?;
    let d = glu_half(name, x)?;
    if dy.shape() != (x.rows(), d) {
        return Err(Error::shape(
            name,
            format!(
                "`dy` is {:?} but must be {}x{d} for `x` {:?}",
                dy.dims(),
                x.rows(),
                x.dims()
            ),
        ));
    }
    super::check_dtypes_match(name, ("x", x), &[("dy", dy)])?;
    be.out("dx", dx, x.dims(), x.dtype())?;
    if dx.numel() == 0 {
        return Ok(());
    }
    be.glu_backward(name, op, x, dy, dx)
}

/// Defines a gated unit's forward and backward.
macro_rules! glu_ops {
    ($($math:literal: $fwd:ident, $bwd:ident => $op:ident;)*) => {$(
        #[doc = concat!("`y (B, D) = ", $math, "` from `x (B, 2D)` = `[a | g]`; `y` is resized.")]
        pub fn $fwd(x: &Tensor, y: &mut Tensor) -> Result<()> {
            glu_forward(stringify!($fwd), Glu::$op, x, y)
        }

        #[doc = concat!("Gradient of [`", stringify!($fwd), "`]: `dx (B, 2D) = [d a | d g]`, overwritten.")]
        pub fn $bwd(x: &Tensor, dy: &Tensor, dx: &mut Tensor) -> Result<()> {
            glu_backward(stringify!($bwd), Glu::$op, x, dy, dx)
        }
    )*};
}

glu_ops! {
    "a * gelu_tanh(g)": geglu_forward, geglu_backward => Geglu;
    "a * gelu_exact(g)": geglu_exact_forward, geglu_exact_backward => GegluExact;
    "silu(a) * g": swiglu_forward, swiglu_backward => Swiglu;
}

/// Checks snake's per-channel parameters (`C` F32 values each) and returns `d`: `beta` when
/// given (snakebeta), else `alpha`. The kernels apply the sign-keeping floor of `d`.
fn snake_params<'a>(
    op: &'static str,
    alpha: &'a Tensor,
    beta: Option<&'a Tensor>,
    c: usize,
) -> Result<&'a Tensor> {
    for (name, t) in [("alpha", Some(alpha)), ("beta", beta)] {
        let Some(t) = t else { continue };
        if t.numel() != c {
            return Err(Error::shape(
                op,
                format!("{name} must have C = {c} elements, has {}", t.numel()),
            ));
        }
        if t.dtype() != crate::Dtype::F32 {
            return Err(Error::Dtype {
                op,
                operand: name,
                expected: "snake is FP32".into(),
                found: t.dtype(),
            });
        }
    }
    Ok(beta.unwrap_or(alpha))
}

fn snake_check(op: &'static str, x: &Tensor, (n, c, l): (usize, usize, usize)) -> Result<()> {
    if x.dtype() != crate::Dtype::F32 {
        return Err(Error::Dtype {
            op,
            operand: "x",
            expected: "snake is FP32".into(),
            found: x.dtype(),
        });
    }
    if Some(x.shape()) != c.checked_mul(l).map(|cl| (n, cl)) {
        return Err(Error::shape(
            op,
            format!(
                "X must be shaped (N, C*L) = ({n}, {c}*{l}), got {:?}",
                x.dims()
            ),
        ));
    }
    Ok(())
}

/// Snake over `X (N, C*L)` (NCL): `y = x + sin^2(alpha_c x) / d_c` with `d_c = beta_c` when
/// `beta` is given (snakebeta) else `alpha_c`, its magnitude floored at 1e-9 with its sign.
/// `alpha`, `beta` hold `C` elements. FP32; `Y` is resized.
pub fn snake_forward(
    x: &Tensor,
    alpha: &Tensor,
    beta: Option<&Tensor>,
    (n, c, l): (usize, usize, usize),
    y: &mut Tensor,
) -> Result<()> {
    let op = "snake_forward";
    let be = dispatch(
        op,
        &[
            input("x", x),
            input("alpha", alpha),
            input_opt("beta", beta),
            written("y", y),
        ],
    )?;
    snake_check(op, x, (n, c, l))?;
    let d = snake_params(op, alpha, beta, c)?;
    be.out("y", y, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    be.snake_forward(op, x, alpha, d, l, y)
}

/// Gradients of [`snake_forward`]: `dX = dY (1 + 2 a r s c)` overwritten (`s`, `c` = sin, cos
/// of `a x`, `r = 1/d`); `dAlpha[c] += sum dY 2 r x s c` (plus `sum dY (-r^2 s^2)` without
/// `beta`) and `dBeta[c] += sum dY (-r^2 s^2)`, over samples and positions. `dAlpha`,
/// `dBeta` must be pre-sized `(C, 1)` F32, `dBeta` given exactly when `beta` is.
#[allow(clippy::too_many_arguments)]
pub fn snake_backward(
    x: &Tensor,
    alpha: &Tensor,
    beta: Option<&Tensor>,
    dy: &Tensor,
    (n, c, l): (usize, usize, usize),
    dx: &mut Tensor,
    dalpha: &mut Tensor,
    dbeta: Option<&mut Tensor>,
) -> Result<()> {
    let op = "snake_backward";
    let be = dispatch(
        op,
        &[
            input("x", x),
            input("alpha", alpha),
            input_opt("beta", beta),
            input("dy", dy),
            written("dx", dx),
            updated("dalpha", dalpha),
            updated_opt("dbeta", dbeta.as_deref()),
        ],
    )?;
    snake_check(op, x, (n, c, l))?;
    if beta.is_some() != dbeta.is_some() {
        return Err(Error::invalid(
            op,
            "dBeta must be given exactly when beta is",
        ));
    }
    if dy.shape() != x.shape() || dy.dtype() != x.dtype() {
        return Err(Error::shape(
            op,
            "dY must be shaped (N, C*L) like X, in F32",
        ));
    }
    for (name, g) in [("dAlpha", Some(&*dalpha)), ("dBeta", dbeta.as_deref())] {
        if let Some(g) = g {
            if !g.is_committed() || g.shape() != (c, 1) || g.dtype() != crate::Dtype::F32 {
                return Err(Error::shape(
                    op,
                    format!("{name} must be (C, 1) = ({c}, 1) F32 (it accumulates)"),
                ));
            }
        }
    }
    let d = snake_params(op, alpha, beta, c)?;
    be.out("dx", dx, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    // Per element: dX and the two parameter terms; then their sums per channel.
    let dev = be.device();
    let mut ga = Tensor::empty_on(dev, x.rows(), x.cols(), crate::Dtype::F32)?;
    let mut gb = Tensor::empty_on(dev, x.rows(), x.cols(), crate::Dtype::F32)?;
    let grads = crate::backend::SnakeGrads {
        dx,
        ga: &mut ga,
        gb: &mut gb,
    };
    be.snake_backward(op, x, alpha, d, dy, l, grads)?;
    let channel = |t: &mut Tensor| -> Result<Tensor> {
        t.reshape_(&[n * c, l])?;
        let mut per_sample = Tensor::default();
        super::sum_rows(t, &mut per_sample)?;
        per_sample.reshape_(&[n, c])?;
        let mut out = Tensor::default();
        super::sum_cols(&per_sample, &mut out)?;
        out.reshape_(&[c, 1])?;
        Ok(out)
    };
    match dbeta {
        Some(db) => {
            dalpha.add_(&channel(&mut ga)?)?;
            db.add_(&channel(&mut gb)?)
        }
        // Plain snake: `d` is `alpha`, so both terms are `alpha`'s.
        None => {
            ga.add_(&gb)?;
            dalpha.add_(&channel(&mut ga)?)
        }
    }
}
