//! Softmax and normalizations: the CPU reference against every GPU device and dtype, plus
//! the two-pass-variance stability check on every device.

use brotensor::{ops, Device, Dtype, Tensor};
use brotensor_tests::{gpu_devices, parity_with, read_f32, Check, Input};

const ROW: Check = Check {
    dtypes: &[Dtype::F32, Dtype::F16, Dtype::BF16],
    same_dtype: true,
    tol: None,
};

#[test]
fn softmax_rows_flat_masked_and_backward() {
    for (i, (r, c)) in [(33, 300), (4, 1), (2, 2000)].into_iter().enumerate() {
        parity_with(
            &format!("softmax_rows_forward {r}x{c}"),
            0x600 + i as u64,
            &[Input::new(r, c, -8.0, 8.0)],
            ROW,
            |t| {
                let mut y = Tensor::default();
                ops::softmax_rows_forward(&t[0], &mut y)?;
                Ok(y)
            },
        );
    }
    parity_with(
        "softmax_rows_ in place",
        0x608,
        &[Input::new(8, 65, -4.0, 4.0)],
        ROW,
        |t| {
            let mut y = t[0].clone();
            y.softmax_rows_()?;
            Ok(y)
        },
    );
    parity_with(
        "softmax_forward masked",
        0x610,
        &[Input::new(7, 9, -5.0, 5.0), Input::new(7, 9, 0.0, 1.0)],
        ROW,
        |t| {
            let mask = t[1].to_dtype(Dtype::F32)?;
            let mut p = Tensor::default();
            ops::softmax_forward(&t[0], Some(&mask), &mut p)?;
            Ok(p)
        },
    );
    parity_with(
        "softmax_backward",
        0x611,
        &[Input::new(5, 40, 0.0, 0.05), Input::new(5, 40, -1.0, 1.0)],
        ROW,
        |t| {
            let mut dl = Tensor::default();
            ops::softmax_backward(&t[0], &t[1], &mut dl)?;
            Ok(dl)
        },
    );
}

#[test]
fn softmax_of_long_rows_split_across_cubes() {
    // Few rows of 16384 or more split across GPU cubes; ragged last parts, in place, a mask
    // that hides one whole part, and the gradient.
    let long = Check { tol: None, ..ROW };
    parity_with(
        "softmax_rows_forward 3x20000",
        0x640,
        &[Input::new(3, 20000, -8.0, 8.0)],
        long,
        |t| {
            let mut y = Tensor::default();
            ops::softmax_rows_forward(&t[0], &mut y)?;
            Ok(y)
        },
    );
    parity_with(
        "softmax_rows_ in place 2x17000",
        0x641,
        &[Input::new(2, 17000, -4.0, 4.0)],
        long,
        |t| {
            let mut y = t[0].clone();
            y.softmax_rows_()?;
            Ok(y)
        },
    );
    parity_with(
        "softmax_forward masked 7x10000",
        0x642,
        &[Input::new(7, 10000, -6.0, 6.0)],
        long,
        |t| {
            // Every third entry and all of 4000..9000 (the whole second part) masked out.
            let keep: Vec<f32> = (0..70000)
                .map(|i| f32::from(i % 3 != 0 && !(4000..9000).contains(&i)))
                .collect();
            let mask = Tensor::from_slice_on(t[0].device(), &keep, 7, 10000)?;
            let mut p = Tensor::default();
            ops::softmax_forward(&t[0], Some(&mask), &mut p)?;
            Ok(p)
        },
    );
    parity_with(
        "softmax_backward 5x10000",
        0x643,
        &[
            Input::new(5, 10000, 0.0, 4e-5),
            Input::new(5, 10000, -1.0, 1.0),
        ],
        long,
        |t| {
            let mut dl = Tensor::default();
            ops::softmax_backward(&t[0], &t[1], &mut dl)?;
            Ok(dl)
        },
    );
}

#[test]
fn layernorm_and_rms_norm() {
    let (r, d) = (37, 300);
    let fwd = [
        Input::new(r, d, -3.0, 3.0),
        Input::new(d, 1, 0.5, 1.5),
        Input::new(d, 1, -0.5, 0.5),
    ];
    parity_with(
        "layernorm_forward_inference_batched",
        0x620,
        &fwd,
        ROW,
        |t| {
            let mut y = Tensor::default();
            ops::layernorm_forward_inference_batched(&t[0], &t[1], &t[2], 1e-5, &mut y)?;
            Ok(y)
        },
    );
    for (which, seed) in [("y", 0x621), ("xhat", 0x622)] {
        parity_with(
            &format!("layernorm_forward_batched_with_caches {which}"),
            seed,
            &fwd,
            ROW,
            |t| {
                let (mut y, mut xh, mut m, mut rs) = Default::default();
                ops::layernorm_forward_batched_with_caches(
                    &t[0], &t[1], &t[2], 1e-5, &mut y, &mut xh, &mut m, &mut rs,
                )?;
                assert_eq!(
                    (m.dtype(), rs.dtype(), m.shape()),
                    (Dtype::F32, Dtype::F32, (t[0].rows(), 1))
                );
                Ok(if which == "y" { y } else { xh })
            },
        );
    }
    let bwd = [
        Input::new(r, d, -3.0, 3.0),
        Input::new(d, 1, 0.5, 1.5),
        Input::new(d, 1, -0.5, 0.5),
        Input::new(r, d, -1.0, 1.0),
        Input::new(d, 1, -1.0, 1.0),
        Input::new(d, 1, -1.0, 1.0),
    ];
    for (which, seed) in [("dx", 0x623), ("dgamma", 0x624), ("dbeta", 0x625)] {
        parity_with(
            &format!("layernorm_backward_batched_with_caches {which}"),
            seed,
            &bwd,
            ROW_SUMS,
            |t| {
                let (mut y, mut xh, mut m, mut rs) = Default::default();
                ops::layernorm_forward_batched_with_caches(
                    &t[0], &t[1], &t[2], 1e-5, &mut y, &mut xh, &mut m, &mut rs,
                )?;
                let (mut dx, mut dg, mut db) = (Tensor::default(), t[4].clone(), t[5].clone());
                ops::layernorm_backward_batched_with_caches(
                    &t[3], &xh, &t[1], &rs, &mut dx, &mut dg, &mut db,
                )?;
                Ok(match which {
                    "dx" => dx,
                    "dgamma" => dg,
                    _ => db,
                })
            },
        );
    }
    parity_with("rms_norm_forward", 0x630, &fwd[..2], ROW, |t| {
        let mut y = Tensor::default();
        ops::rms_norm_forward(&t[0], &t[1], 1e-6, &mut y)?;
        Ok(y)
    });
    let rms_bwd = [bwd[0], bwd[1], bwd[3], bwd[4]];
    for (which, seed) in [("dx", 0x631), ("dgamma", 0x632)] {
        parity_with(
            &format!("rms_norm_backward {which}"),
            seed,
            &rms_bwd,
            ROW_SUMS,
            |t| {
                let (mut dx, mut dg) = (Tensor::default(), t[3].clone());
                ops::rms_norm_backward(&t[0], &t[1], &t[2], 1e-6, &mut dx, &mut dg)?;
                Ok(if which == "dx" { dx } else { dg })
            },
        );
    }
}

const ROW_SUMS: Check = Check {
    dtypes: &[Dtype::F32, Dtype::F16, Dtype::BF16],
    same_dtype: true,
    tol: None,
};

#[test]
fn single_vector_layernorm_returns_its_statistics() {
    for dev in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let x = Tensor::from_slice_on(dev, &[1.0f32, 2.0, 3.0, 4.0], 2, 2).unwrap();
        let ones = Tensor::from_slice_on(dev, &[1.0f32; 4], 4, 1).unwrap();
        let zeros = Tensor::zeros_on(dev, 4, 1, Dtype::F32).unwrap();
        let (mut y, mut xh) = (Tensor::default(), Tensor::default());
        let (mean, rstd) = ops::layernorm_forward(&x, &ones, &zeros, 0.0, &mut y, &mut xh).unwrap();
        assert_eq!(mean, 2.5);
        assert!((rstd - 1.0 / 1.25f32.sqrt()).abs() < 1e-6, "{dev}: {rstd}");
        assert_eq!(y.shape(), (2, 2));
        let (mut dx, mut dg, mut db) = (Tensor::default(), zeros.clone(), zeros.clone());
        let dy = Tensor::from_slice_on(dev, &[1.0f32; 4], 2, 2).unwrap();
        ops::layernorm_backward(&dy, &xh, &ones, rstd, &mut dx, &mut dg, &mut db).unwrap();
        // A constant upstream gradient has no effect through the mean subtraction.
        assert!(
            read_f32(&dx).unwrap().iter().all(|v| v.abs() < 1e-5),
            "{dev}"
        );
        assert_eq!(read_f32(&db).unwrap(), vec![1.0; 4]);
    }
}

/// The C++ stability test: rows `offset + (j+1) step` far from zero must normalize as the
/// float64 two-pass reference does, on every device.
#[test]
fn layernorm_is_stable_far_from_zero_on_every_device() {
    let offsets = [0.0f64, 1.0, 100.0, 395.25, 1000.0, 65504.0];
    let steps = [1.0f64, 0.1, 0.001];
    let mut data = Vec::new();
    let mut rows = Vec::new();
    for &o in &offsets {
        for &s in &steps {
            // Skip rows whose step is below 4 ulps of the offset (not representable).
            let ulp = (o as f32).abs() * f32::EPSILON;
            if (s as f32) < 4.0 * ulp {
                continue;
            }
            rows.push((o, s));
            data.extend((0..8).map(|j| (o + (j + 1) as f64 * s) as f32));
        }
    }
    let n = rows.len();
    for dev in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let x = Tensor::from_slice_on(dev, &data, n, 8).unwrap();
        let g = Tensor::from_slice_on(dev, &[1.0f32; 8], 8, 1).unwrap();
        let b = Tensor::zeros_on(dev, 8, 1, Dtype::F32).unwrap();
        let mut y = Tensor::default();
        ops::layernorm_forward_inference_batched(&x, &g, &b, 1e-5, &mut y).unwrap();
        let got = y.to_vec::<f32>().unwrap();
        for (r, &(o, s)) in rows.iter().enumerate() {
            let row: Vec<f64> = data[r * 8..r * 8 + 8].iter().map(|&v| v as f64).collect();
            let mean = row.iter().sum::<f64>() / 8.0;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 8.0;
            for j in 0..8 {
                let want = (row[j] - mean) / (var + 1e-5).sqrt();
                let g = got[r * 8 + j] as f64;
                assert!(g.is_finite(), "{dev} offset {o} step {s}: not finite");
                assert!(
                    (g - want).abs() <= 0.05,
                    "{dev} offset {o} step {s} j {j}: {g} vs {want}"
                );
            }
        }
    }
}

#[test]
fn pixel_and_l2_norms() {
    let x = Input::new(19, 96, -2.0, 2.0);
    let dy = Input::new(19, 96, -1.0, 1.0);
    parity_with("pixel_norm_forward", 0x640, &[x], ROW, |t| {
        let mut y = Tensor::default();
        ops::pixel_norm_forward(&t[0], 1e-8, &mut y)?;
        Ok(y)
    });
    parity_with("pixel_norm_backward", 0x641, &[x, dy], ROW, |t| {
        let mut dx = Tensor::default();
        ops::pixel_norm_backward(&t[0], &t[1], 1e-8, &mut dx)?;
        Ok(dx)
    });
    parity_with("l2_norm_forward", 0x642, &[x], ROW, |t| {
        let mut y = Tensor::default();
        ops::l2_norm_forward(&t[0], 32, 3, 1e-6, &mut y)?;
        assert_eq!(y.shape(), (19, 96));
        Ok(y)
    });
    parity_with("l2_norm_backward", 0x643, &[x, dy], ROW, |t| {
        let mut dx = Tensor::default();
        ops::l2_norm_backward(&t[0], &t[1], 32, 3, 1e-6, &mut dx)?;
        Ok(dx)
    });
    let x = Tensor::zeros_on(Device::Cpu, 2, 10, Dtype::F32).unwrap();
    let e = ops::l2_norm_forward(&x, 4, 3, 1e-6, &mut Tensor::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "brotensor: l2_norm_forward: X.cols = 10 != num_heads * head_dim = 3 * 4"
    );
}

#[test]
fn mse_losses() {
    let f32_only = Check {
        dtypes: &[Dtype::F32],
        same_dtype: true,
        tol: None,
    };
    let pair = [Input::new(50, 20, -2.0, 2.0), Input::new(50, 20, -2.0, 2.0)];
    parity_with("mse_vec_forward", 0x650, &pair, f32_only, |t| {
        let v = ops::mse_vec_forward(&t[0], &t[1])?;
        Tensor::from_slice_on(t[0].device(), &[v], 1, 1)
    });
    // Many parts on every device (4096 elements per GPU cube, 65536 per CPU task), the
    // target shaped as a column: only the element counts must match.
    let long = [
        Input::new(300, 500, -2.0, 2.0),
        Input::new(150_000, 1, -2.0, 2.0),
    ];
    parity_with("mse_vec_forward 300x500", 0x654, &long, f32_only, |t| {
        let v = ops::mse_vec_forward(&t[0], &t[1])?;
        Tensor::from_slice_on(t[0].device(), &[v], 1, 1)
    });
    parity_with("mse_vec_backward", 0x651, &pair, f32_only, |t| {
        let mut d = Tensor::default();
        ops::mse_vec_backward(&t[0], &t[1], &mut d)?;
        Ok(d)
    });
    let samples = [Input::new(64, 1, -2.0, 2.0), Input::new(64, 1, -2.0, 2.0)];
    for (which, seed) in [("dpred", 0x652), ("loss", 0x653)] {
        parity_with(
            &format!("mse_vec_per_sample {which}"),
            seed,
            &samples,
            f32_only,
            |t| {
                let (mut d, mut l) = (Tensor::default(), Tensor::default());
                ops::mse_vec_per_sample(&t[0], &t[1], &mut d, &mut l)?;
                Ok(if which == "dpred" { d } else { l })
            },
        );
    }
    assert_eq!(ops::mse_scalar(3.0, 1.0).unwrap(), (2.0, 2.0));
    for d in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let p = Tensor::from_slice_on(d, &[1.0f32, 2.0, 3.0, 4.0], 4, 1).unwrap();
        let t = Tensor::from_slice_on(d, &[1.0f32, 0.0, 3.0, 0.0], 4, 1).unwrap();
        assert_eq!(ops::mse_vec_forward(&p, &t).unwrap(), 5.0, "{d}");
        let h = p.to_dtype(Dtype::F16).unwrap();
        assert!(matches!(
            ops::mse_vec_forward(&h, &t),
            Err(brotensor::Error::Dtype { .. })
        ));
    }
}

#[test]
fn fused_cross_entropy_losses() {
    let f32_only = Check {
        dtypes: &[Dtype::F32],
        same_dtype: true,
        tol: None,
    };
    // Targets are probability-like: non-negative, some zero (those add no loss).
    let ins = [
        Input::new(6, 50, -4.0, 4.0),
        Input::new(6, 50, -0.5, 1.0),
        Input::new(6, 50, 0.0, 1.0),
    ];
    let clip = |t: &Tensor| -> brotensor::Result<Tensor> {
        let mut c = t.clone();
        ops::clamp(&mut c, 0.0, 1.0)?;
        Ok(c)
    };
    for (which, seed) in [("loss", 0x660), ("probs", 0x661), ("dlogits", 0x662)] {
        parity_with(
            &format!("softmax_xent {which}"),
            seed,
            &ins,
            f32_only,
            |t| {
                let (mut p, mut d) = (Tensor::default(), Tensor::default());
                let loss = ops::softmax_xent(&t[0], &clip(&t[1])?, Some(&t[2]), &mut p, &mut d)?;
                Ok(match which {
                    "loss" => Tensor::from_slice_on(t[0].device(), &[loss], 1, 1)?,
                    "probs" => p,
                    _ => d,
                })
            },
        );
    }
    let offsets = [0usize, 10, 10, 35, 50];
    for (which, seed) in [("loss", 0x663), ("probs", 0x664), ("dlogits", 0x665)] {
        parity_with(
            &format!("softmax_xent_fused_batched {which}"),
            seed,
            &ins,
            f32_only,
            |t| {
                let (mut p, mut d, mut l) = Default::default();
                ops::softmax_xent_fused_batched(
                    &t[0],
                    &clip(&t[1])?,
                    Some(&t[2]),
                    &offsets,
                    &mut p,
                    &mut d,
                    &mut l,
                )?;
                Ok(match which {
                    "loss" => l,
                    "probs" => p,
                    _ => d,
                })
            },
        );
    }
    for (which, seed) in [("loss", 0x666), ("probs", 0x667), ("dlogits", 0x668)] {
        parity_with(
            &format!("bce_with_logits_fused_batched {which}"),
            seed,
            &ins,
            f32_only,
            |t| {
                let (mut p, mut d, mut l) = Default::default();
                ops::bce_with_logits_fused_batched(
                    &t[0],
                    &clip(&t[1])?,
                    Some(&t[2]),
                    1.5,
                    &mut p,
                    &mut d,
                    &mut l,
                )?;
                Ok(match which {
                    "loss" => l,
                    "probs" => p,
                    _ => d,
                })
            },
        );
    }
    // The host segment form and the tensor form agree; a fully masked vector costs nothing.
    let logits = [0.5f32, -1.0, 2.0];
    let target = [0.0f32, 1.0, 0.0];
    let (mut p, mut d) = ([0.0f32; 3], [0.0f32; 3]);
    let host = ops::softmax_xent_segment(&logits, &target, &mut p, &mut d, None).unwrap();
    for dev in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let (lt, tt) = (
            Tensor::from_slice_on(dev, &logits, 3, 1).unwrap(),
            Tensor::from_slice_on(dev, &target, 3, 1).unwrap(),
        );
        let (mut pp, mut dd) = (Tensor::default(), Tensor::default());
        let loss = ops::softmax_xent_fused(&lt, &tt, None, &mut pp, &mut dd).unwrap();
        assert!((loss - host).abs() < 1e-5, "{dev}: {loss} vs {host}");
        let none = Tensor::zeros_on(dev, 3, 1, Dtype::F32).unwrap();
        let loss = ops::softmax_xent(&lt, &tt, Some(&none), &mut pp, &mut dd).unwrap();
        assert_eq!(loss, 0.0);
        assert_eq!(pp.to_vec::<f32>().unwrap(), vec![0.0; 3], "{dev}");
    }
}

/// Float64 GroupNorm of one `(N, C*HW)` tensor: `(y, xhat)`.
fn group_norm_f64(
    x: &[f32],
    g: &[f32],
    b: &[f32],
    (n, c, hw): (usize, usize, usize),
    groups: usize,
    eps: f64,
) -> Vec<f64> {
    let m = c / groups * hw;
    let mut y = vec![0.0; x.len()];
    for s in 0..n * groups {
        let tile: Vec<f64> = x[s * m..(s + 1) * m].iter().map(|&v| v as f64).collect();
        let mean = tile.iter().sum::<f64>() / m as f64;
        let var = tile.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / m as f64;
        for j in 0..m {
            let ch = (s % groups) * (c / groups) + j / hw;
            y[s * m + j] = (tile[j] - mean) / (var + eps).sqrt() * g[ch] as f64 + b[ch] as f64;
        }
    }
    y
}

/// Float64 GroupNorm gradients: `(dx, dgamma, dbeta)` from the definition, per group:
/// `dx = rstd/m (m d - sum d - xhat sum(d xhat))`, `d = dy gamma[c]`.
fn group_norm_backward_f64(
    x: &[f32],
    g: &[f32],
    dy: &[f32],
    (n, c, hw): (usize, usize, usize),
    groups: usize,
    eps: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let m = c / groups * hw;
    let (mut dx, mut dg, mut db) = (vec![0.0; x.len()], vec![0.0; c], vec![0.0; c]);
    for s in 0..n * groups {
        let at = s * m;
        let mean = (0..m).map(|j| x[at + j] as f64).sum::<f64>() / m as f64;
        let var = (0..m)
            .map(|j| (x[at + j] as f64 - mean).powi(2))
            .sum::<f64>()
            / m as f64;
        let r = 1.0 / (var + eps).sqrt();
        let ch = |j: usize| (s % groups) * (c / groups) + j / hw;
        let xh = |j: usize| (x[at + j] as f64 - mean) * r;
        let d = |j: usize| dy[at + j] as f64 * g[ch(j)] as f64;
        let s1: f64 = (0..m).map(d).sum();
        let s2: f64 = (0..m).map(|j| d(j) * xh(j)).sum();
        for j in 0..m {
            dx[at + j] = r / m as f64 * (m as f64 * d(j) - s1 - xh(j) * s2);
            dg[ch(j)] += dy[at + j] as f64 * xh(j);
            db[ch(j)] += dy[at + j] as f64;
        }
    }
    (dx, dg, db)
}

/// Float64 BatchNorm training step and gradients from the definition: `(y, dx, dgamma,
/// dbeta)` with per-channel statistics over the `N*HW` values.
fn batch_norm_f64(
    x: &[f32],
    g: &[f32],
    b: &[f32],
    dy: &[f32],
    (n, c, hw): (usize, usize, usize),
    eps: f64,
) -> [Vec<f64>; 4] {
    let m = (n * hw) as f64;
    let (mut y, mut dx, mut dg, mut db) = (
        vec![0.0; x.len()],
        vec![0.0; x.len()],
        vec![0.0; c],
        vec![0.0; c],
    );
    for ch in 0..c {
        let idx: Vec<usize> = (0..n)
            .flat_map(|s| (0..hw).map(move |p| s * c * hw + ch * hw + p))
            .collect();
        let mean = idx.iter().map(|&i| x[i] as f64).sum::<f64>() / m;
        let var = idx
            .iter()
            .map(|&i| (x[i] as f64 - mean).powi(2))
            .sum::<f64>()
            / m;
        let r = 1.0 / (var + eps).sqrt();
        let xh = |i: usize| (x[i] as f64 - mean) * r;
        let s_dy: f64 = idx.iter().map(|&i| dy[i] as f64).sum();
        let s_dyx: f64 = idx.iter().map(|&i| dy[i] as f64 * xh(i)).sum();
        for &i in &idx {
            y[i] = xh(i) * g[ch] as f64 + b[ch] as f64;
            dx[i] = r * g[ch] as f64 * (dy[i] as f64 - (s_dy + xh(i) * s_dyx) / m);
        }
        dg[ch] = s_dyx;
        db[ch] = s_dy;
    }
    [y, dx, dg, db]
}

#[test]
fn group_and_batch_norms() {
    let dims = (3usize, 6usize, 4usize, 5usize);
    let (n, c, h, w) = dims;
    let hw = h * w;
    let x = Input::new(n, c * hw, -2.0, 3.0);
    let (g, b) = (Input::new(c, 1, 0.5, 1.5), Input::new(c, 1, -0.5, 0.5));
    let dy = Input::new(n, c * hw, -1.0, 1.0);
    let pg = Input::new(c, 1, -1.0, 1.0);
    parity_with("group_norm_forward", 0x670, &[x, g, b], ROW, |t| {
        let mut y = Tensor::default();
        ops::group_norm_forward(&t[0], &t[1], &t[2], dims, 3, 1e-5, &mut y)?;
        Ok(y)
    });
    for (which, seed) in [("dx", 0x671), ("dgamma", 0x672), ("dbeta", 0x673)] {
        parity_with(
            &format!("group_norm_backward {which}"),
            seed,
            &[x, g, dy, pg, pg],
            ROW_SUMS,
            |t| {
                let (mut dx, mut dg, mut db) = (Tensor::default(), t[3].clone(), t[4].clone());
                ops::group_norm_backward(
                    &t[0], &t[1], &t[2], dims, 2, 1e-5, &mut dx, &mut dg, &mut db,
                )?;
                Ok(match which {
                    "dx" => dx,
                    "dgamma" => dg,
                    _ => db,
                })
            },
        );
    }
    let f32_only = Check {
        dtypes: &[Dtype::F32],
        same_dtype: true,
        tol: None,
    };
    let stats = [
        x,
        g,
        b,
        Input::new(c, 1, -0.2, 0.2),
        Input::new(c, 1, 0.5, 1.5),
    ];
    for (which, seed) in [("y", 0x674), ("saved_rstd", 0x675), ("running_var", 0x676)] {
        parity_with(
            &format!("batch_norm_forward {which}"),
            seed,
            &stats,
            f32_only,
            |t| {
                let (mut rm, mut rv) = (t[3].clone(), t[4].clone());
                let (mut y, mut sm, mut sr) = Default::default();
                ops::batch_norm_forward(
                    &t[0], &t[1], &t[2], dims, 1e-5, 0.1, &mut rm, &mut rv, &mut y, &mut sm,
                    &mut sr,
                )?;
                Ok(match which {
                    "y" => y,
                    "saved_rstd" => sr,
                    _ => rv,
                })
            },
        );
    }
    parity_with("batch_norm_inference", 0x677, &stats, ROW, |t| {
        let mut y = Tensor::default();
        ops::batch_norm_inference(&t[0], &t[1], &t[2], &t[3], &t[4], dims, 1e-5, &mut y)?;
        Ok(y)
    });
    for (which, seed) in [("dx", 0x678), ("dgamma", 0x679)] {
        parity_with(
            &format!("batch_norm_backward {which}"),
            seed,
            &[x, g, dy, pg, pg],
            f32_only,
            |t| {
                let (mut rm, mut rv) = (
                    Tensor::zeros_on(t[0].device(), c, 1, Dtype::F32)?,
                    Tensor::zeros_on(t[0].device(), c, 1, Dtype::F32)?,
                );
                let (mut y, mut sm, mut sr) = Default::default();
                ops::batch_norm_forward(
                    &t[0], &t[1], &t[1], dims, 1e-5, 0.1, &mut rm, &mut rv, &mut y, &mut sm,
                    &mut sr,
                )?;
                let (mut dx, mut dg, mut db) = (Tensor::default(), t[3].clone(), t[4].clone());
                ops::batch_norm_backward(
                    &t[0], &t[1], &sm, &sr, &t[2], dims, &mut dx, &mut dg, &mut db,
                )?;
                Ok(if which == "dx" { dx } else { dg })
            },
        );
    }

    // Against float64 on every device: GroupNorm values, and BatchNorm's running update.
    let xs: Vec<f32> = (0..n * c * hw)
        .map(|i| ((i * 37) % 101) as f32 * 0.05 - 2.0)
        .collect();
    let gs: Vec<f32> = (0..c).map(|i| 0.5 + i as f32 * 0.1).collect();
    let bs: Vec<f32> = (0..c).map(|i| i as f32 * 0.05).collect();
    let want = group_norm_f64(&xs, &gs, &bs, (n, c, hw), 3, 1e-5);
    for dev in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        let xt = Tensor::from_slice_on(dev, &xs, n, c * hw).unwrap();
        let gt = Tensor::from_slice_on(dev, &gs, c, 1).unwrap();
        let bt = Tensor::from_slice_on(dev, &bs, c, 1).unwrap();
        let mut y = Tensor::default();
        ops::group_norm_forward(&xt, &gt, &bt, dims, 3, 1e-5, &mut y).unwrap();
        for (i, (g, w)) in y.to_vec::<f32>().unwrap().iter().zip(&want).enumerate() {
            assert!((*g as f64 - w).abs() < 1e-4, "{dev} #{i}: {g} vs {w}");
        }
        // The gradients against float64; dgamma and dbeta start at 1 (they accumulate).
        let dys: Vec<f32> = (0..xs.len())
            .map(|i| ((i * 11) % 17) as f32 * 0.1 - 0.8)
            .collect();
        let (wdx, wdg, wdb) = group_norm_backward_f64(&xs, &gs, &dys, (n, c, hw), 3, 1e-5);
        let dyt = Tensor::from_slice_on(dev, &dys, n, c * hw).unwrap();
        let (mut dx, mut dg, mut db) = (
            Tensor::default(),
            Tensor::from_slice_on(dev, &vec![1.0f32; c], c, 1).unwrap(),
            Tensor::from_slice_on(dev, &vec![1.0f32; c], c, 1).unwrap(),
        );
        ops::group_norm_backward(&xt, &gt, &dyt, dims, 3, 1e-5, &mut dx, &mut dg, &mut db).unwrap();
        let close = |got: f32, want: f64| (got as f64 - want).abs() <= 1e-4 * (1.0 + want.abs());
        for (i, (g, w)) in dx.to_vec::<f32>().unwrap().iter().zip(&wdx).enumerate() {
            assert!(close(*g, *w), "{dev} dx #{i}: {g} vs {w}");
        }
        for (name, t, want) in [("dgamma", &dg, &wdg), ("dbeta", &db, &wdb)] {
            for (i, (g, w)) in t.to_vec::<f32>().unwrap().iter().zip(want).enumerate() {
                assert!(close(*g, 1.0 + w), "{dev} {name} #{i}: {g} vs 1 + {w}");
            }
        }
        let e = ops::group_norm_forward(&xt, &gt, &bt, dims, 4, 1e-5, &mut y).unwrap_err();
        assert_eq!(
            e.to_string(),
            "brotensor: group_norm_forward: num_groups 4 must divide C = 6"
        );
        let (mut rm, mut rv) = (
            Tensor::zeros_on(dev, c, 1, Dtype::F32).unwrap(),
            Tensor::from_slice_on(dev, &vec![1.0f32; c], c, 1).unwrap(),
        );
        let (mut y, mut sm, mut sr) = Default::default();
        ops::batch_norm_forward(
            &xt, &gt, &bt, dims, 1e-5, 0.1, &mut rm, &mut rv, &mut y, &mut sm, &mut sr,
        )
        .unwrap();
        // Every channel's output and gradients against float64 (dgamma, dbeta start at 1).
        let [wy, wdx, wdg, wdb] = batch_norm_f64(&xs, &gs, &bs, &dys, (n, c, hw), 1e-5);
        let (mut bdx, mut bdg, mut bdb) = (
            Tensor::default(),
            Tensor::from_slice_on(dev, &vec![1.0f32; c], c, 1).unwrap(),
            Tensor::from_slice_on(dev, &vec![1.0f32; c], c, 1).unwrap(),
        );
        ops::batch_norm_backward(&xt, &gt, &sm, &sr, &dyt, dims, &mut bdx, &mut bdg, &mut bdb)
            .unwrap();
        let got = [&y, &bdx, &bdg, &bdb].map(|t| t.to_vec::<f32>().unwrap());
        let wants = [
            ("y", wy),
            ("dx", wdx),
            ("dgamma", wdg.iter().map(|v| v + 1.0).collect()),
            ("dbeta", wdb.iter().map(|v| v + 1.0).collect()),
        ];
        for ((name, want), got) in wants.iter().zip(&got) {
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(close(*g, *w), "{dev} batch norm {name} #{i}: {g} vs {w}");
            }
        }
        // Inference with the updated running statistics, against float64.
        let (rms, rvs) = (rm.to_vec::<f32>().unwrap(), rv.to_vec::<f32>().unwrap());
        let mut yi = Tensor::default();
        ops::batch_norm_inference(&xt, &gt, &bt, &rm, &rv, dims, 1e-5, &mut yi).unwrap();
        for (i, g) in yi.to_vec::<f32>().unwrap().iter().enumerate() {
            let ch = (i / hw) % c;
            let a = gs[ch] as f64 / (rvs[ch] as f64 + 1e-5).sqrt();
            let w = (xs[i] as f64 - rms[ch] as f64) * a + bs[ch] as f64;
            assert!(close(*g, w), "{dev} batch norm inference #{i}: {g} vs {w}");
        }
        let m = n * hw;
        let ch0: Vec<f64> = (0..n)
            .flat_map(|s| (0..hw).map(move |p| (s, p)))
            .map(|(s, p)| xs[s * c * hw + p] as f64)
            .collect();
        let mean = ch0.iter().sum::<f64>() / m as f64;
        let var = ch0.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / m as f64;
        let rm0 = rm.to_vec::<f32>().unwrap()[0] as f64;
        let rv0 = rv.to_vec::<f32>().unwrap()[0] as f64;
        assert!((rm0 - 0.1 * mean).abs() < 1e-5, "{dev}: running mean {rm0}");
        assert!(
            (rv0 - (0.9 + 0.1 * var * m as f64 / (m - 1) as f64)).abs() < 1e-4,
            "{dev}: running var {rv0}"
        );
        assert!((sr.to_vec::<f32>().unwrap()[0] as f64 - 1.0 / (var + 1e-5).sqrt()).abs() < 1e-3);
    }
}

#[test]
fn l2_normalize_nchw() {
    let dims = (2usize, 5usize, 3usize, 7usize);
    let (n, c, h, w) = dims;
    parity_with(
        "l2_normalize_nchw_forward",
        0x680,
        &[Input::new(n, c * h * w, -2.0, 2.0)],
        ROW,
        |t| {
            let mut y = Tensor::default();
            ops::l2_normalize_nchw_forward(&t[0], dims, 1e-6, &mut y)?;
            Ok(y)
        },
    );
    for dev in std::iter::once(Device::Cpu).chain(gpu_devices()) {
        // Sample 0, position 0 holds (3, 4) over two channels; position 1 is all zeros.
        let x = Tensor::from_slice_on(dev, &[3.0f32, 0.0, 4.0, 0.0], 1, 4).unwrap();
        let mut y = Tensor::default();
        ops::l2_normalize_nchw_forward(&x, (1, 2, 1, 2), 1e-3, &mut y).unwrap();
        let got = y.to_vec::<f32>().unwrap();
        assert!(
            (got[0] - 0.6).abs() < 1e-6 && (got[2] - 0.8).abs() < 1e-6,
            "{dev}: {got:?}"
        );
        assert_eq!(
            (got[1], got[3]),
            (0.0, 0.0),
            "{dev}: the eps floor keeps zeros finite"
        );
    }
}
