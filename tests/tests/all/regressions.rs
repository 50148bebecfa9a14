//! Defects found by review, each reproduced with the public API: these failed before their
//! fixes.

use brotensor::ops::{self, AbtSpec, Act};
use brotensor::{Device, Dtype, Tensor};
use brotensor_tests::{gpu_devices, read_f32, tensor};
use half::bf16;

fn devices() -> Vec<Device> {
    std::iter::once(Device::Cpu).chain(gpu_devices()).collect()
}

/// BF16 `matmul_abt` with gaps between the outputs (`stride_c > m * n`) and a tail after the
/// last one: only the products are written; the gaps and the tail keep their values. (On
/// wgpu, BF16 runs as packed words through an F32 temporary, which used to be cast back
/// whole, uninitialised gaps included.)
#[test]
fn bf16_matmul_abt_leaves_gaps_between_batches_untouched() {
    let (batch, m, n, k) = (3usize, 2usize, 3usize, 4usize);
    let stride_c = m * n + 5;
    let c_len = stride_c * batch + 7;
    let a: Vec<f32> = (0..batch * m * k)
        .map(|i| ((i % 7) as f32 - 3.0) * 0.25)
        .collect();
    let b: Vec<f32> = (0..batch * n * k)
        .map(|i| ((i % 5) as f32 - 2.0) * 0.5)
        .collect();
    let sentinel = |i: usize| 100.0 + i as f32;
    let c0: Vec<f32> = (0..c_len).map(sentinel).collect();
    for d in devices() {
        let at = tensor(d, &a, batch * m, k, Dtype::BF16).unwrap();
        let bt = tensor(d, &b, batch * n, k, Dtype::BF16).unwrap();
        let mut ct = tensor(d, &c0, c_len, 1, Dtype::BF16).unwrap();
        let spec = AbtSpec {
            batch,
            m,
            n,
            k,
            stride_a: m * k,
            stride_b: n * k,
            stride_c,
        };
        ops::matmul_abt(&at, &bt, &mut ct, spec, None, Act::None)
            .unwrap_or_else(|e| panic!("{d}: {e}"));
        let got = read_f32(&ct).unwrap();
        for (i, &g) in got.iter().enumerate() {
            let (z, r) = (i / stride_c, i % stride_c);
            let want = if z < batch && r < m * n {
                let (row, col) = (r / n, r % n);
                (0..k)
                    .map(|p| {
                        f64::from(a[(z * m + row) * k + p]) * f64::from(b[(z * n + col) * k + p])
                    })
                    .sum::<f64>() as f32
            } else {
                bf16::from_f32(sentinel(i)).to_f32()
            };
            assert!(
                (g - bf16::from_f32(want).to_f32()).abs() <= 1e-2 * want.abs().max(1.0),
                "{d}: C[{i}] (batch {z}, entry {r}) = {g}, want {want}"
            );
        }
    }
}

/// F16 `l2_normalize_nchw_forward` computes in FP32 inside: a pixel of norm 500 (whose
/// squares overflow F16) and an all-zero pixel with `eps = 1e-6` (whose floor `1 / eps`
/// overflows F16) come out as (0.6, 0.8) and (0, 0), not (0, 0) and NaN.
#[test]
fn f16_l2_normalize_computes_in_fp32_inside() {
    // N = 1, C = 2, H = 1, W = 2: channel 0 is (300, 0), channel 1 is (400, 0).
    let x = [300.0f32, 0.0, 400.0, 0.0];
    for d in gpu_devices() {
        for dtype in [Dtype::F16, Dtype::BF16, Dtype::F32] {
            if !brotensor::supports_dtype(d, dtype).unwrap() {
                eprintln!("l2_normalize regression: {d} has no {dtype}, skipped there");
                continue;
            }
            let xt = tensor(d, &x, 1, 4, dtype).unwrap();
            let mut y = Tensor::default();
            ops::l2_normalize_nchw_forward(&xt, (1, 2, 1, 2), 1e-6, &mut y).unwrap();
            let got = read_f32(&y).unwrap();
            let want = [0.6f32, 0.0, 0.8, 0.0];
            for (g, w) in got.iter().zip(want) {
                assert!(
                    (g - w).abs() <= 4e-3,
                    "{d} {dtype}: got {got:?}, want {want:?}"
                );
            }
        }
    }
}

/// Found by the API fuzz target once it drew from the op table: a rel-pos attention grid of
/// `(usize::MAX, 0)` matches zero tokens, and `2 * grid_h` then overflowed (a panic in debug
/// builds, a wrapped row count in release); the shared-bias plane `Lq * Lk` was unchecked
/// too. Both are refused as shape errors now.
#[test]
fn rel_pos_attention_with_a_huge_empty_grid_is_an_error() {
    for d in devices() {
        let x = Tensor::zeros_on(d, 0, 4, Dtype::F32).unwrap();
        let w = Tensor::zeros_on(d, 4, 4, Dtype::F32).unwrap();
        let rel = Tensor::zeros_on(d, 1, 2, Dtype::F32).unwrap();
        let proj = ops::Projections {
            wq: &w,
            wk: &w,
            wv: &w,
            wo: &w,
        };
        let mut o = Tensor::default();
        let err = ops::self_attention_decomposed_rel_pos_forward(
            &x,
            proj,
            ops::ProjectionBiases::default(),
            &rel,
            &rel,
            2,
            (usize::MAX, 0),
            0.5,
            &mut o,
        )
        .unwrap_err();
        assert!(matches!(err, brotensor::Error::Shape { .. }), "{d}: {err}");
        assert!(err.to_string().contains("2 * grid"), "{d}: {err}");
    }
}

/// Found by the API fuzz target: a zero-element tensor may have dims whose partial products
/// overflow (`[0, 2^40, 2^30]`); flipping dim 1 multiplied `2^40 - 1` by the stride `2^30`
/// and panicked, and `unsqueeze` multiplied a stride by a dim the same way. Both are views of
/// nothing: now a shape error, or a zero-element view.
#[test]
fn views_of_zero_element_tensors_with_huge_dims_do_not_overflow() {
    let t = Tensor::zeros_nd_on(Device::Cpu, &[0, 1 << 40, 1 << 30], Dtype::F32).unwrap();
    match t.flip(&[1]) {
        Ok(v) => assert_eq!(v.numel(), 0),
        Err(e) => assert!(matches!(e, brotensor::Error::Shape { .. }), "{e}"),
    }
    let u = t.unsqueeze(2).unwrap();
    assert_eq!(u.dims(), &[0, 1 << 40, 1, 1 << 30]);
    assert_eq!(u.numel(), 0);
}

/// Found by the API fuzz target: a permutation of a zero-element tensor can order its dims
/// so that the product of the leading ones overflows (`[0, 2^62, 8]` as `[2^62, 8, 0]`);
/// `numel`, `shape`, `contiguous` and the single-axis reductions then multiplied them
/// unchecked and panicked. The element count is 0 whatever the order.
#[test]
fn permuted_zero_element_dims_that_overflow_in_order_are_not_multiplied() {
    let t = Tensor::zeros_nd_on(Device::Cpu, &[0, 1 << 62, 8], Dtype::F32).unwrap();
    let p = t.permute(&[1, 2, 0]).unwrap();
    assert_eq!(p.dims(), &[1 << 62, 8, 0]);
    assert_eq!(p.numel(), 0);
    assert_eq!(p.cols(), 0);
    let c = p.contiguous().unwrap();
    assert_eq!(c.numel(), 0);
    // A reduction whose output has no elements, and one over the empty axis, whose
    // output would hold 2^65 elements: a shape error naming the op.
    match ops::reduce_sum(&p, 0) {
        Ok(r) => assert_eq!(r.numel(), 0),
        Err(e) => assert!(matches!(e, brotensor::Error::Shape { .. }), "{e}"),
    }
    let err = ops::reduce_sum(&p, 2).unwrap_err();
    assert!(err.to_string().contains("reduce_sum"), "{err}");
}

/// Found by the API fuzz target: padding a dim of `usize::MAX` (a zero-element tensor) with
/// `u64::MAX` interior elements overflowed the 128-bit size arithmetic and panicked; now a
/// shape error.
#[test]
fn pad_with_an_overflowing_interior_is_an_error() {
    let x = Tensor::zeros_nd_on(Device::Cpu, &[0, usize::MAX], Dtype::F32).unwrap();
    let err = ops::pad(&x, &[0, 0], &[0, 0], &[0, u64::MAX]).unwrap_err();
    assert!(matches!(err, brotensor::Error::Shape { .. }), "{err}");
}

/// Batched softmax cross-entropy over `(3, 0)` logits with an uncommitted (empty) target
/// and mask and one empty head: every row's loss is a sum over nothing, 0. (Found by the API
/// fuzz target: the CPU kernel read the uncommitted target and panicked.)
#[test]
fn batched_cross_entropy_of_zero_columns_is_zero_per_row() {
    for d in devices() {
        let logits = Tensor::zeros_on(d, 3, 0, Dtype::F32).unwrap();
        let target = Tensor::default().to(d).unwrap();
        let mask = Tensor::default().to(d).unwrap();
        let (mut probs, mut dlogits) = (Tensor::default(), Tensor::default());
        let mut loss = tensor(d, &[7.0, 7.0, 7.0], 3, 1, Dtype::F32).unwrap();
        ops::softmax_xent_fused_batched(
            &logits,
            &target,
            Some(&mask),
            &[0, 0],
            &mut probs,
            &mut dlogits,
            &mut loss,
        )
        .unwrap_or_else(|e| panic!("{d}: {e}"));
        assert_eq!(read_f32(&loss).unwrap(), vec![0.0; 3], "{d}");
        assert_eq!(
            (probs.dims(), dlogits.dims()),
            (&[3, 0][..], &[3, 0][..]),
            "{d}"
        );
    }
}
