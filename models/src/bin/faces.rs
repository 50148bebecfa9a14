//! Draws faces with the DCGAN of `gan-face-generate`: a batch of 100-d standard-normal
//! vectors from `--seed` through the generator, written as a PNG grid.
//!
//! `cargo run --release -p brotensor-models --bin faces -- --device wgpu:0 --seed 7 --count 16`

use std::path::PathBuf;
use std::time::Instant;

use brotensor_models::dcgan::{grid, DcGan};
use brotensor_models::{files, in_cpu_pool, DeviceArgs};
use clap::Parser;

/// Generates 64 x 64 faces with a DCGAN on a brotensor device and writes them as a PNG grid.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    target: DeviceArgs,
    /// The noise seed: the same seed draws the same faces on every device.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// How many faces.
    #[arg(long, default_value_t = 16)]
    count: usize,
    /// Faces per row of the grid.
    #[arg(long, default_value_t = 8)]
    cols: usize,
    /// Where to write the grid.
    #[arg(long, default_value = "faces.png")]
    out: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.count == 0 {
        anyhow::bail!("--count must be at least 1");
    }
    let (device, dtype) = args.target.resolve()?;
    let model = DcGan::load(&files::dcgan_weights(), device, dtype)?;
    let z = model.noise(args.count, args.seed)?;
    // One warm-up batch, so the time below is the steady state (GPU kernels compiled).
    in_cpu_pool(|| model.generate(&z))?.to_vec::<f32>()?;
    let start = Instant::now();
    let faces = in_cpu_pool(|| model.generate(&z))?;
    let pixels = faces.to_vec::<f32>()?;
    let secs = start.elapsed().as_secs_f64();
    if pixels.iter().any(|v| !v.is_finite()) {
        anyhow::bail!("the generator produced non-finite pixels");
    }
    brotensor::io::image::save_png(&grid(&faces, args.cols)?, &args.out)?;
    println!(
        "{} faces (seed {}) in {:.1} ms on {device} ({dtype}), {:.2} ms per face -> {}",
        args.count,
        args.seed,
        secs * 1e3,
        secs * 1e3 / args.count as f64,
        args.out.display()
    );
    Ok(())
}
