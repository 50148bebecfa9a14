//! `flash_attention_qkvo_backward` against float64 projections and attention gradients, and
//! its parameter-gradient accumulation.

use super::*;

/// Runs `flash_attention_qkvo_backward` on every device and dtype against [`Qkvo::grads`]
/// (each gradient checked in its own pass), with the parameter gradients pre-filled.
fn check_qkvo(case: &str, seed: u64, cross: bool, causal: bool) {
    let (lq, heads, hd, dc) = (11, 2, 32, 24);
    let d = heads * hd;
    let lk = if cross { 15 } else { lq };
    let dctx = if cross { dc } else { d };
    let mut attn = Attn::dense(lq, lk, heads, hd, causal);
    if cross {
        attn.mask = Some(
            (0..lk)
                .map(|j| if j % 4 == 1 { 0.0 } else { 1.0 })
                .collect(),
        );
    }
    let biased = !cross;
    // x, ctx, wq, bq, wk, bk, wv, bv, wo, bo, d_o, then the pre-filled dW*, db*.
    let wr = 0.3;
    let mut inputs = vec![
        Input::new(lq, d, -1.0, 1.0),
        Input::new(lk, dctx, -1.0, 1.0),
        Input::new(d, d, -wr, wr),
        Input::new(d, 1, -0.5, 0.5),
        Input::new(d, dctx, -wr, wr),
        Input::new(d, 1, -0.5, 0.5),
        Input::new(d, dctx, -wr, wr),
        Input::new(d, 1, -0.5, 0.5),
        Input::new(d, d, -wr, wr),
        Input::new(d, 1, -0.5, 0.5),
        Input::new(lq, d, -1.0, 1.0),
    ];
    let grad_shapes = [
        (d, d),
        (d, 1),
        (d, dctx),
        (d, 1),
        (d, dctx),
        (d, 1),
        (d, d),
        (d, 1),
    ];
    inputs.extend(
        grad_shapes
            .iter()
            .map(|&(r, c)| Input::new(r, c, -0.2, 0.2)),
    );
    let check = Check {
        dtypes: ALL,
        tol: Some(qkvo_tol),
        ..Check::default()
    };
    let names = [
        "dx", "dctx", "dwq", "dbq", "dwk", "dbk", "dwv", "dbv", "dwo", "dbo",
    ];
    for (which, name) in names.iter().enumerate() {
        let is_bias = matches!(which, 3 | 5 | 7 | 9);
        if (which == 1 && !cross) || (is_bias && !biased) {
            continue;
        }
        let op = |t: &[Tensor]| {
            let device = t[0].device();
            let b = |i: usize| biased.then_some(&t[i]);
            let mut dx = tensor(device, &vec![7.0; lq * d], lq, d, t[0].dtype())?;
            let mut dctx = Tensor::default();
            // The accumulators start from the pre-filled inputs 11.. (deep copies).
            let mut acc: Vec<Tensor> = t[11..].to_vec();
            let [dwq, dbq, dwk, dbk, dwv, dbv, dwo, dbo] = &mut acc[..] else {
                unreachable!()
            };
            let grads = ops::QkvoGrads {
                dx: &mut dx,
                dctx: cross.then_some(&mut dctx),
                dwq,
                dbq: biased.then_some(dbq),
                dwk,
                dbk: biased.then_some(dbk),
                dwv,
                dbv: biased.then_some(dbv),
                dwo,
                dbo: biased.then_some(dbo),
            };
            let mask = mask_on(device, &attn.mask);
            ops::flash_attention_qkvo_backward(
                &t[0],
                cross.then_some(&t[1]),
                &t[2],
                b(3),
                &t[4],
                b(5),
                &t[6],
                b(7),
                &t[8],
                b(9),
                mask.as_ref(),
                heads,
                causal,
                &t[10],
                grads,
            )?;
            Ok(match which {
                0 => dx,
                1 => dctx,
                _ => acc[which - 2].clone(),
            })
        };
        reference_with(&format!("{case} {name}"), seed, &inputs, check, op, |x| {
            let mut p: Vec<Vec<f64>> = x[..10].to_vec();
            if !cross {
                p[1].clear();
            }
            if !biased {
                for at in [3, 5, 7, 9] {
                    p[at].clear();
                }
            }
            let m = Qkvo {
                attn: attn.clone(),
                p,
            };
            let mut g = m.grads(&x[10]).swap_remove(which);
            if which >= 2 {
                // Parameter gradients accumulate onto the pre-filled values.
                for (v, pre) in g.iter_mut().zip(&x[11 + which - 2]) {
                    *v += pre;
                }
            }
            g
        });
    }
}

#[test]
fn qkvo_backward_self_attention_causal_with_biases() {
    check_qkvo("flash_attention_qkvo_backward self", 0xF1E0, false, true);
}

#[test]
fn qkvo_backward_cross_attention_masked() {
    check_qkvo("flash_attention_qkvo_backward cross", 0xF1E1, true, false);
}

// ---------------------------------------------------------------------------------------
// Errors.

#[test]
fn qkvo_backward_accumulates_parameter_gradients_only() {
    // Twice with the same inputs: dW doubles, dX stays.
    let (lq, d) = (5, 8);
    let mut rng = brotensor_tests::SplitMix64::new(77);
    let mut t = |r, c| Tensor::from_slice(&rng.uniform(r * c, -1.0, 1.0), r, c).unwrap();
    let (x, wq, wk, wv, wo, d_o) = (t(lq, d), t(d, d), t(d, d), t(d, d), t(d, d), t(lq, d));
    let mut dx = Tensor::default();
    let mut dw: Vec<Tensor> = (0..4).map(|_| zeros(d, d)).collect();
    let mut firsts = Vec::new();
    for _ in 0..2 {
        let [dwq, dwk, dwv, dwo] = &mut dw[..] else {
            unreachable!()
        };
        ops::flash_attention_qkvo_backward(
            &x,
            None,
            &wq,
            None,
            &wk,
            None,
            &wv,
            None,
            &wo,
            None,
            None,
            2,
            false,
            &d_o,
            ops::QkvoGrads {
                dx: &mut dx,
                dctx: None,
                dwq,
                dbq: None,
                dwk,
                dbk: None,
                dwv,
                dbv: None,
                dwo,
                dbo: None,
            },
        )
        .unwrap();
        firsts.push((dx.to_vec::<f32>().unwrap(), dw[0].to_vec::<f32>().unwrap()));
    }
    assert_eq!(firsts[0].0, firsts[1].0, "dX is overwritten");
    for (a, b) in firsts[0].1.iter().zip(&firsts[1].1) {
        assert!(
            (2.0 * a - b).abs() <= 1e-5 * a.abs().max(1.0),
            "dWq accumulates"
        );
    }
}
