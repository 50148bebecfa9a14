//! The resize and pooling families against float64 loops written here from the definitions
//! (each output pixel's taps and weights evaluated directly; the gradients as the scatter
//! of `dy` through those same taps, which is the adjoint by definition), on every device
//! and float dtype, plus values PyTorch gives, ragged sizes, all-padding windows and the
//! error cases.

use brotensor::ops::{self, Pool2dSpec, ResizeMode, ResizeSpec};
use brotensor::{Device, Dtype, Error, Tensor};
use brotensor_tests::{reference_with, Check, Input};

/// `(N, C, H, W)`.
type Dims = (usize, usize, usize, usize);

/// One axis's taps for output position `o` by the interpolation definitions (module docs of
/// `ops::resize`): `(input position, weight)` pairs.
fn interp_taps(
    mode: ResizeMode,
    align: bool,
    len_in: usize,
    len_out: usize,
    o: usize,
) -> Vec<(usize, f64)> {
    let (fi, fo) = (len_in as f64, len_out as f64);
    let src = if align {
        if len_out == 1 {
            0.0
        } else {
            o as f64 * (fi - 1.0) / (fo - 1.0)
        }
    } else {
        (o as f64 + 0.5) * fi / fo - 0.5
    };
    let clamp = |i: f64| i.max(0.0).min(fi - 1.0) as usize;
    match mode {
        ResizeMode::Nearest => vec![(clamp(src.round_ties_even()), 1.0)],
        ResizeMode::Bilinear => {
            let s = src.max(0.0).min(fi - 1.0);
            let lo = s.floor();
            let frac = s - lo;
            vec![(clamp(lo), 1.0 - frac), (clamp(lo + 1.0), frac)]
        }
        ResizeMode::BicubicPillow | ResizeMode::BicubicTorch => {
            let a = if mode == ResizeMode::BicubicPillow {
                -0.5
            } else {
                -0.75
            };
            let kernel = |d: f64| {
                let d = d.abs();
                if d <= 1.0 {
                    (a + 2.0) * d.powi(3) - (a + 3.0) * d * d + 1.0
                } else if d < 2.0 {
                    a * d.powi(3) - 5.0 * a * d * d + 8.0 * a * d - 4.0 * a
                } else {
                    0.0
                }
            };
            let lo = src.floor();
            (-1..=2)
                .map(|k| (clamp(lo + k as f64), kernel(src - lo - k as f64)))
                .collect()
        }
    }
}

/// PyTorch's adaptive-average region of output `o` as taps.
fn adaptive_taps(len_in: usize, len_out: usize, o: usize) -> Vec<(usize, f64)> {
    let start = (o * len_in) / len_out;
    let end = ((o + 1) * len_in).div_ceil(len_out);
    (start..end)
        .map(|i| (i, 1.0 / (end - start) as f64))
        .collect()
}

type Taps<'a> = &'a dyn Fn(usize, usize, usize) -> Vec<(usize, f64)>;

/// `y[p, i, j] = sum rows(i) x cols(j) of w_r w_c x[p, r, c]`.
fn resample_ref(
    x: &[f64],
    (n, c, h, w): Dims,
    (ho, wo): (usize, usize),
    taps: [Taps; 2],
) -> Vec<f64> {
    let mut y = vec![0.0; n * c * ho * wo];
    for p in 0..n * c {
        for i in 0..ho {
            for j in 0..wo {
                let mut acc = 0.0;
                for (r, wr) in taps[0](h, ho, i) {
                    for (cc, wc) in taps[1](w, wo, j) {
                        acc += wr * wc * x[(p * h + r) * w + cc];
                    }
                }
                y[(p * ho + i) * wo + j] = acc;
            }
        }
    }
    y
}

/// The adjoint: each `dy[p, i, j]` scattered through the forward's taps.
fn resample_adj_ref(
    dy: &[f64],
    (n, c, h, w): Dims,
    (ho, wo): (usize, usize),
    taps: [Taps; 2],
) -> Vec<f64> {
    let mut dx = vec![0.0; n * c * h * w];
    for p in 0..n * c {
        for i in 0..ho {
            for j in 0..wo {
                let g = dy[(p * ho + i) * wo + j];
                for (r, wr) in taps[0](h, ho, i) {
                    for (cc, wc) in taps[1](w, wo, j) {
                        dx[(p * h + r) * w + cc] += wr * wc * g;
                    }
                }
            }
        }
    }
    dx
}

fn inputs(d: Dims, out: (usize, usize)) -> [Input; 2] {
    [
        Input::new(d.0, d.1 * d.2 * d.3, -1.0, 1.0),
        Input::new(d.0, d.1 * out.0 * out.1, -1.0, 1.0),
    ]
}

#[test]
fn interp2d_every_mode_against_float64() {
    let modes = [
        ResizeMode::Nearest,
        ResizeMode::Bilinear,
        ResizeMode::BicubicPillow,
        ResizeMode::BicubicTorch,
    ];
    // Down and up, odd sizes, a one-pixel image, one unchanged axis.
    let cases: [(Dims, (usize, usize)); 4] = [
        ((2, 2, 5, 7), (9, 4)),
        ((1, 3, 1, 1), (3, 2)),
        ((1, 2, 8, 6), (3, 6)),
        ((1, 1, 4, 9), (7, 13)),
    ];
    for (seed, (dims, out)) in cases.into_iter().enumerate() {
        for mode in modes {
            for align in [false, true] {
                let tag = format!("interp2d {mode:?} align {align} {dims:?} -> {out:?}");
                let taps = move |i: usize, o: usize, k: usize| interp_taps(mode, align, i, o, k);
                reference_with(
                    &tag,
                    300 + seed as u64,
                    &inputs(dims, out),
                    Check::default(),
                    |t| {
                        let mut y = Tensor::default();
                        if align {
                            ops::interp2d_align_corners_forward(&t[0], dims, out, mode, &mut y)?;
                        } else {
                            ops::interp2d_forward(&t[0], dims, out, mode, &mut y)?;
                        }
                        Ok(y)
                    },
                    |v| resample_ref(&v[0], dims, out, [&taps, &taps]),
                );
                if align || matches!(mode, ResizeMode::BicubicPillow | ResizeMode::BicubicTorch) {
                    continue;
                }
                reference_with(
                    &format!("{tag} backward"),
                    400 + seed as u64,
                    &inputs(dims, out),
                    Check::default(),
                    |t| {
                        let mut dx = Tensor::default();
                        ops::interp2d_backward(&t[1], dims, out, mode, &mut dx)?;
                        Ok(dx)
                    },
                    |v| resample_adj_ref(&v[1], dims, out, [&taps, &taps]),
                );
            }
        }
    }
}

#[test]
fn fixed_2x_resizes_and_resample1d_against_float64() {
    let dims = (2, 3, 3, 5);
    let out = (6, 10);
    for (mode, name) in [
        (ResizeMode::Nearest, "nearest"),
        (ResizeMode::Bilinear, "bilinear"),
    ] {
        let taps = move |i: usize, o: usize, k: usize| interp_taps(mode, false, i, o, k);
        reference_with(
            &format!("upsample_{name}_2x"),
            31,
            &inputs(dims, out),
            Check::default(),
            |t| {
                let mut y = Tensor::default();
                match mode {
                    ResizeMode::Nearest => ops::upsample_nearest_2x(&t[0], dims, &mut y)?,
                    _ => ops::upsample_bilinear_2x(&t[0], dims, &mut y)?,
                }
                Ok(y)
            },
            |v| resample_ref(&v[0], dims, out, [&taps, &taps]),
        );
        reference_with(
            &format!("upsample_{name}_2x_backward"),
            32,
            &inputs(dims, out),
            Check::default(),
            |t| {
                let mut dx = Tensor::default();
                match mode {
                    ResizeMode::Nearest => ops::upsample_nearest_2x_backward(&t[1], dims, &mut dx)?,
                    _ => ops::upsample_bilinear_2x_backward(&t[1], dims, &mut dx)?,
                }
                Ok(dx)
            },
            |v| resample_adj_ref(&v[1], dims, out, [&taps, &taps]),
        );
        // resample1d: one row per (n, c), lengths down and up.
        for (l_in, l_out) in [(7, 3), (5, 11)] {
            let d1 = (2, 3, 1, l_in);
            let taps = move |i: usize, o: usize, k: usize| interp_taps(mode, false, i, o, k);
            reference_with(
                &format!("resample1d_forward {name} {l_in} -> {l_out}"),
                33,
                &inputs(d1, (1, l_out)),
                Check::default(),
                |t| {
                    let mut y = Tensor::default();
                    ops::resample1d_forward(&t[0], (2, 3, l_in), l_out, mode, &mut y)?;
                    Ok(y)
                },
                |v| resample_ref(&v[0], d1, (1, l_out), [&taps, &taps]),
            );
            reference_with(
                &format!("resample1d_backward {name} {l_in} -> {l_out}"),
                34,
                &inputs(d1, (1, l_out)),
                Check::default(),
                |t| {
                    let mut dx = Tensor::default();
                    ops::resample1d_backward(&t[1], (2, 3, l_in), l_out, mode, &mut dx)?;
                    Ok(dx)
                },
                |v| resample_adj_ref(&v[1], d1, (1, l_out), [&taps, &taps]),
            );
        }
    }
}

#[test]
fn resizes_give_pytorchs_values() {
    // F.interpolate(torch.tensor([[[[1., 2.], [3., 4.]]]]), scale_factor=2, mode=...,
    // align_corners=False), as PyTorch prints them.
    let x = Tensor::from_slice_nd_on(Device::Cpu, &[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 2, 2]).unwrap();
    let bilinear = [
        1.0, 1.25, 1.75, 2.0, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3.0, 3.25, 3.75, 4.0,
    ];
    assert_eq!(
        x.upsample_bilinear2d(2).unwrap().to_vec::<f32>().unwrap(),
        bilinear
    );
    let spec = ResizeSpec {
        out_h: 4,
        out_w: 4,
        mode: ResizeMode::BicubicTorch,
        align_corners: false,
    };
    let bicubic = x.interpolate(&spec).unwrap().to_vec::<f32>().unwrap();
    for (g, w) in bicubic[..4]
        .iter()
        .zip([0.68359375f64, 1.015625, 1.5625, 1.89453125])
    {
        assert!(
            (f64::from(*g) - w).abs() < 1e-6,
            "bicubic row 0: {bicubic:?}"
        );
    }
    // F.max_pool2d(x, 2) keeps the 4; F.adaptive_avg_pool2d(x, 1) is the global mean.
    let max = x.max_pool2d(&Pool2dSpec::new([2, 2])).unwrap();
    assert_eq!(max.to_vec::<f32>().unwrap(), [4.0]);
    let global = x.adaptive_avg_pool2d([1, 1]).unwrap();
    assert_eq!(
        (global.dims(), global.to_vec::<f32>().unwrap()),
        ([1, 1, 1, 1].as_slice(), vec![2.5])
    );
    let nearest = x.upsample_nearest2d(3).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(&nearest[..6], [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
    assert_eq!(nearest.len(), 36);
}

#[test]
fn average_pools_against_float64() {
    let adaptive = |i: usize, o: usize, k: usize| adaptive_taps(i, o, k);
    // Regions of varying length (7 -> 3, 5 -> 4), global pooling, and upsampling sizes.
    for (seed, (dims, out)) in [
        ((2, 3, 7, 5), (3, 4)),
        ((1, 2, 6, 6), (1, 1)),
        ((1, 1, 3, 2), (5, 4)),
    ]
    .into_iter()
    .enumerate()
    {
        reference_with(
            &format!("adaptive_avg_pool2d {dims:?} -> {out:?}"),
            50 + seed as u64,
            &inputs(dims, out),
            Check::default(),
            |t| {
                let mut y = Tensor::default();
                ops::adaptive_avg_pool2d_forward(&t[0], dims, out, &mut y)?;
                Ok(y)
            },
            |v| resample_ref(&v[0], dims, out, [&adaptive, &adaptive]),
        );
        reference_with(
            &format!("adaptive_avg_pool2d_backward {dims:?} -> {out:?}"),
            60 + seed as u64,
            &inputs(dims, out),
            Check::default(),
            |t| {
                let mut dx = Tensor::default();
                ops::adaptive_avg_pool2d_backward(&t[1], dims, out, &mut dx)?;
                Ok(dx)
            },
            |v| resample_adj_ref(&v[1], dims, out, [&adaptive, &adaptive]),
        );
    }
    let dims = (2, 3, 4, 6);
    let block = |(n, c, h, w): Dims, x: &[f64]| {
        let mut y = vec![0.0; n * c * h * w / 4];
        for p in 0..n * c {
            for i in 0..h / 2 {
                for j in 0..w / 2 {
                    let at = |a: usize, b: usize| x[(p * h + 2 * i + a) * w + 2 * j + b];
                    y[(p * h / 2 + i) * w / 2 + j] =
                        (at(0, 0) + at(0, 1) + at(1, 0) + at(1, 1)) / 4.0;
                }
            }
        }
        y
    };
    reference_with(
        "downsample_avg_2x",
        71,
        &inputs(dims, (2, 3)),
        Check::default(),
        |t| {
            let mut y = Tensor::default();
            ops::downsample_avg_2x(&t[0], dims, &mut y)?;
            Ok(y)
        },
        |v| block(dims, &v[0]),
    );
    reference_with(
        "downsample_avg_2x_backward",
        72,
        &inputs(dims, (2, 3)),
        Check::default(),
        |t| {
            let mut dx = Tensor::default();
            ops::downsample_avg_2x_backward(&t[1], dims, &mut dx)?;
            Ok(dx)
        },
        |v| {
            let (n, c, h, w) = dims;
            (0..n * c * h * w)
                .map(|i| {
                    let (p, r) = (i / (h * w), i % (h * w));
                    v[1][(p * h / 2 + r / w / 2) * w / 2 + r % w / 2] / 4.0
                })
                .collect()
        },
    );
}

/// Max pooling by the definition: per output, the first largest value of the window's
/// inputs inside the image and its plane position, or (-inf, -1).
fn max_pool_ref(
    x: &[f64],
    (n, c, h, w): Dims,
    s: &Pool2dSpec,
    out: [usize; 2],
) -> (Vec<f64>, Vec<i64>) {
    let (mut y, mut idx) = (Vec::new(), Vec::new());
    for p in 0..n * c {
        for oy in 0..out[0] {
            for ox in 0..out[1] {
                let mut best: Option<(f64, usize)> = None;
                for ky in 0..s.kernel[0] {
                    for kx in 0..s.kernel[1] {
                        let iy =
                            (oy * s.stride[0] + ky * s.dilation[0]) as i64 - s.padding[0] as i64;
                        let ix =
                            (ox * s.stride[1] + kx * s.dilation[1]) as i64 - s.padding[1] as i64;
                        if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                            continue;
                        }
                        let pos = iy as usize * w + ix as usize;
                        let v = x[p * h * w + pos];
                        if best.is_none_or(|(b, _)| v > b) {
                            best = Some((v, pos));
                        }
                    }
                }
                y.push(best.map_or(f64::NEG_INFINITY, |b| b.0));
                idx.push(best.map_or(-1, |b| b.1 as i64));
            }
        }
    }
    (y, idx)
}

#[test]
fn max_pool2d_and_its_gradient_against_float64() {
    let spec = |k: usize, s: usize, p: usize, d: usize, ceil: bool| Pool2dSpec {
        kernel: [k, k],
        stride: [s, s],
        padding: [p, p],
        dilation: [d, d],
        ceil_mode: ceil,
    };
    // Overlapping windows (stride < kernel: collisions in the gradient), strides past the
    // window, dilation, ceil mode, and padding of a whole window (all-padding windows).
    let cases: [(Dims, Pool2dSpec); 5] = [
        ((2, 3, 7, 6), spec(3, 1, 1, 1, false)),
        ((1, 2, 9, 8), spec(2, 3, 0, 1, false)),
        ((1, 2, 8, 7), spec(3, 2, 1, 2, true)),
        ((2, 1, 3, 3), spec(2, 2, 2, 1, false)),
        ((1, 1, 1, 1), spec(1, 1, 0, 1, false)),
    ];
    for (seed, (dims, s)) in cases.into_iter().enumerate() {
        let out = s.out_size([dims.2, dims.3]).unwrap();
        let ins = inputs(dims, (out[0], out[1]));
        let tag = format!("max_pool2d {dims:?} {s:?}");
        reference_with(
            &tag,
            80 + seed as u64,
            &ins,
            Check::default(),
            |t| {
                let (mut y, mut idx) = (Tensor::default(), Tensor::default());
                ops::max_pool2d_forward(&t[0], dims, &s, &mut y, &mut idx)?;
                Ok(y)
            },
            |v| max_pool_ref(&v[0], dims, &s, out).0,
        );
        reference_with(
            &format!("{tag} indices"),
            80 + seed as u64,
            &ins,
            Check {
                same_dtype: false,
                tol: Some(|_| (0.0, 0.0)),
                ..Check::default()
            },
            |t| {
                let (mut y, mut idx) = (Tensor::default(), Tensor::default());
                ops::max_pool2d_forward(&t[0], dims, &s, &mut y, &mut idx)?;
                assert_eq!(idx.dtype(), Dtype::I32);
                Ok(idx)
            },
            |v| {
                max_pool_ref(&v[0], dims, &s, out)
                    .1
                    .into_iter()
                    .map(|i| i as f64)
                    .collect()
            },
        );
        reference_with(
            &format!("{tag} backward"),
            90 + seed as u64,
            &ins,
            Check::default(),
            |t| {
                let (mut y, mut idx, mut dx) =
                    (Tensor::default(), Tensor::default(), Tensor::default());
                ops::max_pool2d_forward(&t[0], dims, &s, &mut y, &mut idx)?;
                ops::max_pool2d_backward(&t[1], &idx, dims, &s, &mut dx)?;
                Ok(dx)
            },
            |v| {
                let idx = max_pool_ref(&v[0], dims, &s, out).1;
                let plane_in = dims.2 * dims.3;
                let plane_out = out[0] * out[1];
                let mut dx = vec![0.0; dims.0 * dims.1 * plane_in];
                for (o, &i) in idx.iter().enumerate() {
                    if i >= 0 {
                        dx[o / plane_out * plane_in + i as usize] += v[1][o];
                    }
                }
                dx
            },
        );
    }
    // A window entirely in the padding: -inf and index -1.
    let x = Tensor::from_slice_nd_on(Device::Cpu, &[5.0f32], &[1, 1, 1, 1]).unwrap();
    let (y, idx) = x.max_pool2d_with_indices(&spec(1, 1, 1, 1, false)).unwrap();
    assert_eq!(y.dims(), [1, 1, 3, 3]);
    let y = y.to_vec::<f32>().unwrap();
    assert_eq!(y[4], 5.0);
    assert_eq!(y[0], f32::NEG_INFINITY);
    assert_eq!(
        idx.to_vec::<i32>().unwrap(),
        [-1, -1, -1, -1, 0, -1, -1, -1, -1]
    );
}

#[test]
fn masked_mean_pool_against_float64() {
    let (k, d) = (6, 5);
    // Inputs: x (K, D), a mask drawn in [0, 1) (rows valid where >= 0.5), dy (D).
    let ins = [
        Input::new(k, d, -1.0, 1.0),
        Input::new(1, k, 0.0, 1.0),
        Input::new(1, d, -1.0, 1.0),
    ];
    let valid = |m: &[f64]| (0..k).filter(|&r| m[r] >= 0.5).collect::<Vec<_>>();
    let mean = |x: &[f64], rows: &[usize]| -> Vec<f64> {
        (0..d)
            .map(|j| {
                if rows.is_empty() {
                    0.0
                } else {
                    rows.iter().map(|&r| x[r * d + j]).sum::<f64>() / rows.len() as f64
                }
            })
            .collect()
    };
    reference_with(
        "masked_mean_pool_forward",
        101,
        &ins,
        Check::default(),
        |t| {
            let mask = t[1].to_dtype(Dtype::F32)?;
            let mut y = Tensor::default();
            ops::masked_mean_pool_forward(&t[0], Some(&mask), &mut y)?;
            assert_eq!(y.dims(), [d, 1]);
            y.reshape(&[1, d])
        },
        |v| mean(&v[0], &valid(&v[1])),
    );
    reference_with(
        "masked_mean_pool_forward, no mask",
        102,
        &ins,
        Check::default(),
        |t| {
            let mut y = Tensor::default();
            ops::masked_mean_pool_forward(&t[0], None, &mut y)?;
            y.reshape(&[1, d])
        },
        |v| mean(&v[0], &(0..k).collect::<Vec<_>>()),
    );
    reference_with(
        "masked_mean_pool_backward",
        103,
        &ins,
        Check::default(),
        |t| {
            let mask = t[1].to_dtype(Dtype::F32)?;
            let mut dx = Tensor::default();
            ops::masked_mean_pool_backward(&t[2], Some(&mask), k, &mut dx)?;
            Ok(dx)
        },
        |v| {
            let rows = valid(&v[1]);
            let mut dx = vec![0.0; k * d];
            for &r in &rows {
                for j in 0..d {
                    dx[r * d + j] = v[2][j] / rows.len() as f64;
                }
            }
            dx
        },
    );
    // No valid row: zeros, not NaN.
    let x = Tensor::from_slice_on(Device::Cpu, &[1.0f32, 2.0, 3.0, 4.0], 2, 2).unwrap();
    let none = Tensor::from_slice_on(Device::Cpu, &[0.0f32, 0.2], 1, 2).unwrap();
    let mut y = Tensor::default();
    ops::masked_mean_pool_forward(&x, Some(&none), &mut y).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), [0.0, 0.0]);
}

#[test]
fn convex_upsample_against_float64() {
    let (n, c, h, w, k) = (2, 3, 3, 4, 2);
    let ins = [
        Input::new(n, c * h * w, -1.0, 1.0),
        Input::new(n, 9 * k * k * h * w, -3.0, 3.0),
    ];
    reference_with(
        "convex_upsample_forward",
        111,
        &ins,
        Check::default(),
        |t| {
            let mut y = Tensor::default();
            ops::convex_upsample_forward(&t[0], &t[1], (n, c, h, w), k, &mut y)?;
            Ok(y)
        },
        |v| {
            let (x, mask) = (&v[0], &v[1]);
            let mut y = vec![0.0; n * c * k * h * k * w];
            for b in 0..n {
                for ch in 0..c {
                    for yy in 0..h {
                        for xx in 0..w {
                            for sy in 0..k {
                                for sx in 0..k {
                                    let logits: Vec<f64> = (0..9)
                                        .map(|m| {
                                            mask[((b * 9 + m) * k * k + sy * k + sx) * h * w
                                                + yy * w
                                                + xx]
                                        })
                                        .collect();
                                    let e: Vec<f64> = logits.iter().map(|l| l.exp()).collect();
                                    let total: f64 = e.iter().sum();
                                    let mut acc = 0.0;
                                    for (m, em) in e.iter().enumerate() {
                                        let ny = (yy as i64 - 1 + (m / 3) as i64)
                                            .clamp(0, h as i64 - 1)
                                            as usize;
                                        let nx = (xx as i64 - 1 + (m % 3) as i64)
                                            .clamp(0, w as i64 - 1)
                                            as usize;
                                        acc += em / total * x[((b * c + ch) * h + ny) * w + nx];
                                    }
                                    y[((b * c + ch) * k * h + k * yy + sy) * k * w + k * xx + sx] =
                                        acc;
                                }
                            }
                        }
                    }
                }
            }
            y
        },
    );
}

#[test]
fn bad_resize_and_pool_arguments_are_errors_naming_the_problem() {
    let x = Tensor::zeros_on(Device::Cpu, 2, 3 * 4 * 5, Dtype::F32).unwrap();
    let mut y = Tensor::default();
    let shape = |e: Error| matches!(e, Error::Shape { .. });
    // Wrong element count for the dims.
    assert!(shape(
        ops::upsample_nearest_2x(&x, (2, 3, 4, 4), &mut y).unwrap_err()
    ));
    // An empty side cannot grow; odd sides cannot halve.
    let e =
        ops::interp2d_forward(&x, (2, 3, 4, 5), (0, 3), ResizeMode::Bilinear, &mut y).unwrap_err();
    assert!(e.to_string().contains("interp2d_forward"), "{e}");
    let e = ops::downsample_avg_2x(&x, (2, 3, 4, 5), &mut y).unwrap_err();
    assert!(e.to_string().contains("even"), "{e}");
    // Bicubic has no gradient; resample1d has no bicubic.
    let e = ops::interp2d_backward(&x, (2, 3, 2, 2), (4, 5), ResizeMode::BicubicTorch, &mut y)
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e =
        ops::resample1d_forward(&x, (2, 3, 20), 9, ResizeMode::BicubicPillow, &mut y).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // A window larger than the padded input; a zero stride; overflowing sizes.
    let big = Pool2dSpec::new([6, 6]);
    assert!(shape(
        ops::max_pool2d_forward(&x, (2, 3, 4, 5), &big, &mut y, &mut Tensor::default())
            .unwrap_err()
    ));
    let zero = Pool2dSpec {
        stride: [0, 1],
        ..Pool2dSpec::new([2, 2])
    };
    assert!(shape(
        ops::max_pool2d_forward(&x, (2, 3, 4, 5), &zero, &mut y, &mut Tensor::default())
            .unwrap_err()
    ));
    let e = ops::interp2d_forward(
        &x,
        (2, 3, 4, 5),
        (usize::MAX, 2),
        ResizeMode::Nearest,
        &mut y,
    )
    .unwrap_err();
    assert!(shape(e));
    // An empty batch does not hide an entry whose size overflows.
    let empty = Tensor::zeros_on(Device::Cpu, 0, 0, Dtype::F32).unwrap();
    let e = ops::interp2d_forward(
        &empty,
        (0, 1 << 4, 0, 0),
        (0, 0),
        ResizeMode::Nearest,
        &mut y,
    );
    assert!(e.is_ok(), "an empty image resizes to an empty one: {e:?}");
    let e = ops::interp2d_forward(
        &empty,
        (0, 1 << 4, 1, 1),
        (1 << 31, 1 << 31),
        ResizeMode::Nearest,
        &mut y,
    )
    .unwrap_err();
    assert!(shape(e));
    let e = ops::max_pool2d_forward(
        &empty,
        (0, 1 << 40, 1 << 20, 1 << 20),
        &Pool2dSpec::new([1, 1]),
        &mut y,
        &mut Tensor::default(),
    )
    .unwrap_err();
    assert!(shape(e));
    // Indices must be I32; a mask must be F32 of K values.
    let f = Tensor::zeros_on(Device::Cpu, 2, 3 * 2 * 2, Dtype::F32).unwrap();
    let e = ops::max_pool2d_backward(&f, &f, (2, 3, 4, 4), &Pool2dSpec::new([2, 2]), &mut y)
        .unwrap_err();
    assert!(matches!(e, Error::Dtype { operand: "idx", .. }), "{e}");
    let m = Tensor::zeros_on(Device::Cpu, 1, 3, Dtype::F32).unwrap();
    let e = ops::masked_mean_pool_forward(&x, Some(&m), &mut y).unwrap_err();
    assert!(e.to_string().contains("mask"), "{e}");
    // Convex upsample needs a mask of 9 k^2 channels.
    let e = ops::convex_upsample_forward(&x, &x, (2, 3, 4, 5), 2, &mut y).unwrap_err();
    assert!(e.to_string().contains("mask"), "{e}");
}

#[test]
fn empty_batches_give_empty_outputs() {
    let x = Tensor::zeros_on(Device::Cpu, 0, 12, Dtype::F32).unwrap();
    let mut y = Tensor::default();
    ops::interp2d_forward(&x, (0, 3, 2, 2), (5, 3), ResizeMode::BicubicTorch, &mut y).unwrap();
    assert_eq!(y.dims(), [0, 45]);
    let (mut y, mut idx) = (Tensor::default(), Tensor::default());
    ops::max_pool2d_forward(&x, (0, 3, 2, 2), &Pool2dSpec::new([2, 2]), &mut y, &mut idx).unwrap();
    assert_eq!(
        (y.dims(), idx.dims()),
        ([0, 3].as_slice(), [0, 3].as_slice())
    );
}

/// `<A x, dy> = <x, A^T dy>` in float64 over the outputs of the devices themselves: each
/// gradient op is the adjoint of its forward op (F32, every device).
#[test]
fn gradients_are_adjoint_to_their_forward_passes() {
    let dims = (2, 3, 5, 7);
    let (n, c, h, w) = dims;
    let dot = |a: &[f32], b: &[f32]| -> f64 {
        a.iter()
            .zip(b)
            .map(|(&p, &q)| f64::from(p) * f64::from(q))
            .sum()
    };
    let x: Vec<f32> = (0..n * c * h * w)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
        .collect();
    type Pass = Box<dyn Fn(&Tensor, &mut Tensor) -> brotensor::Result<()>>;
    let cases: Vec<(&str, usize, Pass, Pass)> = vec![
        (
            "interp2d bilinear 5x7 -> 8x4",
            8 * 4,
            Box::new(move |x, y| ops::interp2d_forward(x, dims, (8, 4), ResizeMode::Bilinear, y)),
            Box::new(move |dy, dx| {
                ops::interp2d_backward(dy, dims, (8, 4), ResizeMode::Bilinear, dx)
            }),
        ),
        (
            "adaptive_avg_pool2d 5x7 -> 3x2",
            3 * 2,
            Box::new(move |x, y| ops::adaptive_avg_pool2d_forward(x, dims, (3, 2), y)),
            Box::new(move |dy, dx| ops::adaptive_avg_pool2d_backward(dy, dims, (3, 2), dx)),
        ),
        (
            "pad2d reflect",
            (h + 5) * (w + 4),
            Box::new(move |x, y| {
                ops::pad2d_forward(x, dims, [3, 2, 1, 3], ops::PadMode::Reflect, y)
            }),
            Box::new(move |dy, dx| {
                ops::pad2d_backward(dy, dims, [3, 2, 1, 3], ops::PadMode::Reflect, dx)
            }),
        ),
    ];
    for device in std::iter::once(Device::Cpu).chain(brotensor_tests::gpu_devices()) {
        let xt = Tensor::from_slice_on(device, &x, n, c * h * w).unwrap();
        for (name, plane_out, fwd, bwd) in &cases {
            let len = n * c * plane_out;
            let dy: Vec<f32> = (0..len)
                .map(|i| ((i * 53 % 29) as f32 - 14.0) / 9.0)
                .collect();
            let dyt = Tensor::from_slice_on(device, &dy, n, len / n).unwrap();
            let (mut y, mut dx) = (Tensor::default(), Tensor::default());
            fwd(&xt, &mut y).unwrap();
            bwd(&dyt, &mut dx).unwrap();
            let (lhs, rhs) = (
                dot(&y.to_vec::<f32>().unwrap(), &dy),
                dot(&x, &dx.to_vec::<f32>().unwrap()),
            );
            assert!(
                (lhs - rhs).abs() <= 1e-4 * lhs.abs().max(1.0),
                "{name} on {device}: <Ax, dy> = {lhs}, <x, A^T dy> = {rhs}"
            );
        }
    }
}
