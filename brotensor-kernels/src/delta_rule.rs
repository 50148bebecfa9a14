//! The gated delta rule (see `brotensor_cpu::delta_rule`): one unit per state row `(h, i)`,
//! every token in order. The row's state stays in FP32 in `state` (read and updated in
//! place); `q`, `k`, `v` and `o` are in the float type `F` and widened on load. The gates
//! are computed per unit from the raw FP32 inputs, with the CPU's overflow-free forms.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{check_u32, extent, grid_1d, Buf, LaunchError};

/// `ln(1 + e^x)`, `x` itself above 20.
#[cube]
fn softplus(x: f32) -> f32 {
    let mut r = x;
    if x <= 20.0f32 {
        r = f32::log1p(f32::exp(x));
    }
    r
}

/// `1 / (1 + e^-x)` without overflow, as the CPU computes it (`e = e^-|x|`).
#[cube]
fn sigmoid(x: f32) -> f32 {
    let e = f32::exp(-f32::abs(x));
    let mut r = 1.0f32 / (1.0f32 + e);
    if x < 0.0f32 {
        r = e / (1.0f32 + e);
    }
    r
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn gated_delta_rule_kernel<F: Float>(
    q: &Array<F>,
    k: &Array<F>,
    v: &Array<F>,
    a_raw: &Array<f32>,
    beta_raw: &Array<f32>,
    log_a: &Array<f32>,
    state: &mut Array<f32>,
    o: &mut Array<F>,
    tokens: usize,
    heads: usize,
    d_k: usize,
    d_v: usize,
) {
    let r = ABSOLUTE_POS;
    if r < heads * d_v {
        let h = r / d_v;
        let sb = r * d_k;
        let scale = f32::exp(log_a[h]);
        for t in 0..tokens {
            let g = t * heads + h;
            let alpha = f32::exp(-softplus(a_raw[g]) * scale);
            let beta = sigmoid(beta_raw[g]);
            let kb = g * d_k;
            let mut sk = 0.0f32;
            for j in 0..d_k {
                sk += state[sb + j] * f32::cast_from(k[kb + j]);
            }
            let at = t * heads * d_v + r;
            let bu = beta * (f32::cast_from(v[at]) - alpha * sk);
            let mut acc = 0.0f32;
            for j in 0..d_k {
                let s = alpha * state[sb + j] + bu * f32::cast_from(k[kb + j]);
                state[sb + j] = s;
                acc += s * f32::cast_from(q[kb + j]);
            }
            o[at] = F::cast_from(acc);
        }
    }
}

/// The sizes of [`launch_gated_delta_rule`]: `tokens`, `heads`, and the per-head key
/// (`d_k`) and value (`d_v`) widths.
#[derive(Clone, Copy, Debug)]
pub struct DeltaSizes {
    /// Tokens.
    pub tokens: usize,
    /// Heads.
    pub heads: usize,
    /// Key and query width per head.
    pub d_k: usize,
    /// Value width per head.
    pub d_v: usize,
}

/// The gated delta rule over `tokens` tokens: `q`, `k` (`tokens heads d_k` elements of
/// `F`), `v`, `o` (`tokens heads d_v`), `a_raw`, `beta_raw` (`tokens heads` f32), `log_a`
/// (`heads` f32), `state` (`heads d_v d_k` f32, updated in place).
#[allow(clippy::too_many_arguments)]
pub fn launch_gated_delta_rule<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    (q, k, v): (&Handle, &Handle, &Handle),
    (a_raw, beta_raw, log_a): (&Handle, &Handle, &Handle),
    (state, o): (&Handle, &Handle),
    s: DeltaSizes,
) -> Result<(), LaunchError> {
    let DeltaSizes {
        tokens,
        heads,
        d_k,
        d_v,
    } = s;
    if tokens == 0 || heads == 0 || d_k == 0 || d_v == 0 {
        return Ok(());
    }
    let qk = extent("tokens * heads * d_k", &[tokens, heads, d_k])?;
    let vo = extent("tokens * heads * d_v", &[tokens, heads, d_v])?;
    let gn = extent("tokens * heads", &[tokens, heads])?;
    let sn = extent("heads * d_v * d_k", &[heads, d_v, d_k])?;
    check_u32(&[
        ("tokens * heads * d_k", qk),
        ("tokens * heads * d_v", vo),
        ("heads * d_v * d_k", sn),
    ])?;
    let b = core::mem::size_of::<F>();
    let (q, k) = (Buf::new("q", q, qk, b)?, Buf::new("k", k, qk, b)?);
    let (v, o) = (Buf::new("v", v, vo, b)?, Buf::new("o", o, vo, b)?);
    let a_raw = Buf::new("a_raw", a_raw, gn, 4)?;
    let beta_raw = Buf::new("beta", beta_raw, gn, 4)?;
    let log_a = Buf::new("log_a", log_a, heads, 4)?;
    let state = Buf::new("state", state, sn, 4)?;
    let (count, dim) = grid_1d(client, heads * d_v)?;
    // SAFETY: every buffer holds the elements its product says (checked `Buf`s, every index
    // below 2^32); units past `heads d_v` rows return, and a row's unit reads token rows
    // below `tokens` and coordinates below `d_k`; the sizes are nonzero.
    unsafe {
        gated_delta_rule_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            q.arg(),
            k.arg(),
            v.arg(),
            a_raw.arg(),
            beta_raw.arg(),
            log_a.arg(),
            state.arg(),
            o.arg(),
            tokens,
            heads,
            d_k,
            d_v,
        );
    }
    Ok(())
}

/// Every kernel of this file in every float type, lowered to CUDA C++ (see
/// `crate::cuda_lowering`).
#[cfg(test)]
pub(crate) fn lower_for_cuda(l: &mut crate::cuda_lowering::Lowering) {
    use crate::cuda_lowering::{for_floats, Lowering as L, Rt};
    let c = l.client.clone();
    let a = L::array;
    for_floats!(|F| {
        l.lower(gated_delta_rule_kernel::GatedDeltaRuleKernel::<F, Rt>::new(
            L::settings_1d(),
            c.clone(),
            a(),
            a(),
            a(),
            a(),
            a(),
            a(),
            a(),
            a(),
            (),
            (),
            (),
            (),
        ));
    });
}
