//! A loss curve as a PNG, drawn into an RGB tensor and written with
//! [`brotensor::io::image::save_png`]: the per-step training loss (blue, left scale from 0 to
//! the largest loss), each epoch's test accuracy (orange squares, 0 at the bottom to 1 at the
//! top), and light grid lines at every tenth of the height.

use std::path::Path;

use brotensor::{Device, Tensor};

const W: usize = 800;
const H: usize = 400;
const MARGIN: usize = 20;

struct Canvas {
    px: Vec<f32>,
}

impl Canvas {
    fn new() -> Canvas {
        Canvas {
            px: vec![1.0; 3 * W * H],
        }
    }

    fn set(&mut self, x: i64, y: i64, rgb: [f32; 3]) {
        if (0..W as i64).contains(&x) && (0..H as i64).contains(&y) {
            let i = y as usize * W + x as usize;
            for (c, v) in rgb.into_iter().enumerate() {
                self.px[c * W * H + i] = v;
            }
        }
    }

    /// A line from `a` to `b`, one pixel per step along the longer axis.
    fn line(&mut self, a: (f64, f64), b: (f64, f64), rgb: [f32; 3]) {
        let steps = (b.0 - a.0).abs().max((b.1 - a.1).abs()).ceil().max(1.0) as usize;
        for s in 0..=steps {
            let t = s as f64 / steps as f64;
            let (x, y) = (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t);
            self.set(x.round() as i64, y.round() as i64, rgb);
        }
    }

    fn square(&mut self, (x, y): (f64, f64), half: i64, rgb: [f32; 3]) {
        for dy in -half..=half {
            for dx in -half..=half {
                self.set(x.round() as i64 + dx, y.round() as i64 + dy, rgb);
            }
        }
    }
}

/// Writes the curve of `losses` (one per step) and `accuracy` (`(step, share)` per epoch) to
/// `path` as an 800 x 400 PNG.
pub fn loss_curve_png(
    losses: &[f32],
    accuracy: &[(usize, f64)],
    path: &Path,
) -> anyhow::Result<()> {
    let mut c = Canvas::new();
    let (x0, x1) = (MARGIN as f64, (W - MARGIN) as f64);
    let (y0, y1) = ((H - MARGIN) as f64, MARGIN as f64);
    for k in 0..=10 {
        let y = y0 + (y1 - y0) * k as f64 / 10.0;
        c.line((x0, y), (x1, y), [0.88, 0.88, 0.88]);
    }
    c.line((x0, y0), (x1, y0), [0.2, 0.2, 0.2]);
    c.line((x0, y0), (x0, y1), [0.2, 0.2, 0.2]);
    let top = losses.iter().cloned().fold(0.0f32, f32::max).max(1e-6) as f64;
    let steps = losses.len().max(2) as f64 - 1.0;
    let at = |step: f64, v: f64| (x0 + (x1 - x0) * step / steps, y0 + (y1 - y0) * v);
    let points: Vec<(f64, f64)> = losses
        .iter()
        .enumerate()
        .map(|(i, &l)| at(i as f64, f64::from(l) / top))
        .collect();
    for w in points.windows(2) {
        c.line(w[0], w[1], [0.12, 0.35, 0.75]);
    }
    for &(step, share) in accuracy {
        c.square(at(step as f64, share), 3, [0.95, 0.5, 0.1]);
    }
    let t = Tensor::from_slice_nd_on(Device::Cpu, &c.px, &[3, H, W])?;
    brotensor::io::image::save_png(&t, path)?;
    Ok(())
}
