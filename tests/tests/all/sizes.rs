//! The one rule for sizes: every product or sum of user-supplied dims, strides and counts is
//! checked. Each op family is called with dims near `usize::MAX` and `2^63` (as explicit
//! arguments, and as the shapes of zero-element tensors, which are legal) on every device;
//! the answer must be a clean `Error::Shape` (or, for empty work, `Ok` with the right empty
//! result), never a panic, a wrapped size or an out-of-bounds access.

use brotensor::io::gguf::GgufFile;
use brotensor::ops::{self, AbtSpec, Act};
use brotensor::{Device, Dtype, Error, Tensor};
use brotensor_tests::gpu_devices;

const HALF: usize = 1 << 63;
const MAX: usize = usize::MAX;

fn devices() -> Vec<Device> {
    std::iter::once(Device::Cpu).chain(gpu_devices()).collect()
}

/// Asserts a shape error from `op`, naming the op in the message.
#[track_caller]
fn shape_err<T: std::fmt::Debug>(what: &str, r: brotensor::Result<T>) {
    match r {
        Err(Error::Shape { op, reason }) => {
            assert!(!op.is_empty() && !reason.is_empty(), "{what}: empty error")
        }
        other => panic!("{what}: expected Error::Shape, got {other:?}"),
    }
}

/// A committed tensor with zero elements and the given (possibly huge) dims.
fn empty(device: Device, rows: usize, cols: usize, dtype: Dtype) -> Tensor {
    Tensor::zeros_on(device, rows, cols, dtype).expect("zero-element tensors are legal")
}

#[test]
fn factories_reshapes_and_transfers_refuse_wrapping_shapes() {
    for d in devices() {
        shape_err("zeros MAX x 2", Tensor::zeros_on(d, MAX, 2, Dtype::F32));
        shape_err("empty 2^63 x 2", Tensor::empty_on(d, HALF, 2, Dtype::F16));
        shape_err(
            "from_slice 2^63 x 2",
            Tensor::from_slice_on::<f32>(d, &[], HALF, 2),
        );
        shape_err(
            "from_raw_bytes 2^63 x 64 Q8_0",
            Tensor::from_raw_bytes_on(d, &[], HALF, 64, Dtype::Q8_0),
        );
        let mut t = empty(d, 0, 4, Dtype::F32);
        shape_err("reshape", t.reshape_(&[HALF, 2]));
        shape_err("reshaped", t.reshaped(2, HALF).map(|_| ()));
        shape_err("resize", t.resize(MAX, MAX, Dtype::F32));
        // Legal zero-element shapes with huge dims survive every transfer.
        let wide = empty(d, HALF, 0, Dtype::F32);
        assert_eq!(wide.to(Device::Cpu).unwrap().shape(), (HALF, 0));
        assert_eq!(wide.to_vec::<f32>().unwrap(), Vec::<f32>::new());
    }
    // Absurd but representable sizes: an error from the allocator, not an abort.
    let e = Tensor::zeros_on(Device::Cpu, 1 << 40, 1 << 10, Dtype::F32).unwrap_err();
    assert!(e.to_string().starts_with("brotensor: alloc:"), "{e}");
}

#[test]
fn gpu_tensors_beyond_32_bit_indexing_are_refused_before_allocating() {
    for d in gpu_devices() {
        // 2^32 + 2^16 elements: more than a 32-bit kernel index reaches.
        let e = Tensor::empty_on(d, 1 << 16, (1 << 16) + 1, Dtype::F16).unwrap_err();
        assert!(
            matches!(&e, Error::Shape { .. }) && e.to_string().contains("32 bits"),
            "{e}"
        );
        let mut t = Tensor::zeros_on(d, 1, 1, Dtype::F32).unwrap();
        shape_err("resize past 2^32", t.resize(1 << 32, 1, Dtype::I8));
        assert_eq!(brotensor::GPU_MAX_ELEMENTS, u32::MAX as usize);
    }
}

#[test]
fn matmul_abt_checks_products_strides_and_overlap() {
    for d in devices() {
        let one = |r, c| Tensor::zeros_on(d, r, c, Dtype::F16).unwrap();
        let (a, b) = (one(1, 4), one(1, 4));
        let mut c = one(1, 4);
        let spec = |batch, m, n, k, sa, sb, sc| AbtSpec {
            batch,
            m,
            n,
            k,
            stride_a: sa,
            stride_b: sb,
            stride_c: sc,
        };
        // m * k, n * k, m * n wrap to small numbers without checks.
        shape_err(
            "m = 2^63",
            ops::matmul_abt(
                &a,
                &b,
                &mut c,
                spec(1, HALF, 2, 2, 0, 0, 0),
                None,
                Act::None,
            ),
        );
        shape_err(
            "k = 2^63",
            ops::matmul_abt(
                &a,
                &b,
                &mut c,
                spec(1, 2, 2, HALF, 0, 0, 0),
                None,
                Act::None,
            ),
        );
        // A batch whose outputs overlap would write C more than once (and with usize::MAX
        // batches, never finish).
        shape_err(
            "batch MAX, stride 0",
            ops::matmul_abt(&a, &b, &mut c, spec(MAX, 1, 1, 1, 0, 0, 0), None, Act::None),
        );
        shape_err(
            "batch MAX, stride 1",
            ops::matmul_abt(&a, &b, &mut c, spec(MAX, 1, 1, 1, 1, 1, 1), None, Act::None),
        );
        shape_err(
            "stride overflow",
            ops::matmul_abt(
                &a,
                &b,
                &mut c,
                spec(3, 1, 1, 1, HALF, 0, 1),
                None,
                Act::None,
            ),
        );
    }
}

#[test]
fn products_of_huge_empty_operands_are_refused_or_empty() {
    for d in devices() {
        // (2^63 x 0) . (0 x 2^63) would be 2^126 elements.
        let a = empty(d, HALF, 0, Dtype::F32);
        let b = empty(d, 0, HALF, Dtype::F32);
        let mut c = Tensor::default();
        shape_err("matmul 2^63 x 2^63", ops::matmul(&a, &b, &mut c));
        // (2^63 x 0) . (0 x 0) is an empty (2^63 x 0) product.
        let z = empty(d, 0, 0, Dtype::F32);
        ops::matmul(&a, &z, &mut c).unwrap();
        assert_eq!((c.shape(), c.numel()), ((HALF, 0), 0));
        let mut y = Tensor::default();
        ops::linear_forward_batched(&b.reshaped(HALF, 0).unwrap(), None, &a, &mut y)
            .map(|_| ())
            .or_else(|e| match e {
                Error::Shape { .. } => Ok(()),
                other => Err(other),
            })
            .unwrap();
        shape_err(
            "quantize_int8_per_row_host",
            ops::quantize_int8_per_row_host(&[], HALF, 2),
        );
        // No values, so no product overflows, but 2^63 row scales cannot exist (found by
        // the API fuzz target: a capacity-overflow panic before the fix).
        shape_err(
            "quantize_int8_per_row_host 2^63 x 0",
            ops::quantize_int8_per_row_host(&[], HALF, 0),
        );
    }
}

#[test]
fn elementwise_activation_and_reduction_with_huge_empty_operands() {
    for d in devices() {
        let x = empty(d, HALF, 0, Dtype::F32);
        let y = empty(d, 0, MAX, Dtype::F32);
        // Element-wise and activation ops: the empty result keeps the shape.
        let mut out = Tensor::default();
        ops::exp_forward(&x, &mut out).unwrap();
        assert_eq!(out.shape(), (HALF, 0));
        assert_eq!(ops::add(&y, &y).unwrap().shape(), (0, MAX));
        ops::gelu_backward(&x, &x, &mut out).unwrap();
        assert_eq!(out.shape(), (HALF, 0));
        let mut bias = Tensor::zeros_on(d, 1, 1, Dtype::F32).unwrap();
        let mut yy = empty(d, 0, 4, Dtype::F32);
        shape_err(
            "add_channel_bias_inplace C*L",
            ops::add_channel_bias_inplace(&mut yy, &bias, HALF, 2),
        );
        bias.resize(0, 1, Dtype::F32).unwrap();
        shape_err(
            "snake_forward C*L",
            ops::snake_forward(&yy, &bias, None, (0, HALF, 2), &mut out),
        );
        // Reductions: sums over an empty dim are zeros of the kept dim... which here is
        // 2^63 elements: refused by the allocator or the 32-bit index rule, not wrapped.
        let mut s = Tensor::default();
        ops::sum_rows(&y, &mut s).unwrap();
        assert_eq!(s.numel(), 0);
        let r = ops::sum_rows(&x, &mut s);
        assert!(r.is_err(), "2^63 row sums must not be allocated: {r:?}");
        let mut idx = Tensor::default();
        let r = ops::top_k_rows(&empty(d, 1, 0, Dtype::F32), MAX, &mut s, &mut idx);
        assert!(r.is_err(), "top-k with k = MAX of no columns: {r:?}");
    }
}

#[test]
fn norms_softmax_and_losses_refuse_wrapping_geometry() {
    for d in devices() {
        let x = empty(d, 0, 4, Dtype::F32);
        let g = Tensor::zeros_on(d, 4, 1, Dtype::F32).unwrap();
        let mut y = Tensor::default();
        shape_err(
            "l2_norm_forward heads",
            ops::l2_norm_forward(&x, HALF, 2, 1e-6, &mut y),
        );
        shape_err(
            "group_norm_forward C*H*W",
            ops::group_norm_forward(&x, &g, &g, (0, HALF, 2, 1), 1, 1e-5, &mut y),
        );
        shape_err(
            "group_norm_forward H*W",
            ops::group_norm_forward(&x, &g, &g, (0, 4, HALF, 4), 1, 1e-5, &mut y),
        );
        shape_err(
            "l2_normalize_nchw_forward",
            ops::l2_normalize_nchw_forward(&x, (0, 2, HALF, 2), 1e-6, &mut y),
        );
        shape_err(
            "batch_norm_inference",
            ops::batch_norm_inference(&x, &g, &g, &g, &g, (0, MAX, 2, 1), 1e-5, &mut y),
        );
        let (mut p, mut dl, mut loss) = (Tensor::default(), Tensor::default(), Tensor::default());
        let r =
            ops::softmax_xent_fused_batched(&x, &x, None, &[0, MAX], &mut p, &mut dl, &mut loss);
        assert!(
            matches!(r, Err(Error::InvalidArgument { .. } | Error::Shape { .. })),
            "{r:?}"
        );
    }
}

#[test]
fn file_readers_refuse_claims_the_bytes_cannot_back() {
    // A GGUF metadata array of u64 (8 bytes each) whose count fits the bytes left only at
    // one byte per element: refused before anything is allocated for it.
    let mut b = Vec::new();
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes()); // tensors
    b.extend_from_slice(&1u64.to_le_bytes()); // metadata
    b.extend_from_slice(&1u64.to_le_bytes());
    b.push(b'k');
    b.extend_from_slice(&9u32.to_le_bytes()); // array
    b.extend_from_slice(&10u32.to_le_bytes()); // of u64
    let count_at = b.len();
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&[0u8; 4096]);
    let left = (b.len() - count_at - 8) as u64;
    b[count_at..count_at + 8].copy_from_slice(&left.to_le_bytes());
    match GgufFile::from_bytes(b) {
        Err(Error::Format { reason, .. }) => {
            assert!(reason.contains("at least 8 bytes"), "{reason}")
        }
        other => panic!("expected a format error, got {other:?}"),
    }
}

/// Every tensor-only op of every family, on zero-element operands whose dims are near
/// `2^63` and `usize::MAX`: `Ok` with an empty result of a consistent shape, or a clean
/// shape or argument error; no panic and no wrapped size.
#[test]
fn every_tensor_op_with_huge_empty_operands() {
    type Op = (
        &'static str,
        fn(&Tensor, &Tensor) -> brotensor::Result<Tensor>,
    );
    fn out1(f: impl FnOnce(&mut Tensor) -> brotensor::Result<()>) -> brotensor::Result<Tensor> {
        let mut y = Tensor::default();
        f(&mut y).map(|_| y)
    }
    let table: &[Op] = &[
        ("add", |x, y| ops::add(x, y)),
        ("sub", |x, y| ops::sub(x, y)),
        ("mul", |x, y| ops::mul(x, y)),
        ("div", |x, y| ops::div(x, y)),
        ("add_scalar", |x, _| ops::add_scalar(x, 1.0)),
        ("exp", |x, _| ops::exp(x)),
        ("log", |x, _| ops::log(x)),
        ("sin", |x, _| ops::sin(x)),
        ("rsqrt", |x, _| ops::rsqrt(x)),
        ("round", |x, _| ops::round(x)),
        ("exp_backward", |x, y| out1(|o| ops::exp_backward(x, y, o))),
        ("round_backward", |x, _| out1(|o| ops::round_backward(x, o))),
        ("relu", |x, _| ops::relu(x)),
        ("gelu_exact", |x, _| ops::gelu_exact(x)),
        ("silu_backward", |x, y| {
            out1(|o| ops::silu_backward(x, y, o))
        }),
        ("elu_forward", |x, _| out1(|o| ops::elu_forward(x, 1.0, o))),
        ("leaky_relu_backward", |x, y| {
            out1(|o| ops::leaky_relu_backward(x, y, 0.1, o))
        }),
        ("swiglu_forward", |x, _| out1(|o| ops::swiglu_forward(x, o))),
        ("geglu_backward", |x, y| {
            out1(|o| ops::geglu_backward(x, y, o))
        }),
        ("clamp_out", |x, _| {
            out1(|o| ops::clamp_out(x, -1.0, 1.0, o))
        }),
        ("cast", |x, _| out1(|o| ops::cast(x, o, Dtype::F16))),
        ("threshold_u8", |x, _| {
            out1(|o| ops::threshold_u8(x, 0.0, o))
        }),
        ("sum_rows", |x, _| out1(|o| ops::sum_rows(x, o))),
        ("sum_cols", |x, _| out1(|o| ops::sum_cols(x, o))),
        ("argmax_rows", |x, _| out1(|o| ops::argmax_rows(x, o))),
        ("rows_count_above", |x, _| {
            out1(|o| ops::rows_count_above(x, 0.0, 1.0, o))
        }),
        ("matmul", |x, y| out1(|o| ops::matmul(x, y, o))),
        ("linear_forward_batched", |x, y| {
            out1(|o| ops::linear_forward_batched(x, None, y, o))
        }),
        ("linear_forward_batched_fp16", |x, y| {
            out1(|o| ops::linear_forward_batched_fp16(x, None, y, o))
        }),
        ("softmax_forward", |x, _| {
            out1(|o| ops::softmax_forward(x, None, o))
        }),
        ("softmax_backward", |x, y| {
            out1(|o| ops::softmax_backward(x, y, o))
        }),
        ("mse_vec_backward", |x, y| {
            out1(|o| ops::mse_vec_backward(x, y, o))
        }),
        ("softmax_xent_fused", |x, y| {
            let (mut p, mut d) = (Tensor::default(), Tensor::default());
            ops::softmax_xent_fused(x, y, None, &mut p, &mut d).map(|_| p)
        }),
        ("bce_with_logits_fused_batched", |x, y| {
            let (mut p, mut d, mut l) = (Tensor::default(), Tensor::default(), Tensor::default());
            ops::bce_with_logits_fused_batched(x, y, None, 1.0, &mut p, &mut d, &mut l).map(|_| p)
        }),
        ("layernorm_forward_inference_batched", |x, y| {
            out1(|o| ops::layernorm_forward_inference_batched(x, y, y, 1e-5, o))
        }),
        ("rms_norm_forward", |x, y| {
            out1(|o| ops::rms_norm_forward(x, y, 1e-6, o))
        }),
        ("pixel_norm_backward", |x, y| {
            out1(|o| ops::pixel_norm_backward(x, y, 1e-6, o))
        }),
    ];
    for d in devices() {
        let shapes = [(HALF, 0), (0, HALF), (MAX, 0), (0, MAX)];
        for &(xs, ys) in &[(0, 0), (0, 1), (1, 3), (2, 2), (3, 1)] {
            for dtype in [Dtype::F32, Dtype::F16] {
                let x = empty(d, shapes[xs].0, shapes[xs].1, dtype);
                let y = empty(d, shapes[ys].0, shapes[ys].1, dtype);
                for (name, op) in table {
                    match op(&x, &y) {
                        Ok(out) => assert_eq!(
                            out.numel(),
                            0,
                            "{name} on {d} {dtype}: empty operands gave {:?}",
                            out.shape()
                        ),
                        Err(
                            Error::Shape { .. }
                            | Error::InvalidArgument { .. }
                            | Error::Dtype { .. }
                            | Error::UnsupportedDtype { .. },
                        ) => {}
                        Err(e) => panic!("{name} on {d} {dtype}: unexpected error {e}"),
                    }
                }
            }
        }
    }
}

#[test]
fn diffusion_and_stylegan_refuse_wrapping_geometry() {
    use ops::{ModulatedConv2dSpec, ResBlock, ResBlockSpec, Upfirdn2dSpec};
    for d in devices() {
        let x = empty(d, 0, 4, Dtype::F32);
        let g = Tensor::zeros_on(d, 4, 1, Dtype::F32).unwrap();
        let w = Tensor::zeros_on(d, 4, 36, Dtype::F32).unwrap();
        let mut y = Tensor::default();
        let block = ResBlock {
            gamma1: &g,
            beta1: &g,
            w1: &w,
            b1: None,
            t_emb_shift: None,
            gamma2: &g,
            beta2: &g,
            w2: &w,
            b2: None,
            w_skip: None,
            b_skip: None,
        };
        for dims in [(0, HALF, 2, 1), (0, 4, HALF, 4), (HALF, 4, 2, 1)] {
            let spec = ResBlockSpec {
                dims: dims.into(),
                c_out: 4,
                num_groups: 1,
                eps: 1e-5,
            };
            shape_err(
                &format!("resblock_forward {dims:?}"),
                ops::resblock_forward(&x, &block, &spec, &mut y),
            );
        }
        let f = Tensor::zeros_on(d, 2, 2, Dtype::F32).unwrap();
        let huge_up = Upfirdn2dSpec {
            up: [MAX, 1],
            ..Upfirdn2dSpec::IDENTITY
        };
        shape_err(
            "upfirdn2d_forward W*up",
            ops::upfirdn2d_forward(&x, &f, (0, 1, 2, 2), &huge_up, &mut y),
        );
        shape_err(
            "upfirdn2d_backward C*H*W",
            ops::upfirdn2d_backward(&x, &f, (0, HALF, 2, 2), &Upfirdn2dSpec::IDENTITY, &mut y),
        );
        let (s, mut dcoef) = (empty(d, 0, 4, Dtype::F32), Tensor::default());
        let spec = ModulatedConv2dSpec {
            kernel: [3, 3],
            padding: [1, 1],
            demodulate: true,
            eps: 1e-8,
        };
        shape_err(
            "modulated_conv2d_forward C_in*H*W",
            ops::modulated_conv2d_forward(
                &x,
                &w,
                &s,
                (0, HALF, 2, 2),
                4,
                &spec,
                &mut dcoef,
                &mut y,
            ),
        );
    }
}
