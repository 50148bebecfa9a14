//! The training ops: forward caches and outputs, backward gradients (with accumulation into
//! pre-filled weight and bias gradients), the finite-difference check of the reference, and
//! the error cases.

use brotensor::ops::{
    self, AttentionCaches, BiasGrads, ProjectionBiases, ProjectionGrads, Projections,
};
use brotensor::{Device, Dtype, Error, Tensor};
use brotensor_tests::SplitMix64;

use super::reference::{self as r, Problem};
use super::{cases, check, filled, input, mask_on, ran, rand};

/// Which training pair runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Single,
    Mha,
    SelfTrain,
    Cross,
}

/// The host data of one case.
struct Data {
    lq: usize,
    lk: usize,
    d: usize,
    dkv: usize,
    nh: usize,
    x: Vec<f32>,
    ctx: Option<Vec<f32>>,
    w: [Vec<f32>; 4],
    b: Option<[Vec<f32>; 4]>,
    mask: Option<Vec<f32>>,
    d_o: Vec<f32>,
    /// Pre-filled weight and bias gradients (they must accumulate onto these).
    pre_w: [Vec<f32>; 4],
    pre_b: [Vec<f32>; 4],
}

#[allow(clippy::too_many_arguments)]
fn data(
    seed: u64,
    (lq, lk, d, dkv, nh): (usize, usize, usize, usize, usize),
    cross: bool,
    biases: bool,
    mask: Option<Vec<f32>>,
) -> Data {
    let mut g = SplitMix64::new(seed);
    let x = rand(&mut g, lq * d, -1.0, 1.0);
    let ctx = cross.then(|| rand(&mut g, lk * dkv, -1.0, 1.0));
    let ws = [d, dkv, dkv, d];
    let w = ws.map(|i| rand(&mut g, d * i, -0.6, 0.6));
    let b = biases.then(|| [0; 4].map(|_| rand(&mut g, d, -0.3, 0.3)));
    let d_o = rand(&mut g, lq * d, -1.0, 1.0);
    let pre_w = ws.map(|i| rand(&mut g, d * i, -0.5, 0.5));
    let pre_b = [0; 4].map(|_| rand(&mut g, d, -0.5, 0.5));
    Data {
        lq,
        lk,
        d,
        dkv,
        nh,
        x,
        ctx,
        w,
        b,
        mask,
        d_o,
        pre_w,
        pre_b,
    }
}

fn run(case: &str, kind: Kind, dt: &Data) {
    let (lq, lk, d, dkv, nh) = (dt.lq, dt.lk, dt.d, dt.dkv, dt.nh);
    let wdims = [(d, d), (d, dkv), (d, dkv), (d, d)];
    for (device, dtype) in cases() {
        let tag = format!("{case} on {device} {dtype}");
        let (x, xv) = input(device, dtype, &dt.x, lq, d);
        let ctx = dt.ctx.as_ref().map(|c| input(device, dtype, c, lk, dkv));
        let ws: Vec<(Tensor, Vec<f64>)> = (0..4)
            .map(|i| input(device, dtype, &dt.w[i], wdims[i].0, wdims[i].1))
            .collect();
        let bs: Option<Vec<(Tensor, Vec<f64>)>> =
            dt.b.as_ref()
                .map(|b| b.iter().map(|v| input(device, dtype, v, d, 1)).collect());
        let mask = dt.mask.as_ref().map(|m| mask_on(device, m));
        let (d_o, dov) = input(device, dtype, &dt.d_o, lq, d);
        let w = Projections {
            wq: &ws[0].0,
            wk: &ws[1].0,
            wv: &ws[2].0,
            wo: &ws[3].0,
        };
        let b = bs
            .as_ref()
            .map_or(ProjectionBiases::default(), |b| ProjectionBiases {
                bq: Some(&b[0].0),
                bk: Some(&b[1].0),
                bv: Some(&b[2].0),
                bo: Some(&b[3].0),
            });
        let mut c = AttentionCaches::default();
        let mut o = Tensor::default();
        let m = mask.as_ref();
        let fwd = match kind {
            Kind::Single => ops::attention_forward(&x, w, m, &mut c, &mut o),
            Kind::Mha => ops::mha_forward(&x, w, b, m, nh, &mut c, &mut o),
            Kind::SelfTrain => ops::self_attention_forward_train(&x, w, m, nh, &mut c, &mut o),
            Kind::Cross => {
                let ctx = &ctx.as_ref().unwrap().0;
                ops::cross_attention_forward_train(&x, ctx, w, m, nh, &mut c, &mut o)
            }
        };
        let Some(()) = ran(case, device, dtype, fwd) else {
            continue;
        };
        let maskv: Option<Vec<f64>> = dt
            .mask
            .as_ref()
            .map(|m| m.iter().map(|&v| f64::from(v)).collect());
        let wv: Vec<&[f64]> = ws.iter().map(|w| &w.1[..]).collect();
        let bv: [Option<&[f64]>; 4] = match &bs {
            Some(b) => [0, 1, 2, 3].map(|i| Some(&b[i].1[..])),
            None => [None; 4],
        };
        let mut p = Problem::selfish(&xv, lq, d, [wv[0], wv[1], wv[2], wv[3]], nh);
        p.b = bv;
        p.mask = maskv.as_deref();
        if let Some((_, cv)) = &ctx {
            p.ctx = Some(cv);
            p.lk = lk;
            p.dkv = dkv;
            p.gate = lq == lk;
        }
        let f = r::forward(&p);
        let hd = d / nh;
        check(&format!("{tag} O"), &f.o, &o, d, dtype);
        check(&format!("{tag} Qh"), &f.qh, &c.q, hd, dtype);
        check(&format!("{tag} Kh"), &f.kh, &c.k, hd, dtype);
        check(&format!("{tag} Vh"), &f.vh, &c.v, hd, dtype);
        check(&format!("{tag} Attnh"), &f.attn, &c.attn, lk, dtype);
        check(&format!("{tag} Yconcat"), &f.y, &c.y, d, dtype);
        assert_eq!(c.attn.dims(), [nh * lq, lk], "{tag}");

        let mut gw: Vec<Tensor> = (0..4)
            .map(|i| filled(device, dtype, &dt.pre_w[i], wdims[i].0, wdims[i].1))
            .collect();
        let mut gb: Vec<Tensor> = (0..4)
            .map(|i| filled(device, dtype, &dt.pre_b[i], d, 1))
            .collect();
        let mut dx = Tensor::default();
        let mut dctx = Tensor::default();
        let [g0, g1, g2, g3] = &mut gw[..] else {
            unreachable!()
        };
        let g = ProjectionGrads {
            dwq: g0,
            dwk: g1,
            dwv: g2,
            dwo: g3,
        };
        let [b0, b1, b2, b3] = &mut gb[..] else {
            unreachable!()
        };
        let bwd = match kind {
            Kind::Single => ops::attention_backward(&d_o, &x, &c, w, m, &mut dx, g),
            Kind::Mha => {
                let bg = if dt.b.is_some() {
                    BiasGrads {
                        dbq: Some(b0),
                        dbk: Some(b1),
                        dbv: Some(b2),
                        dbo: Some(b3),
                    }
                } else {
                    BiasGrads::default()
                };
                ops::mha_backward(&d_o, &x, &c, w, m, nh, &mut dx, g, bg)
            }
            Kind::SelfTrain => ops::self_attention_backward(&d_o, &x, &c, w, m, nh, &mut dx, g),
            Kind::Cross => {
                let ctx = &ctx.as_ref().unwrap().0;
                ops::cross_attention_backward(&d_o, &x, ctx, &c, w, m, nh, &mut dx, &mut dctx, g)
            }
        };
        bwd.unwrap_or_else(|e| panic!("{tag} backward: {e}"));
        let bw = r::backward(&p, &f, &dov);
        check(&format!("{tag} dX"), &bw.dx, &dx, d, dtype);
        if kind == Kind::Cross {
            check(&format!("{tag} dCtx"), &bw.dctx, &dctx, dkv, dtype);
        }
        let names = ["dWq", "dWk", "dWv", "dWo"];
        for i in 0..4 {
            let want: Vec<f64> = bw.dw[i]
                .iter()
                .zip(super::round_through(dtype, &dt.pre_w[i]))
                .map(|(g, p)| g + f64::from(p))
                .collect();
            check(
                &format!("{tag} {} (accumulated)", names[i]),
                &want,
                &gw[i],
                wdims[i].1,
                dtype,
            );
        }
        if kind == Kind::Mha && dt.b.is_some() {
            for (i, (got, pre)) in gb.iter().zip(&dt.pre_b).enumerate() {
                let want: Vec<f64> = bw.db[i]
                    .iter()
                    .zip(super::round_through(dtype, pre))
                    .map(|(g, p)| g + f64::from(p))
                    .collect();
                check(&format!("{tag} db{i} (accumulated)"), &want, got, d, dtype);
            }
        }
    }
}

/// A mask with one invalid token (query and key).
fn one_out(n: usize, at: usize) -> Option<Vec<f32>> {
    Some((0..n).map(|i| if i == at { 0.0 } else { 1.0 }).collect())
}

#[test]
fn single_head_attention_forward_and_backward_match_f64() {
    let dt = data(11, (5, 5, 6, 6, 1), false, false, one_out(5, 2));
    run("attention_forward/backward", Kind::Single, &dt);
}

#[test]
fn mha_with_biases_and_mask_matches_f64() {
    let dt = data(12, (5, 5, 8, 8, 2), false, true, one_out(5, 1));
    run("mha_forward/backward", Kind::Mha, &dt);
}

#[test]
fn self_attention_train_pair_matches_f64() {
    let dt = data(13, (4, 4, 8, 8, 4), false, false, None);
    run(
        "self_attention_forward_train/backward",
        Kind::SelfTrain,
        &dt,
    );
}

#[test]
fn cross_attention_train_pair_matches_f64() {
    let dt = data(14, (4, 6, 8, 6, 2), true, false, one_out(6, 4));
    run("cross_attention_forward_train/backward", Kind::Cross, &dt);
    // Lq == Lk: the key mask gates the queries too.
    let dt = data(15, (5, 5, 8, 4, 2), true, false, one_out(5, 0));
    run(
        "cross_attention_forward_train/backward square",
        Kind::Cross,
        &dt,
    );
}

#[test]
fn fully_masked_rows_are_zero() {
    let dt = data(16, (3, 3, 4, 4, 2), false, false, Some(vec![0.0; 3]));
    run("mha_forward all masked", Kind::Mha, &dt);
}

/// The reference backward agrees with central differences of the reference forward.
#[test]
fn reference_gradient_matches_finite_differences() {
    let (l, d, nh) = (3usize, 4usize, 2usize);
    let mut g = SplitMix64::new(99);
    let f = |n: usize, g: &mut SplitMix64| -> Vec<f64> {
        rand(g, n, -1.0, 1.0).into_iter().map(f64::from).collect()
    };
    let x = f(l * d, &mut g);
    let ws: Vec<Vec<f64>> = (0..4).map(|_| f(d * d, &mut g)).collect();
    let bs: Vec<Vec<f64>> = (0..4).map(|_| f(d, &mut g)).collect();
    let rr = f(l * d, &mut g);
    let mask = [1.0, 0.0, 1.0];
    let loss = |x: &[f64], ws: &[Vec<f64>]| -> f64 {
        let mut p = Problem::selfish(x, l, d, [&ws[0], &ws[1], &ws[2], &ws[3]], nh);
        p.mask = Some(&mask);
        p.b = [Some(&bs[0][..]), Some(&bs[1]), Some(&bs[2]), Some(&bs[3])];
        r::forward(&p).o.iter().zip(&rr).map(|(a, b)| a * b).sum()
    };
    let mut p = Problem::selfish(&x, l, d, [&ws[0], &ws[1], &ws[2], &ws[3]], nh);
    p.mask = Some(&mask);
    p.b = [Some(&bs[0][..]), Some(&bs[1]), Some(&bs[2]), Some(&bs[3])];
    let bw = r::backward(&p, &r::forward(&p), &rr);
    let h = 1e-6;
    for i in 0..l * d {
        let (mut xp, mut xm) = (x.clone(), x.clone());
        xp[i] += h;
        xm[i] -= h;
        let num = (loss(&xp, &ws) - loss(&xm, &ws)) / (2.0 * h);
        assert!(
            (num - bw.dx[i]).abs() < 1e-6,
            "dx[{i}]: {num} vs {}",
            bw.dx[i]
        );
    }
    for wi in 0..4 {
        for i in 0..d * d {
            let (mut wp, mut wm) = (ws.clone(), ws.clone());
            wp[wi][i] += h;
            wm[wi][i] -= h;
            let num = (loss(&x, &wp) - loss(&x, &wm)) / (2.0 * h);
            assert!(
                (num - bw.dw[wi][i]).abs() < 1e-6,
                "dw{wi}[{i}]: {num} vs {}",
                bw.dw[wi][i]
            );
        }
    }
    assert!(
        bw.dx.iter().any(|v| v.abs() > 1e-3),
        "a non-trivial gradient"
    );
}

fn cpu(v: &[f32], r: usize, c: usize) -> Tensor {
    Tensor::from_slice_on(Device::Cpu, v, r, c).unwrap()
}

#[test]
fn training_ops_reject_bad_arguments() {
    let (l, d) = (3, 6);
    let x = cpu(&vec![0.1; l * d], l, d);
    let w = cpu(&vec![0.1; d * d], d, d);
    let bad_w = cpu(&vec![0.1; d * (d - 1)], d, d - 1);
    let p = Projections {
        wq: &w,
        wk: &w,
        wv: &w,
        wo: &w,
    };
    let mut c = AttentionCaches::default();
    let mut o = Tensor::default();
    let nb = ProjectionBiases::default();
    let invalid = |e: Error| assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let shape = |e: Error| assert!(matches!(e, Error::Shape { .. }), "{e}");
    // num_heads must divide D.
    invalid(ops::mha_forward(&x, p, nb, None, 4, &mut c, &mut o).unwrap_err());
    invalid(ops::mha_forward(&x, p, nb, None, 0, &mut c, &mut o).unwrap_err());
    // Mismatched weight shapes.
    let pw = Projections { wk: &bad_w, ..p };
    shape(ops::mha_forward(&x, pw, nb, None, 2, &mut c, &mut o).unwrap_err());
    let ctx = cpu(&[0.1; 4 * 5], 4, 5);
    shape(ops::cross_attention_forward_train(&x, &ctx, p, None, 2, &mut c, &mut o).unwrap_err());
    // Bad mask length, and a mask that is not F32.
    let m2 = cpu(&[1.0, 1.0], 2, 1);
    shape(ops::attention_forward(&x, p, Some(&m2), &mut c, &mut o).unwrap_err());
    let m16 = brotensor_tests::tensor(Device::Cpu, &[1.0; 3], 3, 1, Dtype::F16).unwrap();
    let e = ops::mha_forward(&x, p, nb, Some(&m16), 2, &mut c, &mut o).unwrap_err();
    assert!(matches!(e, Error::Dtype { .. }), "{e}");
    // A bias of the wrong length.
    let b5 = cpu(&[0.0; 5], 5, 1);
    let bb = ProjectionBiases {
        bq: Some(&b5),
        ..nb
    };
    shape(ops::mha_forward(&x, p, bb, None, 2, &mut c, &mut o).unwrap_err());
    // Wrong dtypes: integer input, 16-bit on the CPU.
    let xi = Tensor::from_slice_on(Device::Cpu, &vec![1i32; l * d], l, d).unwrap();
    let e = ops::mha_forward(&xi, p, nb, None, 2, &mut c, &mut o).unwrap_err();
    assert!(matches!(e, Error::Dtype { .. }), "{e}");
    let x16 = brotensor_tests::tensor(Device::Cpu, &vec![0.1; l * d], l, d, Dtype::F16).unwrap();
    let e = ops::mha_forward(&x16, p, nb, None, 2, &mut c, &mut o).unwrap_err();
    assert!(
        matches!(e, Error::UnsupportedDtype { .. } | Error::Dtype { .. }),
        "{e}"
    );
    // Backward: gradients must be pre-sized; caches must match; d_o must match.
    ops::mha_forward(&x, p, nb, None, 2, &mut c, &mut o).unwrap();
    let (mut a, mut b2, mut c2, mut d2) = (
        cpu(&vec![0.0; d * d], d, d),
        cpu(&vec![0.0; d * d], d, d),
        cpu(&vec![0.0; d * d], d, d),
        Tensor::default(),
    );
    let mut dx = Tensor::default();
    let g = ProjectionGrads {
        dwq: &mut a,
        dwk: &mut b2,
        dwv: &mut c2,
        dwo: &mut d2,
    };
    shape(ops::mha_backward(&o, &x, &c, p, None, 2, &mut dx, g, BiasGrads::default()).unwrap_err());
    let mut d3 = cpu(&vec![0.0; d * d], d, d);
    let g = ProjectionGrads {
        dwq: &mut a,
        dwk: &mut b2,
        dwv: &mut c2,
        dwo: &mut d3,
    };
    shape(ops::mha_backward(&o, &x, &c, p, None, 3, &mut dx, g, BiasGrads::default()).unwrap_err());
    let short = cpu(&vec![0.0; 2 * d], 2, d);
    let g = ProjectionGrads {
        dwq: &mut a,
        dwk: &mut b2,
        dwv: &mut c2,
        dwo: &mut d3,
    };
    shape(ops::self_attention_backward(&short, &x, &c, p, None, 2, &mut dx, g).unwrap_err());
    let mut db = cpu(&[0.0; 4], 4, 1);
    let g = ProjectionGrads {
        dwq: &mut a,
        dwk: &mut b2,
        dwv: &mut c2,
        dwo: &mut d3,
    };
    let bg = BiasGrads {
        dbo: Some(&mut db),
        ..BiasGrads::default()
    };
    shape(ops::mha_backward(&o, &x, &c, p, None, 2, &mut dx, g, bg).unwrap_err());
}
