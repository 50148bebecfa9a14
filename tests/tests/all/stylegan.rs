//! The StyleGAN family against float64 code written here from stylegan3's `_ref`
//! definitions: `upfirdn2d` as the literal pipeline (build the zero-inserted, padded or
//! cropped plane, correlate with the flipped filter, keep every `down`-th sample), its
//! gradient as the scatter of `dy` through that pipeline (the transpose by definition),
//! `bias_act` element by element, the modulated convolution as a direct convolution with
//! per-sample scaled weights, and the gradients of the modulated convolution and of
//! `filtered_lrelu` by central finite differences. Every device and float dtype, plus the
//! error cases.

use brotensor::ops::{
    self, BiasAct, BiasActivation, FilteredLreluCaches, FilteredLreluSpec, ModulatedConv2dSpec,
    Upfirdn2dSpec,
};
use brotensor::{Dtype, Result, Tensor};
use brotensor_tests::reference::finite_differences;
use brotensor_tests::{reference_with, Check, Input};

/// `(N, C, H, W)`.
type Dims = (usize, usize, usize, usize);

/// The `upfirdn2d` pipeline on float64 planes, calling `f(y index, x index, weight)` for
/// every product `y[yi] += weight x[xi]` it forms. Returns `(H_out, W_out)`.
fn upfirdn_map(
    (n, c, h, w): Dims,
    filt: &[f64],
    (fh, fw): (usize, usize),
    s: &Upfirdn2dSpec,
    mut f: impl FnMut(usize, usize, f64),
) -> (usize, usize) {
    let [ux, uy] = s.up;
    let [dx, dy] = s.down;
    let [x0, x1, y0, y1] = s.pad;
    // The zero-inserted plane, padded (negative pads crop): `ph x pw`.
    let ph = (h * uy) as i64 + y0 + y1;
    let pw = (w * ux) as i64 + x0 + x1;
    let ho = ((ph - fh as i64) / dy as i64 + 1) as usize;
    let wo = ((pw - fw as i64) / dx as i64 + 1) as usize;
    // Source pixel of padded position (py, px), if it holds one.
    let source = |py: i64, px: i64| -> Option<(usize, usize)> {
        let (qy, qx) = (py - y0, px - x0);
        if qy < 0 || qx < 0 || qy % uy as i64 != 0 || qx % ux as i64 != 0 {
            return None;
        }
        let (sy, sx) = ((qy / uy as i64) as usize, (qx / ux as i64) as usize);
        (sy < h && sx < w).then_some((sy, sx))
    };
    for p in 0..n * c {
        for oy in 0..ho {
            for ox in 0..wo {
                for i in 0..fh {
                    for j in 0..fw {
                        // Correlation with the flipped filter is a convolution.
                        let tap = if s.flip_filter {
                            filt[i * fw + j]
                        } else {
                            filt[(fh - 1 - i) * fw + (fw - 1 - j)]
                        };
                        let (py, px) = ((oy * dy + i) as i64, (ox * dx + j) as i64);
                        if let Some((sy, sx)) = source(py, px) {
                            f(
                                (p * ho + oy) * wo + ox,
                                (p * h + sy) * w + sx,
                                tap * f64::from(s.gain),
                            );
                        }
                    }
                }
            }
        }
    }
    (ho, wo)
}

fn upfirdn_f64(
    x: &[f64],
    filt: &[f64],
    dims: Dims,
    fsize: (usize, usize),
    s: &Upfirdn2dSpec,
) -> Vec<f64> {
    let mut y = Vec::new();
    let (ho, wo) = upfirdn_map(dims, filt, fsize, s, |_, _, _| {});
    y.resize(dims.0 * dims.1 * ho * wo, 0.0);
    upfirdn_map(dims, filt, fsize, s, |yi, xi, t| y[yi] += t * x[xi]);
    y
}

fn upfirdn_cases() -> Vec<(&'static str, Dims, (usize, usize), Upfirdn2dSpec)> {
    let base = Upfirdn2dSpec::IDENTITY;
    vec![
        (
            "up 2, pad",
            (2, 2, 5, 6),
            (4, 4),
            Upfirdn2dSpec {
                up: [2, 2],
                pad: [2, 1, 2, 1],
                gain: 4.0,
                ..base
            },
        ),
        (
            "up 2 down 2, negative pads",
            (1, 3, 6, 5),
            (3, 3),
            Upfirdn2dSpec {
                up: [2, 2],
                down: [2, 2],
                pad: [-1, 2, 1, -2],
                ..base
            },
        ),
        (
            "down 2 x, up 3 y, flipped",
            (2, 1, 4, 7),
            (2, 3),
            Upfirdn2dSpec {
                up: [1, 3],
                down: [2, 1],
                pad: [1, 1, 0, 2],
                flip_filter: true,
                gain: 0.5,
            },
        ),
        (
            "12x12 filter, up 2",
            (1, 2, 8, 8),
            (12, 12),
            Upfirdn2dSpec {
                up: [2, 2],
                pad: [6, 5, 6, 5],
                gain: 4.0,
                ..base
            },
        ),
    ]
}

#[test]
fn upfirdn2d_forward_against_the_float64_pipeline() {
    for (k, (name, dims, (fh, fw), spec)) in upfirdn_cases().into_iter().enumerate() {
        let (n, c, h, w) = dims;
        reference_with(
            &format!("upfirdn2d_forward {name}"),
            0x0f0 + k as u64,
            &[
                Input::new(n, c * h * w, -1.0, 1.0),
                Input::new(fh, fw, -0.5, 1.0),
            ],
            Check::default(),
            |t| {
                let mut y = brotensor_tests::reference::stale(&t[0])?;
                ops::upfirdn2d_forward(&t[0], &t[1], dims, &spec, &mut y)?;
                Ok(y)
            },
            |v| upfirdn_f64(&v[0], &v[1], dims, (fh, fw), &spec),
        );
    }
}

#[test]
fn upfirdn2d_backward_is_the_transpose_of_the_pipeline() {
    for (k, (name, dims, (fh, fw), spec)) in upfirdn_cases().into_iter().enumerate() {
        let (n, c, h, w) = dims;
        let (ho, wo) = upfirdn_map(dims, &vec![0.0; fh * fw], (fh, fw), &spec, |_, _, _| {});
        reference_with(
            &format!("upfirdn2d_backward {name}"),
            0x0f8 + k as u64,
            &[
                Input::new(n, c * ho * wo, -1.0, 1.0),
                Input::new(fh, fw, -0.5, 1.0),
            ],
            Check::default(),
            |t| {
                let mut dx = brotensor_tests::reference::stale(&t[0])?;
                ops::upfirdn2d_backward(&t[0], &t[1], dims, &spec, &mut dx)?;
                assert_eq!(dx.dims(), [n, c * h * w]);
                Ok(dx)
            },
            |v| {
                let mut dx = vec![0.0; n * c * h * w];
                upfirdn_map(dims, &v[1], (fh, fw), &spec, |yi, xi, t| {
                    dx[xi] += t * v[0][yi]
                });
                dx
            },
        );
    }
}

fn bias_act_f64(t: f64, p: &BiasAct) -> (f64, f64) {
    let alpha = match p.act {
        BiasActivation::Linear => 1.0,
        BiasActivation::LeakyRelu { alpha } => f64::from(alpha),
    };
    let (a, slope) = if t > 0.0 {
        (t, 1.0)
    } else {
        (t * alpha, alpha)
    };
    let y = a * f64::from(p.gain);
    let mut d = f64::from(p.gain) * slope;
    let y = match p.clamp {
        Some(c) if y.abs() > f64::from(c) => {
            d = 0.0;
            y.clamp(-f64::from(c), f64::from(c))
        }
        _ => y,
    };
    (y, d)
}

#[test]
fn bias_act_and_its_gradients_against_float64() {
    let (n, c, hw) = (2, 3, 20);
    let cases = [
        (
            "linear with bias",
            BiasAct {
                act: BiasActivation::Linear,
                gain: 1.0,
                clamp: None,
            },
            true,
        ),
        (
            "lrelu, gain sqrt 2, clamp 0.6",
            BiasAct {
                act: BiasActivation::LeakyRelu { alpha: 0.2 },
                gain: std::f32::consts::SQRT_2,
                clamp: Some(0.6),
            },
            true,
        ),
        (
            "lrelu without bias",
            BiasAct {
                act: BiasActivation::LeakyRelu { alpha: 0.2 },
                gain: 2.0,
                clamp: None,
            },
            false,
        ),
    ];
    for (k, (name, p, with_bias)) in cases.into_iter().enumerate() {
        let ins = [
            Input::new(n, c * hw, -1.0, 1.0),
            Input::new(1, c, -0.5, 0.5),
            Input::new(n, c * hw, -1.0, 1.0),
        ];
        let bias = |v: &[Vec<f64>], i: usize| if with_bias { v[1][(i / hw) % c] } else { 0.0 };
        reference_with(
            &format!("bias_act_forward {name}"),
            0xba0 + k as u64,
            &ins[..2],
            Check::default(),
            |t| {
                let mut y = Tensor::default();
                ops::bias_act_forward(&t[0], with_bias.then_some(&t[1]), (n, c, hw), &p, &mut y)?;
                Ok(y)
            },
            |v| {
                (0..v[0].len())
                    .map(|i| bias_act_f64(v[0][i] + bias(v, i), &p).0)
                    .collect()
            },
        );
        for which in ["dx", "db"] {
            reference_with(
                &format!("bias_act_backward {name} {which}"),
                0xbb0 + k as u64,
                &ins,
                Check::default(),
                |t| {
                    let mut dx = brotensor_tests::reference::stale(&t[0])?;
                    let mut db = t[1].try_clone()?;
                    ops::fill(&mut db, 0.25)?;
                    let b = with_bias.then_some(&t[1]);
                    ops::bias_act_backward(
                        &t[2],
                        &t[0],
                        b,
                        (n, c, hw),
                        &p,
                        &mut dx,
                        Some(&mut db),
                    )?;
                    if which == "dx" {
                        Ok(dx)
                    } else {
                        brotensor_tests::reference::as_row(db)
                    }
                },
                |v| {
                    let dx: Vec<f64> = (0..v[0].len())
                        .map(|i| v[2][i] * bias_act_f64(v[0][i] + bias(v, i), &p).1)
                        .collect();
                    if which == "dx" {
                        return dx;
                    }
                    let mut db = vec![0.25; c];
                    for (i, d) in dx.iter().enumerate() {
                        db[(i / hw) % c] += d;
                    }
                    db
                },
            );
        }
    }
}

/// The modulated convolution in float64: `y[n, o] = sum_i x[n, i] * w[o, i] s[n, i] d[n, o]`
/// with zero padding, `d` the demodulation coefficient (1 without). Returns `(y, dcoef)`.
fn modconv_f64(
    x: &[f64],
    w: &[f64],
    s: &[f64],
    (n, ci, h, wd): Dims,
    co: usize,
    spec: &ModulatedConv2dSpec,
) -> (Vec<f64>, Vec<f64>) {
    let [kh, kw] = spec.kernel;
    let [ph, pw] = spec.padding;
    let (ho, wo) = (h + 2 * ph - kh + 1, wd + 2 * pw - kw + 1);
    let row = ci * kh * kw;
    let mut dcoef = vec![1.0; n * co];
    let mut y = vec![0.0; n * co * ho * wo];
    for b in 0..n {
        for o in 0..co {
            let wmod: Vec<f64> = (0..row)
                .map(|j| w[o * row + j] * s[b * ci + j / (kh * kw)])
                .collect();
            if spec.demodulate {
                dcoef[b * co + o] =
                    1.0 / (wmod.iter().map(|v| v * v).sum::<f64>() + f64::from(spec.eps)).sqrt();
            }
            let d = dcoef[b * co + o];
            for oy in 0..ho {
                for ox in 0..wo {
                    let mut acc = 0.0;
                    for i in 0..ci {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let (iy, ix) = (
                                    (oy + ky) as isize - ph as isize,
                                    (ox + kx) as isize - pw as isize,
                                );
                                if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < wd {
                                    acc += x[((b * ci + i) * h + iy as usize) * wd + ix as usize]
                                        * wmod[(i * kh + ky) * kw + kx];
                                }
                            }
                        }
                    }
                    y[((b * co + o) * ho + oy) * wo + ox] = acc * d;
                }
            }
        }
    }
    (y, dcoef)
}

/// The tolerance of chained 16-bit passes (every intermediate stored in the dtype).
fn chain_tol(dtype: Dtype) -> (f32, f32) {
    match dtype {
        Dtype::F16 => (1e-2, 1e-2),
        Dtype::BF16 => (6e-2, 2e-2),
        _ => (3e-5, 1e-4),
    }
}

#[test]
fn modulated_conv2d_against_float64() {
    let dims = (2usize, 3usize, 5usize, 4usize);
    let (n, ci, h, wd) = dims;
    let co = 4;
    for (k, demodulate) in [true, false].into_iter().enumerate() {
        let spec = ModulatedConv2dSpec {
            kernel: [3, 3],
            padding: [1, 1],
            demodulate,
            eps: 1e-8,
        };
        let (ho, wo) = (h, wd);
        let ins = [
            Input::new(n, ci * h * wd, -1.0, 1.0),
            Input::new(co, ci * 9, -0.5, 0.5),
            Input::new(n, ci, 0.5, 1.5),
            Input::new(n, co * ho * wo, -1.0, 1.0),
        ];
        let tag = if demodulate { "demodulated" } else { "plain" };
        for out in ["y", "dcoef"] {
            reference_with(
                &format!("modulated_conv2d_forward {tag} {out}"),
                0x3c0 + k as u64,
                &ins[..3],
                Check::default(),
                |t| {
                    let (mut dcoef, mut y) = (Tensor::default(), Tensor::default());
                    ops::modulated_conv2d_forward(
                        &t[0], &t[1], &t[2], dims, co, &spec, &mut dcoef, &mut y,
                    )?;
                    Ok(if out == "y" {
                        y
                    } else {
                        brotensor_tests::reference::as_row(dcoef)?
                    })
                },
                |v| {
                    let (y, d) = modconv_f64(&v[0], &v[1], &v[2], dims, co, &spec);
                    if out == "y" {
                        y
                    } else {
                        d
                    }
                },
            );
        }
        // Gradients: dx and ds overwritten, dw accumulated onto 0.25.
        for (g, which) in ["dx", "dw", "ds"].into_iter().enumerate() {
            reference_with(
                &format!("modulated_conv2d_backward {tag} {which}"),
                0x3d0 + k as u64,
                &ins,
                Check {
                    tol: Some(chain_tol),
                    ..Check::default()
                },
                |t| {
                    let (mut dcoef, mut y) = (Tensor::default(), Tensor::default());
                    ops::modulated_conv2d_forward(
                        &t[0], &t[1], &t[2], dims, co, &spec, &mut dcoef, &mut y,
                    )?;
                    let mut dx = brotensor_tests::reference::stale(&t[0])?;
                    let mut ds = brotensor_tests::reference::stale(&t[2])?;
                    let mut dw = t[1].try_clone()?;
                    ops::fill(&mut dw, 0.25)?;
                    ops::modulated_conv2d_backward(
                        &t[0], &t[1], &t[2], &dcoef, &t[3], dims, co, &spec, &mut dx, &mut dw,
                        &mut ds,
                    )?;
                    Ok(vec![dx, dw, ds].swap_remove(g))
                },
                |v| {
                    let fd = finite_differences(v, &v[3], &[g], |w| {
                        modconv_f64(&w[0], &w[1], &w[2], dims, co, &spec).0
                    });
                    let shift = if which == "dw" { 0.25 } else { 0.0 };
                    fd[0].iter().map(|d| d + shift).collect()
                },
            );
        }
    }
}

/// `filtered_lrelu` in float64: linear bias, the up stage (gain `up^2`), the leaky ReLU
/// with gain and clamp, the down stage.
fn filtered_lrelu_f64(
    v: &[Vec<f64>],
    dims: Dims,
    (fu, fd): ((usize, usize), (usize, usize)),
    spec: &FilteredLreluSpec,
) -> Vec<f64> {
    let (n, c, h, w) = dims;
    let hw = h * w;
    let biased: Vec<f64> = (0..v[0].len())
        .map(|i| v[0][i] + v[3][(i / hw) % c])
        .collect();
    let up = Upfirdn2dSpec {
        up: [spec.up; 2],
        pad: spec.pad,
        gain: (spec.up * spec.up) as f32,
        ..Upfirdn2dSpec::IDENTITY
    };
    let (mh, mw) = upfirdn_map(dims, &v[1], fu, &up, |_, _, _| {});
    let u = upfirdn_f64(&biased, &v[1], dims, fu, &up);
    let act = BiasAct {
        act: BiasActivation::LeakyRelu { alpha: spec.slope },
        gain: spec.gain,
        clamp: spec.clamp,
    };
    let a: Vec<f64> = u.iter().map(|&t| bias_act_f64(t, &act).0).collect();
    let down = Upfirdn2dSpec {
        down: [spec.down; 2],
        ..Upfirdn2dSpec::IDENTITY
    };
    upfirdn_f64(&a, &v[2], (n, c, mh, mw), fd, &down)
}

#[test]
fn filtered_lrelu_against_float64_and_finite_differences() {
    let dims = (1usize, 2usize, 6usize, 5usize);
    let (n, c, h, w) = dims;
    let (fu, fd) = ((4usize, 4usize), (4usize, 4usize));
    let spec = FilteredLreluSpec {
        up: 2,
        down: 2,
        pad: [2, 1, 2, 1],
        gain: std::f32::consts::SQRT_2,
        slope: 0.2,
        clamp: Some(1.5),
    };
    let out_w = (w * 2 + 3 - (fu.1 - 1) - (fd.1 - 1)).div_ceil(2);
    let out_h = (h * 2 + 3 - (fu.0 - 1) - (fd.0 - 1)).div_ceil(2);
    let ins = [
        Input::new(n, c * h * w, -1.0, 1.0),
        Input::new(fu.0, fu.1, 0.0, 0.5),
        Input::new(fd.0, fd.1, 0.0, 0.5),
        Input::new(1, c, -0.3, 0.3),
        Input::new(n, c * out_h * out_w, -1.0, 1.0),
    ];
    let forward = |t: &[Tensor]| -> Result<(Tensor, FilteredLreluCaches)> {
        let (mut y, mut caches) = (Tensor::default(), FilteredLreluCaches::default());
        ops::filtered_lrelu_forward(
            &t[0],
            &t[1],
            &t[2],
            Some(&t[3]),
            dims,
            &spec,
            &mut caches,
            &mut y,
        )?;
        Ok((y, caches))
    };
    reference_with(
        "filtered_lrelu_forward",
        0xf1,
        &ins[..4],
        Check {
            tol: Some(chain_tol),
            ..Check::default()
        },
        |t| {
            let (y, _) = forward(t)?;
            assert_eq!(y.dims(), [n, c * out_h * out_w]);
            Ok(y)
        },
        |v| filtered_lrelu_f64(v, dims, (fu, fd), &spec),
    );
    for (g, which) in [(0usize, "dx"), (3, "db")] {
        reference_with(
            &format!("filtered_lrelu_backward {which}"),
            0xf2,
            &ins,
            Check {
                tol: Some(chain_tol),
                ..Check::default()
            },
            |t| {
                let (_, caches) = forward(t)?;
                let mut dx = Tensor::default();
                let mut db = t[3].try_clone()?;
                ops::fill(&mut db, 0.25)?;
                ops::filtered_lrelu_backward(
                    &t[4],
                    &t[0],
                    &t[1],
                    &t[2],
                    Some(&t[3]),
                    dims,
                    &spec,
                    &caches,
                    &mut dx,
                    Some(&mut db),
                )?;
                Ok(if g == 0 { dx } else { db })
            },
            |v| {
                let fdiff = finite_differences(v, &v[4], &[g], |w| {
                    filtered_lrelu_f64(w, dims, (fu, fd), &spec)
                });
                let shift = if g == 3 { 0.25 } else { 0.0 };
                fdiff[0].iter().map(|d| d + shift).collect()
            },
        );
    }
}

#[test]
fn bad_arguments_are_errors_naming_the_operand() {
    let x = Tensor::zeros(1, 2 * 16, Dtype::F32).unwrap();
    let f = Tensor::zeros(3, 3, Dtype::F32).unwrap();
    let dims = (1, 2, 4, 4);
    let mut y = Tensor::default();
    let err = |r: Result<()>| r.unwrap_err().to_string();
    let zero_up = Upfirdn2dSpec {
        up: [0, 1],
        ..Upfirdn2dSpec::IDENTITY
    };
    let e = err(ops::upfirdn2d_forward(&x, &f, dims, &zero_up, &mut y));
    assert!(e.contains("must be at least 1"), "{e}");
    let crop = Upfirdn2dSpec {
        pad: [-2, -1, 0, 0],
        ..Upfirdn2dSpec::IDENTITY
    };
    let e = err(ops::upfirdn2d_forward(&x, &f, dims, &crop, &mut y));
    assert!(e.contains("smaller than the filter"), "{e}");
    let row = Tensor::zeros(1, 9, Dtype::F32)
        .unwrap()
        .reshape(&[9])
        .unwrap();
    let e = err(ops::upfirdn2d_forward(
        &x,
        &row,
        dims,
        &Upfirdn2dSpec::IDENTITY,
        &mut y,
    ));
    assert!(e.contains("`f` must be a non-empty 2-D filter"), "{e}");
    let f16 = f.to_dtype(Dtype::F16).unwrap();
    let e = err(ops::upfirdn2d_forward(
        &x,
        &f16,
        dims,
        &Upfirdn2dSpec::IDENTITY,
        &mut y,
    ));
    assert!(e.contains("`f`"), "{e}");
    // bias_act: wrong bias width, non-finite gain.
    let b = Tensor::zeros(1, 3, Dtype::F32).unwrap();
    let p = BiasAct {
        act: BiasActivation::Linear,
        gain: 1.0,
        clamp: None,
    };
    let e = err(ops::bias_act_forward(&x, Some(&b), (1, 2, 16), &p, &mut y));
    assert!(e.contains("`b` must hold C = 2"), "{e}");
    let e = err(ops::bias_act_forward(
        &x,
        None,
        (1, 2, 16),
        &BiasAct {
            gain: f32::NAN,
            ..p
        },
        &mut y,
    ));
    assert!(e.contains("`gain`"), "{e}");
    // modulated_conv2d: styles of the wrong shape, a weight of the wrong size.
    let w = Tensor::zeros(3, 2 * 9, Dtype::F32).unwrap();
    let s = Tensor::zeros(1, 3, Dtype::F32).unwrap();
    let spec = ModulatedConv2dSpec {
        kernel: [3, 3],
        padding: [1, 1],
        demodulate: true,
        eps: 1e-8,
    };
    let mut d = Tensor::default();
    let e = err(ops::modulated_conv2d_forward(
        &x, &w, &s, dims, 3, &spec, &mut d, &mut y,
    ));
    assert!(e.contains("`s` must be (N, C_in)"), "{e}");
    let s2 = Tensor::zeros(1, 2, Dtype::F32).unwrap();
    let e = err(ops::modulated_conv2d_forward(
        &x, &w, &s2, dims, 4, &spec, &mut d, &mut y,
    ));
    assert!(e.contains("`w` must be shaped"), "{e}");
    // filtered_lrelu: a down factor of 0.
    let fl = FilteredLreluSpec {
        up: 2,
        down: 0,
        pad: [0; 4],
        gain: 1.0,
        slope: 0.2,
        clamp: None,
    };
    let mut caches = FilteredLreluCaches::default();
    let e = err(ops::filtered_lrelu_forward(
        &x,
        &f,
        &f,
        None,
        dims,
        &fl,
        &mut caches,
        &mut y,
    ));
    assert!(e.contains("must be at least 1"), "{e}");
}

#[test]
fn methods_match_the_functions_and_keep_4d() {
    let dims = (2usize, 3usize, 4usize, 5usize);
    let x: Vec<f32> = (0..120).map(|i| (i as f32 * 0.37).sin()).collect();
    let xt = Tensor::from_slice(&x, 2, 60).unwrap();
    let x4 = xt.reshape(&[2, 3, 4, 5]).unwrap();
    let f = Tensor::from_slice(&[0.25f32, 0.5, 0.25, 0.5, 1.0, 0.5], 2, 3).unwrap();
    let spec = Upfirdn2dSpec {
        up: [2, 2],
        pad: [1, 1, 1, 0],
        ..Upfirdn2dSpec::IDENTITY
    };
    let y = x4.upfirdn2d(&f, &spec).unwrap();
    let mut want = Tensor::default();
    ops::upfirdn2d_forward(&xt, &f, dims, &spec, &mut want).unwrap();
    // H_out = 4*2 + 1 - 2 + 1 = 8, W_out = 5*2 + 2 - 3 + 1 = 10.
    assert_eq!(y.dims(), [2, 3, 8, 10]);
    assert_eq!(y.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    let b = Tensor::from_slice(&[0.1f32, -0.2, 0.3], 3, 1).unwrap();
    let p = BiasAct {
        act: BiasActivation::LeakyRelu { alpha: 0.2 },
        gain: 2.0,
        clamp: Some(1.0),
    };
    let z = x4.bias_act(Some(&b), &p).unwrap();
    let mut want = Tensor::default();
    ops::bias_act_forward(&xt, Some(&b), (2, 3, 20), &p, &mut want).unwrap();
    assert_eq!(z.dims(), [2, 3, 4, 5]);
    assert_eq!(z.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    assert!(xt.reshape(&[120]).unwrap().bias_act(None, &p).is_err());
}

#[test]
fn empty_batches_give_empty_outputs() {
    let x = Tensor::zeros(0, 2 * 16, Dtype::F32).unwrap();
    let f = Tensor::zeros(2, 2, Dtype::F32).unwrap();
    let dims = (0, 2, 4, 4);
    let mut y = Tensor::default();
    let up = Upfirdn2dSpec {
        up: [2, 2],
        ..Upfirdn2dSpec::IDENTITY
    };
    ops::upfirdn2d_forward(&x, &f, dims, &up, &mut y).unwrap();
    assert_eq!(y.dims(), [0, 2 * 7 * 7]);
    let mut dx = Tensor::default();
    ops::upfirdn2d_backward(&y, &f, dims, &up, &mut dx).unwrap();
    assert_eq!(dx.dims(), [0, 32]);
    let p = BiasAct {
        act: BiasActivation::LeakyRelu { alpha: 0.2 },
        gain: 1.0,
        clamp: None,
    };
    let mut db = Tensor::zeros(2, 1, Dtype::F32).unwrap();
    ops::bias_act_backward(&x, &x, None, (0, 2, 16), &p, &mut dx, Some(&mut db)).unwrap();
    assert_eq!(db.to_vec::<f32>().unwrap(), [0.0, 0.0]);
    // A modulated convolution of no samples: empty outputs, the weight gradient untouched.
    let w = Tensor::zeros(3, 2 * 9, Dtype::F32).unwrap();
    let s = Tensor::zeros(0, 2, Dtype::F32).unwrap();
    let spec = ModulatedConv2dSpec {
        kernel: [3, 3],
        padding: [1, 1],
        demodulate: true,
        eps: 1e-8,
    };
    let mut dcoef = Tensor::default();
    ops::modulated_conv2d_forward(&x, &w, &s, dims, 3, &spec, &mut dcoef, &mut y).unwrap();
    assert_eq!((dcoef.numel(), y.numel()), (0, 0));
    let mut dw = Tensor::zeros(3, 18, Dtype::F32).unwrap();
    ops::fill(&mut dw, 0.5).unwrap();
    let mut ds = Tensor::default();
    ops::modulated_conv2d_backward(
        &x, &w, &s, &dcoef, &y, dims, 3, &spec, &mut dx, &mut dw, &mut ds,
    )
    .unwrap();
    assert_eq!(ds.dims(), [0, 2]);
    assert!(dw.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.5));
}
