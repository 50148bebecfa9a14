//! Softmax and the losses against float64 formulas written here from each op's definition
//! (not the CPU crate's code), on every device and in every dtype the op takes (the losses
//! are FP32 by contract). Overwritten outputs start from unrelated contents, so overwriting
//! is checked; a mask entry below 0.5 drops its entry.

use brotensor::{ops, Dtype, Result, Tensor};
use brotensor_tests::reference::as_row;
use brotensor_tests::{assert_close_rows, read_f32, reference_with, Check, Input, SplitMix64};

const ALL: Check = Check {
    dtypes: &[Dtype::F32, Dtype::F16, Dtype::BF16],
    same_dtype: true,
    tol: None,
};

const F32_ONLY: Check = Check {
    dtypes: &[Dtype::F32],
    same_dtype: true,
    tol: None,
};

/// `t`'s values mapped on the host into a new F32 tensor of its shape on its device (input
/// preparation without any library op).
fn host_f32(t: &Tensor, f: impl Fn(f32) -> f32) -> Result<Tensor> {
    let v: Vec<f32> = read_f32(t)?.into_iter().map(f).collect();
    Tensor::from_slice_on(t.device(), &v, t.rows(), t.cols())
}

/// A scalar result as a 1x1 F32 tensor on `like`'s device.
fn scalar(like: &Tensor, v: f32) -> Result<Tensor> {
    Tensor::from_slice_on(like.device(), &[v], 1, 1)
}

/// The softmax of `z` over the entries `keep` allows (the others get 0; all dropped gives
/// all zeros).
fn softmax(z: &[f64], keep: impl Fn(usize) -> bool) -> Vec<f64> {
    let max = (0..z.len())
        .filter(|&i| keep(i))
        .map(|i| z[i])
        .fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = (0..z.len())
        .map(|i| if keep(i) { (z[i] - max).exp() } else { 0.0 })
        .collect();
    let s: f64 = e.iter().sum();
    e.iter()
        .map(|v| if s > 0.0 { v / s } else { 0.0 })
        .collect()
}

fn kept(mask: Option<&[f64]>) -> impl Fn(usize) -> bool + '_ {
    move |i| mask.is_none_or(|m| m[i] >= 0.5)
}

#[test]
fn softmax_vs_f64() {
    // Rows of the tensor's own width, then rows of another width than the tensor's columns
    // (a reshaped view of it: rows are always the last dim), then one long row that the GPU
    // splits across cubes.
    for (i, (shape, rows, cols)) in [((9, 50), 9, 50), ((4, 60), 8, 30), ((1, 20000), 1, 20000)]
        .into_iter()
        .enumerate()
    {
        reference_with(
            &format!("softmax_rows_forward {rows}x{cols}"),
            0x7300 + i as u64,
            &[Input::new(shape.0, shape.1, -6.0, 6.0)],
            ALL,
            |t| {
                let mut y = Tensor::default();
                ops::softmax_rows_forward(&t[0].reshaped(rows, cols)?, &mut y)?;
                assert_eq!(y.shape(), (rows, cols));
                y.reshape_(&[shape.0, shape.1])?;
                Ok(y)
            },
            |x| {
                x[0].chunks(cols)
                    .flat_map(|r| softmax(r, |_| true))
                    .collect()
            },
        );
    }
    reference_with(
        "Tensor::softmax_rows_",
        0x7303,
        &[Input::new(8, 65, -4.0, 4.0)],
        ALL,
        |t| {
            let mut y = t[0].try_clone()?;
            y.softmax_rows_()?;
            Ok(y)
        },
        |x| x[0].chunks(65).flat_map(|r| softmax(r, |_| true)).collect(),
    );
    // The flat softmax: all 120 elements of a 6x20 tensor are one vector.
    reference_with(
        "softmax_forward",
        0x7304,
        &[Input::new(6, 20, -4.0, 4.0)],
        ALL,
        |t| {
            let mut p = Tensor::zeros_on(t[0].device(), 3, 3, t[0].dtype())?;
            ops::softmax_forward(&t[0], None, &mut p)?;
            assert_eq!(p.shape(), (6, 20));
            Ok(p)
        },
        |x| softmax(&x[0], |_| true),
    );
    reference_with(
        "softmax_forward masked",
        0x7305,
        &[Input::new(7, 9, -5.0, 5.0), Input::new(7, 9, 0.0, 1.0)],
        ALL,
        |t| {
            let mask = host_f32(&t[1], |v| v)?;
            let mut p = Tensor::default();
            ops::softmax_forward(&t[0], Some(&mask), &mut p)?;
            Ok(p)
        },
        |x| softmax(&x[0], kept(Some(&x[1]))),
    );
    // dl = p (dp - sum(dp p)) over all elements as one vector; dl starts as other values.
    reference_with(
        "softmax_backward",
        0x7306,
        &[Input::new(5, 40, 0.0, 0.05), Input::new(5, 40, -1.0, 1.0)],
        ALL,
        |t| {
            let mut dl = t[1].try_clone()?;
            ops::softmax_backward(&t[0], &t[1], &mut dl)?;
            Ok(dl)
        },
        |x| {
            let s: f64 = x[0].iter().zip(&x[1]).map(|(p, d)| p * d).sum();
            x[0].iter().zip(&x[1]).map(|(p, d)| p * (d - s)).collect()
        },
    );
}

#[test]
fn mse_vs_f64() {
    // The target shaped as a column: only the element counts must match.
    let pair = [Input::new(20, 30, -2.0, 2.0), Input::new(600, 1, -2.0, 2.0)];
    reference_with(
        "mse_vec_forward",
        0x7310,
        &pair,
        F32_ONLY,
        |t| scalar(&t[0], ops::mse_vec_forward(&t[0], &t[1])?),
        |x| {
            let s: f64 = x[0].iter().zip(&x[1]).map(|(p, q)| (p - q).powi(2)).sum();
            vec![s / 600.0]
        },
    );
    reference_with(
        "mse_vec_backward",
        0x7311,
        &pair,
        F32_ONLY,
        |t| {
            let mut d = t[1].try_clone()?; // a used output of another shape
            ops::mse_vec_backward(&t[0], &t[1], &mut d)?;
            assert_eq!(d.shape(), (20, 30));
            Ok(d)
        },
        |x| {
            x[0].iter()
                .zip(&x[1])
                .map(|(p, q)| 2.0 * (p - q) / 600.0)
                .collect()
        },
    );
    let samples = [Input::new(64, 1, -2.0, 2.0), Input::new(64, 1, -2.0, 2.0)];
    for (which, seed) in [("dpred", 0x7312), ("loss", 0x7313)] {
        reference_with(
            &format!("mse_vec_per_sample {which}"),
            seed,
            &samples,
            F32_ONLY,
            |t| {
                let (mut d, mut l) = (t[1].try_clone()?, Tensor::default());
                ops::mse_vec_per_sample(&t[0], &t[1], &mut d, &mut l)?;
                assert_eq!(l.shape(), (64, 1));
                as_row(if which == "dpred" { d } else { l })
            },
            |x| {
                let d = x[0].iter().zip(&x[1]).map(|(p, q)| p - q);
                if which == "dpred" {
                    d.collect()
                } else {
                    d.map(|v| 0.5 * v * v).collect()
                }
            },
        );
    }
    // The host scalar form: (0.5 d^2, d).
    let mut rng = SplitMix64::new(0x7314);
    for _ in 0..50 {
        let (p, q) = (rng.next_f01() * 8.0 - 4.0, rng.next_f01() * 8.0 - 4.0);
        let (loss, grad) = ops::mse_scalar(p, q).unwrap();
        let d = f64::from(p) - f64::from(q);
        assert!(
            (f64::from(grad) - d).abs() <= 1e-6 * d.abs().max(1.0),
            "{p} {q}"
        );
        assert!((f64::from(loss) - 0.5 * d * d).abs() <= 1e-6 * (0.5 * d * d).max(1.0));
    }
}

/// The masked softmax cross-entropy of one segment: `(probs, dlogits, loss)` with
/// `dlogits = p - t` on kept entries (0 on dropped ones) and `loss = sum over kept entries
/// with t > 0 of -t ln(max(p, 1e-12))`.
fn xent(z: &[f64], t: &[f64], mask: Option<&[f64]>) -> (Vec<f64>, Vec<f64>, f64) {
    let keep = kept(mask);
    let p = softmax(z, &keep);
    let d = (0..z.len())
        .map(|i| if keep(i) { p[i] - t[i] } else { 0.0 })
        .collect();
    let loss = (0..z.len())
        .filter(|&i| keep(i) && t[i] > 0.0)
        .map(|i| -t[i] * p[i].max(1e-12).ln())
        .sum();
    (p, d, loss)
}

fn clamp01(v: f32) -> f32 {
    v.clamp(0.0, 1.0)
}

#[test]
fn softmax_cross_entropy_vs_f64() {
    // Targets in [0, 1] with some exact zeros (those add no loss); a mask in [0, 1).
    let ins = [
        Input::new(6, 50, -4.0, 4.0),
        Input::new(6, 50, -0.5, 1.0),
        Input::new(6, 50, 0.0, 1.0),
    ];
    for (form, masked) in [
        ("softmax_xent", true),
        ("softmax_xent_fused", true),
        ("softmax_xent_fused", false),
    ] {
        for (k, which) in ["loss", "probs", "dlogits"].into_iter().enumerate() {
            reference_with(
                &format!("{form} masked={masked} {which}"),
                0x7320 + k as u64,
                &ins,
                F32_ONLY,
                |t| {
                    let target = host_f32(&t[1], clamp01)?;
                    let mask = masked.then_some(&t[2]);
                    // probs and dlogits start as other values (overwritten).
                    let (mut p, mut d) = (t[2].try_clone()?, t[1].try_clone()?);
                    let loss = if form == "softmax_xent" {
                        ops::softmax_xent(&t[0], &target, mask, &mut p, &mut d)?
                    } else {
                        ops::softmax_xent_fused(&t[0], &target, mask, &mut p, &mut d)?
                    };
                    assert_eq!((p.shape(), d.shape()), ((6, 50), (6, 50)));
                    match which {
                        "loss" => scalar(&t[0], loss),
                        "probs" => Ok(p),
                        _ => Ok(d),
                    }
                },
                |x| {
                    let target: Vec<f64> = x[1].iter().map(|v| v.clamp(0.0, 1.0)).collect();
                    let (p, d, loss) = xent(&x[0], &target, masked.then_some(&x[2]));
                    match which {
                        "loss" => vec![loss],
                        "probs" => p,
                        _ => d,
                    }
                },
            );
        }
    }
    // The host-slice form.
    let mut rng = SplitMix64::new(0x7328);
    let n = 300;
    let z = rng.uniform(n, -4.0, 4.0);
    let t: Vec<f32> = rng.uniform(n, -0.5, 1.0).into_iter().map(clamp01).collect();
    let m = rng.uniform(n, 0.0, 1.0);
    let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    for mask in [None, Some(&m[..])] {
        let (mut p, mut d) = (vec![7.0f32; n], vec![7.0f32; n]);
        let loss = ops::softmax_xent_segment(&z, &t, &mut p, &mut d, mask).unwrap();
        let wm = mask.map(wide);
        let (wp, wd, wl) = xent(&wide(&z), &wide(&t), wm.as_deref());
        let narrow = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<_>>();
        let tol = (1e-5, 1e-4);
        let tag = format!("softmax_xent_segment masked={}", mask.is_some());
        assert_close_rows(&format!("{tag} probs"), &narrow(wp), &p, n, tol);
        assert_close_rows(&format!("{tag} dlogits"), &narrow(wd), &d, n, tol);
        assert_close_rows(&format!("{tag} loss"), &[wl as f32], &[loss], 1, tol);
    }
}

#[test]
fn batched_losses_vs_f64() {
    let (b, l) = (5, 50);
    // Heads [0, 10), [10, 10) (empty), [10, 35), [35, 45); columns 45.. belong to no head and
    // keep the values probs and dlogits held before.
    let offsets = [0usize, 10, 10, 35, 45];
    let ins = [
        Input::new(b, l, -4.0, 4.0),
        Input::new(b, l, -0.5, 1.0),
        Input::new(b, l, 0.0, 1.0),
        Input::new(b, l, 2.0, 3.0),
        Input::new(b, l, -3.0, -2.0),
    ];
    for (k, which) in ["loss", "probs", "dlogits"].into_iter().enumerate() {
        reference_with(
            &format!("softmax_xent_fused_batched {which}"),
            0x7330 + k as u64,
            &ins,
            F32_ONLY,
            |t| {
                let target = host_f32(&t[1], clamp01)?;
                let (mut p, mut d, mut loss) =
                    (t[3].try_clone()?, t[4].try_clone()?, Tensor::default());
                ops::softmax_xent_fused_batched(
                    &t[0],
                    &target,
                    Some(&t[2]),
                    &offsets,
                    &mut p,
                    &mut d,
                    &mut loss,
                )?;
                assert_eq!(loss.shape(), (b, 1));
                match which {
                    "loss" => as_row(loss),
                    "probs" => Ok(p),
                    _ => Ok(d),
                }
            },
            |x| {
                let (mut p, mut d, mut loss) = (x[3].clone(), x[4].clone(), vec![0.0; b]);
                for (r, loss) in loss.iter_mut().enumerate() {
                    for h in offsets.windows(2) {
                        let seg = r * l + h[0]..r * l + h[1];
                        let target: Vec<f64> = x[1][seg.clone()]
                            .iter()
                            .map(|v| v.clamp(0.0, 1.0))
                            .collect();
                        let (sp, sd, sl) =
                            xent(&x[0][seg.clone()], &target, Some(&x[2][seg.clone()]));
                        p[seg.clone()].copy_from_slice(&sp);
                        d[seg].copy_from_slice(&sd);
                        *loss += sl;
                    }
                }
                match which {
                    "loss" => loss,
                    "probs" => p,
                    _ => d,
                }
            },
        );
    }

    // Binary cross-entropy with logits, positive weight w: p = sigmoid(z),
    // dl = p (w y + 1 - y) - w y, loss = sum w y softplus(-z) + (1 - y) softplus(z);
    // dropped entries give 0 everywhere.
    let w = 1.5f64;
    let softplus = |v: f64| v.max(0.0) + (-v.abs()).exp().ln_1p();
    let bce = move |x: &[Vec<f64>], masked: bool| {
        let (rows, cols) = (6, 40);
        let (mut p, mut d, mut loss) = (
            vec![0.0; rows * cols],
            vec![0.0; rows * cols],
            vec![0.0; rows],
        );
        for i in 0..rows * cols {
            if masked && x[2][i] < 0.5 {
                continue;
            }
            let (z, y) = (x[0][i], x[1][i].clamp(0.0, 1.0));
            let s = 1.0 / (1.0 + (-z).exp());
            p[i] = s;
            d[i] = s * (w * y + 1.0 - y) - w * y;
            loss[i / cols] += w * y * softplus(-z) + (1.0 - y) * softplus(z);
        }
        [p, d, loss]
    };
    let bins = [
        Input::new(6, 40, -4.0, 4.0),
        Input::new(6, 40, -0.5, 1.5),
        Input::new(6, 40, 0.0, 1.0),
    ];
    for masked in [true, false] {
        for (k, which) in ["probs", "dlogits", "loss"].into_iter().enumerate() {
            reference_with(
                &format!("bce_with_logits_fused_batched masked={masked} {which}"),
                0x7340 + k as u64,
                &bins,
                F32_ONLY,
                |t| {
                    let target = host_f32(&t[1], clamp01)?;
                    let (mut p, mut d, mut loss) =
                        (t[2].try_clone()?, t[0].try_clone()?, Tensor::default());
                    ops::bce_with_logits_fused_batched(
                        &t[0],
                        &target,
                        masked.then_some(&t[2]),
                        w as f32,
                        &mut p,
                        &mut d,
                        &mut loss,
                    )?;
                    assert_eq!(loss.shape(), (6, 1));
                    match which {
                        "probs" => Ok(p),
                        "dlogits" => Ok(d),
                        _ => as_row(loss),
                    }
                },
                |x| bce(x, masked)[k].clone(),
            );
        }
    }
}
