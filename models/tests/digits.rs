//! The digits CNN trained with the tape against the float64 numpy reference of the same
//! network, weights and batches (`tests/fixtures/digits/first_steps.json`, made by
//! `scripts/digits_reference.py`): the Xavier weights, the losses of the first 20 steps and
//! the test accuracy after them, on the CPU and on every GPU (a wgpu device is required in
//! CI); and the full ten epochs on the CPU reaching the accuracy bar (97 %).

use brotensor::{Device, Dtype, Tensor};
use brotensor_models::digits::{Cnn, Digits, Trainer};
use brotensor_models::files;
use serde_json::Value;

fn fixture() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/digits/first_steps.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON")
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("numbers")
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect()
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
