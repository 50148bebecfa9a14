//! The complex element ops against float64 math written here, on every device, with the
//! complex operands both as interleaved F32 `(R, 2C)` and as C64 `(R, C)`: products and
//! their accumulated gradients, magnitudes (and their gradient, zero at the origin),
//! phases on every quadrant and axis, and the polar form; the error cases.

use brotensor::Complex;
use brotensor::{ops, Device, Dtype, Error, Tensor};
use brotensor_tests::{assert_close, gpu_devices, SplitMix64};

type Complex32 = Complex<f32>;

const R: usize = 5;
const C: usize = 37;

fn devices() -> Vec<Device> {
    std::iter::once(Device::Cpu).chain(gpu_devices()).collect()
}

/// Interleaved values as a complex tensor: F32 `(R, 2C)` or C64 `(R, C)`.
fn complex(dev: Device, v: &[f32], c64: bool) -> Tensor {
    if c64 {
        let z: Vec<Complex32> = v.chunks(2).map(|p| Complex32::new(p[0], p[1])).collect();
        Tensor::from_slice_on(dev, &z, R, C).unwrap()
    } else {
        Tensor::from_slice_on(dev, v, R, 2 * C).unwrap()
    }
}

/// A complex tensor's interleaved floats.
fn floats(t: &Tensor) -> Vec<f32> {
    match t.dtype() {
        Dtype::C64 => t
            .to_vec::<Complex32>()
            .unwrap()
            .iter()
            .flat_map(|z| [z.re, z.im])
            .collect(),
        _ => t.to_vec::<f32>().unwrap(),
    }
}

/// Random interleaved values with planted points: the origin, the axes both ways, and
/// negative reals with +0 and -0 imaginary parts (the branch cut of the phase).
fn values(seed: u64) -> Vec<f32> {
    let mut v = SplitMix64::new(seed).uniform(2 * R * C, -2.0, 2.0);
    let planted: [(f32, f32); 7] = [
        (0.0, 0.0),
        (1.5, 0.0),
        (-1.5, 0.0),
        (-1.5, -0.0),
        (0.0, 2.0),
        (0.0, -2.0),
        (-0.0, 0.0),
    ];
    for (i, (re, im)) in planted.into_iter().enumerate() {
        v[2 * i * 3] = re;
        v[2 * i * 3 + 1] = im;
    }
    v
}

fn wide(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

#[test]
fn complex_products_and_their_gradients_follow_float64() {
    let (a, b, dy) = (values(1), values(2), values(3));
    let (da0, db0) = (values(4), values(5));
    let (wa, wb, wg) = (wide(&a), wide(&b), wide(&dy));
    let mut want_y = Vec::new();
    let (mut want_da, mut want_db) = (Vec::new(), Vec::new());
    for i in 0..R * C {
        let (ar, ai, br, bi, gr, gi) = (
            wa[2 * i],
            wa[2 * i + 1],
            wb[2 * i],
            wb[2 * i + 1],
            wg[2 * i],
            wg[2 * i + 1],
        );
        want_y.extend([(ar * br - ai * bi) as f32, (ar * bi + ai * br) as f32]);
        want_da.extend([
            (f64::from(da0[2 * i]) + gr * br + gi * bi) as f32,
            (f64::from(da0[2 * i + 1]) + gi * br - gr * bi) as f32,
        ]);
        want_db.extend([
            (f64::from(db0[2 * i]) + gr * ar + gi * ai) as f32,
            (f64::from(db0[2 * i + 1]) + gi * ar - gr * ai) as f32,
        ]);
    }
    let tol = (1e-6, 1e-5);
    for dev in devices() {
        for c64 in [false, true] {
            let tag = format!("{dev} c64={c64}");
            let (at, bt, gt) = (
                complex(dev, &a, c64),
                complex(dev, &b, c64),
                complex(dev, &dy, c64),
            );
            let mut y = Tensor::default();
            ops::complex_mul(&at, &bt, &mut y).unwrap();
            assert_eq!((y.dims(), y.dtype()), (at.dims(), at.dtype()), "{tag}");
            assert_close(&format!("complex_mul {tag}"), &want_y, &floats(&y), tol);
            let (mut da, mut db) = (complex(dev, &da0, c64), complex(dev, &db0, c64));
            ops::complex_mul_backward(&at, &bt, &gt, &mut da, &mut db).unwrap();
            assert_close(
                &format!("complex_mul_backward da {tag}"),
                &want_da,
                &floats(&da),
                tol,
            );
            assert_close(
                &format!("complex_mul_backward db {tag}"),
                &want_db,
                &floats(&db),
                tol,
            );
        }
    }
}

#[test]
fn magnitudes_phases_and_the_polar_form_follow_float64() {
    let z = values(6);
    let dy = SplitMix64::new(7).uniform(R * C, -1.0, 1.0);
    let wz = wide(&z);
    let (mut want_abs, mut want_angle, mut want_dz) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..R * C {
        let (re, im) = (wz[2 * i], wz[2 * i + 1]);
        let r = re.hypot(im);
        want_abs.push(r as f32);
        // The origin's phase is 0 whatever the zeros' signs (the ops' rule; GPU atan2 leaves
        // it undefined).
        want_angle.push(if r == 0.0 { 0.0 } else { im.atan2(re) as f32 });
        let g = f64::from(dy[i]);
        if r > 0.0 {
            want_dz.extend([(g * re / r) as f32, (g * im / r) as f32]);
        } else {
            want_dz.extend([0.0, 0.0]);
        }
    }
    // The branch cut: -1.5 + 0i has phase pi, -1.5 - 0i has -pi.
    assert_eq!(
        (want_angle[6], want_angle[9]),
        (std::f32::consts::PI, -std::f32::consts::PI)
    );
    let mag = SplitMix64::new(8).uniform(R * C, 0.0, 3.0);
    let phase = SplitMix64::new(9).uniform(R * C, -7.0, 7.0);
    let want_polar: Vec<f32> = mag
        .iter()
        .zip(&phase)
        .flat_map(|(&m, &p)| {
            let (m, p) = (f64::from(m), f64::from(p));
            [(m * p.cos()) as f32, (m * p.sin()) as f32]
        })
        .collect();
    let tol = (1e-6, 1e-5);
    for dev in devices() {
        for c64 in [false, true] {
            let tag = format!("{dev} c64={c64}");
            let zt = complex(dev, &z, c64);
            let (mut abs, mut angle, mut dz) =
                (Tensor::default(), Tensor::default(), Tensor::default());
            ops::complex_abs(&zt, &mut abs).unwrap();
            ops::complex_angle(&zt, &mut angle).unwrap();
            assert_eq!(
                (abs.dims(), abs.dtype()),
                (&[R, C][..], Dtype::F32),
                "{tag}"
            );
            assert_close(
                &format!("complex_abs {tag}"),
                &want_abs,
                &abs.to_vec().unwrap(),
                tol,
            );
            assert_close(
                &format!("complex_angle {tag}"),
                &want_angle,
                &angle.to_vec().unwrap(),
                tol,
            );
            let dyt = Tensor::from_slice_on(dev, &dy, R, C).unwrap();
            ops::complex_abs_backward(&zt, &dyt, &mut dz).unwrap();
            assert_eq!((dz.dims(), dz.dtype()), (zt.dims(), zt.dtype()), "{tag}");
            let got = floats(&dz);
            assert_eq!((got[0], got[1]), (0.0, 0.0), "{tag}: the origin's gradient");
            assert_close(&format!("complex_abs_backward {tag}"), &want_dz, &got, tol);
        }
        let (mt, pt) = (
            Tensor::from_slice_on(dev, &mag, R, C).unwrap(),
            Tensor::from_slice_on(dev, &phase, R, C).unwrap(),
        );
        let mut y = Tensor::default();
        ops::complex_from_polar(&mt, &pt, &mut y).unwrap();
        assert_eq!(
            (y.dims(), y.dtype()),
            (&[R, 2 * C][..], Dtype::F32),
            "{dev}"
        );
        assert_close(
            &format!("complex_from_polar {dev}"),
            &want_polar,
            &y.to_vec().unwrap(),
            tol,
        );
    }
}

#[test]
fn complex_errors_name_the_operand() {
    let odd = Tensor::from_slice(&[1.0f32; 6], 2, 3).unwrap();
    let even = Tensor::from_slice(&[1.0f32; 8], 2, 4).unwrap();
    let mut y = Tensor::default();
    let r = ops::complex_abs(&odd, &mut y);
    assert!(
        matches!(&r, Err(Error::Shape { reason, .. }) if reason.starts_with("z holds")),
        "{r:?}"
    );
    let r = ops::complex_mul(&even, &odd, &mut y);
    assert!(
        matches!(&r, Err(Error::Shape { reason, .. }) if reason.starts_with("b must")),
        "{r:?}"
    );
    let f16 = even.to_dtype(Dtype::F16).unwrap();
    let r = ops::complex_angle(&f16, &mut y);
    assert!(matches!(r, Err(Error::Dtype { operand: "z", .. })), "{r:?}");
    let c64 = Tensor::from_slice(&[Complex32::new(1.0, 2.0); 8], 2, 4).unwrap();
    let r = ops::complex_mul(&even, &c64, &mut y);
    assert!(matches!(r, Err(Error::Dtype { operand: "b", .. })), "{r:?}");
    // Accumulated gradients must come sized: an empty da is refused, not resized.
    let (mut da, mut db) = (Tensor::default(), even.clone());
    let r = ops::complex_mul_backward(&even, &even, &even, &mut da, &mut db);
    assert!(
        matches!(&r, Err(Error::Shape { reason, .. }) if reason.starts_with("da must")),
        "{r:?}"
    );
    let mut dz = Tensor::default();
    let r = ops::complex_abs_backward(&even, &even, &mut dz);
    assert!(
        matches!(&r, Err(Error::Shape { reason, .. }) if reason.starts_with("dy must")),
        "{r:?}"
    );
    let r = ops::complex_from_polar(&even, &odd, &mut y);
    assert!(
        matches!(&r, Err(Error::Shape { reason, .. }) if reason.starts_with("phase must")),
        "{r:?}"
    );
}
