//! Your own kernel on brotensor tensors: a fused SiLU-gated product `y = silu(g) * u`
//! (`silu(v) = v / (1 + e^-v)`), written once as a `#[cube]` kernel for every GPU runtime plus
//! a CPU function, run on every available device and checked against a float64 computation.
//!
//! ```text
//! cargo run --release -p brotensor --example custom_kernel
//! ```

use brotensor::cubecl::{self, prelude::*};
use brotensor::custom::{self, CustomKernel, GpuLaunch, HostIn, HostOut, Input, Output};
use brotensor::{Dtype, Tensor};

/// `y[i] = silu(g[i]) * u[i]`, one unit per element, in F32.
#[cube(launch_unchecked)]
fn silu_gate_kernel(g: &Array<f32>, u: &Array<f32>, y: &mut Array<f32>) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let v = g[i];
        y[i] = v / (1.0 + (-v).exp()) * u[i];
    }
}

/// The op: inputs `g` and `u` (same dims, F32), one output `y` of their dims.
struct SiluGate;

impl CustomKernel for SiluGate {
    const NAME: &'static str = "silu_gate";
    const INPUTS: usize = 2;
    const OUTPUTS: usize = 1;

    fn cpu(&self, inputs: &[HostIn<'_>], outputs: &mut [HostOut<'_>]) -> brotensor::Result<()> {
        let (g, u) = (inputs[0].slice::<f32>()?, inputs[1].slice::<f32>()?);
        let y = outputs[0].slice_mut::<f32>()?;
        for ((y, &g), &u) in y.iter_mut().zip(g).zip(u) {
            *y = g / (1.0 + (-g).exp()) * u;
        }
        Ok(())
    }

    fn gpu<R: Runtime>(&self, launch: &GpuLaunch<'_, R>) -> brotensor::Result<()> {
        let [g, u] = launch.inputs() else {
            unreachable!("brotensor checked INPUTS")
        };
        let y = &launch.outputs()[0];
        if y.numel() == 0 {
            return Ok(());
        }
        let (count, dim) = launch.grid_1d(y.numel())?;
        let (g, u, y) = (g.arg::<f32, R>()?, u.arg::<f32, R>()?, y.arg::<f32, R>()?);
        // SAFETY: each argument binds the `numel` F32 elements brotensor checked its buffer
        // holds, and the caller below gives all three the same dims: the kernel reads and
        // writes only below `y.len()`.
        unsafe {
            silu_gate_kernel::launch_unchecked::<R>(launch.client(), count, dim, g, u, y);
        }
        Ok(())
    }
}

/// `silu(g) * u` on `g`'s device. The shape check is the op's own: `launch` checks counts,
/// dtypes, devices, sizes and the output, not that `g` and `u` agree.
fn silu_gate(g: &Tensor, u: &Tensor) -> brotensor::Result<Tensor> {
    if g.dims() != u.dims() {
        return Err(brotensor::Error::Shape {
            op: SiluGate::NAME,
            reason: format!("`g` is {:?} but `u` is {:?}", g.dims(), u.dims()),
        });
    }
    let mut y = Tensor::default();
    custom::launch(
        &SiluGate,
        &[
            Input::new("g", g, Dtype::F32),
            Input::new("u", u, Dtype::F32),
        ],
        &mut [Output::new("y", &mut y, g.dims(), Dtype::F32)],
    )?;
    Ok(y)
}

fn main() -> brotensor::Result<()> {
    if let Err(e) = brotensor::init() {
        eprintln!("note: {e}");
    }
    let dims = [37, 129];
    let n = dims[0] * dims[1];
    // Deterministic inputs spanning negative and positive gates.
    let g: Vec<f32> = (0..n)
        .map(|i| ((i * 37) % 101) as f32 / 10.0 - 5.0)
        .collect();
    let u: Vec<f32> = (0..n).map(|i| ((i * 13) % 29) as f32 / 7.0 - 2.0).collect();
    let want: Vec<f64> = g
        .iter()
        .zip(&u)
        .map(|(&g, &u)| {
            let (g, u) = (g as f64, u as f64);
            g / (1.0 + (-g).exp()) * u
        })
        .collect();
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for device in brotensor::available_devices() {
        let gt = Tensor::from_slice_nd_on(device, &g, &dims)?;
        let ut = Tensor::from_slice_nd_on(device, &u, &dims)?;
        let y = silu_gate(&gt, &ut)?.to_vec::<f32>()?;
        let err = y
            .iter()
            .zip(&want)
            .fold(0.0f64, |m, (&y, &w)| m.max((y as f64 - w).abs()));
        let name = brotensor::device_name(device)?;
        println!("{name}: silu_gate on {n} elements, max |error| {err:.2e} (scale {scale:.2})");
        if err > 1e-5 * scale {
            return Err(brotensor::Error::Shape {
                op: "custom_kernel example",
                reason: format!("{name}: error {err:e} above {:e}", 1e-5 * scale),
            });
        }
    }
    Ok(())
}
