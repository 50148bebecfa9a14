//! Training (issue 29) on the CPU: `adam_step` on 64 Mi parameters in GB/s of the 28 bytes
//! per parameter it must move, against the streaming copy and candle-nn's `AdamW` (feature
//! `candle`), each pair interleaved round by round; the digits CNN's training steps per
//! second at batch 64 against the same network in candle 0.11 (its `backward()` and
//! `AdamW`), same weights, same batches, interleaved; and the tape's cost: the CNN's forward
//! on constants (nothing recorded), on parameters (recorded) and as plain op calls.
//!
//! On the GPU devices `BROTENSOR_BENCH_DEVICES` selects: `adam_step` against the device's
//! copy, and the CNN's training steps per second (`gpu-kit/torch_peer.py` times torch on the
//! same network).
//!
//! `cargo run --release -p brotensor-benches --features candle --bin bench_train`
//! (`BROTENSOR_BENCH_DEVICES=cpu` for the CPU tables only)

use std::time::Instant;

use brotensor::autograd::Var;
use brotensor::ops::{self, AdamParams};
use brotensor::{Device, Tensor};
use brotensor_benches::best_secs_paired;
use brotensor_models::digits::{Cnn, Digits, Trainer, CONV, POOL, TRAIN};

#[cfg(feature = "candle")]
mod peer {
    use candle_core::{DType, Device, Module, Tensor, Var};
    use candle_nn::Optimizer;

    /// `AdamW` (no decay) over one parameter with a fixed gradient.
    pub struct AdamOnly {
        opt: candle_nn::AdamW,
        grads: candle_core::backprop::GradStore,
    }

    impl AdamOnly {
        pub fn new(n: usize) -> Self {
            let p = Var::from_tensor(&Tensor::ones(n, DType::F32, &Device::Cpu).unwrap()).unwrap();
            let g = (Tensor::ones(n, DType::F32, &Device::Cpu).unwrap() * 0.01).unwrap();
            let mut grads = candle_core::backprop::GradStore::default();
            grads.insert(p.as_tensor(), g);
            let params = candle_nn::ParamsAdamW {
                weight_decay: 0.0,
                ..Default::default()
            };
            AdamOnly {
                opt: candle_nn::AdamW::new(vec![p], params).unwrap(),
                grads,
            }
        }

        pub fn step(&mut self) {
            self.opt.step(&self.grads).unwrap();
        }
    }

    /// The digits CNN in candle-nn, from the same initial weights.
    pub struct Net {
        vars: Vec<Var>,
        opt: candle_nn::AdamW,
    }

    impl Net {
        pub fn new(weights: &[(Vec<f32>, Vec<usize>)], lr: f64) -> Self {
            let vars: Vec<Var> = weights
                .iter()
                .map(|(v, d)| {
                    Var::from_tensor(
                        &Tensor::from_vec(v.clone(), d.as_slice(), &Device::Cpu).unwrap(),
                    )
                    .unwrap()
                })
                .collect();
            let params = candle_nn::ParamsAdamW {
                lr,
                weight_decay: 0.0,
                ..Default::default()
            };
            let opt = candle_nn::AdamW::new(vars.clone(), params).unwrap();
            Net { vars, opt }
        }

        /// One training step on `x (n, 1, 8, 8)` and `labels`; the loss.
        pub fn step(&mut self, x: &[f32], labels: &[u32]) -> f32 {
            let n = labels.len();
            let x = Tensor::from_vec(x.to_vec(), (n, 1, 8, 8), &Device::Cpu).unwrap();
            let v = |i: usize| self.vars[i].as_tensor();
            let conv1 = candle_nn::Conv2d::new(
                v(0).clone(),
                Some(v(1).clone()),
                candle_nn::Conv2dConfig {
                    padding: 1,
                    ..Default::default()
                },
            );
            let conv2 = candle_nn::Conv2d::new(
                v(2).clone(),
                Some(v(3).clone()),
                candle_nn::Conv2dConfig {
                    padding: 1,
                    ..Default::default()
                },
            );
            let fc = candle_nn::Linear::new(v(4).clone(), Some(v(5).clone()));
            let h = conv1
                .forward(&x)
                .unwrap()
                .relu()
                .unwrap()
                .max_pool2d(2)
                .unwrap();
            let h = conv2
                .forward(&h)
                .unwrap()
                .relu()
                .unwrap()
                .max_pool2d(2)
                .unwrap();
            let logits = fc.forward(&h.reshape((n, 128)).unwrap()).unwrap();
            let labels = Tensor::from_vec(labels.to_vec(), n, &Device::Cpu).unwrap();
            let loss = candle_nn::loss::cross_entropy(&logits, &labels).unwrap();
            self.opt.backward_step(&loss).unwrap();
            loss.to_scalar::<f32>().unwrap()
        }
    }
}

/// `adam_step` on 64 Mi parameters against the streaming copy of 256 MiB and candle's AdamW.
fn adam_table() {
    let n = 64 << 20;
    println!("## adam_step, F32, 64 Mi parameters (28 bytes per parameter: p, g, m, v read; p, m, v written)");
    println!();
    println!("| op | ms | GB/s | copy GB/s (same rounds) | of copy |");
    println!("|---|---|---|---|---|");
    let dev = Device::Cpu;
    let filled = |v: f32| Tensor::from_slice_nd_on(dev, &vec![v; n], &[n]).expect("tensor");
    let (mut p, g, mut m, mut v) = (filled(1.0), filled(0.01), filled(0.0), filled(0.0));
    let hp = AdamParams::new(1e-3);
    let mut step = 0u32;
    let mut ours = || {
        step += 1;
        ops::adam_step(&mut p, &g, &mut m, &mut v, &hp, step).expect("adam_step");
    };
    let copy_len = 256 << 20;
    let (src, mut dst) = (vec![1u8; copy_len], vec![0u8; copy_len]);
    let mut copy = || brotensor_cpu::cast::copy(&mut dst, &src);
    let (secs, copy_secs) = best_secs_paired(dev, 3, &mut ours, &mut copy);
    let gbs = 28.0 * n as f64 / secs / 1e9;
    let copy_gbs = 2.0 * copy_len as f64 / copy_secs / 1e9;
    println!(
        "| brotensor adam_step | {:.1} | {gbs:.1} | {copy_gbs:.1} | {:.2} |",
        secs * 1e3,
        gbs / copy_gbs
    );
    #[cfg(feature = "candle")]
    {
        let mut peer = peer::AdamOnly::new(n);
        let (ours_secs, peer_secs) = best_secs_paired(dev, 3, &mut ours, || peer.step());
        println!(
            "| candle-nn AdamW | {:.1} | {:.1} | | brotensor {:.2}x faster (same rounds: {:.1} vs {:.1} ms) |",
            peer_secs * 1e3,
            28.0 * n as f64 / peer_secs / 1e9,
            peer_secs / ours_secs,
            ours_secs * 1e3,
            peer_secs * 1e3
        );
    }
}

/// The CNN's forward as plain op calls (no `Var`): the cost floor of the tape's forward.
fn plain_forward(net: &Cnn, x: &Tensor) -> Tensor {
    let n = x.dims()[0];
    let conv = |x: &Tensor, w: &Var, b: &Var, c_in: usize, c_out: usize, hw: usize| {
        let mut y = Tensor::default();
        let w = w.value().reshape(&[c_out, c_in * 9]).expect("view");
        ops::conv2d_forward(
            x,
            &w,
            Some(&b.value()),
            (n, c_in, hw, hw),
            c_out,
            &CONV,
            &mut y,
        )
        .expect("conv");
        let y = ops::relu(&y).expect("relu");
        let (mut p, mut idx) = (Tensor::default(), Tensor::default());
        ops::max_pool2d_forward(&y, (n, c_out, hw, hw), &POOL, &mut p, &mut idx).expect("pool");
        p
    };
    let h = conv(x, &net.conv1_w, &net.conv1_b, 1, 16, 8);
    let h = conv(&h, &net.conv2_w, &net.conv2_b, 16, 32, 4);
    let mut y = Tensor::default();
    let h = h.reshape(&[n, 128]).expect("view");
    ops::linear_forward_batched(&net.fc_w.value(), Some(&net.fc_b.value()), &h, &mut y)
        .expect("linear");
    y
}

/// A named forward form, its call and its best seconds so far.
type Form<'a> = (&'static str, Box<dyn FnMut() + 'a>, f64);

fn training_table(data: &Digits) {
    let dev = Device::Cpu;
    println!();
    println!("## digits CNN training steps, batch 64, CPU F32 (same weights, same batches)");
    println!();
    let rounds = 5;
    let per_round = TRAIN / 64;
    let mut ours = Trainer::new(dev, 3e-3, 64).expect("trainer");
    #[cfg(feature = "candle")]
    let mut peer = {
        let w = |v: &Var| {
            (
                v.value().to_vec::<f32>().expect("read"),
                v.value().dims().to_vec(),
            )
        };
        let net = &ours.net;
        let weights = [
            &net.conv1_w,
            &net.conv1_b,
            &net.conv2_w,
            &net.conv2_b,
            &net.fc_w,
            &net.fc_b,
        ]
        .map(w);
        peer::Net::new(&weights, 3e-3)
    };
    // The peer's batches: the same rows in the same order as the trainer's.
    let mut state = brotensor_models::digits::DATA_SEED;
    let mut batches: Vec<Vec<usize>> = Vec::new();
    for _ in 0..rounds {
        let mut order: Vec<usize> = (0..TRAIN).collect();
        brotensor_models::digits::shuffle(&mut order, &mut state);
        batches.extend(order.chunks_exact(64).map(<[usize]>::to_vec));
    }
    #[cfg_attr(not(feature = "candle"), allow(unused_mut))]
    let (mut best_ours, mut best_peer) = (f64::INFINITY, f64::INFINITY);
    let (mut last_ours, mut last_peer) = (0.0f32, 0.0f32);
    for round in 0..rounds {
        let t = Instant::now();
        for _ in 0..per_round {
            last_ours = ours.step(data).expect("step");
        }
        best_ours = best_ours.min(t.elapsed().as_secs_f64() / per_round as f64);
        #[cfg(feature = "candle")]
        {
            let t = Instant::now();
            for rows in &batches[round * per_round..][..per_round] {
                let (x, labels): (Vec<f32>, Vec<u32>) = {
                    let mut x = Vec::new();
                    for &r in rows {
                        x.extend_from_slice(&data.train_x[r * 64..][..64]);
                    }
                    (x, rows.iter().map(|&r| data.train_y[r] as u32).collect())
                };
                last_peer = peer.step(&x, &labels);
            }
            best_peer = best_peer.min(t.elapsed().as_secs_f64() / per_round as f64);
        }
        #[cfg(not(feature = "candle"))]
        let _ = (round, &batches, &mut last_peer);
    }
    println!("| | steps/s | loss after {} steps |", rounds * per_round);
    println!("|---|---|---|");
    println!(
        "| brotensor (tape + Adam) | {:.1} | {last_ours:.4} |",
        1.0 / best_ours
    );
    if best_peer.is_finite() {
        println!(
            "| candle 0.11 (backward + AdamW) | {:.1} | {last_peer:.4} |",
            1.0 / best_peer
        );
        println!();
        println!("brotensor {:.2}x candle's steps/s", best_peer / best_ours);
    }

    println!();
    println!("## the tape's forward cost, digits CNN, batch 64");
    println!();
    let x = {
        let rows: Vec<usize> = (0..64).collect();
        data.batch(&rows, dev).expect("batch").0
    };
    let net = &ours.net;
    let constants = Cnn {
        conv1_w: net.conv1_w.detach().expect("view"),
        conv1_b: net.conv1_b.detach().expect("view"),
        conv2_w: net.conv2_w.detach().expect("view"),
        conv2_b: net.conv2_b.detach().expect("view"),
        fc_w: net.fc_w.detach().expect("view"),
        fc_b: net.fc_b.detach().expect("view"),
    };
    let xv = Var::constant(x.reshape(x.dims()).expect("view"));
    // The three forms interleaved round by round, best of 7 rounds of 50 calls each.
    let mut forms: [Form<'_>; 3] = [
        (
            "plain op calls",
            Box::new(|| drop(plain_forward(net, &x))),
            f64::INFINITY,
        ),
        (
            "Var, no parameter (nothing recorded)",
            Box::new(|| drop(constants.forward(&xv).expect("forward"))),
            f64::INFINITY,
        ),
        (
            "Var, parameters (recorded)",
            Box::new(|| drop(net.forward(&xv).expect("forward"))),
            f64::INFINITY,
        ),
    ];
    for _ in 0..7 {
        for (_, f, best) in forms.iter_mut() {
            let t = Instant::now();
            for _ in 0..50 {
                f();
            }
            *best = best.min(t.elapsed().as_secs_f64() / 50.0);
        }
    }
    println!("| forward | us |");
    println!("|---|---|");
    for (name, _, best) in &forms {
        println!("| {name} | {:.1} |", best * 1e6);
    }
}

/// On each selected GPU device: `adam_step` on 16 Mi parameters (F32, and BF16 with an F32
/// master copy) against the device's copy bandwidth in the same rounds, and the digits CNN's
/// training steps per second at batch 64.
fn gpu_tables(data: &Digits) {
    let gpus: Vec<Device> = brotensor_benches::selected_devices()
        .into_iter()
        .filter(|d| d.is_gpu())
        .collect();
    for dev in gpus {
        let name = brotensor::device_name(dev).unwrap_or_else(|_| dev.to_string());
        println!();
        println!("## {name}: adam_step, 16 Mi parameters, and digits CNN training");
        println!();
        println!("| case | ms | GB/s | copy GB/s (same rounds) | of copy |");
        println!("|---|---|---|---|---|");
        let n = 16 << 20;
        let f32s = |v: f32| Tensor::from_slice_nd_on(dev, &vec![v; n], &[n]).expect("tensor");
        let (src, mut dst) = (f32s(1.0), Tensor::default());
        let mut copy = || ops::cast(&src, &mut dst, brotensor::Dtype::F32).expect("copy");
        let hp = AdamParams::new(1e-3);
        for (case, half) in [("F32", false), ("BF16 params, F32 master", true)] {
            let (mut p, mut g) = (f32s(1.0), f32s(0.01));
            let (mut m, mut v, mut w) = (f32s(0.0), f32s(0.0), f32s(1.0));
            if half {
                p = p.to_dtype(brotensor::Dtype::BF16).expect("bf16");
                g = g.to_dtype(brotensor::Dtype::BF16).expect("bf16");
            }
            let mut step = 0u32;
            let mut ours = || {
                step += 1;
                if half {
                    ops::adam_step_master(&mut p, &mut w, &g, (&mut m, &mut v), &hp, step)
                } else {
                    ops::adam_step(&mut p, &g, &mut m, &mut v, &hp, step)
                }
                .expect("adam_step");
            };
            let (secs, copy_secs) = best_secs_paired(dev, 10, &mut ours, &mut copy);
            let bytes = if half { 30.0 } else { 28.0 };
            let gbs = bytes * n as f64 / secs / 1e9;
            let copy_gbs = 8.0 * n as f64 / copy_secs / 1e9;
            println!(
                "| adam_step {case} | {:.3} | {gbs:.1} | {copy_gbs:.1} | {:.2} |",
                secs * 1e3,
                gbs / copy_gbs
            );
        }
        let mut trainer = Trainer::new(dev, 3e-3, 64).expect("trainer");
        let per_round = trainer.steps_per_epoch();
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t = Instant::now();
            for _ in 0..per_round {
                trainer.step(data).expect("step");
            }
            brotensor::sync(dev).expect("sync");
            best = best.min(t.elapsed().as_secs_f64() / per_round as f64);
        }
        let acc = trainer
            .net
            .accuracy(&data.test_x, &data.test_y, dev)
            .expect("accuracy");
        println!();
        println!(
            "digits CNN training, batch 64: {:.1} steps/s (test accuracy {:.2} % after {} steps)",
            1.0 / best,
            100.0 * acc,
            3 * per_round
        );
    }
}

fn main() -> anyhow::Result<()> {
    brotensor::init().ok();
    println!(
        "# bench_train on {} ({} threads)",
        brotensor::device_name(Device::Cpu)?,
        rayon::current_num_threads()
    );
    println!();
    brotensor_models::files::ensure_digits()?;
    let data = Digits::load(&brotensor_models::files::digits_csv())?;
    let cpu = brotensor_benches::selected_devices().contains(&Device::Cpu);
    if cpu {
        rayon::scope(|_| {
            adam_table();
            training_table(&data);
        });
    }
    gpu_tables(&data);
    Ok(())
}
