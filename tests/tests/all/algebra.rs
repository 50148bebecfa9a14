//! The tensor-algebra ops (issue 13) on every device: numpy fixtures (`fixtures/algebra`),
//! the hand cases of the contract, every error case, and long axes.

mod cases;
mod fixtures;

use brotensor::{Complex, Device, Dtype, Tensor};

/// Every device the tests run on: the CPU and each GPU found (a wgpu device is required
/// where `BROTENSOR_REQUIRE_GPU` says so).
pub fn devices() -> Vec<Device> {
    let mut d = vec![Device::Cpu];
    d.extend(brotensor_tests::gpu_devices());
    d
}

/// A tensor's values widened to `(re, im)` f64 pairs (integers exactly as f64 where they
/// fit; the i64 tests compare integers separately).
pub fn values(t: &Tensor) -> Vec<(f64, f64)> {
    match t.dtype() {
        Dtype::F32 => t
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(|v| (v as f64, 0.0))
            .collect(),
        Dtype::F64 => t
            .to_vec::<f64>()
            .unwrap()
            .into_iter()
            .map(|v| (v, 0.0))
            .collect(),
        Dtype::I64 => t
            .to_vec::<i64>()
            .unwrap()
            .into_iter()
            .map(|v| (v as f64, 0.0))
            .collect(),
        Dtype::I32 => t
            .to_vec::<i32>()
            .unwrap()
            .into_iter()
            .map(|v| (v as f64, 0.0))
            .collect(),
        Dtype::C64 => t
            .to_vec::<Complex<f32>>()
            .unwrap()
            .into_iter()
            .map(|v| (v.re as f64, v.im as f64))
            .collect(),
        Dtype::C128 => t
            .to_vec::<Complex<f64>>()
            .unwrap()
            .into_iter()
            .map(|v| (v.re, v.im))
            .collect(),
        other => panic!("no values of {other}"),
    }
}

/// Builds a `dtype` tensor on `device` from `(re, im)` pairs (imaginary parts ignored for
/// real dtypes; integers must be exact).
pub fn build(device: Device, dtype: Dtype, dims: &[usize], v: &[(f64, f64)]) -> Tensor {
    let t = match dtype {
        Dtype::F32 => Tensor::from_slice_nd_on(
            device,
            &v.iter().map(|p| p.0 as f32).collect::<Vec<_>>(),
            dims,
        ),
        Dtype::F64 => {
            Tensor::from_slice_nd_on(device, &v.iter().map(|p| p.0).collect::<Vec<_>>(), dims)
        }
        Dtype::I64 => Tensor::from_slice_nd_on(
            device,
            &v.iter().map(|p| p.0 as i64).collect::<Vec<_>>(),
            dims,
        ),
        Dtype::C64 => Tensor::from_slice_nd_on(
            device,
            &v.iter()
                .map(|p| Complex::new(p.0 as f32, p.1 as f32))
                .collect::<Vec<_>>(),
            dims,
        ),
        Dtype::C128 => Tensor::from_slice_nd_on(
            device,
            &v.iter().map(|p| Complex::new(p.0, p.1)).collect::<Vec<_>>(),
            dims,
        ),
        other => panic!("no builder for {other}"),
    };
    t.unwrap()
}

/// Whether `device` computes `dtype` (64-bit types need the adapter's 64-bit support).
pub fn supported(device: Device, dtype: Dtype) -> bool {
    brotensor::supports_dtype(device, dtype).unwrap()
}

/// Checks `got` against `want` element by element: NaN must be NaN, infinities equal, and
/// finite values within `tol * (scale + |want|)`, with `scale` the largest finite `|want|`
/// of the output. `tol == 0` demands exact equality (data movement, integers).
pub fn check(tag: &str, want: &[(f64, f64)], got: &[(f64, f64)], tol: f64) {
    assert_eq!(want.len(), got.len(), "{tag}: element count");
    let scale = want
        .iter()
        .flat_map(|&(a, b)| [a, b])
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        for (part, (w, g)) in [(w.0, g.0), (w.1, g.1)].into_iter().enumerate() {
            let ok = if w.is_nan() {
                g.is_nan()
            } else if w.is_infinite() || tol == 0.0 {
                w == g
            } else {
                (w - g).abs() <= tol * (scale + w.abs())
            };
            assert!(ok, "{tag}: element {i} part {part}: want {w:e}, got {g:e} (tol {tol:e}, scale {scale:e})");
        }
    }
}
