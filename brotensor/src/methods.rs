//! The tensor API in the peers' style: `t.matmul(&u)?`, `t.add(&u)?`, `t.exp()?`,
//! `t.softmax(dim)?`, `t.sum(dim)?`. Each method allocates its result and delegates to the
//! C++-named op in [`crate::ops`], which stays the contract (shapes, accumulation, errors).
//!
//! ```
//! use brotensor::{Device, Tensor};
//! let x = Tensor::from_slice_nd_on(Device::Cpu, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
//! let w = Tensor::from_slice_nd_on(Device::Cpu, &[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2])?;
//! let y = x.matmul(&w)?.add(&Tensor::from_slice_nd_on(Device::Cpu, &[10.0f32, 20.0], &[2])?)?;
//! assert_eq!(y.to_vec::<f32>()?, [14.0, 25.0, 20.0, 31.0]);
//! assert_eq!(x.sum(0)?.to_vec::<f32>()?, [5.0, 7.0, 9.0]);
//! let p = x.softmax(1)?;
//! assert!((p.sum(1)?.to_vec::<f32>()?[0] - 1.0).abs() < 1e-6);
//! # Ok::<(), brotensor::Error>(())
//! ```

use crate::{ops, Error, Result, Tensor};

/// Allocating element-wise methods, one per op in [`crate::ops`].
macro_rules! unary_methods {
    ($($name:ident => $op:path;)*) => {
        impl Tensor {$(
            #[doc = concat!("[`", stringify!($op), "`] of this tensor, into a new tensor of its dims.")]
            pub fn $name(&self) -> Result<Tensor> {
                $op(self)
            }
        )*}
    };
}

unary_methods! {
    exp => ops::exp;
    log => ops::log;
    sin => ops::sin;
    cos => ops::cos;
    rsqrt => ops::rsqrt;
    round => ops::round;
    relu => ops::relu;
    tanh => ops::tanh;
    sigmoid => ops::sigmoid;
    silu => ops::silu;
    gelu => ops::gelu;
    gelu_exact => ops::gelu_exact;
}

/// Allocating binary methods with numpy broadcasting.
macro_rules! binary_methods {
    ($($name:ident => $op:path;)*) => {
        impl Tensor {$(
            #[doc = concat!("[`", stringify!($op), "`]`(self, rhs)`: dims broadcast by numpy's rules; a new tensor.")]
            pub fn $name(&self, rhs: &Tensor) -> Result<Tensor> {
                $op(self, rhs)
            }
        )*}
    };
}

binary_methods! {
    add => ops::add;
    sub => ops::sub;
    mul => ops::mul;
    div => ops::div;
}

impl Tensor {
    /// Errors unless `dim < rank`.
    fn check_axis(&self, op: &'static str, dim: usize) -> Result<()> {
        if dim >= self.rank() {
            return Err(Error::shape(
                op,
                format!(
                    "dim {dim} is out of range for rank {} {:?}",
                    self.rank(),
                    self.dims()
                ),
            ));
        }
        Ok(())
    }

    /// A view with `dim` moved to the end (the other dims keep their order), and the
    /// permutation that puts it back.
    fn with_axis_last(&self, dim: usize) -> Result<(Tensor, Vec<usize>)> {
        let rank = self.rank();
        let mut perm: Vec<usize> = (0..rank).filter(|&d| d != dim).collect();
        perm.push(dim);
        let mut back = vec![0; rank];
        for (i, &p) in perm.iter().enumerate() {
            back[p] = i;
        }
        Ok((self.permute(&perm)?, back))
    }

    /// `self (.., M, K) . rhs (.., K, N)`: a matrix product over the last two dims, with
    /// numpy's broadcasting of the batch dims before them (`[2, 3, 4] . [2, 4, 5]` is
    /// `[2, 3, 5]`; `[2, 1, 3, 4] . [5, 4, 6]` is `[2, 5, 3, 6]`; a rank-2 `rhs` is shared by
    /// every batch entry). Both operands need rank 2 or more. See [`ops::matmul`].
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        if self.rank() < 2 || rhs.rank() < 2 {
            return Err(Error::shape(
                "matmul",
                format!(
                    "expected (.., M, K) . (.., K, N), got {:?} . {:?}",
                    self.dims(),
                    rhs.dims()
                ),
            ));
        }
        if rhs.rank() > 2 {
            return ops::linear::matmul_broadcast(self, rhs);
        }
        // A 2-D right operand: the batch dims fold into M, one product.
        let mut out = Tensor::default();
        ops::matmul(self, rhs, &mut out)?;
        let mut dims = self.dims().to_vec();
        *dims.last_mut().expect("rank >= 2") = rhs.cols();
        out.reshape_(&dims)?;
        Ok(out)
    }

    /// A view of a matrix transposed (the last two dims swapped; rank at least 2).
    pub fn t(&self) -> Result<Tensor> {
        let rank = self.rank();
        if rank < 2 {
            return Err(Error::shape(
                "t",
                format!("a transpose needs rank 2 or more, got {:?}", self.dims()),
            ));
        }
        self.transpose(rank - 2, rank - 1)
    }

    /// The softmax along `dim` (each slice along it sums to 1), into a new tensor of this
    /// tensor's dims. See [`ops::softmax_rows_forward`].
    pub fn softmax(&self, dim: usize) -> Result<Tensor> {
        self.check_axis("softmax", dim)?;
        let (x, back) = self.with_axis_last(dim)?;
        let mut y = Tensor::default();
        ops::softmax_rows_forward(&x, &mut y)?;
        y.reshape_(x.dims())?;
        y.permute(&back)?.contiguous()
    }

    /// The sum along `dim`, which is removed from the dims. See [`ops::sum_rows`].
    pub fn sum(&self, dim: usize) -> Result<Tensor> {
        self.check_axis("sum", dim)?;
        let (x, _) = self.with_axis_last(dim)?;
        let mut y = Tensor::default();
        ops::sum_rows(&x, &mut y)?;
        let mut dims = self.dims().to_vec();
        dims.remove(dim);
        y.reshape_(&dims)?;
        Ok(y)
    }

    /// The index of the first maximum along `dim` (I32), which is removed from the dims.
    /// See [`ops::argmax_rows_i32`].
    pub fn argmax(&self, dim: usize) -> Result<Tensor> {
        self.check_axis("argmax", dim)?;
        let (x, _) = self.with_axis_last(dim)?;
        let mut idx = Tensor::default();
        ops::argmax_rows_i32(&x, &mut idx)?;
        let mut dims = self.dims().to_vec();
        dims.remove(dim);
        idx.reshape_(&dims)?;
        Ok(idx)
    }

    /// Every element clamped to `[lo, hi]`, into a new tensor. See [`ops::clamp_out`].
    pub fn clamp(&self, lo: f32, hi: f32) -> Result<Tensor> {
        let mut y = Tensor::default();
        ops::clamp_out(self, lo, hi, &mut y)?;
        Ok(y)
    }

    /// Every element clamped to `[lo, hi]`, in place (C++ `clamp`, [`ops::clamp`]).
    pub fn clamp_(&mut self, lo: f32, hi: f32) -> Result<()> {
        ops::clamp(self, lo, hi)
    }

    /// ELU with `alpha`, into a new tensor. See [`ops::elu_forward`].
    pub fn elu(&self, alpha: f32) -> Result<Tensor> {
        let mut y = Tensor::default();
        ops::elu_forward(self, alpha, &mut y)?;
        Ok(y)
    }

    /// Leaky ReLU with `negative_slope`, into a new tensor. See [`ops::leaky_relu_forward`].
    pub fn leaky_relu(&self, negative_slope: f32) -> Result<Tensor> {
        let mut y = Tensor::default();
        ops::leaky_relu_forward(self, negative_slope, &mut y)?;
        Ok(y)
    }

    /// SwiGLU of `self (.., 2D)` = `[a | g]`: `silu(a) * g`, `(.., D)`. See
    /// [`ops::swiglu_forward`].
    pub fn swiglu(&self) -> Result<Tensor> {
        self.glu(ops::swiglu_forward)
    }

    /// GeGLU (tanh GELU) of `self (.., 2D)` = `[a | g]`: `a * gelu(g)`, `(.., D)`. See
    /// [`ops::geglu_forward`].
    pub fn geglu(&self) -> Result<Tensor> {
        self.glu(ops::geglu_forward)
    }

    fn glu(&self, f: fn(&Tensor, &mut Tensor) -> Result<()>) -> Result<Tensor> {
        let mut y = Tensor::default();
        f(self, &mut y)?;
        let mut dims = self.dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last /= 2;
        }
        y.reshape_(&dims)?;
        Ok(y)
    }

    /// RMSNorm of each row (the last dim) with `gamma` (one value per column), into a new
    /// tensor. See [`ops::rms_norm_forward`].
    pub fn rms_norm(&self, gamma: &Tensor, eps: f32) -> Result<Tensor> {
        let mut y = Tensor::default();
        ops::rms_norm_forward(self, gamma, eps, &mut y)?;
        Ok(y)
    }

    /// LayerNorm of each row (the last dim) with `gamma` and `beta`, into a new tensor. See
    /// [`ops::layernorm_forward_inference_batched`].
    pub fn layer_norm(&self, gamma: &Tensor, beta: &Tensor, eps: f32) -> Result<Tensor> {
        let mut y = Tensor::default();
        ops::layernorm_forward_inference_batched(self, gamma, beta, eps, &mut y)?;
        Ok(y)
    }

    /// The mean along `dim`, which is removed from the dims.
    pub fn mean(&self, dim: usize) -> Result<Tensor> {
        let n = self.dims().get(dim).copied().unwrap_or(1);
        let mut y = self.sum(dim)?;
        y.div_scalar_(n as f32)?;
        Ok(y)
    }

    /// The DFT of each row (the last dim), in this tensor's complex form (interleaved F32 or
    /// C64). See [`ops::fft`].
    pub fn fft(&self) -> Result<Tensor> {
        let mut y = Tensor::default();
        ops::fft(self, &mut y)?;
        Ok(y)
    }

    /// The inverse DFT of each row, scaled by `1 / n`. See [`ops::ifft`].
    pub fn ifft(&self) -> Result<Tensor> {
        let mut y = Tensor::default();
        ops::ifft(self, &mut y)?;
        Ok(y)
    }

    /// The half spectrum of each real row: `(.., n)` to interleaved F32 `(.., 2 (n / 2 +
    /// 1))`. See [`ops::rfft`].
    pub fn rfft(&self) -> Result<Tensor> {
        let mut y = Tensor::default();
        ops::rfft(self, &mut y)?;
        Ok(y)
    }

    /// The real rows of length `n` of these half spectra. See [`ops::irfft`].
    pub fn irfft(&self, n: usize) -> Result<Tensor> {
        let mut y = Tensor::default();
        ops::irfft(self, n, &mut y)?;
        Ok(y)
    }

    /// The spectrogram of these signals (`(N, len)` or `(len)`): interleaved F32 `(N frames,
    /// 2 (n_fft / 2 + 1))`. See [`ops::stft`].
    pub fn stft(&self, window: &Tensor, spec: &ops::StftSpec) -> Result<Tensor> {
        let mut y = Tensor::default();
        ops::stft(self, window, spec, &mut y)?;
        Ok(y)
    }

    /// The `(signals, len)` signals of this spectrogram. See [`ops::istft`].
    pub fn istft(
        &self,
        window: &Tensor,
        (signals, len): (usize, usize),
        spec: &ops::StftSpec,
    ) -> Result<Tensor> {
        let mut y = Tensor::default();
        ops::istft(self, window, (signals, len), spec, &mut y)?;
        Ok(y)
    }
}
