//! The hand cases of the tensor-algebra contract, its error cases and long axes, on every
//! device.

use brotensor::ops::{self, ScatterDims};
use brotensor::{Complex, Dtype, Tensor};

use super::{build, check, devices, supported, values};

fn f64s(device: brotensor::Device, v: &[f64], dims: &[usize]) -> Tensor {
    Tensor::from_slice_nd_on(device, v, dims).unwrap()
}

fn f32s(device: brotensor::Device, v: &[f32], dims: &[usize]) -> Tensor {
    Tensor::from_slice_nd_on(device, v, dims).unwrap()
}

#[test]
fn pads_crop_interleave_and_survive_extreme_paddings() {
    for d in devices() {
        let x = f32s(d, &[1.0, 2.0, 3.0, 4.0], &[4]);
        let p = |lo: i64, hi: i64, int: u64| {
            ops::pad(&x, &[lo], &[hi], &[int])
                .unwrap()
                .to_vec::<f32>()
                .unwrap()
        };
        assert_eq!(p(-1, 0, 0), [2.0, 3.0, 4.0], "{d}");
        assert_eq!(p(-1, 0, 1), [0.0, 2.0, 0.0, 3.0, 0.0, 4.0], "{d}");
        assert_eq!(
            p(1, -2, 2),
            [0.0, 1.0, 0.0, 0.0, 2.0, 0.0, 0.0, 3.0, 0.0],
            "{d}"
        );
        let two = f32s(d, &[7.0, 8.0], &[2]);
        let extreme = ops::pad(&two, &[i64::MIN], &[i64::MAX], &[0]).unwrap();
        assert_eq!(extreme.to_vec::<f32>().unwrap(), [0.0], "{d}");
        assert!(
            ops::pad(&x, &[-3], &[-2], &[0]).is_err(),
            "{d}: a negative size must fail"
        );
        assert!(
            ops::pad(&x, &[0, 0], &[0], &[0]).is_err(),
            "{d}: wrong spec count"
        );
    }
}

#[test]
fn overlapping_scatter_accumulates_and_skips_out_of_range_windows() {
    let dn = ScatterDims {
        update_window_dims: vec![],
        inserted_window_dims: vec![0],
        scatter_dims_to_operand_dims: vec![0],
        index_vector_dim: 1,
    };
    for d in devices() {
        for dtype in [Dtype::F32, Dtype::F64, Dtype::I64, Dtype::C64, Dtype::C128] {
            if !supported(d, dtype) {
                eprintln!("scatter {dtype} on {d}: SKIPPED (the device has no {dtype})");
                continue;
            }
            let pairs = |v: &[f64]| v.iter().map(|&x| (x, -x)).collect::<Vec<_>>();
            let operand = build(d, dtype, &[4], &pairs(&[1.0, 10.0, 100.0, 1000.0]));
            let updates = build(d, dtype, &[4], &pairs(&[2.0, 3.0, 99.0, 5.0]));
            let idx = Tensor::from_slice_nd_on(d, &[1i64, 1, -1, 3], &[4, 1]).unwrap();
            let y = ops::scatter_add(&operand, &idx, &updates, &dn).unwrap();
            let want = pairs(&[1.0, 15.0, 100.0, 1005.0]);
            let want: Vec<_> = if dtype.is_complex() {
                want
            } else {
                want.iter().map(|p| (p.0, 0.0)).collect()
            };
            check(&format!("scatter {dtype} on {d}"), &want, &values(&y), 0.0);
        }
        // Many updates on one target: every order gives the same integer-valued sum.
        let n = 5000;
        let operand = f32s(d, &[0.0; 3], &[3]);
        let updates = f32s(d, &vec![1.0; n], &[n]);
        let idx = Tensor::from_slice_nd_on(
            d,
            &(0..n as i64).map(|i| i % 2).collect::<Vec<_>>(),
            &[n, 1],
        )
        .unwrap();
        let y = ops::scatter_add(&operand, &idx, &updates, &dn).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [2500.0, 2500.0, 0.0], "{d}");
    }
}

#[test]
fn overlapping_scatter_of_arbitrary_floats_matches_float64_within_tolerance() {
    // Non-integer updates on few targets: the sum order differs between devices (atomics,
    // conflict-free launches, the CPU's sequential order), so the result is checked against
    // the float64 sum with a tolerance relative to the output's scale.
    let dn = ScatterDims {
        update_window_dims: vec![1],
        inserted_window_dims: vec![0],
        scatter_dims_to_operand_dims: vec![0],
        index_vector_dim: 1,
    };
    let (rows, cols, n) = (7usize, 5usize, 3000usize);
    let mut rng = brotensor_tests::SplitMix64::new(0x5ca7);
    let operand = rng.uniform(rows * cols, -1.0, 1.0);
    let updates = rng.uniform(n * cols, -1.0, 1.0);
    let idx: Vec<i64> = (0..n)
        .map(|_| (rng.next_u64() % (rows as u64 + 2)) as i64 - 1)
        .collect();
    let mut want: Vec<(f64, f64)> = operand.iter().map(|&v| (v as f64, 0.0)).collect();
    for (u, &r) in idx.iter().enumerate() {
        if (0..rows as i64).contains(&r) {
            for c in 0..cols {
                want[r as usize * cols + c].0 += updates[u * cols + c] as f64;
            }
        }
    }
    for d in devices() {
        let y = ops::scatter_add(
            &f32s(d, &operand, &[rows, cols]),
            &Tensor::from_slice_nd_on(d, &idx, &[n, 1]).unwrap(),
            &f32s(d, &updates, &[n, cols]),
            &dn,
        )
        .unwrap();
        check(&format!("float scatter on {d}"), &want, &values(&y), 1e-5);
    }
}

#[test]
fn max_and_min_propagate_nan_at_short_and_long_axes() {
    for d in devices() {
        for n in [4usize, 1024, 70_000] {
            let mut v: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let x = f32s(d, &v, &[1, n]);
            assert_eq!(
                ops::reduce_max(&x, 1).unwrap().to_vec::<f32>().unwrap(),
                [(n - 1) as f32],
                "{d} {n}"
            );
            assert_eq!(
                ops::reduce_min(&x, 1).unwrap().to_vec::<f32>().unwrap(),
                [0.0],
                "{d} {n}"
            );
            v[n / 2] = f32::NAN;
            let x = f32s(d, &v, &[n, 1]);
            assert!(
                ops::reduce_max(&x, 0).unwrap().to_vec::<f32>().unwrap()[0].is_nan(),
                "{d} {n}"
            );
            assert!(
                ops::reduce_min(&x, 0).unwrap().to_vec::<f32>().unwrap()[0].is_nan(),
                "{d} {n}"
            );
        }
    }
}

#[test]
fn sums_of_long_axes_and_integer_wrap() {
    for d in devices() {
        // 2^21 + 5 elements: longer than one unit's loop bound everywhere; exact in f64.
        let n = (1 << 21) + 5;
        if supported(d, Dtype::F64) {
            let v: Vec<f64> = (0..n).map(|i| (i % 7) as f64).collect();
            let want: f64 = v.iter().sum();
            let got = ops::reduce_sum(&f64s(d, &v, &[n]), 0)
                .unwrap()
                .to_vec::<f64>()
                .unwrap();
            assert_eq!(got, [want], "{d}");
        }
        let v: Vec<f32> = (0..n).map(|i| ((i % 3) as f32) - 1.0).collect();
        let got = ops::reduce_sum(&f32s(d, &v, &[n]), 0)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(
            got,
            [v.iter().map(|&x| x as f64).sum::<f64>() as f32],
            "{d}"
        );
        if supported(d, Dtype::I64) {
            let x =
                Tensor::from_slice_nd_on(d, &[i64::MAX, 1, 3, 1 << 62, 4, -1], &[3, 2]).unwrap();
            let s = ops::reduce_sum(&x, 0).unwrap().to_vec::<i64>().unwrap();
            assert_eq!(
                s,
                [
                    i64::MAX.wrapping_add(3).wrapping_add(4),
                    1i64 + (1 << 62) - 1
                ],
                "{d}"
            );
            let p = ops::reduce_prod(&x, 1).unwrap().to_vec::<i64>().unwrap();
            assert_eq!(p, [i64::MAX, 3i64.wrapping_mul(1 << 62), -4], "{d}");
        }
    }
}

/// A reproducible value in `[-1, 1)` for element `i` of stream `seed`.
fn noise(seed: u64, i: usize) -> f64 {
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(i as u64);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// Rows of lengths around the plane path's threshold (256) and its chunk (8192), reduced
/// along their contiguous axis by every reduction in every dtype, against float64 (or exact
/// integer) sums and products computed here. On a device with plane operations (lavapipe's
/// subgroups included) the long rows take the plane kernel and the short ones the unit
/// kernel.
#[test]
fn every_reduction_along_contiguous_rows_of_every_length() {
    const ROWS: usize = 3;
    for d in devices() {
        for n in [1usize, 7, 255, 256, 257, 1000, 8192, 8193, 20_000, 70_001] {
            for dtype in [Dtype::F32, Dtype::F64, Dtype::I64, Dtype::C64, Dtype::C128] {
                if !supported(d, dtype) {
                    eprintln!("{d}: {dtype} unsupported, its row reductions skipped");
                    continue;
                }
                let tag = format!("{d} {dtype} [{ROWS}, {n}]");
                let complex = dtype.is_complex();
                let int = dtype == Dtype::I64;
                // Sums: values in [-1, 1) (integers: wide ones that wrap). Products: near 1
                // (complex: near the unit circle), so that long rows stay finite.
                let sum_in: Vec<(f64, f64)> = (0..ROWS * n)
                    .map(|i| {
                        if int {
                            ((noise(1, i) * 2f64.powi(62)).round(), 0.0)
                        } else {
                            (noise(1, i), if complex { noise(2, i) } else { 0.0 })
                        }
                    })
                    .collect();
                let prod_in: Vec<(f64, f64)> = (0..ROWS * n)
                    .map(|i| {
                        if int {
                            // Odd, so that long products do not collapse to 0 (2^64 | p).
                            (2.0 * (noise(3, i) * 500.0).round() + 1.0, 0.0)
                        } else if complex {
                            let (r, t) = (1.0 + 0.01 * noise(3, i), 0.01 * noise(4, i));
                            (r * t.cos(), r * t.sin())
                        } else {
                            (1.0 + 0.01 * noise(3, i), 0.0)
                        }
                    })
                    .collect();
                let rows = |v: &[(f64, f64)]| -> Vec<Vec<(f64, f64)>> {
                    v.chunks(n).map(<[_]>::to_vec).collect()
                };
                let (tol_sum, tol_prod) = match dtype {
                    Dtype::F32 | Dtype::C64 => (1e-4, 1e-3),
                    Dtype::I64 => (0.0, 0.0),
                    _ => (1e-12, 1e-11),
                };
                if int {
                    let exact = |v: &[(f64, f64)], prod: bool| -> Vec<i64> {
                        v.chunks(n)
                            .map(|r| {
                                r.iter().fold(i64::from(prod), |a, &(x, _)| {
                                    if prod {
                                        a.wrapping_mul(x as i64)
                                    } else {
                                        a.wrapping_add(x as i64)
                                    }
                                })
                            })
                            .collect()
                    };
                    let x = build(d, dtype, &[ROWS, n], &sum_in);
                    let got = ops::reduce_sum(&x, 1).unwrap().to_vec::<i64>().unwrap();
                    assert_eq!(got, exact(&sum_in, false), "{tag} sum");
                    let x = build(d, dtype, &[ROWS, n], &prod_in);
                    let got = ops::reduce_prod(&x, 1).unwrap().to_vec::<i64>().unwrap();
                    assert_eq!(got, exact(&prod_in, true), "{tag} prod");
                    continue;
                }
                let want_sum: Vec<(f64, f64)> = rows(&sum_in)
                    .iter()
                    .map(|r| r.iter().fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1)))
                    .collect();
                let want_prod: Vec<(f64, f64)> = rows(&prod_in)
                    .iter()
                    .map(|r| {
                        r.iter().fold((1.0, 0.0), |a, b| {
                            (a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0)
                        })
                    })
                    .collect();
                let x = build(d, dtype, &[ROWS, n], &sum_in);
                check(
                    &format!("{tag} sum"),
                    &want_sum,
                    &values(&ops::reduce_sum(&x, 1).unwrap()),
                    tol_sum,
                );
                let x = build(d, dtype, &[ROWS, n], &prod_in);
                check(
                    &format!("{tag} prod"),
                    &want_prod,
                    &values(&ops::reduce_prod(&x, 1).unwrap()),
                    tol_prod,
                );
                if complex {
                    continue;
                }
                // Max and min, exact, with a NaN nowhere, then at the rows' first, last and
                // middle element. F32 inputs are the values rounded to f32.
                let stored = |x: f64| {
                    if dtype == Dtype::F32 {
                        x as f32 as f64
                    } else {
                        x
                    }
                };
                for nan_at in [None, Some(0), Some(n - 1), Some(n / 2)] {
                    let mut v: Vec<(f64, f64)> =
                        sum_in.iter().map(|p| (stored(p.0), 0.0)).collect();
                    if let Some(k) = nan_at {
                        for row in v.chunks_mut(n) {
                            row[k].0 = f64::NAN;
                        }
                    }
                    let pick = |f: fn(f64, f64) -> f64| -> Vec<(f64, f64)> {
                        v.chunks(n)
                            .map(|r| {
                                let nan = r.iter().any(|p| p.0.is_nan());
                                let m = r.iter().map(|p| p.0).fold(r[0].0, f);
                                (if nan { f64::NAN } else { m }, 0.0)
                            })
                            .collect()
                    };
                    let x = build(d, dtype, &[ROWS, n], &v);
                    let t = format!("{tag} NaN at {nan_at:?}");
                    let got = values(&ops::reduce_max(&x, 1).unwrap());
                    check(&format!("{t} max"), &pick(f64::max), &got, 0.0);
                    let got = values(&ops::reduce_min(&x, 1).unwrap());
                    check(&format!("{t} min"), &pick(f64::min), &got, 0.0);
                }
            }
        }
    }
}

#[test]
fn complex_division_near_the_largest_values_is_finite_and_right() {
    for d in devices() {
        let q = ops::div(
            &Tensor::from_slice_nd_on(
                d,
                &[Complex::new(2.0f32, 0.0), Complex::new(1e38, 1e38)],
                &[2],
            )
            .unwrap(),
            &Tensor::from_slice_nd_on(
                d,
                &[Complex::new(1e38f32, 1e38), Complex::new(1e38, 1e38)],
                &[2],
            )
            .unwrap(),
        )
        .unwrap()
        .to_vec::<Complex<f32>>()
        .unwrap();
        // 1e-38 is subnormal in f32: a device that flushes subnormals gives 0 (reported).
        let tiny_ok = (q[0].re - 1e-38).abs() < 1e-43 && (q[0].im + 1e-38).abs() < 1e-43;
        assert!(q[0].re.is_finite() && q[0].im.is_finite(), "{d}: {q:?}");
        assert!(tiny_ok || (q[0].re == 0.0 && q[0].im == 0.0), "{d}: {q:?}");
        if !tiny_ok {
            eprintln!("{d}: f32 subnormal quotient flushed to zero");
        }
        assert_eq!((q[1].re, q[1].im), (1.0, 0.0), "{d}");
        if supported(d, Dtype::C128) {
            let q = ops::div(
                &Tensor::from_slice_nd_on(
                    d,
                    &[
                        Complex::new(2.0f64, 0.0),
                        Complex::new(2e300, 0.0),
                        Complex::new(1e300, -1e300),
                    ],
                    &[3],
                )
                .unwrap(),
                &Tensor::from_slice_nd_on(
                    d,
                    &[
                        Complex::new(1e308f64, 1e308),
                        Complex::new(1e308, 1e308),
                        Complex::new(1e-8, 1e-8),
                    ],
                    &[3],
                )
                .unwrap(),
            )
            .unwrap()
            .to_vec::<Complex<f64>>()
            .unwrap();
            // 1e-308 is subnormal in f64: a device that flushes subnormals gives 0.
            let tiny_ok = ((q[0].re - 1e-308) / 1e-308).abs() < 1e-6
                && ((q[0].im + 1e-308) / 1e-308).abs() < 1e-6;
            assert!(tiny_ok || (q[0].re == 0.0 && q[0].im == 0.0), "{d}: {q:?}");
            if !tiny_ok {
                eprintln!("{d}: f64 subnormal quotient flushed to zero");
            }
            // Normal quotients of extreme operands: exact up to rounding.
            let near = |a: f64, b: f64| ((a - b) / b).abs() < 1e-14;
            assert!(near(q[1].re, 1e-8) && near(q[1].im, -1e-8), "{d}: {q:?}");
            assert!(q[2].re.abs() < 1e290 && near(q[2].im, -1e308), "{d}: {q:?}");
        }
        // Signed zeros: -(+0) is -0, conj(a + 0i) is a - 0i.
        let z = Tensor::from_slice_nd_on(d, &[Complex::new(0.0f32, 0.0)], &[1]).unwrap();
        let n = ops::neg(&z).unwrap().to_vec::<Complex<f32>>().unwrap()[0];
        assert!(n.re.is_sign_negative() && n.im.is_sign_negative(), "{d}");
        let c = ops::conj(&z).unwrap().to_vec::<Complex<f32>>().unwrap()[0];
        assert!(c.re.is_sign_positive() && c.im.is_sign_negative(), "{d}");
    }
}

#[test]
fn float_indices_must_be_finite_integers() {
    for d in devices() {
        let x = f32s(d, &(0..20).map(|i| i as f32).collect::<Vec<_>>(), &[20]);
        for bad in [1.5f32, f32::NAN, f32::INFINITY] {
            let s = f32s(d, &[bad], &[1]);
            assert!(
                ops::dynamic_slice(&x, &s, &[2]).is_err(),
                "{d}: index {bad} accepted"
            );
        }
        // 2^24 is an integer in f32: accepted, then clamped to the last window.
        let s = f32s(d, &[16_777_216.0], &[1]);
        assert_eq!(
            ops::dynamic_slice(&x, &s, &[2])
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            [18.0, 19.0],
            "{d}"
        );
        let s = f32s(d, &[-5.0], &[1]);
        assert_eq!(
            ops::dynamic_slice(&x, &s, &[2])
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            [0.0, 1.0],
            "{d}"
        );
    }
}

#[test]
fn conversions_refuse_values_an_integer_cannot_hold() {
    for d in devices() {
        for bad in [f32::NAN, f32::INFINITY, 3e19, -1e19] {
            let x = f32s(d, &[1.0, bad], &[2]);
            assert!(
                ops::convert(&x, Dtype::I64).is_err() || !supported(d, Dtype::I64),
                "{d}: {bad} to I64"
            );
        }
        assert!(
            ops::convert(&f32s(d, &[3e9], &[1]), Dtype::I32).is_err(),
            "{d}: 3e9 to I32"
        );
        let ok = ops::convert(&f32s(d, &[-2.7, 2.7], &[2]), Dtype::I32).unwrap();
        assert_eq!(
            ok.to_vec::<i32>().unwrap(),
            [-2, 2],
            "{d}: truncation toward zero"
        );
    }
}

#[test]
fn empty_shapes_pass_through_every_op() {
    for d in devices() {
        for dims in [vec![0usize, 2], vec![0, 0], vec![0]] {
            let x = f32s(d, &[], &dims);
            let same = |t: Tensor| assert_eq!(t.dims(), &dims[..], "{d}");
            same(ops::exp(&x).unwrap());
            same(ops::maximum(&x, &x).unwrap());
            same(ops::select(&x, &x, &x).unwrap());
            let mut reversed = dims.clone();
            reversed.reverse();
            let perm: Vec<usize> = (0..dims.len()).rev().collect();
            assert_eq!(
                ops::transpose(&x, &perm).unwrap().dims(),
                &reversed[..],
                "{d}"
            );
            same(ops::reverse(&x, &[0]).unwrap());
            same(ops::convert(&x, Dtype::C64).unwrap());
            let mut joined = dims.clone();
            *joined.last_mut().unwrap() *= 2;
            let cat = ops::concatenate(&[&x, &x], dims.len() - 1).unwrap();
            assert_eq!(cat.dims(), &joined[..], "{d}");
            let r = ops::reduce_sum(&x, 0).unwrap();
            assert_eq!(r.dims()[0], 1, "{d}");
            assert!(r.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0), "{d}");
            let m = ops::reduce_max(&x, 0).unwrap().to_vec::<f32>().unwrap();
            assert!(m.iter().all(|&v| v == f32::NEG_INFINITY), "{d}");
            if dims.len() == 2 {
                same(ops::tril(&x, 0).unwrap());
            }
        }
    }
}

#[test]
fn every_error_case_is_a_clear_error() {
    for d in devices() {
        let x = f32s(d, &[1.0; 6], &[2, 3]);
        let msg = |r: brotensor::Result<Tensor>| r.expect_err("must fail").to_string();
        for m in [
            msg(ops::transpose(&x, &[0, 0])),
            msg(ops::transpose(&x, &[0])),
            msg(ops::broadcast_in_dim(&x, &[2, 4], &[0, 1])),
            msg(ops::broadcast_in_dim(&x, &[2, 3], &[1, 1])),
            msg(ops::broadcast_in_dim(&x, &[2, 3, 4], &[0])),
            msg(ops::extract_diagonal(&x, 1, 1)),
            msg(ops::extract_diagonal(&x, 0, 2)),
            msg(ops::reduce_sum(&x, 2)),
            msg(ops::tril(&f32s(d, &[1.0; 3], &[3]), 0)),
            msg(ops::concatenate(&[&x, &f32s(d, &[1.0; 4], &[2, 2])], 0)),
            msg(ops::slice(&x, &[0, 0], &[3, 3], &[1, 1])),
            msg(ops::slice(&x, &[0, 0], &[2, 3], &[1, 0])),
            msg(ops::maximum(&x, &f32s(d, &[1.0; 3], &[3]))),
            msg(ops::reduce_max(
                &Tensor::from_slice_nd_on(d, &[Complex::new(1.0f32, 0.0)], &[1]).unwrap(),
                0,
            )),
            msg(ops::conj(&x)),
            msg(ops::embed_diagonal(&x, 1, 1)),
        ] {
            assert!(m.starts_with("brotensor: "), "{d}: {m}");
        }
    }
}

#[test]
fn f64_math_over_wide_ranges_matches_the_standard_library() {
    // On wgpu these run from arithmetic (Vulkan has no 64-bit math library); on the CPU and
    // CUDA from the math library. Rust's libm results are the reference.
    let mut rng = brotensor_tests::SplitMix64::new(0xf64);
    let mut pick = |lo: f64, hi: f64, n: usize| -> Vec<f64> {
        (0..n)
            .map(|_| lo + (hi - lo) * (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
            .collect()
    };
    // Normal results and inputs only: a device may flush f64 subnormals (Mesa's lavapipe
    // through SPIR-V does).
    let exp_in = pick(-700.0, 709.0, 500);
    let log_in: Vec<f64> = pick(-1020.0, 1020.0, 500)
        .into_iter()
        .map(f64::exp2)
        .collect();
    let trig_in = pick(-1e5, 1e5, 500);
    // Beyond 2^19 the GPU reduction switches to Payne-Hanek: magnitudes up to the largest
    // f64, both signs, the switch point, 1e22, and the hardest case known.
    let mut trig_wide: Vec<f64> = pick(0.0, 1023.0, 500)
        .into_iter()
        .zip(pick(-1.0, 1.0, 500))
        .map(|(e, s)| e.exp2().copysign(s))
        .collect();
    trig_wide.extend([
        524_288.0,
        524_287.999_999_999_9,
        -524_288.0,
        1e22,
        -1e22,
        f64::MAX,
        f64::MIN,
        // 6381956970095103 * 2^797, the double closest to a multiple of pi/2 (its reduced
        // argument is about 2^-61).
        5.319_372_648_326_541e255,
    ]);
    let small = pick(-0.6, 0.6, 200);
    for d in devices() {
        if !supported(d, Dtype::F64) {
            eprintln!("f64 math on {d}: SKIPPED (the device has no F64)");
            continue;
        }
        type Op = fn(&Tensor) -> brotensor::Result<Tensor>;
        type Case<'a> = (&'a str, Op, &'a [f64], fn(f64) -> f64, f64);
        let cases: [Case; 9] = [
            ("exp", ops::exp, &exp_in, f64::exp, 1e-14),
            ("log", ops::log, &log_in, f64::ln, 1e-14),
            ("expm1", ops::expm1, &small, f64::exp_m1, 1e-14),
            ("log1p", ops::log1p, &small, f64::ln_1p, 1e-14),
            ("tanh", ops::tanh, &small, f64::tanh, 1e-14),
            ("sin", ops::sin, &trig_in, f64::sin, 1e-14),
            ("cos", ops::cos, &trig_in, f64::cos, 1e-14),
            ("sin", ops::sin, &trig_wide, f64::sin, 1e-14),
            ("cos", ops::cos, &trig_wide, f64::cos, 1e-14),
        ];
        for (name, op, input, reference, tol) in cases {
            let got = op(&f64s(d, input, &[input.len()]))
                .unwrap()
                .to_vec::<f64>()
                .unwrap();
            for (i, (&x, &g)) in input.iter().zip(&got).enumerate() {
                let want = reference(x);
                // Relative to the value (to 1 for sin/cos, whose absolute error is what a
                // range reduction keeps).
                let scale = if name == "sin" || name == "cos" {
                    1.0
                } else {
                    want.abs()
                };
                assert!(
                    (g - want).abs() <= tol * scale,
                    "{name} on {d}: element {i}: x {x:e}: want {want:e}, got {g:e}"
                );
            }
        }
    }
}
