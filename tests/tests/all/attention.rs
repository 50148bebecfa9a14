//! Tests of the attention ops: every op on every device and dtype it claims against the
//! float64 reference in `reference` (itself checked by central finite differences), gradient
//! accumulation, and the error cases.

mod reference;
mod training;
mod variants;

use brotensor::{Device, Dtype, Error, Result, Tensor};
use brotensor_tests::{
    assert_close_rows, gpu_devices, read_f32, round_through, tensor, tolerance, SplitMix64,
};

/// Every `(device, dtype)` an op runs in: the CPU and every GPU in F32, F16 and BF16.
fn cases() -> Vec<(Device, Dtype)> {
    let gpus = gpu_devices();
    if gpus.is_empty() {
        eprintln!("attention: SKIPPED on GPU (no GPU device found)");
    }
    let mut v = Vec::new();
    for d in std::iter::once(Device::Cpu).chain(gpus) {
        v.extend([Dtype::F32, Dtype::F16, Dtype::BF16].map(|t| (d, t)));
    }
    v
}

/// The result, or `None` (said loudly) where `device` refuses `dtype` as unsupported.
fn ran<T>(case: &str, device: Device, dtype: Dtype, r: Result<T>) -> Option<T> {
    match r {
        Ok(t) => Some(t),
        Err(Error::UnsupportedDtype { dtype: d, .. })
            if !brotensor::supports_dtype(device, d).expect("listed device") =>
        {
            eprintln!("{case}: {device} {dtype} refused ({d} unsupported)");
            None
        }
        Err(e) => panic!("{case} on {device} {dtype}: {e}"),
    }
}

/// Tolerance of a composite result: the single-op tolerance, widened for 16-bit storage of
/// the intermediate caches (scores, probabilities, projections).
fn tol(dtype: Dtype) -> (f32, f32) {
    let (s, r) = tolerance(dtype);
    match dtype {
        Dtype::F32 => (s * 4.0, r * 4.0),
        _ => (s * 4.0, r * 3.0),
    }
}

/// Seeded uniform values.
fn rand(rng: &mut SplitMix64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    rng.uniform(n, lo, hi)
}

/// A host input for `dtype`: the tensor on `device`, and its values after the dtype's
/// rounding, widened for the reference.
fn input(device: Device, dtype: Dtype, v: &[f32], rows: usize, cols: usize) -> (Tensor, Vec<f64>) {
    let t = tensor(device, v, rows, cols, dtype).expect("upload");
    let w = round_through(dtype, v).into_iter().map(f64::from).collect();
    (t, w)
}

/// An F32 mask on `device`.
fn mask_on(device: Device, m: &[f32]) -> Tensor {
    Tensor::from_slice_on(device, m, m.len(), 1).expect("upload mask")
}

/// Asserts `got` matches the f64 `want` (rows of `cols`), and that the check could fail.
fn check(tag: &str, want: &[f64], got: &Tensor, cols: usize, dtype: Dtype) {
    let got_v = read_f32(got).unwrap_or_else(|e| panic!("{tag}: read back: {e}"));
    let want: Vec<f32> = round_through(
        got.dtype(),
        &want.iter().map(|&v| v as f32).collect::<Vec<_>>(),
    );
    assert_eq!(got_v.len(), want.len(), "{tag}: element count");
    assert_close_rows(tag, &want, &got_v, cols, tol(dtype));
}

/// A tensor of `dtype` on `device` filled with `v` (a pre-filled gradient).
fn filled(device: Device, dtype: Dtype, v: &[f32], rows: usize, cols: usize) -> Tensor {
    tensor(device, v, rows, cols, dtype).expect("upload")
}

#[test]
fn slot_mask_reads_strided_elements_on_every_device() {
    let x: Vec<f32> = vec![0.0, 0.9, 0.2, 0.6, 0.5, 1.0, 0.7, 0.1, 0.51, 0.3];
    for (device, dtype) in cases() {
        let case = "build_slot_mask";
        let t = tensor(device, &x, 10, 1, dtype).unwrap();
        let mut m = Tensor::default();
        let Some(()) = ran(
            case,
            device,
            dtype,
            brotensor::ops::build_slot_mask(&t, 1, 4, 2, &mut m),
        ) else {
            continue;
        };
        let xr = round_through(dtype, &x);
        let want: Vec<f32> = (0..4)
            .map(|i| if xr[1 + 2 * i] > 0.5 { 1.0 } else { 0.0 })
            .collect();
        assert_eq!(m.dims(), [4, 1]);
        assert_eq!(m.dtype(), Dtype::F32);
        assert_eq!(
            m.to_vec::<f32>().unwrap(),
            want,
            "{case} on {device} {dtype}"
        );
        let err = brotensor::ops::build_slot_mask(&t, 2, 5, 2, &mut m).unwrap_err();
        assert!(matches!(err, Error::Shape { .. }), "{err}");
    }
}

#[test]
fn causal_mask_row_marks_keys_up_to_the_query() {
    for (device, dtype) in cases().into_iter().filter(|c| c.1 == Dtype::F32) {
        let mut m = Tensor::empty_on(device, 1, 1, Dtype::F32).unwrap();
        brotensor::ops::build_causal_mask_row(6, 2, &mut m).unwrap();
        assert_eq!(m.device(), device);
        assert_eq!(m.dims(), [6, 1]);
        assert_eq!(
            m.to_vec::<f32>().unwrap(),
            [1.0, 1.0, 1.0, 0.0, 0.0, 0.0],
            "on {device} {dtype}"
        );
        brotensor::ops::build_causal_mask_row(3, 7, &mut m).unwrap();
        assert_eq!(m.to_vec::<f32>().unwrap(), [1.0, 1.0, 1.0]);
    }
}

#[test]
fn token_moments_match_f64_on_every_device() {
    // The second grid has more query rows than a cube has units.
    for (h, w, lk) in [(3usize, 4usize, 5usize), (20, 30, 4)] {
        token_moments_case(h, w, lk);
    }
}

fn token_moments_case(h: usize, w: usize, lk: usize) {
    let mut rng = SplitMix64::new(71);
    let mut a = rand(&mut rng, h * w * lk, 0.0, 1.0);
    for q in 0..h * w {
        a[q * lk + 3] = 0.0; // a column with no mass: centroid (0, 0)
    }
    for (device, dtype) in cases() {
        let case = "attention_token_moments";
        let (t, av) = input(device, dtype, &a, h * w, lk);
        let (mut mass, mut cen) = (Tensor::default(), Tensor::default());
        let r = brotensor::ops::attention_token_moments(&t, h, w, &mut mass, &mut cen);
        let Some(()) = ran(case, device, dtype, r) else {
            continue;
        };
        let mut wm = vec![0.0f64; lk];
        let mut wc = vec![0.0f64; 2 * lk];
        for k in 0..lk {
            let (mut m, mut sy, mut sx) = (0.0, 0.0, 0.0);
            for q in 0..h * w {
                let v = av[q * lk + k];
                m += v;
                sy += (q / w) as f64 * v;
                sx += (q % w) as f64 * v;
            }
            wm[k] = m;
            if m > 1e-8 {
                wc[2 * k] = sy / m;
                wc[2 * k + 1] = sx / m;
            }
        }
        assert_eq!((mass.dims(), mass.dtype()), (&[lk, 1][..], Dtype::F32));
        assert_eq!((cen.dims(), cen.dtype()), (&[lk, 2][..], Dtype::F32));
        let tag = format!("{case} on {device} {dtype}");
        check(&format!("{tag} mass"), &wm, &mass, lk, Dtype::F32);
        check(&format!("{tag} centroid"), &wc, &cen, 2 * lk, Dtype::F32);
        let err =
            brotensor::ops::attention_token_moments(&t, 2, 4, &mut mass, &mut cen).unwrap_err();
        assert!(matches!(err, Error::Shape { .. }), "{err}");
    }
}
