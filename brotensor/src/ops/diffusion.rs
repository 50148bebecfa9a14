//! Diffusion (C++ `ops/diffusion.h`): the AdaLN affine of token rows (`modulate`,
//! `broadcast_mul`), the SD U-Net residual block and its gradient, the DDIM, Euler and
//! DPM++ 2M sampler steps, and the sinusoidal timestep embedding.
//!
//! Every op runs in F32, F16 and BF16 on every device with FP32 math (the C++ GPU path is
//! FP16 only). The sampler steps fold their scalar formulas into the coefficients of one
//! linear combination, computed in float64 on the host, so each step is one pass over its
//! tensors.

use super::conv::{
    check_accumulated, check_activation, check_weight, forward_geometry, output_dims,
};
use super::Conv2dSpec;
use super::{
    check_dtypes_match, check_same, dispatch, input, input_opt, updated, updated_opt, written,
    Dispatched, Nchw,
};
use crate::backend::{Broadcast, Conv2d, StepCoefficients};
use crate::{Dtype, Error, Result, Tensor};

/// The width `D` of token rows: the last dim of `x` (a scalar or empty shape has none).
fn row_width(op: &'static str, x: &Tensor) -> Result<usize> {
    x.dims()
        .last()
        .copied()
        .ok_or_else(|| Error::shape(op, "`x` must have at least one dim (rows of D)"))
}

/// Checks that `v` holds `len` values of `like`'s dtype.
fn check_values(
    op: &'static str,
    (name, v): (&'static str, &Tensor),
    len: usize,
    like: (&'static str, &Tensor),
) -> Result<()> {
    if v.numel() != len {
        return Err(Error::shape(
            op,
            format!(
                "`{name}` must hold {len} values, has {} ({:?})",
                v.numel(),
                v.dims()
            ),
        ));
    }
    check_dtypes_match(op, like, &[(name, v)])
}

/// The per-column affine shared by [`modulate`] and [`broadcast_mul`].
fn row_affine(
    op: &'static str,
    x: &Tensor,
    scale: (&'static str, &Tensor),
    shift: Option<&Tensor>,
    y: &mut Tensor,
) -> Result<()> {
    let be = dispatch(
        op,
        &[
            input("x", x).float(),
            input(scale.0, scale.1),
            input_opt("shift", shift),
            written("y", y),
        ],
    )?;
    let d = row_width(op, x)?;
    check_values(op, scale, d, ("x", x))?;
    if let Some(t) = shift {
        check_values(op, ("shift", t), d, ("x", x))?;
    }
    be.out("y", y, x.dims(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(());
    }
    be.row_affine(op, x, scale.1, shift, shift.is_some(), y)
}

/// AdaLN modulation (C++ `modulate`): `y[l, d] = x[l, d] (1 + scale[d]) + shift[d]`, the
/// affine step every DiT block applies after its norm. `x`: `(L, D)` (or any shape whose
/// last dim is `D`); `scale`, `shift`: `D` values each (`(1, D)` or `(D, 1)`) of `x`'s
/// dtype; `y` is resized to `x`'s dims. FP32 math.
pub fn modulate(x: &Tensor, scale: &Tensor, shift: &Tensor, y: &mut Tensor) -> Result<()> {
    row_affine("modulate", x, ("scale", scale), Some(shift), y)
}

/// Channel-wise scale of token rows (C++ `broadcast_mul`): `y[l, d] = x[l, d] v[d]`, the DiT
/// residual gate. `x`: `(L, D)` (or any shape whose last dim is `D`); `v`: `D` values of
/// `x`'s dtype; `y` is resized to `x`'s dims.
pub fn broadcast_mul(x: &Tensor, v: &Tensor, y: &mut Tensor) -> Result<()> {
    row_affine("broadcast_mul", x, ("v", v), None, y)
}

/// Checks that the scalar arguments of a sampler step are finite.
fn check_finite(op: &'static str, values: &[(&'static str, f32)]) -> Result<()> {
    match values.iter().find(|(_, v)| !v.is_finite()) {
        Some((name, v)) => Err(Error::invalid(
            op,
            format!("`{name}` must be finite, got {v}"),
        )),
        None => Ok(()),
    }
}

/// A sampler step as one linear combination (see [`StepCoefficients`]).
fn sampler_step(
    op: &'static str,
    (x, e, p): (&Tensor, &Tensor, Option<&Tensor>),
    c: StepCoefficients,
    y: &mut Tensor,
    z: Option<&mut Tensor>,
) -> Result<()> {
    let be = dispatch(
        op,
        &[
            input("x_t", x).float(),
            input("eps_pred", e),
            input_opt("x0_prev", p),
            written("x_prev", y),
            super::written_opt("x0_out", z.as_deref()),
        ],
    )?;
    check_same(op, ("eps_pred", e), ("x_t", x))?;
    if let Some(p) = p {
        check_same(op, ("x0_prev", p), ("x_t", x))?;
    }
    be.out("x_prev", y, x.dims(), x.dtype())?;
    let z = match z {
        Some(z) => {
            be.out("x0_out", z, x.dims(), x.dtype())?;
            Some(z)
        }
        None => None,
    };
    if x.numel() == 0 {
        return Ok(());
    }
    be.sampler_step(op, x, e, p, c, y, z)
}

/// One DDIM step (C++ `ddim_step`): with `x0 = (x_t - sqrt(1 - alpha_t) eps) /
/// sqrt(alpha_t)`, `x_prev = sqrt(alpha_prev) x0 + sqrt(1 - alpha_prev - sigma_t^2) eps`;
/// `sigma_t = 0` is deterministic DDIM. `x_t`, `eps_pred`: one shape and dtype; `x_prev` is
/// resized to it. The formula is evaluated as `a x_t + b eps` with `a`, `b` from the
/// scalars in float64. Errors unless `0 < alpha_t <= 1`, `0 <= alpha_prev <= 1` and
/// `alpha_prev + sigma_t^2 <= 1`.
pub fn ddim_step(
    x_t: &Tensor,
    eps_pred: &Tensor,
    alpha_t: f32,
    alpha_prev: f32,
    sigma_t: f32,
    x_prev: &mut Tensor,
) -> Result<()> {
    let op = "ddim_step";
    check_finite(
        op,
        &[
            ("alpha_t", alpha_t),
            ("alpha_prev", alpha_prev),
            ("sigma_t", sigma_t),
        ],
    )?;
    let (at, ap, s) = (
        f64::from(alpha_t),
        f64::from(alpha_prev),
        f64::from(sigma_t),
    );
    if !(at > 0.0 && at <= 1.0 && (0.0..=1.0).contains(&ap)) {
        return Err(Error::invalid(
            op,
            format!("`alpha_t` must be in (0, 1] and `alpha_prev` in [0, 1], got {alpha_t} and {alpha_prev}"),
        ));
    }
    let noise = 1.0 - ap - s * s;
    if noise < 0.0 {
        return Err(Error::invalid(
            op,
            format!("1 - alpha_prev - sigma_t^2 = {noise} must not be negative"),
        ));
    }
    let a = (ap / at).sqrt();
    let b = noise.sqrt() - a * (1.0 - at).sqrt();
    let c = StepCoefficients {
        cx: a as f32,
        ce: b as f32,
        cp: 0.0,
        z_ce: None,
    };
    sampler_step(op, (x_t, eps_pred, None), c, x_prev, None)
}

/// One first-order Euler step (C++ `euler_step`): `x_prev = x_t + (sigma_prev - sigma_t)
/// eps_pred`. `eps_pred` is the model term as the schedule defines it: the k-diffusion
/// derivative, or the flow-matching velocity (Flux, SD3) with the flow's sigmas. Shapes as
/// [`ddim_step`].
pub fn euler_step(
    x_t: &Tensor,
    eps_pred: &Tensor,
    sigma_t: f32,
    sigma_prev: f32,
    x_prev: &mut Tensor,
) -> Result<()> {
    let op = "euler_step";
    check_finite(op, &[("sigma_t", sigma_t), ("sigma_prev", sigma_prev)])?;
    let c = StepCoefficients {
        cx: 1.0,
        ce: (f64::from(sigma_prev) - f64::from(sigma_t)) as f32,
        cp: 0.0,
        z_ce: None,
    };
    sampler_step(op, (x_t, eps_pred, None), c, x_prev, None)
}

/// The host-side coefficients of one DPM-Solver++ 2M step (k-diffusion, eps prediction,
/// `alpha = 1`), the scalars of [`dpmpp_2m_step`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dpmpp2mCoefficients {
    /// Weight of `x_t`: `sigma_next / sigma_t`.
    pub c_xt: f32,
    /// Weight of this step's `x0`: `-(e^-h - 1) (1 + 1 / (2 r))`.
    pub c_x0t: f32,
    /// Weight of the previous step's `x0`: `-(e^-h - 1) (-1 / (2 r))`.
    pub c_x0prev: f32,
}

impl Dpmpp2mCoefficients {
    /// The coefficients of the step from `sigma_t` to `sigma_next` after a previous step
    /// from `sigma_last` to `sigma_t`: with `lambda = -ln sigma`, `h = lambda_next -
    /// lambda_t`, `r = (lambda_t - lambda_last) / h`. Computed in float64. Errors unless
    /// the sigmas are positive, finite and strictly decreasing (the first step of a
    /// schedule has no previous `x0`: it is an [`euler_step`]).
    pub fn new(sigma_last: f32, sigma_t: f32, sigma_next: f32) -> Result<Self> {
        let op = "dpmpp_2m_step";
        let [sl, st, sn] = [sigma_last, sigma_t, sigma_next].map(f64::from);
        if !(sl.is_finite() && sl > st && st > sn && sn > 0.0) {
            return Err(Error::invalid(
                op,
                format!(
                    "sigmas must be finite, positive and decreasing, got {sigma_last} > \
                     {sigma_t} > {sigma_next}"
                ),
            ));
        }
        let lambda = |s: f64| -s.ln();
        let h = lambda(sn) - lambda(st);
        let r = (lambda(st) - lambda(sl)) / h;
        let k = -(-h).exp_m1();
        Ok(Dpmpp2mCoefficients {
            c_xt: (sn / st) as f32,
            c_x0t: (k * (1.0 + 1.0 / (2.0 * r))) as f32,
            c_x0prev: (k * (-1.0 / (2.0 * r))) as f32,
        })
    }
}

/// One DPM-Solver++ 2M step (C++ `dpmpp_2m_step`): `x0_t = x_t - sigma_t eps_pred`,
/// `x_prev = c_xt x_t + c_x0t x0_t + c_x0prev x0_prev`, and `x0_out = x0_t` (the caller
/// keeps it as the next step's `x0_prev`). `x_t`, `eps_pred`, `x0_prev`: one shape and
/// dtype; `x_prev`, `x0_out` are resized to it. The coefficients come from the host
/// ([`Dpmpp2mCoefficients::new`]); the first step of a schedule is an [`euler_step`].
pub fn dpmpp_2m_step(
    x_t: &Tensor,
    eps_pred: &Tensor,
    x0_prev: &Tensor,
    sigma_t: f32,
    c: Dpmpp2mCoefficients,
    x_prev: &mut Tensor,
    x0_out: &mut Tensor,
) -> Result<()> {
    let op = "dpmpp_2m_step";
    check_finite(
        op,
        &[
            ("sigma_t", sigma_t),
            ("c_xt", c.c_xt),
            ("c_x0t", c.c_x0t),
            ("c_x0prev", c.c_x0prev),
        ],
    )?;
    let (s, cx0) = (f64::from(sigma_t), f64::from(c.c_x0t));
    let step = StepCoefficients {
        cx: (f64::from(c.c_xt) + cx0) as f32,
        ce: (-cx0 * s) as f32,
        cp: c.c_x0prev,
        z_ce: Some(-sigma_t),
    };
    sampler_step(
        op,
        (x_t, eps_pred, Some(x0_prev)),
        step,
        x_prev,
        Some(x0_out),
    )
}

/// Sinusoidal timestep embedding (C++ `timestep_embedding`; diffusers'
/// `get_timestep_embedding` with `flip_sin_to_cos = true`, `downscale_freq_shift = 0`):
/// with `half = dim / 2` and `f_j = exp(-ln(max_period) j / half)`, row `i` of `y` is
/// `cos(t_i f_j)` for `j < half`, then `sin(t_i f_j)`, then a zero column when `dim` is odd.
/// `timesteps`: `N` values (`(N, 1)`); `y` is resized to `(N, dim)` in the timesteps'
/// dtype. The frequencies are computed in float64 and the product `t f` in FP32, as
/// diffusers does. Errors unless `dim >= 2` and `max_period` is positive and finite.
pub fn timestep_embedding(
    timesteps: &Tensor,
    dim: usize,
    max_period: f32,
    y: &mut Tensor,
) -> Result<()> {
    let op = "timestep_embedding";
    let be = dispatch(
        op,
        &[input("timesteps", timesteps).float(), written("y", y)],
    )?;
    if dim < 2 {
        return Err(Error::invalid(
            op,
            format!("`dim` must be at least 2, got {dim}"),
        ));
    }
    if !(max_period.is_finite() && max_period > 0.0) {
        return Err(Error::invalid(
            op,
            format!("`max_period` must be positive and finite, got {max_period}"),
        ));
    }
    let n = timesteps.numel();
    super::checked_product(op, "N*dim", &[n, dim])?;
    be.out("y", y, &[n, dim], timesteps.dtype())?;
    if n == 0 {
        return Ok(());
    }
    let freqs = brotensor_cpu::diffusion::timestep_frequencies(dim / 2, max_period);
    be.timestep_embedding(op, timesteps, &freqs, dim, y)
}

/// The tensors of an SD U-Net residual block (C++ `resblock_forward`'s parameters):
/// `h = silu(GN(x; gamma1, beta1))`, `h = conv3x3(h; w1, b1) (+ t_emb_shift)`, `h =
/// silu(GN(h; gamma2, beta2))`, `h = conv3x3(h; w2, b2)`, `y = h + skip(x)`, the skip the
/// identity (`C_in = C_out`, no `w_skip`) or a 1x1 convolution (`w_skip`, `b_skip`).
#[derive(Clone, Copy, Debug)]
pub struct ResBlock<'a> {
    /// First GroupNorm scale, `C_in` values.
    pub gamma1: &'a Tensor,
    /// First GroupNorm shift, `C_in` values.
    pub beta1: &'a Tensor,
    /// First convolution, OIHW `(C_out, C_in*9)` or `[C_out, C_in, 3, 3]`.
    pub w1: &'a Tensor,
    /// Its bias, `C_out` values.
    pub b1: Option<&'a Tensor>,
    /// The time-embedding shift added after the first convolution: `(N, C_out)` per
    /// sample, or `C_out` values for every sample.
    pub t_emb_shift: Option<&'a Tensor>,
    /// Second GroupNorm scale, `C_out` values.
    pub gamma2: &'a Tensor,
    /// Second GroupNorm shift, `C_out` values.
    pub beta2: &'a Tensor,
    /// Second convolution, `(C_out, C_out*9)` or `[C_out, C_out, 3, 3]`.
    pub w2: &'a Tensor,
    /// Its bias, `C_out` values.
    pub b2: Option<&'a Tensor>,
    /// The 1x1 skip convolution `(C_out, C_in)`; required when `C_in != C_out`.
    pub w_skip: Option<&'a Tensor>,
    /// Its bias, `C_out` values (only with `w_skip`).
    pub b_skip: Option<&'a Tensor>,
}

/// The sizes of a [`ResBlock`]: the input `(N, C_in, H, W)`, the output channels, the
/// GroupNorm groups (dividing `C_in` and `C_out`; 32 in Stable Diffusion) and epsilon.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ResBlockSpec {
    /// The input's `(N, C_in, H, W)`.
    pub dims: Nchw,
    /// Output channels.
    pub c_out: usize,
    /// GroupNorm groups.
    pub num_groups: usize,
    /// GroupNorm epsilon (1e-5 in Stable Diffusion).
    pub eps: f32,
}

/// The gradients [`resblock_backward`] accumulates into (pre-sized by the caller, zeroed for
/// a fresh gradient): each one the shape of its parameter. An optional gradient is
/// accumulated when given and its parameter was used; pass `None` otherwise.
#[derive(Debug)]
pub struct ResBlockGrads<'a> {
    /// Of `gamma1`.
    pub dgamma1: &'a mut Tensor,
    /// Of `beta1`.
    pub dbeta1: &'a mut Tensor,
    /// Of `w1`.
    pub dw1: &'a mut Tensor,
    /// Of `b1`.
    pub db1: Option<&'a mut Tensor>,
    /// Of `t_emb_shift`.
    pub dt_emb_shift: Option<&'a mut Tensor>,
    /// Of `gamma2`.
    pub dgamma2: &'a mut Tensor,
    /// Of `beta2`.
    pub dbeta2: &'a mut Tensor,
    /// Of `w2`.
    pub dw2: &'a mut Tensor,
    /// Of `b2`.
    pub db2: Option<&'a mut Tensor>,
    /// Of `w_skip`.
    pub dw_skip: Option<&'a mut Tensor>,
    /// Of `b_skip`.
    pub db_skip: Option<&'a mut Tensor>,
}

/// The checked geometry of a residual block: its two 3x3 convolutions and the 1x1 skip.
struct Geometry {
    /// `N * C_out`: the output planes (and the per-sample time shifts).
    planes_out: usize,
    conv1: Conv2d,
    conv2: Conv2d,
    skip: Conv2d,
    out: Nchw,
    hw: usize,
}

/// Checks the block's tensors against `spec` (every operand named) and gives its geometry.
fn check_block(
    op: &'static str,
    x: &Tensor,
    b: &ResBlock<'_>,
    spec: &ResBlockSpec,
) -> Result<Geometry> {
    let d = spec.dims;
    let c_out = spec.c_out;
    super::conv::check_nchw(op, d)?;
    check_activation(op, "x", x, d)?;
    let g = spec.num_groups;
    if g == 0 || !d.c.is_multiple_of(g) || !c_out.is_multiple_of(g) {
        return Err(Error::invalid(
            op,
            format!(
                "num_groups {g} must divide C_in = {} and C_out = {c_out}",
                d.c
            ),
        ));
    }
    let same = Conv2dSpec {
        padding: [1, 1],
        ..Conv2dSpec::new([3, 3])
    };
    let conv1 = forward_geometry(op, d, c_out, &same)?;
    let mid = Nchw::new(d.n, c_out, d.h, d.w);
    let conv2 = forward_geometry(op, mid, c_out, &same)?;
    let skip = forward_geometry(op, d, c_out, &Conv2dSpec::new([1, 1]))?;
    super::conv::check_nchw(op, mid)?;
    let like = ("x", x);
    check_weight(op, "w1", b.w1, c_out, [d.c, 3, 3])?;
    check_weight(op, "w2", b.w2, c_out, [c_out, 3, 3])?;
    check_dtypes_match(op, like, &[("w1", b.w1), ("w2", b.w2)])?;
    for (name, t, len) in [
        ("gamma1", b.gamma1, d.c),
        ("beta1", b.beta1, d.c),
        ("gamma2", b.gamma2, c_out),
        ("beta2", b.beta2, c_out),
    ] {
        check_values(op, (name, t), len, like)?;
    }
    for (name, t) in [("b1", b.b1), ("b2", b.b2), ("b_skip", b.b_skip)] {
        if let Some(t) = t {
            check_values(op, (name, t), c_out, like)?;
        }
    }
    let planes_out = super::checked_product(op, "N*C_out", &[d.n, c_out])?;
    if let Some(t) = b.t_emb_shift {
        if t.numel() != c_out && t.numel() != planes_out {
            return Err(Error::shape(
                op,
                format!(
                    "`t_emb_shift` must be (N, C_out) = ({}, {c_out}) or hold C_out = {c_out} \
                     values, got {:?}",
                    d.n,
                    t.dims()
                ),
            ));
        }
        check_dtypes_match(op, like, &[("t_emb_shift", t)])?;
    }
    match b.w_skip {
        Some(w) => {
            check_weight(op, "w_skip", w, c_out, [d.c, 1, 1])?;
            check_dtypes_match(op, like, &[("w_skip", w)])?;
        }
        None if d.c != c_out => {
            return Err(Error::invalid(
                op,
                format!(
                    "`w_skip` is required when C_in = {} differs from C_out = {c_out}",
                    d.c
                ),
            ))
        }
        None if b.b_skip.is_some() => {
            return Err(Error::invalid(op, "`b_skip` is given without `w_skip`"))
        }
        None => {}
    }
    let hw = d.plane().map_err(|e| Error::shape(op, e))?;
    Ok(Geometry {
        planes_out,
        conv1,
        conv2,
        skip,
        out: mid,
        hw,
    })
}

/// The operands of a residual block, in the C++ signature's order.
fn block_operands<'a>(x: &'a Tensor, b: &ResBlock<'a>) -> Vec<super::Operand<'a>> {
    vec![
        input("x", x).float(),
        input("gamma1", b.gamma1),
        input("beta1", b.beta1),
        input("w1", b.w1),
        input_opt("b1", b.b1),
        input_opt("t_emb_shift", b.t_emb_shift),
        input("gamma2", b.gamma2),
        input("beta2", b.beta2),
        input("w2", b.w2),
        input_opt("b2", b.b2),
        input_opt("w_skip", b.w_skip),
        input_opt("b_skip", b.b_skip),
    ]
}

/// A tensor of `d`'s `(N, C*H*W)` on the op's device, contents undefined.
fn scratch(be: &Dispatched, d: Nchw, dtype: Dtype) -> Result<Tensor> {
    Tensor::empty_on(be.device(), d.n, d.c * d.h * d.w, dtype)
}

/// `c += t_emb_shift` per `(sample, channel)` plane (or per channel for `C_out` values).
fn add_time_shift(
    op: &'static str,
    be: &Dispatched,
    t: &Tensor,
    hw: usize,
    c: &mut Tensor,
) -> Result<()> {
    let b = Broadcast {
        inner: hw,
        v_len: t.numel(),
        per_row: true,
        repeat: usize::MAX,
        multiply: false,
    };
    be.broadcast(op, c, t, b)
}

/// The first half of the block: `c1 = conv1(silu(GN1(x))) + b1 + t` (the norm and SiLU in
/// one pass).
fn first_half(
    op: &'static str,
    be: &Dispatched,
    x: &Tensor,
    b: &ResBlock<'_>,
    s: &ResBlockSpec,
    g: &Geometry,
) -> Result<Tensor> {
    let mut h = scratch(be, s.dims, x.dtype())?;
    be.group_norm(
        x,
        b.gamma1,
        b.beta1,
        (s.num_groups, g.hw),
        s.eps,
        true,
        &mut h,
    )?;
    let mut c1 = scratch(be, g.out, x.dtype())?;
    be.conv2d_forward(op, &g.conv1, &h, b.w1, b.b1, &mut c1)?;
    if let Some(t) = b.t_emb_shift {
        add_time_shift(op, be, t, g.hw, &mut c1)?;
    }
    Ok(c1)
}

/// `y = conv2(silu(GN2(c1))) + b2 + skip(x)`.
#[allow(clippy::too_many_arguments)]
fn second_half(
    op: &'static str,
    be: &Dispatched,
    x: &Tensor,
    c1: &Tensor,
    b: &ResBlock<'_>,
    s: &ResBlockSpec,
    g: &Geometry,
    y: &mut Tensor,
) -> Result<()> {
    let mut h = scratch(be, g.out, x.dtype())?;
    be.group_norm(
        c1,
        b.gamma2,
        b.beta2,
        (s.num_groups, g.hw),
        s.eps,
        true,
        &mut h,
    )?;
    be.conv2d_forward(op, &g.conv2, &h, b.w2, b.b2, y)?;
    let skip = match b.w_skip {
        Some(w) => {
            let mut sk = scratch(be, g.out, x.dtype())?;
            be.conv2d_forward(op, &g.skip, x, w, b.b_skip, &mut sk)?;
            sk
        }
        None => x.reshaped(g.out.n, g.out.c * g.hw)?,
    };
    let dims = y.dims().to_vec();
    y.reshape_(&[g.out.n, g.out.c * g.hw])?;
    let added = super::add_inplace(y, &skip);
    y.reshape_(&dims)?;
    added
}

/// Diffusion residual block, forward (C++ `resblock_forward`, the SD U-Net ResnetBlock2D):
/// `h = silu(GN(x; gamma1, beta1))`, `h = conv3x3(h, w1) + b1 (+ t_emb_shift)`, `h =
/// silu(GN(h; gamma2, beta2))`, `h = conv3x3(h, w2) + b2`, `y = h + x` (or `+
/// conv1x1(x, w_skip) + b_skip`). Two-pass GroupNorm variance; each norm and its SiLU run
/// as one pass; FP32 accumulation in every dtype.
///
/// `x`: `(N, C_in*H*W)` (or `[N, C_in, H, W]`) for `spec.dims`; the block's tensors as
/// [`ResBlock`] says, all of `x`'s dtype; `y` is resized to `(N, C_out*H*W)` (4-D for a 4-D
/// `x`) and overwritten.
pub fn resblock_forward(
    x: &Tensor,
    block: &ResBlock<'_>,
    spec: &ResBlockSpec,
    y: &mut Tensor,
) -> Result<()> {
    let op = "resblock_forward";
    let mut operands = block_operands(x, block);
    operands.push(written("y", y));
    let be = dispatch(op, &operands)?;
    let g = check_block(op, x, block, spec)?;
    be.out("y", y, &output_dims(x, g.out), x.dtype())?;
    if y.numel() == 0 {
        return Ok(());
    }
    let c1 = first_half(op, &be, x, block, spec, &g)?;
    second_half(op, &be, x, &c1, block, spec, &g, y)
}

/// W8A16 residual block (C++ `resblock_forward_int8w_fp16`): [`resblock_forward`] with I8
/// convolution weights `w1_int8`, `w2_int8` (and `w_skip_int8`) and their F32
/// per-output-channel scales `(C_out, 1)`, dequantized on the device into `x`'s dtype; `x`,
/// the norms, biases and `t_emb_shift` are F16 or BF16. Inference only. `block` holds the
/// float tensors; its `w1`, `w2` and `w_skip` fields are ignored (pass the I8 ones here).
#[allow(clippy::too_many_arguments)]
pub fn resblock_forward_int8w_fp16(
    x: &Tensor,
    block: &ResBlock<'_>,
    (w1_int8, s1): (&Tensor, &Tensor),
    (w2_int8, s2): (&Tensor, &Tensor),
    skip: Option<(&Tensor, &Tensor)>,
    spec: &ResBlockSpec,
    y: &mut Tensor,
) -> Result<()> {
    let op = "resblock_forward_int8w_fp16";
    let mut operands = block_operands(x, block);
    operands.truncate(operands.len() - 2);
    operands.retain(|o| o.name != "w1" && o.name != "w2");
    operands.extend([
        input("w1_int8", w1_int8),
        input("s1", s1),
        input("w2_int8", w2_int8),
        input("s2", s2),
        input_opt("w_skip_int8", skip.map(|s| s.0)),
        input_opt("s_skip", skip.map(|s| s.1)),
        input_opt("b_skip", block.b_skip),
        written("y", y),
    ]);
    let be = dispatch(op, &operands)?;
    super::linear::check_16bit(op, "x", x, None)?;
    let d = spec.dims;
    let dequantize = |name: &'static str,
                      w: &Tensor,
                      scales: &Tensor,
                      c_in: usize,
                      k: usize|
     -> Result<Tensor> {
        if w.dtype() != Dtype::I8 {
            return Err(Error::Dtype {
                op,
                operand: name,
                expected: "must be I8".into(),
                found: w.dtype(),
            });
        }
        check_weight(op, name, w, spec.c_out, [c_in, k, k])?;
        let flat = w.reshaped(spec.c_out, c_in * k * k)?;
        super::quant::int8_weight_as(op, be, &flat, scales, x)
    };
    let w1 = dequantize("w1_int8", w1_int8, s1, d.c, 3)?;
    let w2 = dequantize("w2_int8", w2_int8, s2, spec.c_out, 3)?;
    let ws = skip
        .map(|(w, s)| dequantize("w_skip_int8", w, s, d.c, 1))
        .transpose()?;
    let b = ResBlock {
        w1: &w1,
        w2: &w2,
        w_skip: ws.as_ref(),
        ..*block
    };
    let g = check_block(op, x, &b, spec)?;
    be.out("y", y, &output_dims(x, g.out), x.dtype())?;
    if y.numel() == 0 {
        return Ok(());
    }
    let c1 = first_half(op, &be, x, &b, spec, &g)?;
    second_half(op, &be, x, &c1, &b, spec, &g, y)
}

/// Checks that an accumulated gradient matches its parameter: given exactly when the
/// parameter is, pre-sized to its element count, on the op's device, of `x`'s dtype.
fn check_grad(
    op: &'static str,
    (name, grad): (&'static str, Option<&Tensor>),
    param: Option<&Tensor>,
    x: &Tensor,
) -> Result<()> {
    match (grad, param) {
        (Some(g), Some(p)) => check_accumulated(op, name, g, ("x", x), p.numel()),
        (Some(_), None) => Err(Error::invalid(
            op,
            format!("`{name}` is given but its parameter was not used in the forward pass"),
        )),
        (None, _) => Ok(()),
    }
}

/// Gradients of [`resblock_forward`] (C++ `resblock_backward`), the forward intermediates
/// recomputed from `x` and the parameters: `dx` is resized to `x`'s dims and overwritten;
/// every gradient in `grads` accumulates (`+=`, caller-sized and zeroed). `dy`: `y`'s shape
/// `(N, C_out*H*W)`. `spec` must match the forward call.
pub fn resblock_backward(
    x: &Tensor,
    block: &ResBlock<'_>,
    spec: &ResBlockSpec,
    dy: &Tensor,
    dx: &mut Tensor,
    grads: ResBlockGrads<'_>,
) -> Result<()> {
    let op = "resblock_backward";
    let ResBlockGrads {
        dgamma1,
        dbeta1,
        dw1,
        db1,
        dt_emb_shift,
        dgamma2,
        dbeta2,
        dw2,
        db2,
        dw_skip,
        db_skip,
    } = grads;
    let mut operands = block_operands(x, block);
    operands.extend([
        input("dy", dy),
        written("dx", dx),
        updated("dgamma1", dgamma1),
        updated("dbeta1", dbeta1),
        updated("dw1", dw1),
        updated_opt("db1", db1.as_deref()),
        updated_opt("dt_emb_shift", dt_emb_shift.as_deref()),
        updated("dgamma2", dgamma2),
        updated("dbeta2", dbeta2),
        updated("dw2", dw2),
        updated_opt("db2", db2.as_deref()),
        updated_opt("dw_skip", dw_skip.as_deref()),
        updated_opt("db_skip", db_skip.as_deref()),
    ]);
    let be = dispatch(op, &operands)?;
    let g = check_block(op, x, block, spec)?;
    check_activation(op, "dy", dy, g.out)?;
    check_dtypes_match(op, ("x", x), &[("dy", dy)])?;
    let b = block;
    for (name, grad, param) in [
        ("dgamma1", Some(&*dgamma1), Some(b.gamma1)),
        ("dbeta1", Some(&*dbeta1), Some(b.beta1)),
        ("dw1", Some(&*dw1), Some(b.w1)),
        ("db1", db1.as_deref(), b.b1),
        ("dt_emb_shift", dt_emb_shift.as_deref(), b.t_emb_shift),
        ("dgamma2", Some(&*dgamma2), Some(b.gamma2)),
        ("dbeta2", Some(&*dbeta2), Some(b.beta2)),
        ("dw2", Some(&*dw2), Some(b.w2)),
        ("db2", db2.as_deref(), b.b2),
        ("dw_skip", dw_skip.as_deref(), b.w_skip),
        ("db_skip", db_skip.as_deref(), b.b_skip),
    ] {
        check_grad(op, (name, grad), param, x)?;
    }
    be.out("dx", dx, x.dims(), x.dtype())?;
    if x.numel() == 0 || g.out.numel().unwrap_or(0) == 0 {
        if dx.numel() > 0 {
            super::fill(dx, 0.0)?;
        }
        return Ok(());
    }
    let (dt, d, hw) = (x.dtype(), spec.dims, g.hw);
    let out = g.out;
    let groups = (spec.num_groups, hw);
    // Recompute: a1 = GN1(x), h1 = silu(a1), c1 = conv1(h1) + b1 + t, a2 = GN2(c1), h2 =
    // silu(a2).
    let mut a1 = scratch(&be, d, dt)?;
    be.group_norm(x, b.gamma1, b.beta1, groups, spec.eps, false, &mut a1)?;
    let mut h1 = Tensor::default();
    super::silu_forward(&a1, &mut h1)?;
    let mut c1 = scratch(&be, out, dt)?;
    be.conv2d_forward(op, &g.conv1, &h1, b.w1, b.b1, &mut c1)?;
    if let Some(t) = b.t_emb_shift {
        add_time_shift(op, &be, t, hw, &mut c1)?;
    }
    let mut a2 = scratch(&be, out, dt)?;
    be.group_norm(&c1, b.gamma2, b.beta2, groups, spec.eps, false, &mut a2)?;
    let mut h2 = Tensor::default();
    super::silu_forward(&a2, &mut h2)?;
    let dy = dy.reshaped(out.n, out.c * hw)?;
    // Second convolution.
    if let Some(db2) = db2 {
        be.conv2d_backward_bias(op, (out.n, out.c, hw), &dy, db2)?;
    }
    be.conv2d_backward_weight(op, &g.conv2, &h2, &dy, dw2)?;
    let mut dh = scratch(&be, out, dt)?;
    be.conv2d_backward_input(op, &g.conv2, b.w2, &dy, None, &mut dh)?;
    let mut da = Tensor::default();
    super::silu_backward(&a2, &dh, &mut da)?;
    let mut dc1 = Tensor::default();
    super::group_norm_backward(
        &c1,
        b.gamma2,
        &da,
        out,
        spec.num_groups,
        spec.eps,
        &mut dc1,
        dgamma2,
        dbeta2,
    )?;
    // First convolution and the time shift.
    if let Some(db1) = db1 {
        be.conv2d_backward_bias(op, (out.n, out.c, hw), &dc1, db1)?;
    }
    if let (Some(dts), Some(t)) = (dt_emb_shift, b.t_emb_shift) {
        let per_sample = t.numel() == g.planes_out && out.n > 1;
        let sizes = if per_sample {
            (1, g.planes_out, hw)
        } else {
            (out.n, out.c, hw)
        };
        be.conv2d_backward_bias(op, sizes, &dc1, dts)?;
    }
    be.conv2d_backward_weight(op, &g.conv1, &h1, &dc1, dw1)?;
    let mut dh1 = scratch(&be, d, dt)?;
    be.conv2d_backward_input(op, &g.conv1, b.w1, &dc1, None, &mut dh1)?;
    let mut da1 = Tensor::default();
    super::silu_backward(&a1, &dh1, &mut da1)?;
    let xf = x.reshaped(d.n, d.c * hw)?;
    super::group_norm_backward(
        &xf,
        b.gamma1,
        &da1,
        d,
        spec.num_groups,
        spec.eps,
        dx,
        dgamma1,
        dbeta1,
    )?;
    // The skip.
    match b.w_skip {
        Some(w) => {
            if let Some(dbs) = db_skip {
                be.conv2d_backward_bias(op, (out.n, out.c, hw), &dy, dbs)?;
            }
            if let Some(dws) = dw_skip {
                be.conv2d_backward_weight(op, &g.skip, &xf, &dy, dws)?;
            }
            let mut ds = scratch(&be, d, dt)?;
            be.conv2d_backward_input(op, &g.skip, w, &dy, None, &mut ds)?;
            super::add_inplace(dx, &ds)?;
        }
        None => super::add_inplace(dx, &dy)?,
    }
    dx.reshape_(x.dims())
}

impl Tensor {
    /// AdaLN modulation of these token rows (last dim `D`): `self (1 + scale) + shift`, a new
    /// tensor ([`modulate`]).
    pub fn modulate(&self, scale: &Tensor, shift: &Tensor) -> Result<Tensor> {
        let mut y = Tensor::default();
        modulate(self, scale, shift, &mut y)?;
        Ok(y)
    }

    /// These `N` timesteps as a new `(N, dim)` sinusoidal embedding with `max_period`
    /// 10000 (the Stable Diffusion default; [`timestep_embedding`]).
    pub fn timestep_embedding(&self, dim: usize) -> Result<Tensor> {
        let mut y = Tensor::default();
        timestep_embedding(self, dim, 10000.0, &mut y)?;
        Ok(y)
    }
}
