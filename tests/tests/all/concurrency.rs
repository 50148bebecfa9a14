//! One device shared by many threads: each runs a mix of ops on its own tensors and on
//! tensors another thread made, and checks the results against float64 math; tensors cross
//! threads; `sync`, `memory_info` and `memory_trim` from a thread that launched nothing
//! cover the work of the others (CubeCL queues per thread).

use std::sync::{Arc, Barrier};

use brotensor::{ops, Device, Dtype, Tensor};
use brotensor_tests::{assert_close, gpu_devices, SplitMix64};

const THREADS: usize = 8;

fn devices() -> Vec<Device> {
    std::iter::once(Device::Cpu).chain(gpu_devices()).collect()
}

/// `(a . b + 1) * 0.5`, then a row softmax, in float64 (row-major, `a (m, k)`, `b (k, n)`).
fn reference(a: &[f32], b: &[f32], (m, k, n): (usize, usize, usize)) -> Vec<f32> {
    let mut out = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k)
                .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
                .sum();
            out[i * n + j] = (dot + 1.0) * 0.5;
        }
        let row = &mut out[i * n..(i + 1) * n];
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
        row.iter_mut().for_each(|v| *v = (*v - max).exp() / sum);
    }
    out.into_iter().map(|v| v as f32).collect()
}

/// The chain the threads run: matmul, scalar ops in place, a row softmax.
fn chain(a: &Tensor, b: &Tensor) -> brotensor::Result<Tensor> {
    let mut c = Tensor::default();
    ops::matmul(a, b, &mut c)?;
    c.add_scalar_(1.0)?;
    c.mul_scalar_(0.5)?;
    let mut p = Tensor::default();
    ops::softmax_rows_forward(&c, &mut p)?;
    Ok(p)
}

#[test]
fn eight_threads_share_a_device_and_each_others_tensors() {
    let (m, k, n) = (24, 40, 33);
    for device in devices() {
        // Every thread makes one operand and hands it to its neighbour.
        let barrier = Arc::new(Barrier::new(THREADS));
        type Made = Vec<std::sync::OnceLock<(Vec<f32>, Tensor)>>;
        let made: Arc<Made> = Arc::new((0..THREADS).map(|_| std::sync::OnceLock::new()).collect());
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (barrier, made) = (barrier.clone(), made.clone());
                std::thread::spawn(move || {
                    let mut rng = SplitMix64::new(0xC0 + t as u64);
                    let b_host = rng.uniform(k * n, -1.0, 1.0);
                    let b = Tensor::from_slice_on(device, &b_host, k, n).unwrap();
                    let _ = made[t].set((b_host, b));
                    barrier.wait();
                    for round in 0..4 {
                        let a_host = rng.uniform(m * k, -1.0, 1.0);
                        let a = Tensor::from_slice_on(device, &a_host, m, k).unwrap();
                        // Alternate between this thread's B and the neighbour's.
                        let (b_host, b) = made[(t + round) % THREADS].get().unwrap();
                        let got = chain(&a, b).unwrap().to_vec::<f32>().unwrap();
                        let want = reference(&a_host, b_host, (m, k, n));
                        assert_close(
                            &format!("{device} thread {t} round {round}"),
                            &want,
                            &got,
                            (1e-5, 1e-4),
                        );
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("a worker thread failed");
        }
        eprintln!("concurrency: {THREADS} threads on {device} ok");
    }
}

#[test]
fn a_tensor_made_on_one_thread_is_computed_and_read_on_another() {
    for device in devices() {
        let host: Vec<f32> = (0..4096).map(|i| (i % 97) as f32 * 0.01 - 0.4).collect();
        // Made and transformed on one thread, with no read there (GPU work left queued).
        let x = {
            let host = host.clone();
            std::thread::spawn(move || {
                let x = Tensor::from_slice_on(device, &host, 64, 64).unwrap();
                ops::exp(&x).unwrap()
            })
            .join()
            .unwrap()
        };
        // Computed on and read by another.
        let y = std::thread::spawn(move || ops::mul_scalar(&x, 2.0).unwrap().to_vec::<f32>())
            .join()
            .unwrap()
            .unwrap();
        let want: Vec<f32> = host
            .iter()
            .map(|&v| (2.0 * f64::from(v).exp()) as f32)
            .collect();
        assert_close(&format!("{device} cross-thread"), &want, &y, (1e-6, 1e-5));
    }
}

#[test]
fn sync_and_memory_figures_from_a_thread_that_launched_nothing_cover_the_others() {
    for device in gpu_devices() {
        // A thread allocates and fills 16 MiB and keeps it while a fresh thread asks.
        let (to_main, from_worker) = std::sync::mpsc::channel();
        let (to_worker, from_main) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            let mut t = Tensor::zeros_on(device, 1024, 4096, Dtype::F32).unwrap();
            t.add_scalar_(3.0).unwrap();
            to_main.send(()).unwrap();
            from_main.recv().unwrap();
            t.to_vec::<f32>().unwrap()
        });
        from_worker.recv().unwrap();
        let in_use = std::thread::spawn(move || {
            brotensor::sync(device).unwrap();
            let info = brotensor::memory_info(device)
                .unwrap()
                .expect("GPU memory figures");
            brotensor::memory_trim(device).unwrap();
            info.in_use
        })
        .join()
        .unwrap();
        assert!(
            in_use >= 16 << 20,
            "{device}: memory_info from another thread sees {in_use} bytes in use, but a live \
             16 MiB tensor exists"
        );
        to_worker.send(()).unwrap();
        let v = worker.join().unwrap();
        assert!(
            v.iter().all(|&x| x == 3.0),
            "{device}: contents after a foreign trim"
        );
    }
}
