//! The element-wise family: one kernel per arity, generic over the storage element, with the
//! math chosen by a comptime instruction ([`UnaryInstr`], [`BinaryInstr`]).
//!
//! Each kernel loads a vector of `N` elements per unit, widens it to `f32`, applies the
//! instruction and narrows the result back to the storage element. An instruction is a
//! comptime parameter: every instruction compiles (and is cached) as its own kernel, with
//! no run-time branch on it. Two `f32` launch scalars
//! (`a`, `b`) carry the instruction's parameters (a scalar operand, clamp bounds, axpby
//! coefficients); instructions that need none ignore them.

use cubecl::frontend::{
    Cos as _, Erf as _, Exp as _, Log as _, Round as _, Sin as _, Sqrt as _, Tanh as _,
};
use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{extent, grid_1d, vector_size_for, Buf, LaunchError};

/// Defines an instruction set from one list: the enum (a comptime kernel parameter), its
/// `ALL` array, and the `#[cube]` function that applies an instruction to widened vectors.
/// Each entry is a documented variant and the expression it computes from the operands and
/// the launch scalars `a`, `b` (which instructions without parameters ignore).
macro_rules! instruction_set {
    (
        $(#[$meta:meta])*
        enum $set:ident;
        $(#[$apply_doc:meta])*
        fn $apply:ident(|$($v:ident),+; $a:ident, $b:ident|);
        $($(#[$doc:meta])* $name:ident => $body:expr;)*
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $set {
            $($(#[$doc])* $name,)*
        }

        impl $set {
            /// Every instruction of the set, in declaration order.
            pub const ALL: &'static [$set] = &[$($set::$name),*];
        }

        $(#[$apply_doc])*
        #[cube]
        #[allow(unused_variables)]
        pub fn $apply<N: Size>(
            $($v: Vector<f32, N>,)+
            $a: f32,
            $b: f32,
            #[comptime] instr: $set,
        ) -> Vector<f32, N> {
            match instr {
                $($set::$name => $body,)*
            }
        }
    };
}

/// `1 / (1 + e^-x)`.
#[cube]
pub fn sigmoid<N: Size>(x: Vector<f32, N>) -> Vector<f32, N> {
    // `-1 * x`, not `-x`: CubeCL's CUDA output has no unary minus for 2- and 4-wide vectors.
    Vector::new(1.0f32) / (Vector::new(1.0f32) + (Vector::new(-1.0f32) * x).exp())
}

/// The tanh-GELU `0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))`.
#[cube]
pub fn gelu<N: Size>(x: Vector<f32, N>) -> Vector<f32, N> {
    let u = Vector::new(0.797_884_6f32) * (x + Vector::new(0.044_715f32) * x * x * x);
    Vector::new(0.5f32) * x * (Vector::new(1.0f32) + u.tanh())
}

/// d/dx of [`gelu()`].
#[cube]
pub fn gelu_derivative<N: Size>(x: Vector<f32, N>) -> Vector<f32, N> {
    let u = Vector::new(0.797_884_6f32) * (x + Vector::new(0.044_715f32) * x * x * x);
    let t = u.tanh();
    let du =
        Vector::new(0.797_884_6f32) * (Vector::new(1.0f32) + Vector::new(0.134_145f32) * x * x);
    Vector::new(0.5f32) * (Vector::new(1.0f32) + t)
        + Vector::new(0.5f32) * x * (Vector::new(1.0f32) - t * t) * du
}

/// The erf-GELU `0.5 x (1 + erf(x / sqrt 2))`.
#[cube]
pub fn gelu_exact<N: Size>(x: Vector<f32, N>) -> Vector<f32, N> {
    Vector::new(0.5f32)
        * x
        * (Vector::new(1.0f32) + (x * Vector::new(core::f32::consts::FRAC_1_SQRT_2)).erf())
}

/// d/dx of [`gelu_exact()`]: `Phi(x) + x phi(x)`.
#[cube]
pub fn gelu_exact_derivative<N: Size>(x: Vector<f32, N>) -> Vector<f32, N> {
    let cdf = Vector::new(0.5f32)
        * (Vector::new(1.0f32) + (x * Vector::new(core::f32::consts::FRAC_1_SQRT_2)).erf());
    cdf + x * Vector::new(0.398_942_3f32) * (Vector::new(-0.5f32) * x * x).exp()
}

/// `x * sigmoid(x)`.
#[cube]
pub fn silu<N: Size>(x: Vector<f32, N>) -> Vector<f32, N> {
    x * sigmoid::<N>(x)
}

/// d/dx of [`silu()`]: `s (1 + x (1 - s))`.
#[cube]
pub fn silu_derivative<N: Size>(x: Vector<f32, N>) -> Vector<f32, N> {
    let s = sigmoid::<N>(x);
    s * (Vector::new(1.0f32) + x * (Vector::new(1.0f32) - s))
}

instruction_set! {
    /// One-input element-wise instructions: `out = f(x; a, b)`. The public ops that use each
    /// are named in parentheses.
    enum UnaryInstr;
    /// `f(x; a, b)` for the instruction `instr`. It is comptime: each instruction compiles to
    /// its own kernel, with no branch on it.
    fn apply_unary(|x; a, b|);
    /// `x`, a copy: the straight-through gradient of round (round_backward).
    Identity => x;
    /// `x + a` (add_scalar, add_scalar_inplace).
    AddScalar => x + Vector::new(a);
    /// `x - a` (sub_scalar).
    SubScalar => x - Vector::new(a);
    /// `x * a` (mul_scalar, scale_inplace).
    MulScalar => x * Vector::new(a);
    /// `x / a` (div_scalar).
    DivScalar => x / Vector::new(a);
    /// `a` if `x < a`, `b` if `x > b`, else `x`; NaN passes through (clamp).
    Clamp => {
        let lo = Vector::new(a);
        let hi = Vector::new(b);
        let low = select_many(x.less_than(lo), lo, x);
        select_many(low.greater_than(hi), hi, low)
    };
    /// `e^x` (exp_forward).
    Exp => x.exp();
    /// `ln x`, no guard: 0 gives -inf, negatives NaN (log_forward).
    Log => x.ln();
    /// `sin x` (sin_forward).
    Sin => x.sin();
    /// `cos x` (cos_forward).
    Cos => x.cos();
    /// `1 / sqrt(x)` (rsqrt_forward).
    Rsqrt => Vector::new(1.0f32) / x.sqrt();
    /// Round half to even (round_forward).
    Round => x.round();
    /// `x` for `x > 0`, else 0 (relu_forward).
    Relu => select_many(x.greater_than(Vector::new(0.0f32)), x, Vector::new(0.0f32));
    /// `tanh x` (tanh_forward).
    Tanh => x.tanh();
    /// `1 / (1 + e^-x)` (sigmoid_forward).
    Sigmoid => sigmoid::<N>(x);
    /// `x sigmoid(x)` (silu_forward).
    Silu => silu::<N>(x);
    /// The tanh-GELU (gelu_forward).
    Gelu => gelu::<N>(x);
    /// The erf-GELU (gelu_exact_forward).
    GeluExact => gelu_exact::<N>(x);
    /// `x sigmoid(1.702 x)` (quick_gelu_forward).
    QuickGelu => x * sigmoid::<N>(Vector::new(1.702f32) * x);
    /// `x` for `x > 0`, else `a (e^x - 1)` (elu_forward).
    Elu => select_many(
        x.greater_than(Vector::new(0.0f32)),
        x,
        Vector::new(a) * (x.exp() - Vector::new(1.0f32)),
    );
    /// `x` for `x > 0`, else `a x` (leaky_relu_forward).
    LeakyRelu => select_many(x.greater_than(Vector::new(0.0f32)), x, Vector::new(a) * x);
    /// `x min(max(x + 3, 0), 6) / 6`; NaN passes through (hardswish_forward).
    HardSwish => {
        let r = select_many(
            x.less_than(Vector::new(-3.0f32)),
            Vector::new(0.0f32),
            select_many(x.greater_than(Vector::new(3.0f32)), Vector::new(6.0f32), x + Vector::new(3.0f32)),
        );
        x * r / Vector::new(6.0f32)
    };
    /// `min(max(a x + b, 0), 1)`; NaN passes through (hard_sigmoid_forward).
    HardSigmoid => {
        let v = Vector::new(a) * x + Vector::new(b);
        let low = select_many(v.less_than(Vector::new(0.0f32)), Vector::new(0.0f32), v);
        select_many(low.greater_than(Vector::new(1.0f32)), Vector::new(1.0f32), low)
    };
}

instruction_set! {
    /// Two-input element-wise instructions: `out = f(x, y; a, b)`. The public ops that use
    /// each are named in parentheses.
    enum BinaryInstr;
    /// `f(x, y; a, b)` for the instruction `instr`, comptime as in [`apply_unary()`].
    fn apply_binary(|x, y; a, b|);
    /// `x + y` (add, add_inplace, add_inplace_batched).
    Add => x + y;
    /// `x - y` (sub).
    Sub => x - y;
    /// `x * y` (mul, mul_inplace).
    Mul => x * y;
    /// `x / y` (div).
    Div => x / y;
    /// `a*x + b*y` (axpby_inplace).
    Axpby => Vector::new(a) * x + Vector::new(b) * y;
    /// d/dx e^x: `dy * e^x` with `x` the forward input and `y` = dy (exp_backward).
    ExpBackward => y * x.exp();
    /// d/dx ln x: `dy / x` (log_backward).
    LogBackward => y / x;
    /// d/dx sin x: `dy * cos x` (sin_backward).
    SinBackward => y * x.cos();
    /// d/dx cos x: `-dy * sin x` (cos_backward).
    CosBackward => Vector::new(-1.0f32) * y * x.sin();
    /// d/dx x^(-1/2) from the forward output `x` = rsqrt(x0): `-0.5 * dy * x^3`
    /// (rsqrt_backward).
    RsqrtBackward => Vector::new(-0.5f32) * y * x * x * x;
    /// `dy` where the forward input `x > 0`, else 0 (relu_backward).
    ReluBackward => select_many(x.greater_than(Vector::new(0.0f32)), y, Vector::new(0.0f32));
    /// From the forward output `x` = tanh: `dy (1 - x^2)` (tanh_backward).
    TanhBackward => y * (Vector::new(1.0f32) - x * x);
    /// From the forward output `x` = sigmoid: `dy x (1 - x)` (sigmoid_backward).
    SigmoidBackward => y * x * (Vector::new(1.0f32) - x);
    /// `dy silu'(x)` (silu_backward).
    SiluBackward => y * silu_derivative::<N>(x);
    /// `dy gelu'(x)` (gelu_backward).
    GeluBackward => y * gelu_derivative::<N>(x);
    /// `dy gelu_exact'(x)` (gelu_exact_backward).
    GeluExactBackward => y * gelu_exact_derivative::<N>(x);
    /// `dy (s + 1.702 x s (1 - s))`, `s = sigmoid(1.702 x)` (quick_gelu_backward).
    QuickGeluBackward => {
        let s = sigmoid::<N>(Vector::new(1.702f32) * x);
        y * (s + Vector::new(1.702f32) * x * s * (Vector::new(1.0f32) - s))
    };
    /// `dy` for `x > 0`, else `dy a e^x` (elu_backward).
    EluBackward => {
        select_many(x.greater_than(Vector::new(0.0f32)), y, y * Vector::new(a) * x.exp())
    };
    /// `dy` for `x > 0`, else `a dy` (leaky_relu_backward).
    LeakyReluBackward => select_many(x.greater_than(Vector::new(0.0f32)), y, Vector::new(a) * y);
}

#[cube(launch_unchecked)]
fn unary_kernel<F: Float, N: Size>(
    x: &Array<Vector<F, N>>,
    out: &mut Array<Vector<F, N>>,
    a: f32,
    b: f32,
    #[comptime] instr: UnaryInstr,
) {
    if ABSOLUTE_POS < out.len() {
        let v = Vector::<f32, N>::cast_from(x[ABSOLUTE_POS]);
        out[ABSOLUTE_POS] = Vector::cast_from(apply_unary::<N>(v, a, b, instr));
    }
}

#[cube(launch_unchecked)]
fn binary_kernel<F: Float, N: Size>(
    x: &Array<Vector<F, N>>,
    y: &Array<Vector<F, N>>,
    out: &mut Array<Vector<F, N>>,
    a: f32,
    b: f32,
    #[comptime] instr: BinaryInstr,
) {
    if ABSOLUTE_POS < out.len() {
        let vx = Vector::<f32, N>::cast_from(x[ABSOLUTE_POS]);
        let vy = Vector::<f32, N>::cast_from(y[ABSOLUTE_POS]);
        out[ABSOLUTE_POS] = Vector::cast_from(apply_binary::<N>(vx, vy, a, b, instr));
    }
}

#[cube(launch_unchecked)]
fn cast_kernel<I: Float, O: Float, N: Size>(
    x: &Array<Vector<I, N>>,
    out: &mut Array<Vector<O, N>>,
) {
    if ABSOLUTE_POS < out.len() {
        // Through f32, so every pair (including f16 <-> bf16) rounds once from the exact value.
        let v = Vector::<f32, N>::cast_from(x[ABSOLUTE_POS]);
        out[ABSOLUTE_POS] = Vector::cast_from(v);
    }
}

#[cube(launch_unchecked)]
fn fill_kernel<E: Numeric, N: Size>(out: &mut Array<Vector<E, N>>, value: f32) {
    if ABSOLUTE_POS < out.len() {
        out[ABSOLUTE_POS] = Vector::cast_from(value);
    }
}

/// `y[i] (+|*)= v[at]` with `at = (i / inner) % v.len()` (one value per row of `inner`,
/// cycling through `v`) or `at = (i / (inner * repeat)) * inner + i % inner` (one row of `v`
/// per `repeat` rows of `y`: a per-column bias when `repeat` covers every row).
#[cube(launch_unchecked)]
fn broadcast_kernel<F: Float>(
    y: &mut Array<F>,
    v: &Array<F>,
    inner: usize,
    repeat: usize,
    #[comptime] per_row: bool,
    #[comptime] multiply: bool,
) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let mut at = (i / (inner * repeat)) * inner + i % inner;
        if comptime!(per_row) {
            at = (i / inner) % v.len();
        }
        let (a, b) = (f32::cast_from(y[i]), f32::cast_from(v[at]));
        if comptime!(multiply) {
            y[i] = F::cast_from(a * b);
        } else {
            y[i] = F::cast_from(a + b);
        }
    }
}

#[cube(launch_unchecked)]
fn fill_words_kernel<N: Size>(out: &mut Array<Vector<u32, N>>, word: u32) {
    if ABSOLUTE_POS < out.len() {
        out[ABSOLUTE_POS] = Vector::new(word);
    }
}

#[cube(launch_unchecked)]
fn copy_kernel<E: Numeric, N: Size>(x: &Array<Vector<E, N>>, out: &mut Array<Vector<E, N>>) {
    if ABSOLUTE_POS < out.len() {
        out[ABSOLUTE_POS] = x[ABSOLUTE_POS];
    }
}

/// Where a kernel's input comes from.
#[derive(Clone, Copy)]
pub enum Source<'a> {
    /// A separate buffer.
    Buffer(&'a Handle),
    /// The output buffer itself (the op runs in place).
    Output,
}

fn max_vector<R: Runtime>(client: &ComputeClient<R>) -> usize {
    client
        .properties()
        .hardware
        .max_vector_size
        .clamp(1, crate::MAX_VECTOR_SIZE)
}

impl Source<'_> {
    /// The buffer of input `arg`, checked to hold `elems` elements of `elem_bytes` bytes;
    /// `None` for the output itself, which [`input_arg`] binds in its place.
    pub(crate) fn buf(
        self,
        arg: &'static str,
        elems: usize,
        elem_bytes: usize,
    ) -> Result<Option<Buf>, LaunchError> {
        match self {
            Source::Buffer(h) => Buf::new(arg, h, elems, elem_bytes).map(Some),
            Source::Output => Ok(None),
        }
    }
}

/// The array argument of an input from [`Source::buf`]: its own buffer, or the output's
/// (every unit reads index i before it writes index i, so reading the output in place is
/// race-free).
pub(crate) fn input_arg<R: Runtime>(src: Option<&Buf>, out: &Buf) -> ArrayArg<R> {
    src.unwrap_or(out).arg()
}

/// `out[i] = instr(x[i]; a, b)` over `len` elements of `F`.
#[allow(clippy::too_many_arguments)]
pub fn launch_unary<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    instr: UnaryInstr,
    x: Source<'_>,
    out: &Handle,
    len: usize,
    a: f32,
    b: f32,
) -> Result<(), LaunchError> {
    if len == 0 {
        return Ok(());
    }
    let bytes = core::mem::size_of::<F>();
    let x = x.buf("x", len, bytes)?;
    let out = Buf::new("out", out, len, bytes)?;
    let vs = vector_size_for(len, max_vector(client));
    let (count, dim) = grid_1d(client, len / vs)?;
    // SAFETY: every buffer holds `len` elements (checked `Buf`s) and the kernel guards its
    // index with `out.len()`, so no unit reads or writes past them.
    unsafe {
        unary_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            vs,
            input_arg(x.as_ref(), &out),
            out.arg(),
            a,
            b,
            instr,
        );
    }
    Ok(())
}

/// `out[i] = instr(x[i], y[i]; a, b)` over `len` elements of `F`.
#[allow(clippy::too_many_arguments)]
pub fn launch_binary<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    instr: BinaryInstr,
    x: Source<'_>,
    y: Source<'_>,
    out: &Handle,
    len: usize,
    a: f32,
    b: f32,
) -> Result<(), LaunchError> {
    if len == 0 {
        return Ok(());
    }
    let bytes = core::mem::size_of::<F>();
    let x = x.buf("x", len, bytes)?;
    let y = y.buf("y", len, bytes)?;
    let out = Buf::new("out", out, len, bytes)?;
    let vs = vector_size_for(len, max_vector(client));
    let (count, dim) = grid_1d(client, len / vs)?;
    // SAFETY: as in `launch_unary`.
    unsafe {
        binary_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            vs,
            input_arg(x.as_ref(), &out),
            input_arg(y.as_ref(), &out),
            out.arg(),
            a,
            b,
            instr,
        );
    }
    Ok(())
}

/// `out[i] = O::from(x[i])`, rounding to nearest even, over `len` elements.
pub fn launch_cast<R: Runtime, I: Float + CubeElement, O: Float + CubeElement>(
    client: &ComputeClient<R>,
    x: &Handle,
    out: &Handle,
    len: usize,
) -> Result<(), LaunchError> {
    if len == 0 {
        return Ok(());
    }
    let x = Buf::new("x", x, len, core::mem::size_of::<I>())?;
    let out = Buf::new("out", out, len, core::mem::size_of::<O>())?;
    let vs = vector_size_for(len, max_vector(client));
    let (count, dim) = grid_1d(client, len / vs)?;
    // SAFETY: as in `launch_unary`.
    unsafe {
        cast_kernel::launch_unchecked::<I, O, R>(client, count, dim, vs, x.arg(), out.arg());
    }
    Ok(())
}

/// `out[i] = value` (converted to `E`) over `len` elements.
pub fn launch_fill<R: Runtime, E: Numeric + CubeElement>(
    client: &ComputeClient<R>,
    out: &Handle,
    len: usize,
    value: f32,
) -> Result<(), LaunchError> {
    if len == 0 {
        return Ok(());
    }
    let out = Buf::new("out", out, len, core::mem::size_of::<E>())?;
    let vs = vector_size_for(len, max_vector(client));
    let (count, dim) = grid_1d(client, len / vs)?;
    // SAFETY: as in `launch_unary`.
    unsafe {
        fill_kernel::launch_unchecked::<E, R>(client, count, dim, vs, out.arg(), value);
    }
    Ok(())
}

/// How [`launch_broadcast`] combines `y` with the broadcast vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Broadcast {
    /// Elements per row of `y`'s view.
    pub inner: usize,
    /// Elements of `v`.
    pub v_len: usize,
    /// One value per row, cycling through `v` (`v[(i / inner) % v_len]`); else one value per
    /// column, `v` holding one row of `inner` values per `repeat` rows of `y`.
    pub per_row: bool,
    /// Per-column mode: rows of `y` that share one row of `v` (`usize::MAX`: all of them).
    pub repeat: usize,
    /// Multiply instead of add.
    pub multiply: bool,
}

/// `y[i] (+|*)= v[...]` over `len` elements of `y`, as `b` says.
pub fn launch_broadcast<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    y: &Handle,
    v: &Handle,
    len: usize,
    b: Broadcast,
) -> Result<(), LaunchError> {
    if len == 0 || b.inner == 0 || b.v_len == 0 {
        return Ok(());
    }
    let bytes = core::mem::size_of::<F>();
    let repeat = b.repeat.clamp(1, len.div_ceil(b.inner));
    let need = if b.per_row {
        b.v_len
    } else {
        extent(
            "v rows * inner",
            &[len.div_ceil(b.inner).div_ceil(repeat), b.inner],
        )?
    };
    // The kernel forms `inner * repeat` itself: it must not wrap there either.
    extent("inner * repeat", &[b.inner, repeat])?;
    let y = Buf::new("y", y, len, bytes)?;
    let v = Buf::new("v", v, need, bytes)?;
    let (count, dim) = grid_1d(client, len)?;
    // SAFETY: y holds `len` and v `need` elements (checked `Buf`s); per-row indices are
    // taken modulo `v_len`, per-column ones stay below `need` (rows / repeat rows of
    // `inner`).
    unsafe {
        broadcast_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            y.arg(),
            v.arg(),
            b.inner,
            repeat,
            b.per_row,
            b.multiply,
        );
    }
    Ok(())
}

/// `out[i] = word` over `len` 32-bit words (zeroing, and fills of packed 16-bit values).
pub fn launch_fill_words<R: Runtime>(
    client: &ComputeClient<R>,
    out: &Handle,
    len: usize,
    word: u32,
) -> Result<(), LaunchError> {
    if len == 0 {
        return Ok(());
    }
    let out = Buf::new("out", out, len, 4)?;
    let vs = vector_size_for(len, max_vector(client));
    let (count, dim) = grid_1d(client, len / vs)?;
    // SAFETY: as in `launch_unary`.
    unsafe {
        fill_words_kernel::launch_unchecked::<R>(client, count, dim, vs, out.arg(), word);
    }
    Ok(())
}

/// `out[i] = x[i]` over `len` 32-bit words (a byte-exact device-to-device copy).
pub fn launch_copy_words<R: Runtime>(
    client: &ComputeClient<R>,
    x: &Handle,
    out: &Handle,
    len: usize,
) -> Result<(), LaunchError> {
    if len == 0 {
        return Ok(());
    }
    let x = Buf::new("x", x, len, 4)?;
    let out = Buf::new("out", out, len, 4)?;
    let vs = vector_size_for(len, max_vector(client));
    let (count, dim) = grid_1d(client, len / vs)?;
    // SAFETY: as in `launch_unary`.
    unsafe {
        copy_kernel::launch_unchecked::<u32, R>(client, count, dim, vs, x.arg(), out.arg());
    }
    Ok(())
}

#[cube(launch_unchecked)]
fn dequant_i8_rows_kernel(q: &Array<u32>, scales: &Array<f32>, out: &mut Array<f32>, cols: usize) {
    let i = ABSOLUTE_POS;
    if i < out.len() {
        let word = q[i / 4];
        let byte = (word >> (8 * (i % 4) as u32)) & 0xFF;
        // Sign-extend the byte.
        let v = i32::cast_from(byte ^ 0x80) - 128;
        out[i] = f32::cast_from(v) * scales[i / cols];
    }
}

/// `out[r, c] = q[r, c] * scales[r]` for an I8 matrix stored as packed bytes (four to a
/// 32-bit word; WGSL has no 8-bit type) of `rows x cols`, into F32.
pub fn launch_dequant_i8_rows<R: Runtime>(
    client: &ComputeClient<R>,
    q: &Handle,
    scales: &Handle,
    out: &Handle,
    (rows, cols): (usize, usize),
) -> Result<(), LaunchError> {
    let len = extent("rows * cols", &[rows, cols])?;
    if len == 0 {
        return Ok(());
    }
    let q = Buf::new("q", q, len.div_ceil(4), 4)?;
    let scales = Buf::new("scales", scales, rows, 4)?;
    let out = Buf::new("out", out, len, 4)?;
    let (count, dim) = grid_1d(client, len)?;
    // SAFETY: q holds ceil(len/4) words, scales `rows` and out `len` values (checked
    // `Buf`s); unit `i < len` reads word `i / 4` and scale `i / cols < rows`.
    unsafe {
        dequant_i8_rows_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            q.arg(),
            scales.arg(),
            out.arg(),
            cols,
        );
    }
    Ok(())
}

/// Word `k` of the packed I8 output holds `x[4k..4k+4] > t` (1 or 0) in its bytes.
#[cube(launch_unchecked)]
fn threshold_bytes_kernel<F: Float>(x: &Array<F>, out: &mut Array<u32>, len: usize, t: f32) {
    let k = ABSOLUTE_POS;
    if k < out.len() {
        let mut word = u32::new(0);
        #[unroll]
        for b in 0..4usize {
            let i = 4 * k + b;
            if i < len && f32::cast_from(x[i]) > t {
                word |= 1u32 << (8 * b as u32);
            }
        }
        out[k] = word;
    }
}

/// `out[i] = (x[i] > t) as i8` over `len` elements, the I8 output stored as packed bytes
/// (one unit per 32-bit word, so no two units write one word).
pub fn launch_threshold_bytes<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    x: &Handle,
    out: &Handle,
    len: usize,
    t: f32,
) -> Result<(), LaunchError> {
    if len == 0 {
        return Ok(());
    }
    let words = len.div_ceil(4);
    let x = Buf::new("x", x, len, core::mem::size_of::<F>())?;
    let out = Buf::new("out", out, words, 4)?;
    let (count, dim) = grid_1d(client, words)?;
    // SAFETY: x holds `len` elements and out `words` words (checked `Buf`s); reads are
    // guarded by `i < len`, writes by `k < words`.
    unsafe {
        threshold_bytes_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            x.arg(),
            out.arg(),
            len,
            t,
        );
    }
    Ok(())
}

/// Every kernel of this file in every specialisation the library can launch, lowered to
/// CUDA C++ (see `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{for_floats, Lowering as L, Rt};
    let c = l.client.clone();
    let a = L::array;
    for vs in L::vector_sizes() {
        for_floats!(|F| {
            for &instr in UnaryInstr::ALL {
                l.lower(unary_kernel::UnaryKernel::<F, Rt>::new(
                    L::settings_1d(),
                    c.clone(),
                    a(),
                    a(),
                    (),
                    (),
                    vs,
                    instr,
                ));
            }
            for &instr in BinaryInstr::ALL {
                l.lower(binary_kernel::BinaryKernel::<F, Rt>::new(
                    L::settings_1d(),
                    c.clone(),
                    a(),
                    a(),
                    a(),
                    (),
                    (),
                    vs,
                    instr,
                ));
            }
            {
                type I = F;
                for_floats!(|O| l.lower(cast_kernel::CastKernel::<I, O, Rt>::new(
                    L::settings_1d(),
                    c.clone(),
                    a(),
                    a(),
                    vs
                )));
            }
            l.lower(fill_kernel::FillKernel::<F, Rt>::new(
                L::settings_1d(),
                c.clone(),
                a(),
                (),
                vs,
            ));
        });
        l.lower(fill_words_kernel::FillWordsKernel::<Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            (),
            vs,
        ));
        l.lower(copy_kernel::CopyKernel::<u32, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            vs,
        ));
    }
    for_floats!(|F| {
        for per_row in [false, true] {
            for multiply in [false, true] {
                l.lower(broadcast_kernel::BroadcastKernel::<F, Rt>::new(
                    L::settings_1d(),
                    c.clone(),
                    a(),
                    a(),
                    (),
                    (),
                    per_row,
                    multiply,
                ));
            }
        }
        l.lower(threshold_bytes_kernel::ThresholdBytesKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            (),
            (),
        ));
    });
    l.lower(dequant_i8_rows_kernel::DequantI8RowsKernel::<Rt>::new(
        L::settings_1d(),
        c.clone(),
        a(),
        a(),
        a(),
        (),
    ));
}
