//! The float64 reference gradients of this file checked against central finite differences.

use super::*;

#[test]
fn reference_gradients_match_finite_differences() {
    let mut masked = Attn::dense(3, 5, 2, 3, false);
    masked.mask = Some(vec![1.0, 0.0, 1.0, 1.0, 0.7]);
    let mut causal = Attn::dense(4, 4, 2, 3, true);
    // Key 0 hidden: query 0 keeps no key (a zero row).
    causal.mask = Some(vec![0.0, 1.0, 1.0, 1.0]);
    let mut varlen = Attn::dense(0, 0, 1, 4, true);
    varlen.cu_q = vec![0, 2, 5, 6];
    varlen.cu_k = vec![0, 2, 5, 6];
    for (tag, a) in [("masked", masked), ("causal", causal), ("varlen", varlen)] {
        let w = a.width();
        let (nq, nk) = (a.rows_q() * w, a.rows_k() * w);
        let q = random(1, nq, -1.5, 1.5);
        let k = random(2, nk, -1.5, 1.5);
        let v = random(3, nk, -1.0, 1.0);
        let d_o = random(4, nq, -1.0, 1.0);
        let loss = |q: &[f64], k: &[f64], v: &[f64]| {
            let [o, ..] = attention_grads(&a, q, k, v, &d_o);
            o.iter().zip(&d_o).map(|(a, b)| a * b).sum::<f64>()
        };
        let [_, dq, dk, dv] = attention_grads(&a, &q, &k, &v, &d_o);
        assert_fd(
            &format!("{tag} dq"),
            &dq,
            &central_differences(&q, |x| loss(x, &k, &v)),
            true,
        );
        assert_fd(
            &format!("{tag} dk"),
            &dk,
            &central_differences(&k, |x| loss(&q, x, &v)),
            true,
        );
        assert_fd(
            &format!("{tag} dv"),
            &dv,
            &central_differences(&v, |x| loss(&q, &k, x)),
            true,
        );
    }
}

#[test]
fn qkvo_reference_matches_finite_differences() {
    for cross in [false, true] {
        let (lq, d, dc) = (3, 4, 3);
        let lk = if cross { 5 } else { lq };
        let mut attn = Attn::dense(lq, lk, 2, 2, !cross);
        attn.mask = Some(if cross {
            vec![1.0, 0.0, 1.0, 1.0, 1.0]
        } else {
            vec![1.0; lk]
        });
        let dctx = if cross { dc } else { d };
        let sizes = [
            lq * d,
            if cross { lk * dc } else { 0 },
            d * d,
            d,
            d * dctx,
            if cross { 0 } else { d },
            d * dctx,
            d,
            d * d,
            d,
        ];
        let p: Vec<Vec<f64>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| random(10 + i as u64, n, -1.0, 1.0))
            .collect();
        let m = Qkvo { attn, p };
        let d_o = random(9, lq * d, -1.0, 1.0);
        let grads = m.grads(&d_o);
        for (at, g) in grads.iter().enumerate() {
            if m.p[at].is_empty() {
                continue;
            }
            let numeric = central_differences(&m.p[at], |x| {
                let mut p = m.p.clone();
                p[at] = x.to_vec();
                let moved = Qkvo {
                    attn: m.attn.clone(),
                    p,
                };
                moved.forward().iter().zip(&d_o).map(|(a, b)| a * b).sum()
            });
            // The key bias shifts every score of a row by the same amount: softmax ignores
            // it, so its gradient is zero (and checked to be).
            assert_fd(
                &format!("qkvo cross={cross} param {at}"),
                g,
                &numeric,
                at != 5,
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// The ops against the reference, on every device and dtype.
