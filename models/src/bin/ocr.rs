//! Reads the text of an image with PP-OCRv4 (rapidocr-onnxruntime's models and pipeline):
//! prints each line with its box and score, and writes the image with the boxes drawn.
//!
//! `cargo run --release -p brotensor-models --bin ocr -- --device wgpu:0 photo.png`

use std::path::PathBuf;
use std::time::Instant;

use brotensor_models::ocr::{draw_boxes, load_bgr, Ocr};
use brotensor_models::{files, in_cpu_pool, DeviceArgs};
use clap::Parser;

/// Finds and reads the text lines of a PNG or JPEG image on a brotensor device.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    target: DeviceArgs,
    /// Where to write the image with the boxes drawn.
    #[arg(long, default_value = "ocr.png")]
    out: PathBuf,
    /// A PNG or JPEG image (default: the committed photo-like test image).
    image: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (device, dtype) = args.target.resolve()?;
    let path = args.image.unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/image/ocr_photo.png")
    });
    let image = load_bgr(&path)?;
    let ocr = Ocr::load(&files::ppocr_dir(), device, dtype)?;
    // One warm-up read, so the time below is the steady state (GPU kernels compiled).
    in_cpu_pool(|| ocr.read(&image))?;
    let start = Instant::now();
    let (lines, t) = in_cpu_pool(|| ocr.read(&image))?;
    let secs = start.elapsed().as_secs_f64();
    for line in &lines {
        let q = line.quad;
        println!(
            "({:4.0},{:4.0}) ({:4.0},{:4.0}) ({:4.0},{:4.0}) ({:4.0},{:4.0})  {:.3}  {}",
            q[0][0],
            q[0][1],
            q[1][0],
            q[1][1],
            q[2][0],
            q[2][1],
            q[3][0],
            q[3][1],
            line.score,
            line.text
        );
    }
    brotensor::io::image::save_png(&draw_boxes(&image, &lines)?, &args.out)?;
    println!(
        "{}: {} x {}, {} lines in {:.1} ms on {device} ({dtype}): detect {:.1} ms, classify {:.1} ms, recognize {:.1} ms -> {}",
        path.display(),
        image.width,
        image.height,
        lines.len(),
        secs * 1e3,
        t.detect * 1e3,
        t.classify * 1e3,
        t.recognize * 1e3,
        args.out.display()
    );
    Ok(())
}
