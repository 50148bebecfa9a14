//! The inference ops: cross and self attention, the head-averaged map, additive-bias
//! attention (FP and INT8 weights), and decomposed relative-position attention (global and
//! windowed), against the f64 reference.

use brotensor::ops::{self, Int8Projections, ProjectionBiases, Projections};
use brotensor::{Device, Dtype, Error, Tensor};
use brotensor_tests::SplitMix64;

use super::reference::{self as r, Bias, Problem};
use super::{cases, check, input, mask_on, ran, rand};

/// Seeded weights `(d, d)` and biases `(d)` uploaded for `dtype`, with their reference
/// values.
struct Block {
    w: Vec<(Tensor, Vec<f64>)>,
    b: Vec<(Tensor, Vec<f64>)>,
}

fn block(seed: u64, device: Device, dtype: Dtype, d: usize, dkv: usize) -> Block {
    let mut g = SplitMix64::new(seed);
    let dims = [d, dkv, dkv, d];
    let w = dims
        .iter()
        .map(|&i| input(device, dtype, &rand(&mut g, d * i, -0.6, 0.6), d, i))
        .collect();
    let b = (0..4)
        .map(|_| input(device, dtype, &rand(&mut g, d, -0.3, 0.3), d, 1))
        .collect();
    Block { w, b }
}

impl Block {
    fn p(&self) -> Projections<'_> {
        Projections {
            wq: &self.w[0].0,
            wk: &self.w[1].0,
            wv: &self.w[2].0,
            wo: &self.w[3].0,
        }
    }
    fn biases(&self) -> ProjectionBiases<'_> {
        ProjectionBiases {
            bq: Some(&self.b[0].0),
            bk: Some(&self.b[1].0),
            bv: Some(&self.b[2].0),
            bo: Some(&self.b[3].0),
        }
    }
    fn wv(&self) -> [&[f64]; 4] {
        [0, 1, 2, 3].map(|i| &self.w[i].1[..])
    }
    fn bv(&self) -> [Option<&[f64]>; 4] {
        [0, 1, 2, 3].map(|i| Some(&self.b[i].1[..]))
    }
}

#[test]
fn cross_and_self_attention_forward_match_f64() {
    let (lq, lk, d, dkv, nh) = (4, 6, 8, 6, 2);
    let mut g = SplitMix64::new(21);
    let xd = rand(&mut g, lq * d, -1.0, 1.0);
    let cd = rand(&mut g, lk * dkv, -1.0, 1.0);
    let xs = rand(&mut g, 5 * d, -1.0, 1.0);
    let mk: Vec<f32> = vec![1.0, 1.0, 0.0, 1.0, 1.0, 0.0];
    let ms: Vec<f32> = vec![1.0, 0.0, 1.0, 1.0, 1.0];
    for (device, dtype) in cases() {
        let tag = format!("on {device} {dtype}");
        let bl = block(22, device, dtype, d, dkv);
        let (x, xv) = input(device, dtype, &xd, lq, d);
        let (ctx, cv) = input(device, dtype, &cd, lk, dkv);
        let m = mask_on(device, &mk);
        let mut o = Tensor::default();
        let case = "cross_attention_forward";
        let res = ops::cross_attention_forward(&x, &ctx, bl.p(), Some(&m), nh, &mut o);
        let Some(()) = ran(case, device, dtype, res) else {
            continue;
        };
        let mkv: Vec<f64> = mk.iter().map(|&v| f64::from(v)).collect();
        let mut p = Problem::selfish(&xv, lq, d, bl.wv(), nh);
        p.ctx = Some(&cv);
        p.lk = lk;
        p.dkv = dkv;
        p.gate = false;
        p.mask = Some(&mkv);
        check(&format!("{case} {tag}"), &r::forward(&p).o, &o, d, dtype);
        assert_eq!(o.dtype(), dtype);

        // With a shared logit bias and the head-averaged map.
        let case = "cross_attention_forward_with_attn";
        let lb = rand(&mut SplitMix64::new(23), lq * lk, -1.0, 1.0);
        let lbt = Tensor::from_slice_on(device, &lb, lq, lk).unwrap();
        let lbv: Vec<f64> = lb.iter().map(|&v| f64::from(v)).collect();
        let mut avg = Tensor::default();
        ops::cross_attention_forward_with_attn(
            &x,
            &ctx,
            bl.p(),
            Some(&m),
            Some(&lbt),
            nh,
            &mut o,
            &mut avg,
        )
        .unwrap_or_else(|e| panic!("{case} {tag}: {e}"));
        p.bias = Bias::Shared(&lbv);
        let f = r::forward(&p);
        check(&format!("{case} {tag} O"), &f.o, &o, d, dtype);
        let want: Vec<f64> = (0..lq * lk)
            .map(|i| (0..nh).map(|h| f.attn[h * lq * lk + i]).sum::<f64>() / nh as f64)
            .collect();
        assert_eq!(avg.dims(), [lq, lk]);
        check(&format!("{case} {tag} AttnAvg"), &want, &avg, lk, dtype);
        let e = ops::cross_attention_forward_with_attn(
            &x,
            &ctx,
            bl.p(),
            Some(&m),
            Some(&m),
            nh,
            &mut o,
            &mut avg,
        )
        .unwrap_err();
        assert!(matches!(e, Error::Shape { .. }), "{e}");

        // Self attention, mask gating queries too.
        let case = "self_attention_forward";
        let bl = block(24, device, dtype, d, d);
        let (x, xv) = input(device, dtype, &xs, 5, d);
        let m = mask_on(device, &ms);
        ops::self_attention_forward(&x, bl.p(), Some(&m), nh, &mut o)
            .unwrap_or_else(|e| panic!("{case} {tag}: {e}"));
        let msv: Vec<f64> = ms.iter().map(|&v| f64::from(v)).collect();
        let mut p = Problem::selfish(&xv, 5, d, bl.wv(), nh);
        p.mask = Some(&msv);
        check(&format!("{case} {tag}"), &r::forward(&p).o, &o, d, dtype);
    }
}

#[test]
fn self_attention_bias_forward_matches_f64() {
    let (l, d, nh) = (5, 8, 2);
    let mut g = SplitMix64::new(31);
    let xd = rand(&mut g, l * d, -1.0, 1.0);
    let ab = rand(&mut g, nh * l * l, -1.0, 1.0);
    let ms: Vec<f32> = vec![1.0, 1.0, 1.0, 0.0, 1.0];
    let scale = 0.7f32;
    for (device, dtype) in cases() {
        let case = "self_attention_bias_forward";
        let tag = format!("{case} on {device} {dtype}");
        let bl = block(32, device, dtype, d, d);
        let (x, xv) = input(device, dtype, &xd, l, d);
        let m = mask_on(device, &ms);
        let abt = Tensor::from_slice_on(device, &ab, nh * l, l).unwrap();
        let mut o = Tensor::default();
        let res = ops::self_attention_bias_forward(
            &x,
            bl.p(),
            bl.biases(),
            Some(&m),
            Some(&abt),
            nh,
            scale,
            &mut o,
        );
        let Some(()) = ran(case, device, dtype, res) else {
            continue;
        };
        let abv: Vec<f64> = ab.iter().map(|&v| f64::from(v)).collect();
        let msv: Vec<f64> = ms.iter().map(|&v| f64::from(v)).collect();
        let mut p = Problem::selfish(&xv, l, d, bl.wv(), nh);
        p.b = bl.bv();
        p.mask = Some(&msv);
        p.scale = f64::from(scale);
        p.bias = Bias::PerHead(&abv);
        check(&tag, &r::forward(&p).o, &o, d, dtype);
        // A bias of the wrong size.
        let short = Tensor::from_slice_on(device, &ab[..l * l], l, l).unwrap();
        let e = ops::self_attention_bias_forward(
            &x,
            bl.p(),
            bl.biases(),
            None,
            Some(&short),
            nh,
            scale,
            &mut o,
        )
        .unwrap_err();
        assert!(matches!(e, Error::Shape { .. }), "{e}");
    }
}

#[test]
fn self_attention_bias_int8w_matches_f64_on_every_device() {
    let (l, d, nh) = (4, 8, 2);
    let mut g = SplitMix64::new(41);
    let xd = rand(&mut g, l * d, -1.0, 1.0);
    let ab = rand(&mut g, nh * l * l, -0.5, 0.5);
    let wf: Vec<Vec<f32>> = (0..4).map(|_| rand(&mut g, d * d, -0.6, 0.6)).collect();
    let q: Vec<(Vec<i8>, Vec<f32>)> = wf
        .iter()
        .map(|w| ops::quantize_int8_per_row_host(w, d, d).unwrap())
        .collect();
    // The reference uses the dequantized weights: the op's quantization is not under test.
    let deq: Vec<Vec<f64>> = q
        .iter()
        .map(|(qv, s)| {
            (0..d * d)
                .map(|i| f64::from(qv[i]) * f64::from(s[i / d]))
                .collect()
        })
        .collect();
    let scale = 1.0 / 2.0f32;
    for (device, dtype) in cases() {
        let case = "self_attention_bias_int8w_fp16";
        let dt = if dtype == Dtype::F32 {
            Dtype::F16
        } else {
            dtype
        };
        let (x, xv) = input(device, dt, &xd, l, d);
        let up = |i: usize| {
            (
                Tensor::from_slice_on(device, &q[i].0, d, d).unwrap(),
                Tensor::from_slice_on(device, &q[i].1, d, 1).unwrap(),
            )
        };
        let t: Vec<(Tensor, Tensor)> = (0..4).map(up).collect();
        let p = Int8Projections {
            wq: &t[0].0,
            sq: &t[0].1,
            wk: &t[1].0,
            sk: &t[1].1,
            wv: &t[2].0,
            sv: &t[2].1,
            wo: &t[3].0,
            so: &t[3].1,
        };
        let abt = Tensor::from_slice_on(device, &ab, nh * l, l).unwrap();
        let mut o = Tensor::default();
        let res = ops::self_attention_bias_int8w_fp16(&x, p, None, Some(&abt), nh, scale, &mut o);
        if dtype == Dtype::F32 {
            // An F32 input is refused everywhere.
            let (x32, _) = input(device, Dtype::F32, &xd, l, d);
            let e = ops::self_attention_bias_int8w_fp16(&x32, p, None, None, nh, scale, &mut o)
                .unwrap_err();
            assert!(matches!(e, Error::Dtype { .. }), "{e}");
        }
        let Some(()) = ran(case, device, dt, res) else {
            continue;
        };
        // A weight that is not I8, and scales of the wrong length.
        let (wf16, _) = input(device, dt, &wf[0], d, d);
        let e = ops::self_attention_bias_int8w_fp16(
            &x,
            Int8Projections { wq: &wf16, ..p },
            None,
            None,
            nh,
            scale,
            &mut o,
        )
        .unwrap_err();
        assert!(matches!(e, Error::Dtype { .. }), "{e}");
        let e = ops::self_attention_bias_int8w_fp16(
            &x,
            Int8Projections { sk: &t[0].0, ..p },
            None,
            None,
            nh,
            scale,
            &mut o,
        )
        .unwrap_err();
        assert!(matches!(e, Error::Shape { .. }), "{e}");
        let abv: Vec<f64> = ab.iter().map(|&v| f64::from(v)).collect();
        let mut pr = Problem::selfish(&xv, l, d, [&deq[0], &deq[1], &deq[2], &deq[3]], nh);
        pr.scale = f64::from(scale);
        pr.bias = Bias::PerHead(&abv);
        check(
            &format!("{case} on {device} {dt}"),
            &r::forward(&pr).o,
            &o,
            d,
            dt,
        );
    }
}

/// `(2 g - 1, hd)` relative-position tables.
fn tables(
    seed: u64,
    device: Device,
    dtype: Dtype,
    gh: usize,
    gw: usize,
    hd: usize,
) -> [(Tensor, Vec<f64>); 2] {
    let mut g = SplitMix64::new(seed);
    let a = rand(&mut g, (2 * gh - 1) * hd, -0.5, 0.5);
    let b = rand(&mut g, (2 * gw - 1) * hd, -0.5, 0.5);
    [
        input(device, dtype, &a, 2 * gh - 1, hd),
        input(device, dtype, &b, 2 * gw - 1, hd),
    ]
}

#[test]
fn decomposed_rel_pos_forward_matches_f64() {
    let (gh, gw, d, nh) = (2, 3, 8, 2);
    let l = gh * gw;
    let xd = rand(&mut SplitMix64::new(51), l * d, -1.0, 1.0);
    let scale = 0.5f32;
    for (device, dtype) in cases() {
        let case = "self_attention_decomposed_rel_pos_forward";
        let bl = block(52, device, dtype, d, d);
        let (x, xv) = input(device, dtype, &xd, l, d);
        let [(rh, rhv), (rw, rwv)] = tables(53, device, dtype, gh, gw, d / nh);
        let mut o = Tensor::default();
        let res = ops::self_attention_decomposed_rel_pos_forward(
            &x,
            bl.p(),
            bl.biases(),
            &rh,
            &rw,
            nh,
            (gh, gw),
            scale,
            &mut o,
        );
        let Some(()) = ran(case, device, dtype, res) else {
            continue;
        };
        let mut p = Problem::selfish(&xv, l, d, bl.wv(), nh);
        p.b = bl.bv();
        p.scale = f64::from(scale);
        p.bias = Bias::RelPos {
            rh: &rhv,
            rw: &rwv,
            gh,
            gw,
        };
        check(
            &format!("{case} on {device} {dtype}"),
            &r::forward(&p).o,
            &o,
            d,
            dtype,
        );
        // The grid must cover x's rows, and the tables must fit the grid.
        let e = ops::self_attention_decomposed_rel_pos_forward(
            &x,
            bl.p(),
            bl.biases(),
            &rh,
            &rw,
            nh,
            (3, 3),
            scale,
            &mut o,
        )
        .unwrap_err();
        assert!(matches!(e, Error::Shape { .. }), "{e}");
        let e = ops::self_attention_decomposed_rel_pos_forward(
            &x,
            bl.p(),
            bl.biases(),
            &rw,
            &rh,
            nh,
            (gh, gw),
            scale,
            &mut o,
        )
        .unwrap_err();
        assert!(matches!(e, Error::Shape { .. }), "{e}");
    }
}

#[test]
fn windowed_decomposed_rel_pos_matches_per_window_f64() {
    let (gh, gw, win, d, nh) = (3, 5, 2, 8, 2);
    let l = gh * gw;
    let xd = rand(&mut SplitMix64::new(61), l * d, -1.0, 1.0);
    let scale = 0.5f32;
    for (device, dtype) in cases() {
        let case = "self_attention_decomposed_rel_pos_windowed_forward";
        let bl = block(62, device, dtype, d, d);
        let (x, xv) = input(device, dtype, &xd, l, d);
        let [(rh, rhv), (rw, rwv)] = tables(63, device, dtype, win, win, d / nh);
        let mut o = Tensor::default();
        let res = ops::self_attention_decomposed_rel_pos_windowed_forward(
            &x,
            bl.p(),
            bl.biases(),
            &rh,
            &rw,
            nh,
            (gh, gw),
            win,
            scale,
            &mut o,
        );
        let Some(()) = ran(case, device, dtype, res) else {
            continue;
        };
        // Zero-pad to whole windows, attend per window, crop.
        let (nwy, nwx) = (gh.div_ceil(win), gw.div_ceil(win));
        let mut want = vec![0.0f64; l * d];
        for wy in 0..nwy {
            for wx in 0..nwx {
                let mut xw = vec![0.0f64; win * win * d];
                for t in 0..win * win {
                    let (y, xx) = (wy * win + t / win, wx * win + t % win);
                    if y < gh && xx < gw {
                        xw[t * d..(t + 1) * d]
                            .copy_from_slice(&xv[(y * gw + xx) * d..(y * gw + xx + 1) * d]);
                    }
                }
                let mut p = Problem::selfish(&xw, win * win, d, bl.wv(), nh);
                p.b = bl.bv();
                p.scale = f64::from(scale);
                p.bias = Bias::RelPos {
                    rh: &rhv,
                    rw: &rwv,
                    gh: win,
                    gw: win,
                };
                let ow = r::forward(&p).o;
                for t in 0..win * win {
                    let (y, xx) = (wy * win + t / win, wx * win + t % win);
                    if y < gh && xx < gw {
                        want[(y * gw + xx) * d..(y * gw + xx + 1) * d]
                            .copy_from_slice(&ow[t * d..(t + 1) * d]);
                    }
                }
            }
        }
        assert_eq!(o.dims(), [l, d]);
        check(&format!("{case} on {device} {dtype}"), &want, &o, d, dtype);
        let e = ops::self_attention_decomposed_rel_pos_windowed_forward(
            &x,
            bl.p(),
            bl.biases(),
            &rh,
            &rw,
            nh,
            (gh, gw),
            0,
            scale,
            &mut o,
        )
        .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    }
}
