//! A user's own `#[cube]` kernel through `brotensor::custom`: the fused SiLU-gated product
//! `y = silu(g) * u` of the `custom_kernel` example (here generic over the float type), run
//! on the CPU and on every GPU device against a float64 reference, and every refusal of the
//! launch checks. The kernel reaches CubeCL only through `brotensor::cubecl` (this crate does
//! not depend on cubecl), as a user's crate would.

use brotensor::cubecl::{self, prelude::*};
use brotensor::custom::{self, CustomKernel, GpuLaunch, HostIn, HostOut, Input, Output};
use brotensor::{Device, Dtype, Error, Result, Tensor, GPU_MAX_ELEMENTS};
use brotensor_tests::{
    assert_close_rows, gpu_devices, read_f32, round_through, tensor, tolerance, SplitMix64,
};
use half::f16;

/// `y[i] = silu(g[i]) * u[i]` in F32 arithmetic, stored as `F`.
#[cube(launch_unchecked)]
fn silu_gate_kernel<F: Float>(g: &Array<F>, u: &Array<F>, y: &mut Array<F>) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let v = f32::cast_from(g[i]);
        y[i] = F::cast_from(v / (1.0 + (-v).exp()) * f32::cast_from(u[i]));
    }
}

/// Inputs `g`, `u` (same dims, F32 or F16), output `y`.
struct SiluGate;

impl SiluGate {
    fn launch_as<F: Float + CubeElement + brotensor::Element, R: Runtime>(
        launch: &GpuLaunch<'_, R>,
    ) -> Result<()> {
        let [g, u] = launch.inputs() else {
            unreachable!("INPUTS is checked by launch")
        };
        let y = &launch.outputs()[0];
        if y.numel() == 0 {
            return Ok(());
        }
        let (count, dim) = launch.grid_1d(y.numel())?;
        let (ga, ua, ya) = (g.arg::<F, R>()?, u.arg::<F, R>()?, y.arg::<F, R>()?);
        // SAFETY: each argument binds the `numel` elements of F that its buffer holds
        // (`arg` checked F against the dtype), and the op gives all three the same dims.
        unsafe {
            silu_gate_kernel::launch_unchecked::<F, R>(launch.client(), count, dim, ga, ua, ya);
        }
        Ok(())
    }
}

fn silu_gate_f32(g: f32, u: f32) -> f32 {
    g / (1.0 + (-g).exp()) * u
}

impl CustomKernel for SiluGate {
    const NAME: &'static str = "silu_gate";
    const INPUTS: usize = 2;
    const OUTPUTS: usize = 1;

    fn cpu(&self, inputs: &[HostIn<'_>], outputs: &mut [HostOut<'_>]) -> Result<()> {
        let y = &mut outputs[0];
        match y.dtype() {
            Dtype::F16 => {
                let (g, u) = (inputs[0].slice::<f16>()?, inputs[1].slice::<f16>()?);
                for ((y, g), u) in y.slice_mut::<f16>()?.iter_mut().zip(g).zip(u) {
                    *y = f16::from_f32(silu_gate_f32(g.to_f32(), u.to_f32()));
                }
            }
            _ => {
                let (g, u) = (inputs[0].slice::<f32>()?, inputs[1].slice::<f32>()?);
                for ((y, &g), &u) in y.slice_mut::<f32>()?.iter_mut().zip(g).zip(u) {
                    *y = silu_gate_f32(g, u);
                }
            }
        }
        Ok(())
    }

    fn gpu<R: Runtime>(&self, launch: &GpuLaunch<'_, R>) -> Result<()> {
        match launch.outputs()[0].dtype() {
            Dtype::F32 => Self::launch_as::<f32, R>(launch),
            Dtype::F16 => Self::launch_as::<f16, R>(launch),
            other => Err(launch.error(format!("no kernel for {other}"))),
        }
    }
}

/// The op as a user would wrap it: `g`'s dtype for every operand, `g`'s dims for `y`.
fn silu_gate_out(g: &Tensor, u: &Tensor, y: &mut Tensor) -> Result<()> {
    assert_eq!(g.dims(), u.dims(), "the test passes matching dims");
    custom::launch(
        &SiluGate,
        &[Input::new("g", g, g.dtype()), Input::new("u", u, g.dtype())],
        &mut [Output::new("y", y, g.dims(), g.dtype())],
    )
}

fn silu_gate(g: &Tensor, u: &Tensor) -> Result<Tensor> {
    let mut y = Tensor::default();
    silu_gate_out(g, u, &mut y)?;
    Ok(y)
}

/// Every device the test runs on: the CPU, then each GPU.
fn devices() -> Vec<Device> {
    std::iter::once(Device::Cpu).chain(gpu_devices()).collect()
}

/// `silu(g) * u` in float64.
fn reference(g: &[f32], u: &[f32]) -> Vec<f32> {
    g.iter()
        .zip(u)
        .map(|(&g, &u)| {
            let (g, u) = (g as f64, u as f64);
            (g / (1.0 + (-g).exp()) * u) as f32
        })
        .collect()
}

#[test]
fn custom_kernel_matches_f64_on_every_device() {
    // Odd (scalar tail, one partial cube), several cubes, and empty.
    for (seed, (rows, cols)) in [(1u64, (33usize, 21usize)), (2, (8, 1000)), (3, (0, 7))] {
        let mut rng = SplitMix64::new(seed);
        let n = rows * cols;
        let g = rng.uniform(n, -6.0, 6.0);
        let u = rng.uniform(n, -2.0, 2.0);
        for device in devices() {
            for dtype in [Dtype::F32, Dtype::F16] {
                let tag = format!("silu_gate {rows}x{cols} {dtype} on {device}");
                let (gr, ur) = (round_through(dtype, &g), round_through(dtype, &u));
                let gt = tensor(device, &g, rows, cols, dtype).unwrap();
                let ut = tensor(device, &u, rows, cols, dtype).unwrap();
                let y = match silu_gate(&gt, &ut) {
                    Ok(y) => y,
                    Err(Error::UnsupportedDtype { dtype: d, .. })
                        if device.is_gpu() && dtype != Dtype::F32 && d == dtype =>
                    {
                        eprintln!("{tag}: refused as unsupported on this device");
                        continue;
                    }
                    Err(e) => panic!("{tag}: {e}"),
                };
                assert_eq!(
                    (y.dims(), y.dtype(), y.device()),
                    (gt.dims(), dtype, device)
                );
                let want = round_through(dtype, &reference(&gr, &ur));
                let got = read_f32(&y).unwrap();
                assert_close_rows(&tag, &want, &got, cols, tolerance(dtype));
            }
        }
    }
}

#[test]
fn custom_kernel_reads_views_as_dense() {
    let (rows, cols) = (19, 45);
    let mut rng = SplitMix64::new(7);
    let g = rng.uniform(rows * cols, -5.0, 5.0);
    let u = rng.uniform(cols * rows, -1.0, 1.0);
    // g viewed transposed (cols x rows), u read as a dense cols x rows tensor.
    let gt_host: Vec<f32> = (0..cols)
        .flat_map(|c| (0..rows).map(move |r| (r, c)))
        .map(|(r, c)| g[r * cols + c])
        .collect();
    let want = reference(&gt_host, &u);
    for device in devices() {
        let base = tensor(device, &g, rows, cols, Dtype::F32).unwrap();
        let view = base.transpose(0, 1).unwrap();
        assert!(!view.is_contiguous());
        let ut = tensor(device, &u, cols, rows, Dtype::F32).unwrap();
        let y = silu_gate(&view, &ut).unwrap();
        assert_eq!(y.dims(), &[cols, rows]);
        let tag = format!("silu_gate of a transposed view on {device}");
        assert_close_rows(
            &tag,
            &want,
            &read_f32(&y).unwrap(),
            rows,
            tolerance(Dtype::F32),
        );
        // A contiguous view that starts past its storage's first element.
        let tail = base.narrow(0, 2, rows - 2).unwrap();
        let ut = tensor(device, &u[..(rows - 2) * cols], rows - 2, cols, Dtype::F32).unwrap();
        let y = silu_gate(&tail, &ut).unwrap();
        let want = reference(&g[2 * cols..], &u[..(rows - 2) * cols]);
        let tag = format!("silu_gate of a narrowed view on {device}");
        assert_close_rows(
            &tag,
            &want,
            &read_f32(&y).unwrap(),
            cols,
            tolerance(Dtype::F32),
        );
    }
}

/// `s = silu(g)` and `y = s * u`: two outputs from one kernel.
#[cube(launch_unchecked)]
fn silu_split_kernel(g: &Array<f32>, u: &Array<f32>, s: &mut Array<f32>, y: &mut Array<f32>) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        let v = g[i];
        let a = v / (1.0 + (-v).exp());
        s[i] = a;
        y[i] = a * u[i];
    }
}

/// Inputs `g`, `u` (F32, same dims), outputs `s` and `y` of their dims.
struct SiluSplit;

impl CustomKernel for SiluSplit {
    const NAME: &'static str = "silu_split";
    const INPUTS: usize = 2;
    const OUTPUTS: usize = 2;

    fn cpu(&self, inputs: &[HostIn<'_>], outputs: &mut [HostOut<'_>]) -> Result<()> {
        let (g, u) = (inputs[0].slice::<f32>()?, inputs[1].slice::<f32>()?);
        let [s, y] = outputs else {
            unreachable!("OUTPUTS is checked by launch")
        };
        let (s, y) = (s.slice_mut::<f32>()?, y.slice_mut::<f32>()?);
        for (i, (&g, &u)) in g.iter().zip(u).enumerate() {
            s[i] = g / (1.0 + (-g).exp());
            y[i] = s[i] * u;
        }
        Ok(())
    }

    fn gpu<R: Runtime>(&self, launch: &GpuLaunch<'_, R>) -> Result<()> {
        let ([g, u], [s, y]) = (launch.inputs(), launch.outputs()) else {
            unreachable!("INPUTS and OUTPUTS are checked by launch")
        };
        let (count, dim) = launch.grid_1d(y.numel())?;
        let args = [g, u, s, y].map(|o| o.arg::<f32, R>());
        let [ga, ua, sa, ya] = args;
        let (ga, ua, sa, ya) = (ga?, ua?, sa?, ya?);
        // SAFETY: each argument binds the `numel` F32 elements its buffer holds; all four
        // have the same dims.
        unsafe {
            silu_split_kernel::launch_unchecked::<R>(launch.client(), count, dim, ga, ua, sa, ya);
        }
        Ok(())
    }
}

#[test]
fn custom_kernel_writes_two_outputs() {
    let (rows, cols) = (17, 300);
    let mut rng = SplitMix64::new(11);
    let g = rng.uniform(rows * cols, -6.0, 6.0);
    let u = rng.uniform(rows * cols, -2.0, 2.0);
    let want_s = reference(&g, &vec![1.0; rows * cols]);
    let want_y = reference(&g, &u);
    for device in devices() {
        let gt = tensor(device, &g, rows, cols, Dtype::F32).unwrap();
        let ut = tensor(device, &u, rows, cols, Dtype::F32).unwrap();
        let (mut s, mut y) = (Tensor::default(), Tensor::default());
        custom::launch(
            &SiluSplit,
            &[
                Input::new("g", &gt, Dtype::F32),
                Input::new("u", &ut, Dtype::F32),
            ],
            &mut [
                Output::new("s", &mut s, gt.dims(), Dtype::F32),
                Output::new("y", &mut y, gt.dims(), Dtype::F32),
            ],
        )
        .unwrap();
        assert_ne!(s.allocation_id(), y.allocation_id());
        for (what, want, got) in [("s", &want_s, &s), ("y", &want_y, &y)] {
            let tag = format!("silu_split output {what} on {device}");
            assert_close_rows(
                &tag,
                want,
                &read_f32(got).unwrap(),
                cols,
                tolerance(Dtype::F32),
            );
        }
    }
}

#[test]
fn custom_kernel_reuses_output_allocation() {
    for device in devices() {
        let g = tensor(device, &[0.5, -1.0, 2.0, 3.0, -4.0, 1.5], 2, 3, Dtype::F32).unwrap();
        let u = tensor(device, &[1.0, 2.0, -1.0, 0.5, 1.0, -2.0], 2, 3, Dtype::F32).unwrap();
        let mut y = Tensor::zeros_on(device, 4, 4, Dtype::F32).unwrap();
        let id = y.allocation_id();
        silu_gate_out(&g, &u, &mut y).unwrap();
        assert_eq!(
            y.allocation_id(),
            id,
            "{device}: a fitting output keeps its buffer"
        );
        assert_eq!(y.dims(), &[2, 3]);
        let want = reference(
            &[0.5, -1.0, 2.0, 3.0, -4.0, 1.5],
            &[1.0, 2.0, -1.0, 0.5, 1.0, -2.0],
        );
        let tag = format!("silu_gate into a reused output on {device}");
        assert_close_rows(
            &tag,
            &want,
            &read_f32(&y).unwrap(),
            3,
            tolerance(Dtype::F32),
        );
    }
}

/// A dense F32 tensor of ones.
fn ones(device: Device, dims: &[usize]) -> Tensor {
    let n = dims.iter().product();
    Tensor::from_slice_nd_on(device, &vec![1.0f32; n], dims).unwrap()
}

#[test]
fn custom_kernel_refuses_device_mismatch() {
    let gpus = gpu_devices();
    let Some(&gpu) = gpus.first() else {
        eprintln!("skipped: no GPU device for a device mismatch");
        return;
    };
    let g = ones(Device::Cpu, &[2, 3]);
    let u = ones(gpu, &[2, 3]);
    let err = silu_gate(&g, &u).unwrap_err();
    assert!(
        matches!(
            err,
            Error::DeviceMismatch { op: "silu_gate", operand: "u", expected: Device::Cpu, found }
                if found == gpu
        ),
        "{err}"
    );
    // A committed output on another device than the inputs.
    let u = ones(Device::Cpu, &[2, 3]);
    let mut y = Tensor::zeros_on(gpu, 2, 3, Dtype::F32).unwrap();
    let err = silu_gate_out(&g, &u, &mut y).unwrap_err();
    assert!(
        matches!(err, Error::DeviceMismatch { operand: "y", .. }),
        "{err}"
    );
    assert!(
        err.to_string().starts_with("brotensor: silu_gate: "),
        "{err}"
    );
}

#[test]
fn custom_kernel_refuses_wrong_dtype() {
    for device in devices() {
        let g = ones(device, &[2, 3]);
        let u = ones(device, &[2, 3]);
        let i = Tensor::from_slice_on(device, &[1i32; 6], 2, 3).unwrap();
        let mut y = Tensor::default();
        // An input of another dtype than the kernel takes.
        let err = custom::launch(
            &SiluGate,
            &[
                Input::new("g", &g, Dtype::F32),
                Input::new("u", &i, Dtype::F32),
            ],
            &mut [Output::new("y", &mut y, &[2, 3], Dtype::F32)],
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Dtype {
                    op: "silu_gate",
                    operand: "u",
                    found: Dtype::I32,
                    ..
                }
            ),
            "{device}: {err}"
        );
        assert!(
            !y.is_committed(),
            "{device}: a refused launch leaves the output alone"
        );
        // The CPU function's typed access checks the element type too.
        let err = custom::launch(
            &SiluGate,
            &[
                Input::new("g", &g, Dtype::F32),
                Input::new("u", &u, Dtype::F32),
            ],
            &mut [Output::new("y", &mut y, &[2, 3], Dtype::I32)],
        );
        if device == Device::Cpu {
            let err = err.unwrap_err();
            assert!(matches!(err, Error::Dtype { operand: "y", .. }), "{err}");
        } else {
            let err = err.unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Gpu {
                        op: "silu_gate",
                        ..
                    }
                ),
                "{device}: {err}"
            );
        }
    }
}

#[test]
fn custom_kernel_refuses_outputs_that_alias() {
    for device in devices() {
        let g = ones(device, &[4, 6]);
        let u = ones(device, &[4, 6]);
        // An output that is a strided view.
        let base = ones(device, &[6, 4]);
        let mut view = base.transpose(0, 1).unwrap();
        let err = silu_gate_out(&g, &u, &mut view).unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { op: "silu_gate", ref reason } if reason.contains("view")),
            "{device}: {err}"
        );
        // An output that shares its storage with an input (a dense view of `g`).
        let mut alias = g.reshaped(4, 6).unwrap();
        let err = silu_gate_out(&g, &u, &mut alias).unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { op: "silu_gate", ref reason } if reason.contains("shares its storage")),
            "{device}: {err}"
        );
        // Wrong operand counts and an uncommitted input.
        let mut y = Tensor::default();
        let err = custom::launch(
            &SiluGate,
            &[Input::new("g", &g, Dtype::F32)],
            &mut [Output::new("y", &mut y, &[4, 6], Dtype::F32)],
        )
        .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        let empty = Tensor::default();
        let err = custom::launch(
            &SiluGate,
            &[
                Input::new("g", &g, Dtype::F32),
                Input::new("u", &empty, Dtype::F32),
            ],
            &mut [Output::new("y", &mut y, &[4, 6], Dtype::F32)],
        )
        .unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { ref reason, .. } if reason.contains("`u`")),
            "{err}"
        );
    }
}

#[test]
fn custom_kernel_refuses_size_overflow() {
    for device in devices() {
        let g = ones(device, &[2, 3]);
        let u = ones(device, &[2, 3]);
        let mut y = Tensor::zeros_on(device, 2, 3, Dtype::F32).unwrap();
        let id = y.allocation_id();
        // The silu_gate launch into `y` sized to `dims`: its shape error's reason.
        let mut refused = |dims: &[usize]| {
            let err = custom::launch(
                &SiluGate,
                &[
                    Input::new("g", &g, Dtype::F32),
                    Input::new("u", &u, Dtype::F32),
                ],
                &mut [Output::new("y", &mut y, dims, Dtype::F32)],
            )
            .unwrap_err();
            match err {
                Error::Shape {
                    op: "silu_gate",
                    reason,
                } => reason,
                other => panic!("{device}: {dims:?}: {other}"),
            }
        };
        // The dims' product overflows usize.
        refused(&[usize::MAX / 2, 3]);
        // The element count fits, its byte size does not.
        refused(&[usize::MAX / 3]);
        if device.is_gpu() {
            // One element past the 32-bit index range: refused before anything is allocated.
            let reason = refused(&[GPU_MAX_ELEMENTS + 1]);
            assert!(reason.contains("32 bits"), "{device}: {reason}");
        }
        assert_eq!((y.allocation_id(), y.dims()), (id, &[2usize, 3][..]));
    }
}

/// A kernel that binds its F16 input as f32: `GpuOperand::arg` refuses before any launch
/// (a raw `from_raw_parts` would have read twice the buffer's bytes).
struct MisTyped;

impl CustomKernel for MisTyped {
    const NAME: &'static str = "mistyped";
    const INPUTS: usize = 1;
    const OUTPUTS: usize = 1;

    fn cpu(&self, inputs: &[HostIn<'_>], _outputs: &mut [HostOut<'_>]) -> Result<()> {
        inputs[0].slice::<f32>().map(|_| ())
    }

    fn gpu<R: Runtime>(&self, launch: &GpuLaunch<'_, R>) -> Result<()> {
        launch.inputs()[0].arg::<f32, R>().map(|_| ())
    }
}

#[test]
fn an_argument_of_the_wrong_element_type_is_refused() {
    for device in devices() {
        let x = tensor(device, &[1.0; 8], 2, 4, Dtype::F16).unwrap();
        let mut y = Tensor::default();
        let err = custom::launch(
            &MisTyped,
            &[Input::new("x", &x, Dtype::F16)],
            &mut [Output::new("y", &mut y, &[2, 4], Dtype::F16)],
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("mistyped") && msg.contains("`x`"),
            "{device}: {msg}"
        );
    }
}
