//! Fused losses over row-major FP32 matrices: masked softmax cross-entropy over column
//! segments ("heads") and binary cross-entropy with logits. Losses are sums (no mean);
//! gradients are unscaled and overwritten. An entry is valid when its mask is at least 0.5.

use rayon::prelude::*;

use crate::norm::softmax_rows;

/// The smallest probability a log is taken of.
const P_FLOOR: f32 = 1e-12;

fn valid(mask: Option<&[f32]>, i: usize) -> bool {
    mask.is_none_or(|m| m[i] >= 0.5)
}

/// One segment: `probs` = masked softmax of `logits`, `dlogits = probs - target` on valid
/// entries (0 on masked ones), returns `sum_{valid, t > 0} -t log(max(p, 1e-12))`.
pub fn xent_segment(
    logits: &[f32],
    target: &[f32],
    mask: Option<&[f32]>,
    probs: &mut [f32],
    dlogits: &mut [f32],
) -> f32 {
    let n = logits.len();
    assert!(
        target.len() == n && probs.len() == n && dlogits.len() == n,
        "xent_segment: lengths"
    );
    softmax_rows(logits, n.max(1), mask, probs);
    let mut loss = 0.0f32;
    for i in 0..n {
        if valid(mask, i) {
            dlogits[i] = probs[i] - target[i];
            if target[i] > 0.0 {
                loss -= target[i] * probs[i].max(P_FLOOR).ln();
            }
        } else {
            dlogits[i] = 0.0;
        }
    }
    loss
}

/// Per row of `(rows, cols)`, [`xent_segment`] on each head's columns
/// `[offsets[h], offsets[h + 1])`; `loss[row] = sum over heads`. Columns outside every head
/// are left untouched. `offsets` must be non-decreasing and end within `cols`.
#[allow(clippy::too_many_arguments)]
pub fn xent_batched(
    logits: &[f32],
    target: &[f32],
    mask: Option<&[f32]>,
    cols: usize,
    offsets: &[usize],
    probs: &mut [f32],
    dlogits: &mut [f32],
    loss: &mut [f32],
) {
    if cols == 0 {
        loss.fill(0.0);
        return;
    }
    probs
        .par_chunks_mut(cols)
        .zip(dlogits.par_chunks_mut(cols))
        .zip(loss.par_iter_mut())
        .enumerate()
        .for_each(|(r, ((p, d), l))| {
            let row = r * cols..(r + 1) * cols;
            let (lg, tg) = (&logits[row.clone()], &target[row.clone()]);
            let mk = mask.map(|m| &m[row]);
            *l = offsets
                .windows(2)
                .map(|w| {
                    let seg = w[0]..w[1];
                    xent_segment(
                        &lg[seg.clone()],
                        &tg[seg.clone()],
                        mk.map(|m| &m[seg.clone()]),
                        &mut p[seg.clone()],
                        &mut d[seg],
                    )
                })
                .sum();
        });
}

/// `max(z, 0) + log1p(e^-|z|)`, the stable softplus.
#[inline]
pub fn softplus(z: f32) -> f32 {
    z.max(0.0) + (-z.abs()).exp().ln_1p()
}

/// The sigmoid without overflow for either sign.
#[inline]
pub fn stable_sigmoid(z: f32) -> f32 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

/// Binary cross-entropy with logits per row of `(rows, cols)`, positive weight `w`:
/// `probs = sigmoid(z)`, `dlogits = s (w y + 1 - y) - w y`, `loss[row] = sum (w y
/// softplus(-z) + (1 - y) softplus(z))`; masked entries give 0 and add nothing.
#[allow(clippy::too_many_arguments)]
pub fn bce_with_logits(
    logits: &[f32],
    target: &[f32],
    mask: Option<&[f32]>,
    cols: usize,
    pos_weight: f32,
    probs: &mut [f32],
    dlogits: &mut [f32],
    loss: &mut [f32],
) {
    if cols == 0 {
        loss.fill(0.0);
        return;
    }
    probs
        .par_chunks_mut(cols)
        .zip(dlogits.par_chunks_mut(cols))
        .zip(loss.par_iter_mut())
        .enumerate()
        .for_each(|(r, ((p, d), l))| {
            let mut sum = 0.0f32;
            for j in 0..cols {
                let i = r * cols + j;
                if !valid(mask, i) {
                    p[j] = 0.0;
                    d[j] = 0.0;
                    continue;
                }
                let (z, y) = (logits[i], target[i]);
                let s = stable_sigmoid(z);
                p[j] = s;
                d[j] = s * (pos_weight * y + 1.0 - y) - pos_weight * y;
                sum += pos_weight * y * softplus(-z) + (1.0 - y) * softplus(z);
            }
            *l = sum;
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_entropy_hand_values() {
        let logits = [0.0, (3.0f32).ln()];
        let target = [0.0, 1.0];
        let (mut p, mut d) = ([0.0; 2], [0.0; 2]);
        let loss = xent_segment(&logits, &target, None, &mut p, &mut d);
        assert!((p[1] - 0.75).abs() < 1e-6);
        assert!((loss - (-(0.75f32).ln())).abs() < 1e-6);
        assert!((d[0] - 0.25).abs() < 1e-6 && (d[1] + 0.25).abs() < 1e-6);
        // Masked: the entry gets nothing and a fully masked segment costs nothing.
        let loss = xent_segment(&logits, &target, Some(&[1.0, 0.0]), &mut p, &mut d);
        assert_eq!((p, d, loss), ([1.0, 0.0], [1.0, 0.0], 0.0));
    }

    #[test]
    fn bce_matches_its_definition() {
        let (z, y, w) = (0.7f32, 1.0f32, 2.0f32);
        let (mut p, mut d, mut l) = ([0.0], [0.0], [0.0]);
        bce_with_logits(&[z], &[y], None, 1, w, &mut p, &mut d, &mut l);
        let s = 1.0 / (1.0 + (-z as f64).exp());
        let want = -(w as f64) * s.ln();
        assert!((l[0] as f64 - want).abs() < 1e-6);
        assert!((d[0] as f64 - (s * w as f64 - w as f64)).abs() < 1e-6);
        assert!(softplus(-100.0) >= 0.0 && softplus(100.0) == 100.0);
        assert!((stable_sigmoid(-100.0)).is_finite());
    }
}
