//! Tests of the flash_attention ops: every op on every device and dtype against float64
//! references that are not our code (numpy fixtures for the attention core, float64 math
//! written here for the projected forms), and every error case of the contracts.

mod composite;
mod errors;
mod fixture;
mod parity;

use brotensor::{Device, Dtype, Error, Result, Tensor};
use brotensor_tests::{assert_close_rows, gpu_devices, read_f32, round_through, tensor};

/// The CPU and every GPU found (said loudly when there is none).
fn devices() -> Vec<Device> {
    let gpus = gpu_devices();
    if gpus.is_empty() {
        eprintln!("flash_attention: SKIPPED on GPU (no GPU device found)");
    }
    std::iter::once(Device::Cpu).chain(gpus).collect()
}

/// The dtypes every op is tried in.
const DTYPES: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::BF16];

/// A tensor of `dtype` on `device` from host values.
fn t(device: Device, data: &[f32], rows: usize, cols: usize, dtype: Dtype) -> Tensor {
    tensor(device, data, rows, cols, dtype).expect("upload")
}

/// Checks `result` against `want` (rows of `cols`) under `tol`; a device that does not
/// compute in `dtype` must refuse it with `UnsupportedDtype`. Returns whether it ran.
fn check(
    tag: &str,
    device: Device,
    dtype: Dtype,
    result: Result<Tensor>,
    want: &[f32],
    cols: usize,
    tol: (f32, f32),
) -> bool {
    match result {
        Ok(out) => {
            assert_eq!(out.dtype(), dtype, "{tag}: output dtype");
            assert_eq!(out.device(), device, "{tag}: output device");
            let got = read_f32(&out).expect("read back");
            let want = round_through(dtype, want);
            assert_close_rows(
                &format!("{tag} on {device} {dtype}"),
                &want,
                &got,
                cols,
                tol,
            );
            eprintln!("flash {tag}: {device} {dtype} ok");
            true
        }
        Err(Error::UnsupportedDtype { dtype: d, .. })
            if !brotensor::supports_dtype(device, d).expect("listed device") =>
        {
            eprintln!("flash {tag}: {device} refuses {dtype} (unsupported, as reported)");
            false
        }
        Err(e) => panic!("{tag} on {device} {dtype}: {e}"),
    }
}
