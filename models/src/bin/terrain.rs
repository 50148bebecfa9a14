//! Draws terrain height maps with the diffusion UNet of `adaptive-terrain-diffusion`: noise
//! from `--seed` at sigma 80, denoised in one step as the package does (or over `--steps`
//! Karras sigmas with Euler or DPM++ 2M), turned into metres and written as a PNG (grey
//! levels from the lowest to the highest point, several maps side by side).
//!
//! `cargo run --release -p brotensor-models --bin terrain -- --device wgpu:0 --seed 3 --difficulty 80`

use std::path::PathBuf;
use std::time::Instant;

use brotensor::{Device, Tensor};
use brotensor_models::terrain::{
    height_map, karras_sigmas, Sampler, Terrain, SIDE, SIGMA_MAX, SIGMA_MIN,
};
use brotensor_models::{files, in_cpu_pool, DeviceArgs};
use clap::{Parser, ValueEnum};

#[derive(Clone, Copy, ValueEnum)]
enum SamplerArg {
    Euler,
    Dpmpp2m,
}

/// Generates terrain height maps with a diffusion UNet on a brotensor device.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    target: DeviceArgs,
    /// The noise seed: the same seed draws the same terrain on every device.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// How many maps.
    #[arg(long, default_value_t = 4)]
    count: usize,
    /// Difficulty from 1 (gentle) to 100 (rough), the model's condition.
    #[arg(long, default_value_t = 50)]
    difficulty: u32,
    /// Denoising steps: 1 is the package's one-step generation; more run the sampler over
    /// Karras sigmas from 80 to 0.002.
    #[arg(long, default_value_t = 1)]
    steps: usize,
    /// The sampler for `--steps` above 1.
    #[arg(long, value_enum, default_value = "dpmpp2m")]
    sampler: SamplerArg,
    /// Where to write the PNG.
    #[arg(long, default_value = "terrain.png")]
    out: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.count == 0 || args.steps == 0 {
        anyhow::bail!("--count and --steps must be at least 1");
    }
    let (device, dtype) = args.target.resolve()?;
    let model = Terrain::load(&files::terrain_weights(), device, dtype)?;
    let difficulty = vec![Terrain::difficulty_input(args.difficulty)?; args.count];
    let noise = model.noise(args.count, SIDE, args.seed)?;
    let sampler = match args.sampler {
        SamplerArg::Euler => Sampler::Euler,
        SamplerArg::Dpmpp2m => Sampler::Dpmpp2m,
    };
    let sigmas = if args.steps == 1 {
        vec![SIGMA_MAX, 0.0]
    } else {
        karras_sigmas(args.steps, f64::from(SIGMA_MIN), f64::from(SIGMA_MAX), 7.0)
    };
    let start = Instant::now();
    let out = in_cpu_pool(|| {
        model.sample(noise, &sigmas, &difficulty, sampler, |i, n| {
            eprint!("\rstep {i}/{n}");
        })
    })?;
    let values = out.to_vec::<f32>()?;
    let secs = start.elapsed().as_secs_f64();
    eprintln!();
    // Side by side, a 4-pixel white gap between maps; each map scaled to its own range.
    let gap = 4;
    let width = args.count * SIDE + (args.count - 1) * gap;
    let mut canvas = vec![1.0f32; SIDE * width];
    for (i, sample) in values.chunks_exact(SIDE * SIDE).enumerate() {
        let h = height_map(sample);
        let top = h.iter().copied().fold(0f32, f32::max);
        println!(
            "map {i}: heights 0 .. {top:.2} m, mean {:.2} m",
            h.iter().sum::<f32>() / h.len() as f32
        );
        for (y, row) in h.chunks_exact(SIDE).enumerate() {
            let dst = &mut canvas[y * width + i * (SIDE + gap)..][..SIDE];
            for (d, v) in dst.iter_mut().zip(row) {
                *d = if top > 0.0 { v / top } else { 0.0 };
            }
        }
    }
    let image = Tensor::from_slice_nd_on(Device::Cpu, &canvas, &[1, SIDE, width])?;
    brotensor::io::image::save_png(&image, &args.out)?;
    println!(
        "{} maps (seed {}, difficulty {}, {} step{}) in {:.1} ms on {device} ({dtype}), {:.1} ms per map per step -> {}",
        args.count,
        args.seed,
        args.difficulty,
        args.steps,
        if args.steps == 1 { "" } else { "s" },
        secs * 1e3,
        secs * 1e3 / (args.count * args.steps) as f64,
        args.out.display()
    );
    Ok(())
}
