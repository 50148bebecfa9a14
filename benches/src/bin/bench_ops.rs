//! Throughput of the activations, norms (forward and backward), losses and reductions that
//! `bench_dense` does not time, and of the tensor-algebra ops (transpose, single-axis
//! reductions, row gather, concatenate), on every device, each against a copy of one tensor timed in
//! batches alternating with it. Bytes counted are the tensors the op must read and write
//! once (parameter vectors and per-row outputs are small and not counted).
//!
//! Run: `cargo run --release -p brotensor-benches --bin bench_ops`. F32 `(4096, 4096)`
//! tensors (`(1024, 1024)` on a software device); figures are the best of 5 batches. An
//! argument keeps only the ops whose name contains it (`bench_ops softmax`), so one op can
//! be profiled alone.

use brotensor::{ops, Dtype, Result, Tensor};
use brotensor_benches::best_secs_paired;

fn host(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 7919 + seed) % 2001) as f32 - 1000.0) * 1e-3)
        .collect()
}

fn main() -> Result<()> {
    let _ = brotensor::init();
    let only = std::env::args().nth(1).unwrap_or_default();
    println!("# bench_ops");
    println!();
    println!("| device | op | shape | ms | GB/s | vs copy |");
    println!("|---|---|---|---:|---:|---:|");
    for device in brotensor_benches::selected_devices() {
        let name = brotensor::device_name(device)?;
        let software = brotensor::is_software(device)?;
        let (r, c) = if software { (1024, 1024) } else { (4096, 4096) };
        let reps = if software { 2 } else { 5 };
        let t = |rows: usize, cols: usize, seed: usize| {
            Tensor::from_slice_on(device, &host(rows * cols, seed), rows, cols)
        };
        let (x, dy, half) = (t(r, c, 1)?, t(r, c, 2)?, t(r, c / 2, 3)?);
        let probs = {
            let mut p = Tensor::default();
            ops::softmax_rows_forward(&x, &mut p)?;
            p
        };
        let (g, b) = (t(c, 1, 4)?, t(c, 1, 5)?);
        let (mut y, mut z, mut copy) = (Tensor::default(), Tensor::default(), Tensor::default());
        let (mut s1, mut s2, mut s3) = (Tensor::default(), Tensor::default(), Tensor::default());
        let mut dg = Tensor::zeros_on(device, c, 1, Dtype::F32)?;
        let mut db = Tensor::zeros_on(device, c, 1, Dtype::F32)?;
        ops::layernorm_forward_batched_with_caches(
            &x, &g, &b, 1e-5, &mut y, &mut z, &mut s1, &mut s2,
        )?;
        let (xhat, rstd) = (z.try_clone()?, s2.try_clone()?);
        let tensor_bytes = (r * c * 4) as f64;
        let mut row = |op: &str, tensors: f64, f: &mut dyn FnMut() -> Result<()>| -> Result<()> {
            if !op.contains(only.as_str()) {
                return Ok(());
            }
            let mut failed = None;
            let (s, copy_s) = best_secs_paired(
                device,
                reps,
                || {
                    if let Err(e) = f() {
                        failed.get_or_insert(e);
                    }
                },
                || ops::cast(&x, &mut copy, Dtype::F32).expect("copy"),
            );
            if let Some(e) = failed {
                return Err(e);
            }
            let gbs = tensors * tensor_bytes / s / 1e9;
            let copy_gbs = 2.0 * tensor_bytes / copy_s / 1e9;
            println!(
                "| {name} | {op} | {r}x{c} | {:.3} | {gbs:.1} | {:.2} |",
                s * 1e3,
                gbs / copy_gbs
            );
            Ok(())
        };
        row("log_forward", 2.0, &mut || ops::log_forward(&probs, &mut y))?;
        row("sin_forward", 2.0, &mut || ops::sin_forward(&x, &mut y))?;
        row("round_forward", 2.0, &mut || ops::round_forward(&x, &mut y))?;
        row("tanh_forward", 2.0, &mut || ops::tanh_forward(&x, &mut y))?;
        row("gelu_backward", 3.0, &mut || {
            ops::gelu_backward(&x, &dy, &mut y)
        })?;
        row("gelu_exact_forward", 2.0, &mut || {
            ops::gelu_exact_forward(&x, &mut y)
        })?;
        row("silu_backward", 3.0, &mut || {
            ops::silu_backward(&x, &dy, &mut y)
        })?;
        // Snake over (N, C, L) = (r c / 2^20, 256, 4096): x viewed as NCL rows of L.
        let snake_alpha = t(256, 1, 6)?;
        let ncl = (r * c / (256 * 4096), 256, 4096);
        let x_ncl = x.reshaped(ncl.0, ncl.1 * ncl.2)?;
        row("snake_forward (N, 256, 4096)", 2.0, &mut || {
            ops::snake_forward(&x_ncl, &snake_alpha, None, ncl, &mut y)
        })?;
        row("swiglu_forward", 1.5, &mut || {
            ops::swiglu_forward(&x, &mut y)
        })?;
        row("swiglu_backward", 2.5, &mut || {
            ops::swiglu_backward(&x, &half, &mut y)
        })?;
        row("geglu_forward", 1.5, &mut || ops::geglu_forward(&x, &mut y))?;
        row("softmax_forward (flat)", 2.0, &mut || {
            ops::softmax_forward(&x, None, &mut y)
        })?;
        row("softmax_backward (flat)", 3.0, &mut || {
            ops::softmax_backward(&probs, &dy, &mut y)
        })?;
        row("layernorm forward with caches", 3.0, &mut || {
            ops::layernorm_forward_batched_with_caches(
                &x, &g, &b, 1e-5, &mut y, &mut z, &mut s1, &mut s2,
            )
        })?;
        row("layernorm backward", 3.0, &mut || {
            ops::layernorm_backward_batched_with_caches(
                &dy, &xhat, &g, &rstd, &mut y, &mut dg, &mut db,
            )
        })?;
        row("rms_norm_backward", 3.0, &mut || {
            ops::rms_norm_backward(&x, &g, &dy, 1e-6, &mut y, &mut dg)
        })?;
        row("l2_norm_forward (heads of 128)", 2.0, &mut || {
            ops::l2_norm_forward(&x, 128, c / 128, 1e-6, &mut y)
        })?;
        row("l2_norm_backward (heads of 128)", 3.0, &mut || {
            ops::l2_norm_backward(&x, &dy, 128, c / 128, 1e-6, &mut y)
        })?;
        row("softmax_xent_fused_batched", 4.0, &mut || {
            ops::softmax_xent_fused_batched(&x, &probs, None, &[0, c], &mut y, &mut z, &mut s3)
        })?;
        row("bce_with_logits_fused_batched", 4.0, &mut || {
            ops::bce_with_logits_fused_batched(&x, &probs, None, 1.0, &mut y, &mut z, &mut s3)
        })?;
        row("mse_vec_forward", 2.0, &mut || {
            ops::mse_vec_forward(&x, &dy).map(|_| ())
        })?;
        row("sum_cols", 1.0, &mut || ops::sum_cols(&x, &mut s3))?;
        // The same elements as a tall input (a bias gradient over many tokens).
        let tall = x.reshaped(r * c / 64, 64)?;
        let mut s4 = Tensor::default();
        row("sum_cols (rows of 64)", 1.0, &mut || {
            ops::sum_cols(&tall, &mut s4)
        })?;
        row("argmax_rows", 1.0, &mut || ops::argmax_rows(&x, &mut s1))?;
        row("top_k_rows (k = 8)", 1.0, &mut || {
            ops::top_k_rows(&x, 8, &mut s3, &mut s1)
        })?;
        row("rows_count_above", 1.0, &mut || {
            ops::rows_count_above(&x, -0.5, 0.5, &mut s1)
        })?;

        // The tensor-algebra ops (issue 13), as `bench_layout` times them on the CPU against
        // numpy: the same operand seen as N-d.
        let x2 = x.reshape(&[r, c])?;
        row("transpose [1, 0]", 2.0, &mut || {
            ops::transpose(&x2, &[1, 0]).map(drop)
        })?;
        let mut red = Tensor::default();
        row("reduce_sum axis 0", 1.0, &mut || {
            ops::reduce_sum_out(&x2, 0, &mut red)
        })?;
        row("reduce_sum axis 1", 1.0, &mut || {
            ops::reduce_sum_out(&x2, 1, &mut red)
        })?;
        row("reduce_max axis 1", 1.0, &mut || {
            ops::reduce_max_out(&x2, 1, &mut red)
        })?;
        // Every row, in a shuffled order (r -> r * 1031 mod rows: a permutation, since 1031 is
        // odd and `rows` a power of two).
        let order: Vec<i64> = (0..r as i64).map(|i| (i * 1031) % r as i64).collect();
        let order = Tensor::from_slice_nd_on(device, &order, &[r, 1])?;
        let rows = ops::GatherDims {
            offset_dims: vec![1],
            collapsed_slice_dims: vec![0],
            start_index_map: vec![0],
            index_vector_dim: 1,
        };
        row("gather rows (shuffled)", 2.0, &mut || {
            ops::gather(&x2, &order, &rows, &[1, c]).map(drop)
        })?;
        let blocks: Vec<Tensor> = (0..4)
            .map(|i| ops::slice(&x2, &[i * r / 4, 0], &[(i + 1) * r / 4, c], &[1, 1]))
            .collect::<Result<_>>()?;
        let refs: Vec<&Tensor> = blocks.iter().collect();
        row("concatenate 4 blocks, axis 0", 2.0, &mut || {
            ops::concatenate(&refs, 0).map(drop)
        })?;
    }
    Ok(())
}
