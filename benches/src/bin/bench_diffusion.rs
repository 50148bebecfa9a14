//! The diffusion and StyleGAN ops on the CPU in F32 (issue 28): the residual block at SD
//! U-Net sizes in GFLOP/s against the FP32 peak, against the same chain of unfused brotensor
//! ops and against candle 0.11's ops (feature `candle`), each pair timed interleaved round
//! by round; the sampler steps and `modulate` in GB/s against the copy bandwidth measured in
//! the same run; `upfirdn2d` (12x12 filter, up 2) and a StyleGAN modulated convolution in
//! GFLOP/s. On GPU devices (those `BROTENSOR_BENCH_DEVICES` selects, e.g. `cuda`), the
//! residual block fused and unfused in F32, F16 and BF16.
//!
//! `cargo run --release -p brotensor-benches --features candle --bin bench_diffusion`
//! (`BROTENSOR_BENCH_DEVICES=cpu` for the CPU tables only).

use brotensor::ops::{
    self, BiasAct, BiasActivation, Dpmpp2mCoefficients, ModulatedConv2dSpec, Upfirdn2dSpec,
};
use brotensor::{Device, Dtype, Tensor};
#[cfg(feature = "candle")]
use brotensor_benches::best_secs_paired;
use brotensor_benches::resblock::{self, tensor, values, Block};
use brotensor_benches::{best_secs, cpu_fp32_peak_gflops, selected_devices};

#[cfg(feature = "candle")]
mod peer {
    use candle_core::{Device, Module, Tensor};

    /// The block in candle's ops: GroupNorm, silu, conv2d, broadcast adds.
    pub struct Block {
        x: Tensor,
        norm: candle_nn::GroupNorm,
        w1: Tensor,
        b1: Tensor,
        t: Tensor,
        w2: Tensor,
        b2: Tensor,
    }

    fn t(v: Vec<f32>, dims: &[usize]) -> Tensor {
        Tensor::from_vec(v, dims, &Device::Cpu).expect("candle tensor")
    }

    impl Block {
        pub fn new(b: &super::Block) -> Self {
            let d = b.spec.dims;
            let v = |x: &brotensor::Tensor| x.to_vec::<f32>().expect("read");
            let (n, c) = (d.n, d.c);
            let norm =
                candle_nn::GroupNorm::new(t(v(&b.gamma), &[c]), t(v(&b.beta), &[c]), c, 32, 1e-5)
                    .expect("group norm");
            Block {
                x: t(v(&b.x), &[n, c, d.h, d.w]),
                norm,
                w1: t(v(&b.w1), &[c, c, 3, 3]),
                b1: t(v(&b.b1), &[1, c, 1, 1]),
                t: t(v(&b.t), &[n, c, 1, 1]),
                w2: t(v(&b.w2), &[c, c, 3, 3]),
                b2: t(v(&b.b2), &[1, c, 1, 1]),
            }
        }

        pub fn run(&self) -> Tensor {
            let h = candle_nn::ops::silu(&self.norm.forward(&self.x).expect("gn")).expect("silu");
            let h = h.conv2d(&self.w1, 1, 1, 1, 1).expect("conv");
            let h = h
                .broadcast_add(&self.b1)
                .and_then(|h| h.broadcast_add(&self.t))
                .expect("add");
            let h = candle_nn::ops::silu(&self.norm.forward(&h).expect("gn")).expect("silu");
            let h = h.conv2d(&self.w2, 1, 1, 1, 1).expect("conv");
            h.broadcast_add(&self.b2)
                .and_then(|h| h + &self.x)
                .expect("add")
        }
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0.0, |m, (x, y)| m.max((x - y).abs()))
}

fn resblock_cpu(peak: f64) {
    println!();
    println!("## resblock_forward, F32 (identity skip, per-sample time shift, 32 groups)");
    println!();
    println!(
        "| N x C x H x W | ms | GFLOP/s | of peak | unfused ms | vs unfused | candle ms | vs candle | max diff vs candle |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for dims in resblock::SHAPES {
        let b = Block::new(Device::Cpu, dims, Dtype::F32);
        let mut y = Tensor::default();
        let mut y2 = Tensor::default();
        let mut scratch = [Tensor::default(), Tensor::default(), Tensor::default()];
        let (ours, unfused) = brotensor_benches::best_secs_paired(
            Device::Cpu,
            1,
            || b.fused(&mut y),
            || b.unfused(&mut scratch, &mut y2),
        );
        let got = y.to_vec::<f32>().expect("read");
        let chain = y2.to_vec::<f32>().expect("read");
        let scale = got.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(
            max_diff(&got, &chain) <= 1e-4 * scale.max(1.0),
            "fused and unfused disagree"
        );
        let gflops = b.flop() / ours / 1e9;
        #[cfg(feature = "candle")]
        let (candle_ms, vs_candle, diff) = {
            let p = peer::Block::new(&b);
            let mut out = None;
            let (ours2, theirs) =
                best_secs_paired(Device::Cpu, 1, || b.fused(&mut y), || out = Some(p.run()));
            let theirs_v: Vec<f32> = out
                .expect("ran")
                .flatten_all()
                .and_then(|t| t.to_vec1())
                .expect("candle result");
            (
                format!("{:.1}", theirs * 1e3),
                format!("{:.2}x", theirs / ours2),
                format!("{:.1e}", max_diff(&got, &theirs_v)),
            )
        };
        #[cfg(not(feature = "candle"))]
        let (candle_ms, vs_candle, diff) = ("-".to_string(), "-".to_string(), "-".to_string());
        let (n, c, h, w) = dims;
        println!(
            "| {n} x {c} x {h} x {w} | {:.1} | {gflops:.1} | {:.2} | {:.1} | {:.2}x | {candle_ms} | {vs_candle} | {diff} |",
            ours * 1e3,
            gflops / peak,
            unfused * 1e3,
            unfused / ours,
        );
    }
}

/// The sampler steps and `modulate` on 8 Mi elements, in GB/s of the bytes they must move,
/// each timed interleaved with a 256 MiB copy (the bandwidth of this VM drifts).
fn elementwise_cpu() {
    println!();
    println!(
        "## samplers and modulate, F32, 8 Mi elements (GB/s of inputs read + outputs written once)"
    );
    println!();
    println!("| op | bytes/elem | ms | GB/s | copy GB/s (same rounds) | of copy |");
    println!("|---|---|---|---|---|---|");
    let n = 8 << 20;
    let dev = Device::Cpu;
    let x = tensor(dev, &values(n, 1, 1.0), 1024, n / 1024, Dtype::F32);
    let e = tensor(dev, &values(n, 2, 1.0), 1024, n / 1024, Dtype::F32);
    let p = tensor(dev, &values(n, 3, 1.0), 1024, n / 1024, Dtype::F32);
    let d = 1152;
    let rows = n / d;
    let xm = tensor(dev, &values(rows * d, 4, 1.0), rows, d, Dtype::F32);
    let (sc, sh) = (
        tensor(dev, &values(d, 5, 0.5), 1, d, Dtype::F32),
        tensor(dev, &values(d, 6, 0.5), 1, d, Dtype::F32),
    );
    let (mut y, mut z) = (Tensor::default(), Tensor::default());
    let c = Dpmpp2mCoefficients::new(5.0, 3.0, 2.0).expect("coefficients");
    let copy_len = 256 << 20;
    let (src, mut dst) = (vec![1u8; copy_len], vec![0u8; copy_len]);
    let mut copy = || brotensor_cpu::cast::copy(&mut dst, &src);
    let report = |name: &str, bytes: usize, op: &mut dyn FnMut(), copy: &mut dyn FnMut()| {
        let (secs, copy_secs) = brotensor_benches::best_secs_paired(dev, 5, op, copy);
        let gbs = (bytes * n) as f64 / secs / 1e9;
        let copy_gbs = 2.0 * copy_len as f64 / copy_secs / 1e9;
        println!(
            "| {name} | {bytes} | {:.2} | {gbs:.1} | {copy_gbs:.1} | {:.2} |",
            secs * 1e3,
            gbs / copy_gbs
        );
    };
    report(
        "ddim_step",
        12,
        &mut || ops::ddim_step(&x, &e, 0.3, 0.6, 0.0, &mut y).expect("ddim"),
        &mut copy,
    );
    report(
        "euler_step",
        12,
        &mut || ops::euler_step(&x, &e, 2.0, 1.5, &mut y).expect("euler"),
        &mut copy,
    );
    let mut y2 = Tensor::default();
    report(
        "dpmpp_2m_step",
        20,
        &mut || ops::dpmpp_2m_step(&x, &e, &p, 3.0, c, &mut y2, &mut z).expect("dpmpp"),
        &mut copy,
    );
    // bias_act as StyleGAN runs it: 8 x 64 channels of 128 x 128, lrelu, gain sqrt 2, clamp.
    let b = tensor(dev, &values(64, 7, 0.5), 64, 1, Dtype::F32);
    let act = BiasAct {
        act: BiasActivation::LeakyRelu { alpha: 0.2 },
        gain: std::f32::consts::SQRT_2,
        clamp: Some(256.0),
    };
    report(
        "bias_act_forward (lrelu, C = 64)",
        8,
        &mut || {
            ops::bias_act_forward(&x, Some(&b), (8, 64, n / 512), &act, &mut y).expect("bias_act")
        },
        &mut copy,
    );
    report(
        "modulate (D = 1152)",
        8,
        &mut || ops::modulate(&xm, &sc, &sh, &mut y2).expect("modulate"),
        &mut copy,
    );
}

/// `upfirdn2d` with a 12x12 filter, up 2, and a modulated convolution, in GFLOP/s.
fn stylegan_cpu(peak: f64) {
    println!();
    println!("## StyleGAN ops, F32");
    println!();
    println!("| op | shape | ms | GFLOP/s | of peak |");
    println!("|---|---|---|---|---|");
    let dev = Device::Cpu;
    let (n, c, h, w) = (1usize, 64usize, 64usize, 64usize);
    let x = tensor(
        dev,
        &values(n * c * h * w, 1, 1.0),
        n,
        c * h * w,
        Dtype::F32,
    );
    let f = tensor(dev, &values(144, 2, 0.1), 12, 12, Dtype::F32);
    let spec = Upfirdn2dSpec {
        up: [2, 2],
        pad: [6, 5, 6, 5],
        gain: 4.0,
        ..Upfirdn2dSpec::IDENTITY
    };
    let mut y = Tensor::default();
    let secs = best_secs(dev, 2, || {
        ops::upfirdn2d_forward(&x, &f, (n, c, h, w), &spec, &mut y).expect("upfirdn2d")
    });
    // Polyphase: each output meets (12 / 2)^2 input samples, a multiply-add each.
    let flop = 2.0 * 36.0 * y.numel() as f64;
    let gflops = flop / secs / 1e9;
    println!(
        "| upfirdn2d_forward 12x12, up 2 | {n} x {c} x {h} x {w} | {:.2} | {gflops:.1} | {:.3} |",
        secs * 1e3,
        gflops / peak
    );
    // StyleGAN2-style synthesis layer: 4 samples, 512 -> 512 channels, 3x3, 32x32.
    let (n, ci, co, hw) = (4usize, 512usize, 512usize, 32usize);
    let x = tensor(
        dev,
        &values(n * ci * hw * hw, 3, 1.0),
        n,
        ci * hw * hw,
        Dtype::F32,
    );
    let wt = tensor(dev, &values(co * ci * 9, 4, 0.05), co, ci * 9, Dtype::F32);
    let s = tensor(dev, &values(n * ci, 5, 0.5), n, ci, Dtype::F32);
    let mspec = ModulatedConv2dSpec {
        kernel: [3, 3],
        padding: [1, 1],
        demodulate: true,
        eps: 1e-8,
    };
    let mut d = Tensor::default();
    let secs = best_secs(dev, 1, || {
        ops::modulated_conv2d_forward(&x, &wt, &s, (n, ci, hw, hw), co, &mspec, &mut d, &mut y)
            .expect("modulated conv")
    });
    let flop = 2.0 * (n * co * ci * 9 * hw * hw) as f64;
    let gflops = flop / secs / 1e9;
    println!(
        "| modulated_conv2d_forward 3x3, demodulated | {n} x {ci} x {hw} x {hw} -> {co} | {:.1} | {gflops:.1} | {:.2} |",
        secs * 1e3,
        gflops / peak
    );
}

fn main() {
    let devices = selected_devices();
    if devices.contains(&Device::Cpu) {
        let peak = cpu_fp32_peak_gflops();
        println!(
            "# bench_diffusion: {} threads",
            rayon::current_num_threads()
        );
        println!("# FP32 peak {peak:.1} GFLOP/s");
        resblock_cpu(peak);
        elementwise_cpu();
        stylegan_cpu(peak);
    }
    for dev in devices.into_iter().filter(|d| *d != Device::Cpu) {
        resblock::gpu_table(dev);
    }
}
