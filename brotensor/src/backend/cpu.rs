//! The CPU backend: host buffers and the rayon FP32 reference ops of `brotensor-cpu`.

use brotensor_cpu::linear::{self as lin, Mat};
use brotensor_cpu::simd::MulAdd;
use brotensor_cpu::strided;
use brotensor_cpu::{
    activation as act, cast as cpu_cast, elementwise as ew, loss as ls, norm as nm,
    reduction as red,
};
use half::{bf16, f16};
use rayon::prelude::*;

use super::storage::HostBuffer;
use super::{
    ActivationOps, Backend, BatchNormStats, Binary, Broadcast, ElementwiseOps, Gemm, Glu,
    LayerNormCaches, LinearOps, LossIo, LossOps, MemoryInfo, NormOps, OnDevice, ReductionOps,
    SnakeGrads, Src, Storage, Unary,
};
use crate::layout::Layout;
use crate::{Device, Dtype, Error, Result, Tensor};

/// The host backend. It needs no initialization and is always available.
pub(crate) struct CpuBackend;

/// The one CPU backend.
pub(crate) static CPU: CpuBackend = CpuBackend;

fn host(storage: &Storage) -> &HostBuffer {
    match storage {
        Storage::Host(h) => h,
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        Storage::Gpu(_) => unreachable!("a GPU buffer reached the CPU backend"),
    }
}

fn host_mut(storage: &mut Storage) -> &mut HostBuffer {
    match storage {
        Storage::Host(h) => h,
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        Storage::Gpu(_) => unreachable!("a GPU buffer reached the CPU backend"),
    }
}

impl OnDevice for CpuBackend {
    fn device(&self) -> Device {
        Device::Cpu
    }
}

impl Backend for CpuBackend {
    fn describe(&self) -> String {
        format!("cpu (rayon, {} threads)", rayon::current_num_threads())
    }

    fn supports(&self, dtype: Dtype) -> bool {
        dtype == Dtype::F32
    }

    fn converts(&self, dtype: Dtype) -> bool {
        dtype.is_float()
    }

    fn alloc(&self, bytes: usize) -> Result<Storage> {
        Ok(Storage::Host(HostBuffer::new("alloc", bytes)?))
    }

    fn upload(&self, bytes: &[u8]) -> Result<Storage> {
        let mut buf = HostBuffer::new("upload", bytes.len())?;
        cpu_cast::copy(&mut buf.bytes_mut()[..bytes.len()], bytes);
        Ok(Storage::Host(buf))
    }

    fn download(&self, src: &Storage, bytes: usize) -> Result<Vec<u8>> {
        Ok(host(src).bytes()[..bytes].to_vec())
    }

    fn copy(&self, src: &Storage, dst: &mut Storage, bytes: usize) -> Result<()> {
        cpu_cast::copy(
            &mut host_mut(dst).bytes_mut()[..bytes],
            &host(src).bytes()[..bytes],
        );
        Ok(())
    }

    fn strided_copy(
        &self,
        op: &'static str,
        src: &Storage,
        layout: &Layout,
        dtype: Dtype,
        dst: &mut Storage,
    ) -> Result<()> {
        let width = super::gather_width(op, dtype)?;
        let (dims, strides, offset) = (layout.dims(), layout.strides(), layout.offset());
        let (src, dst) = (host(src).bytes(), host_mut(dst).bytes_mut());
        let n = layout.numel();
        let inside = strided::span(dims, strides, offset)
            .is_none_or(|(lo, hi)| lo >= 0 && (hi as usize) < src.len() / width);
        if !inside || dst.len() / width < n {
            return Err(Error::invalid(op, "the layout reaches outside its storage"));
        }
        macro_rules! go {
            ($t:ty) => {
                strided::gather::<$t>(
                    bytemuck::cast_slice(src),
                    dims,
                    strides,
                    offset,
                    &mut bytemuck::cast_slice_mut(dst)[..n],
                )
            };
        }
        match width {
            1 => go!(u8),
            2 => go!(u16),
            4 => go!(u32),
            _ => go!(u64),
        }
        Ok(())
    }

    fn zero(&self, dst: &mut Storage, bytes: usize) -> Result<()> {
        host_mut(dst).bytes_mut()[..bytes]
            .par_chunks_mut(FILL_CHUNK)
            .for_each(|c| c.fill(0));
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn memory_info(&self) -> Result<Option<MemoryInfo>> {
        Ok(None)
    }

    fn trim(&self) -> Result<()> {
        super::host_pool::clear();
        Ok(())
    }
}

/// Bytes per parallel task of host fills.
const FILL_CHUNK: usize = 1 << 18;

/// Runs `$go!(f)` with `f` the scalar math of a unary instruction, one monomorphic map per
/// instruction so the inner loop has no branch on the op; `$go!(fused f)` where `f` also
/// takes the vector path's [`MulAdd`]; `$go!(trig pick, exact)` for sin and cos, which pick
/// from [`ew::sin_cos_with`] where it holds and fall back to `exact`.
macro_rules! with_unary_fn {
    ($op:expr, $a:expr, $b:expr, $go:ident) => {{
        let (a, b) = ($a, $b);
        match $op {
            Unary::Identity => $go!(|x: f32| x),
            Unary::AddScalar => $go!(move |x: f32| x + a),
            Unary::SubScalar => $go!(move |x: f32| x - a),
            Unary::MulScalar => $go!(move |x: f32| x * a),
            Unary::DivScalar => $go!(move |x: f32| x / a),
            Unary::Clamp => $go!(move |x: f32| ew::clamp(x, a, b)),
            Unary::Exp => $go!(fused ew::exp_with),
            Unary::Log => $go!(ew::log),
            Unary::Sin => $go!(trig |(s, _): (f32, f32)| s, ew::sin),
            Unary::Cos => $go!(trig |(_, c): (f32, f32)| c, ew::cos),
            Unary::Rsqrt => $go!(ew::rsqrt),
            Unary::Round => $go!(ew::round),
            Unary::Relu => $go!(act::relu),
            Unary::Tanh => $go!(fused ew::tanh_with),
            Unary::Sigmoid => $go!(fused act::sigmoid_with),
            Unary::Silu => $go!(fused act::silu_with),
            Unary::Gelu => $go!(fused act::gelu_with),
            Unary::GeluExact => $go!(fused act::gelu_exact_with),
            Unary::QuickGelu => $go!(act::quick_gelu),
            Unary::Elu => $go!(move |x: f32| act::elu(x, a)),
            Unary::LeakyRelu => $go!(move |x: f32| act::leaky_relu(x, a)),
        }
    }};
}

/// As [`with_unary_fn`], for binary instructions.
macro_rules! with_binary_fn {
    ($op:expr, $a:expr, $b:expr, $go:ident) => {{
        let (a, b) = ($a, $b);
        match $op {
            Binary::Add => $go!(|x: f32, y: f32| x + y),
            Binary::Sub => $go!(|x: f32, y: f32| x - y),
            Binary::Mul => $go!(|x: f32, y: f32| x * y),
            Binary::Div => $go!(|x: f32, y: f32| x / y),
            Binary::Axpby => $go!(move |x: f32, y: f32| ew::axpby(x, y, a, b)),
            Binary::ExpBackward => $go!(ew::exp_backward),
            Binary::LogBackward => $go!(ew::log_backward),
            Binary::SinBackward => $go!(trig |(_, c): (f32, f32), dy: f32| dy * c, ew::sin_backward),
            Binary::CosBackward => $go!(trig |(s, _): (f32, f32), dy: f32| -dy * s, ew::cos_backward),
            Binary::RsqrtBackward => $go!(ew::rsqrt_backward),
            Binary::ReluBackward => $go!(act::relu_backward),
            Binary::TanhBackward => $go!(act::tanh_backward),
            Binary::SigmoidBackward => $go!(act::sigmoid_backward),
            Binary::SiluBackward => $go!(act::silu_backward),
            Binary::GeluBackward => $go!(fused act::gelu_backward_with),
            Binary::GeluExactBackward => $go!(fused act::gelu_exact_backward_with),
            Binary::QuickGeluBackward => $go!(act::quick_gelu_backward),
            Binary::EluBackward => $go!(move |x: f32, y: f32| act::elu_backward(x, y, a)),
            Binary::LeakyReluBackward => {
                $go!(move |x: f32, y: f32| act::leaky_relu_backward(x, y, a))
            }
        }
    }};
}

impl ElementwiseOps for CpuBackend {
    fn unary(
        &self,
        _name: &'static str,
        op: Unary,
        x: Src<'_>,
        out: &mut Tensor,
        a: f32,
        b: f32,
    ) -> Result<()> {
        // `$f` is called from an `#[inline(always)]` closure rather than handed to the map:
        // a function handed over is called through a generic `Fn::call` shim, which LLVM
        // may leave uninlined for a large body (exact GELU), and then the body runs without
        // the vector path's instruction set, fused multiply-adds as library calls. The
        // closure takes `f` by value (`move`): borrowed, the scalars `f` captured could
        // alias the output for all LLVM knew and were reloaded per element (in-place scale
        // and axpby ran 1.5x slower).
        macro_rules! go {
            (fused $f:expr) => {{
                let f = $f;
                match x {
                    Src::Out => ew::map_unary_inplace(
                        out.host_mut::<f32>(),
                        #[inline(always)]
                        move |m, v| f(m, v),
                    ),
                    Src::Tensor(x) => ew::map_unary(
                        x.host::<f32>(),
                        out.host_mut::<f32>(),
                        #[inline(always)]
                        move |m, v| f(m, v),
                    ),
                }
            }};
            (trig $pick:expr, $exact:expr) => {{
                let (pick, exact) = ($pick, $exact);
                match x {
                    Src::Out => ew::map_unary_fitted_inplace(
                        out.host_mut::<f32>(),
                        #[inline(always)]
                        |v| ew::trig_fits(v),
                        #[inline(always)]
                        move |m, v| pick(ew::sin_cos_with(m, v)),
                        exact,
                    ),
                    Src::Tensor(x) => ew::map_unary_fitted(
                        x.host::<f32>(),
                        out.host_mut::<f32>(),
                        #[inline(always)]
                        |v| ew::trig_fits(v),
                        #[inline(always)]
                        move |m, v| pick(ew::sin_cos_with(m, v)),
                        exact,
                    ),
                }
            }};
            ($f:expr) => {{
                let f = $f;
                go!(fused move |_: MulAdd, v: f32| f(v))
            }};
        }
        with_unary_fn!(op, a, b, go);
        Ok(())
    }

    fn binary(
        &self,
        _name: &'static str,
        op: Binary,
        x: Src<'_>,
        y: Src<'_>,
        out: &mut Tensor,
        a: f32,
        b: f32,
    ) -> Result<()> {
        // As in `unary`: `$f` is called from `#[inline(always)]` closures. `trig` (the sin
        // and cos gradients) takes the fast sine and cosine where they hold for two input
        // tensors; an operand written in place takes `exact` throughout.
        macro_rules! go {
            (trig $pick:expr, $exact:expr) => {{
                let (pick, exact) = ($pick, $exact);
                match (x, y) {
                    (Src::Tensor(x), Src::Tensor(y)) => ew::map_binary_fitted(
                        x.host::<f32>(),
                        y.host::<f32>(),
                        out.host_mut::<f32>(),
                        #[inline(always)]
                        |v| ew::trig_fits(v),
                        #[inline(always)]
                        move |m, v, dy| pick(ew::sin_cos_with(m, v), dy),
                        exact,
                    ),
                    _ => go!(exact),
                }
            }};
            (fused $f:expr) => {{
                let f = $f;
                match (x, y) {
                    (Src::Tensor(x), Src::Tensor(y)) => ew::map_binary(
                        x.host::<f32>(),
                        y.host::<f32>(),
                        out.host_mut::<f32>(),
                        #[inline(always)]
                        move |m, a, b| f(m, a, b),
                    ),
                    (Src::Out, Src::Tensor(y)) => ew::map_binary_inplace(
                        out.host_mut::<f32>(),
                        y.host(),
                        #[inline(always)]
                        move |m, o, b| f(m, o, b),
                    ),
                    (Src::Tensor(x), Src::Out) => ew::map_binary_inplace(
                        out.host_mut::<f32>(),
                        x.host(),
                        #[inline(always)]
                        move |m, o, x| f(m, x, o),
                    ),
                    (Src::Out, Src::Out) => ew::map_unary_inplace(
                        out.host_mut::<f32>(),
                        #[inline(always)]
                        move |m, o| f(m, o, o),
                    ),
                }
            }};
            ($f:expr) => {{
                let f = $f;
                go!(fused move |_: MulAdd, x: f32, y: f32| f(x, y))
            }};
        }
        with_binary_fn!(op, a, b, go);
        Ok(())
    }

    fn cast(&self, x: &Tensor, out: &mut Tensor) -> Result<()> {
        macro_rules! convert {
            ($i:ty) => {
                match out.dtype() {
                    Dtype::F32 => cpu_cast::convert(x.host::<$i>(), out.host_mut::<f32>()),
                    Dtype::F16 => cpu_cast::convert(x.host::<$i>(), out.host_mut::<f16>()),
                    Dtype::BF16 => cpu_cast::convert(x.host::<$i>(), out.host_mut::<bf16>()),
                    other => return Err(cast_error(other)),
                }
            };
        }
        match x.dtype() {
            Dtype::F32 => convert!(f32),
            Dtype::F16 => convert!(f16),
            Dtype::BF16 => convert!(bf16),
            other => return Err(cast_error(other)),
        }
        Ok(())
    }

    fn fill(&self, out: &mut Tensor, value: f32) -> Result<()> {
        ew::fill(out.host_mut::<f32>(), value);
        Ok(())
    }

    fn threshold_u8(&self, x: &Tensor, t: f32, out: &mut Tensor) -> Result<()> {
        let o = out.host_mut::<i8>();
        match x.dtype() {
            Dtype::F16 => o
                .iter_mut()
                .zip(x.host::<f16>())
                .for_each(|(o, v)| *o = i8::from(v.to_f32() > t)),
            _ => o
                .iter_mut()
                .zip(x.host::<f32>())
                .for_each(|(o, &v)| *o = i8::from(v > t)),
        }
        Ok(())
    }

    fn dequant_i8_rows(&self, q: &Tensor, scales: &Tensor, out: &mut Tensor) -> Result<()> {
        let cols = q.cols().max(1);
        let s = scales.host::<f32>();
        out.host_mut::<f32>()
            .par_chunks_mut(cols)
            .zip(q.host::<i8>().par_chunks(cols))
            .zip(s.par_iter())
            .for_each(|((o, q), &sc)| o.iter_mut().zip(q).for_each(|(o, &v)| *o = v as f32 * sc));
        Ok(())
    }

    fn broadcast(
        &self,
        _name: &'static str,
        y: &mut Tensor,
        v: &Tensor,
        b: Broadcast,
    ) -> Result<()> {
        let v = v.host::<f32>();
        let inner = b.inner.max(1);
        let combine = |x: &mut f32, w: f32| {
            if b.multiply {
                *x *= w
            } else {
                *x += w
            }
        };
        y.host_mut::<f32>()
            .par_chunks_mut(inner)
            .enumerate()
            .for_each(|(r, row)| {
                if b.per_row {
                    let w = v[r % b.v_len];
                    row.iter_mut().for_each(|x| combine(x, w));
                } else {
                    let at = r / b.repeat.max(1) * inner;
                    row.iter_mut()
                        .zip(&v[at..at + inner])
                        .for_each(|(x, &w)| combine(x, w));
                }
            });
        Ok(())
    }
}

fn cast_error(dtype: Dtype) -> Error {
    Error::UnsupportedDtype {
        op: "cast",
        dtype,
        device: Device::Cpu,
    }
}

impl ActivationOps for CpuBackend {
    fn glu_forward(&self, _name: &'static str, op: Glu, x: &Tensor, y: &mut Tensor) -> Result<()> {
        let d = y.cols();
        act::glu_forward(op, x.host(), d, y.host_mut());
        Ok(())
    }

    fn glu_backward(
        &self,
        _name: &'static str,
        op: Glu,
        x: &Tensor,
        dy: &Tensor,
        dx: &mut Tensor,
    ) -> Result<()> {
        let d = dy.cols();
        act::glu_backward(op, x.host(), dy.host(), d, dx.host_mut());
        Ok(())
    }

    fn snake_forward(
        &self,
        _name: &'static str,
        x: &Tensor,
        alpha: &Tensor,
        d: &Tensor,
        l: usize,
        y: &mut Tensor,
    ) -> Result<()> {
        act::snake_forward(x.host(), alpha.host(), d.host(), l, y.host_mut());
        Ok(())
    }

    fn snake_backward(
        &self,
        _name: &'static str,
        x: &Tensor,
        alpha: &Tensor,
        d: &Tensor,
        dy: &Tensor,
        l: usize,
        g: SnakeGrads<'_>,
    ) -> Result<()> {
        act::snake_backward(
            x.host(),
            alpha.host(),
            d.host(),
            dy.host(),
            l,
            g.dx.host_mut(),
            g.ga.host_mut(),
            g.gb.host_mut(),
        );
        Ok(())
    }
}

impl ReductionOps for CpuBackend {
    fn sum_rows(&self, x: &Tensor, y: &mut Tensor) -> Result<()> {
        // The split comes from `y`: callers may sum a reshaped view.
        red::sum_rows(x.host(), x.numel() / y.numel().max(1), y.host_mut());
        Ok(())
    }

    fn sum_cols(&self, x: &Tensor, y: &mut Tensor) -> Result<()> {
        red::sum_cols(x.host(), x.numel() / y.numel().max(1), y.host_mut());
        Ok(())
    }

    fn argmax_rows(&self, x: &Tensor, idx: &mut Tensor) -> Result<()> {
        let mut at = vec![0usize; x.rows()];
        red::argmax_rows(x.host(), x.cols(), &mut at);
        match idx.dtype() {
            Dtype::I32 => idx
                .host_mut::<i32>()
                .iter_mut()
                .zip(&at)
                .for_each(|(o, &i)| *o = i as i32),
            _ => idx
                .host_mut::<f32>()
                .iter_mut()
                .zip(&at)
                .for_each(|(o, &i)| *o = i as f32),
        }
        Ok(())
    }

    fn top_k_rows(&self, x: &Tensor, k: usize, vals: &mut Tensor, idx: &mut Tensor) -> Result<()> {
        red::top_k_rows(x.host(), x.cols(), k, vals.host_mut(), idx.host_mut());
        Ok(())
    }

    fn rows_count_above(&self, x: &Tensor, lo: f32, hi: f32, counts: &mut Tensor) -> Result<()> {
        let wide;
        let values: &[f32] = match x.dtype() {
            Dtype::F16 => {
                wide = x
                    .host::<f16>()
                    .iter()
                    .map(|v| v.to_f32())
                    .collect::<Vec<_>>();
                &wide
            }
            _ => x.host(),
        };
        red::rows_count_above(values, x.cols(), lo, hi, counts.host_mut());
        Ok(())
    }
}

/// The epilogue activation of a [`Gemm`] on one value.
fn epilogue_act(act: u32, v: f32) -> f32 {
    match act {
        1 => act::relu(v),
        2 => act::gelu(v),
        3 => act::gelu_exact(v),
        4 => act::silu(v),
        5 => act::quick_gelu(v),
        _ => v,
    }
}

/// Rows of `d` from `at` as a stored `rows x cols` matrix, read transposed when `trans`.
fn view(d: &[f32], at: usize, (rows, cols): (usize, usize), trans: bool) -> Mat<'_> {
    let m = Mat::new(&d[at..at + rows * cols], rows, cols);
    if trans {
        m.t()
    } else {
        m
    }
}

impl LinearOps for CpuBackend {
    fn gemm(
        &self,
        _name: &'static str,
        a: &Tensor,
        b: &Tensor,
        bias: Option<&Tensor>,
        c: &mut Tensor,
        g: Gemm,
    ) -> Result<()> {
        let (m, n, k) = (g.m, g.n, g.k);
        let stored =
            |trans: bool, rows: usize, cols: usize| if trans { (cols, rows) } else { (rows, cols) };
        let (a_shape, b_shape) = (stored(g.trans_a, m, k), stored(g.trans_b, k, n));
        let (ad, bd) = (a.host::<f32>(), b.host::<f32>());
        let bias = bias.map(|t| t.host::<f32>());
        let cd = c.host_mut::<f32>();
        for z in 0..g.batch {
            let out = &mut cd[z * g.strides.2..z * g.strides.2 + m * n];
            lin::matmul(
                view(ad, z * g.strides.0, a_shape, g.trans_a),
                view(bd, z * g.strides.1, b_shape, g.trans_b),
                out,
                g.accumulate,
            );
            if let Some(b) = bias {
                lin::add_row_bias(out, b);
            }
            if g.act != 0 {
                out.iter_mut().for_each(|v| *v = epilogue_act(g.act, *v));
            }
        }
        Ok(())
    }
}

impl NormOps for CpuBackend {
    fn softmax(
        &self,
        x: Src<'_>,
        mask: Option<&Tensor>,
        out: &mut Tensor,
        cols: usize,
    ) -> Result<()> {
        let mask = mask.map(|m| m.host::<f32>());
        match x {
            Src::Tensor(x) => nm::softmax_rows(x.host(), cols, mask, out.host_mut()),
            Src::Out => {
                let x = out.host::<f32>().to_vec();
                nm::softmax_rows(&x, cols, mask, out.host_mut());
            }
        }
        Ok(())
    }

    fn softmax_backward(
        &self,
        p: &Tensor,
        dp: &Tensor,
        dl: &mut Tensor,
        cols: usize,
    ) -> Result<()> {
        nm::softmax_rows_backward(p.host(), dp.host(), cols, dl.host_mut());
        Ok(())
    }

    fn batch_norm_train(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        beta: &Tensor,
        n_hw: (usize, usize),
        eps_momentum: (f32, f32),
        stats: BatchNormStats<'_>,
        y: &mut Tensor,
    ) -> Result<()> {
        let s = nm::BatchNormStats {
            running_mean: stats.running_mean.host_mut(),
            running_var: stats.running_var.host_mut(),
            saved_mean: stats.saved_mean.host_mut(),
            saved_rstd: stats.saved_rstd.host_mut(),
        };
        let (x, g, b) = (x.host(), gamma.host(), beta.host());
        nm::batch_norm_train(x, g, b, n_hw, eps_momentum, s, y.host_mut());
        Ok(())
    }

    fn batch_norm_inference(
        &self,
        x: &Tensor,
        (gamma, beta, mean, var): (&Tensor, &Tensor, &Tensor, &Tensor),
        hw: usize,
        eps: f32,
        y: &mut Tensor,
    ) -> Result<()> {
        let affine = (gamma.host(), beta.host());
        let running = (mean.host(), var.host());
        nm::batch_norm_inference(x.host(), affine, running, hw, eps, y.host_mut());
        Ok(())
    }

    fn batch_norm_backward(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        (mean, rstd): (&Tensor, &Tensor),
        dy: &Tensor,
        n_hw: (usize, usize),
        dx: &mut Tensor,
        dgamma: &mut Tensor,
        dbeta: &mut Tensor,
    ) -> Result<()> {
        nm::batch_norm_backward(
            x.host(),
            gamma.host(),
            (mean.host(), rstd.host()),
            dy.host(),
            n_hw,
            dx.host_mut(),
            dgamma.host_mut(),
            dbeta.host_mut(),
        );
        Ok(())
    }

    fn group_norm(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        beta: &Tensor,
        groups_hw: (usize, usize),
        eps: f32,
        y: &mut Tensor,
    ) -> Result<()> {
        let (x, g, b) = (x.host(), gamma.host(), beta.host());
        nm::group_norm_rows(x, g, b, groups_hw, eps, y.host_mut());
        Ok(())
    }

    fn group_norm_backward(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        dy: &Tensor,
        groups_hw: (usize, usize),
        eps: f32,
        dx: &mut Tensor,
        (part_g, part_b): (&mut Tensor, &mut Tensor),
    ) -> Result<()> {
        let (x, g, dy) = (x.host(), gamma.host(), dy.host());
        let parts = (part_g.host_mut(), part_b.host_mut());
        nm::group_norm_rows_backward(x, g, dy, groups_hw, eps, dx.host_mut(), parts);
        Ok(())
    }

    fn layernorm(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        beta: &Tensor,
        eps: f32,
        y: &mut Tensor,
        caches: Option<LayerNormCaches<'_>>,
    ) -> Result<()> {
        let (xhat, mean, rstd) = match caches {
            Some(c) => (
                Some(c.xhat.host_mut()),
                Some(c.mean.host_mut()),
                Some(c.rstd.host_mut()),
            ),
            None => (None, None, None),
        };
        nm::layernorm_rows(
            x.host(),
            gamma.host(),
            beta.host(),
            eps,
            y.host_mut(),
            xhat,
            mean,
            rstd,
        );
        Ok(())
    }

    fn layernorm_backward(
        &self,
        dy: &Tensor,
        xhat: &Tensor,
        gamma: &Tensor,
        rstd: &Tensor,
        dx: &mut Tensor,
        dgamma: &mut Tensor,
        dbeta: &mut Tensor,
    ) -> Result<()> {
        nm::layernorm_rows_backward(
            dy.host(),
            xhat.host(),
            gamma.host(),
            rstd.host(),
            dx.host_mut(),
            dgamma.host_mut(),
            dbeta.host_mut(),
        );
        Ok(())
    }

    fn rms_norm(&self, x: &Tensor, gamma: &Tensor, eps: f32, y: &mut Tensor) -> Result<()> {
        nm::rms_norm_rows(x.host(), gamma.host(), eps, y.host_mut());
        Ok(())
    }

    fn rms_norm_backward(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        dy: &Tensor,
        eps: f32,
        dx: &mut Tensor,
        dgamma: Option<&mut Tensor>,
    ) -> Result<()> {
        nm::rms_norm_rows_backward(
            x.host(),
            gamma.host(),
            dy.host(),
            eps,
            dx.host_mut(),
            dgamma.map(|d| d.host_mut()),
        );
        Ok(())
    }
}

impl LossOps for CpuBackend {
    fn xent(&self, io: LossIo<'_>, offsets: &[usize]) -> Result<()> {
        let cols = io.logits.cols();
        let heads = offsets.len().saturating_sub(1);
        let mut per_head = vec![0.0f32; io.logits.rows() * heads];
        // Per head, so the (rows, heads) losses come out separately.
        for h in 0..heads {
            let mut one = vec![0.0f32; io.logits.rows()];
            ls::xent_batched(
                io.logits.host(),
                io.target.host(),
                io.mask.map(|m| m.host::<f32>()),
                cols,
                &offsets[h..h + 2],
                io.probs.host_mut(),
                io.dlogits.host_mut(),
                &mut one,
            );
            for (r, v) in one.into_iter().enumerate() {
                per_head[r * heads + h] = v;
            }
        }
        io.loss.host_mut::<f32>().copy_from_slice(&per_head);
        Ok(())
    }

    fn bce(&self, io: LossIo<'_>, pos_weight: f32) -> Result<()> {
        ls::bce_with_logits(
            io.logits.host(),
            io.target.host(),
            io.mask.map(|m| m.host::<f32>()),
            io.logits.cols(),
            pos_weight,
            io.probs.host_mut(),
            io.dlogits.host_mut(),
            io.loss.host_mut(),
        );
        Ok(())
    }

    fn squared_error_sum(&self, pred: &Tensor, target: &Tensor) -> Result<f64> {
        Ok(ls::squared_error_sum(pred.host(), target.host()))
    }
}
