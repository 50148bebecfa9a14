//! The whole OCR pipeline against the `rapidocr-onnxruntime` package's own pipeline on the two
//! committed test images (`tests/fixtures/image/ocr_plain.png` and `ocr_photo.png`, rendered
//! by `make_ocr.py` with Pillow's built-in font; the second on a photo-like background with a
//! rotated and an upside-down line): the same boxes, the same text, the same scores, on the
//! CPU and on every GPU (software GPUs, lavapipe in CI, read only the photo: the detector
//! at 992 x 736 takes over two minutes there; the networks' own tests cover them in full).

use brotensor::Dtype;
use brotensor_models::files;
use brotensor_models::ocr::{load_bgr, Ocr};

use crate::common::{self, devices, floats};

#[test]
fn ocr_reads_what_the_package_reads() {
    let r = common::json("ocr_reference.json");
    for device in devices() {
        let ocr = Ocr::load(&files::ppocr_dir(), device, Dtype::F32).unwrap();
        let names: &[&str] = if brotensor::is_software(device).unwrap_or(false) {
            eprintln!("note: {device} is a software device: only the photo is read there");
            &["photo"]
        } else {
            &["plain", "photo"]
        };
        for &name in names {
            let case = &r["pipeline"][name];
            let path = common::fixture(&format!("../image/ocr_{name}.png"));
            let image = load_bgr(&path).unwrap();
            let (lines, time) = ocr.read(&image).unwrap();
            let want = case["result"].as_array().unwrap();
            let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
            let want_texts: Vec<&str> = want.iter().map(|w| w["text"].as_str().unwrap()).collect();
            assert_eq!(texts, want_texts, "{device} {name}");
            // The texts are also what was drawn.
            let drawn: Vec<&str> = case["expected_lines"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            assert_eq!(texts, drawn, "{device} {name}: the drawn lines");
            for (line, w) in lines.iter().zip(want) {
                for (corner, wc) in line.quad.iter().zip(w["box"].as_array().unwrap()) {
                    let wc = floats(wc);
                    for (g, e) in corner.iter().zip(&wc) {
                        assert!(
                            (f64::from(*g) - e).abs() <= 1.0,
                            "{device} {name} {:?}: box {:?} vs {wc:?}",
                            line.text,
                            line.quad
                        );
                    }
                }
                let ws = w["score"].as_f64().unwrap();
                assert!(
                    (f64::from(line.score) - ws).abs() <= 2e-3,
                    "{device} {name} {:?}: score {} vs {ws}",
                    line.text,
                    line.score
                );
            }
            println!(
                "{device} {name}: {} lines, identical text (detect {:.1} s, classify {:.1} s, recognize {:.1} s)",
                lines.len(),
                time.detect,
                time.classify,
                time.recognize
            );
        }
    }
}
