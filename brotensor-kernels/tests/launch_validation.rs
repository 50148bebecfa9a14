//! The launch boundary refuses buffers shorter than the launch, before any `unsafe` launch,
//! and in-place (aliased) launches compute what separate buffers would.

use brotensor_kernels::bf16_words;
use brotensor_kernels::elementwise::{self as k, Source};
use brotensor_kernels::LaunchError;
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

/// A client on the software Vulkan adapter; `None` (with a note) where there is none, unless
/// `BROTENSOR_REQUIRE_GPU` asks for wgpu.
fn client() -> Option<ComputeClient<WgpuRuntime>> {
    let found = std::panic::catch_unwind(|| WgpuRuntime::client(&WgpuDevice::Cpu)).ok();
    if found.is_none() {
        let required = std::env::var("BROTENSOR_REQUIRE_GPU").unwrap_or_default();
        assert!(
            !matches!(required.as_str(), "wgpu" | "any"),
            "no software wgpu adapter"
        );
        eprintln!("launch_validation: SKIPPED (no software wgpu adapter)");
    }
    found
}

fn read(client: &ComputeClient<WgpuRuntime>, h: cubecl::server::Handle, n: usize) -> Vec<f32> {
    let bytes = client.read_one(h).unwrap();
    f32::from_bytes(&bytes)[..n].to_vec()
}

#[test]
fn short_buffers_are_refused_before_launch() {
    let Some(c) = client() else { return };
    let x = c.create_from_slice(f32::as_bytes(&[1.0f32; 8]));
    let out = c.empty(8 * 4);
    for len in [9, 1000] {
        match k::launch_unary::<_, f32>(
            &c,
            k::UnaryInstr::Exp,
            Source::Buffer(&x),
            &out,
            len,
            0.0,
            0.0,
        ) {
            Err(LaunchError::BufferTooSmall {
                arg: "x",
                needed,
                available,
            }) => {
                assert_eq!((needed, available), (len as u64 * 4, 32));
            }
            other => panic!("len {len}: expected BufferTooSmall, got {other:?}"),
        }
    }
    let big = c.create_from_slice(f32::as_bytes(&[1.0f32; 64]));
    assert!(matches!(
        k::launch_binary::<_, f32>(
            &c,
            k::BinaryInstr::Add,
            Source::Buffer(&big),
            Source::Buffer(&big),
            &out,
            64,
            0.0,
            0.0
        ),
        Err(LaunchError::BufferTooSmall { arg: "out", .. })
    ));
    assert!(matches!(
        k::launch_cast::<_, f32, half::f16>(&c, &x, &out, 17),
        Err(LaunchError::BufferTooSmall { arg: "x", .. })
    ));
    assert!(matches!(
        bf16_words::launch_words_to_float::<_, f32>(&c, &x, &out, 17),
        Err(LaunchError::BufferTooSmall { .. })
    ));
    // Snake's per-channel parameters must hold C values, its tensors `len`.
    let two = c.create_from_slice(f32::as_bytes(&[0.5f32; 2]));
    assert!(matches!(
        brotensor_kernels::snake::launch_snake_forward(&c, &x, &x, &two, &out, 8, 4, 2),
        Err(LaunchError::BufferTooSmall { arg: "d", .. })
    ));
    assert!(matches!(
        brotensor_kernels::snake::launch_snake_backward(
            &c,
            &x,
            &x,
            &x,
            &x,
            &out,
            &out,
            &two,
            (8, 2, 4)
        ),
        Err(LaunchError::BufferTooSmall { arg: "gb", .. })
    ));
    // BatchNorm's per-channel arrays must hold C values.
    let stats = brotensor_kernels::batch_norm::BatchNormStats {
        running_mean: &x,
        running_var: &x,
        saved_mean: &x,
        saved_rstd: &two,
    };
    assert!(matches!(
        brotensor_kernels::batch_norm::launch_batch_norm(
            &c,
            (&x, &x, &x, &out),
            stats,
            (2, 4, 1),
            1e-5,
            0.1
        ),
        Err(LaunchError::BufferTooSmall {
            arg: "saved_rstd",
            ..
        })
    ));
    // A valid launch on the same buffers still works and writes exactly its elements.
    k::launch_unary::<_, f32>(
        &c,
        k::UnaryInstr::AddScalar,
        Source::Buffer(&x),
        &out,
        8,
        2.0,
        0.0,
    )
    .unwrap();
    assert_eq!(read(&c, out, 8), vec![3.0; 8]);
}

#[test]
fn aliased_in_place_launches_match_separate_buffers() {
    let Some(c) = client() else { return };
    let data: Vec<f32> = (0..1027).map(|i| i as f32 * 0.01 - 5.0).collect();
    let y = c.create_from_slice(f32::as_bytes(&data));
    let x = c.create_from_slice(f32::as_bytes(&data));
    let sep = c.empty(data.len() * 4);
    k::launch_binary::<_, f32>(
        &c,
        k::BinaryInstr::Axpby,
        Source::Buffer(&y),
        Source::Buffer(&x),
        &sep,
        data.len(),
        0.5,
        2.0,
    )
    .unwrap();
    k::launch_binary::<_, f32>(
        &c,
        k::BinaryInstr::Axpby,
        Source::Output,
        Source::Buffer(&x),
        &y,
        data.len(),
        0.5,
        2.0,
    )
    .unwrap();
    let want: Vec<f32> = data.iter().map(|v| 0.5 * v + 2.0 * v).collect();
    assert_eq!(read(&c, sep, data.len()), want);
    assert_eq!(read(&c, y, data.len()), want);
}

/// What every buffer of the overflow tests holds before the launch, and must still hold after.
const SENTINEL: f32 = 7.0;

/// `n` FP32 sentinels (their bytes also serve as `u32` and packed-word buffers).
fn sentinels(c: &ComputeClient<WgpuRuntime>, n: usize) -> cubecl::server::Handle {
    c.create_from_slice(f32::as_bytes(&vec![SENTINEL; n]))
}

/// `r` is a refusal for a size that overflows, and no buffer in `watched` was written: the
/// launch never reached the device.
#[track_caller]
fn overflow_refused(
    c: &ComputeClient<WgpuRuntime>,
    case: &str,
    r: Result<(), LaunchError>,
    watched: &[&cubecl::server::Handle],
) {
    match r {
        Err(LaunchError::Overflow { what }) => {
            let msg = LaunchError::Overflow { what }.to_string();
            assert!(msg.contains("overflows"), "{case}: message {msg:?}");
        }
        other => panic!("{case}: expected LaunchError::Overflow, got {other:?}"),
    }
    for (i, h) in watched.iter().enumerate() {
        let bytes = c.read_one((*h).clone()).unwrap();
        assert!(
            f32::from_bytes(&bytes).iter().all(|&v| v == SENTINEL),
            "{case}: buffer {i} was written"
        );
    }
}

/// A product of sizes that wraps: `(2^63 + 1) * 2 = 2 (mod 2^64)`.
const WRAPS_TO_TWO: (usize, usize) = ((1 << 63) + 1, 2);

#[test]
fn elementwise_sizes_that_overflow_are_refused() {
    use brotensor_kernels::elementwise::Broadcast;
    let Some(c) = client() else { return };
    let (q, scales, out) = (sentinels(&c, 4), sentinels(&c, 4), sentinels(&c, 4));
    // rows * cols wraps to 2: the old check asked for 1 word, 2 scales and 2 outputs.
    overflow_refused(
        &c,
        "dequant_i8_rows",
        k::launch_dequant_i8_rows(&c, &q, &scales, &out, (2, WRAPS_TO_TWO.0)),
        &[&out],
    );
    // The per-column broadcast vector, ceil(len / inner) rows of `inner`: 2^63 * 2.
    let broadcast = Broadcast {
        inner: 2,
        v_len: 1,
        per_row: false,
        repeat: 1,
        multiply: false,
    };
    overflow_refused(
        &c,
        "broadcast",
        k::launch_broadcast::<_, f32>(&c, &out, &scales, usize::MAX, broadcast),
        &[&out],
    );
    // launch_unary forms no product: a length past memory is a short buffer (`Buf::new`
    // saturates its byte count).
    assert!(matches!(
        k::launch_unary::<_, f32>(
            &c,
            k::UnaryInstr::Exp,
            Source::Buffer(&q),
            &out,
            usize::MAX,
            0.0,
            0.0
        ),
        Err(LaunchError::BufferTooSmall { arg: "x", .. })
    ));
}

#[test]
fn bf16_word_sizes_that_overflow_are_refused() {
    let Some(c) = client() else { return };
    let (x, out) = (sentinels(&c, 4), sentinels(&c, 4));
    // usize::MAX elements: 2^63 words, 2 * 2^63 halves.
    overflow_refused(
        &c,
        "words_to_float",
        bf16_words::launch_words_to_float::<_, f32>(&c, &x, &out, usize::MAX),
        &[&out],
    );
    overflow_refused(
        &c,
        "float_to_words",
        bf16_words::launch_float_to_words::<_, f32>(&c, &x, &out, usize::MAX),
        &[&out],
    );
}

#[test]
fn glu_sizes_that_overflow_are_refused() {
    use brotensor_kernels::glu::{self, Geglu};
    let Some(c) = client() else { return };
    let (x, y, dx) = (sentinels(&c, 8), sentinels(&c, 8), sentinels(&c, 8));
    let (rows, d) = WRAPS_TO_TWO;
    overflow_refused(
        &c,
        "glu_forward",
        glu::launch_glu_forward::<_, f32, Geglu>(&c, &x, &y, rows, d),
        &[&y],
    );
    overflow_refused(
        &c,
        "glu_backward",
        glu::launch_glu_backward::<_, f32, Geglu>(&c, &x, &y, &dx, rows, d),
        &[&dx],
    );
}

#[test]
fn reduce_sizes_that_overflow_are_refused() {
    use brotensor_kernels::reduce;
    let Some(c) = client() else { return };
    let (x, y, idx) = (sentinels(&c, 8), sentinels(&c, 8), sentinels(&c, 8));
    // rows * cols = 2 * 2^63 wraps to 0, and only `rows` outputs were asked for.
    let (rows, cols) = (2, 1usize << 63);
    overflow_refused(
        &c,
        "sum_rows",
        reduce::launch_sum_rows::<_, f32>(&c, &x, &y, rows, cols),
        &[&y],
    );
    overflow_refused(
        &c,
        "argmax_rows",
        reduce::launch_argmax_rows::<_, f32, i32>(&c, &x, &idx, rows, cols),
        &[&idx],
    );
    overflow_refused(
        &c,
        "rows_count_above",
        reduce::launch_rows_count_above::<_, f32>(&c, &x, &idx, (rows, cols), (0.0, 1.0)),
        &[&idx],
    );
    // top-k: rows * k wraps to 0 with one column per row; then rows * cols.
    overflow_refused(
        &c,
        "top_k_rows (k)",
        reduce::launch_top_k_rows(&c, &x, &y, &idx, (2, 1, 1 << 63)),
        &[&y, &idx],
    );
    overflow_refused(
        &c,
        "top_k_rows (cols)",
        reduce::launch_top_k_rows(&c, &x, &y, &idx, (rows, cols, 1)),
        &[&y, &idx],
    );
    // Column sums: 2^63 rows of 2 columns wrap to 0 elements, and `out` holds its 2 columns.
    overflow_refused(
        &c,
        "sum_cols",
        reduce::launch_sum_cols::<_, f32>(&c, &x, &y, 1 << 63, 2),
        &[&y],
    );
    overflow_refused(
        &c,
        "column_sums",
        reduce::launch_column_sums::<_, f32>(&c, (&x, Some(&x), None), &y, (1 << 63, 2), true),
        &[&y],
    );
}

#[test]
fn row_op_sizes_that_overflow_are_refused() {
    use brotensor_kernels::norm::{self as rows, LayerNormBuffers};
    use brotensor_kernels::softmax;
    let Some(c) = client() else { return };
    let (x, g, y, dx) = (
        sentinels(&c, 8),
        sentinels(&c, 8),
        sentinels(&c, 8),
        sentinels(&c, 8),
    );
    // Softmax with 256 rows (one cube per row, not split) of 2^56 columns: 2^64 elements.
    let wide = (256, 1usize << 56);
    overflow_refused(
        &c,
        "softmax",
        softmax::launch_softmax::<_, f32>(&c, &x, None, &y, wide),
        &[&y],
    );
    overflow_refused(
        &c,
        "softmax_backward",
        softmax::launch_softmax_backward::<_, f32>(&c, &x, &x, &dx, wide),
        &[&dx],
    );
    // The norms: 2^63 rows of 2 columns (gamma and beta hold their 2 values).
    let tall = (1usize << 63, 2);
    let ln = LayerNormBuffers {
        x: &x,
        gamma: &g,
        beta: &g,
        y: &y,
        caches: None,
    };
    overflow_refused(
        &c,
        "layernorm",
        rows::launch_layernorm::<_, f32>(&c, ln, tall, 1e-5),
        &[&y],
    );
    overflow_refused(
        &c,
        "layernorm_backward",
        rows::launch_layernorm_backward::<_, f32>(&c, (&x, &x, &g, &g), &dx, (2, 1 << 63)),
        &[&dx],
    );
    overflow_refused(
        &c,
        "rms_norm",
        rows::launch_rms_norm::<_, f32>(&c, (&x, &g, &y), None, tall, 1e-5),
        &[&y],
    );
    overflow_refused(
        &c,
        "rms_norm_backward",
        rows::launch_rms_norm_backward::<_, f32>(&c, (&x, &g, &x), &dx, &y, (2, 1 << 63), 1e-5),
        &[&dx, &y],
    );
    // GroupNorm: 2 rows of (2^63 + 1) elements wrap to 2; then 2^63 groups of 2 channels.
    let (hw, _) = WRAPS_TO_TWO;
    overflow_refused(
        &c,
        "group_norm (rows * cpg * hw)",
        rows::launch_group_norm::<_, f32>(&c, (&x, &g, &g, &y), 2, (1, 1, hw), 1e-5, false),
        &[&y],
    );
    overflow_refused(
        &c,
        "group_norm (groups * cpg)",
        rows::launch_group_norm::<_, f32>(&c, (&x, &g, &g, &y), 1, (1 << 63, 2, 1), 1e-5, true),
        &[&y],
    );
    overflow_refused(
        &c,
        "group_norm_backward",
        rows::launch_group_norm_backward::<_, f32>(
            &c,
            (&x, &g, &x),
            (&dx, &y, &y),
            2,
            (1, 1, hw),
            1e-5,
        ),
        &[&dx, &y],
    );
}

#[test]
fn gemm_spans_that_overflow_are_refused() {
    use brotensor_kernels::matmul::{launch_gemm, GemmSpec};
    let Some(c) = client() else { return };
    let (a, b, out) = (sentinels(&c, 4), sentinels(&c, 4), sentinels(&c, 4));
    // Three 1x1 products 2^63 elements apart: (3 - 1) 2^63 + 1 wraps to 1.
    let spec = GemmSpec {
        batch: 3,
        strides: (1 << 63, 1 << 63, 1 << 63),
        ..GemmSpec::new(1, 1, 1)
    };
    overflow_refused(
        &c,
        "gemm (batch - 1) * stride",
        launch_gemm::<_, f32>(&c, &a, &b, None, &out, spec),
        &[&out],
    );
    // Two products usize::MAX elements apart: (2 - 1) usize::MAX + 1 wraps to 0.
    let spec = GemmSpec {
        batch: 2,
        strides: (usize::MAX, 1, 1),
        ..GemmSpec::new(1, 1, 1)
    };
    overflow_refused(
        &c,
        "gemm ... + m * k",
        launch_gemm::<_, f32>(&c, &a, &b, None, &out, spec),
        &[&out],
    );
    // m * k wraps to 0 (2^32 x 2^32); GemmSpec::new saturates its unused strides.
    overflow_refused(
        &c,
        "gemm m * k",
        launch_gemm::<_, f32>(&c, &a, &b, None, &out, GemmSpec::new(1 << 32, 1, 1 << 32)),
        &[&out],
    );
}

#[test]
fn loss_sizes_that_overflow_are_refused() {
    use brotensor_kernels::loss::{self, LossBuffers};
    let Some(c) = client() else { return };
    let (x, probs, dl, l, offsets) = (
        sentinels(&c, 8),
        sentinels(&c, 8),
        sentinels(&c, 8),
        sentinels(&c, 8),
        sentinels(&c, 8),
    );
    let bufs = || LossBuffers {
        logits: &x,
        target: &x,
        mask: None,
        probs: &probs,
        dlogits: &dl,
        loss: &l,
    };
    // 2^63 rows of 2 columns and 2 heads: both products wrap to 0.
    overflow_refused(
        &c,
        "xent",
        loss::launch_xent(&c, bufs(), &offsets, (1 << 63, 2, 2)),
        &[&probs, &dl, &l],
    );
    // `heads + 1` offsets wrap to 0.
    overflow_refused(
        &c,
        "xent (heads + 1)",
        loss::launch_xent(&c, bufs(), &offsets, (1, 0, usize::MAX)),
        &[&probs, &dl, &l],
    );
    overflow_refused(
        &c,
        "bce",
        loss::launch_bce(&c, bufs(), (2, 1 << 63), 1.0),
        &[&probs, &dl, &l],
    );
}

#[test]
fn batch_norm_sizes_that_overflow_are_refused() {
    use brotensor_kernels::batch_norm::{self, BatchNormStats};
    let Some(c) = client() else { return };
    let (x, p, y, dx) = (
        sentinels(&c, 8),
        sentinels(&c, 8),
        sentinels(&c, 8),
        sentinels(&c, 8),
    );
    // (2^63 + 1) samples of one channel of 2 values: n c hw wraps to 2.
    let (n, hw) = WRAPS_TO_TWO;
    let stats = BatchNormStats {
        running_mean: &p,
        running_var: &p,
        saved_mean: &p,
        saved_rstd: &p,
    };
    overflow_refused(
        &c,
        "batch_norm",
        batch_norm::launch_batch_norm(&c, (&x, &p, &p, &y), stats, (n, 1, hw), 1e-5, 0.1),
        &[&y, &p],
    );
    overflow_refused(
        &c,
        "batch_norm_backward",
        batch_norm::launch_batch_norm_backward(&c, (&x, &p, &p, &p, &x), (&dx, &p, &p), (n, 1, hw)),
        &[&dx, &p],
    );
}

#[test]
fn snake_lengths_past_memory_are_refused() {
    use brotensor_kernels::snake;
    let Some(c) = client() else { return };
    let (x, p, y) = (sentinels(&c, 8), sentinels(&c, 8), sentinels(&c, 8));
    // Snake forms no product of its sizes: a length past memory is a short buffer.
    assert!(matches!(
        snake::launch_snake_forward(&c, &x, &p, &p, &y, usize::MAX, 1, 1),
        Err(LaunchError::BufferTooSmall { arg: "x", .. })
    ));
}

#[test]
fn codec_lengths_past_memory_are_refused() {
    use brotensor_kernels::codec;
    let Some(c) = client() else { return };
    let (a, b, o, p) = (
        sentinels(&c, 8),
        sentinels(&c, 8),
        sentinels(&c, 8),
        sentinels(&c, 8),
    );
    // rows * d past usize, a codebook longer than its buffer, a short index output.
    assert!(matches!(
        codec::launch_vq_encode(&c, (&a, &b), (&o, &p), (usize::MAX, 1, 2)),
        Err(LaunchError::Overflow { .. })
    ));
    assert!(matches!(
        codec::launch_vq_encode(&c, (&a, &b), (&o, &p), (2, 5, 4)),
        Err(LaunchError::BufferTooSmall {
            arg: "codebook",
            ..
        })
    ));
    assert!(matches!(
        codec::launch_vq_encode(&c, (&a, &b), (&o, &p), (2, 0, 4)),
        Err(LaunchError::Invalid { .. })
    ));
    assert!(matches!(
        codec::launch_fsq_quantize(&c, (&a, &b), (&o, &p), (3, 3)),
        Err(LaunchError::BufferTooSmall { arg: "x", .. })
    ));
    assert!(matches!(
        codec::launch_fsq_quantize(&c, (&a, &b), (&o, &p), (9, 0)),
        Ok(())
    ));
    for (h, what) in [(&o, "o"), (&p, "p")] {
        assert!(
            read(&c, h.clone(), 8).iter().all(|&v| v == SENTINEL),
            "{what} written"
        );
    }
}

#[test]
fn zero_divisors_of_a_non_empty_launch_are_refused() {
    use brotensor_kernels::{batch_norm, snake};
    let Some(c) = client() else { return };
    let (x, p, y) = (sentinels(&c, 8), sentinels(&c, 8), sentinels(&c, 8));
    let zero = |r: Result<(), LaunchError>, case: &str| {
        assert!(
            matches!(r, Err(LaunchError::ZeroDivisor { .. })),
            "{case}: expected ZeroDivisor, got {r:?}"
        );
        assert!(
            read(&c, y.clone(), 8).iter().all(|&v| v == SENTINEL),
            "{case}: y written"
        );
    };
    zero(
        snake::launch_snake_forward(&c, &x, &p, &p, &y, 8, 0, 2),
        "snake c = 0",
    );
    zero(
        snake::launch_snake_forward(&c, &x, &p, &p, &y, 8, 2, 0),
        "snake l = 0",
    );
    zero(
        batch_norm::launch_batch_norm_inference::<_, f32>(
            &c,
            (&x, &y),
            (&p, &p, &p, &p),
            (8, 2, 0),
            1e-5,
        ),
        "batch_norm_inference hw = 0",
    );
}

/// Head offsets past the row (they live on the device and are not checked on the host)
/// are clamped by the kernel: nothing outside the row is read or written.
#[test]
fn cross_entropy_offsets_past_the_row_stay_inside_it() {
    use brotensor_kernels::loss::{self, LossBuffers};
    let Some(c) = client() else { return };
    // Two rows of 4; the buffers have 4 spare sentinel floats after them.
    let logits = c.create_from_slice(f32::as_bytes(&[
        0.0f32, 1.0, 2.0, 3.0, 3.0, 2.0, 1.0, 0.0, 9.0, 9.0, 9.0, 9.0,
    ]));
    let target = c.create_from_slice(f32::as_bytes(&[
        0.0f32, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    ]));
    let (probs, dl, l) = (sentinels(&c, 12), sentinels(&c, 12), sentinels(&c, 2));
    // One head claiming columns [1, 1000): clamped to [1, 4).
    let offsets = c.create_from_slice(u32::as_bytes(&[1u32, 1000]));
    let bufs = LossBuffers {
        logits: &logits,
        target: &target,
        mask: None,
        probs: &probs,
        dlogits: &dl,
        loss: &l,
    };
    loss::launch_xent(&c, bufs, &offsets, (2, 4, 1)).unwrap();
    let p = read(&c, probs, 12);
    assert_eq!(p[0], SENTINEL, "column 0 is outside the head");
    assert!(
        p[8..].iter().all(|&v| v == SENTINEL),
        "written past the rows: {p:?}"
    );
    let row0: f32 = p[1..4].iter().sum();
    let row1: f32 = p[5..8].iter().sum();
    assert!(
        (row0 - 1.0).abs() < 1e-5 && (row1 - 1.0).abs() < 1e-5,
        "{p:?}"
    );
}

#[test]
fn strided_launches_refuse_layouts_outside_their_buffers() {
    use brotensor_kernels::strided::{launch_strided_binary, launch_strided_gather, GatherLayout};
    let Some(c) = client() else { return };
    let src = c.create_from_slice(f32::as_bytes(&[1.0f32; 12]));
    let out = c.empty(12 * 4);
    let layout = |dims: &'static [usize], strides: &'static [isize], offset| GatherLayout {
        dims,
        strides,
        offset,
    };
    // In bounds: a (3, 4) transpose of 12 elements.
    launch_strided_gather(&c, &src, layout(&[4, 3], &[1, 4], 0), 4, &out).unwrap();
    // One element past the end (offset 1), a negative reach and a 33-bit index.
    let past = launch_strided_gather(&c, &src, layout(&[4, 3], &[1, 4], 1), 4, &out);
    assert!(
        matches!(past, Err(LaunchError::BufferTooSmall { arg: "src", .. })),
        "{past:?}"
    );
    let below = launch_strided_gather(&c, &src, layout(&[4], &[-1], 2), 4, &out);
    assert!(
        matches!(below, Err(LaunchError::Overflow { .. })),
        "{below:?}"
    );
    let huge = launch_strided_gather(&c, &src, layout(&[2], &[1 << 33], 0), 4, &out);
    assert!(
        matches!(huge, Err(LaunchError::Overflow { .. })),
        "{huge:?}"
    );
    let width = launch_strided_gather(&c, &src, layout(&[4], &[1], 0), 8, &out);
    assert!(
        matches!(width, Err(LaunchError::Overflow { .. })),
        "{width:?}"
    );
    let rank = launch_strided_gather(&c, &src, layout(&[1; 10], &[1; 10], 0), 4, &out);
    assert!(
        matches!(rank, Err(LaunchError::Overflow { .. })),
        "{rank:?}"
    );
    // The binary form checks both operands, the output and that the dims agree.
    let ok = (&src, layout(&[3, 4], &[4, 1], 0));
    let row = (&src, layout(&[3, 4], &[0, 1], 8)); // one row of 4 from element 8: fits
    launch_strided_binary::<_, f32>(&c, k::BinaryInstr::Add, ok, row, &out, 0.0, 0.0).unwrap();
    let late = (&src, layout(&[3, 4], &[0, 1], 9));
    let e = launch_strided_binary::<_, f32>(&c, k::BinaryInstr::Add, ok, late, &out, 0.0, 0.0);
    assert!(
        matches!(e, Err(LaunchError::BufferTooSmall { arg: "y", .. })),
        "{e:?}"
    );
    let other = (&src, layout(&[4, 3], &[3, 1], 0));
    let e = launch_strided_binary::<_, f32>(&c, k::BinaryInstr::Add, ok, other, &out, 0.0, 0.0);
    assert!(matches!(e, Err(LaunchError::Overflow { .. })), "{e:?}");
    let small = c.empty(4 * 4);
    let e = launch_strided_binary::<_, f32>(&c, k::BinaryInstr::Add, ok, ok, &small, 0.0, 0.0);
    assert!(
        matches!(e, Err(LaunchError::BufferTooSmall { arg: "out", .. })),
        "{e:?}"
    );
    // What ran is right: x + row (row = elements 8..12 of all-ones) is all twos.
    launch_strided_binary::<_, f32>(&c, k::BinaryInstr::Add, ok, row, &out, 0.0, 0.0).unwrap();
    assert_eq!(read(&c, out, 12), [2.0f32; 12]);
}

#[test]
fn conv_lengths_past_memory_are_refused() {
    use brotensor_kernels::conv::{self, ConvGeometry};
    use brotensor_kernels::conv1d;
    let Some(c) = client() else { return };
    let (x, w, y) = (sentinels(&c, 8), sentinels(&c, 8), sentinels(&c, 8));
    let geo = ConvGeometry {
        n: 1,
        c_in: 2,
        input: [1, 3, 3],
        c_out: 2,
        out: [1, 3, 3],
        kernel: [1, 3, 3],
        stride: [1, 1, 1],
        padding: [0, 1, 1],
        dilation: [1, 1, 1],
        groups: 1,
    };
    // x needs 18 floats, the buffer holds 8.
    assert!(matches!(
        conv::launch_conv_forward::<_, f32>(&c, (&x, &w, None), &y, geo),
        Err(LaunchError::BufferTooSmall { arg: "x", .. })
    ));
    let huge = ConvGeometry {
        n: usize::MAX,
        ..geo
    };
    for r in [
        conv::launch_conv_forward::<_, f32>(&c, (&x, &w, None), &y, huge),
        conv::launch_conv2d_backward_input::<_, f32>(&c, (&w, &y, None), &x, huge),
        conv::launch_conv2d_backward_weight::<_, f32>(&c, (&x, &y), &w, huge),
    ] {
        assert!(
            matches!(r, Err(LaunchError::Overflow { .. })),
            "an overflowing batch: {r:?}"
        );
    }
    assert!(matches!(
        conv::launch_conv_forward::<_, f32>(
            &c,
            (&x, &w, None),
            &y,
            ConvGeometry { groups: 0, ..geo }
        ),
        Err(LaunchError::ZeroDivisor { what: "groups" })
    ));
    assert!(matches!(
        conv::launch_conv2d_backward_bias::<_, f32>(&c, &y, &w, (usize::MAX, 2, 2)),
        Err(LaunchError::Overflow { .. })
    ));
    assert!(matches!(
        conv1d::launch_causal_conv1d_update::<_, f32>(
            &c,
            (&x, &w, None),
            (&w, &y),
            (usize::MAX, 1, 1, 2, 1)
        ),
        Err(LaunchError::Overflow { .. }) | Err(LaunchError::BufferTooSmall { .. })
    ));
    assert!(
        read(&c, y.clone(), 8).iter().all(|&v| v == SENTINEL),
        "y written"
    );
}

#[test]
fn image_space_lengths_past_memory_are_refused() {
    use brotensor_kernels::image;
    use brotensor_kernels::pad::{self, Window2d, PAD_REFLECT, PAD_ZERO};
    use brotensor_kernels::pooling::{self, PoolWindow};
    use brotensor_kernels::resize::{self, AxisGather, AxisTaps};
    let Some(c) = client() else { return };
    let (x, y, i) = (sentinels(&c, 8), sentinels(&c, 8), sentinels(&c, 8));
    let win = Window2d {
        input: [3, 3],
        kernel: [1, 1],
        stride: [1, 1],
        before: [1, 1],
        after: [1, 1],
        out: [5, 5],
    };
    // y needs 25 floats, the buffer holds 8.
    assert!(matches!(
        pad::launch_unfold2d::<_, f32>(&c, &x, &y, 1, &win, PAD_ZERO),
        Err(LaunchError::BufferTooSmall { .. })
    ));
    assert!(matches!(
        pad::launch_unfold2d::<_, f32>(&c, &x, &y, usize::MAX, &win, PAD_ZERO),
        Err(LaunchError::Overflow { .. })
    ));
    // Reflect padding as long as the axis would read before it; windows past the input.
    let wide = Window2d {
        before: [3, 1],
        out: [7, 5],
        ..win
    };
    assert!(matches!(
        pad::launch_unfold2d::<_, f32>(&c, &x, &y, 1, &wide, PAD_REFLECT),
        Err(LaunchError::Invalid { .. })
    ));
    let past = Window2d { out: [6, 5], ..win };
    assert!(matches!(
        pad::launch_unfold2d::<_, f32>(&c, &x, &y, 1, &past, PAD_ZERO),
        Err(LaunchError::Invalid { .. })
    ));
    assert!(matches!(
        pad::launch_pad2d_backward::<_, f32>(&c, &x, &y, 1, &win, PAD_ZERO),
        Err(LaunchError::BufferTooSmall { .. })
    ));
    // A resample table that reads past its input is refused before any launch.
    let bad = AxisTaps {
        len_in: 2,
        len_out: 2,
        taps: 1,
        index: &[0, 2],
        weight: &[1.0, 1.0],
    };
    let ok = AxisTaps {
        len_in: 2,
        len_out: 2,
        taps: 1,
        index: &[0, 1],
        weight: &[1.0, 1.0],
    };
    assert!(matches!(
        resize::launch_resample_forward::<_, f32>(&c, &x, &y, 1, (&bad, &ok)),
        Err(LaunchError::Invalid { .. })
    ));
    assert!(matches!(
        resize::launch_resample_forward::<_, f32>(&c, &x, &y, 3, (&ok, &ok)),
        Err(LaunchError::BufferTooSmall { .. })
    ));
    let gather = AxisGather {
        len_out: 2,
        start: &[0, 1, 3],
        index: &[0, 1],
        weight: &[1.0, 1.0],
    };
    assert!(matches!(
        resize::launch_resample_backward::<_, f32>(&c, &x, &y, 1, (&gather, &gather)),
        Err(LaunchError::Invalid { .. })
    ));
    assert!(matches!(
        resize::launch_convex_upsample::<_, f32>(&c, (&x, &x, &y), (1, 1, 2, 2), 2),
        Err(LaunchError::BufferTooSmall { .. })
    ));
    assert!(matches!(
        resize::launch_pixel_shuffle_upsample_2x::<_, f32>(&c, &x, &y, (1, 3, 2, 2), 2),
        Err(LaunchError::Invalid { .. })
    ));
    let pool = PoolWindow {
        input: [4, 4],
        out: [2, 2],
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0, 0],
        dilation: [1, 1],
    };
    assert!(matches!(
        pooling::launch_max_pool2d::<_, f32>(&c, (&x, &y, &i), 1, &pool),
        Err(LaunchError::BufferTooSmall { arg: "x", .. })
    ));
    assert!(matches!(
        pooling::launch_max_pool2d_backward::<_, f32>(&c, (&y, &i, &x), usize::MAX, &pool),
        Err(LaunchError::Overflow { .. })
    ));
    assert!(matches!(
        pooling::launch_masked_mean_pool::<_, f32>(&c, (&x, Some(&i), &y), (3, 4), false),
        Err(LaunchError::BufferTooSmall { arg: "x", .. })
    ));
    assert!(matches!(
        image::launch_image_normalize::<_, f32>(&c, (&x, &i, &i, &y), 16, (2, 8)),
        Err(LaunchError::BufferTooSmall { .. })
    ));
    assert!(matches!(
        image::launch_image_u8_to_nchw(&c, &[0u8; 7], &y, (1, 2, 4), (1.0, 0.0)),
        Err(LaunchError::Invalid { .. })
    ));
}

#[test]
fn diffusion_and_stylegan_lengths_past_memory_are_refused() {
    use brotensor_kernels::diffusion::{self as kd, Step};
    use brotensor_kernels::stylegan::{self as ks, BiasActParams, ModSizes, UpfirdnGeometry};
    let Some(c) = client() else { return };
    let (x, y, z) = (sentinels(&c, 8), sentinels(&c, 8), sentinels(&c, 8));
    let too_small =
        |r: Result<(), LaunchError>| matches!(r, Err(LaunchError::BufferTooSmall { .. }));
    // The row affine: 12 elements in rows of 4 read 12 and write 12; the buffers hold 8.
    assert!(too_small(kd::launch_row_affine::<_, f32>(
        &c,
        (&x, &z, None, &y),
        12,
        4,
        true
    )));
    // A shift wider than its buffer.
    assert!(too_small(kd::launch_row_affine::<_, f32>(
        &c,
        (&x, &z, Some(&z), &y),
        8,
        16,
        true
    )));
    // The sampler step: a second output without its coefficient, and lengths past memory.
    let step = Step {
        cx: 1.0,
        ce: 0.5,
        cp: 0.0,
        z_ce: None,
    };
    assert!(matches!(
        kd::launch_sampler_step::<_, f32>(&c, (&x, &z, None), (&y, Some(&z)), 8, step),
        Err(LaunchError::Invalid { .. })
    ));
    assert!(too_small(kd::launch_sampler_step::<_, f32>(
        &c,
        (&x, &z, Some(&z)),
        (&y, None),
        9,
        step
    )));
    // The embedding: N * dim overflowing, and a table of the wrong width.
    overflow_refused(
        &c,
        "timestep_embedding (N * dim)",
        kd::launch_timestep_embedding::<_, f32>(&c, (&x, &y), &[1.0], WRAPS_TO_TWO),
        &[&y],
    );
    assert!(matches!(
        kd::launch_timestep_embedding::<_, f32>(&c, (&x, &y), &[1.0, 0.5], (2, 2)),
        Err(LaunchError::Invalid { .. })
    ));
    // bias_act: a bias shorter than C, a gradient shorter than the tensor.
    let p = BiasActParams {
        leaky_alpha: Some(0.2),
        gain: 1.0,
        clamp: None,
    };
    assert!(too_small(ks::launch_bias_act::<_, f32>(
        &c,
        (&x, None, Some(&z), &y),
        8,
        (16, 1),
        p
    )));
    let short = sentinels(&c, 4);
    assert!(too_small(ks::launch_bias_act::<_, f32>(
        &c,
        (&x, Some(&short), None, &y),
        8,
        (1, 8),
        p
    )));
    // The modulation: an overflowing weight, and outputs past memory.
    let m = ModSizes {
        n: 2,
        c_out: 2,
        c_in: 1,
        taps: 2,
    };
    overflow_refused(
        &c,
        "modulate_weights (N * C_out * row)",
        ks::launch_modulate_weights::<_, f32>(
            &c,
            (&x, &z, &y, &z),
            ModSizes {
                n: WRAPS_TO_TWO.0,
                c_out: WRAPS_TO_TWO.1,
                ..m
            },
            None,
        ),
        &[&y],
    );
    // wmod needs N C_out C_in taps = 2*2*1*2 = 8 (fits); with 3 taps 12 does not.
    assert!(too_small(ks::launch_modulate_weights::<_, f32>(
        &c,
        (&x, &z, &y, &z),
        ModSizes { taps: 3, ..m },
        Some(1e-8)
    )));
    assert!(too_small(ks::launch_modulate_weights_backward::<_, f32>(
        &c,
        (&x, &z, &z, &x),
        &y,
        (&z, &y),
        ModSizes { c_in: 3, ..m },
        true
    )));
    // upfirdn2d: an output past memory, and a pad whose indices would leave i32.
    let g = UpfirdnGeometry {
        input: [2, 2],
        out: [3, 3],
        filter: [2, 2],
        up: [2, 2],
        down: [1, 1],
        pad: [0, 0, 0, 0],
        flip_filter: false,
        gain: 1.0,
    };
    assert!(too_small(ks::launch_upfirdn2d::<_, f32>(
        &c,
        (&x, &z, &y),
        1,
        &g
    )));
    assert!(matches!(
        ks::launch_upfirdn2d::<_, f32>(
            &c,
            (&x, &z, &y),
            0,
            &UpfirdnGeometry {
                pad: [i64::from(i32::MIN), 0, 0, 0],
                ..g
            }
        ),
        Err(LaunchError::Invalid { .. })
    ));
    for (i, h) in [&x, &z].into_iter().enumerate() {
        let bytes = c.read_one(h.clone()).unwrap();
        assert!(
            f32::from_bytes(&bytes).iter().all(|&v| v == SENTINEL),
            "input {i} was written"
        );
    }
}

#[test]
fn optimizer_lengths_past_memory_are_refused() {
    use brotensor_kernels::optim::{self as ko, Adam};
    let Some(c) = client() else { return };
    let (p, g, m, v) = (
        sentinels(&c, 8),
        sentinels(&c, 8),
        sentinels(&c, 8),
        sentinels(&c, 4),
    );
    let too_small =
        |r: Result<(), LaunchError>| matches!(r, Err(LaunchError::BufferTooSmall { .. }));
    let s = Adam {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        inv_bc1: 10.0,
        inv_bc2: 1000.0,
        decay: 1.0,
    };
    // `v` holds 4 of the 8 states the step updates; a master of 4 as well.
    assert!(too_small(ko::launch_adam::<_, f32>(
        &c,
        (&p, &g, &m, &v, None),
        8,
        s
    )));
    assert!(too_small(ko::launch_adam::<_, f32>(
        &c,
        (&p, &g, &m, &m, Some(&v)),
        8,
        s
    )));
    assert!(too_small(ko::launch_sgd::<_, f32>(
        &c,
        (&p, &g, &v, None),
        8,
        (0.1, 0.9)
    )));
    // A length past every buffer, and past the grid.
    for len in [usize::MAX >> 40, usize::MAX] {
        assert!(ko::launch_sgd::<_, f32>(&c, (&p, &g, &m, None), len, (0.1, 0.9)).is_err());
        assert!(ko::launch_adam::<_, f32>(&c, (&p, &g, &m, &m, None), len, s).is_err());
    }
    for h in [&p, &g, &m, &v] {
        let bytes = c.read_one(h.clone()).unwrap();
        assert!(
            f32::from_bytes(&bytes).iter().all(|&x| x == SENTINEL),
            "a refused optimizer launch wrote a buffer"
        );
    }
}

#[test]
fn fft_lengths_past_memory_are_refused() {
    use brotensor_kernels::fft::{self, FftKind, StftKind, StftShape};
    let Some(c) = client() else { return };
    let (x, w, y) = (sentinels(&c, 8), sentinels(&c, 8), sentinels(&c, 8));
    // rows * n past usize, rows of 8 complex values in 8 floats, a half spectrum too short,
    // a Bluestein length (17) in short buffers, an STFT whose spectrogram does not fit.
    assert!(matches!(
        fft::launch_fft(&c, FftKind::Fft, (&x, &y), usize::MAX, 2),
        Err(LaunchError::Overflow { .. })
    ));
    assert!(matches!(
        fft::launch_fft(&c, FftKind::Fft, (&x, &y), 8, 1),
        Err(LaunchError::BufferTooSmall { arg: "x", .. })
    ));
    assert!(matches!(
        fft::launch_fft(&c, FftKind::Irfft, (&x, &y), 8, 1),
        Err(LaunchError::BufferTooSmall { arg: "x", .. })
    ));
    assert!(matches!(
        fft::launch_fft(&c, FftKind::Rfft, (&x, &y), 17, 1),
        Err(LaunchError::BufferTooSmall { arg: "x", .. })
    ));
    let shape = StftShape {
        signals: 1,
        len: 8,
        frames: 3,
        n_fft: 4,
        hop: 2,
        win: 4,
        center: true,
        norm: 1.0,
    };
    assert!(matches!(
        fft::launch_stft(&c, StftKind::Stft, (&x, &w, &y), &shape),
        Err(LaunchError::BufferTooSmall { arg: "y", .. })
    ));
    for (h, what) in [(&x, "x"), (&y, "y")] {
        assert!(
            read(&c, h.clone(), 8).iter().all(|&v| v == SENTINEL),
            "{what} written"
        );
    }
}

#[test]
fn lstm_rows_past_their_buffers_are_refused() {
    use brotensor_kernels::lstm::{self, Prev, StepAt};
    let Some(c) = client() else { return };
    let (a, b, g, y) = (
        sentinels(&c, 8),
        sentinels(&c, 8),
        sentinels(&c, 8),
        sentinels(&c, 8),
    );
    let at = |p, y, cache| StepAt { p, y, cache };
    // B H past usize, a projection row past p, a cache block past gates, a previous block
    // past c, a backward row past dz.
    assert!(matches!(
        lstm::launch_lstm_step(
            &c,
            (&a, None),
            Prev::Zero,
            (&y, &g, &b),
            at(0, 0, 0),
            (usize::MAX, 2)
        ),
        Err(LaunchError::Overflow { .. })
    ));
    assert!(matches!(
        lstm::launch_lstm_step(
            &c,
            (&a, None),
            Prev::Zero,
            (&y, &g, &b),
            at(1, 0, 0),
            (1, 2)
        ),
        Err(LaunchError::BufferTooSmall { arg: "p", .. })
    ));
    assert!(matches!(
        lstm::launch_lstm_step(
            &c,
            (&a, None),
            Prev::Zero,
            (&y, &g, &b),
            at(0, 0, 1),
            (1, 2)
        ),
        Err(LaunchError::BufferTooSmall { arg: "gates", .. })
    ));
    assert!(matches!(
        lstm::launch_lstm_step(
            &c,
            (&a, None),
            Prev::Rows(1),
            (&y, &g, &b),
            at(0, 0, 0),
            (1, 2)
        ),
        Err(LaunchError::BufferTooSmall { arg: "gates", .. })
    ));
    assert!(matches!(
        lstm::launch_lstm_step_backward(&c, (&g, &b), Prev::Zero, (&y, None), (&a, &g), 1, (1, 2)),
        Err(LaunchError::BufferTooSmall { arg: "gates", .. })
    ));
    for (h, what) in [(&a, "a"), (&b, "b"), (&g, "g"), (&y, "y")] {
        assert!(
            read(&c, h.clone(), 8).iter().all(|&v| v == SENTINEL),
            "{what} written"
        );
    }
}
