//! The image-space ops (resize, pooling, spatial, image) on the CPU in F32, in GB/s of the
//! bytes each must move (its input read and its output written once) against the copy
//! bandwidth measured in the same run, and against candle 0.11's CPU ops where candle has
//! the op (feature `candle`; timed interleaved round by round with ours), on the two
//! tensors of issue 26: 64 x 256 x 256 and 8 x 64 x 512 x 512 (NCHW). On GPU devices (those
//! `BROTENSOR_BENCH_DEVICES` selects, e.g. `cuda`), every row in F32 and F16 in GB/s; the GPU
//! kit's `torch_peer.py` times torch on the same ops.
//!
//! `cargo run --release -p brotensor-benches --features candle --bin bench_image`
//! (`--small` runs only the first tensor). numpy's times come from `benches/image_numpy.py`
//! (single-threaded numpy, run once per tensor before our rows).

use std::collections::HashMap;

use brotensor::ops::{self, PadMode, Pool2dSpec, ResizeMode};
use brotensor::{Device, Dtype, Tensor};
#[cfg(feature = "candle")]
use brotensor_benches::best_secs_paired;
use brotensor_benches::{best_secs, selected_devices};

/// `(N, C, H, W)`.
type Dims = (usize, usize, usize, usize);

/// Which tensor a row reads, for base dims `(N, C, H, W)`.
#[derive(Clone, Copy)]
enum Src {
    /// `(N, C, H, W)`.
    Base,
    /// `(N, C, 2H, 2W)`: a 2x upsample's gradient.
    Up,
    /// `(N, C, H/2, W/2)`: a 2x downsample's gradient.
    Down,
    /// `(N, C, H+2, W+2)`: a 1-pixel padding's gradient.
    Padded,
}

/// One row: its name, the bytes it moves for base dims, what it reads, our run (given the
/// base dims), and candle's (on the base tensor).
struct Row {
    name: &'static str,
    bytes: fn(Dims) -> usize,
    src: Src,
    ours: fn(&Tensor, Dims, &mut Tensor),
    #[cfg(feature = "candle")]
    candle: Option<fn(&candle_core::Tensor) -> candle_core::Tensor>,
}

/// `len` floats of a plane-sized pattern.
fn values(len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 2_654_435_761) >> 20 & 1023) as f32 / 512.0 - 1.0)
        .collect()
}

fn numel((n, c, h, w): Dims) -> usize {
    n * c * h * w
}

const B: usize = 4;

macro_rules! row {
    ($name:literal, $bytes:expr, $src:ident, $ours:expr, $candle:expr) => {
        Row {
            name: $name,
            bytes: $bytes,
            src: Src::$src,
            ours: $ours,
            #[cfg(feature = "candle")]
            candle: $candle,
        }
    };
}

#[cfg(feature = "candle")]
macro_rules! peer {
    (|$t:ident| $e:expr) => {
        Some(|$t: &candle_core::Tensor| $e.expect("candle"))
    };
}

fn rows() -> Vec<Row> {
    vec![
        row!(
            "upsample_nearest_2x",
            |d| B * 5 * numel(d),
            Base,
            |x, d, y| ops::upsample_nearest_2x(x, d, y).unwrap(),
            peer!(|t| {
                let (_, _, h, w) = t.dims4().unwrap();
                t.upsample_nearest2d(2 * h, 2 * w)
            })
        ),
        row!(
            "upsample_bilinear_2x",
            |d| B * 5 * numel(d),
            Base,
            |x, d, y| ops::upsample_bilinear_2x(x, d, y).unwrap(),
            peer!(|t| {
                let (_, _, h, w) = t.dims4().unwrap();
                t.upsample_bilinear2d(2 * h, 2 * w, false)
            })
        ),
        row!(
            "upsample_nearest_2x_backward",
            |d| B * 5 * numel(d),
            Up,
            |dy, d, dx| ops::upsample_nearest_2x_backward(dy, d, dx).unwrap(),
            None
        ),
        row!(
            "upsample_bilinear_2x_backward",
            |d| B * 5 * numel(d),
            Up,
            |dy, d, dx| ops::upsample_bilinear_2x_backward(dy, d, dx).unwrap(),
            None
        ),
        row!(
            "interp2d bicubic (a = -0.75) to 3/4 size",
            |d| B * numel(d) * 25 / 16,
            Base,
            |x, (n, c, h, w), y| {
                let out = (h * 3 / 4, w * 3 / 4);
                ops::interp2d_forward(x, (n, c, h, w), out, ResizeMode::BicubicTorch, y).unwrap()
            },
            None
        ),
        row!(
            "max_pool2d 2x2 s2 (+ I32 indices)",
            |d| B * numel(d) * 6 / 4,
            Base,
            |x, d, y| {
                let mut idx = Tensor::default();
                ops::max_pool2d_forward(x, d, &Pool2dSpec::new([2, 2]), y, &mut idx).unwrap()
            },
            peer!(|t| t.max_pool2d(2))
        ),
        row!(
            "downsample_avg_2x",
            |d| B * numel(d) * 5 / 4,
            Base,
            |x, d, y| ops::downsample_avg_2x(x, d, y).unwrap(),
            peer!(|t| t.avg_pool2d(2))
        ),
        row!(
            "downsample_avg_2x_backward",
            |d| B * numel(d) * 5 / 4,
            Down,
            |dy, d, dx| ops::downsample_avg_2x_backward(dy, d, dx).unwrap(),
            None
        ),
        row!(
            "adaptive_avg_pool2d to 7x7",
            |d| B * numel(d),
            Base,
            |x, d, y| ops::adaptive_avg_pool2d_forward(x, d, (7, 7), y).unwrap(),
            None
        ),
        row!(
            "pad2d zero 1 px",
            padded_bytes,
            Base,
            |x, d, y| ops::pad2d_forward(x, d, [1; 4], PadMode::Zero, y).unwrap(),
            peer!(|t| t
                .pad_with_zeros(2, 1, 1)
                .and_then(|t| t.pad_with_zeros(3, 1, 1)))
        ),
        row!(
            "pad2d replicate 1 px",
            padded_bytes,
            Base,
            |x, d, y| ops::pad2d_forward(x, d, [1; 4], PadMode::Replicate, y).unwrap(),
            peer!(|t| t
                .pad_with_same(2, 1, 1)
                .and_then(|t| t.pad_with_same(3, 1, 1)))
        ),
        row!(
            "pad2d reflect 1 px",
            padded_bytes,
            Base,
            |x, d, y| ops::pad2d_forward(x, d, [1; 4], PadMode::Reflect, y).unwrap(),
            None
        ),
        row!(
            "pad2d_backward reflect 1 px",
            padded_bytes,
            Padded,
            |dy, d, dx| ops::pad2d_backward(dy, d, [1; 4], PadMode::Reflect, dx).unwrap(),
            None
        ),
        row!(
            "pixel_shuffle(2)",
            |d| B * 2 * numel(d),
            Base,
            |x, (n, c, h, w), y| *y = x.reshape(&[n, c, h, w]).unwrap().pixel_shuffle(2).unwrap(),
            peer!(|t| candle_nn::ops::pixel_shuffle(t, 2))
        ),
        row!(
            "pixel_shuffle_upsample_2x (repeats 1)",
            |d| B * 2 * numel(d),
            Base,
            |x, (n, c, h, w), y| {
                ops::pixel_shuffle_upsample_2x_forward(x, (n, c, h, w), c / 4, y).unwrap()
            },
            None
        ),
        row!(
            "unfold2d 3x3 zero (9x output)",
            |d| B * 10 * numel(d),
            Base,
            |x, d, y| ops::unfold2d_forward(x, d, [3, 3], [1, 1], [1; 4], PadMode::Zero, y)
                .unwrap(),
            None
        ),
        row!(
            "window_partition 16",
            |d| B * 2 * numel(d),
            Base,
            |x, d, y| ops::window_partition_forward(x, d, 16, y).unwrap(),
            None
        ),
        row!(
            "nchw_to_sequence",
            |d| B * 2 * numel(d),
            Base,
            |x, d, y| ops::nchw_to_sequence(x, d, y).unwrap(),
            None
        ),
        row!(
            "image_normalize",
            |d| B * 2 * numel(d),
            Base,
            |x, (n, c, h, w), y| {
                let m = Tensor::from_slice_on(x.device(), &vec![0.5f32; c], 1, c)
                    .and_then(|m| m.to_dtype(x.dtype()))
                    .unwrap();
                ops::image_normalize(x, &m, &m, (n, c, h, w), y).unwrap()
            },
            None
        ),
    ]
}

/// Bytes of a 1-pixel padding: the input read, the padded output written.
fn padded_bytes((n, c, h, w): Dims) -> usize {
    B * n * c * (h * w + (h + 2) * (w + 2))
}

/// numpy's best milliseconds per op name for `dims` (`benches/image_numpy.py`).
fn numpy_ms((n, c, h, w): Dims) -> HashMap<String, f64> {
    brotensor_benches::python_peer_ms("image_numpy.py", &[n, c, h, w].map(|d| d.to_string()))
}

/// The inputs of the rows for `dims` on `device` in `dtype`, by [`Src`].
fn inputs(device: Device, dtype: Dtype, (n, c, h, w): Dims) -> [Tensor; 4] {
    let make = |len: usize| {
        Tensor::from_slice_on(device, &values(len), n, len / n)
            .and_then(|t| t.to_dtype(dtype))
            .expect("input")
    };
    let base = n * c * h * w;
    [
        make(base),
        make(4 * base),
        make(base / 4),
        make(n * c * (h + 2) * (w + 2)),
    ]
}

fn pick(inputs: &[Tensor; 4], src: Src) -> &Tensor {
    &inputs[match src {
        Src::Base => 0,
        Src::Up => 1,
        Src::Down => 2,
        Src::Padded => 3,
    }]
}

/// Every row on a GPU device in F32 and F16, in GB/s of the bytes each moves.
fn gpu_table(dev: Device, dims: Dims) {
    let (n, c, h, w) = dims;
    let name = brotensor::device_name(dev).unwrap_or_else(|_| dev.to_string());
    println!();
    println!("## {name}: {n} x {c} x {h} x {w}");
    println!();
    println!("| op | dtype | ms | GB/s |");
    println!("|---|---|---:|---:|");
    for dtype in [Dtype::F32, Dtype::F16] {
        let ins = inputs(dev, dtype, dims);
        for r in rows() {
            let mut y = Tensor::default();
            let src = pick(&ins, r.src);
            let secs = best_secs(dev, 3, || (r.ours)(src, dims, &mut y));
            let bytes = (r.bytes)(dims) as f64 * dtype.size_bytes().unwrap_or(4) as f64 / 4.0;
            println!(
                "| {} | {dtype} | {:.3} | {:.1} |",
                r.name,
                secs * 1e3,
                bytes / secs / 1e9
            );
        }
    }
}

fn main() {
    let devices = selected_devices();
    let small_only = std::env::args().any(|a| a == "--small");
    let all_shapes: &[Dims] = &[(1, 64, 256, 256), (8, 64, 512, 512)];
    let shapes = if small_only {
        &all_shapes[..1]
    } else {
        all_shapes
    };
    for dev in devices.iter().filter(|d| **d != Device::Cpu) {
        for &dims in shapes {
            gpu_table(*dev, dims);
        }
    }
    if !devices.contains(&Device::Cpu) {
        return;
    }
    println!(
        "# bench_image: {} rayon threads, F32",
        rayon::current_num_threads()
    );
    let copy_len = 256 << 20;
    let (src, mut dst) = (vec![1u8; copy_len], vec![0u8; copy_len]);
    let copy_secs = best_secs(Device::Cpu, 2, || brotensor_cpu::cast::copy(&mut dst, &src));
    let copy_gbs = 2.0 * copy_len as f64 / copy_secs / 1e9;
    drop((src, dst));
    println!("# copy bandwidth {copy_gbs:.1} GB/s (read + write)");
    for &dims in shapes {
        let (n, c, h, w) = dims;
        println!();
        println!("## {n} x {c} x {h} x {w}");
        println!();
        let numpy = numpy_ms(dims);
        println!("| op | ms | GB/s | of copy | candle ms | vs candle | numpy ms | vs numpy |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|");
        let ins = inputs(Device::Cpu, Dtype::F32, dims);
        #[cfg(feature = "candle")]
        let cx = candle_core::Tensor::from_vec(
            values(numel(dims)),
            (n, c, h, w),
            &candle_core::Device::Cpu,
        )
        .expect("candle x");
        for r in rows() {
            let mut y = Tensor::default();
            let src = pick(&ins, r.src);
            let ours = || (r.ours)(src, dims, &mut y);
            #[cfg(feature = "candle")]
            let (secs, secs_c) = match r.candle {
                Some(f) => best_secs_paired(Device::Cpu, 1, ours, || drop(f(&cx))),
                None => (best_secs(Device::Cpu, 1, ours), f64::NAN),
            };
            #[cfg(not(feature = "candle"))]
            let (secs, secs_c) = (best_secs(Device::Cpu, 1, ours), f64::NAN);
            let gbs = (r.bytes)(dims) as f64 / secs / 1e9;
            let np_ms = numpy.get(r.name).copied().unwrap_or(f64::NAN);
            println!(
                "| {} | {:.2} | {gbs:.1} | {:.2} | {:.2} | {:.2} | {np_ms:.2} | {:.2} |",
                r.name,
                secs * 1e3,
                gbs / copy_gbs,
                secs_c * 1e3,
                secs_c / secs,
                np_ms / 1e3 / secs,
            );
        }
    }
}
