//! Convolutions on the CPU (F32, every rayon thread) in GFLOP/s against the measured FP32
//! peak, candle's CPU `conv2d` / `conv_transpose2d` (feature `candle`, timed interleaved
//! with ours) and ONNX Runtime (`--ort`: `benches/conv_ort.py`, a one-node graph with 2
//! intra-op threads, run between our rounds), for the shapes of issue 25: the two SD UNet
//! convolutions, the ResNet stem, a ResNet block, a depthwise 3x3 (also against the copy
//! bandwidth: it is memory-bound) and a 4x4 stride-2 transposed convolution.
//!
//! On GPU devices (those `BROTENSOR_BENCH_DEVICES` selects, e.g. `cuda`), the same shapes in
//! F32, F16 and BF16 in TFLOP/s; the GPU kit's `torch_peer.py` times cuDNN on them.
//!
//! `cargo run --release -p brotensor-benches --features candle --bin bench_conv -- --ort`

use std::process::Command;

use brotensor::ops::{self, Conv2dSpec};
use brotensor::{Device, Dtype, Tensor};
use brotensor_benches::{best_secs, best_secs_paired, cpu_fp32_peak_gflops, selected_devices};

/// One benchmark shape: `x (n, c_in, h, w)`, `c_out` channels, a square kernel `k`.
#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    transposed: bool,
    n: usize,
    c_in: usize,
    h: usize,
    w: usize,
    c_out: usize,
    k: usize,
    stride: usize,
    pad: usize,
    groups: usize,
}

impl Shape {
    fn spec(&self) -> Conv2dSpec {
        Conv2dSpec {
            kernel: [self.k, self.k],
            stride: [self.stride; 2],
            padding: [self.pad; 2],
            dilation: [1, 1],
            groups: self.groups,
        }
    }
    /// The output height and width.
    fn out(&self) -> (usize, usize) {
        let f = |i: usize| {
            if self.transposed {
                (i - 1) * self.stride + self.k - 2 * self.pad
            } else {
                (i + 2 * self.pad - self.k) / self.stride + 1
            }
        };
        (f(self.h), f(self.w))
    }
    /// Multiply-adds times two: every output of a convolution sums `C_in/groups kH kW`
    /// products; a transposed one scatters every input the same way.
    fn flops(&self) -> f64 {
        let (ho, wo) = self.out();
        let taps = (self.k * self.k) as f64;
        if self.transposed {
            2.0 * (self.n * self.c_in * self.h * self.w) as f64
                * (self.c_out / self.groups) as f64
                * taps
        } else {
            2.0 * (self.n * self.c_out * ho * wo) as f64 * (self.c_in / self.groups) as f64 * taps
        }
    }
    /// Bytes a pass must move at least: the input, the weight and the output once.
    fn bytes(&self) -> f64 {
        let (ho, wo) = self.out();
        let w = self.c_out * self.c_in / self.groups * self.k * self.k;
        4.0 * (self.n * self.c_in * self.h * self.w + w + self.n * self.c_out * ho * wo) as f64
    }
    fn weight_dims(&self) -> [usize; 4] {
        if self.transposed {
            [self.c_in, self.c_out / self.groups, self.k, self.k]
        } else {
            [self.c_out, self.c_in / self.groups, self.k, self.k]
        }
    }
}

const SHAPES: [Shape; 6] = [
    Shape {
        name: "3x3 320->320, 64x64, b1",
        transposed: false,
        n: 1,
        c_in: 320,
        h: 64,
        w: 64,
        c_out: 320,
        k: 3,
        stride: 1,
        pad: 1,
        groups: 1,
    },
    Shape {
        name: "1x1 640->320, 64x64, b1",
        transposed: false,
        n: 1,
        c_in: 640,
        h: 64,
        w: 64,
        c_out: 320,
        k: 1,
        stride: 1,
        pad: 0,
        groups: 1,
    },
    Shape {
        name: "7x7 s2 3->64, 224x224, b8",
        transposed: false,
        n: 8,
        c_in: 3,
        h: 224,
        w: 224,
        c_out: 64,
        k: 7,
        stride: 2,
        pad: 3,
        groups: 1,
    },
    Shape {
        name: "3x3 64->64, 56x56, b8",
        transposed: false,
        n: 8,
        c_in: 64,
        h: 56,
        w: 56,
        c_out: 64,
        k: 3,
        stride: 1,
        pad: 1,
        groups: 1,
    },
    Shape {
        name: "depthwise 3x3 C=256, 56x56, b8",
        transposed: false,
        n: 8,
        c_in: 256,
        h: 56,
        w: 56,
        c_out: 256,
        k: 3,
        stride: 1,
        pad: 1,
        groups: 256,
    },
    Shape {
        name: "transposed 4x4 s2 256->128, 16->32, b8",
        transposed: true,
        n: 8,
        c_in: 256,
        h: 16,
        w: 16,
        c_out: 128,
        k: 4,
        stride: 2,
        pad: 1,
        groups: 1,
    },
];

/// `len` small deterministic values in [-1, 1).
fn values(len: usize, salt: u64) -> Vec<f32> {
    let mut s = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn arg_flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// ONNX Runtime's best milliseconds for `s` (None when the script fails: say why once).
fn ort_ms(s: &Shape) -> Option<f64> {
    let kind = if s.transposed { "convt" } else { "conv" };
    let dims = [
        s.n, s.c_in, s.h, s.w, s.c_out, s.k, s.stride, s.pad, s.groups,
    ];
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/conv_ort.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(kind)
        .args(dims.iter().map(|d| d.to_string()))
        .args(["--threads", "2", "--reps", "5"])
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "conv_ort.py failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

#[cfg(feature = "candle")]
mod peer {
    use candle_core::{Device, Tensor};

    pub struct Conv {
        x: Tensor,
        w: Tensor,
    }

    impl Conv {
        pub fn new(x: &[f32], xd: [usize; 4], w: &[f32], wd: [usize; 4]) -> Self {
            let t = |v: &[f32], d: [usize; 4]| {
                Tensor::from_vec(v.to_vec(), (d[0], d[1], d[2], d[3]), &Device::Cpu)
                    .expect("candle tensor")
            };
            Conv {
                x: t(x, xd),
                w: t(w, wd),
            }
        }

        pub fn run(&self, s: &super::Shape) -> Vec<f32> {
            let y = if s.transposed {
                self.x.conv_transpose2d(&self.w, s.pad, 0, s.stride, 1)
            } else {
                self.x.conv2d(&self.w, s.pad, s.stride, 1, s.groups)
            };
            y.and_then(|y| y.flatten_all())
                .and_then(|y| y.to_vec1())
                .expect("candle conv")
        }
    }
}

/// Runs shape `s` once on the tensors `x` and `w` into `y`.
fn run(s: &Shape, x: &Tensor, w: &Tensor, y: &mut Tensor) {
    let (dims, spec) = ((s.n, s.c_in, s.h, s.w), s.spec());
    if s.transposed {
        ops::conv_transpose2d_forward(x, w, None, dims, s.c_out, &spec, [0, 0], y)
            .expect("conv_transpose2d_forward");
    } else {
        ops::conv2d_forward(x, w, None, dims, s.c_out, &spec, y).expect("conv2d_forward");
    }
}

/// The shapes on a GPU device in each float dtype, in TFLOP/s.
fn gpu_table(dev: Device) {
    println!();
    println!(
        "## {}",
        brotensor::device_name(dev).unwrap_or_else(|_| dev.to_string())
    );
    println!();
    println!("| shape | dtype | ms | TFLOP/s |");
    println!("|---|---|---:|---:|");
    for s in SHAPES {
        let xd = [s.n, s.c_in, s.h, s.w];
        let wd = s.weight_dims();
        for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
            let load = |v: Vec<f32>, d: &[usize]| {
                Tensor::from_slice_nd_on(dev, &v, d)
                    .and_then(|t| t.to_dtype(dtype))
                    .expect("upload")
            };
            let x = load(values(xd.iter().product(), 1), &xd);
            let w = load(values(wd.iter().product(), 2), &wd);
            let mut y = Tensor::default();
            let secs = best_secs(dev, 5, || run(&s, &x, &w, &mut y));
            println!(
                "| {} | {dtype} | {:.3} | {:.2} |",
                s.name,
                secs * 1e3,
                s.flops() / secs / 1e12
            );
        }
    }
}

fn main() {
    let devices = selected_devices();
    for dev in devices.iter().filter(|d| **d != Device::Cpu) {
        gpu_table(*dev);
        // The diffusion residual block (issue 28), fused and unfused, where the kit runs.
        brotensor_benches::resblock::gpu_table(*dev);
    }
    if !devices.contains(&Device::Cpu) {
        return;
    }
    let peak = cpu_fp32_peak_gflops();
    let with_ort = arg_flag("--ort");
    println!(
        "# bench_conv: {} rayon threads, measured FP32 peak {peak:.1} GFLOP/s",
        rayon::current_num_threads()
    );
    // The copy bandwidth the depthwise row is held against (read + write bytes per second).
    let copy_len = 64 << 20;
    let (src, mut dst) = (vec![1u8; copy_len], vec![0u8; copy_len]);
    let copy_secs = best_secs(Device::Cpu, 3, || brotensor_cpu::cast::copy(&mut dst, &src));
    let copy_gbs = 2.0 * copy_len as f64 / copy_secs / 1e9;
    println!("# copy bandwidth {copy_gbs:.1} GB/s (read + write)");
    println!();
    println!(
        "| shape | ms | GFLOP/s | of peak | candle ms | vs candle | ORT ms | vs ORT | GB/s | of copy | max diff |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for s in SHAPES {
        let xd = [s.n, s.c_in, s.h, s.w];
        let wd = s.weight_dims();
        let (xv, wv) = (
            values(xd.iter().product(), 1),
            values(wd.iter().product(), 2),
        );
        let x = Tensor::from_slice_nd(&xv, &xd).expect("x");
        let w = Tensor::from_slice_nd(&wv, &wd).expect("w");
        let mut y = Tensor::default();
        let mut ours = || run(&s, &x, &w, &mut y);
        #[cfg(feature = "candle")]
        let (secs, secs_c, diff) = {
            let c = peer::Conv::new(&xv, xd, &wv, wd);
            let mut out = Vec::new();
            let (a, b) = best_secs_paired(Device::Cpu, 1, &mut ours, || out = c.run(&s));
            let got = y.to_vec::<f32>().expect("y");
            let diff = got
                .iter()
                .zip(&out)
                .fold(0.0f32, |m, (p, q)| m.max((p - q).abs()));
            (a, b, format!("{diff:.1e}"))
        };
        #[cfg(not(feature = "candle"))]
        let (secs, secs_c, diff) = {
            let (a, _) = best_secs_paired(Device::Cpu, 1, &mut ours, || {});
            (a, f64::NAN, "-".to_string())
        };
        let ort = if with_ort { ort_ms(&s) } else { None };
        let gf = s.flops() / secs / 1e9;
        let gbs = s.bytes() / secs / 1e9;
        let ort_ms = ort.unwrap_or(f64::NAN);
        println!(
            "| {} | {:.2} | {gf:.1} | {:.2} | {:.2} | {:.2} | {ort_ms:.2} | {:.2} | {gbs:.1} | {:.2} | {diff} |",
            s.name,
            secs * 1e3,
            gf / peak,
            secs_c * 1e3,
            secs_c / secs,
            ort_ms / 1e3 / secs,
            gbs / copy_gbs,
        );
    }
}
