//! Trains the digits CNN ([`brotensor_models::digits`]) with Adam on a brotensor device:
//! a progress bar with the loss, the test accuracy after each epoch, and at the end the
//! steps per second and a PNG of the loss curve.
//!
//! `cargo run --release -p brotensor-models --bin train_digits -- --device cpu --epochs 10`

use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;
use brotensor::Dtype;
use brotensor_models::digits::{Digits, Trainer};
use brotensor_models::{files, in_cpu_pool, plot, DeviceArgs};
use clap::Parser;

/// Trains a small CNN on scikit-learn's 8x8 digits.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    target: DeviceArgs,
    /// Passes over the 1500 training images.
    #[arg(long, default_value_t = 10)]
    epochs: usize,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 3e-3)]
    lr: f32,
    /// Images per step.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Where to write the loss curve.
    #[arg(long, default_value = "digits-loss.png")]
    plot: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (device, dtype) = args.target.device_and_dtype()?;
    files::ensure_digits()?;
    if dtype != Dtype::F32 {
        bail!("the digits CNN trains in f32 (its loss is FP32 by contract); got --dtype {dtype}");
    }
    if !(1..=1500).contains(&args.batch) {
        bail!("--batch must be between 1 and 1500");
    }
    let data = Digits::load(&files::digits_csv())?;
    in_cpu_pool(|| train(&args, device, &data))
}

fn train(args: &Args, device: brotensor::Device, data: &Digits) -> anyhow::Result<()> {
    let mut trainer = Trainer::new(device, args.lr, args.batch)?;
    let per_epoch = trainer.steps_per_epoch();
    let total = per_epoch * args.epochs;
    println!(
        "digits CNN on {} ({} train / {} test images), {} epochs of {per_epoch} steps, batch {}",
        brotensor::device_name(device)?,
        data.train_y.len(),
        data.test_y.len(),
        args.epochs,
        args.batch
    );
    let bar = files::progress(total as u64, "training");
    let mut losses = Vec::with_capacity(total);
    let mut accuracy = Vec::new();
    let mut train_secs = 0.0;
    for epoch in 1..=args.epochs {
        let t = Instant::now();
        for _ in 0..per_epoch {
            let loss = trainer.step(data)?;
            losses.push(loss);
            bar.set_message(format!("loss {loss:.4}"));
            bar.inc(1);
        }
        brotensor::sync(device)?;
        train_secs += t.elapsed().as_secs_f64();
        let acc = trainer.net.accuracy(&data.test_x, &data.test_y, device)?;
        accuracy.push((losses.len() - 1, acc));
        let mean = losses[losses.len() - per_epoch..].iter().sum::<f32>() / per_epoch as f32;
        bar.suspend(|| {
            println!(
                "epoch {epoch:>3}: mean loss {mean:.4}, test accuracy {:.2} %",
                100.0 * acc
            )
        });
    }
    bar.finish_and_clear();
    let final_acc = accuracy.last().map_or(0.0, |a| a.1);
    println!(
        "test accuracy {:.2} % after {total} steps; {:.1} steps/s ({:.2} s of training)",
        100.0 * final_acc,
        total as f64 / train_secs.max(1e-9),
        train_secs
    );
    plot::loss_curve_png(&losses, &accuracy, &args.plot)?;
    println!("loss curve: {}", args.plot.display());
    Ok(())
}
