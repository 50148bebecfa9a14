//! Float64 references of the sampling contracts, written from the formulas (they share only
//! the Philox words with the code under test, and the Philox core is checked against
//! Random123's published vectors).

/// `(w >> 8) / 2^24`.
pub fn uniform_f64(w: u32) -> f64 {
    f64::from(w >> 8) / 16_777_216.0
}

/// Box-Muller: `sqrt(-2 ln(1 - U(w0))) cos(2 pi U(w1))`.
pub fn normal_f64(w0: u32, w1: u32) -> f64 {
    let u1 = 1.0 - uniform_f64(w0);
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * uniform_f64(w1)).cos()
}

/// The standard normal density.
fn pdf(x: f64) -> f64 {
    (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

/// `integral_a^b f`, composite Simpson with 20000 panels.
fn integrate(a: f64, b: f64, f: impl Fn(f64) -> f64) -> f64 {
    let n = 20_000;
    let h = (b - a) / n as f64;
    let inner: f64 = (1..n)
        .map(|i| f(a + i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 })
        .sum();
    (f(a) + f(b) + inner) * h / 3.0
}

/// `(mean, variance, fourth central moment)` of the standard normal truncated to `[a, b]`.
pub fn truncated_moments(a: f64, b: f64) -> (f64, f64, f64) {
    let z = integrate(a, b, pdf);
    let mean = integrate(a, b, |x| x * pdf(x)) / z;
    let var = integrate(a, b, |x| (x - mean).powi(2) * pdf(x)) / z;
    let m4 = integrate(a, b, |x| (x - mean).powi(4) * pdf(x)) / z;
    (mean, var, m4)
}

/// The token the `sample_logits` contract picks from `row` for uniform `u`, in float64:
/// softmax of `row / t`, ranked by probability (ties by index), the first `top_k` (0: all),
/// the smallest prefix reaching `top_p` (if `top_p < 1`, at least one), renormalised, the
/// first token with `u kept_sum < cumsum` (else the last kept). Also returns the smallest
/// distance between any partial sum it compared and its threshold (the draw's margin).
pub fn draw_f64(row: &[f32], t: f64, top_k: usize, top_p: f64, u: f64) -> (usize, f64) {
    let s: Vec<f64> = row.iter().map(|&x| f64::from(x) / t).collect();
    let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
    let z: f64 = e.iter().sum();
    let p: Vec<f64> = e.iter().map(|x| x / z).collect();
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
    let bound = if top_k > 0 {
        top_k.min(row.len())
    } else {
        row.len()
    };
    let mut keep = bound;
    let mut margin = f64::INFINITY;
    if top_p < 1.0 {
        let mut cum = 0.0;
        for (r, &i) in order[..bound].iter().enumerate() {
            cum += p[i];
            margin = margin.min((cum - top_p).abs());
            if cum >= top_p {
                keep = r + 1;
                break;
            }
        }
    }
    let kept_sum: f64 = order[..keep].iter().map(|&i| p[i]).sum();
    let target = u * kept_sum;
    let mut cum = 0.0;
    for &i in &order[..keep] {
        cum += p[i];
        margin = margin.min((target - cum).abs() / kept_sum);
        if target < cum {
            return (i, margin);
        }
    }
    (order[keep - 1], margin)
}
