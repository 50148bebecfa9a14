//! The projected ops (float64 projection then attention, written here) and the KV cache.

use brotensor::{ops, Device, Dtype, Result, Tensor};
use brotensor_tests::{reference_with, tolerance, Check, Input, SplitMix64};

use super::{check, devices, t};

/// `y (rows, out) = x (rows, in) w^T (w: (out, in)) + b`, float64.
fn linear64(
    x: &[f64],
    w: &[f64],
    b: Option<&[f64]>,
    rows: usize,
    inp: usize,
    out: usize,
) -> Vec<f64> {
    let mut y = vec![0.0; rows * out];
    for r in 0..rows {
        for o in 0..out {
            let mut s = b.map_or(0.0, |b| b[o]);
            for i in 0..inp {
                s += x[r * inp + i] * w[o * inp + i];
            }
            y[r * out + o] = s;
        }
    }
    y
}

/// Multi-head attention, float64, scores materialised: `q (lq, nh*hd)`, `k, v (lk, nh*hd)`.
fn attention64(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    (lq, lk, nh): (usize, usize, usize),
    mask: Option<&[f32]>,
    causal: bool,
) -> Vec<f64> {
    let d = q.len() / lq;
    let hd = d / nh;
    let mut o = vec![0.0; lq * d];
    for h in 0..nh {
        for i in 0..lq {
            let keep = |j: usize| mask.is_none_or(|m| m[j] > 0.5) && (!causal || j <= i);
            let s: Vec<f64> = (0..lk)
                .map(|j| {
                    (0..hd)
                        .map(|x| q[i * d + h * hd + x] * k[j * d + h * hd + x])
                        .sum::<f64>()
                        / (hd as f64).sqrt()
                })
                .collect();
            let m = (0..lk)
                .filter(|&j| keep(j))
                .map(|j| s[j])
                .fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = (0..lk)
                .map(|j| if keep(j) { (s[j] - m).exp() } else { 0.0 })
                .collect();
            let den: f64 = p.iter().sum();
            if den > 0.0 {
                for x in 0..hd {
                    o[i * d + h * hd + x] =
                        (0..lk).map(|j| p[j] * v[j * d + h * hd + x]).sum::<f64>() / den;
                }
            }
        }
    }
    o
}

/// Tolerance for results with 16-bit intermediates (projections stored in the dtype between
/// the linear ops and the attention core): 2.5x the dtype's own.
fn chained(dtype: Dtype) -> (f32, f32) {
    let (a, r) = tolerance(dtype);
    if dtype == Dtype::F32 {
        (a * 4.0, r)
    } else {
        (a * 2.5, r * 2.5)
    }
}

const CHAINED: Check = Check {
    dtypes: &[Dtype::F32, Dtype::F16, Dtype::BF16],
    same_dtype: true,
    tol: Some(chained),
};

/// A mask of `n` values with roughly a third of the keys dropped.
fn mask_values(n: usize) -> Vec<f32> {
    SplitMix64::new(99).uniform(n, 0.1, 1.6)
}

#[test]
fn project_kv_vs_f64() {
    let (lk, dc, d) = (19, 24, 32);
    let inputs = [
        Input::new(lk, dc, -1.0, 1.0),
        Input::new(d, dc, -0.4, 0.4),
        Input::new(1, d, -0.5, 0.5),
        Input::new(d, dc, -0.4, 0.4),
        Input::new(1, d, -0.5, 0.5),
    ];
    for (which, name) in [(0usize, "K"), (1, "V")] {
        reference_with(
            &format!("flash_attention_project_kv {name}"),
            0xF1A5 + which as u64,
            &inputs,
            Check::default(),
            move |t| {
                let (mut k, mut v) = (Tensor::default(), Tensor::default());
                ops::flash_attention_project_kv(
                    &t[0],
                    &t[1],
                    Some(&t[2]),
                    &t[3],
                    Some(&t[4]),
                    &mut k,
                    &mut v,
                )?;
                Ok(if which == 0 { k } else { v })
            },
            move |x| linear64(&x[0], &x[1 + 2 * which], Some(&x[2 + 2 * which]), lk, dc, d),
        );
    }
}

#[test]
fn q_with_kv_cached_vs_f64() {
    let (lq, lk, d, nh) = (13, 29, 64, 2);
    let inputs = [
        Input::new(lq, d, -1.0, 1.0),
        Input::new(lk, d, -1.0, 1.0),
        Input::new(lk, d, -1.0, 1.0),
        Input::new(d, d, -0.3, 0.3),
        Input::new(1, d, -0.5, 0.5),
        Input::new(d, d, -0.3, 0.3),
        Input::new(1, d, -0.5, 0.5),
    ];
    let mask = mask_values(lk);
    let m2 = mask.clone();
    reference_with(
        "flash_attention_q_with_kv_cached_forward masked",
        0xF1B0,
        &inputs,
        CHAINED,
        move |t| {
            let m = Tensor::from_slice_on(t[0].device(), &mask, 1, lk)?;
            let mut o = Tensor::default();
            ops::flash_attention_q_with_kv_cached_forward(
                &t[0],
                &t[1],
                &t[2],
                &t[3],
                Some(&t[4]),
                &t[5],
                Some(&t[6]),
                Some(&m),
                nh,
                false,
                &mut o,
            )?;
            Ok(o)
        },
        move |x| {
            let q = linear64(&x[0], &x[3], Some(&x[4]), lq, d, d);
            let a = attention64(&q, &x[1], &x[2], (lq, lk, nh), Some(&m2), false);
            linear64(&a, &x[5], Some(&x[6]), lq, d, d)
        },
    );
}

#[test]
fn qkvo_vs_f64() {
    // Self-attention, causal, with biases.
    let (l, d, nh) = (21, 48, 3);
    let inputs = [
        Input::new(l, d, -1.0, 1.0),
        Input::new(d, d, -0.3, 0.3),
        Input::new(1, d, -0.5, 0.5),
        Input::new(d, d, -0.3, 0.3),
        Input::new(1, d, -0.5, 0.5),
        Input::new(d, d, -0.3, 0.3),
        Input::new(1, d, -0.5, 0.5),
        Input::new(d, d, -0.3, 0.3),
        Input::new(1, d, -0.5, 0.5),
    ];
    reference_with(
        "flash_attention_qkvo_forward self causal",
        0xF1C0,
        &inputs,
        CHAINED,
        |t| {
            let mut o = Tensor::default();
            ops::flash_attention_qkvo_forward(
                &t[0],
                None,
                (&t[1], Some(&t[2])),
                (&t[3], Some(&t[4])),
                (&t[5], Some(&t[6])),
                (&t[7], Some(&t[8])),
                None,
                nh,
                true,
                &mut o,
            )?;
            Ok(o)
        },
        move |x| {
            let q = linear64(&x[0], &x[1], Some(&x[2]), l, d, d);
            let k = linear64(&x[0], &x[3], Some(&x[4]), l, d, d);
            let v = linear64(&x[0], &x[5], Some(&x[6]), l, d, d);
            let a = attention64(&q, &k, &v, (l, l, nh), None, true);
            linear64(&a, &x[7], Some(&x[8]), l, d, d)
        },
    );
    // Cross-attention: a context of another width, no biases, a mask.
    let (lq, lk, dc) = (9, 17, 40);
    let inputs = [
        Input::new(lq, d, -1.0, 1.0),
        Input::new(lk, dc, -1.0, 1.0),
        Input::new(d, d, -0.3, 0.3),
        Input::new(d, dc, -0.3, 0.3),
        Input::new(d, dc, -0.3, 0.3),
        Input::new(d, d, -0.3, 0.3),
    ];
    let mask = mask_values(lk);
    let m2 = mask.clone();
    reference_with(
        "flash_attention_qkvo_forward cross masked",
        0xF1C1,
        &inputs,
        CHAINED,
        move |t| {
            let m = Tensor::from_slice_on(t[0].device(), &mask, 1, lk)?;
            let mut o = Tensor::default();
            ops::flash_attention_qkvo_forward(
                &t[0],
                Some(&t[1]),
                (&t[2], None),
                (&t[3], None),
                (&t[4], None),
                (&t[5], None),
                Some(&m),
                nh,
                false,
                &mut o,
            )?;
            Ok(o)
        },
        move |x| {
            let q = linear64(&x[0], &x[2], None, lq, d, d);
            let k = linear64(&x[1], &x[3], None, lk, dc, d);
            let v = linear64(&x[1], &x[4], None, lk, dc, d);
            let a = attention64(&q, &k, &v, (lq, lk, nh), Some(&m2), false);
            linear64(&a, &x[5], None, lq, d, d)
        },
    );
}

/// An INT8 weight: the I8 values and F32 scales (as tensors on `device`), and the
/// dequantized float64 weight the reference uses.
struct Int8W {
    w: Tensor,
    s: Tensor,
    deq: Vec<f64>,
}

fn int8_weight(device: Device, rng: &mut SplitMix64, rows: usize, cols: usize) -> Int8W {
    let w = rng.uniform(rows * cols, -0.3, 0.3);
    let (q, s) = ops::quantize_int8_per_row_host(&w, rows, cols).expect("quantize");
    let deq = (0..rows * cols)
        .map(|i| f64::from(q[i]) * f64::from(s[i / cols]))
        .collect();
    Int8W {
        w: Tensor::from_slice_on(device, &q, rows, cols).expect("upload"),
        s: Tensor::from_slice_on(device, &s, rows, 1).expect("upload"),
        deq,
    }
}

/// The three INT8-weight variants on every device in F16 and BF16 (the CPU computes them
/// with FP32 math, its outputs rounded once).
#[test]
fn int8w_variants_vs_f64() {
    let (lq, lk, d, dc, nh) = (11, 15, 64, 32, 4);
    for device in devices() {
        for dtype in [Dtype::F16, Dtype::BF16] {
            let mut rng = SplitMix64::new(0xF1D0);
            let x = brotensor_tests::round_through(dtype, &rng.uniform(lq * d, -1.0, 1.0));
            let ctx = brotensor_tests::round_through(dtype, &rng.uniform(lk * dc, -1.0, 1.0));
            let b = brotensor_tests::round_through(dtype, &rng.uniform(d, -0.5, 0.5));
            let (wq, wk, wv, wo) = (
                int8_weight(device, &mut rng, d, d),
                int8_weight(device, &mut rng, d, dc),
                int8_weight(device, &mut rng, d, dc),
                int8_weight(device, &mut rng, d, d),
            );
            let (xt, ct, bt) = (
                t(device, &x, lq, d, dtype),
                t(device, &ctx, lk, dc, dtype),
                t(device, &b, 1, d, dtype),
            );
            let f = |v: &[f32]| v.iter().map(|&a| f64::from(a)).collect::<Vec<f64>>();
            let (x64, c64, b64) = (f(&x), f(&ctx), f(&b));
            let k64 = linear64(&c64, &wk.deq, Some(&b64), lk, dc, d);
            let v64 = linear64(&c64, &wv.deq, None, lk, dc, d);
            let q64 = linear64(&x64, &wq.deq, Some(&b64), lq, d, d);
            let a64 = attention64(&q64, &k64, &v64, (lq, lk, nh), None, false);
            let o64 = linear64(&a64, &wo.deq, None, lq, d, d);
            let narrow = |v: Vec<f64>| v.into_iter().map(|a| a as f32).collect::<Vec<f32>>();
            let tol = chained(dtype);

            let run_kv = || -> Result<Tensor> {
                let (mut k, mut v) = (Tensor::default(), Tensor::default());
                ops::flash_attention_project_kv_int8w_fp16(
                    &ct,
                    (&wk.w, &wk.s, Some(&bt)),
                    (&wv.w, &wv.s, None),
                    &mut k,
                    &mut v,
                )?;
                // K and V side by side, checked together.
                let (kh, vh) = (
                    brotensor_tests::read_f32(&k)?,
                    brotensor_tests::read_f32(&v)?,
                );
                t_pair(device, dtype, &kh, &vh, lk, d)
            };
            let mut kv_want = narrow(k64.clone());
            kv_want.extend(narrow(v64.clone()));
            // Checked on devices that run 16-bit linear ops (the CPU does, widened).
            check(
                "project_kv_int8w_fp16",
                device,
                dtype,
                run_kv(),
                &kv_want,
                d,
                tol,
            );

            let kt = t(device, &narrow(k64.clone()), lk, d, dtype);
            let vt = t(device, &narrow(v64.clone()), lk, d, dtype);
            let run_q = || -> Result<Tensor> {
                let mut o = Tensor::default();
                ops::flash_attention_q_with_kv_cached_int8w_fp16(
                    &xt,
                    &kt,
                    &vt,
                    (&wq.w, &wq.s, Some(&bt)),
                    (&wo.w, &wo.s, None),
                    None,
                    nh,
                    false,
                    &mut o,
                )?;
                Ok(o)
            };
            check(
                "q_with_kv_cached_int8w_fp16",
                device,
                dtype,
                run_q(),
                &narrow(o64.clone()),
                d,
                tol,
            );

            let run_all = || -> Result<Tensor> {
                let mut o = Tensor::default();
                ops::flash_attention_qkvo_int8w_fp16(
                    &xt,
                    Some(&ct),
                    (&wq.w, &wq.s, Some(&bt)),
                    (&wk.w, &wk.s, Some(&bt)),
                    (&wv.w, &wv.s, None),
                    (&wo.w, &wo.s, None),
                    None,
                    nh,
                    false,
                    &mut o,
                )?;
                Ok(o)
            };
            check(
                "qkvo_int8w_fp16",
                device,
                dtype,
                run_all(),
                &narrow(o64),
                d,
                tol,
            );
        }
    }
}

/// `[a; b]` stacked by rows as one tensor.
fn t_pair(
    device: Device,
    dtype: Dtype,
    a: &[f32],
    b: &[f32],
    rows: usize,
    cols: usize,
) -> Result<Tensor> {
    let mut v = a.to_vec();
    v.extend_from_slice(b);
    brotensor_tests::tensor(device, &v, 2 * rows, cols, dtype)
}

#[test]
fn kv_cache_append_writes_only_its_rows() {
    let (lmax, d) = (40, 24);
    for device in devices() {
        for dtype in super::DTYPES {
            let mut rng = SplitMix64::new(0xF1E0);
            let old_k = rng.uniform(lmax * d, -1.0, 1.0);
            let old_v = rng.uniform(lmax * d, -1.0, 1.0);
            let mut kc = t(device, &old_k, lmax, d, dtype);
            let mut vc = t(device, &old_v, lmax, d, dtype);
            let (mut want_k, mut want_v) = (old_k.clone(), old_v.clone());
            let mut cur = 0;
            let mut ran = true;
            for n in [5usize, 1, 17, 18] {
                let nk = rng.uniform(n * d, -1.0, 1.0);
                let nv = rng.uniform(n * d, -1.0, 1.0);
                let (kn, vn) = (t(device, &nk, n, d, dtype), t(device, &nv, n, d, dtype));
                match ops::kv_cache_append(&kn, &vn, cur, &mut kc, &mut vc) {
                    Ok(()) => {}
                    Err(brotensor::Error::UnsupportedDtype { .. })
                        if !brotensor::supports_dtype(device, dtype).unwrap() =>
                    {
                        ran = false;
                        break;
                    }
                    Err(e) if cur + n > lmax => {
                        assert!(e.to_string().contains("overflows"), "{e}");
                        break;
                    }
                    Err(e) => panic!("kv_cache_append on {device} {dtype}: {e}"),
                }
                assert!(cur + n <= lmax, "an overflowing append was accepted");
                want_k[cur * d..(cur + n) * d].copy_from_slice(&nk);
                want_v[cur * d..(cur + n) * d].copy_from_slice(&nv);
                cur += n;
            }
            if !ran {
                eprintln!("kv_cache_append: {device} refuses {dtype} (unsupported, as reported)");
                continue;
            }
            assert_eq!(cur, 23, "the fourth append must overflow");
            assert_eq!(kc.rows(), lmax, "the cache was resized");
            let exact = |_: Dtype| (0.0f32, 0.0f32);
            check(
                "kv_cache_append K",
                device,
                dtype,
                Ok(kc),
                &want_k,
                d,
                exact(dtype),
            );
            check(
                "kv_cache_append V",
                device,
                dtype,
                Ok(vc),
                &want_v,
                d,
                exact(dtype),
            );
        }
    }
}
