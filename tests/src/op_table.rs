//! The op table: one entry per public op in `brotensor::ops`, each calling the op with
//! tensors from numbered slots and its other arguments drawn from a [`Params`] source.
//!
//! The table says nothing about an op's operands: each op declares them itself, once, in its
//! dispatch (`brotensor::internals::recording` shows what it declared). The generated
//! wrong-device test (`tests/all/op_table.rs`) and the API fuzz target
//! (`fuzz/fuzz_targets/api.rs`) both draw their ops from this table.

use brotensor::ops::{
    self, AbtSpec, Act, AttentionCaches, BiasGrads, Comparison, Conv1dSpec, Conv2dSpec, Conv3dSpec,
    GatherDims, Int8Projections, LstmCache, LstmGrads, LstmWeights, MropeTables, PadMode,
    Pool2dSpec, ProjectionBiases, ProjectionGrads, Projections, QkvoGrads, ResizeMode, RopeLayout,
    RopeParams, ScatterDims, StftSpec,
};
use brotensor::{Dtype, Error, Result, Tensor};

/// Where an op's non-tensor arguments come from: fixed values for the wrong-device test,
/// fuzz bytes for the fuzz target.
pub trait Params {
    /// A size, count, axis or index.
    fn usize(&mut self) -> usize;
    /// A float scalar (eps, scale, threshold, ...).
    fn f32(&mut self) -> f32;
    /// A flag.
    fn bool(&mut self) -> bool;
    /// A dtype.
    fn dtype(&mut self) -> Dtype;

    /// A 64-bit seed or key.
    fn u64(&mut self) -> u64 {
        self.usize() as u64
    }
    /// A signed count (top-k).
    fn i32(&mut self) -> i32 {
        self.usize() as i32
    }
    /// A signed offset (a diagonal).
    fn i64(&mut self) -> i64 {
        self.usize() as i64
    }
    /// NCHW dims.
    fn nchw(&mut self) -> (usize, usize, usize, usize) {
        (self.usize(), self.usize(), self.usize(), self.usize())
    }
    /// A list of sizes or axes.
    fn usizes(&mut self) -> Vec<usize> {
        vec![self.usize(), self.usize()]
    }
    /// A list of signed pads.
    fn i64s(&mut self) -> Vec<i64> {
        vec![self.i64(), self.i64()]
    }
    /// A list of unsigned pads.
    fn u64s(&mut self) -> Vec<u64> {
        vec![self.u64(), self.u64()]
    }
    /// A RoPE pair layout.
    fn rope_layout(&mut self) -> RopeLayout {
        if self.bool() {
            RopeLayout::Interleaved
        } else {
            RopeLayout::HalfSplit
        }
    }
    /// RoPE parameters.
    fn rope_params(&mut self) -> RopeParams {
        RopeParams {
            layout: self.rope_layout(),
            ..RopeParams::new(self.f32())
        }
    }
    /// A comparison.
    fn comparison(&mut self) -> Comparison {
        [
            Comparison::Eq,
            Comparison::Ne,
            Comparison::Lt,
            Comparison::Le,
            Comparison::Gt,
            Comparison::Ge,
        ][self.usize() % 6]
    }
    /// A fused activation.
    fn act(&mut self) -> Act {
        Act::from_code(self.usize() as u32)
    }
    /// NCL dims.
    fn ncl(&mut self) -> (usize, usize, usize) {
        (self.usize(), self.usize(), self.usize())
    }
    /// A 2-D convolution's geometry.
    fn conv2d_spec(&mut self) -> Conv2dSpec {
        Conv2dSpec {
            kernel: [self.usize(), self.usize()],
            stride: [self.usize(), self.usize()],
            padding: [self.usize(), self.usize()],
            dilation: [self.usize(), self.usize()],
            groups: self.usize(),
        }
    }
    /// A 3-D convolution's geometry.
    fn conv3d_spec(&mut self) -> Conv3dSpec {
        Conv3dSpec {
            kernel: [self.usize(), self.usize(), self.usize()],
            stride: [self.usize(), self.usize(), self.usize()],
            padding: [self.usize(), self.usize(), self.usize()],
            dilation: [self.usize(), self.usize(), self.usize()],
            groups: self.usize(),
        }
    }
    /// A 1-D convolution's geometry.
    fn conv1d_spec(&mut self) -> Conv1dSpec {
        Conv1dSpec {
            kernel: [self.usize()],
            stride: [self.usize()],
            padding: [self.usize()],
            dilation: [self.usize()],
            groups: self.usize(),
        }
    }
    /// A pooling window.
    fn pool2d_spec(&mut self) -> Pool2dSpec {
        Pool2dSpec {
            kernel: [self.usize(), self.usize()],
            stride: [self.usize(), self.usize()],
            padding: [self.usize(), self.usize()],
            dilation: [self.usize(), self.usize()],
            ceil_mode: self.bool(),
        }
    }
    /// A resize mode.
    fn resize_mode(&mut self) -> ResizeMode {
        [
            ResizeMode::Nearest,
            ResizeMode::Bilinear,
            ResizeMode::BicubicPillow,
            ResizeMode::BicubicTorch,
        ][self.usize() % 4]
    }
    /// Four pads (top, bottom, left, right).
    fn pads4(&mut self) -> [usize; 4] {
        [self.usize(), self.usize(), self.usize(), self.usize()]
    }
    /// `bias_act` parameters.
    fn bias_act(&mut self) -> ops::BiasAct {
        ops::BiasAct {
            act: ops::BiasActivation::LeakyRelu { alpha: self.f32() },
            gain: self.f32(),
            clamp: self.bool().then(|| self.f32()),
        }
    }
    /// `filtered_lrelu` parameters.
    fn filtered_lrelu(&mut self) -> ops::FilteredLreluSpec {
        ops::FilteredLreluSpec {
            up: self.usize(),
            down: self.usize(),
            pad: [self.i64(), self.i64(), self.i64(), self.i64()],
            gain: self.f32(),
            slope: self.f32(),
            clamp: self.bool().then(|| self.f32()),
        }
    }
    /// A modulated convolution's geometry.
    fn modulated_conv(&mut self) -> ops::ModulatedConv2dSpec {
        ops::ModulatedConv2dSpec {
            kernel: [self.usize(), self.usize()],
            padding: [self.usize(), self.usize()],
            demodulate: self.bool(),
            eps: self.f32(),
        }
    }
    /// A residual block's sizes.
    fn resblock(&mut self) -> ops::ResBlockSpec {
        ops::ResBlockSpec {
            dims: self.nchw().into(),
            c_out: self.usize(),
            num_groups: self.usize(),
            eps: self.f32(),
        }
    }
    /// `upfirdn2d` parameters.
    fn upfirdn2d(&mut self) -> ops::Upfirdn2dSpec {
        ops::Upfirdn2dSpec {
            up: [self.usize(), self.usize()],
            down: [self.usize(), self.usize()],
            pad: [self.i64(), self.i64(), self.i64(), self.i64()],
            flip_filter: self.bool(),
            gain: self.f32(),
        }
    }
    /// A padding mode.
    fn pad_mode(&mut self) -> PadMode {
        [PadMode::Zero, PadMode::Reflect, PadMode::Replicate][self.usize() % 3]
    }
    /// A strided batched-GEMM spec.
    fn abt_spec(&mut self) -> AbtSpec {
        AbtSpec {
            batch: self.usize(),
            m: self.usize(),
            n: self.usize(),
            k: self.usize(),
            stride_a: self.usize(),
            stride_b: self.usize(),
            stride_c: self.usize(),
        }
    }
    /// Gather dimension numbers.
    fn gather_dims(&mut self) -> GatherDims {
        GatherDims {
            offset_dims: self.usizes(),
            collapsed_slice_dims: self.usizes(),
            start_index_map: self.usizes(),
            index_vector_dim: self.usize(),
        }
    }
    /// Scatter dimension numbers.
    fn scatter_dims(&mut self) -> ScatterDims {
        ScatterDims {
            update_window_dims: self.usizes(),
            inserted_window_dims: self.usizes(),
            scatter_dims_to_operand_dims: self.usizes(),
            index_vector_dim: self.usize(),
        }
    }
}

/// One public op: its name and a call that takes its tensors from `slots` (exactly
/// [`OpEntry::slots`] of them, in signature order) and its other arguments from `params`.
pub struct OpEntry {
    /// The function's name in `brotensor::ops`.
    pub name: &'static str,
    /// How many tensors the call passes.
    pub slots: usize,
    /// Calls the op.
    pub call: fn(&mut [Tensor], &mut dyn Params) -> Result<()>,
}

/// Attention caches made of five slots' tensors (moved in; the slots are left empty).
fn caches(slots: [&mut Tensor; 5]) -> AttentionCaches {
    let [q, k, v, attn, y] = slots.map(std::mem::take);
    AttentionCaches { q, k, v, attn, y }
}

/// A residual block of slot tensors: `gamma1, beta1, w1, b1, t_emb_shift, gamma2, beta2, w2,
/// b2, w_skip, b_skip`.
fn resblock<'a>(
    [g1, be1, w1, b1, t, g2, be2, w2, b2, ws, bs]: [&'a Tensor; 11],
) -> ops::ResBlock<'a> {
    ops::ResBlock {
        gamma1: g1,
        beta1: be1,
        w1,
        b1: Some(b1),
        t_emb_shift: Some(t),
        gamma2: g2,
        beta2: be2,
        w2,
        b2: Some(b2),
        w_skip: Some(ws),
        b_skip: Some(bs),
    }
}

macro_rules! op {
    ($name:literal, |[$($t:ident),+], $p:ident| $call:expr) => {
        OpEntry {
            name: $name,
            slots: [$(stringify!($t)),+].len(),
            call: |slots, $p| {
                let [$($t),+] = slots else {
                    return Err(Error::InvalidArgument {
                        op: $name,
                        reason: "op table: wrong number of slots".into(),
                    });
                };
                let _ = &$p;
                $call
            },
        }
    };
}

/// Every public op of `brotensor::ops` that takes a tensor.
pub static OP_TABLE: &[OpEntry] = &[
    op!("abs", |[t0], p| ops::abs(t0).map(drop)),
    op!("abs_out", |[t0, t1], p| ops::abs_out(t0, t1)),
    op!("adaptive_avg_pool2d_backward", |[t0, t1], p| {
        ops::adaptive_avg_pool2d_backward(t0, p.nchw(), (p.usize(), p.usize()), t1)
    }),
    op!("adaptive_avg_pool2d_forward", |[t0, t1], p| {
        ops::adaptive_avg_pool2d_forward(t0, p.nchw(), (p.usize(), p.usize()), t1)
    }),
    op!("add", |[t0, t1], p| ops::add(t0, t1).map(drop)),
    op!("add_channel_bias_inplace", |[t0, t1], p| {
        ops::add_channel_bias_inplace(t0, t1, p.usize(), p.usize())
    }),
    op!("add_inplace", |[t0, t1], p| ops::add_inplace(t0, t1)),
    op!("add_inplace_batched", |[t0, t1], p| {
        ops::add_inplace_batched(t0, t1)
    }),
    op!("add_out", |[t0, t1, t2], p| ops::add_out(t0, t1, t2)),
    op!("add_scalar", |[t0], p| ops::add_scalar(t0, p.f32())
        .map(drop)),
    op!("add_scalar_inplace", |[t0], p| ops::add_scalar_inplace(
        t0,
        p.f32()
    )),
    op!("add_scalar_out", |[t0, t1], p| ops::add_scalar_out(
        t0,
        p.f32(),
        t1
    )),
    op!("argmax_rows", |[t0, t1], p| ops::argmax_rows(t0, t1)),
    op!("argmax_rows_i32", |[t0, t1], p| ops::argmax_rows_i32(
        t0, t1
    )),
    op!(
        "attention_backward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15, t16], p| {
            ops::attention_backward(
                t0,
                t1,
                &caches([t2, t3, t4, t5, t6]),
                Projections {
                    wq: t7,
                    wk: t8,
                    wv: t9,
                    wo: t10,
                },
                Some(&*t11),
                t12,
                ProjectionGrads {
                    dwq: t13,
                    dwk: t14,
                    dwv: t15,
                    dwo: t16,
                },
            )
        }
    ),
    op!(
        "attention_forward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11], p| ops::attention_forward(
            t0,
            Projections {
                wq: t1,
                wk: t2,
                wv: t3,
                wo: t4
            },
            Some(&*t5),
            &mut caches([t6, t7, t8, t9, t10]),
            t11
        )
    ),
    op!("attention_token_moments", |[t0, t1, t2], p| {
        ops::attention_token_moments(t0, p.usize(), p.usize(), t1, t2)
    }),
    op!("axpby_inplace", |[t0, t1], p| ops::axpby_inplace(
        t0,
        t1,
        p.f32(),
        p.f32()
    )),
    op!("batch_norm_backward", |[t0, t1, t2, t3, t4, t5, t6, t7],
                                p| {
        ops::batch_norm_backward(t0, t1, t2, t3, t4, p.nchw(), t5, t6, t7)
    }),
    op!("batch_norm_forward", |[t0, t1, t2, t3, t4, t5, t6, t7],
                               p| {
        ops::batch_norm_forward(t0, t1, t2, p.nchw(), p.f32(), p.f32(), t3, t4, t5, t6, t7)
    }),
    op!("batch_norm_inference", |[t0, t1, t2, t3, t4, t5], p| {
        ops::batch_norm_inference(t0, t1, t2, t3, t4, p.nchw(), p.f32(), t5)
    }),
    op!(
        "bce_with_logits_fused_batched",
        |[t0, t1, t2, t3, t4, t5], p| ops::bce_with_logits_fused_batched(
            t0,
            t1,
            Some(&*t2),
            p.f32(),
            t3,
            t4,
            t5
        )
    ),
    op!("broadcast_in_dim", |[t0], p| ops::broadcast_in_dim(
        t0,
        &p.usizes(),
        &p.usizes()
    )
    .map(drop)),
    op!("build_causal_mask_row", |[t0], p| {
        ops::build_causal_mask_row(p.usize(), p.usize(), t0)
    }),
    op!("build_slot_mask", |[t0, t1], p| ops::build_slot_mask(
        t0,
        p.usize(),
        p.usize(),
        p.usize(),
        t1
    )),
    op!("cast", |[t0, t1], p| ops::cast(t0, t1, p.dtype())),
    op!("causal_conv1d_update", |[t0, t1, t2, t3, t4], p| {
        ops::causal_conv1d_update(t0, t1, Some(&*t2), p.ncl(), p.usize(), p.usize(), t3, t4)
    }),
    op!("clamp", |[t0], p| ops::clamp(t0, p.f32(), p.f32())),
    op!("clamp_between", |[t0, t1, t2], p| ops::clamp_between(
        t0, t1, t2
    )
    .map(drop)),
    op!("clamp_between_out", |[t0, t1, t2, t3], p| {
        ops::clamp_between_out(t0, t1, t2, t3)
    }),
    op!("clamp_out", |[t0, t1], p| ops::clamp_out(
        t0,
        p.f32(),
        p.f32(),
        t1
    )),
    op!("compare", |[t0, t1], p| ops::compare(
        t0,
        t1,
        p.comparison()
    )
    .map(drop)),
    op!("compare_out", |[t0, t1, t2], p| ops::compare_out(
        t0,
        t1,
        p.comparison(),
        t2
    )),
    op!("concat_batched_rows", |[t0, t1, t2], p| {
        ops::concat_batched_rows(&[&*t0, &*t1], t2)
    }),
    op!("concat_nchw_channels", |[t0, t1, t2], p| {
        ops::concat_nchw_channels(&[&*t0, &*t1], p.nchw(), &p.usizes(), t2)
    }),
    op!("concat_nchw_channels_backward", |[t0, t1, t2], p| {
        ops::concat_nchw_channels_backward(t0, p.nchw(), &p.usizes(), &mut [t1, t2])
    }),
    op!("concat_rows", |[t0, t1, t2], p| ops::concat_rows(
        &[&*t0, &*t1],
        t2
    )),
    op!("concatenate", |[t0, t1], p| ops::concatenate(
        &[&*t0, &*t1],
        p.usize()
    )
    .map(drop)),
    op!("conj", |[t0], p| ops::conj(t0).map(drop)),
    op!("conj_out", |[t0, t1], p| ops::conj_out(t0, t1)),
    op!("conv1d_backward_bias", |[t0, t1], p| {
        ops::conv1d_backward_bias(t0, p.ncl(), t1)
    }),
    op!("conv1d_backward_input", |[t0, t1, t2], p| {
        ops::conv1d_backward_input(t0, t1, p.ncl(), p.usize(), &p.conv1d_spec(), t2)
    }),
    op!("conv1d_backward_weight", |[t0, t1, t2], p| {
        ops::conv1d_backward_weight(t0, t1, p.ncl(), p.usize(), &p.conv1d_spec(), t2)
    }),
    op!("conv1d_forward", |[t0, t1, t2, t3], p| {
        ops::conv1d_forward(t0, t1, Some(&*t2), p.ncl(), p.usize(), &p.conv1d_spec(), t3)
    }),
    op!("conv2d_backward_bias", |[t0, t1], p| {
        ops::conv2d_backward_bias(t0, p.nchw(), t1)
    }),
    op!("conv2d_backward_input", |[t0, t1, t2], p| {
        ops::conv2d_backward_input(t0, t1, p.nchw(), p.usize(), &p.conv2d_spec(), t2)
    }),
    op!("conv2d_backward_weight", |[t0, t1, t2], p| {
        ops::conv2d_backward_weight(t0, t1, p.nchw(), p.usize(), &p.conv2d_spec(), t2)
    }),
    op!("conv2d_forward", |[t0, t1, t2, t3], p| {
        ops::conv2d_forward(
            t0,
            t1,
            Some(&*t2),
            p.nchw(),
            p.usize(),
            &p.conv2d_spec(),
            t3,
        )
    }),
    op!("conv2d_int8w_fp16_forward", |[t0, t1, t2, t3, t4], p| {
        let (dims, c_out, spec) = (p.nchw(), p.usize(), p.conv2d_spec());
        ops::conv2d_int8w_fp16_forward(t0, t1, t2, Some(&*t3), dims, c_out, &spec, t4)
    }),
    op!("conv3d_forward", |[t0, t1, t2, t3], p| {
        let dims = (p.usize(), p.usize(), p.usize(), p.usize(), p.usize());
        ops::conv3d_forward(t0, t1, Some(&*t2), dims, p.usize(), &p.conv3d_spec(), t3)
    }),
    op!("conv3d_int8w_fp16_forward", |[t0, t1, t2, t3, t4], p| {
        let dims = (p.usize(), p.usize(), p.usize(), p.usize(), p.usize());
        let (c_out, spec) = (p.usize(), p.conv3d_spec());
        ops::conv3d_int8w_fp16_forward(t0, t1, t2, Some(&*t3), dims, c_out, &spec, t4)
    }),
    op!("conv_transpose1d_backward_bias", |[t0, t1], p| {
        ops::conv_transpose1d_backward_bias(t0, p.ncl(), t1)
    }),
    op!("conv_transpose1d_backward_input", |[t0, t1, t2], p| {
        let (dims, c_out, spec) = (p.ncl(), p.usize(), p.conv1d_spec());
        ops::conv_transpose1d_backward_input(t0, t1, dims, c_out, &spec, p.usize(), t2)
    }),
    op!("conv_transpose1d_backward_weight", |[t0, t1, t2], p| {
        let (dims, c_out, spec) = (p.ncl(), p.usize(), p.conv1d_spec());
        ops::conv_transpose1d_backward_weight(t0, t1, dims, c_out, &spec, p.usize(), t2)
    }),
    op!("conv_transpose1d_forward", |[t0, t1, t2, t3], p| {
        let (dims, c_out, spec) = (p.ncl(), p.usize(), p.conv1d_spec());
        ops::conv_transpose1d_forward(t0, t1, Some(&*t2), dims, c_out, &spec, p.usize(), t3)
    }),
    op!("conv_transpose2d_backward_bias", |[t0, t1], p| {
        ops::conv_transpose2d_backward_bias(t0, p.nchw(), t1)
    }),
    op!("conv_transpose2d_backward_input", |[t0, t1, t2], p| {
        let (dims, c_out, spec) = (p.nchw(), p.usize(), p.conv2d_spec());
        let op = [p.usize(), p.usize()];
        ops::conv_transpose2d_backward_input(t0, t1, dims, c_out, &spec, op, t2)
    }),
    op!("conv_transpose2d_backward_weight", |[t0, t1, t2], p| {
        let (dims, c_out, spec) = (p.nchw(), p.usize(), p.conv2d_spec());
        let op = [p.usize(), p.usize()];
        ops::conv_transpose2d_backward_weight(t0, t1, dims, c_out, &spec, op, t2)
    }),
    op!("conv_transpose2d_forward", |[t0, t1, t2, t3], p| {
        let (dims, c_out, spec) = (p.nchw(), p.usize(), p.conv2d_spec());
        let op = [p.usize(), p.usize()];
        ops::conv_transpose2d_forward(t0, t1, Some(&*t2), dims, c_out, &spec, op, t3)
    }),
    op!("convert", |[t0], p| ops::convert(t0, p.dtype()).map(drop)),
    op!("convex_upsample_forward", |[t0, t1, t2], p| {
        ops::convex_upsample_forward(t0, t1, p.nchw(), p.usize(), t2)
    }),
    op!("copy_d2d_strided", |[t0, t1], p| ops::copy_d2d_strided(
        t0,
        p.usize(),
        p.usize(),
        p.usize(),
        p.usize(),
        p.usize(),
        p.usize(),
        t1
    )),
    op!("copy_into", |[t0, t1], p| ops::copy_into(t0, t1)),
    op!("cos", |[t0], p| ops::cos(t0).map(drop)),
    op!("cos_backward", |[t0, t1, t2], p| ops::cos_backward(
        t0, t1, t2
    )),
    op!("cos_forward", |[t0, t1], p| ops::cos_forward(t0, t1)),
    op!(
        "cross_attention_backward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15, t16, t17, t18],
         p| ops::cross_attention_backward(
            t0,
            t1,
            t2,
            &caches([t3, t4, t5, t6, t7]),
            Projections {
                wq: t8,
                wk: t9,
                wv: t10,
                wo: t11
            },
            Some(&*t12),
            p.usize(),
            t13,
            t14,
            ProjectionGrads {
                dwq: t15,
                dwk: t16,
                dwv: t17,
                dwo: t18
            }
        )
    ),
    op!(
        "cross_attention_forward",
        |[t0, t1, t2, t3, t4, t5, t6, t7], p| ops::cross_attention_forward(
            t0,
            t1,
            Projections {
                wq: t2,
                wk: t3,
                wv: t4,
                wo: t5
            },
            Some(&*t6),
            p.usize(),
            t7
        )
    ),
    op!(
        "cross_attention_forward_train",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12], p| {
            ops::cross_attention_forward_train(
                t0,
                t1,
                Projections {
                    wq: t2,
                    wk: t3,
                    wv: t4,
                    wo: t5,
                },
                Some(&*t6),
                p.usize(),
                &mut caches([t7, t8, t9, t10, t11]),
                t12,
            )
        }
    ),
    op!(
        "cross_attention_forward_with_attn",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9], p| ops::cross_attention_forward_with_attn(
            t0,
            t1,
            Projections {
                wq: t2,
                wk: t3,
                wv: t4,
                wo: t5
            },
            Some(&*t6),
            Some(&*t7),
            p.usize(),
            t8,
            t9
        )
    ),
    op!("deform_conv2d_forward", |[t0, t1, t2, t3, t4, t5], p| {
        let (dims, c_out, spec) = (p.nchw(), p.usize(), p.conv2d_spec());
        let g = p.usize();
        ops::deform_conv2d_forward(
            t0,
            t1,
            Some(&*t2),
            t3,
            Some(&*t4),
            dims,
            c_out,
            &spec,
            g,
            t5,
        )
    }),
    op!("dequant_q4k_to_fp16", |[t0, t1], p| {
        ops::dequant_q4k_to_fp16(t0, t1)
    }),
    op!("dequant_q6k_to_fp16", |[t0, t1], p| {
        ops::dequant_q6k_to_fp16(t0, t1)
    }),
    op!("dequant_q8_0_to_fp16", |[t0, t1], p| {
        ops::dequant_q8_0_to_fp16(t0, t1)
    }),
    op!("dequantize", |[t0, t1], p| ops::dequantize(
        t0,
        p.dtype(),
        t1
    )),
    op!("div", |[t0, t1], p| ops::div(t0, t1).map(drop)),
    op!("div_out", |[t0, t1, t2], p| ops::div_out(t0, t1, t2)),
    op!("div_scalar", |[t0], p| ops::div_scalar(t0, p.f32())
        .map(drop)),
    op!("div_scalar_out", |[t0, t1], p| ops::div_scalar_out(
        t0,
        p.f32(),
        t1
    )),
    op!("downsample_avg_2x", |[t0, t1], p| ops::downsample_avg_2x(
        t0,
        p.nchw(),
        t1
    )),
    op!("downsample_avg_2x_backward", |[t0, t1], p| {
        ops::downsample_avg_2x_backward(t0, p.nchw(), t1)
    }),
    op!("dynamic_slice", |[t0, t1], p| ops::dynamic_slice(
        t0,
        t1,
        &p.usizes()
    )
    .map(drop)),
    op!("elu_backward", |[t0, t1, t2], p| ops::elu_backward(
        t0,
        t1,
        p.f32(),
        t2
    )),
    op!("elu_forward", |[t0, t1], p| ops::elu_forward(
        t0,
        p.f32(),
        t1
    )),
    op!("embed_diagonal", |[t0], p| ops::embed_diagonal(
        t0,
        p.usize(),
        p.usize()
    )
    .map(drop)),
    op!("embedding_lookup_backward", |[t0, t1, t2], p| {
        ops::embedding_lookup_backward(t0, t1, t2)
    }),
    op!("embedding_lookup_forward", |[t0, t1, t2], p| {
        ops::embedding_lookup_forward(t0, t1, t2)
    }),
    op!("exp", |[t0], p| ops::exp(t0).map(drop)),
    op!("exp_backward", |[t0, t1, t2], p| ops::exp_backward(
        t0, t1, t2
    )),
    op!("exp_forward", |[t0, t1], p| ops::exp_forward(t0, t1)),
    op!("expm1", |[t0], p| ops::expm1(t0).map(drop)),
    op!("expm1_out", |[t0, t1], p| ops::expm1_out(t0, t1)),
    op!("extract_diagonal", |[t0], p| ops::extract_diagonal(
        t0,
        p.usize(),
        p.usize()
    )
    .map(drop)),
    op!("fill", |[t0], p| ops::fill(t0, p.f32())),
    op!(
        "flash_attention_backward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8], p| ops::flash_attention_backward(
            t0,
            t1,
            t2,
            t3,
            t4,
            Some(&*t5),
            p.usize(),
            p.bool(),
            t6,
            t7,
            t8
        )
    ),
    op!("flash_attention_decode", |[t0, t1, t2, t3], p| {
        ops::flash_attention_decode(
            t0,
            t1,
            t2,
            p.usize(),
            p.usize(),
            p.usize(),
            p.f32(),
            p.usize(),
            t3,
        )
    }),
    op!(
        "flash_attention_decode_masked",
        |[t0, t1, t2, t3, t4], p| ops::flash_attention_decode_masked(
            t0,
            t1,
            t2,
            t3,
            p.usize(),
            p.usize(),
            p.f32(),
            p.usize(),
            t4
        )
    ),
    op!("flash_attention_forward", |[t0, t1, t2, t3, t4], p| {
        ops::flash_attention_forward(t0, t1, t2, Some(&*t3), p.usize(), p.bool(), t4)
    }),
    op!("flash_attention_gqa_forward", |[t0, t1, t2, t3, t4], p| {
        ops::flash_attention_gqa_forward(t0, t1, t2, Some(&*t3), p.usize(), p.usize(), p.bool(), t4)
    }),
    op!(
        "flash_attention_project_kv",
        |[t0, t1, t2, t3, t4, t5, t6], p| ops::flash_attention_project_kv(
            t0,
            t1,
            Some(&*t2),
            t3,
            Some(&*t4),
            t5,
            t6
        )
    ),
    op!(
        "flash_attention_project_kv_int8w_fp16",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8], p| ops::flash_attention_project_kv_int8w_fp16(
            t0,
            (&*t1, &*t2, Some(&*t3)),
            (&*t4, &*t5, Some(&*t6)),
            t7,
            t8
        )
    ),
    op!(
        "flash_attention_q_with_kv_cached_forward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8], p| ops::flash_attention_q_with_kv_cached_forward(
            t0,
            t1,
            t2,
            t3,
            Some(&*t4),
            t5,
            Some(&*t6),
            Some(&*t7),
            p.usize(),
            p.bool(),
            t8
        )
    ),
    op!(
        "flash_attention_q_with_kv_cached_int8w_fp16",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10], p| {
            ops::flash_attention_q_with_kv_cached_int8w_fp16(
                t0,
                t1,
                t2,
                (&*t3, &*t4, Some(&*t5)),
                (&*t6, &*t7, Some(&*t8)),
                Some(&*t9),
                p.usize(),
                p.bool(),
                t10,
            )
        }
    ),
    op!(
        "flash_attention_qkvo_backward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15, t16, t17, t18, t19, t20, t21],
         p| ops::flash_attention_qkvo_backward(
            t0,
            Some(&*t1),
            t2,
            Some(&*t3),
            t4,
            Some(&*t5),
            t6,
            Some(&*t7),
            t8,
            Some(&*t9),
            Some(&*t10),
            p.usize(),
            p.bool(),
            t11,
            QkvoGrads {
                dx: t12,
                dctx: Some(t13),
                dwq: t14,
                dbq: Some(t15),
                dwk: t16,
                dbk: Some(t17),
                dwv: t18,
                dbv: Some(t19),
                dwo: t20,
                dbo: Some(t21)
            }
        )
    ),
    op!(
        "flash_attention_qkvo_forward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11], p| ops::flash_attention_qkvo_forward(
            t0,
            Some(&*t1),
            (&*t2, Some(&*t3)),
            (&*t4, Some(&*t5)),
            (&*t6, Some(&*t7)),
            (&*t8, Some(&*t9)),
            Some(&*t10),
            p.usize(),
            p.bool(),
            t11
        )
    ),
    op!(
        "flash_attention_qkvo_int8w_fp16",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15], p| {
            ops::flash_attention_qkvo_int8w_fp16(
                t0,
                Some(&*t1),
                (&*t2, &*t3, Some(&*t4)),
                (&*t5, &*t6, Some(&*t7)),
                (&*t8, &*t9, Some(&*t10)),
                (&*t11, &*t12, Some(&*t13)),
                Some(&*t14),
                p.usize(),
                p.bool(),
                t15,
            )
        }
    ),
    op!(
        "flash_attention_varlen_backward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9], p| ops::flash_attention_varlen_backward(
            t0,
            t1,
            t2,
            t3,
            t4,
            t5,
            t6,
            p.usize(),
            p.usize(),
            p.usize(),
            p.usize(),
            p.usize(),
            p.bool(),
            t7,
            t8,
            t9
        )
    ),
    op!(
        "flash_attention_varlen_forward",
        |[t0, t1, t2, t3, t4, t5], p| ops::flash_attention_varlen_forward(
            t0,
            t1,
            t2,
            t3,
            t4,
            p.usize(),
            p.usize(),
            p.usize(),
            p.usize(),
            p.bool(),
            t5
        )
    ),
    op!(
        "flash_attention_windowed_forward",
        |[t0, t1, t2, t3, t4], p| ops::flash_attention_windowed_forward(
            t0,
            t1,
            t2,
            Some(&*t3),
            p.usize(),
            p.usize(),
            t4
        )
    ),
    op!("gather", |[t0, t1], p| ops::gather(
        t0,
        t1,
        &p.gather_dims(),
        &p.usizes()
    )
    .map(drop)),
    op!("gather_rows", |[t0, t1, t2], p| ops::gather_rows(
        t0, t1, t2
    )),
    op!("geglu_backward", |[t0, t1, t2], p| ops::geglu_backward(
        t0, t1, t2
    )),
    op!("geglu_exact_backward", |[t0, t1, t2], p| {
        ops::geglu_exact_backward(t0, t1, t2)
    }),
    op!("geglu_exact_forward", |[t0, t1], p| {
        ops::geglu_exact_forward(t0, t1)
    }),
    op!("geglu_forward", |[t0, t1], p| ops::geglu_forward(t0, t1)),
    op!("gelu", |[t0], p| ops::gelu(t0).map(drop)),
    op!("gelu_backward", |[t0, t1, t2], p| ops::gelu_backward(
        t0, t1, t2
    )),
    op!("gelu_exact", |[t0], p| ops::gelu_exact(t0).map(drop)),
    op!("gelu_exact_backward", |[t0, t1, t2], p| {
        ops::gelu_exact_backward(t0, t1, t2)
    }),
    op!("gelu_exact_forward", |[t0, t1], p| ops::gelu_exact_forward(
        t0, t1
    )),
    op!("gelu_forward", |[t0, t1], p| ops::gelu_forward(t0, t1)),
    op!("group_norm_backward", |[t0, t1, t2, t3, t4, t5], p| {
        ops::group_norm_backward(t0, t1, t2, p.nchw(), p.usize(), p.f32(), t3, t4, t5)
    }),
    op!("group_norm_forward", |[t0, t1, t2, t3], p| {
        ops::group_norm_forward(t0, t1, t2, p.nchw(), p.usize(), p.f32(), t3)
    }),
    op!("image_normalize", |[t0, t1, t2, t3], p| {
        ops::image_normalize(t0, t1, t2, p.nchw(), t3)
    }),
    op!("image_u8_to_f32_nhwc_to_nchw", |[t0], p| {
        let dims = p.nchw();
        let len = [dims.1, dims.2, dims.3]
            .iter()
            .fold(dims.0, |a, &b| a.saturating_mul(b));
        let src = vec![0u8; len.min(1 << 16)];
        ops::image_u8_to_f32_nhwc_to_nchw(&src, dims, p.f32(), p.f32(), t0)
    }),
    op!("interp2d_align_corners_forward", |[t0, t1], p| {
        ops::interp2d_align_corners_forward(
            t0,
            p.nchw(),
            (p.usize(), p.usize()),
            p.resize_mode(),
            t1,
        )
    }),
    op!("interp2d_backward", |[t0, t1], p| {
        ops::interp2d_backward(t0, p.nchw(), (p.usize(), p.usize()), p.resize_mode(), t1)
    }),
    op!("interp2d_forward", |[t0, t1], p| {
        ops::interp2d_forward(t0, p.nchw(), (p.usize(), p.usize()), p.resize_mode(), t1)
    }),
    op!("kv_cache_append", |[t0, t1, t2, t3], p| {
        ops::kv_cache_append(t0, t1, p.usize(), t2, t3)
    }),
    op!("l2_norm_backward", |[t0, t1, t2], p| ops::l2_norm_backward(
        t0,
        t1,
        p.usize(),
        p.usize(),
        p.f32(),
        t2
    )),
    op!("l2_norm_forward", |[t0, t1], p| ops::l2_norm_forward(
        t0,
        p.usize(),
        p.usize(),
        p.f32(),
        t1
    )),
    op!("l2_normalize_nchw_forward", |[t0, t1], p| {
        ops::l2_normalize_nchw_forward(t0, p.nchw(), p.f32(), t1)
    }),
    op!("layernorm_backward", |[t0, t1, t2, t3, t4, t5], p| {
        ops::layernorm_backward(t0, t1, t2, p.f32(), t3, t4, t5)
    }),
    op!(
        "layernorm_backward_batched_with_caches",
        |[t0, t1, t2, t3, t4, t5, t6], p| ops::layernorm_backward_batched_with_caches(
            t0, t1, t2, t3, t4, t5, t6
        )
    ),
    op!("layernorm_forward", |[t0, t1, t2, t3, t4], p| {
        ops::layernorm_forward(t0, t1, t2, p.f32(), t3, t4).map(drop)
    }),
    op!(
        "layernorm_forward_batched_with_caches",
        |[t0, t1, t2, t3, t4, t5, t6], p| ops::layernorm_forward_batched_with_caches(
            t0,
            t1,
            t2,
            p.f32(),
            t3,
            t4,
            t5,
            t6
        )
    ),
    op!(
        "layernorm_forward_inference_batched",
        |[t0, t1, t2, t3], p| ops::layernorm_forward_inference_batched(t0, t1, t2, p.f32(), t3)
    ),
    op!(
        "layernorm_forward_inference_batched_fp16",
        |[t0, t1, t2, t3], p| ops::layernorm_forward_inference_batched_fp16(
            t0,
            t1,
            t2,
            p.f32(),
            t3
        )
    ),
    op!("hard_sigmoid_forward", |[t0, t1], p| {
        ops::hard_sigmoid_forward(t0, p.f32(), p.f32(), t1)
    }),
    op!("hardswish_forward", |[t0, t1], p| ops::hardswish_forward(
        t0, t1
    )),
    op!("leaky_relu_backward", |[t0, t1, t2], p| {
        ops::leaky_relu_backward(t0, t1, p.f32(), t2)
    }),
    op!("leaky_relu_forward", |[t0, t1], p| ops::leaky_relu_forward(
        t0,
        p.f32(),
        t1
    )),
    op!("linear_backward", |[t0, t1, t2, t3, t4, t5], p| {
        ops::linear_backward(t0, t1, t2, t3, t4, t5)
    }),
    op!("linear_backward_batched", |[t0, t1, t2, t3, t4, t5], p| {
        ops::linear_backward_batched(t0, t1, t2, t3, t4, t5)
    }),
    op!("linear_forward", |[t0, t1, t2, t3], p| ops::linear_forward(
        t0, t1, t2, t3
    )),
    op!("linear_forward_batched", |[t0, t1, t2, t3], p| {
        ops::linear_forward_batched(t0, Some(&*t1), t2, t3)
    }),
    op!("linear_forward_batched_fp16", |[t0, t1, t2, t3], p| {
        ops::linear_forward_batched_fp16(t0, Some(&*t1), t2, t3)
    }),
    op!("linear_forward_batched_fp16_act", |[t0, t1, t2, t3], p| {
        ops::linear_forward_batched_fp16_act(t0, Some(&*t1), t2, t3, p.act())
    }),
    op!(
        "linear_forward_batched_int8w_fp16",
        |[t0, t1, t2, t3, t4], p| ops::linear_forward_batched_int8w_fp16(
            t0,
            t1,
            Some(&*t2),
            t3,
            t4
        )
    ),
    op!("linear_forward_batched_q4k_fp16", |[t0, t1, t2, t3], p| {
        ops::linear_forward_batched_q4k_fp16(t0, Some(&*t1), t2, t3)
    }),
    op!("linear_forward_batched_q6k_fp16", |[t0, t1, t2, t3], p| {
        ops::linear_forward_batched_q6k_fp16(t0, Some(&*t1), t2, t3)
    }),
    op!("linear_forward_batched_q8_0_fp16", |[t0, t1, t2, t3], p| {
        ops::linear_forward_batched_q8_0_fp16(t0, Some(&*t1), t2, t3)
    }),
    op!("linear_forward_q4k_fp16", |[t0, t1, t2, t3], p| {
        ops::linear_forward_q4k_fp16(t0, Some(&*t1), t2, t3)
    }),
    op!("linear_forward_q6k_fp16", |[t0, t1, t2, t3], p| {
        ops::linear_forward_q6k_fp16(t0, Some(&*t1), t2, t3)
    }),
    op!("linear_forward_q8_0_fp16", |[t0, t1, t2, t3], p| {
        ops::linear_forward_q8_0_fp16(t0, Some(&*t1), t2, t3)
    }),
    op!("log", |[t0], p| ops::log(t0).map(drop)),
    op!("log1p", |[t0], p| ops::log1p(t0).map(drop)),
    op!("log1p_out", |[t0, t1], p| ops::log1p_out(t0, t1)),
    op!("log_backward", |[t0, t1, t2], p| ops::log_backward(
        t0, t1, t2
    )),
    op!("log_forward", |[t0, t1], p| ops::log_forward(t0, t1)),
    op!("masked_mean_pool_backward", |[t0, t1, t2], p| {
        ops::masked_mean_pool_backward(t0, Some(&*t1), p.usize(), t2)
    }),
    op!("masked_mean_pool_forward", |[t0, t1, t2], p| {
        ops::masked_mean_pool_forward(t0, Some(&*t1), t2)
    }),
    op!("matmul", |[t0, t1, t2], p| ops::matmul(t0, t1, t2)),
    op!("matmul_abt", |[t0, t1, t2, t3], p| ops::matmul_abt(
        t0,
        t1,
        t2,
        p.abt_spec(),
        Some(&*t3),
        p.act()
    )),
    op!("matmul_backward", |[t0, t1, t2, t3, t4], p| {
        ops::matmul_backward(t0, t1, t2, t3, t4)
    }),
    op!("matmul_int8w_fp16", |[t0, t1, t2, t3], p| {
        ops::matmul_int8w_fp16(t0, t1, t2, t3)
    }),
    op!("max_pool2d_backward", |[t0, t1, t2], p| {
        ops::max_pool2d_backward(t0, t1, p.nchw(), &p.pool2d_spec(), t2)
    }),
    op!("max_pool2d_forward", |[t0, t1, t2], p| {
        ops::max_pool2d_forward(t0, p.nchw(), &p.pool2d_spec(), t1, t2)
    }),
    op!("maximum", |[t0, t1], p| ops::maximum(t0, t1).map(drop)),
    op!("maximum_out", |[t0, t1, t2], p| ops::maximum_out(
        t0, t1, t2
    )),
    op!(
        "mha_backward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15, t16, t17, t18, t19, t20],
         p| ops::mha_backward(
            t0,
            t1,
            &caches([t2, t3, t4, t5, t6]),
            Projections {
                wq: t7,
                wk: t8,
                wv: t9,
                wo: t10
            },
            Some(&*t11),
            p.usize(),
            t12,
            ProjectionGrads {
                dwq: t13,
                dwk: t14,
                dwv: t15,
                dwo: t16
            },
            BiasGrads {
                dbq: Some(t17),
                dbk: Some(t18),
                dbv: Some(t19),
                dbo: Some(t20)
            }
        )
    ),
    op!(
        "mha_forward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15], p| {
            ops::mha_forward(
                t0,
                Projections {
                    wq: t1,
                    wk: t2,
                    wv: t3,
                    wo: t4,
                },
                ProjectionBiases {
                    bq: Some(&*t5),
                    bk: Some(&*t6),
                    bv: Some(&*t7),
                    bo: Some(&*t8),
                },
                Some(&*t9),
                p.usize(),
                &mut caches([t10, t11, t12, t13, t14]),
                t15,
            )
        }
    ),
    op!("minimum", |[t0, t1], p| ops::minimum(t0, t1).map(drop)),
    op!("minimum_out", |[t0, t1, t2], p| ops::minimum_out(
        t0, t1, t2
    )),
    op!("mse_vec_backward", |[t0, t1, t2], p| ops::mse_vec_backward(
        t0, t1, t2
    )),
    op!("mse_vec_forward", |[t0, t1], p| ops::mse_vec_forward(
        t0, t1
    )
    .map(drop)),
    op!("mse_vec_per_sample", |[t0, t1, t2, t3], p| {
        ops::mse_vec_per_sample(t0, t1, t2, t3)
    }),
    op!("mul", |[t0, t1], p| ops::mul(t0, t1).map(drop)),
    op!("mul_inplace", |[t0, t1], p| ops::mul_inplace(t0, t1)),
    op!("mul_out", |[t0, t1, t2], p| ops::mul_out(t0, t1, t2)),
    op!("mul_scalar", |[t0], p| ops::mul_scalar(t0, p.f32())
        .map(drop)),
    op!("mul_scalar_out", |[t0, t1], p| ops::mul_scalar_out(
        t0,
        p.f32(),
        t1
    )),
    op!("nchw_to_sequence", |[t0, t1], p| ops::nchw_to_sequence(
        t0,
        p.nchw(),
        t1
    )),
    op!("neg", |[t0], p| ops::neg(t0).map(drop)),
    op!("neg_out", |[t0, t1], p| ops::neg_out(t0, t1)),
    op!("pad", |[t0], p| ops::pad(
        t0,
        &p.i64s(),
        &p.i64s(),
        &p.u64s()
    )
    .map(drop)),
    op!("pad1d_backward", |[t0, t1], p| {
        ops::pad1d_backward(t0, p.ncl(), (p.usize(), p.usize()), p.pad_mode(), t1)
    }),
    op!("pad1d_forward", |[t0, t1], p| {
        ops::pad1d_forward(t0, p.ncl(), (p.usize(), p.usize()), p.pad_mode(), t1)
    }),
    op!("pad2d_backward", |[t0, t1], p| {
        ops::pad2d_backward(t0, p.nchw(), p.pads4(), p.pad_mode(), t1)
    }),
    op!("pad2d_forward", |[t0, t1], p| {
        ops::pad2d_forward(t0, p.nchw(), p.pads4(), p.pad_mode(), t1)
    }),
    op!("patch_unpack_forward", |[t0, t1], p| {
        ops::patch_unpack_forward(
            t0,
            (p.usize(), p.usize()),
            p.usize(),
            (p.usize(), p.usize()),
            p.bool(),
            t1,
        )
    }),
    op!("pixel_norm_backward", |[t0, t1, t2], p| {
        ops::pixel_norm_backward(t0, t1, p.f32(), t2)
    }),
    op!("pixel_norm_forward", |[t0, t1], p| ops::pixel_norm_forward(
        t0,
        p.f32(),
        t1
    )),
    op!("pixel_shuffle_upsample_2x_forward", |[t0, t1], p| {
        ops::pixel_shuffle_upsample_2x_forward(t0, p.nchw(), p.usize(), t1)
    }),
    op!("pow", |[t0, t1], p| ops::pow(t0, t1).map(drop)),
    op!("pow_out", |[t0, t1, t2], p| ops::pow_out(t0, t1, t2)),
    op!("quant_linear", |[t0, t1, t2, t3], p| ops::quant_linear(
        t0,
        Some(&*t1),
        t2,
        p.act(),
        t3
    )),
    op!("quick_gelu", |[t0], p| ops::quick_gelu(t0).map(drop)),
    op!("quick_gelu_backward", |[t0, t1, t2], p| {
        ops::quick_gelu_backward(t0, t1, t2)
    }),
    op!("quick_gelu_forward", |[t0, t1], p| ops::quick_gelu_forward(
        t0, t1
    )),
    op!("rand_bernoulli", |[t0], p| ops::rand_bernoulli(
        p.f32(),
        p.u64(),
        p.u64(),
        t0
    )),
    op!("rand_uniform", |[t0], p| ops::rand_uniform(
        p.u64(),
        p.u64(),
        t0
    )),
    op!("randn", |[t0], p| ops::randn(p.u64(), p.u64(), t0)),
    op!("randn_truncated", |[t0], p| ops::randn_truncated(
        p.f32(),
        p.f32(),
        p.u64(),
        p.u64(),
        t0
    )),
    op!("reduce_max", |[t0], p| ops::reduce_max(t0, p.usize())
        .map(drop)),
    op!("reduce_max_out", |[t0, t1], p| ops::reduce_max_out(
        t0,
        p.usize(),
        t1
    )),
    op!("reduce_min", |[t0], p| ops::reduce_min(t0, p.usize())
        .map(drop)),
    op!("reduce_min_out", |[t0, t1], p| ops::reduce_min_out(
        t0,
        p.usize(),
        t1
    )),
    op!("reduce_prod", |[t0], p| ops::reduce_prod(t0, p.usize())
        .map(drop)),
    op!("reduce_prod_out", |[t0, t1], p| ops::reduce_prod_out(
        t0,
        p.usize(),
        t1
    )),
    op!("reduce_sum", |[t0], p| ops::reduce_sum(t0, p.usize())
        .map(drop)),
    op!("reduce_sum_out", |[t0, t1], p| ops::reduce_sum_out(
        t0,
        p.usize(),
        t1
    )),
    op!("relu", |[t0], p| ops::relu(t0).map(drop)),
    op!("relu_backward", |[t0, t1, t2], p| ops::relu_backward(
        t0, t1, t2
    )),
    op!("relu_backward_batched", |[t0, t1, t2], p| {
        ops::relu_backward_batched(t0, t1, t2)
    }),
    op!("relu_forward", |[t0, t1], p| ops::relu_forward(t0, t1)),
    op!("relu_forward_batched", |[t0, t1], p| {
        ops::relu_forward_batched(t0, t1)
    }),
    op!("resample1d_backward", |[t0, t1], p| {
        ops::resample1d_backward(t0, p.ncl(), p.usize(), p.resize_mode(), t1)
    }),
    op!("resample1d_forward", |[t0, t1], p| {
        ops::resample1d_forward(t0, p.ncl(), p.usize(), p.resize_mode(), t1)
    }),
    op!("reverse", |[t0], p| ops::reverse(t0, &p.usizes()).map(drop)),
    op!("rms_norm_backward", |[t0, t1, t2, t3, t4], p| {
        ops::rms_norm_backward(t0, t1, t2, p.f32(), t3, t4)
    }),
    op!("rms_norm_forward", |[t0, t1, t2], p| ops::rms_norm_forward(
        t0,
        t1,
        p.f32(),
        t2
    )),
    op!("rope_apply", |[t0, t1, t2, t3], p| ops::rope_apply(
        t0,
        t1,
        t2,
        p.usize(),
        p.usize(),
        p.rope_layout(),
        t3
    )),
    op!("rope_apply_backward", |[t0, t1, t2, t3], p| {
        ops::rope_apply_backward(t0, t1, t2, p.usize(), p.usize(), p.rope_layout(), t3)
    }),
    op!(
        "rope_apply_mrope",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10], p| ops::rope_apply_mrope(
            t0,
            [
                MropeTables { cos: t1, sin: t2 },
                MropeTables { cos: t3, sin: t4 },
                MropeTables { cos: t5, sin: t6 }
            ],
            [&*t7, &*t8, &*t9],
            p.usize(),
            p.usize(),
            [p.usize(), p.usize(), p.usize()],
            p.rope_layout(),
            t10
        )
    ),
    op!("rope_apply_perhead", |[t0, t1, t2, t3], p| {
        ops::rope_apply_perhead(t0, t1, t2, p.usize(), p.usize(), p.rope_layout(), t3)
    }),
    op!("rope_backward", |[t0, t1], p| ops::rope_backward(
        t0,
        p.usize(),
        p.usize(),
        p.usize(),
        &p.rope_params(),
        t1
    )),
    op!("rope_forward", |[t0, t1], p| ops::rope_forward(
        t0,
        p.usize(),
        p.usize(),
        p.usize(),
        &p.rope_params(),
        t1
    )),
    op!("round", |[t0], p| ops::round(t0).map(drop)),
    op!("round_backward", |[t0, t1], p| ops::round_backward(t0, t1)),
    op!("round_forward", |[t0, t1], p| ops::round_forward(t0, t1)),
    op!("rows_count_above", |[t0, t1], p| ops::rows_count_above(
        t0,
        p.f32(),
        p.f32(),
        t1
    )),
    op!("rsqrt", |[t0], p| ops::rsqrt(t0).map(drop)),
    op!("rsqrt_backward", |[t0, t1, t2], p| ops::rsqrt_backward(
        t0, t1, t2
    )),
    op!("rsqrt_forward", |[t0, t1], p| ops::rsqrt_forward(t0, t1)),
    op!("sample_logits", |[t0, t1], p| ops::sample_logits(
        t0,
        p.f32(),
        p.i32(),
        p.f32(),
        p.u64(),
        p.u64(),
        t1
    )),
    op!("sample_logits_into", |[t0, t1, t2, t3], p| {
        ops::sample_logits_into(t0, p.f32(), p.i32(), p.f32(), p.u64(), t1, t2, t3)
    }),
    op!("scale_inplace", |[t0], p| ops::scale_inplace(t0, p.f32())),
    op!("scatter_add", |[t0, t1, t2], p| ops::scatter_add(
        t0,
        t1,
        t2,
        &p.scatter_dims()
    )
    .map(drop)),
    op!("scatter_rows", |[t0, t1, t2], p| ops::scatter_rows(
        t0, t1, t2
    )),
    op!("scatter_rows_add", |[t0, t1, t2], p| ops::scatter_rows_add(
        t0,
        t1,
        p.usize(),
        t2
    )),
    op!("select", |[t0, t1, t2], p| ops::select(t0, t1, t2)
        .map(drop)),
    op!("select_out", |[t0, t1, t2, t3], p| ops::select_out(
        t0, t1, t2, t3
    )),
    op!(
        "self_attention_backward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15, t16], p| {
            ops::self_attention_backward(
                t0,
                t1,
                &caches([t2, t3, t4, t5, t6]),
                Projections {
                    wq: t7,
                    wk: t8,
                    wv: t9,
                    wo: t10,
                },
                Some(&*t11),
                p.usize(),
                t12,
                ProjectionGrads {
                    dwq: t13,
                    dwk: t14,
                    dwv: t15,
                    dwo: t16,
                },
            )
        }
    ),
    op!(
        "self_attention_bias_forward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11], p| ops::self_attention_bias_forward(
            t0,
            Projections {
                wq: t1,
                wk: t2,
                wv: t3,
                wo: t4
            },
            ProjectionBiases {
                bq: Some(&*t5),
                bk: Some(&*t6),
                bv: Some(&*t7),
                bo: Some(&*t8)
            },
            Some(&*t9),
            Some(&*t10),
            p.usize(),
            p.f32(),
            t11
        )
    ),
    op!(
        "self_attention_bias_int8w_fp16",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11], p| ops::self_attention_bias_int8w_fp16(
            t0,
            Int8Projections {
                wq: t1,
                sq: t2,
                wk: t3,
                sk: t4,
                wv: t5,
                sv: t6,
                wo: t7,
                so: t8
            },
            Some(&*t9),
            Some(&*t10),
            p.usize(),
            p.f32(),
            t11
        )
    ),
    op!(
        "self_attention_decomposed_rel_pos_forward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11], p| {
            ops::self_attention_decomposed_rel_pos_forward(
                t0,
                Projections {
                    wq: t1,
                    wk: t2,
                    wv: t3,
                    wo: t4,
                },
                ProjectionBiases {
                    bq: Some(&*t5),
                    bk: Some(&*t6),
                    bv: Some(&*t7),
                    bo: Some(&*t8),
                },
                t9,
                t10,
                p.usize(),
                (p.usize(), p.usize()),
                p.f32(),
                t11,
            )
        }
    ),
    op!(
        "self_attention_decomposed_rel_pos_windowed_forward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11], p| {
            ops::self_attention_decomposed_rel_pos_windowed_forward(
                t0,
                Projections {
                    wq: t1,
                    wk: t2,
                    wv: t3,
                    wo: t4,
                },
                ProjectionBiases {
                    bq: Some(&*t5),
                    bk: Some(&*t6),
                    bv: Some(&*t7),
                    bo: Some(&*t8),
                },
                t9,
                t10,
                p.usize(),
                (p.usize(), p.usize()),
                p.usize(),
                p.f32(),
                t11,
            )
        }
    ),
    op!(
        "self_attention_forward",
        |[t0, t1, t2, t3, t4, t5, t6], p| ops::self_attention_forward(
            t0,
            Projections {
                wq: t1,
                wk: t2,
                wv: t3,
                wo: t4
            },
            Some(&*t5),
            p.usize(),
            t6
        )
    ),
    op!(
        "self_attention_forward_train",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11], p| ops::self_attention_forward_train(
            t0,
            Projections {
                wq: t1,
                wk: t2,
                wv: t3,
                wo: t4
            },
            Some(&*t5),
            p.usize(),
            &mut caches([t6, t7, t8, t9, t10]),
            t11
        )
    ),
    op!("sequence_to_nchw", |[t0, t1], p| ops::sequence_to_nchw(
        t0,
        p.nchw(),
        t1
    )),
    op!("sigmoid", |[t0], p| ops::sigmoid(t0).map(drop)),
    op!("sigmoid_backward", |[t0, t1, t2], p| ops::sigmoid_backward(
        t0, t1, t2
    )),
    op!("sigmoid_forward", |[t0, t1], p| ops::sigmoid_forward(
        t0, t1
    )),
    op!("sign", |[t0], p| ops::sign(t0).map(drop)),
    op!("sign_out", |[t0, t1], p| ops::sign_out(t0, t1)),
    op!("silu", |[t0], p| ops::silu(t0).map(drop)),
    op!("silu_backward", |[t0, t1, t2], p| ops::silu_backward(
        t0, t1, t2
    )),
    op!("silu_forward", |[t0, t1], p| ops::silu_forward(t0, t1)),
    op!("sin", |[t0], p| ops::sin(t0).map(drop)),
    op!("sin_backward", |[t0, t1, t2], p| ops::sin_backward(
        t0, t1, t2
    )),
    op!("sin_forward", |[t0, t1], p| ops::sin_forward(t0, t1)),
    op!("slice", |[t0], p| ops::slice(
        t0,
        &p.usizes(),
        &p.usizes(),
        &p.usizes()
    )
    .map(drop)),
    op!("slice2d_backward", |[t0, t1], p| {
        ops::slice2d_backward(
            t0,
            p.nchw(),
            (p.usize(), p.usize()),
            (p.usize(), p.usize()),
            t1,
        )
    }),
    op!("slice2d_forward", |[t0, t1], p| {
        ops::slice2d_forward(
            t0,
            p.nchw(),
            (p.usize(), p.usize()),
            (p.usize(), p.usize()),
            t1,
        )
    }),
    op!("snake_backward", |[t0, t1, t2, t3, t4, t5, t6], p| {
        ops::snake_backward(
            t0,
            t1,
            Some(&*t2),
            t3,
            (p.usize(), p.usize(), p.usize()),
            t4,
            t5,
            Some(t6),
        )
    }),
    op!("snake_forward", |[t0, t1, t2, t3], p| ops::snake_forward(
        t0,
        t1,
        Some(&*t2),
        (p.usize(), p.usize(), p.usize()),
        t3
    )),
    op!("softmax_backward", |[t0, t1, t2], p| ops::softmax_backward(
        t0, t1, t2
    )),
    op!("softmax_forward", |[t0, t1, t2], p| ops::softmax_forward(
        t0,
        Some(&*t1),
        t2
    )),
    op!("softmax_rows", |[t0], p| ops::softmax_rows(t0).map(drop)),
    op!("softmax_rows_forward", |[t0, t1], p| {
        ops::softmax_rows_forward(t0, t1)
    }),
    op!("softmax_xent", |[t0, t1, t2, t3, t4], p| ops::softmax_xent(
        t0,
        t1,
        Some(&*t2),
        t3,
        t4
    )
    .map(drop)),
    op!("softmax_xent_fused", |[t0, t1, t2, t3, t4], p| {
        ops::softmax_xent_fused(t0, t1, Some(&*t2), t3, t4).map(drop)
    }),
    op!(
        "softmax_xent_fused_batched",
        |[t0, t1, t2, t3, t4, t5], p| ops::softmax_xent_fused_batched(
            t0,
            t1,
            Some(&*t2),
            &p.usizes(),
            t3,
            t4,
            t5
        )
    ),
    op!("spatial_merge_2x2_forward", |[t0, t1], p| {
        ops::spatial_merge_2x2_forward(t0, p.nchw(), p.bool(), t1)
    }),
    op!("split_rows", |[t0, t1, t2], p| ops::split_rows(
        t0,
        &mut [t1, t2]
    )),
    op!("sqrt", |[t0], p| ops::sqrt(t0).map(drop)),
    op!("sqrt_out", |[t0, t1], p| ops::sqrt_out(t0, t1)),
    op!("sub", |[t0, t1], p| ops::sub(t0, t1).map(drop)),
    op!("sub_out", |[t0, t1, t2], p| ops::sub_out(t0, t1, t2)),
    op!("sub_scalar", |[t0], p| ops::sub_scalar(t0, p.f32())
        .map(drop)),
    op!("sub_scalar_out", |[t0, t1], p| ops::sub_scalar_out(
        t0,
        p.f32(),
        t1
    )),
    op!("sum_cols", |[t0, t1], p| ops::sum_cols(t0, t1)),
    op!("sum_rows", |[t0, t1], p| ops::sum_rows(t0, t1)),
    op!("swiglu_backward", |[t0, t1, t2], p| ops::swiglu_backward(
        t0, t1, t2
    )),
    op!("swiglu_forward", |[t0, t1], p| ops::swiglu_forward(t0, t1)),
    op!("tanh", |[t0], p| ops::tanh(t0).map(drop)),
    op!("tanh_backward", |[t0, t1, t2], p| ops::tanh_backward(
        t0, t1, t2
    )),
    op!("tanh_backward_batched", |[t0, t1, t2], p| {
        ops::tanh_backward_batched(t0, t1, t2)
    }),
    op!("tanh_forward", |[t0, t1], p| ops::tanh_forward(t0, t1)),
    op!("tanh_forward_batched", |[t0, t1], p| {
        ops::tanh_forward_batched(t0, t1)
    }),
    op!("threshold_u8", |[t0, t1], p| ops::threshold_u8(
        t0,
        p.f32(),
        t1
    )),
    op!("top_k_rows", |[t0, t1, t2], p| ops::top_k_rows(
        t0,
        p.usize(),
        t1,
        t2
    )),
    op!("transpose", |[t0], p| ops::transpose(t0, &p.usizes())
        .map(drop)),
    op!("tril", |[t0], p| ops::tril(t0, p.i64()).map(drop)),
    op!("triu", |[t0], p| ops::triu(t0, p.i64()).map(drop)),
    op!("unfold2d_forward", |[t0, t1], p| {
        ops::unfold2d_forward(
            t0,
            p.nchw(),
            [p.usize(), p.usize()],
            [p.usize(), p.usize()],
            p.pads4(),
            p.pad_mode(),
            t1,
        )
    }),
    op!("upsample_bilinear_2x", |[t0, t1], p| {
        ops::upsample_bilinear_2x(t0, p.nchw(), t1)
    }),
    op!("upsample_bilinear_2x_backward", |[t0, t1], p| {
        ops::upsample_bilinear_2x_backward(t0, p.nchw(), t1)
    }),
    op!("upsample_nearest_2x", |[t0, t1], p| {
        ops::upsample_nearest_2x(t0, p.nchw(), t1)
    }),
    op!("upsample_nearest_2x_backward", |[t0, t1], p| {
        ops::upsample_nearest_2x_backward(t0, p.nchw(), t1)
    }),
    op!("window_partition_forward", |[t0, t1], p| {
        ops::window_partition_forward(t0, p.nchw(), p.usize(), t1)
    }),
    op!("window_reverse_forward", |[t0, t1], p| {
        ops::window_reverse_forward(t0, p.nchw(), p.usize(), t1)
    }),
    op!("bias_act_backward", |[t0, t1, t2, t3, t4], p| {
        let dims = (p.usize(), p.usize(), p.usize());
        ops::bias_act_backward(t0, t1, Some(&*t2), dims, &p.bias_act(), t3, Some(t4))
    }),
    op!("bias_act_forward", |[t0, t1, t2], p| {
        let dims = (p.usize(), p.usize(), p.usize());
        ops::bias_act_forward(t0, Some(&*t1), dims, &p.bias_act(), t2)
    }),
    op!("broadcast_mul", |[t0, t1, t2], p| ops::broadcast_mul(
        t0, t1, t2
    )),
    op!("ddim_step", |[t0, t1, t2], p| {
        ops::ddim_step(t0, t1, p.f32(), p.f32(), p.f32(), t2)
    }),
    op!("dpmpp_2m_step", |[t0, t1, t2, t3, t4], p| {
        let c = ops::Dpmpp2mCoefficients {
            c_xt: p.f32(),
            c_x0t: p.f32(),
            c_x0prev: p.f32(),
        };
        ops::dpmpp_2m_step(t0, t1, t2, p.f32(), c, t3, t4)
    }),
    op!("euler_step", |[t0, t1, t2], p| {
        ops::euler_step(t0, t1, p.f32(), p.f32(), t2)
    }),
    op!(
        "filtered_lrelu_backward",
        |[t0, t1, t2, t3, t4, t5, t6, t7], p| {
            let spec = p.filtered_lrelu();
            let caches = ops::FilteredLreluCaches {
                up_buf: std::mem::take(t5),
                act_buf: Tensor::default(),
            };
            let r = ops::filtered_lrelu_backward(
                t0,
                t1,
                t2,
                t3,
                Some(&*t4),
                p.nchw(),
                &spec,
                &caches,
                t6,
                Some(t7),
            );
            *t5 = caches.up_buf;
            r
        }
    ),
    op!(
        "filtered_lrelu_forward",
        |[t0, t1, t2, t3, t4, t5, t6], p| {
            let spec = p.filtered_lrelu();
            let mut caches = ops::FilteredLreluCaches {
                up_buf: std::mem::take(t4),
                act_buf: std::mem::take(t5),
            };
            let r = ops::filtered_lrelu_forward(
                t0,
                t1,
                t2,
                Some(&*t3),
                p.nchw(),
                &spec,
                &mut caches,
                t6,
            );
            (*t4, *t5) = (caches.up_buf, caches.act_buf);
            r
        }
    ),
    op!("modulate", |[t0, t1, t2, t3], p| ops::modulate(
        t0, t1, t2, t3
    )),
    op!(
        "modulated_conv2d_backward",
        |[t0, t1, t2, t3, t4, t5, t6, t7], p| {
            let (dims, c_out, spec) = (p.nchw(), p.usize(), p.modulated_conv());
            ops::modulated_conv2d_backward(t0, t1, t2, t3, t4, dims, c_out, &spec, t5, t6, t7)
        }
    ),
    op!("modulated_conv2d_forward", |[t0, t1, t2, t3, t4], p| {
        let (dims, c_out, spec) = (p.nchw(), p.usize(), p.modulated_conv());
        ops::modulated_conv2d_forward(t0, t1, t2, dims, c_out, &spec, t3, t4)
    }),
    op!(
        "resblock_backward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15, t16, t17, t18, t19, t20, t21, t22, t23, t24],
         p| {
            let block = resblock([
                &*t1, &*t2, &*t3, &*t4, &*t5, &*t6, &*t7, &*t8, &*t9, &*t10, &*t11,
            ]);
            ops::resblock_backward(
                t0,
                &block,
                &p.resblock(),
                t12,
                t13,
                ops::ResBlockGrads {
                    dgamma1: t14,
                    dbeta1: t15,
                    dw1: t16,
                    db1: Some(t17),
                    dt_emb_shift: Some(t18),
                    dgamma2: t19,
                    dbeta2: t20,
                    dw2: t21,
                    db2: Some(t22),
                    dw_skip: Some(t23),
                    db_skip: Some(t24),
                },
            )
        }
    ),
    op!(
        "resblock_forward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12], p| {
            let block = resblock([
                &*t1, &*t2, &*t3, &*t4, &*t5, &*t6, &*t7, &*t8, &*t9, &*t10, &*t11,
            ]);
            ops::resblock_forward(t0, &block, &p.resblock(), t12)
        }
    ),
    op!(
        "resblock_forward_int8w_fp16",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15], p| {
            // The float weights of `block` are ignored: `gamma1` stands in for them.
            let block = resblock([
                &*t1, &*t2, &*t1, &*t3, &*t4, &*t5, &*t6, &*t1, &*t7, &*t1, &*t8,
            ]);
            ops::resblock_forward_int8w_fp16(
                t0,
                &block,
                (t9, t10),
                (t11, t12),
                Some((&*t13, &*t14)),
                &p.resblock(),
                t15,
            )
        }
    ),
    op!("timestep_embedding", |[t0, t1], p| {
        ops::timestep_embedding(t0, p.usize(), p.f32(), t1)
    }),
    op!("upfirdn2d_backward", |[t0, t1, t2], p| {
        ops::upfirdn2d_backward(t0, t1, p.nchw(), &p.upfirdn2d(), t2)
    }),
    op!("upfirdn2d_forward", |[t0, t1, t2], p| {
        ops::upfirdn2d_forward(t0, t1, p.nchw(), &p.upfirdn2d(), t2)
    }),
    op!("adam_step", |[t0, t1, t2, t3], p| {
        let hp = ops::AdamParams {
            weight_decay: p.f32(),
            ..ops::AdamParams::new(p.f32())
        };
        ops::adam_step(t0, t1, t2, t3, &hp, p.usize() as u32)
    }),
    op!("adam_step_master", |[t0, t1, t2, t3, t4], p| {
        let hp = ops::AdamParams::new(p.f32());
        ops::adam_step_master(t0, t1, t2, (t3, t4), &hp, p.usize() as u32)
    }),
    op!("sgd_step", |[t0, t1, t2], p| ops::sgd_step(
        t0,
        t1,
        t2,
        p.f32(),
        p.f32()
    )),
    op!("sgd_step_master", |[t0, t1, t2, t3], p| {
        ops::sgd_step_master(t0, t1, t2, t3, p.f32(), p.f32())
    }),
    op!("xavier_init", |[t0], p| {
        let mut state = p.u64();
        ops::xavier_init(t0, &mut state)
    }),
    op!("xavier_uniform", |[t0], p| ops::xavier_uniform(
        t0,
        p.u64(),
        p.u64()
    )),
    op!("kaiming_normal", |[t0], p| ops::kaiming_normal(
        t0,
        p.u64(),
        p.u64()
    )),
    op!("vq_encode_forward", |[t0, t1, t2, t3], p| {
        ops::vq_encode_forward(t0, t1, t2, t3)
    }),
    op!("vq_encode_backward", |[t0, t1], p| ops::vq_encode_backward(
        t0, t1
    )),
    op!("fsq_quantize_forward", |[t0, t1, t2, t3], p| {
        ops::fsq_quantize_forward(t0, t1, t2, t3)
    }),
    op!("fsq_quantize_backward", |[t0, t1], p| {
        ops::fsq_quantize_backward(t0, t1)
    }),
    op!("complex_mul", |[t0, t1, t2], p| ops::complex_mul(
        t0, t1, t2
    )),
    op!("complex_mul_backward", |[t0, t1, t2, t3, t4], p| {
        ops::complex_mul_backward(t0, t1, t2, t3, t4)
    }),
    op!("complex_abs", |[t0, t1], p| ops::complex_abs(t0, t1)),
    op!("complex_abs_backward", |[t0, t1, t2], p| {
        ops::complex_abs_backward(t0, t1, t2)
    }),
    op!("complex_angle", |[t0, t1], p| ops::complex_angle(t0, t1)),
    op!("complex_from_polar", |[t0, t1, t2], p| {
        ops::complex_from_polar(t0, t1, t2)
    }),
    op!(
        "lstm_forward_train",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11], p| {
            let [y, g, c, h_t, c_t] = [t7, t8, t9, t10, t11];
            let w = LstmWeights {
                w_ih: t1,
                w_hh: t2,
                b_ih: Some(t3),
                b_hh: Some(t4),
            };
            let steps = (p.usize(), p.usize());
            ops::lstm_forward_train(
                t0,
                &w,
                (Some(t5), Some(t6)),
                steps,
                (y, g, c),
                Some((h_t, c_t)),
            )
        }
    ),
    op!("lstm_forward", |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9],
                         p| {
        let w = LstmWeights {
            w_ih: t1,
            w_hh: t2,
            b_ih: Some(t3),
            b_hh: Some(t4),
        };
        let steps = (p.usize(), p.usize());
        ops::lstm_forward(t0, &w, (Some(t5), Some(t6)), steps, t7, Some((t8, t9)))
    }),
    op!("lstm_cell", |[t0, t1, t2, t3, t4, t5, t6], p| {
        let w = LstmWeights {
            w_ih: t1,
            w_hh: t2,
            b_ih: Some(t3),
            b_hh: Some(t4),
        };
        ops::lstm_cell(t0, &w, t5, t6)
    }),
    op!(
        "lstm_backward",
        |[t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15], p| {
            let w = LstmWeights {
                w_ih: t1,
                w_hh: t2,
                b_ih: None,
                b_hh: None,
            };
            let cache = LstmCache {
                y: t5,
                gates: t6,
                c: t7,
            };
            let grads = LstmGrads {
                dx: t9,
                dw_ih: t10,
                dw_hh: t11,
                db_ih: Some(t12),
                db_hh: Some(t13),
                dh0: Some(t14),
                dc0: Some(t15),
            };
            ops::lstm_backward(
                t0,
                &w,
                (Some(t3), Some(t4)),
                &cache,
                t8,
                (p.usize(), p.usize()),
                grads,
            )
        }
    ),
    op!("fft", |[t0, t1], p| ops::fft(t0, t1)),
    op!("ifft", |[t0, t1], p| ops::ifft(t0, t1)),
    op!("rfft", |[t0, t1], p| ops::rfft(t0, t1)),
    op!("irfft", |[t0, t1], p| ops::irfft(t0, p.usize(), t1)),
    op!("rfft_backward", |[t0, t1], p| ops::rfft_backward(
        t0,
        p.usize(),
        t1
    )),
    op!("irfft_backward", |[t0, t1], p| ops::irfft_backward(t0, t1)),
    op!("stft", |[t0, t1, t2], p| {
        let spec = stft_spec(p);
        ops::stft(t0, t1, &spec, t2)
    }),
    op!("stft_backward", |[t0, t1, t2], p| {
        let shape = (p.usize(), p.usize());
        let spec = stft_spec(p);
        ops::stft_backward(t0, t1, shape, &spec, t2)
    }),
    op!("istft", |[t0, t1, t2], p| {
        let shape = (p.usize(), p.usize());
        let spec = stft_spec(p);
        ops::istft(t0, t1, shape, &spec, t2)
    }),
    op!("istft_backward", |[t0, t1, t2], p| {
        let spec = stft_spec(p);
        ops::istft_backward(t0, t1, &spec, t2)
    }),
    op!(
        "gated_delta_rule_step",
        |[t0, t1, t2, t3, t4, t5, t6, t7], p| {
            ops::gated_delta_rule_step(
                t0,
                t1,
                t2,
                t3,
                t4,
                t5,
                (p.usize(), p.usize(), p.usize()),
                t6,
                t7,
            )
        }
    ),
    op!(
        "gated_delta_rule_chunked",
        |[t0, t1, t2, t3, t4, t5, t6, t7], p| {
            ops::gated_delta_rule_chunked(
                t0,
                t1,
                t2,
                t3,
                t4,
                t5,
                (p.usize(), p.usize(), p.usize()),
                t6,
                t7,
            )
        }
    ),
];

/// An STFT framing from `p`.
fn stft_spec(p: &mut dyn Params) -> StftSpec {
    StftSpec {
        n_fft: p.usize(),
        hop_length: p.usize(),
        win_length: p.usize(),
        center: p.bool(),
        normalized: p.bool(),
    }
}
