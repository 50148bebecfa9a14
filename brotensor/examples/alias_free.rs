//! Why StyleGAN3 filters before it resamples: a zone plate (rings whose frequency grows
//! towards the corners) halved three ways, written side by side as one PNG:
//!
//! 1. every other pixel kept (`upfirdn2d` with a 1x1 filter and `down = 2`): the fine rings
//!    fold back into false coarse ones (aliasing);
//! 2. a 2x2 box average (`downsample_avg_2x`): better, still aliased;
//! 3. a 12x12 windowed-sinc lowpass with `down = 2` (`upfirdn2d`, as StyleGAN3's
//!    `filtered_lrelu` down stage): the rings past the new Nyquist limit fade to grey.
//!
//! Then the filtered half is brought back up with the same filter (`up = 2`, gain 4) and
//! `bias_act`'s leaky ReLU and clamp run on it, as one `filtered_lrelu` stage would.
//!
//! Run: `cargo run --release -p brotensor --example alias_free -- [DEVICE] [OUT.png]`
//! (default: the CPU, `alias_free.png`).

use brotensor::ops::{self, BiasAct, BiasActivation, Upfirdn2dSpec};
use brotensor::{Device, Tensor};

const SIZE: usize = 256;

/// A zone plate: `0.5 + 0.5 cos(k r^2)`, its local frequency rising linearly with the
/// radius to the full image's Nyquist limit at the edge midpoints (twice the halved image's).
fn zone_plate() -> Vec<f32> {
    let k = std::f32::consts::PI / SIZE as f32;
    let c = SIZE as f32 / 2.0;
    (0..SIZE * SIZE)
        .map(|i| {
            let (y, x) = ((i / SIZE) as f32 - c, (i % SIZE) as f32 - c);
            0.5 + 0.5 * (k * (x * x + y * y)).cos()
        })
        .collect()
}

/// A `taps x taps` separable lowpass at a quarter of the sample rate (cut-off for halving),
/// a sinc under a Kaiser-like cosine window, normalised to sum 1.
fn lowpass(taps: usize) -> Vec<f32> {
    let c = (taps as f32 - 1.0) / 2.0;
    let one: Vec<f32> = (0..taps)
        .map(|i| {
            let t = i as f32 - c;
            let arg = std::f32::consts::PI * t / 2.0;
            let sinc = if arg == 0.0 { 1.0 } else { arg.sin() / arg };
            let window = 0.5 + 0.5 * (std::f32::consts::PI * t / (c + 1.0)).cos();
            sinc * window
        })
        .collect();
    let sum: f32 = one.iter().sum();
    let mut f = Vec::with_capacity(taps * taps);
    for a in &one {
        for b in &one {
            f.push(a * b / (sum * sum));
        }
    }
    f
}

fn main() -> brotensor::Result<()> {
    let mut args = std::env::args().skip(1);
    let device: Device = args.next().as_deref().unwrap_or("cpu").parse()?;
    let out = args.next().unwrap_or_else(|| "alias_free.png".into());
    let plate =
        Tensor::from_slice_on(device, &zone_plate(), SIZE, SIZE)?.reshape(&[1, 1, SIZE, SIZE])?;
    let half = SIZE / 2;

    let one = Tensor::from_slice_on(device, &[1.0f32], 1, 1)?;
    let down2 = Upfirdn2dSpec {
        down: [2, 2],
        ..Upfirdn2dSpec::IDENTITY
    };
    let decimated = plate.upfirdn2d(&one, &down2)?;
    let mut boxed = Tensor::default();
    ops::downsample_avg_2x(&plate, (1, 1, SIZE, SIZE), &mut boxed)?;
    let f = Tensor::from_slice_on(device, &lowpass(12), 12, 12)?;
    // Pads of 5 and 5 keep the output at exactly half the size: (256 + 10 - 12) / 2 + 1.
    let filtered = plate.upfirdn2d(
        &f,
        &Upfirdn2dSpec {
            pad: [5, 5, 5, 5],
            ..down2
        },
    )?;
    assert_eq!(filtered.dims(), [1, 1, half, half]);

    // Back up with the same filter (gain 4 keeps the level), then a leaky ReLU around mid grey.
    let up = filtered.upfirdn2d(
        &f,
        &Upfirdn2dSpec {
            up: [2, 2],
            pad: [6, 5, 6, 5],
            gain: 4.0,
            ..Upfirdn2dSpec::IDENTITY
        },
    )?;
    let shift = Tensor::from_slice_on(device, &[-0.5f32], 1, 1)?;
    let act = BiasAct {
        act: BiasActivation::LeakyRelu { alpha: 0.2 },
        gain: 1.0,
        clamp: Some(0.5),
    };
    let lifted = up.bias_act(Some(&shift), &act)?;

    // One gray canvas: the three halves on top, the original and the re-upsampled one below.
    let strip = [SIZE * 3 / 2, 2 * SIZE];
    let mut canvas = vec![0.5f32; strip[0] * strip[1]];
    let paste = |canvas: &mut Vec<f32>,
                 t: &Tensor,
                 (top, left): (usize, usize),
                 offset: f32|
     -> brotensor::Result<()> {
        let v = t.to(Device::Cpu)?.to_vec::<f32>()?;
        let [.., h, w] = *t.dims() else {
            unreachable!("4-D")
        };
        for r in 0..h {
            for c in 0..w {
                canvas[(top + r) * strip[1] + left + c] = v[r * w + c] + offset;
            }
        }
        Ok(())
    };
    paste(&mut canvas, &decimated, (0, 0), 0.0)?;
    paste(
        &mut canvas,
        &boxed.reshape(&[1, 1, half, half])?,
        (0, half),
        0.0,
    )?;
    paste(&mut canvas, &filtered, (0, 2 * half), 0.0)?;
    paste(&mut canvas, &plate, (half, 0), 0.0)?;
    paste(&mut canvas, &lifted, (half, SIZE), 0.5)?;
    let image =
        Tensor::from_slice(&canvas, strip[0], strip[1])?.reshape(&[1, strip[0], strip[1]])?;
    brotensor::io::image::save_png(&image, &out)?;
    println!(
        "{out}: top, halved by decimation | box average | 12x12 lowpass; bottom, the original | \
         the lowpass half upsampled again with leaky ReLU (on {device})"
    );
    Ok(())
}
