//! The GPU backend: one implementation, generic over the CubeCL runtime (CUDA or wgpu).

use brotensor_kernels::bf16_words as w;
use brotensor_kernels::elementwise::{self as k, Source};
use brotensor_kernels::glu as gl;
use brotensor_kernels::loss::{self as lk, LossBuffers};
use brotensor_kernels::matmul::{self as mm, GemmSpec};
use brotensor_kernels::reduce as rd;
use brotensor_kernels::rows::{self as rw, LayerNormBuffers};
use brotensor_kernels::LaunchError;
use cubecl::prelude::*;
use cubecl::server::Handle;
use cubecl::stream_id::StreamId;
use half::{bf16, f16};

use super::storage::GpuBuffer;
use super::{
    ActivationOps, Backend, BatchNormStats, Binary, Broadcast, ElementwiseOps, Gemm, Glu,
    LayerNormCaches, LinearOps, LossIo, LossOps, MemoryInfo, NormOps, OnDevice, ReductionOps,
    SnakeGrads, Src, Storage, Unary,
};
use crate::layout::Layout;
use crate::{Device, Dtype, Error, Result, Tensor};

/// GPU buffers are sized in multiples of this many bytes (at least one), so that word-wise
/// copies and zero fills may touch the padded tail.
const GPU_ALIGN: usize = 16;

/// A CubeCL client for one device, plus what was learned about it at start-up.
pub(crate) struct CubeBackend<R: Runtime> {
    device: Device,
    client: ComputeClient<R>,
    description: String,
    software: bool,
    f16: bool,
    /// Native bf16 arithmetic; without it BF16 runs as packed words (`bf16_words`).
    bf16: bool,
    /// The CubeCL streams that threads have queued work on. CubeCL 0.10 gives each OS thread
    /// its own stream (with its own memory pool): syncing, trimming and memory figures visit
    /// every one of them, so they mean the whole device.
    streams: std::sync::Mutex<std::collections::BTreeSet<StreamId>>,
}

impl<R: Runtime> CubeBackend<R> {
    /// Wraps a client. `description` says what is underneath (API, adapter or card name).
    pub(crate) fn new(
        device: Device,
        client: ComputeClient<R>,
        description: String,
        software: bool,
    ) -> Self {
        let props = client.properties();
        let f16 = props.supports_type(f16::as_type_native_unchecked());
        let bf16 = props.supports_type(bf16::as_type_native_unchecked());
        CubeBackend {
            device,
            client,
            description,
            software,
            f16,
            bf16,
            streams: Default::default(),
        }
    }

    /// Runs `f` on every stream a thread has used on this device (the caller's own
    /// included), in stream order, stopping at the first error.
    fn on_every_stream<T>(&self, f: impl Fn() -> Result<T>) -> Result<Vec<T>> {
        self.note_thread();
        let ids: Vec<StreamId> = self
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        ids.into_iter().map(|id| id.executes(&f)).collect()
    }

    fn gpu_error(&self, op: &'static str, reason: impl std::fmt::Display) -> Error {
        Error::Gpu {
            op,
            device: self.device,
            reason: reason.to_string(),
        }
    }

    /// The padded size of a buffer for `bytes` bytes, refused before it reaches the runtime
    /// when the device cannot bind a buffer that large (the runtime would fail on its own
    /// thread and leave the device unusable).
    fn capacity_for(&self, bytes: usize) -> Result<usize> {
        let max = self.max_buffer_bytes();
        let capacity = bytes.div_ceil(GPU_ALIGN).max(1).saturating_mul(GPU_ALIGN);
        if capacity as u64 > max {
            return Err(Error::invalid(
                "alloc",
                format!(
                    "{bytes} bytes exceed the largest buffer {} can bind ({max} bytes)",
                    self.device
                ),
            ));
        }
        Ok(capacity)
    }

    fn launch_error(&self, op: &'static str, e: LaunchError) -> Error {
        self.gpu_error(op, e)
    }
}

fn gpu(storage: &Storage) -> &Handle {
    match storage {
        Storage::Gpu(g) => &g.handle,
        Storage::Host(_) => unreachable!("a host buffer reached a GPU backend"),
    }
}

fn out_handle(t: &Tensor) -> Handle {
    gpu(t
        .storage()
        .expect("ops commit their output before the backend runs"))
    .clone()
}

fn src_handle(src: Src<'_>) -> Option<Handle> {
    match src {
        Src::Tensor(t) => Some(out_handle(t)),
        Src::Out => None,
    }
}

fn source(h: &Option<Handle>) -> Source<'_> {
    match h {
        Some(h) => Source::Buffer(h),
        None => Source::Output,
    }
}

impl<R: Runtime> OnDevice for CubeBackend<R> {
    fn device(&self) -> Device {
        self.device
    }
}

impl<R: Runtime> Backend for CubeBackend<R> {
    fn describe(&self) -> String {
        format!("{} ({})", self.device, self.description)
    }

    fn is_software(&self) -> bool {
        self.software
    }

    fn matmul_on_matrix_units(&self, dtype: Dtype) -> bool {
        // BF16 stored as packed words multiplies through FP32 copies, never on matrix units.
        self.supports(dtype)
            && !self.words(dtype)
            && match dtype {
                Dtype::F16 => mm::matrix_unit_shape::<R, f16>(&self.client).is_some(),
                Dtype::BF16 => mm::matrix_unit_shape::<R, bf16>(&self.client).is_some(),
                _ => false,
            }
    }

    fn supports(&self, dtype: Dtype) -> bool {
        match dtype {
            Dtype::F32 => true,
            Dtype::F16 => self.f16,
            // Natively, or as packed 16-bit words widened in the kernels.
            Dtype::BF16 => true,
            _ => false,
        }
    }

    fn max_buffer_bytes(&self) -> u64 {
        self.client.properties().memory.max_page_size
    }

    fn alloc(&self, bytes: usize) -> Result<Storage> {
        let capacity = self.capacity_for(bytes)?;
        Ok(Storage::Gpu(GpuBuffer {
            handle: self.client.empty(capacity),
            capacity,
        }))
    }

    fn upload(&self, bytes: &[u8]) -> Result<Storage> {
        let capacity = self.capacity_for(bytes.len())?;
        let handle = if capacity == bytes.len() {
            self.client.create_from_slice(bytes)
        } else {
            let mut padded = vec![0u8; capacity];
            padded[..bytes.len()].copy_from_slice(bytes);
            self.client.create_from_slice(&padded)
        };
        Ok(Storage::Gpu(GpuBuffer { handle, capacity }))
    }

    fn download(&self, src: &Storage, bytes: usize) -> Result<Vec<u8>> {
        let data = self
            .client
            .read_one(gpu(src).clone())
            .map_err(|e| self.gpu_error("download", format!("{e:?}")))?;
        Ok(data[..bytes].to_vec())
    }

    fn copy(&self, src: &Storage, dst: &mut Storage, bytes: usize) -> Result<()> {
        let words = bytes.div_ceil(4);
        k::launch_copy_words(&self.client, gpu(src), gpu(dst), words)
            .map_err(|e| self.launch_error("copy", e))
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
        let (mut dims, mut strides) = (layout.dims().to_vec(), layout.strides().to_vec());
        let mut offset = layout.offset();
        // 64-bit elements move as pairs of 32-bit words: one more dim, in words.
        if width == 8 {
            let too_large = || Error::invalid(op, "the layout's word indices overflow");
            for s in strides.iter_mut() {
                *s = s.checked_mul(2).ok_or_else(too_large)?;
            }
            dims.push(2);
            strides.push(1);
            offset = offset.checked_mul(2).ok_or_else(too_large)?;
        }
        let gather = brotensor_kernels::strided::GatherLayout {
            dims: &dims,
            strides: &strides,
            offset,
        };
        brotensor_kernels::strided::launch_strided_gather(
            &self.client,
            gpu(src),
            gather,
            width.min(4),
            gpu(dst),
        )
        .map_err(|e| self.launch_error(op, e))
    }

    fn zero(&self, dst: &mut Storage, bytes: usize) -> Result<()> {
        let words = bytes.div_ceil(4);
        k::launch_fill_words(&self.client, gpu(dst), words, 0)
            .map_err(|e| self.launch_error("zero", e))
    }

    fn note_thread(&self) {
        // Every op looks its backend up: take the lock only on a thread's first use of this
        // device, not on every op.
        thread_local! {
            static NOTED: std::cell::RefCell<Vec<Device>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let first = NOTED.with(|noted| {
            let mut noted = noted.borrow_mut();
            let first = !noted.contains(&self.device);
            if first {
                noted.push(self.device);
            }
            first
        });
        if first {
            let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
            streams.insert(StreamId::current());
        }
    }

    fn sync(&self) -> Result<()> {
        self.on_every_stream(|| {
            cubecl::future::block_on(self.client.sync())
                .map_err(|e| self.gpu_error("sync", format!("{e:?}")))
        })?;
        Ok(())
    }

    fn memory_info(&self) -> Result<Option<MemoryInfo>> {
        let usages = self.on_every_stream(|| {
            self.client
                .memory_usage()
                .map_err(|e| self.gpu_error("memory_info", format!("{e:?}")))
        })?;
        Ok(Some(usages.iter().fold(
            MemoryInfo {
                in_use: 0,
                reserved: 0,
            },
            |sum, u| MemoryInfo {
                in_use: sum.in_use + u.bytes_in_use,
                reserved: sum.reserved + u.bytes_reserved,
            },
        )))
    }

    fn trim(&self) -> Result<()> {
        self.sync()?;
        self.on_every_stream(|| {
            self.client.memory_cleanup();
            Ok(())
        })?;
        Ok(())
    }
}

/// Calls `$body` with `$F` bound to the storage type of a float dtype.
macro_rules! with_float {
    ($dtype:expr, |$F:ident| $body:expr) => {
        match $dtype {
            Dtype::F32 => {
                type $F = f32;
                $body
            }
            Dtype::F16 => {
                type $F = f16;
                $body
            }
            Dtype::BF16 => {
                type $F = bf16;
                $body
            }
            other => unreachable!("non-float dtype {other:?} reached a float kernel"),
        }
    };
}

/// Calls `$body` with `$O` bound to the kernel instruction of a [`Unary`].
macro_rules! with_unary {
    ($op:expr, |$O:ident| $body:expr) => {
        match $op {
            Unary::Identity => {
                type $O = k::Identity;
                $body
            }
            Unary::AddScalar => {
                type $O = k::AddScalar;
                $body
            }
            Unary::SubScalar => {
                type $O = k::SubScalar;
                $body
            }
            Unary::MulScalar => {
                type $O = k::MulScalar;
                $body
            }
            Unary::DivScalar => {
                type $O = k::DivScalar;
                $body
            }
            Unary::Clamp => {
                type $O = k::Clamp;
                $body
            }
            Unary::Exp => {
                type $O = k::Exp;
                $body
            }
            Unary::Log => {
                type $O = k::Log;
                $body
            }
            Unary::Sin => {
                type $O = k::Sin;
                $body
            }
            Unary::Cos => {
                type $O = k::Cos;
                $body
            }
            Unary::Rsqrt => {
                type $O = k::Rsqrt;
                $body
            }
            Unary::Round => {
                type $O = k::Round;
                $body
            }
            Unary::Relu => {
                type $O = k::Relu;
                $body
            }
            Unary::Tanh => {
                type $O = k::Tanh;
                $body
            }
            Unary::Sigmoid => {
                type $O = k::Sigmoid;
                $body
            }
            Unary::Silu => {
                type $O = k::Silu;
                $body
            }
            Unary::Gelu => {
                type $O = k::Gelu;
                $body
            }
            Unary::GeluExact => {
                type $O = k::GeluExact;
                $body
            }
            Unary::QuickGelu => {
                type $O = k::QuickGelu;
                $body
            }
            Unary::Elu => {
                type $O = k::Elu;
                $body
            }
            Unary::LeakyRelu => {
                type $O = k::LeakyRelu;
                $body
            }
        }
    };
}

/// Calls `$body` with `$O` bound to the kernel instruction of a [`Binary`].
macro_rules! with_binary {
    ($op:expr, |$O:ident| $body:expr) => {
        match $op {
            Binary::Add => {
                type $O = k::Add;
                $body
            }
            Binary::Sub => {
                type $O = k::Sub;
                $body
            }
            Binary::Mul => {
                type $O = k::Mul;
                $body
            }
            Binary::Div => {
                type $O = k::Div;
                $body
            }
            Binary::Axpby => {
                type $O = k::Axpby;
                $body
            }
            Binary::ExpBackward => {
                type $O = k::ExpBackward;
                $body
            }
            Binary::LogBackward => {
                type $O = k::LogBackward;
                $body
            }
            Binary::SinBackward => {
                type $O = k::SinBackward;
                $body
            }
            Binary::CosBackward => {
                type $O = k::CosBackward;
                $body
            }
            Binary::RsqrtBackward => {
                type $O = k::RsqrtBackward;
                $body
            }
            Binary::ReluBackward => {
                type $O = k::ReluBackward;
                $body
            }
            Binary::TanhBackward => {
                type $O = k::TanhBackward;
                $body
            }
            Binary::SigmoidBackward => {
                type $O = k::SigmoidBackward;
                $body
            }
            Binary::SiluBackward => {
                type $O = k::SiluBackward;
                $body
            }
            Binary::GeluBackward => {
                type $O = k::GeluBackward;
                $body
            }
            Binary::GeluExactBackward => {
                type $O = k::GeluExactBackward;
                $body
            }
            Binary::QuickGeluBackward => {
                type $O = k::QuickGeluBackward;
                $body
            }
            Binary::EluBackward => {
                type $O = k::EluBackward;
                $body
            }
            Binary::LeakyReluBackward => {
                type $O = k::LeakyReluBackward;
                $body
            }
        }
    };
}

impl<R: Runtime> CubeBackend<R> {
    /// Whether `dtype` runs as packed bf16 words on this device.
    fn words(&self, dtype: Dtype) -> bool {
        dtype == Dtype::BF16 && !self.bf16
    }

    /// An F32 copy of `t` on this device: the way kernels without a packed-word form run on
    /// BF16 tensors stored as words (FP32 math either way).
    fn widened(&self, t: &Tensor) -> Result<Tensor> {
        let mut w = Tensor::empty_on(self.device, t.rows(), t.cols(), Dtype::F32)?;
        self.cast(t, &mut w)?;
        Ok(w)
    }

    /// Runs `f` on F32 copies of `inputs` writing an F32 `out`-shaped temporary, then
    /// narrows the temporary into `out` (for packed-word BF16).
    fn via_f32(
        &self,
        inputs: &[&Tensor],
        out: &mut Tensor,
        f: impl FnOnce(&[Tensor], &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        let wide = inputs
            .iter()
            .map(|t| self.widened(t))
            .collect::<Result<Vec<_>>>()?;
        let mut tmp = Tensor::empty_on(self.device, out.rows(), out.cols(), Dtype::F32)?;
        f(&wide, &mut tmp)?;
        self.cast(&tmp, out)
    }
}

/// Calls `$body` with `$O` bound to the kernel type of a [`Glu`].
macro_rules! with_glu {
    ($op:expr, |$O:ident| $body:expr) => {
        match $op {
            Glu::Geglu => {
                type $O = brotensor_kernels::glu::Geglu;
                $body
            }
            Glu::GegluExact => {
                type $O = brotensor_kernels::glu::GegluExact;
                $body
            }
            Glu::Swiglu => {
                type $O = brotensor_kernels::glu::Swiglu;
                $body
            }
        }
    };
}

impl<R: Runtime> ElementwiseOps for CubeBackend<R> {
    fn unary(
        &self,
        name: &'static str,
        op: Unary,
        x: Src<'_>,
        out: &mut Tensor,
        a: f32,
        b: f32,
    ) -> Result<()> {
        let xh = src_handle(x);
        let oh = out_handle(out);
        let (c, len, x) = (&self.client, out.numel(), source(&xh));
        let words = self.words(out.dtype());
        with_unary!(op, |O| if words {
            w::launch_unary_words::<R, O>(c, x, &oh, len, a, b)
        } else {
            with_float!(out.dtype(), |F| k::launch_unary::<R, F, O>(
                c, x, &oh, len, a, b
            ))
        })
        .map_err(|e| self.launch_error(name, e))
    }

    fn binary(
        &self,
        name: &'static str,
        op: Binary,
        x: Src<'_>,
        y: Src<'_>,
        out: &mut Tensor,
        a: f32,
        b: f32,
    ) -> Result<()> {
        let (xh, yh) = (src_handle(x), src_handle(y));
        let oh = out_handle(out);
        let (c, len, x, y) = (&self.client, out.numel(), source(&xh), source(&yh));
        let words = self.words(out.dtype());
        with_binary!(op, |O| if words {
            w::launch_binary_words::<R, O>(c, x, y, &oh, len, a, b)
        } else {
            with_float!(out.dtype(), |F| k::launch_binary::<R, F, O>(
                c, x, y, &oh, len, a, b
            ))
        })
        .map_err(|e| self.launch_error(name, e))
    }

    fn cast(&self, x: &Tensor, out: &mut Tensor) -> Result<()> {
        let xh = out_handle(x);
        let oh = out_handle(out);
        let (c, len) = (&self.client, out.numel());
        match (self.words(x.dtype()), self.words(out.dtype())) {
            (false, false) => with_float!(x.dtype(), |I| with_float!(out.dtype(), |O| {
                k::launch_cast::<R, I, O>(c, &xh, &oh, len)
            })),
            (true, false) => with_float!(out.dtype(), |O| {
                w::launch_words_to_float::<R, O>(c, &xh, &oh, len)
            }),
            (false, true) => with_float!(x.dtype(), |I| {
                w::launch_float_to_words::<R, I>(c, &xh, &oh, len)
            }),
            (true, true) => unreachable!("a same-dtype cast is a copy"),
        }
        .map_err(|e| self.launch_error("cast", e))
    }

    fn fill(&self, out: &mut Tensor, value: f32) -> Result<()> {
        let oh = out_handle(out);
        let len = out.numel();
        if self.words(out.dtype()) {
            let bits = u32::from(bf16::from_f32(value).to_bits());
            return k::launch_fill_words(&self.client, &oh, w::words_for(len), bits | bits << 16)
                .map_err(|e| self.launch_error("fill", e));
        }
        with_float!(out.dtype(), |F| k::launch_fill::<R, F>(
            &self.client,
            &oh,
            len,
            value
        ))
        .map_err(|e| self.launch_error("fill", e))
    }

    fn threshold_u8(&self, x: &Tensor, t: f32, out: &mut Tensor) -> Result<()> {
        let (xh, oh) = (out_handle(x), out_handle(out));
        let len = x.numel();
        with_float!(x.dtype(), |F| k::launch_threshold_bytes::<R, F>(
            &self.client,
            &xh,
            &oh,
            len,
            t
        ))
        .map_err(|e| self.launch_error("threshold_u8", e))
    }

    fn dequant_i8_rows(&self, q: &Tensor, scales: &Tensor, out: &mut Tensor) -> Result<()> {
        let (qh, sh, oh) = (out_handle(q), out_handle(scales), out_handle(out));
        k::launch_dequant_i8_rows(&self.client, &qh, &sh, &oh, q.shape())
            .map_err(|e| self.launch_error("linear_forward_batched_int8w_fp16", e))
    }

    fn broadcast(
        &self,
        name: &'static str,
        y: &mut Tensor,
        v: &Tensor,
        b: Broadcast,
    ) -> Result<()> {
        if self.words(y.dtype()) {
            let wv = self.widened(v)?;
            let mut wy = self.widened(y)?;
            self.broadcast(name, &mut wy, &wv, b)?;
            return self.cast(&wy, y);
        }
        let (yh, vh) = (out_handle(y), out_handle(v));
        let len = y.numel();
        with_float!(y.dtype(), |F| k::launch_broadcast::<R, F>(
            &self.client,
            &yh,
            &vh,
            len,
            b
        ))
        .map_err(|e| self.launch_error(name, e))
    }
}

impl<R: Runtime> ActivationOps for CubeBackend<R> {
    fn glu_forward(&self, name: &'static str, op: Glu, x: &Tensor, y: &mut Tensor) -> Result<()> {
        if self.words(x.dtype()) {
            return self.via_f32(&[x], y, |w, tmp| self.glu_forward(name, op, &w[0], tmp));
        }
        let (xh, yh) = (out_handle(x), out_handle(y));
        let (rows, d) = y.shape();
        with_glu!(op, |O| with_float!(x.dtype(), |F| {
            gl::launch_glu_forward::<R, F, O>(&self.client, &xh, &yh, rows, d)
        }))
        .map_err(|e| self.launch_error(name, e))
    }

    fn glu_backward(
        &self,
        name: &'static str,
        op: Glu,
        x: &Tensor,
        dy: &Tensor,
        dx: &mut Tensor,
    ) -> Result<()> {
        if self.words(x.dtype()) {
            return self.via_f32(&[x, dy], dx, |w, tmp| {
                self.glu_backward(name, op, &w[0], &w[1], tmp)
            });
        }
        let (xh, dyh, dxh) = (out_handle(x), out_handle(dy), out_handle(dx));
        let (rows, d) = dy.shape();
        with_glu!(op, |O| with_float!(x.dtype(), |F| {
            gl::launch_glu_backward::<R, F, O>(&self.client, &xh, &dyh, &dxh, rows, d)
        }))
        .map_err(|e| self.launch_error(name, e))
    }

    fn snake_forward(
        &self,
        name: &'static str,
        x: &Tensor,
        alpha: &Tensor,
        d: &Tensor,
        l: usize,
        y: &mut Tensor,
    ) -> Result<()> {
        let h = [x, alpha, d, y].map(out_handle);
        brotensor_kernels::snake::launch_snake_forward::<R>(
            &self.client,
            &h[0],
            &h[1],
            &h[2],
            &h[3],
            x.numel(),
            alpha.numel(),
            l,
        )
        .map_err(|e| self.launch_error(name, e))
    }

    fn snake_backward(
        &self,
        name: &'static str,
        x: &Tensor,
        alpha: &Tensor,
        d: &Tensor,
        dy: &Tensor,
        l: usize,
        g: SnakeGrads<'_>,
    ) -> Result<()> {
        let h = [x, alpha, d, dy, &*g.dx, &*g.ga, &*g.gb].map(out_handle);
        brotensor_kernels::snake::launch_snake_backward::<R>(
            &self.client,
            &h[0],
            &h[1],
            &h[2],
            &h[3],
            &h[4],
            &h[5],
            &h[6],
            (x.numel(), alpha.numel(), l),
        )
        .map_err(|e| self.launch_error(name, e))
    }
}

impl<R: Runtime> ReductionOps for CubeBackend<R> {
    fn sum_rows(&self, x: &Tensor, y: &mut Tensor) -> Result<()> {
        if self.words(x.dtype()) {
            return self.via_f32(&[x], y, |w, tmp| self.sum_rows(&w[0], tmp));
        }
        let (xh, yh) = (out_handle(x), out_handle(y));
        // The split comes from `y`: rows = y's elements (callers may sum a reshaped view).
        let rows = y.numel();
        let cols = x.numel() / rows.max(1);
        with_float!(x.dtype(), |F| rd::launch_sum_rows::<R, F>(
            &self.client,
            &xh,
            &yh,
            rows,
            cols
        ))
        .map_err(|e| self.launch_error("sum_rows", e))
    }

    fn sum_cols(&self, x: &Tensor, y: &mut Tensor) -> Result<()> {
        if self.words(x.dtype()) {
            return self.via_f32(&[x], y, |w, tmp| self.sum_cols(&w[0], tmp));
        }
        let (xh, yh) = (out_handle(x), out_handle(y));
        let cols = y.numel();
        let rows = x.numel() / cols.max(1);
        with_float!(x.dtype(), |F| rd::launch_sum_cols::<R, F>(
            &self.client,
            &xh,
            &yh,
            rows,
            cols
        ))
        .map_err(|e| self.launch_error("sum_cols", e))
    }

    fn argmax_rows(&self, x: &Tensor, idx: &mut Tensor) -> Result<()> {
        if self.words(x.dtype()) {
            return self.argmax_rows(&self.widened(x)?, idx);
        }
        let (xh, ih) = (out_handle(x), out_handle(idx));
        let (rows, cols) = x.shape();
        let c = &self.client;
        with_float!(x.dtype(), |F| match idx.dtype() {
            Dtype::I32 => rd::launch_argmax_rows::<R, F, i32>(c, &xh, &ih, rows, cols),
            _ => rd::launch_argmax_rows::<R, F, f32>(c, &xh, &ih, rows, cols),
        })
        .map_err(|e| self.launch_error("argmax_rows", e))
    }

    fn top_k_rows(&self, x: &Tensor, k: usize, vals: &mut Tensor, idx: &mut Tensor) -> Result<()> {
        let (xh, vh, ih) = (out_handle(x), out_handle(vals), out_handle(idx));
        rd::launch_top_k_rows(&self.client, &xh, &vh, &ih, (x.rows(), x.cols(), k))
            .map_err(|e| self.launch_error("top_k_rows", e))
    }

    fn rows_count_above(&self, x: &Tensor, lo: f32, hi: f32, counts: &mut Tensor) -> Result<()> {
        let (xh, ch) = (out_handle(x), out_handle(counts));
        let shape = x.shape();
        with_float!(x.dtype(), |F| rd::launch_rows_count_above::<R, F>(
            &self.client,
            &xh,
            &ch,
            shape,
            (lo, hi)
        ))
        .map_err(|e| self.launch_error("rows_count_above", e))
    }
}

impl<R: Runtime> LinearOps for CubeBackend<R> {
    fn gemm(
        &self,
        name: &'static str,
        a: &Tensor,
        b: &Tensor,
        bias: Option<&Tensor>,
        c: &mut Tensor,
        g: Gemm,
    ) -> Result<()> {
        if self.words(a.dtype()) {
            let (wa, wb) = (self.widened(a)?, self.widened(b)?);
            let wbias = bias.map(|t| self.widened(t)).transpose()?;
            // The product writes every element of `c` only when its batches tile it with no
            // gap; otherwise the elements it skips must come back unchanged, so widen them too.
            let mn = g.m * g.n;
            let tiles_c = (g.batch == 1 || g.strides.2 == mn) && g.batch * mn == c.numel();
            let mut wc = if g.accumulate || !tiles_c {
                self.widened(c)?
            } else {
                Tensor::empty_on(self.device, c.rows(), c.cols(), Dtype::F32)?
            };
            self.gemm(name, &wa, &wb, wbias.as_ref(), &mut wc, g)?;
            return self.cast(&wc, c);
        }
        let spec = GemmSpec {
            m: g.m,
            n: g.n,
            k: g.k,
            trans_a: g.trans_a,
            trans_b: g.trans_b,
            accumulate: g.accumulate,
            batch: g.batch,
            strides: g.strides,
            bias: bias.is_some(),
            act: g.act,
        };
        let (ah, bh, ch) = (out_handle(a), out_handle(b), out_handle(c));
        let biash = bias.map(out_handle);
        with_float!(a.dtype(), |F| mm::launch_gemm::<R, F>(
            &self.client,
            &ah,
            &bh,
            biash.as_ref(),
            &ch,
            spec
        ))
        .map_err(|e| self.launch_error(name, e))
    }
}

impl<R: Runtime> CubeBackend<R> {
    /// A scratch F32 tensor of `rows` elements on this device.
    fn scratch(&self, rows: usize) -> Result<Tensor> {
        Tensor::empty_on(self.device, rows, 1, Dtype::F32)
    }
}

impl<R: Runtime> NormOps for CubeBackend<R> {
    fn softmax(
        &self,
        x: Src<'_>,
        mask: Option<&Tensor>,
        out: &mut Tensor,
        cols: usize,
    ) -> Result<()> {
        if self.words(out.dtype()) {
            let mut wide = self.widened(out)?;
            match x {
                Src::Tensor(x) => {
                    self.softmax(Src::Tensor(&self.widened(x)?), mask, &mut wide, cols)?
                }
                Src::Out => self.softmax(Src::Out, mask, &mut wide, cols)?,
            }
            return self.cast(&wide, out);
        }
        let oh = out_handle(out);
        let xh = src_handle(x).unwrap_or_else(|| oh.clone());
        let mh = mask.map(out_handle);
        let shape = (out.numel() / cols.max(1), cols);
        with_float!(out.dtype(), |F| rw::launch_softmax::<R, F>(
            &self.client,
            &xh,
            mh.as_ref(),
            &oh,
            shape
        ))
        .map_err(|e| self.launch_error("softmax", e))
    }

    fn softmax_backward(
        &self,
        p: &Tensor,
        dp: &Tensor,
        dl: &mut Tensor,
        cols: usize,
    ) -> Result<()> {
        if self.words(p.dtype()) {
            return self.via_f32(&[p, dp], dl, |w, tmp| {
                self.softmax_backward(&w[0], &w[1], tmp, cols)
            });
        }
        let (ph, dph, dlh) = (out_handle(p), out_handle(dp), out_handle(dl));
        let shape = (p.numel() / cols.max(1), cols);
        with_float!(p.dtype(), |F| rw::launch_softmax_backward::<R, F>(
            &self.client,
            &ph,
            &dph,
            &dlh,
            shape
        ))
        .map_err(|e| self.launch_error("softmax_backward", e))
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
        if self.words(x.dtype()) {
            let (wx, wg, wb) = (self.widened(x)?, self.widened(gamma)?, self.widened(beta)?);
            let mut wy = Tensor::empty_on(self.device, y.rows(), y.cols(), Dtype::F32)?;
            return match caches {
                None => {
                    self.layernorm(&wx, &wg, &wb, eps, &mut wy, None)?;
                    self.cast(&wy, y)
                }
                Some(c) => {
                    let mut wxh = Tensor::empty_on(self.device, y.rows(), y.cols(), Dtype::F32)?;
                    let wc = LayerNormCaches {
                        xhat: &mut wxh,
                        mean: c.mean,
                        rstd: c.rstd,
                    };
                    self.layernorm(&wx, &wg, &wb, eps, &mut wy, Some(wc))?;
                    self.cast(&wy, y)?;
                    self.cast(&wxh, c.xhat)
                }
            };
        }
        let (xh, gh, bh, yh) = (
            out_handle(x),
            out_handle(gamma),
            out_handle(beta),
            out_handle(y),
        );
        let ch = caches.map(|c| (out_handle(c.xhat), out_handle(c.mean), out_handle(c.rstd)));
        let bufs = LayerNormBuffers {
            x: &xh,
            gamma: &gh,
            beta: &bh,
            y: &yh,
            caches: ch.as_ref().map(|(a, b, c)| (a, b, c)),
        };
        let shape = (x.numel() / gamma.numel().max(1), gamma.numel());
        with_float!(x.dtype(), |F| rw::launch_layernorm::<R, F>(
            &self.client,
            bufs,
            shape,
            eps
        ))
        .map_err(|e| self.launch_error("layernorm", e))
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
        if self.words(dy.dtype()) {
            let (wdy, wxh, wg) = (self.widened(dy)?, self.widened(xhat)?, self.widened(gamma)?);
            let mut wdx = Tensor::empty_on(self.device, dx.rows(), dx.cols(), Dtype::F32)?;
            let (mut wdg, mut wdb) = (self.widened(dgamma)?, self.widened(dbeta)?);
            self.layernorm_backward(&wdy, &wxh, &wg, rstd, &mut wdx, &mut wdg, &mut wdb)?;
            self.cast(&wdx, dx)?;
            self.cast(&wdg, dgamma)?;
            return self.cast(&wdb, dbeta);
        }
        let hs = (
            out_handle(dy),
            out_handle(xhat),
            out_handle(gamma),
            out_handle(rstd),
        );
        let (dxh, dgh, dbh) = (out_handle(dx), out_handle(dgamma), out_handle(dbeta));
        let shape = (dy.numel() / gamma.numel().max(1), gamma.numel());
        let c = &self.client;
        with_float!(dy.dtype(), |F| (|| -> Result<(), LaunchError> {
            rw::launch_layernorm_backward::<R, F>(c, (&hs.0, &hs.1, &hs.2, &hs.3), &dxh, shape)?;
            rd::launch_column_sums::<R, F>(c, (&hs.0, Some(&hs.1), None), &dgh, shape, true)?;
            rd::launch_column_sums::<R, F>(c, (&hs.0, None, None), &dbh, shape, true)
        })())
        .map_err(|e| self.launch_error("layernorm_backward", e))
    }

    fn batch_norm_train(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        beta: &Tensor,
        (n, hw): (usize, usize),
        (eps, momentum): (f32, f32),
        stats: BatchNormStats<'_>,
        y: &mut Tensor,
    ) -> Result<()> {
        let h = [x, gamma, beta, y].map(out_handle);
        let s = [
            &*stats.running_mean,
            &*stats.running_var,
            &*stats.saved_mean,
            &*stats.saved_rstd,
        ]
        .map(out_handle);
        let ks = brotensor_kernels::batch_norm::BatchNormStats {
            running_mean: &s[0],
            running_var: &s[1],
            saved_mean: &s[2],
            saved_rstd: &s[3],
        };
        brotensor_kernels::batch_norm::launch_batch_norm::<R>(
            &self.client,
            (&h[0], &h[1], &h[2], &h[3]),
            ks,
            (n, gamma.numel(), hw),
            eps,
            momentum,
        )
        .map_err(|e| self.launch_error("batch_norm_forward", e))
    }

    fn batch_norm_inference(
        &self,
        x: &Tensor,
        params: (&Tensor, &Tensor, &Tensor, &Tensor),
        hw: usize,
        eps: f32,
        y: &mut Tensor,
    ) -> Result<()> {
        let (gamma, beta, mean, var) = params;
        if self.words(x.dtype()) {
            return self.via_f32(&[x, gamma, beta, mean, var], y, |w, tmp| {
                self.batch_norm_inference(&w[0], (&w[1], &w[2], &w[3], &w[4]), hw, eps, tmp)
            });
        }
        let h = [x, y, gamma, beta, mean, var].map(out_handle);
        let shape = (x.numel(), gamma.numel(), hw);
        with_float!(x.dtype(), |F| {
            brotensor_kernels::batch_norm::launch_batch_norm_inference::<R, F>(
                &self.client,
                (&h[0], &h[1]),
                (&h[2], &h[3], &h[4], &h[5]),
                shape,
                eps,
            )
        })
        .map_err(|e| self.launch_error("batch_norm_inference", e))
    }

    fn batch_norm_backward(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        (mean, rstd): (&Tensor, &Tensor),
        dy: &Tensor,
        (n, hw): (usize, usize),
        dx: &mut Tensor,
        dgamma: &mut Tensor,
        dbeta: &mut Tensor,
    ) -> Result<()> {
        let h = [x, gamma, mean, rstd, dy, dx, dgamma, dbeta].map(out_handle);
        brotensor_kernels::batch_norm::launch_batch_norm_backward::<R>(
            &self.client,
            (&h[0], &h[1], &h[2], &h[3], &h[4]),
            (&h[5], &h[6], &h[7]),
            (n, gamma.numel(), hw),
        )
        .map_err(|e| self.launch_error("batch_norm_backward", e))
    }

    fn group_norm(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        beta: &Tensor,
        (groups, hw): (usize, usize),
        eps: f32,
        y: &mut Tensor,
    ) -> Result<()> {
        if self.words(x.dtype()) {
            return self.via_f32(&[x, gamma, beta], y, |w, tmp| {
                self.group_norm(&w[0], &w[1], &w[2], (groups, hw), eps, tmp)
            });
        }
        let h = [x, gamma, beta, y].map(out_handle);
        let cpg = gamma.numel() / groups.max(1);
        let rows = x.numel() / (cpg * hw).max(1);
        with_float!(x.dtype(), |F| rw::launch_group_norm::<R, F>(
            &self.client,
            (&h[0], &h[1], &h[2], &h[3]),
            rows,
            (groups, cpg, hw),
            eps
        ))
        .map_err(|e| self.launch_error("group_norm_forward", e))
    }

    fn group_norm_backward(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        dy: &Tensor,
        (groups, hw): (usize, usize),
        eps: f32,
        dx: &mut Tensor,
        (part_g, part_b): (&mut Tensor, &mut Tensor),
    ) -> Result<()> {
        if self.words(x.dtype()) {
            let (wx, wg, wdy) = (self.widened(x)?, self.widened(gamma)?, self.widened(dy)?);
            let wide = |t: &Tensor| Tensor::empty_on(self.device, t.rows(), t.cols(), Dtype::F32);
            let (mut wdx, mut wpg, mut wpb) = (wide(dx)?, wide(part_g)?, wide(part_b)?);
            let wparts = (&mut wpg, &mut wpb);
            self.group_norm_backward(&wx, &wg, &wdy, (groups, hw), eps, &mut wdx, wparts)?;
            self.cast(&wdx, dx)?;
            self.cast(&wpg, part_g)?;
            return self.cast(&wpb, part_b);
        }
        let h = [x, gamma, dy, dx, part_g, part_b].map(out_handle);
        let cpg = gamma.numel() / groups.max(1);
        let rows = x.numel() / (cpg * hw).max(1);
        with_float!(x.dtype(), |F| rw::launch_group_norm_backward::<R, F>(
            &self.client,
            (&h[0], &h[1], &h[2]),
            (&h[3], &h[4], &h[5]),
            rows,
            (groups, cpg, hw),
            eps
        ))
        .map_err(|e| self.launch_error("group_norm_backward", e))
    }

    fn rms_norm(&self, x: &Tensor, gamma: &Tensor, eps: f32, y: &mut Tensor) -> Result<()> {
        if self.words(x.dtype()) {
            return self.via_f32(&[x, gamma], y, |w, tmp| {
                self.rms_norm(&w[0], &w[1], eps, tmp)
            });
        }
        let (xh, gh, yh) = (out_handle(x), out_handle(gamma), out_handle(y));
        with_float!(x.dtype(), |F| rw::launch_rms_norm::<R, F>(
            &self.client,
            (&xh, &gh, &yh),
            None,
            x.shape(),
            eps
        ))
        .map_err(|e| self.launch_error("rms_norm_forward", e))
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
        if self.words(x.dtype()) {
            let (wx, wg, wdy) = (self.widened(x)?, self.widened(gamma)?, self.widened(dy)?);
            let mut wdx = Tensor::empty_on(self.device, dx.rows(), dx.cols(), Dtype::F32)?;
            let mut wdg = dgamma.as_deref().map(|d| self.widened(d)).transpose()?;
            self.rms_norm_backward(&wx, &wg, &wdy, eps, &mut wdx, wdg.as_mut())?;
            self.cast(&wdx, dx)?;
            return match (wdg, dgamma) {
                (Some(wdg), Some(dgamma)) => self.cast(&wdg, dgamma),
                _ => Ok(()),
            };
        }
        let rrms = self.scratch(x.rows())?;
        let (xh, gh, dyh) = (out_handle(x), out_handle(gamma), out_handle(dy));
        let (dxh, dgh, rh) = (
            out_handle(dx),
            dgamma.map(|d| out_handle(d)),
            out_handle(&rrms),
        );
        let shape = x.shape();
        let c = &self.client;
        with_float!(x.dtype(), |F| (|| -> Result<(), LaunchError> {
            rw::launch_rms_norm_backward::<R, F>(c, (&xh, &gh, &dyh), &dxh, &rh, shape, eps)?;
            dgh.as_ref().map_or(Ok(()), |dgh| {
                rd::launch_column_sums::<R, F>(c, (&dyh, Some(&xh), Some(&rh)), dgh, shape, true)
            })
        })())
        .map_err(|e| self.launch_error("rms_norm_backward", e))
    }
}

impl<R: Runtime> LossOps for CubeBackend<R> {
    fn xent(&self, io: LossIo<'_>, offsets: &[usize]) -> Result<()> {
        let offs: Vec<u32> = offsets
            .iter()
            .map(|&o| {
                u32::try_from(o)
                    .map_err(|_| Error::invalid("softmax_xent", "head offset exceeds u32"))
            })
            .collect::<Result<_>>()?;
        let offs = self.upload(bytemuck::cast_slice(&offs))?;
        let (rows, cols, heads) = (
            io.logits.rows(),
            io.logits.cols(),
            offsets.len().saturating_sub(1),
        );
        let hs = [io.logits, io.target].map(out_handle);
        let mh = io.mask.map(out_handle);
        let (ph, dh, lh) = (
            out_handle(io.probs),
            out_handle(io.dlogits),
            out_handle(io.loss),
        );
        let bufs = LossBuffers {
            logits: &hs[0],
            target: &hs[1],
            mask: mh.as_ref(),
            probs: &ph,
            dlogits: &dh,
            loss: &lh,
        };
        lk::launch_xent(&self.client, bufs, gpu(&offs), (rows, cols, heads))
            .map_err(|e| self.launch_error("softmax_xent", e))
    }

    fn bce(&self, io: LossIo<'_>, pos_weight: f32) -> Result<()> {
        let hs = [io.logits, io.target].map(out_handle);
        let mh = io.mask.map(out_handle);
        let (ph, dh, lh) = (
            out_handle(io.probs),
            out_handle(io.dlogits),
            out_handle(io.loss),
        );
        let bufs = LossBuffers {
            logits: &hs[0],
            target: &hs[1],
            mask: mh.as_ref(),
            probs: &ph,
            dlogits: &dh,
            loss: &lh,
        };
        lk::launch_bce(&self.client, bufs, io.logits.shape(), pos_weight)
            .map_err(|e| self.launch_error("bce_with_logits_fused_batched", e))
    }

    fn squared_error_sum(&self, pred: &Tensor, target: &Tensor) -> Result<f64> {
        let n = pred.numel();
        if n == 0 {
            return Ok(0.0);
        }
        let parts = n.div_ceil(lk::SQUARED_ERROR_PART);
        let partials = self.alloc(parts * 4)?;
        lk::launch_squared_error_parts(
            &self.client,
            &out_handle(pred),
            &out_handle(target),
            gpu(&partials),
            n,
        )
        .map_err(|e| self.launch_error("mse_vec_forward", e))?;
        let bytes = self.download(&partials, parts * 4)?;
        let sums: &[f32] = bytemuck::cast_slice(&bytes);
        Ok(sums.iter().map(|&s| f64::from(s)).sum())
    }
}
