//! PP-OCRv4's three networks against ONNX Runtime on the package's own graphs, on inputs cut
//! from the committed test image (`tests/fixtures/models/ocr_*`, made by `make_ocr.py`, which
//! also checks ORT against a float64 numpy forward of the converted weights: 1.1e-5, 3.6e-6
//! and 1.4e-6 of the output scale), on the CPU and on every GPU in every dtype it has.

use brotensor::{Device, Dtype, Tensor};
use brotensor_models::files;
use brotensor_models::ppocr::{Classifier, Detector, Recognizer};
use serde_json::Value;

use crate::common::{self, f32_fixture, floats, targets};

fn dims(v: &Value) -> Vec<usize> {
    floats(v).into_iter().map(|x| x as usize).collect()
}

fn input(device: Device, case: &Value) -> Tensor {
    let x = f32_fixture(case["input_file"].as_str().unwrap());
    Tensor::from_slice_nd_on(device, &x, &dims(&case["input_shape"])).unwrap()
}

/// The devices and dtypes to run: F32 everywhere, 16-bit on GPUs that have it.
fn ppocr_targets() -> Vec<(Device, Dtype)> {
    let out = targets("PP-OCR", &[Dtype::F32, Dtype::F16, Dtype::BF16]);
    assert!(out.len() >= 2, "PP-OCR would run on only {out:?}");
    out
}

#[test]
fn detector_matches_onnx_runtime() {
    let case = &common::json("ocr_reference.json")["networks"]["det_160"];
    let want = f32_fixture(case["output_file"].as_str().unwrap());
    // The map spans 0 (background) to 1 (text).
    let (lo, hi) = want
        .iter()
        .fold((1f32, 0f32), |(l, h), &v| (l.min(v), h.max(v)));
    assert!(lo < 0.01 && hi > 0.99);
    let dir = files::ppocr_dir();
    for (device, dtype) in ppocr_targets() {
        let model = Detector::load(&dir.join("det.safetensors"), device, dtype).unwrap();
        let got = model.forward(&input(device, case)).unwrap();
        assert_eq!(got.dims(), dims(&case["output_shape"]));
        let got = got.to_vec::<f32>().unwrap();
        let diffs: Vec<f32> = got.iter().zip(&want).map(|(g, w)| (g - w).abs()).collect();
        let err = diffs.iter().copied().fold(0f32, f32::max);
        let mean = diffs.iter().map(|&d| f64::from(d)).sum::<f64>() / diffs.len() as f64;
        if dtype == Dtype::F32 {
            // ORT is 1.1e-5 from float64 on this map.
            assert!(err <= 2e-4, "{device} {dtype}: max |map - ORT| = {err:e}");
        } else {
            // 16-bit activations through 30 layers move single pixels on the text edges a
            // lot (BF16: up to 0.5), the map as a whole little.
            assert!(
                mean <= 5e-3,
                "{device} {dtype}: mean |map - ORT| = {mean:e}"
            );
        }
        let above = |m: &[f32]| m.iter().filter(|&&v| v > 0.3).count() as f64;
        let (a, b) = (above(&got), above(&want));
        assert!(
            (a - b).abs() <= 0.02 * b,
            "{device} {dtype}: {a} vs {b} text pixels"
        );
        println!("{device} {dtype}: max |map - ORT| = {err:.1e}, mean {mean:.1e}");
    }
}

#[test]
fn recognizer_matches_onnx_runtime() {
    let case = &common::json("ocr_reference.json")["networks"]["rec_160"];
    let want_ids: Vec<usize> = dims(&case["argmax"]);
    let want_max = floats(&case["max_prob"]);
    let dir = files::ppocr_dir();
    for (device, dtype) in ppocr_targets() {
        let model = Recognizer::load(&dir.join("rec.safetensors"), device, dtype).unwrap();
        let probs = model.forward(&input(device, case)).unwrap();
        let [n, steps, classes] = probs.dims().try_into().unwrap();
        assert_eq!((n, steps, classes), (1, want_ids.len(), 6625));
        let probs = probs.to_vec::<f32>().unwrap();
        let (mut worst, mut winners) = (0f64, 0f64);
        let mut ids = Vec::new();
        for (t, row) in probs.chunks_exact(classes).enumerate() {
            let (id, p) =
                row.iter().enumerate().fold(
                    (0, f32::MIN),
                    |best, (i, &v)| if v > best.1 { (i, v) } else { best },
                );
            ids.push(id);
            // Every top-5 probability of the reference, not only the winner's.
            for pair in case["top5"][t].as_array().unwrap() {
                let (c, q) = (
                    pair[0].as_u64().unwrap() as usize,
                    pair[1].as_f64().unwrap(),
                );
                worst = worst.max((f64::from(row[c]) - q).abs());
            }
            worst = worst.max((f64::from(p) - want_max[t]).abs());
            winners += (f64::from(p) - want_max[t]).abs() / want_max.len() as f64;
        }
        if dtype == Dtype::F32 {
            assert!(worst <= 1e-4, "{device} {dtype}: max |p - ORT| = {worst:e}");
            assert_eq!(ids, want_ids, "{device}: the best class per step");
        } else {
            // 16-bit: uncertain steps (p near 0.5) move by up to 0.15; the text stays.
            assert!(
                winners <= 0.05,
                "{device} {dtype}: mean |p_best - ORT| = {winners:e}"
            );
        }
        let text: String = ids
            .iter()
            .enumerate()
            .filter(|&(t, &id)| id != 0 && (t == 0 || ids[t - 1] != id))
            .map(|(_, &id)| model.character(id))
            .collect();
        assert_eq!(text, case["text"].as_str().unwrap(), "{device} {dtype}");
        println!("{device} {dtype}: max |p - ORT| = {worst:.1e}, text {text:?}");
    }
}

#[test]
fn classifier_matches_onnx_runtime() {
    let case = &common::json("ocr_reference.json")["networks"]["cls_192"];
    // The input straddles two lines, so the classifier is unsure (0.498 / 0.502): the
    // probabilities then follow the logits closely.
    let want = floats(&case["probs"]);
    let dir = files::ppocr_dir();
    for (device, dtype) in ppocr_targets() {
        let model = Classifier::load(&dir.join("cls.safetensors"), device, dtype).unwrap();
        let got = model.forward(&input(device, case)).unwrap();
        assert_eq!(got.dims(), [1, 2]);
        let got = got.to_vec::<f32>().unwrap();
        let err = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (f64::from(*g) - w).abs())
            .fold(0f64, f64::max);
        let bound = if dtype == Dtype::F32 { 1e-4 } else { 5e-2 };
        assert!(err <= bound, "{device} {dtype}: {got:?} vs {want:?}");
        println!("{device} {dtype}: max |p - ORT| = {err:.1e}");
    }
}

#[test]
fn ppocr_refuses_bad_inputs() {
    let dir = files::ppocr_dir();
    let det = Detector::load(&dir.join("det.safetensors"), Device::Cpu, Dtype::F32).unwrap();
    let x = |d: &[usize]| Tensor::zeros_nd_on(Device::Cpu, d, Dtype::F32).unwrap();
    let err = det
        .forward(&x(&[1, 3, 48, 64]))
        .expect_err("48 rows refused");
    assert!(err.to_string().contains("multiples of 32"), "{err}");
    assert!(det.forward(&x(&[1, 1, 64, 64])).is_err());
    let rec = Recognizer::load(&dir.join("rec.safetensors"), Device::Cpu, Dtype::F32).unwrap();
    let err = rec
        .forward(&x(&[1, 3, 32, 100]))
        .expect_err("32 rows refused");
    assert!(err.to_string().contains("48 pixels high"), "{err}");
    assert_eq!(rec.character(0), "");
    assert_eq!(rec.character(6624), " ");
    assert_eq!(rec.classes(), 6625);
    // A file of one kind is not loaded as another.
    let Err(wrong) = Classifier::load(&dir.join("det.safetensors"), Device::Cpu, Dtype::F32) else {
        panic!("det.safetensors loaded as a classifier");
    };
    assert!(wrong.to_string().contains("`cls`"), "{wrong}");
}
