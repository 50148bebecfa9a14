//! The SD U-Net residual block the diffusion benchmarks time: its tensors, the fused op and
//! the same chain of unfused public ops, and the GPU table (fused against unfused in each
//! float dtype) that `bench_diffusion` and the GPU kit's `bench_conv` print.

use brotensor::ops::{self, ResBlock, ResBlockSpec};
use brotensor::{Device, Dtype, Tensor};

/// The block sizes of issue 28: `(N, C, H, W)`.
pub const SHAPES: [(usize, usize, usize, usize); 2] = [(1, 320, 64, 64), (1, 640, 32, 32)];

/// `len` deterministic values in `[-scale, scale)`.
pub fn values(len: usize, seed: usize, scale: f32) -> Vec<f32> {
    (0..len)
        .map(|i| (((i + seed * 7919) * 2_654_435_761) >> 20 & 1023) as f32 / 512.0 - 1.0)
        .map(|v| v * scale)
        .collect()
}

/// `v` as a `rows x cols` tensor of `dtype` on `dev`.
pub fn tensor(dev: Device, v: &[f32], rows: usize, cols: usize, dtype: Dtype) -> Tensor {
    Tensor::from_slice_on(dev, v, rows, cols)
        .and_then(|t| t.to_dtype(dtype))
        .expect("tensor")
}

/// The tensors of one residual block (identity skip, per-sample time shift).
pub struct Block {
    /// The input.
    pub x: Tensor,
    /// Both norms' scale.
    pub gamma: Tensor,
    /// Both norms' shift.
    pub beta: Tensor,
    /// First convolution.
    pub w1: Tensor,
    /// Its bias.
    pub b1: Tensor,
    /// The per-sample time shift.
    pub t: Tensor,
    /// Second convolution.
    pub w2: Tensor,
    /// Its bias.
    pub b2: Tensor,
    /// The sizes.
    pub spec: ResBlockSpec,
}

impl Block {
    /// The block of `dims` on `dev` in `dtype`, deterministic values.
    pub fn new(dev: Device, (n, c, h, w): (usize, usize, usize, usize), dtype: Dtype) -> Self {
        let k = 1.0 / ((c * 9) as f32).sqrt();
        let t = |v: Vec<f32>, r, cols| tensor(dev, &v, r, cols, dtype);
        Block {
            x: t(values(n * c * h * w, 1, 1.0), n, c * h * w),
            gamma: t(values(c, 2, 0.5).iter().map(|v| v + 1.0).collect(), c, 1),
            beta: t(values(c, 3, 0.2), c, 1),
            w1: t(values(c * c * 9, 4, k), c, c * 9),
            b1: t(values(c, 5, 0.1), c, 1),
            t: t(values(n * c, 6, 0.5), n, c),
            w2: t(values(c * c * 9, 7, k), c, c * 9),
            b2: t(values(c, 8, 0.1), c, 1),
            spec: ResBlockSpec {
                dims: (n, c, h, w).into(),
                c_out: c,
                num_groups: 32,
                eps: 1e-5,
            },
        }
    }

    /// The op's view of the tensors.
    pub fn block(&self) -> ResBlock<'_> {
        ResBlock {
            gamma1: &self.gamma,
            beta1: &self.beta,
            w1: &self.w1,
            b1: Some(&self.b1),
            t_emb_shift: Some(&self.t),
            gamma2: &self.gamma,
            beta2: &self.beta,
            w2: &self.w2,
            b2: Some(&self.b2),
            w_skip: None,
            b_skip: None,
        }
    }

    /// Multiply-adds of the two 3x3 convolutions, times 2.
    pub fn flop(&self) -> f64 {
        let d = self.spec.dims;
        2.0 * 2.0 * (d.n * d.c * d.c * 9 * d.h * d.w) as f64
    }

    /// The fused op.
    pub fn fused(&self, y: &mut Tensor) {
        ops::resblock_forward(&self.x, &self.block(), &self.spec, y).expect("resblock_forward");
    }

    /// The same block as a chain of the public ops, one pass each.
    pub fn unfused(&self, s: &mut [Tensor; 3], y: &mut Tensor) {
        let d = self.spec.dims;
        let (n, c, hw) = (d.n, d.c, d.h * d.w);
        let conv = ops::Conv2dSpec {
            padding: [1, 1],
            ..ops::Conv2dSpec::new([3, 3])
        };
        let g = self.spec.num_groups;
        let [a, b, cbuf] = s;
        ops::group_norm_forward(&self.x, &self.gamma, &self.beta, d, g, 1e-5, a).expect("gn");
        ops::silu_forward(a, b).expect("silu");
        ops::conv2d_forward(b, &self.w1, Some(&self.b1), d, c, &conv, cbuf).expect("conv");
        ops::add_channel_bias_inplace(cbuf, &self.t, n * c, hw).expect("t");
        ops::group_norm_forward(cbuf, &self.gamma, &self.beta, d, g, 1e-5, a).expect("gn");
        ops::silu_forward(a, b).expect("silu");
        ops::conv2d_forward(b, &self.w2, Some(&self.b2), d, c, &conv, y).expect("conv");
        ops::add_inplace(y, &self.x).expect("skip");
    }
}

/// The residual block fused and unfused on a GPU device, in each float dtype.
pub fn gpu_table(dev: Device) {
    println!();
    println!(
        "## {}: resblock_forward",
        brotensor::device_name(dev).unwrap_or_else(|_| dev.to_string())
    );
    println!();
    println!("| N x C x H x W | dtype | ms | TFLOP/s | unfused ms | vs unfused |");
    println!("|---|---|---|---|---|---|");
    for dims in SHAPES {
        for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
            if !brotensor::supports_dtype(dev, dtype).unwrap_or(false) {
                continue;
            }
            let b = Block::new(dev, dims, dtype);
            let (mut y, mut y2) = (Tensor::default(), Tensor::default());
            let mut scratch = [Tensor::default(), Tensor::default(), Tensor::default()];
            let (ours, unfused) = crate::best_secs_paired(
                dev,
                10,
                || b.fused(&mut y),
                || b.unfused(&mut scratch, &mut y2),
            );
            let (n, c, h, w) = dims;
            println!(
                "| {n} x {c} x {h} x {w} | {dtype} | {:.3} | {:.1} | {:.3} | {:.2}x |",
                ours * 1e3,
                b.flop() / ours / 1e12,
                unfused * 1e3,
                unfused / ours
            );
        }
    }
}
