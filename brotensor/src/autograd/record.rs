//! The recorded ops of [`Var`]: each runs the public forward op and, when an input requires
//! gradients, keeps what the matching public backward op needs.

use super::Var;
use crate::ops::{self, Conv2dSpec, Nchw, Pool2dSpec};
use crate::{Dtype, Error, Result, Tensor};

/// A view sharing `t`'s storage (saved for a backward op).
fn saved(t: &Tensor) -> Result<Tensor> {
    t.reshape(t.dims())
}

/// Zeros of `like`'s dims and dtype on its device: a gradient the backward ops accumulate
/// into.
fn zeros_like(like: &Tensor) -> Result<Tensor> {
    Tensor::zeros_nd_on(like.device(), like.dims(), like.dtype())
}

/// `g` summed over the axes along which `dims` was broadcast to `g`'s dims (numpy's rules:
/// missing leading axes and axes of size 1), reshaped to `dims`.
fn sum_to(g: Tensor, dims: &[usize]) -> Result<Tensor> {
    if g.dims() == dims {
        return Ok(g);
    }
    let lead = g.rank() - dims.len();
    let mut out = g;
    // From the last axis down, so that earlier axis numbers stay valid.
    for axis in (0..out.rank()).rev() {
        let keep = axis >= lead && dims[axis - lead] == out.dims()[axis];
        if !keep {
            out = out.sum(axis)?;
        }
    }
    out.reshape(dims)
}

/// `f` on the values of `a` and `b`, reading a Var passed twice (`x.mul(&x)`) through one
/// guard.
fn with_pair<R>(a: &Var, b: &Var, f: impl FnOnce(&Tensor, &Tensor) -> R) -> R {
    let av = a.value();
    if a.key() == b.key() {
        return f(&av, &av);
    }
    let bv = b.value();
    f(&av, &bv)
}

/// The 4-D dims of a convolution or pooling input.
fn nchw(op: &'static str, t: &Tensor) -> Result<Nchw> {
    match *t.dims() {
        [n, c, h, w] => Ok(Nchw::new(n, c, h, w)),
        _ => Err(Error::shape(
            op,
            format!("expected an (N, C, H, W) input, got {:?}", t.dims()),
        )),
    }
}

/// An element-wise activation and its public gradient op, which reads the forward input
/// (`from_output` false) or output.
macro_rules! activation {
    ($($(#[$doc:meta])* $name:ident => $forward:path, $backward:path, from_output: $out:expr;)*) => {
        impl Var {$(
            $(#[$doc])*
            pub fn $name(&self) -> Result<Var> {
                let y = $forward(&self.value())?;
                if !Var::tracked(&[self]) {
                    return Ok(Var::constant(y));
                }
                let keep = if $out { saved(&y)? } else { saved(&self.value())? };
                Ok(Var::recorded(stringify!($name), y, &[self], move |dy, _| {
                    let mut dx = Tensor::default();
                    $backward(&keep, dy, &mut dx)?;
                    Ok(vec![Some(dx)])
                }))
            }
        )*}
    };
}

activation! {
    /// `max(x, 0)` ([`ops::relu`]; gradient [`ops::relu_backward`], 0 at 0).
    relu => ops::relu, ops::relu_backward, from_output: false;
    /// `tanh x` ([`ops::tanh`]; gradient [`ops::tanh_backward`]).
    tanh => ops::tanh, ops::tanh_backward, from_output: true;
    /// The logistic sigmoid ([`ops::sigmoid`]; gradient [`ops::sigmoid_backward`]).
    sigmoid => ops::sigmoid, ops::sigmoid_backward, from_output: true;
    /// `x sigmoid(x)` ([`ops::silu`]; gradient [`ops::silu_backward`]).
    silu => ops::silu, ops::silu_backward, from_output: false;
    /// GELU, tanh form ([`ops::gelu`]; gradient [`ops::gelu_backward`]).
    gelu => ops::gelu, ops::gelu_backward, from_output: false;
}

impl Var {
    /// `self + rhs` with numpy broadcasting ([`ops::add`]); each gradient is the output's
    /// summed over the axes its input was broadcast along.
    pub fn add(&self, rhs: &Var) -> Result<Var> {
        let (y, dims) = with_pair(self, rhs, |a, b| {
            Ok::<_, Error>((ops::add(a, b)?, [a.dims().to_vec(), b.dims().to_vec()]))
        })?;
        Ok(Var::recorded("add", y, &[self, rhs], move |dy, need| {
            let [a, b] = dims;
            Ok(vec![
                need[0].then(|| sum_to(saved(dy)?, &a)).transpose()?,
                need[1].then(|| sum_to(saved(dy)?, &b)).transpose()?,
            ])
        }))
    }

    /// `self * rhs` element-wise with numpy broadcasting ([`ops::mul`]); gradients `dy rhs`
    /// and `dy self`, summed over the broadcast axes.
    pub fn mul(&self, rhs: &Var) -> Result<Var> {
        let (y, a, b) = with_pair(self, rhs, |a, b| {
            Ok::<_, Error>((ops::mul(a, b)?, saved(a)?, saved(b)?))
        })?;
        if !Var::tracked(&[self, rhs]) {
            return Ok(Var::constant(y));
        }
        Ok(Var::recorded("mul", y, &[self, rhs], move |dy, need| {
            Ok(vec![
                need[0]
                    .then(|| sum_to(ops::mul(dy, &b)?, a.dims()))
                    .transpose()?,
                need[1]
                    .then(|| sum_to(ops::mul(dy, &a)?, b.dims()))
                    .transpose()?,
            ])
        }))
    }

    /// `s self` ([`ops::mul_scalar`]); gradient `s dy`.
    pub fn scale(&self, s: f32) -> Result<Var> {
        let y = ops::mul_scalar(&self.value(), s)?;
        Ok(Var::recorded("scale", y, &[self], move |dy, _| {
            Ok(vec![Some(ops::mul_scalar(dy, s)?)])
        }))
    }

    /// The matrix product `self (M, K) . rhs (K, N)` ([`ops::matmul`]); gradients by
    /// [`ops::matmul_backward`].
    pub fn matmul(&self, rhs: &Var) -> Result<Var> {
        let (y, a, b) = with_pair(self, rhs, |a, b| {
            let mut y = Tensor::default();
            ops::matmul(a, b, &mut y)?;
            Ok::<_, Error>((y, saved(a)?, saved(b)?))
        })?;
        if !Var::tracked(&[self, rhs]) {
            return Ok(Var::constant(y));
        }
        Ok(Var::recorded("matmul", y, &[self, rhs], move |dy, _| {
            let (mut da, mut db) = (zeros_like(&a)?, zeros_like(&b)?);
            ops::matmul_backward(&a, &b, dy, &mut da, &mut db)?;
            Ok(vec![Some(da), Some(db)])
        }))
    }

    /// `self (B, in) . w (out, in)^T + bias (out)` ([`ops::linear_forward_batched`]);
    /// gradients by [`ops::linear_backward_batched`].
    pub fn linear(&self, w: &Var, bias: Option<&Var>) -> Result<Var> {
        {
            let x = self.value();
            // The backward op takes one dtype: refuse a mix before recording it.
            crate::ops::check_dtypes_match("linear", ("x", &x), &[("w", &w.value())])?;
            if let Some(b) = bias {
                crate::ops::check_dtypes_match("linear", ("x", &x), &[("bias", &b.value())])?;
            }
        }
        let mut y = Tensor::default();
        ops::linear_forward_batched(
            &w.value(),
            bias.map(|b| b.value()).as_deref(),
            &self.value(),
            &mut y,
        )?;
        let inputs: Vec<&Var> = [Some(self), Some(w), bias].into_iter().flatten().collect();
        if !Var::tracked(&inputs) {
            return Ok(Var::constant(y));
        }
        let (x, wt) = (saved(&self.value())?, saved(&w.value())?);
        let bias_dims = bias.map(|b| b.value().dims().to_vec());
        Ok(Var::recorded("linear", y, &inputs, move |dy, _| {
            let mut dx = Tensor::default();
            let mut dw = zeros_like(&wt)?;
            let mut db = Tensor::zeros_nd_on(wt.device(), &[wt.rows(), 1], wt.dtype())?;
            ops::linear_backward_batched(&wt, &x, dy, &mut dx, &mut dw, &mut db)?;
            // The op flattens the leading dims of an N-d `x`: its gradient takes them back.
            dx.reshape_(x.dims())?;
            let mut grads = vec![Some(dx), Some(dw)];
            if let Some(dims) = bias_dims {
                grads.push(Some(db.reshape(&dims)?));
            }
            Ok(grads)
        }))
    }

    /// LayerNorm over the last dim of `self (R, D)` with `gamma`, `beta` (`D` each)
    /// ([`ops::layernorm_forward_batched_with_caches`]); gradients by
    /// [`ops::layernorm_backward_batched_with_caches`].
    pub fn layer_norm(&self, gamma: &Var, beta: &Var, eps: f32) -> Result<Var> {
        if !Var::tracked(&[self, gamma, beta]) {
            let mut y = Tensor::default();
            ops::layernorm_forward_inference_batched(
                &self.value(),
                &gamma.value(),
                &beta.value(),
                eps,
                &mut y,
            )?;
            return Ok(Var::constant(y));
        }
        let (mut y, mut xhat, mut mean, mut rstd) = Default::default();
        ops::layernorm_forward_batched_with_caches(
            &self.value(),
            &gamma.value(),
            &beta.value(),
            eps,
            &mut y,
            &mut xhat,
            &mut mean,
            &mut rstd,
        )?;
        let g = saved(&gamma.value())?;
        let b_dims = beta.value().dims().to_vec();
        let b_dtype = beta.value().dtype();
        Ok(Var::recorded(
            "layer_norm",
            y,
            &[self, gamma, beta],
            move |dy, _| {
                let mut dx = Tensor::default();
                let mut dgamma = zeros_like(&g)?;
                let mut dbeta = Tensor::zeros_nd_on(g.device(), &b_dims, b_dtype)?;
                ops::layernorm_backward_batched_with_caches(
                    dy,
                    &xhat,
                    &g,
                    &rstd,
                    &mut dx,
                    &mut dgamma,
                    &mut dbeta,
                )?;
                Ok(vec![Some(dx), Some(dgamma), Some(dbeta)])
            },
        ))
    }

    /// 2-D convolution of `self (N, C_in, H, W)` with `w (C_out, C_in / groups, kH, kW)` and
    /// an optional `bias (C_out)` ([`ops::conv2d_forward`]); output `(N, C_out, H_out,
    /// W_out)`; gradients by [`ops::conv2d_backward_input`], [`ops::conv2d_backward_weight`]
    /// and [`ops::conv2d_backward_bias`].
    pub fn conv2d(&self, w: &Var, bias: Option<&Var>, spec: &Conv2dSpec) -> Result<Var> {
        const OP: &str = "conv2d";
        let d = nchw(OP, &self.value())?;
        let (w_dims, w2) = {
            let wv = w.value();
            let w_dims = wv.dims().to_vec();
            let Some(&c_out) = w_dims
                .first()
                .filter(|_| w_dims.len() == 4 && w_dims[0] > 0)
            else {
                return Err(Error::shape(
                    OP,
                    format!("`w` must be (C_out, C_in / groups, kH, kW), got {w_dims:?}"),
                ));
            };
            let w2 = wv.reshape(&[c_out, wv.numel() / c_out])?;
            (w_dims, w2)
        };
        let c_out = w_dims[0];
        let mut y = Tensor::default();
        ops::conv2d_forward(
            &self.value(),
            &w2,
            bias.map(|b| b.value()).as_deref(),
            d,
            c_out,
            spec,
            &mut y,
        )?;
        let inputs: Vec<&Var> = [Some(self), Some(w), bias].into_iter().flatten().collect();
        if !Var::tracked(&inputs) {
            return Ok(Var::constant(y));
        }
        let x = saved(&self.value())?;
        let out = nchw(OP, &y)?;
        let spec = *spec;
        let bias_dims = bias.map(|b| b.value().dims().to_vec());
        Ok(Var::recorded(OP, y, &inputs, move |dy, need| {
            let dx = need[0]
                .then(|| {
                    let mut dx = Tensor::default();
                    ops::conv2d_backward_input(&w2, dy, d, c_out, &spec, &mut dx)?;
                    Ok::<_, Error>(dx)
                })
                .transpose()?;
            let dw = need[1]
                .then(|| {
                    let mut dw = zeros_like(&w2)?;
                    ops::conv2d_backward_weight(&x, dy, d, c_out, &spec, &mut dw)?;
                    dw.reshape(&w_dims)
                })
                .transpose()?;
            let mut grads = vec![dx, dw];
            if let Some(dims) = bias_dims {
                let mut db = Tensor::zeros_nd_on(dy.device(), &dims, dy.dtype())?;
                ops::conv2d_backward_bias(dy, out, &mut db)?;
                grads.push(Some(db));
            }
            Ok(grads)
        }))
    }

    /// 2-D max pooling of `self (N, C, H, W)` ([`ops::max_pool2d_forward`]); gradient by
    /// [`ops::max_pool2d_backward`] through the saved indices.
    pub fn max_pool2d(&self, spec: &Pool2dSpec) -> Result<Var> {
        let d = nchw("max_pool2d", &self.value())?;
        let (mut y, mut idx) = (Tensor::default(), Tensor::default());
        ops::max_pool2d_forward(&self.value(), d, spec, &mut y, &mut idx)?;
        let spec = *spec;
        Ok(Var::recorded("max_pool2d", y, &[self], move |dy, _| {
            let mut dx = Tensor::default();
            ops::max_pool2d_backward(dy, &idx, d, &spec, &mut dx)?;
            Ok(vec![Some(dx)])
        }))
    }

    /// The same values with new `dims` (a view; see [`Tensor::reshape`]); the gradient is
    /// reshaped back.
    pub fn reshape(&self, dims: &[usize]) -> Result<Var> {
        let y = self.value().reshape(dims)?;
        let from = self.value().dims().to_vec();
        Ok(Var::recorded("reshape", y, &[self], move |dy, _| {
            Ok(vec![Some(dy.reshape(&from)?)])
        }))
    }

    /// The sum of every element, as a 1-element `[1]` tensor; the gradient broadcasts back.
    pub fn sum(&self) -> Result<Var> {
        self.total("sum", 1.0)
    }

    /// The mean of every element, as a 1-element `[1]` tensor; the gradient broadcasts back.
    pub fn mean(&self) -> Result<Var> {
        let n = self.value().numel();
        if n == 0 {
            return Err(Error::invalid("mean", "the mean of no elements"));
        }
        self.total("mean", (1.0 / n as f64) as f32)
    }

    /// `scale` times the sum of every element; the gradient broadcasts back.
    fn total(&self, op: &'static str, scale: f32) -> Result<Var> {
        let dims = self.value().dims().to_vec();
        let y = scaled_total(&self.value(), scale)?;
        Ok(Var::recorded(op, y, &[self], move |dy, _| {
            let g = dy.broadcast_to(&dims)?.contiguous()?;
            let g = if scale == 1.0 {
                g
            } else {
                ops::mul_scalar(&g, scale)?
            };
            Ok(vec![Some(g)])
        }))
    }

    /// The mean softmax cross-entropy of `self`'s rows (`(B, classes)` F32 logits) against
    /// the class `labels` (one per row), as a 1-element `[1]` tensor
    /// ([`ops::softmax_xent_fused_batched`]); the gradient is the op's `dlogits`
    /// (`softmax - one_hot`) over `B`.
    pub fn cross_entropy(&self, labels: &[usize]) -> Result<Var> {
        const OP: &str = "cross_entropy";
        let (b, l) = {
            let v = self.value();
            if v.dtype() != Dtype::F32 {
                return Err(Error::Dtype {
                    op: OP,
                    operand: "logits",
                    expected: "F32 logits (the fused loss computes in FP32)".into(),
                    found: v.dtype(),
                });
            }
            if v.rank() != 2 {
                return Err(Error::shape(
                    OP,
                    format!("expected logits (B, classes), got {:?}", v.dims()),
                ));
            }
            (v.rows(), v.cols())
        };
        if labels.len() != b || b == 0 {
            return Err(Error::shape(
                OP,
                format!("{} labels for {b} rows of logits", labels.len()),
            ));
        }
        if let Some(&bad) = labels.iter().find(|&&c| c >= l) {
            return Err(Error::invalid(
                OP,
                format!("label {bad} is not below the {l} classes"),
            ));
        }
        let mut one_hot = vec![0.0f32; b * l];
        for (row, &c) in labels.iter().enumerate() {
            one_hot[row * l + c] = 1.0;
        }
        let device = self.value().device();
        let target = Tensor::from_slice_nd_on(device, &one_hot, &[b, l])?;
        let (mut probs, mut dlogits, mut per_row) = Default::default();
        ops::softmax_xent_fused_batched(
            &self.value(),
            &target,
            None,
            &[0, l],
            &mut probs,
            &mut dlogits,
            &mut per_row,
        )?;
        let inv_b = (1.0 / b as f64) as f32;
        let loss = scaled_total(&per_row, inv_b)?;
        Ok(Var::recorded(OP, loss, &[self], move |dy, _| {
            // d loss / d logits = dlogits / B, times the incoming (1-element) gradient.
            let scale = dy.reshape(&[1, 1])?;
            let g = ops::mul(&dlogits, &scale)?;
            Ok(vec![Some(ops::mul_scalar(&g, inv_b)?)])
        }))
    }
}

/// `scale` times the sum of every element of `t` ([`ops::sum_rows`] over one row), as a
/// `[1]` tensor.
pub(super) fn scaled_total(t: &Tensor, scale: f32) -> Result<Tensor> {
    let row = t.reshape(&[1, t.numel()])?;
    let mut s = Tensor::default();
    ops::sum_rows(&row, &mut s)?;
    s.reshape_(&[1])?;
    if scale != 1.0 {
        s.mul_scalar_(scale)?;
    }
    Ok(s)
}
