//! Optimizer steps that update parameters and their state in place (SGD with momentum,
//! Adam with AdamW's decoupled weight decay), and the splitmix64 Xavier initialiser.
//!
//! The step scalars are folded on the host in float64 ([`AdamStep::new`]); each element is
//! then read once and written once in FP32.

use rayon::prelude::*;

/// Elements per parallel task.
const CHUNK: usize = 1 << 14;

/// The per-step scalars of one Adam update, folded from the hyper-parameters and the
/// 1-based step count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamStep {
    /// Learning rate.
    pub lr: f32,
    /// First-moment decay.
    pub beta1: f32,
    /// Second-moment decay.
    pub beta2: f32,
    /// Added to the root of the corrected second moment.
    pub eps: f32,
    /// `1 / (1 - beta1^step)`.
    pub inv_bc1: f32,
    /// `1 / (1 - beta2^step)`.
    pub inv_bc2: f32,
    /// `1 - lr * weight_decay`: the decoupled (AdamW) decay applied to the parameter before
    /// the update; 1 for plain Adam.
    pub decay: f32,
}

impl AdamStep {
    /// The scalars of step `step` (1-based); the bias corrections in float64.
    pub fn new(
        lr: f32,
        (beta1, beta2): (f32, f32),
        eps: f32,
        weight_decay: f32,
        step: u32,
    ) -> Self {
        let t = f64::from(step);
        let bc1 = 1.0 - f64::from(beta1).powf(t);
        let bc2 = 1.0 - f64::from(beta2).powf(t);
        AdamStep {
            lr,
            beta1,
            beta2,
            eps,
            inv_bc1: (1.0 / bc1) as f32,
            inv_bc2: (1.0 / bc2) as f32,
            decay: (1.0 - f64::from(lr) * f64::from(weight_decay)) as f32,
        }
    }

    /// One element: the new `(p, m, v)` from the old ones and the gradient `g`.
    #[inline(always)]
    pub fn apply(&self, p: f32, g: f32, m: f32, v: f32) -> (f32, f32, f32) {
        let m = self.beta1 * m + (1.0 - self.beta1) * g;
        let v = self.beta2 * v + (1.0 - self.beta2) * (g * g);
        let m_hat = m * self.inv_bc1;
        let v_hat = v * self.inv_bc2;
        let p = p * self.decay - self.lr * m_hat / (v_hat.sqrt() + self.eps);
        (p, m, v)
    }
}

/// Adam in place over same-length slices: `m`, `v` and `p` updated by [`AdamStep::apply`].
///
/// # Panics
/// If the lengths differ.
pub fn adam_step(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], s: &AdamStep) {
    let n = p.len();
    assert!(
        g.len() == n && m.len() == n && v.len() == n,
        "adam_step: lengths"
    );
    p.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK))
        .zip(m.par_chunks_mut(CHUNK))
        .zip(v.par_chunks_mut(CHUNK))
        .for_each(|(((p, g), m), v)| {
            crate::simd::wide(
                #[inline(always)]
                |_| {
                    for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut())
                    {
                        (*p, *m, *v) = s.apply(*p, g, *m, *v);
                    }
                },
            )
        });
}

/// SGD with momentum in place over same-length slices: `vel = momentum vel + g`, then
/// `p -= lr vel`.
///
/// # Panics
/// If the lengths differ.
pub fn sgd_step(p: &mut [f32], g: &[f32], vel: &mut [f32], lr: f32, momentum: f32) {
    let n = p.len();
    assert!(g.len() == n && vel.len() == n, "sgd_step: lengths");
    p.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK))
        .zip(vel.par_chunks_mut(CHUNK))
        .for_each(|((p, g), vel)| {
            crate::simd::wide(
                #[inline(always)]
                |_| {
                    for ((p, &g), u) in p.iter_mut().zip(g).zip(vel.iter_mut()) {
                        *u = momentum * *u + g;
                        *p -= lr * *u;
                    }
                },
            )
        });
}

/// The next value of the splitmix64 generator whose state is `state` (advanced by the golden
/// ratio increment, then mixed).
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Xavier-uniform values `U(-a, a)`, `a = sqrt(6 / (fan_in + fan_out))`, into `w` in order:
/// each element takes the top 24 bits of one splitmix64 draw as `u` in `[0, 1)` and is
/// `a (2u - 1)` computed in float64, rounded once. `state` is advanced by `w.len()` draws.
pub fn xavier_uniform(w: &mut [f32], fan_in: usize, fan_out: usize, state: &mut u64) {
    let a = (6.0 / (fan_in as f64 + fan_out as f64)).sqrt();
    for x in w.iter_mut() {
        let u = (splitmix64(state) >> 40) as f64 / (1u64 << 24) as f64;
        *x = (a * (2.0 * u - 1.0)) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_its_published_first_outputs() {
        // The reference outputs of splitmix64 seeded with 1234567 (Vigna's test vector).
        let mut s = 1234567u64;
        let want = [
            6457827717110365317u64,
            3203168211198807973,
            9817491932198370423,
            4593380528125082431,
            16408922859458223821,
        ];
        for w in want {
            assert_eq!(splitmix64(&mut s), w);
        }
    }

    #[test]
    fn adam_chunks_cover_every_element() {
        let n = CHUNK * 2 + 3;
        let mut p = vec![1.0f32; n];
        let g = vec![0.5f32; n];
        let (mut m, mut v) = (vec![0.0f32; n], vec![0.0f32; n]);
        let s = AdamStep::new(0.1, (0.9, 0.999), 1e-8, 0.0, 1);
        adam_step(&mut p, &g, &mut m, &mut v, &s);
        // Step 1 moves every element by lr (m_hat / sqrt(v_hat) = sign(g)).
        assert!(
            p.iter().all(|&x| (x - 0.9).abs() < 1e-6),
            "{:?}",
            &p[n - 3..]
        );
        assert!(m.iter().all(|&x| (x - 0.05).abs() < 1e-7));
    }
}
