//! Dense-core throughput on every device: matmul in GFLOP/s (on the CPU also against the
//! `gemm` crate called directly, in the same run) and the row ops at 4096 x 4096 in GB/s
//! against a device copy of the same tensor timed in batches alternating with each op.
//!
//! Run: `cargo run --release -p brotensor-benches --bin bench_dense`. Figures are the best of
//! 5 timed batches; GPU batches end with a sync.

use brotensor::{ops, Device, Dtype, Tensor};
use brotensor_benches::{best_secs, best_secs_paired};

fn host(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 7919 + seed) % 2001) as f32 - 1000.0) * 1e-3)
        .collect()
}

/// `y = 1.01 x` in one streamed pass: what an element-wise op with a single multiply reaches
/// against the copy.
fn floor_one_pass(x: &[f32], y: &mut [f32]) {
    use brotensor_cpu::stream::StreamedIter;
    use rayon::prelude::*;
    brotensor_cpu::stream::streaming(y.len(), 4, |streaming| {
        y.par_chunks_mut(1 << 16)
            .zip(x.par_chunks(1 << 16))
            .for_each_streamed(streaming, |stream, (y, x)| {
                brotensor_cpu::simd::wide(
                    #[inline(always)]
                    |_| {
                        brotensor_cpu::stream::write_map(
                            stream,
                            y,
                            x,
                            #[inline(always)]
                            |v| v * 1.01,
                        )
                    },
                )
            });
    });
}

/// Each `cols`-wide row summed, then written scaled by its sum (streamed): the two passes
/// over a row (statistics, then output) that every normalization needs at least, with
/// almost no arithmetic.
fn floor_two_pass(x: &[f32], cols: usize, y: &mut [f32]) {
    use brotensor_cpu::stream::StreamedIter;
    use rayon::prelude::*;
    brotensor_cpu::stream::streaming(y.len(), 4, |streaming| {
        y.par_chunks_mut(cols)
            .zip(x.par_chunks(cols))
            .for_each_streamed(streaming, |stream, (y, x)| {
                brotensor_cpu::simd::wide(
                    #[inline(always)]
                    |_| {
                        let s = brotensor_cpu::reduction::sum(x);
                        brotensor_cpu::stream::write_map(
                            stream,
                            y,
                            x,
                            #[inline(always)]
                            |v| v * s,
                        )
                    },
                )
            });
    });
}

/// `gemm` called directly on host slices: the CPU reference for the matmul ratio. Returns
/// a closure that multiplies two fixed `n x n` matrices it owns.
fn gemm_direct(n: usize) -> impl FnMut() {
    let a = host(n * n, 1);
    let b = host(n * n, 2);
    let mut c = vec![0.0f32; n * n];
    move || {
        // SAFETY: a, b, c are n*n row-major matrices with the strides given; c is unique.
        unsafe {
            gemm::gemm(
                n,
                n,
                n,
                c.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                1,
                n as isize,
                b.as_ptr(),
                1,
                n as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(0),
            );
        }
    }
}

fn main() -> brotensor::Result<()> {
    let _ = brotensor::init();
    println!("# bench_dense");
    println!();
    println!("| device | dtype | op | size | ms | rate | vs reference |");
    println!("|---|---|---|---|---:|---:|---:|");
    for device in brotensor_benches::selected_devices() {
        let name = brotensor::device_name(device)?;
        let software = brotensor::is_software(device)?;
        let sizes: &[usize] = if software {
            &[256, 1024]
        } else {
            &[256, 1024, 2048]
        };
        for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
            if !brotensor::supports_dtype(device, dtype)? {
                continue;
            }
            for &n in sizes {
                let a = Tensor::from_slice_on(device, &host(n * n, 1), n, n)?.to_dtype(dtype)?;
                let b = Tensor::from_slice_on(device, &host(n * n, 2), n, n)?.to_dtype(dtype)?;
                let mut c = Tensor::default();
                let reps = if n <= 256 {
                    20
                } else if software {
                    1
                } else {
                    3
                };
                let flop = 2.0 * (n * n * n) as f64;
                let (s, vs) = if device == Device::Cpu {
                    // Alternating batches with the gemm crate called directly.
                    let (s, g) = best_secs_paired(
                        device,
                        reps * 3,
                        || ops::matmul(&a, &b, &mut c).unwrap(),
                        gemm_direct(n),
                    );
                    let g = flop / g / 1e9;
                    (
                        s,
                        format!("{:.2} (gemm crate {g:.1} GFLOP/s)", flop / s / 1e9 / g),
                    )
                } else {
                    let s = best_secs(device, reps, || ops::matmul(&a, &b, &mut c).unwrap());
                    (s, "-".to_string())
                };
                let gflops = flop / s / 1e9;
                println!(
                    "| {name} | {dtype} | matmul | {n}^3 | {:.3} | {gflops:.1} GFLOP/s | {vs} |",
                    s * 1e3
                );
            }
            // Memory-bound row ops at 4096 x 4096 against a copy of the same tensor.
            let (r, cols) = (4096usize, 4096usize);
            let es = if dtype == Dtype::F32 { 4 } else { 2 };
            let bytes = 2 * r * cols * es;
            let x = Tensor::from_slice_on(device, &host(r * cols, 3), r, cols)?.to_dtype(dtype)?;
            let g = Tensor::from_slice_on(device, &host(cols, 4), cols, 1)?.to_dtype(dtype)?;
            let bt = Tensor::from_slice_on(device, &host(cols, 5), cols, 1)?.to_dtype(dtype)?;
            let mut y = Tensor::zeros_on(device, r, cols, dtype)?;
            let reps = if software { 2 } else { 10 };
            // Each op is timed in batches alternating with a copy of the same tensor (a
            // same-dtype cast into a second buffer), and compared with that copy.
            let mut y2 = Tensor::zeros_on(device, r, cols, dtype)?;
            let mut row = |op: &str, y: &mut Tensor, f: &mut dyn FnMut(&mut Tensor)| {
                let (s, copy) = best_secs_paired(
                    device,
                    reps,
                    || f(&mut *y),
                    || ops::cast(&x, &mut y2, dtype).unwrap(),
                );
                let gbs = bytes as f64 / s / 1e9;
                let copy_gbs = bytes as f64 / copy / 1e9;
                println!(
                    "| {name} | {dtype} | {op} | 4096^2 | {:.3} | {gbs:.1} GB/s | {:.2} (copy {:.3} ms, {copy_gbs:.1} GB/s) |",
                    s * 1e3,
                    gbs / copy_gbs,
                    copy * 1e3,
                );
            };
            row("softmax_rows_forward", &mut y, &mut |y| {
                ops::softmax_rows_forward(&x, y).unwrap()
            });
            row("layernorm (inference)", &mut y, &mut |y| {
                ops::layernorm_forward_inference_batched(&x, &g, &bt, 1e-5, y).unwrap()
            });
            row("rms_norm_forward", &mut y, &mut |y| {
                ops::rms_norm_forward(&x, &g, 1e-6, y).unwrap()
            });
            row("gelu_forward", &mut y, &mut |y| {
                ops::gelu_forward(&x, y).unwrap()
            });
            if device == Device::Cpu && dtype == Dtype::F32 {
                // The access patterns' own limits on this machine, from the CPU crate's
                // streaming and vector primitives with next to no arithmetic.
                let (hx, mut hy) = (host(r * cols, 3), vec![0.0f32; r * cols]);
                row("floor: one streamed pass y = 1.01x", &mut y, &mut |_| {
                    floor_one_pass(&hx, &mut hy)
                });
                row(
                    "floor: two passes per row (sum, then scale)",
                    &mut y,
                    &mut |_| floor_two_pass(&hx, cols, &mut hy),
                );
            }
            // GroupNorm at a diffusion U-Net shape: (N, C, H, W) = (2, 320, 64, 64), 32
            // groups; forward moves x and y, backward x, dy and dx (the channel sums are
            // small). Against the copy of a same-sized tensor, timed alternately.
            let dims = (2usize, 320usize, 64usize, 64usize);
            let (gn, gc) = (dims.0, dims.1 * dims.2 * dims.3);
            let gx = Tensor::from_slice_on(device, &host(gn * gc, 6), gn, gc)?.to_dtype(dtype)?;
            let gg = Tensor::from_slice_on(device, &host(dims.1, 7), dims.1, 1)?.to_dtype(dtype)?;
            let gb = Tensor::zeros_on(device, dims.1, 1, dtype)?;
            let (mut gy, mut gcopy) = (Tensor::default(), Tensor::zeros_on(device, gn, gc, dtype)?);
            let (mut gdx, mut gdg, mut gdb) = (
                Tensor::default(),
                Tensor::zeros_on(device, dims.1, 1, dtype)?,
                Tensor::zeros_on(device, dims.1, 1, dtype)?,
            );
            let gbytes = gn * gc * es;
            let mut gn_row = |op: &str, moved: usize, f: &mut dyn FnMut()| {
                let (s, copy) = best_secs_paired(device, reps, &mut *f, || {
                    ops::cast(&gx, &mut gcopy, dtype).unwrap()
                });
                let gbs = (moved * gbytes) as f64 / s / 1e9;
                let copy_gbs = (2 * gbytes) as f64 / copy / 1e9;
                println!(
                    "| {name} | {dtype} | {op} | 2x320x64x64 | {:.3} | {gbs:.1} GB/s | {:.2} (copy {:.3} ms, {copy_gbs:.1} GB/s) |",
                    s * 1e3,
                    gbs / copy_gbs,
                    copy * 1e3,
                );
            };
            gn_row("group_norm_forward", 2, &mut || {
                ops::group_norm_forward(&gx, &gg, &gb, dims, 32, 1e-5, &mut gy).unwrap()
            });
            gn_row("group_norm_backward", 3, &mut || {
                ops::group_norm_backward(
                    &gx, &gg, &gx, dims, 32, 1e-5, &mut gdx, &mut gdg, &mut gdb,
                )
                .unwrap()
            });
            let ones =
                Tensor::from_slice_on(device, &vec![1.0f32; dims.1], dims.1, 1)?.to_dtype(dtype)?;
            gn_row("batch_norm_inference", 2, &mut || {
                ops::batch_norm_inference(&gx, &gg, &gb, &gb, &ones, dims, 1e-5, &mut gy).unwrap()
            });
            // BatchNorm training (FP32 only) on the same tensor: 320 channels of N*H*W = 8192
            // values.
            if dtype == Dtype::F32 {
                let (mut rm, mut rv) = (
                    Tensor::zeros_on(device, dims.1, 1, dtype)?,
                    Tensor::zeros_on(device, dims.1, 1, dtype)?,
                );
                let (mut sm, mut sr) = (Tensor::default(), Tensor::default());
                gn_row("batch_norm_forward", 2, &mut || {
                    ops::batch_norm_forward(
                        &gx, &gg, &gb, dims, 1e-5, 0.1, &mut rm, &mut rv, &mut gy, &mut sm, &mut sr,
                    )
                    .unwrap()
                });
                gn_row("batch_norm_backward", 3, &mut || {
                    ops::batch_norm_backward(
                        &gx, &gg, &sm, &sr, &gx, dims, &mut gdx, &mut gdg, &mut gdb,
                    )
                    .unwrap()
                });
            }
        }
    }
    Ok(())
}
