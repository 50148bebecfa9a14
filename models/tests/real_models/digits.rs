//! The digits CNN trained with the tape against the float64 numpy reference of the same
//! network, weights and batches (`tests/fixtures/digits/first_steps.json`, made by
//! `scripts/digits_reference.py`): the Xavier weights, the losses of the first 20 steps and
//! the test accuracy after them, on the CPU and on every GPU (a wgpu device is required in
//! CI); and the full ten epochs on the CPU reaching the accuracy bar (97 %).

use brotensor::{Device, Dtype, Tensor};
use brotensor_models::digits::{Cnn, Digits, Trainer};
use brotensor_models::files;
use serde_json::Value;

use crate::common::floats;

fn fixture() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/digits/first_steps.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON")
}

fn data() -> Digits {
    files::ensure_digits().expect("scripts/fetch-models.sh fetches the digits");
    Digits::load(&files::digits_csv()).expect("digits.csv")
}

fn devices() -> Vec<Device> {
    let gpus = brotensor_tests::gpu_devices();
    if gpus.is_empty() {
        eprintln!("digits: SKIPPED on GPU (no GPU device found)");
    }
    std::iter::once(Device::Cpu).chain(gpus).collect()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(Dtype::F32)
        .and_then(|t| t.to_vec::<f32>())
        .expect("read")
        .into_iter()
        .map(f64::from)
        .collect()
}

#[test]
fn the_first_twenty_steps_follow_the_float64_reference() {
    let want = fixture();
    let data = data();
    let losses = floats(&want["losses"]);
    assert_eq!(losses.len(), 20);
    for device in devices() {
        let mut trainer = Trainer::new(device, 3e-3, 64).unwrap();
        // The splitmix64 Xavier weights: the same values as numpy's rounding of the formula.
        let net = &trainer.net;
        for (name, w) in [
            ("conv1.w", &net.conv1_w),
            ("conv2.w", &net.conv2_w),
            ("fc.w", &net.fc_w),
        ] {
            let v = values(&w.value());
            let sum: f64 = v.iter().sum();
            let want_sum = want["init_sums"][name].as_f64().unwrap();
            assert!(
                (sum - want_sum).abs() < 1e-5,
                "{device} {name}: sum {sum} vs {want_sum}"
            );
            let first = |v: &[f64]| v[..4].iter().map(|&x| x as f32).collect::<Vec<f32>>();
            assert_eq!(
                first(&v),
                first(&floats(&want["init_first"][name])),
                "{device} {name}: the same float32 values"
            );
        }
        let got: Vec<f64> = (0..20)
            .map(|_| f64::from(trainer.step(&data).unwrap()))
            .collect();
        for (step, (g, w)) in got.iter().zip(&losses).enumerate() {
            // FP32 against float64 over 20 Adam steps: the losses agree to about 2e-7
            // relative; a skipped update, a wrong gradient direction or wrong Adam constants
            // move them by far more. (Adam is blind to a uniform scale of the gradient: the
            // finite-difference tests of the tape check the scale.)
            assert!(
                (g - w).abs() <= 2e-5 * w.abs(),
                "{device}: step {} loss {g} vs float64 {w}",
                step + 1
            );
        }
        let acc = trainer
            .net
            .accuracy(&data.test_x, &data.test_y, device)
            .unwrap();
        let want_acc = want["test_accuracy_after_20_steps"].as_f64().unwrap();
        assert!(
            (acc - want_acc).abs() <= 1.5 / 297.0,
            "{device}: test accuracy {acc} vs float64 {want_acc}"
        );
    }
}

#[test]
fn ten_epochs_on_the_cpu_reach_97_percent() {
    let data = data();
    let mut trainer = Trainer::new(Device::Cpu, 3e-3, 64).unwrap();
    let steps = 10 * trainer.steps_per_epoch();
    let mut last = 0.0;
    for _ in 0..steps {
        last = trainer.step(&data).unwrap();
    }
    let acc = trainer
        .net
        .accuracy(&data.test_x, &data.test_y, Device::Cpu)
        .unwrap();
    assert!(
        acc >= 0.97,
        "test accuracy {acc} after {steps} steps (last loss {last})"
    );
    assert!(last < 0.3, "last loss {last}");
    // An untrained network is near chance: the bar measures the training.
    let fresh = Cnn::new(Device::Cpu).unwrap();
    let chance = fresh
        .accuracy(&data.test_x, &data.test_y, Device::Cpu)
        .unwrap();
    assert!(chance < 0.3, "untrained accuracy {chance}");
}

/// Data parallelism on the thread engine: the batch of 64 split over 2 and 3 ranks (22, 21
/// and 21 rows for 3), gradients all-reduced with the shares as weights, gives the losses and weights
/// of one rank training on the whole batch, step by step.
#[test]
fn data_parallel_training_follows_one_rank() {
    use brotensor::distributed::thread_group;
    let data = data();
    let steps = 6;
    let mut one = Trainer::new(Device::Cpu, 1e-3, 64).unwrap();
    let losses: Vec<f32> = (0..steps).map(|_| one.step(&data).unwrap()).collect();
    let weights = |t: &Trainer| -> Vec<Vec<f32>> {
        t.net
            .parameters()
            .iter()
            .map(|p| p.value().to_vec::<f32>().unwrap())
            .collect()
    };
    let want = weights(&one);
    for world in [2, 3] {
        let ranks = thread_group(world).unwrap();
        let runs: Vec<(Vec<f32>, Vec<Vec<f32>>)> = std::thread::scope(|s| {
            let hs: Vec<_> = ranks
                .into_iter()
                .map(|comm| {
                    let data = &data;
                    s.spawn(move || {
                        let mut t = Trainer::new(Device::Cpu, 1e-3, 64).unwrap();
                        let l = (0..steps)
                            .map(|_| t.step_data_parallel(data, &comm).unwrap())
                            .collect();
                        (l, weights(&t))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (rank, (l, w)) in runs.iter().enumerate() {
            for (i, (a, b)) in l.iter().zip(&losses).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 * b.abs(),
                    "world {world} rank {rank} step {i}: loss {a} vs {b}"
                );
            }
            for (p, (got, exp)) in w.iter().zip(&want).enumerate() {
                let scale = exp.iter().fold(0f32, |m, v| m.max(v.abs()));
                let err = got
                    .iter()
                    .zip(exp)
                    .fold(0f32, |m, (g, e)| m.max((g - e).abs()));
                assert!(
                    err <= 1e-4 * scale,
                    "world {world} rank {rank} parameter {p}: {err} of {scale}"
                );
            }
        }
        // The weights moved: a check that could not fail if training did nothing.
        let start = weights(&Trainer::new(Device::Cpu, 1e-3, 64).unwrap());
        let moved = start[0]
            .iter()
            .zip(&runs[0].1[0])
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            moved > 1e-3,
            "world {world}: the weights did not move ({moved})"
        );
    }
}
