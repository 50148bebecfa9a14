//! Normalizations and their gradients against float64 formulas written here from each op's
//! definition (two-pass, biased variance; not the CPU crate's code), on every device and in
//! every dtype the op takes. Parameter gradients start from a known non-zero tensor, so
//! accumulation is checked; input gradients start from unrelated contents, so overwriting
//! is checked.

use brotensor::{ops, Dtype, Result, Tensor};
use brotensor_tests::reference::as_row;
use brotensor_tests::{reference_with, Check, Input};

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

/// The batched LayerNorm statistics are F32 whatever the input dtype.
const STATS: Check = Check {
    same_dtype: false,
    ..ALL
};

const EPS: f64 = 1e-5;

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Mean and biased variance, two-pass.
fn moments(v: &[f64]) -> (f64, f64) {
    let m = mean(v);
    (
        m,
        v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64,
    )
}

/// Mean and `1 / sqrt(var + eps)`.
fn stats(v: &[f64], eps: f64) -> (f64, f64) {
    let (m, var) = moments(v);
    (m, 1.0 / (var + eps).sqrt())
}

fn plus(a: &[f64], b: &[f64]) -> Vec<f64> {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// Per row of `x` (rows of `d`): `(xhat, mean, rstd)`.
fn layernorm_rows(x: &[f64], d: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut xhat, mut means, mut rstds) = (Vec::new(), Vec::new(), Vec::new());
    for r in x.chunks(d) {
        let (m, rs) = stats(r, EPS);
        xhat.extend(r.iter().map(|v| (v - m) * rs));
        means.push(m);
        rstds.push(rs);
    }
    (xhat, means, rstds)
}

/// `gamma xhat + beta` per row.
fn affine(xhat: &[f64], g: &[f64], b: &[f64]) -> Vec<f64> {
    let d = g.len();
    xhat.iter()
        .enumerate()
        .map(|(i, v)| v * g[i % d] + b[i % d])
        .collect()
}

/// LayerNorm gradients per row of `d` from the definition: `(dx, sum dy xhat, sum dy)`,
/// `dx = rstd / d (d g dy - sum g dy - xhat sum(g dy xhat))`.
fn layernorm_grads(x: &[f64], g: &[f64], dy: &[f64], d: usize) -> [Vec<f64>; 3] {
    let (xhat, _, rstds) = layernorm_rows(x, d);
    let (mut dx, mut dg, mut db) = (vec![0.0; x.len()], vec![0.0; d], vec![0.0; d]);
    for (r, &rs) in rstds.iter().enumerate() {
        let at = r * d;
        let dxh: Vec<f64> = (0..d).map(|j| dy[at + j] * g[j]).collect();
        let s1: f64 = dxh.iter().sum();
        let s2: f64 = (0..d).map(|j| dxh[j] * xhat[at + j]).sum();
        for j in 0..d {
            dx[at + j] = rs / d as f64 * (d as f64 * dxh[j] - s1 - xhat[at + j] * s2);
            dg[j] += dy[at + j] * xhat[at + j];
            db[j] += dy[at + j];
        }
    }
    [dx, dg, db]
}

#[test]
fn batched_layernorm_vs_f64() {
    let (r, d) = (12, 64);
    let fwd = [
        Input::new(r, d, -1.0, 3.0),
        Input::new(d, 1, 0.5, 1.5),
        Input::new(d, 1, -0.5, 0.5),
    ];
    reference_with(
        "layernorm_forward_inference_batched",
        0x7200,
        &fwd,
        ALL,
        |t| {
            let mut y = Tensor::default();
            ops::layernorm_forward_inference_batched(&t[0], &t[1], &t[2], EPS as f32, &mut y)?;
            Ok(y)
        },
        |x| affine(&layernorm_rows(&x[0], d).0, &x[1], &x[2]),
    );
    reference_with(
        "layernorm_forward_inference_batched_fp16",
        0x7201,
        &fwd,
        Check {
            dtypes: &[Dtype::F16, Dtype::BF16],
            ..ALL
        },
        |t| {
            // Into a used output of another shape.
            let mut y = t[1].try_clone()?;
            ops::layernorm_forward_inference_batched_fp16(&t[0], &t[1], &t[2], EPS as f32, &mut y)?;
            Ok(y)
        },
        |x| affine(&layernorm_rows(&x[0], d).0, &x[1], &x[2]),
    );
    let with_caches = |which: &'static str| {
        move |t: &[Tensor]| -> Result<Tensor> {
            let (mut y, mut xh, mut m, mut rs) = Default::default();
            ops::layernorm_forward_batched_with_caches(
                &t[0], &t[1], &t[2], EPS as f32, &mut y, &mut xh, &mut m, &mut rs,
            )?;
            assert_eq!((m.dtype(), rs.dtype()), (Dtype::F32, Dtype::F32));
            match which {
                "y" => Ok(y),
                "xhat" => Ok(xh),
                "mean" => as_row(m),
                _ => as_row(rs),
            }
        }
    };
    reference_with(
        "layernorm_forward_batched_with_caches y",
        0x7202,
        &fwd,
        ALL,
        with_caches("y"),
        |x| affine(&layernorm_rows(&x[0], d).0, &x[1], &x[2]),
    );
    reference_with(
        "layernorm_forward_batched_with_caches xhat",
        0x7203,
        &fwd,
        ALL,
        with_caches("xhat"),
        |x| layernorm_rows(&x[0], d).0,
    );
    reference_with(
        "layernorm_forward_batched_with_caches mean",
        0x7204,
        &fwd,
        STATS,
        with_caches("mean"),
        |x| layernorm_rows(&x[0], d).1,
    );
    reference_with(
        "layernorm_forward_batched_with_caches rstd",
        0x7205,
        &fwd,
        STATS,
        with_caches("rstd"),
        |x| layernorm_rows(&x[0], d).2,
    );

    // The backward from the forward's caches: dx starts as other values (overwritten),
    // dgamma and dbeta start non-zero (they accumulate).
    let bwd = [
        fwd[0],
        fwd[1],
        fwd[2],
        Input::new(r, d, -1.0, 1.0),
        Input::new(d, 1, 0.5, 1.5),
        Input::new(d, 1, 0.5, 1.5),
    ];
    let backward = |which: &'static str| {
        move |t: &[Tensor]| -> Result<Tensor> {
            let (mut y, mut xh, mut m, mut rs) = Default::default();
            ops::layernorm_forward_batched_with_caches(
                &t[0], &t[1], &t[2], EPS as f32, &mut y, &mut xh, &mut m, &mut rs,
            )?;
            let (mut dx, mut dg, mut db) =
                (t[0].try_clone()?, t[4].try_clone()?, t[5].try_clone()?);
            ops::layernorm_backward_batched_with_caches(
                &t[3], &xh, &t[1], &rs, &mut dx, &mut dg, &mut db,
            )?;
            match which {
                "dx" => Ok(dx),
                "dgamma" => as_row(dg),
                _ => as_row(db),
            }
        }
    };
    reference_with(
        "layernorm_backward_batched_with_caches dx",
        0x7206,
        &bwd,
        ALL,
        backward("dx"),
        |x| layernorm_grads(&x[0], &x[1], &x[3], d)[0].clone(),
    );
    reference_with(
        "layernorm_backward_batched_with_caches dgamma",
        0x7207,
        &bwd,
        ALL,
        backward("dgamma"),
        |x| plus(&x[4], &layernorm_grads(&x[0], &x[1], &x[3], d)[1]),
    );
    reference_with(
        "layernorm_backward_batched_with_caches dbeta",
        0x7208,
        &bwd,
        ALL,
        backward("dbeta"),
        |x| plus(&x[5], &layernorm_grads(&x[0], &x[1], &x[3], d)[2]),
    );
}

#[test]
fn single_vector_layernorm_vs_f64() {
    // All of a 6x40 tensor is one vector of 240.
    let (r, c) = (6, 40);
    let n = r * c;
    let ins = [
        Input::new(r, c, 0.5, 2.5),
        Input::new(n, 1, 0.5, 1.5),
        Input::new(n, 1, -0.5, 0.5),
        Input::new(r, c, -1.0, 1.0),
        Input::new(n, 1, 0.5, 1.5),
        Input::new(n, 1, 0.5, 1.5),
    ];
    let forward = |which: &'static str| {
        move |t: &[Tensor]| -> Result<Tensor> {
            let (mut y, mut xh) = (Tensor::default(), Tensor::default());
            let (m, rs) = ops::layernorm_forward(&t[0], &t[1], &t[2], EPS as f32, &mut y, &mut xh)?;
            assert_eq!((y.shape(), xh.shape()), ((r, c), (r, c)));
            match which {
                "y" => Ok(y),
                "xhat" => Ok(xh),
                _ => Tensor::from_slice_on(t[0].device(), &[m, rs], 1, 2),
            }
        }
    };
    reference_with(
        "layernorm_forward y",
        0x7210,
        &ins[..3],
        ALL,
        forward("y"),
        |x| affine(&layernorm_rows(&x[0], n).0, &x[1], &x[2]),
    );
    reference_with(
        "layernorm_forward xhat",
        0x7211,
        &ins[..3],
        ALL,
        forward("xhat"),
        |x| layernorm_rows(&x[0], n).0,
    );
    reference_with(
        "layernorm_forward (mean, rstd)",
        0x7212,
        &ins[..3],
        STATS,
        forward("stats"),
        |x| {
            let (m, rs) = stats(&x[0], EPS);
            vec![m, rs]
        },
    );
    let backward = |which: &'static str| {
        move |t: &[Tensor]| -> Result<Tensor> {
            let (mut y, mut xh) = (Tensor::default(), Tensor::default());
            let (_, rs) = ops::layernorm_forward(&t[0], &t[1], &t[2], EPS as f32, &mut y, &mut xh)?;
            let (mut dx, mut dg, mut db) =
                (t[0].try_clone()?, t[4].try_clone()?, t[5].try_clone()?);
            ops::layernorm_backward(&t[3], &xh, &t[1], rs, &mut dx, &mut dg, &mut db)?;
            assert_eq!(dx.shape(), (r, c));
            match which {
                "dx" => Ok(dx),
                "dgamma" => as_row(dg),
                _ => as_row(db),
            }
        }
    };
    reference_with(
        "layernorm_backward dx",
        0x7213,
        &ins,
        ALL,
        backward("dx"),
        |x| layernorm_grads(&x[0], &x[1], &x[3], n)[0].clone(),
    );
    reference_with(
        "layernorm_backward dgamma",
        0x7214,
        &ins,
        ALL,
        backward("dgamma"),
        |x| plus(&x[4], &layernorm_grads(&x[0], &x[1], &x[3], n)[1]),
    );
    reference_with(
        "layernorm_backward dbeta",
        0x7215,
        &ins,
        ALL,
        backward("dbeta"),
        |x| plus(&x[5], &layernorm_grads(&x[0], &x[1], &x[3], n)[2]),
    );
}

/// Per row of `d`: `1 / sqrt(sum(x^2) / div + eps)`.
fn inv_norms(x: &[f64], d: usize, div: f64, eps: f64) -> Vec<f64> {
    x.chunks(d)
        .map(|r| 1.0 / (r.iter().map(|v| v * v).sum::<f64>() / div + eps).sqrt())
        .collect()
}

/// RMSNorm gradients per row of `d` from the definition: `(dx, sum dy x rrms)` with
/// `dx = rrms (g dy - x rrms^2 sum(x dy g) / d)`.
fn rms_grads(x: &[f64], g: &[f64], dy: &[f64], d: usize, eps: f64) -> [Vec<f64>; 2] {
    let rr = inv_norms(x, d, d as f64, eps);
    let (mut dx, mut dg) = (vec![0.0; x.len()], vec![0.0; d]);
    for (r, &k) in rr.iter().enumerate() {
        let at = r * d;
        let s: f64 = (0..d).map(|j| x[at + j] * dy[at + j] * g[j]).sum();
        for j in 0..d {
            dx[at + j] = k * (g[j] * dy[at + j] - x[at + j] * k * k * s / d as f64);
            dg[j] += dy[at + j] * x[at + j] * k;
        }
    }
    [dx, dg]
}

#[test]
fn rms_pixel_and_l2_norms_vs_f64() {
    let (b, d) = (10, 48);
    let eps = 1e-6;
    let ins = [
        Input::new(b, d, -2.0, 2.0),
        Input::new(d, 1, 0.5, 1.5),
        Input::new(b, d, -1.0, 1.0),
        Input::new(d, 1, 0.5, 1.5),
    ];
    reference_with(
        "rms_norm_forward",
        0x7220,
        &ins[..2],
        ALL,
        |t| {
            let mut y = Tensor::default();
            ops::rms_norm_forward(&t[0], &t[1], eps as f32, &mut y)?;
            Ok(y)
        },
        |x| {
            let rr = inv_norms(&x[0], d, d as f64, eps);
            (0..b * d)
                .map(|i| x[0][i] * x[1][i % d] * rr[i / d])
                .collect()
        },
    );
    let backward = |which: &'static str| {
        move |t: &[Tensor]| -> Result<Tensor> {
            let (mut dx, mut dg) = (t[2].try_clone()?, t[3].try_clone()?);
            dx.reshape_(&[1, b * d])?; // a used output of another shape
            ops::rms_norm_backward(&t[0], &t[1], &t[2], eps as f32, &mut dx, &mut dg)?;
            if which == "dx" {
                assert_eq!(dx.shape(), (b, d));
                Ok(dx)
            } else {
                as_row(dg)
            }
        }
    };
    reference_with(
        "rms_norm_backward dx",
        0x7221,
        &ins,
        ALL,
        backward("dx"),
        |x| rms_grads(&x[0], &x[1], &x[2], d, eps)[0].clone(),
    );
    reference_with(
        "rms_norm_backward dgamma",
        0x7222,
        &ins,
        ALL,
        backward("dgamma"),
        |x| plus(&x[3], &rms_grads(&x[0], &x[1], &x[2], d, eps)[1]),
    );

    // PixelNorm: an RMSNorm of unit scale over rows of C.
    let (n, c) = (12, 32);
    let px = [Input::new(n, c, -2.0, 2.0), Input::new(n, c, -1.0, 1.0)];
    let pe = 1e-8;
    reference_with(
        "pixel_norm_forward",
        0x7223,
        &px[..1],
        ALL,
        |t| {
            let mut y = Tensor::default();
            ops::pixel_norm_forward(&t[0], pe as f32, &mut y)?;
            Ok(y)
        },
        |x| {
            let rr = inv_norms(&x[0], c, c as f64, pe);
            (0..n * c).map(|i| x[0][i] * rr[i / c]).collect()
        },
    );
    reference_with(
        "pixel_norm_backward",
        0x7224,
        &px,
        ALL,
        |t| {
            let mut dx = t[0].try_clone()?;
            ops::pixel_norm_backward(&t[0], &t[1], pe as f32, &mut dx)?;
            Ok(dx)
        },
        |x| {
            // dx = r dy - r^3 / C sum(dy x) x
            let rr = inv_norms(&x[0], c, c as f64, pe);
            let mut dx = vec![0.0; n * c];
            for (r, &k) in rr.iter().enumerate() {
                let at = r * c;
                let s: f64 = (0..c).map(|j| x[0][at + j] * x[1][at + j]).sum();
                for j in 0..c {
                    dx[at + j] = k * x[1][at + j] - k * k * k * s / c as f64 * x[0][at + j];
                }
            }
            dx
        },
    );

    // Per-head L2 norm of (L, H * hd): y = x / sqrt(sum x^2 + eps) per head slice.
    let (l, h, hd) = (6, 3, 16);
    let lx = [
        Input::new(l, h * hd, -2.0, 2.0),
        Input::new(l, h * hd, -1.0, 1.0),
    ];
    reference_with(
        "l2_norm_forward",
        0x7225,
        &lx[..1],
        ALL,
        |t| {
            let mut y = Tensor::default();
            ops::l2_norm_forward(&t[0], hd, h, eps as f32, &mut y)?;
            assert_eq!(y.shape(), (l, h * hd));
            Ok(y)
        },
        |x| {
            let nn = inv_norms(&x[0], hd, 1.0, eps);
            (0..l * h * hd).map(|i| x[0][i] * nn[i / hd]).collect()
        },
    );
    reference_with(
        "l2_norm_backward",
        0x7226,
        &lx,
        ALL,
        |t| {
            let mut dx = t[1].try_clone()?;
            ops::l2_norm_backward(&t[0], &t[1], hd, h, eps as f32, &mut dx)?;
            assert_eq!(dx.shape(), (l, h * hd));
            Ok(dx)
        },
        |x| {
            // dx = nn (dy - x (x . dy) nn^2) per head slice.
            let nn = inv_norms(&x[0], hd, 1.0, eps);
            let mut dx = vec![0.0; l * h * hd];
            for (s, &k) in nn.iter().enumerate() {
                let at = s * hd;
                let xdy: f64 = (0..hd).map(|j| x[0][at + j] * x[1][at + j]).sum();
                for j in 0..hd {
                    dx[at + j] = k * (x[1][at + j] - x[0][at + j] * xdy * k * k);
                }
            }
            dx
        },
    );
}

/// GroupNorm of `(n, c * hw)` with `groups` groups from the definition: `(y, dx, dgamma,
/// dbeta)`, each group's `c / groups * hw` contiguous values normalized together.
fn group_norm_f64(
    x: &[f64],
    (g, b, dy): (&[f64], &[f64], &[f64]),
    (n, c, hw): (usize, usize, usize),
    groups: usize,
    eps: f64,
) -> [Vec<f64>; 4] {
    let m = c / groups * hw;
    let (mut y, mut dx, mut dg, mut db) = (
        vec![0.0; x.len()],
        vec![0.0; x.len()],
        vec![0.0; c],
        vec![0.0; c],
    );
    for s in 0..n * groups {
        let at = s * m;
        let (mu, rs) = stats(&x[at..at + m], eps);
        let ch = |j: usize| (s % groups) * (c / groups) + j / hw;
        let xh = |j: usize| (x[at + j] - mu) * rs;
        let dxh = |j: usize| dy[at + j] * g[ch(j)];
        let s1: f64 = (0..m).map(dxh).sum();
        let s2: f64 = (0..m).map(|j| dxh(j) * xh(j)).sum();
        for j in 0..m {
            y[at + j] = xh(j) * g[ch(j)] + b[ch(j)];
            dx[at + j] = rs / m as f64 * (m as f64 * dxh(j) - s1 - xh(j) * s2);
            dg[ch(j)] += dy[at + j] * xh(j);
            db[ch(j)] += dy[at + j];
        }
    }
    [y, dx, dg, db]
}

#[test]
fn group_norm_vs_f64() {
    let dims = (2usize, 6usize, 3usize, 4usize);
    let (n, c, h, w) = dims;
    let hw = h * w;
    let ins = [
        Input::new(n, c * hw, -1.0, 2.0),
        Input::new(c, 1, 0.5, 1.5),
        Input::new(c, 1, -0.5, 0.5),
        Input::new(n, c * hw, -1.0, 1.0),
        Input::new(c, 1, 0.5, 1.5),
        Input::new(c, 1, 0.5, 1.5),
    ];
    let f = move |x: &[Vec<f64>], groups| {
        group_norm_f64(&x[0], (&x[1], &x[2], &x[3]), (n, c, hw), groups, EPS)
    };
    reference_with(
        "group_norm_forward",
        0x7230,
        &ins[..3],
        ALL,
        |t| {
            let mut y = Tensor::default();
            ops::group_norm_forward(&t[0], &t[1], &t[2], dims, 3, EPS as f32, &mut y)?;
            Ok(y)
        },
        |x| {
            let dy = vec![0.0; x[0].len()];
            group_norm_f64(&x[0], (&x[1], &x[2], &dy), (n, c, hw), 3, EPS)[0].clone()
        },
    );
    let backward = |which: &'static str| {
        move |t: &[Tensor]| -> Result<Tensor> {
            let (mut dx, mut dg, mut db) =
                (t[3].try_clone()?, t[4].try_clone()?, t[5].try_clone()?);
            ops::group_norm_backward(
                &t[0], &t[1], &t[3], dims, 2, EPS as f32, &mut dx, &mut dg, &mut db,
            )?;
            match which {
                "dx" => Ok(dx),
                "dgamma" => as_row(dg),
                _ => as_row(db),
            }
        }
    };
    reference_with(
        "group_norm_backward dx",
        0x7231,
        &ins,
        ALL,
        backward("dx"),
        |x| f(x, 2)[1].clone(),
    );
    reference_with(
        "group_norm_backward dgamma",
        0x7232,
        &ins,
        ALL,
        backward("dgamma"),
        |x| plus(&x[4], &f(x, 2)[2]),
    );
    reference_with(
        "group_norm_backward dbeta",
        0x7233,
        &ins,
        ALL,
        backward("dbeta"),
        |x| plus(&x[5], &f(x, 2)[3]),
    );
}

/// The element indices of channel `ch` in an NCHW `(n, c * hw)` tensor.
fn channel(ch: usize, (n, c, hw): (usize, usize, usize)) -> impl Iterator<Item = usize> {
    (0..n).flat_map(move |s| (0..hw).map(move |p| s * c * hw + ch * hw + p))
}

/// BatchNorm training from the definition: per channel `(mean, rstd, unbiased var)` over
/// the `n * hw` values.
fn batch_stats(x: &[f64], shape: (usize, usize, usize), eps: f64) -> Vec<(f64, f64, f64)> {
    (0..shape.1)
        .map(|ch| {
            let v: Vec<f64> = channel(ch, shape).map(|i| x[i]).collect();
            let (m, var) = moments(&v);
            let len = v.len() as f64;
            (m, 1.0 / (var + eps).sqrt(), var * len / (len - 1.0))
        })
        .collect()
}

#[test]
fn batch_norm_vs_f64() {
    let dims = (3usize, 4usize, 2usize, 5usize);
    let (n, c, h, w) = dims;
    let shape = (n, c, h * w);
    let momentum = 0.1f32;
    let ins = [
        Input::new(n, c * h * w, -1.0, 2.0),
        Input::new(c, 1, 0.5, 1.5),
        Input::new(c, 1, -0.5, 0.5),
        Input::new(c, 1, -0.2, 0.2),
        Input::new(c, 1, 0.5, 1.5),
        Input::new(n, c * h * w, -1.0, 1.0),
        Input::new(c, 1, 0.5, 1.5),
        Input::new(c, 1, 0.5, 1.5),
    ];
    let forward = |which: &'static str| {
        move |t: &[Tensor]| -> Result<Tensor> {
            let (mut rm, mut rv) = (t[3].try_clone()?, t[4].try_clone()?);
            let (mut y, mut sm, mut sr) = Default::default();
            ops::batch_norm_forward(
                &t[0], &t[1], &t[2], dims, EPS as f32, momentum, &mut rm, &mut rv, &mut y, &mut sm,
                &mut sr,
            )?;
            match which {
                "y" => Ok(y),
                "saved_mean" => as_row(sm),
                "saved_rstd" => as_row(sr),
                "running_mean" => as_row(rm),
                _ => as_row(rv),
            }
        }
    };
    // The running statistics move by momentum 0.1 toward the batch's (unbiased variance).
    let expect = move |which: &str, x: &[Vec<f64>]| -> Vec<f64> {
        let st = batch_stats(&x[0], shape, EPS);
        let per_channel = |f: &dyn Fn(usize, (f64, f64, f64)) -> f64| {
            st.iter().enumerate().map(|(ch, &s)| f(ch, s)).collect()
        };
        match which {
            "y" => (0..x[0].len())
                .map(|i| {
                    let ch = (i / (h * w)) % c;
                    let (mu, rs, _) = st[ch];
                    (x[0][i] - mu) * rs * x[1][ch] + x[2][ch]
                })
                .collect(),
            "saved_mean" => per_channel(&|_, s| s.0),
            "saved_rstd" => per_channel(&|_, s| s.1),
            "running_mean" => per_channel(&|ch, s| 0.9 * x[3][ch] + 0.1 * s.0),
            _ => per_channel(&|ch, s| 0.9 * x[4][ch] + 0.1 * s.2),
        }
    };
    for (k, which) in [
        "y",
        "saved_mean",
        "saved_rstd",
        "running_mean",
        "running_var",
    ]
    .into_iter()
    .enumerate()
    {
        reference_with(
            &format!("batch_norm_forward {which}"),
            0x7240 + k as u64,
            &ins[..5],
            F32_ONLY,
            forward(which),
            |x| expect(which, x),
        );
    }
    reference_with(
        "batch_norm_inference",
        0x7248,
        &ins[..5],
        ALL,
        |t| {
            let mut y = t[0].try_clone()?;
            ops::batch_norm_inference(&t[0], &t[1], &t[2], &t[3], &t[4], dims, EPS as f32, &mut y)?;
            Ok(y)
        },
        |x| {
            (0..x[0].len())
                .map(|i| {
                    let ch = (i / (h * w)) % c;
                    let a = x[1][ch] / (x[4][ch] + EPS).sqrt();
                    (x[0][i] - x[3][ch]) * a + x[2][ch]
                })
                .collect()
        },
    );
    // Gradients from the forward's saved statistics; dgamma, dbeta accumulate.
    let backward = |which: &'static str| {
        move |t: &[Tensor]| -> Result<Tensor> {
            let (mut rm, mut rv) = (t[3].try_clone()?, t[4].try_clone()?);
            let (mut y, mut sm, mut sr) = Default::default();
            ops::batch_norm_forward(
                &t[0], &t[1], &t[2], dims, EPS as f32, momentum, &mut rm, &mut rv, &mut y, &mut sm,
                &mut sr,
            )?;
            let (mut dx, mut dg, mut db) =
                (t[0].try_clone()?, t[6].try_clone()?, t[7].try_clone()?);
            ops::batch_norm_backward(
                &t[0], &t[1], &sm, &sr, &t[5], dims, &mut dx, &mut dg, &mut db,
            )?;
            match which {
                "dx" => Ok(dx),
                "dgamma" => as_row(dg),
                _ => as_row(db),
            }
        }
    };
    // dx = rstd g (dy - (sum dy + xhat sum(dy xhat)) / M); dgamma += sum dy xhat; dbeta += sum dy.
    let grads = move |x: &[Vec<f64>]| {
        let st = batch_stats(&x[0], shape, EPS);
        let mut dx = vec![0.0; x[0].len()];
        let (mut dg, mut db) = (x[6].clone(), x[7].clone());
        for (ch, &(mu, rs, _)) in st.iter().enumerate() {
            let idx: Vec<usize> = channel(ch, shape).collect();
            let mm = idx.len() as f64;
            let xh = |i: usize| (x[0][i] - mu) * rs;
            let s_dy: f64 = idx.iter().map(|&i| x[5][i]).sum();
            let s_dyx: f64 = idx.iter().map(|&i| x[5][i] * xh(i)).sum();
            for &i in &idx {
                dx[i] = rs * x[1][ch] * (x[5][i] - (s_dy + xh(i) * s_dyx) / mm);
            }
            dg[ch] += s_dyx;
            db[ch] += s_dy;
        }
        [dx, dg, db]
    };
    for (k, which) in ["dx", "dgamma", "dbeta"].into_iter().enumerate() {
        reference_with(
            &format!("batch_norm_backward {which}"),
            0x7249 + k as u64,
            &ins,
            F32_ONLY,
            backward(which),
            |x| grads(x)[k].clone(),
        );
    }
}

#[test]
fn l2_normalize_nchw_vs_f64() {
    // y = x / max(||x_c||, eps), the norm over the C channels at one position. Moderate
    // values; the second case has a large eps so that the floor applies to some pixels.
    for (i, (dims, lo, hi, eps)) in [
        ((2usize, 5usize, 3usize, 4usize), -2.0f32, 2.0f32, 1e-6f64),
        ((2, 4, 2, 5), -0.6, 0.6, 0.5),
    ]
    .into_iter()
    .enumerate()
    {
        let (n, c, h, w) = dims;
        let hw = h * w;
        reference_with(
            &format!("l2_normalize_nchw_forward eps={eps}"),
            0x7250 + i as u64,
            &[Input::new(n, c * hw, lo, hi)],
            ALL,
            |t| {
                let mut y = Tensor::default();
                ops::l2_normalize_nchw_forward(&t[0], dims, eps as f32, &mut y)?;
                Ok(y)
            },
            |x| {
                let mut y = vec![0.0; x[0].len()];
                for s in 0..n {
                    for p in 0..hw {
                        let at = |ch: usize| s * c * hw + ch * hw + p;
                        let norm = (0..c).map(|ch| x[0][at(ch)].powi(2)).sum::<f64>().sqrt();
                        for ch in 0..c {
                            y[at(ch)] = x[0][at(ch)] / norm.max(eps);
                        }
                    }
                }
                y
            },
        );
    }
}
