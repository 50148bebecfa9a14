//! Reading the text of an image with PP-OCRv4, as `rapidocr-onnxruntime` 1.4.4's `RapidOCR()`
//! does with its defaults: detect text regions, cut each out straight, turn the upside-down
//! ones, recognise each line.
//!
//! 1. The image (BGR bytes) is scaled when a side is past 2000 or under 30 pixels, and
//!    letterboxed with black rows when it is at most 30 high or more than 8 times as wide
//!    as high.
//! 2. The detector sees it resized (OpenCV's bilinear, [`crate::ocr_geometry::resize_linear`]) so
//!    that its short side is at least 736, both sides rounded to multiples of 32, as `[-1,
//!    1]` values (`ops::image_u8_to_f32_nhwc_to_nchw`, `ops::image_normalize`); its
//!    probability map becomes boxes by DB post-processing ([`crate::ocr_geometry::db_boxes`]:
//!    threshold, dilation, contours, minimum-area rectangles scored on the map, unclipped
//!    by 1.6 x area / perimeter), sorted top to bottom, then left to right.
//! 3. Each box is cut out by a perspective warp (bicubic) and turned a quarter when it is at
//!    least 1.5 times as high as wide.
//! 4. The classifier sees the crops in batches of 6 (48 high, up to 192 wide, ordered by
//!    aspect ratio); a crop it calls upside down with probability above 0.9 is turned.
//! 5. The recogniser sees them in batches of 6, each batch 48 high and as wide as its widest
//!    crop needs (at least 320); greedy CTC decoding gives the text and the mean probability
//!    of its characters; lines scoring below 0.5 are dropped.

use std::path::Path;
use std::time::Instant;

use anyhow::bail;
use brotensor::ops::{self, PadMode};
use brotensor::{Device, Dtype, Tensor};

use crate::ocr_geometry::{self as geo, Bgr, DbParams, Quad};
use crate::ppocr::{Classifier, Detector, Recognizer};

/// The detector's short side.
const DET_SHORT_SIDE: f64 = 736.0;
/// Crops per classifier and recogniser batch.
const BATCH: usize = 6;
/// The classifier's and recogniser's input height; the classifier's width.
const LINE_HEIGHT: usize = 48;
const CLS_WIDTH: usize = 192;
/// The recogniser's narrowest batch width.
const REC_MIN_WIDTH: usize = 320;
/// The classifier's confidence for turning a crop.
const CLS_THRESHOLD: f32 = 0.9;
/// The lowest score of a kept line.
const TEXT_SCORE: f32 = 0.5;

/// One line of text found in an image.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// Its box corners (top-left, top-right, bottom-right, bottom-left) in the image's
    /// pixels.
    pub quad: Quad,
    /// The text.
    pub text: String,
    /// The mean probability of its characters.
    pub score: f32,
}

/// Seconds spent in each stage of [`Ocr::read`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    /// Resize, detector and box extraction.
    pub detect: f64,
    /// The direction classifier's batches.
    pub classify: f64,
    /// The recogniser's batches and decoding.
    pub recognize: f64,
}

/// The three PP-OCRv4 networks on one device.
pub struct Ocr {
    device: Device,
    detector: Detector,
    classifier: Classifier,
    recognizer: Recognizer,
}

/// Python's `round` (half to even) of a non-negative value.
fn round_half_even(v: f64) -> f64 {
    let r = v.round();
    if v - v.floor() == 0.5 && r % 2.0 != 0.0 {
        r - 1.0
    } else {
        r
    }
}

/// `int(round(v / 32) * 32)`, at least 32.
fn multiple_of_32(v: usize) -> usize {
    ((round_half_even(v as f64 / 32.0) * 32.0) as usize).max(32)
}

impl Ocr {
    /// Loads `det`, `cls` and `rec` `.safetensors` from `dir` onto `device`, computing in
    /// `dtype`.
    pub fn load(dir: &Path, device: Device, dtype: Dtype) -> anyhow::Result<Ocr> {
        Ok(Ocr {
            device,
            detector: Detector::load(&dir.join("det.safetensors"), device, dtype)?,
            classifier: Classifier::load(&dir.join("cls.safetensors"), device, dtype)?,
            recognizer: Recognizer::load(&dir.join("rec.safetensors"), device, dtype)?,
        })
    }

    /// The device the networks run on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// `[N, 3, H, W]` (F32, `[-1, 1]`) of same-sized BGR images, on the device.
    fn normalized(&self, images: &[&Bgr]) -> anyhow::Result<Tensor> {
        let (w, h) = (images[0].width, images[0].height);
        let mut bytes = Vec::with_capacity(images.len() * w * h * 3);
        for im in images {
            if (im.width, im.height) != (w, h) {
                bail!("ocr: a batch mixes image sizes");
            }
            bytes.extend_from_slice(&im.data);
        }
        let n = images.len();
        let mut x = Tensor::empty_on(self.device, 0, 0, Dtype::F32)?;
        ops::image_u8_to_f32_nhwc_to_nchw(&bytes, (n, h, w, 3), 1.0 / 255.0, 0.0, &mut x)?;
        let half = Tensor::from_slice_nd_on(self.device, &[0.5f32; 3], &[3])?;
        let mut y = Tensor::default();
        ops::image_normalize(&x, &half, &half, (n, 3, h, w), &mut y)?;
        y.reshape_(&[n, 3, h, w])?;
        Ok(y)
    }

    /// Crops resized to 48 rows and `width(crop)` columns, normalised and zero-padded on the
    /// right to `padded` columns: one `[N, 3, 48, padded]` batch.
    fn line_batch(
        &self,
        crops: &[&Bgr],
        padded: usize,
        width: impl Fn(&Bgr) -> usize,
    ) -> anyhow::Result<Tensor> {
        let mut rows = Vec::with_capacity(crops.len());
        for crop in crops {
            let w = width(crop).clamp(1, padded);
            let resized = geo::resize_linear(crop, w, LINE_HEIGHT);
            let x = self.normalized(&[&resized])?;
            let mut y = Tensor::default();
            let dims = (1, 3, LINE_HEIGHT, w);
            ops::pad2d_forward(&x, dims, [0, 0, 0, padded - w], PadMode::Zero, &mut y)?;
            rows.push(y);
        }
        let parts: Vec<&Tensor> = rows.iter().collect();
        let mut batch = Tensor::default();
        ops::concat_rows(&parts, &mut batch)?;
        batch.reshape_(&[crops.len(), 3, LINE_HEIGHT, padded])?;
        Ok(batch)
    }

    /// The text boxes of a BGR image (after the global size rules), in its pixels.
    fn detect(&self, img: &Bgr) -> anyhow::Result<Vec<Quad>> {
        let (w, h) = (img.width, img.height);
        let short = w.min(h) as f64;
        let ratio = if short < DET_SHORT_SIDE {
            DET_SHORT_SIDE / short
        } else {
            1.0
        };
        let rw = multiple_of_32((w as f64 * ratio) as usize);
        let rh = multiple_of_32((h as f64 * ratio) as usize);
        let resized = geo::resize_linear(img, rw, rh);
        let map = self.detector.forward(&self.normalized(&[&resized])?)?;
        let map = map.to_vec::<f32>()?;
        let mut boxes = geo::db_boxes(&map, rw, rh, w, h, &DbParams::default());
        geo::sort_boxes(&mut boxes);
        Ok(boxes)
    }

    /// Turns the crops the classifier finds upside down.
    fn classify(&self, crops: &mut [Bgr]) -> anyhow::Result<()> {
        for batch in by_aspect(crops).chunks(BATCH) {
            let refs: Vec<&Bgr> = batch.iter().map(|&i| &crops[i]).collect();
            let x = self.line_batch(&refs, CLS_WIDTH, |c| {
                (LINE_HEIGHT as f64 * c.width as f64 / c.height as f64).ceil() as usize
            })?;
            let probs = self.classifier.forward(&x)?.to_vec::<f32>()?;
            for (&i, p) in batch.iter().zip(probs.chunks_exact(2)) {
                if p[1] > p[0] && p[1] > CLS_THRESHOLD {
                    crops[i] = geo::rotate180(&crops[i]);
                }
            }
        }
        Ok(())
    }

    /// The text and score of each crop.
    fn recognize(&self, crops: &[Bgr]) -> anyhow::Result<Vec<(String, f32)>> {
        let mut out = vec![(String::new(), 0.0); crops.len()];
        let classes = self.recognizer.classes();
        for batch in by_aspect(crops).chunks(BATCH) {
            let ratio = |c: &Bgr| c.width as f64 / c.height as f64;
            let widest = batch
                .iter()
                .map(|&i| ratio(&crops[i]))
                .fold(REC_MIN_WIDTH as f64 / LINE_HEIGHT as f64, f64::max);
            let padded = (LINE_HEIGHT as f64 * widest) as usize;
            let refs: Vec<&Bgr> = batch.iter().map(|&i| &crops[i]).collect();
            let x = self.line_batch(&refs, padded, |c| {
                (LINE_HEIGHT as f64 * ratio(c)).ceil() as usize
            })?;
            let probs = self.recognizer.forward(&x)?;
            let steps = probs.dims()[1];
            let probs = probs.to_vec::<f32>()?;
            for (&i, item) in batch.iter().zip(probs.chunks_exact(steps * classes)) {
                let (ids, score) = geo::ctc_greedy(item, steps, classes);
                let text: String = ids
                    .iter()
                    .map(|&id| self.recognizer.character(id))
                    .collect();
                out[i] = (text, score);
            }
        }
        Ok(out)
    }

    /// The text lines of a BGR image, top to bottom, with the time of each stage.
    pub fn read(&self, image: &Bgr) -> anyhow::Result<(Vec<Line>, Timings)> {
        check_image(image)?;
        let mut times = Timings::default();
        let (img, scale) = global_resize(image)?;
        let (img, pad) = letterbox(img);
        let start = Instant::now();
        let boxes = self.detect(&img)?;
        times.detect = start.elapsed().as_secs_f64();
        let mut crops: Vec<Bgr> = boxes
            .iter()
            .map(|q| {
                let (cw, ch) = geo::crop_size(q);
                let crop = geo::warp_crop(&img, q, cw.max(1), ch.max(1));
                if ch as f64 / cw.max(1) as f64 >= 1.5 {
                    geo::rotate90_ccw(&crop)
                } else {
                    crop
                }
            })
            .collect();
        let start = Instant::now();
        if !crops.is_empty() {
            self.classify(&mut crops)?;
        }
        times.classify = start.elapsed().as_secs_f64();
        let start = Instant::now();
        let texts = if crops.is_empty() {
            Vec::new()
        } else {
            self.recognize(&crops)?
        };
        times.recognize = start.elapsed().as_secs_f64();
        let (w0, h0) = (image.width as f32, image.height as f32);
        let lines = boxes
            .into_iter()
            .zip(texts)
            .filter(|(_, (_, score))| *score >= TEXT_SCORE)
            .map(|(q, (text, score))| {
                let quad = q.map(|[x, y]| {
                    let x = (x * scale.0).clamp(0.0, w0);
                    let y = ((y - pad as f32) * scale.1).clamp(0.0, h0);
                    [x, y]
                });
                Line { quad, text, score }
            })
            .collect();
        Ok((lines, times))
    }
}

/// Errors unless `img` is non-empty and holds exactly `width * height * 3` bytes.
fn check_image(img: &Bgr) -> anyhow::Result<()> {
    let want = img
        .width
        .checked_mul(img.height)
        .and_then(|p| p.checked_mul(3));
    if img.width == 0 || img.height == 0 || want != Some(img.data.len()) {
        bail!(
            "ocr: a {} x {} BGR image must hold {} bytes, has {}",
            img.width,
            img.height,
            want.map_or("too many".to_string(), |n| n.to_string()),
            img.data.len()
        );
    }
    Ok(())
}

/// Crop indices in ascending width / height order (stable).
fn by_aspect(crops: &[Bgr]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..crops.len()).collect();
    let ratio = |i: usize| crops[i].width as f64 / crops[i].height.max(1) as f64;
    order.sort_by(|&a, &b| ratio(a).total_cmp(&ratio(b)));
    order
}

/// `img` resized by `ratio`, both sides `int(side ratio)` rounded to a multiple of 32; an
/// error when one rounds to 0 (the package refuses those too).
fn rescale(img: &Bgr, ratio: f64) -> anyhow::Result<Bgr> {
    let side = |v: usize| (round_half_even((v as f64 * ratio).trunc() / 32.0) * 32.0) as usize;
    let (rw, rh) = (side(img.width), side(img.height));
    if rw == 0 || rh == 0 {
        bail!(
            "ocr: a {} x {} image scaled by {ratio:.4} leaves a side of 0 pixels",
            img.width,
            img.height
        );
    }
    Ok(geo::resize_linear(img, rw, rh))
}

/// The package's global size rules, in its order: a longest side past 2000 scales the image
/// down to 2000, then a shortest side under 30 scales it up to 30 (each time both sides
/// rounded to multiples of 32). Returns the image and the factors that map its x and y back
/// to the original's.
fn global_resize(img: &Bgr) -> anyhow::Result<(Bgr, (f32, f32))> {
    let mut out = img.clone();
    if out.width.max(out.height) > 2000 {
        out = rescale(&out, 2000.0 / out.width.max(out.height) as f64)?;
    }
    if out.width.min(out.height) < 30 {
        out = rescale(&out, 30.0 / out.width.min(out.height) as f64)?;
    }
    let back = (
        img.width as f32 / out.width as f32,
        img.height as f32 / out.height as f32,
    );
    Ok((out, back))
}

/// Black rows above and below an image at most 30 high or more than 8 times as wide as
/// high: `p = int(|max(int(w / 8), 30) 2 - h| / 2)` each. Returns the image and `p`.
fn letterbox(img: Bgr) -> (Bgr, usize) {
    let (w, h) = (img.width, img.height);
    if h > 30 && (w as f64 / h as f64) <= 8.0 {
        return (img, 0);
    }
    let target = ((w / 8).max(30) * 2) as f64;
    let p = ((target - h as f64).abs() / 2.0) as usize;
    let mut data = vec![0u8; w * (h + 2 * p) * 3];
    data[p * w * 3..][..img.data.len()].copy_from_slice(&img.data);
    let out = Bgr::new(w, h + 2 * p, data).expect("sized above");
    (out, p)
}

/// The BGR bytes of an image file (PNG or JPEG), decoded by the `image` crate with gray,
/// palette and alpha images converted to RGB. The package reads RGB files the same way (8-bit
/// RGB PNGs give identical bytes), but not the others: it inverts RGBA images whose masked
/// mean is positive, takes a palette image's indices as gray levels, and decodes JPEG with
/// libjpeg-turbo, whose bytes may differ by one level.
pub fn load_bgr(path: &Path) -> anyhow::Result<Bgr> {
    let rgb = brotensor::io::image::load_rgb(path, Device::Cpu)?;
    let (h, w) = (rgb.dims()[2], rgb.dims()[3]);
    let v = rgb.to_vec::<f32>()?;
    let plane = h * w;
    let mut data = vec![0u8; plane * 3];
    for p in 0..plane {
        for c in 0..3 {
            // Decoding gave b / 255 exactly, so this recovers the byte.
            data[p * 3 + c] = (v[(2 - c) * plane + p] * 255.0).round() as u8;
        }
    }
    Ok(Bgr::new(w, h, data).expect("sized above"))
}

/// The image as a `[3, H, W]` RGB tensor in `[0, 1]` with each line's box drawn in red,
/// 2 pixels wide, for `brotensor::io::image::save_png`.
pub fn draw_boxes(img: &Bgr, lines: &[Line]) -> anyhow::Result<Tensor> {
    check_image(img)?;
    let (w, h) = (img.width, img.height);
    let mut px = vec![0f32; 3 * w * h];
    for p in 0..w * h {
        for c in 0..3 {
            px[c * w * h + p] = f32::from(img.data[p * 3 + 2 - c]) / 255.0;
        }
    }
    let mut dot = |x: f32, y: f32| {
        for (dx, dy) in [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0)] {
            let (xi, yi) = ((x + dx).round() as i64, (y + dy).round() as i64);
            if (0..w as i64).contains(&xi) && (0..h as i64).contains(&yi) {
                let p = yi as usize * w + xi as usize;
                px[p] = 1.0;
                px[w * h + p] = 0.0;
                px[2 * w * h + p] = 0.0;
            }
        }
    };
    for line in lines {
        for k in 0..4 {
            let ([x0, y0], [x1, y1]) = (line.quad[k], line.quad[(k + 1) % 4]);
            let steps = (x1 - x0).abs().max((y1 - y0).abs()).ceil().max(1.0) as usize;
            for s in 0..=steps {
                let t = s as f32 / steps as f32;
                dot(x0 + (x1 - x0) * t, y0 + (y1 - y0) * t);
            }
        }
    }
    Ok(Tensor::from_slice_nd_on(Device::Cpu, &px, &[3, h, w])?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gray(width: usize, height: usize) -> Bgr {
        Bgr::new(width, height, vec![128; width * height * 3]).expect("sized")
    }

    /// The package's rules in its order (worked by hand from `main.py`): 2500 x 25 first
    /// shrinks to 2000 x 20, rounded to 1984 x 32, whose short side then needs no growing;
    /// it is 62 times as wide as high, so 232 black rows go above and below.
    #[test]
    fn size_rules_follow_the_package_order() {
        let (img, back) = global_resize(&gray(2500, 25)).unwrap();
        assert_eq!((img.width, img.height), (1984, 32));
        assert_eq!(back, (2500.0 / 1984.0, 25.0 / 32.0));
        let (boxed, pad) = letterbox(img);
        assert_eq!((pad, boxed.width, boxed.height), (232, 1984, 32 + 2 * 232));
        assert!(boxed.data[..232 * 1984 * 3].iter().all(|&b| b == 0));
        assert_eq!(boxed.data[232 * 1984 * 3], 128);
        // A short side under 30 alone: 100 x 20 grows by 1.5 to 150 x 30, rounded to 160 x 32.
        let (img, _) = global_resize(&gray(100, 20)).unwrap();
        assert_eq!((img.width, img.height), (160, 32));
        // Ordinary sizes pass untouched.
        let (img, back) = global_resize(&gray(640, 480)).unwrap();
        assert_eq!((img.width, img.height, back), (640, 480, (1.0, 1.0)));
        assert_eq!(letterbox(img).1, 0);
    }

    /// 4000 x 28 shrinks to 2000 x 14, whose height rounds to 0: refused, as the package
    /// refuses it; so is an image whose bytes do not match its size.
    #[test]
    fn degenerate_images_are_refused() {
        let err = global_resize(&gray(4000, 28)).expect_err("a zero side");
        assert!(err.to_string().contains("side of 0"), "{err}");
        let bad = Bgr {
            width: 10,
            height: 10,
            data: vec![0; 7],
        };
        assert!(check_image(&bad).is_err());
        assert!(draw_boxes(&bad, &[]).is_err());
        assert!(check_image(&gray(3, 2)).is_ok());
    }

    #[test]
    fn python_rounding_and_multiples_of_32() {
        assert_eq!(round_half_even(2.5), 2.0);
        assert_eq!(round_half_even(3.5), 4.0);
        assert_eq!(round_half_even(30.66), 31.0);
        // 981 / 32 = 30.66 -> 992; 736 stays; 16 / 32 = 0.5 -> 0 -> at least 32.
        assert_eq!(multiple_of_32(981), 992);
        assert_eq!(multiple_of_32(736), 736);
        assert_eq!(multiple_of_32(16), 32);
    }
}
