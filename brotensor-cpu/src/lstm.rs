//! The fused time step of an LSTM (PyTorch `nn.LSTM` gate order i | f | g | o) and its
//! backward step. The products (the input projection of every step, the recurrent product
//! of each) are GEMMs done by the caller; these functions do the gate math of one step for
//! a batch, one row of `4H` pre-activations per batch entry. Rows are split over rayon.

use rayon::prelude::*;

use crate::activation::sigmoid_with;
use crate::elementwise::tanh_with;
use crate::simd::wide;

/// Batch rows per rayon job for rows of `h` hidden units.
fn rows_per_job(h: usize) -> usize {
    (2048 / h.max(1)).max(1)
}

/// The gate math of one row: `gates` holds the pre-activations `[i | f | g | o]` (`4h`) and
/// gets their activations; `c = f c_prev + i g`, `y = o tanh(c)`. Vectorized by [`wide`].
#[inline(always)]
fn step_row(gates: &mut [f32], c_prev: &[f32], y: &mut [f32], c: &mut [f32]) {
    let h = y.len();
    let (gi, rest) = gates.split_at_mut(h);
    let (gf, rest) = rest.split_at_mut(h);
    let (gg, go) = rest.split_at_mut(h);
    wide(
        #[inline(always)]
        |m| {
            for k in 0..h {
                let (i, f) = (sigmoid_with(m, gi[k]), sigmoid_with(m, gf[k]));
                let (g, o) = (tanh_with(m, gg[k]), sigmoid_with(m, go[k]));
                let cell = f * c_prev[k] + i * g;
                gi[k] = i;
                gf[k] = f;
                gg[k] = g;
                go[k] = o;
                c[k] = cell;
                y[k] = o * tanh_with(m, cell);
            }
        },
    );
}

/// One forward step: `z = p + zrec` (`zrec` the recurrent product, absent for a zero
/// state), `i, f, o = sigmoid`, `g = tanh` of its four `h`-blocks, `c = f c_prev + i g`
/// (`c_prev` absent: zero), `y = o tanh(c)`. `p`, `zrec`, `gates`: `rows x 4h`; `c_prev`,
/// `y`, `c`: `rows x h`. `gates` gets the activations `[i | f | g | o]`.
pub fn lstm_step(
    (p, zrec): (&[f32], Option<&[f32]>),
    c_prev: Option<&[f32]>,
    h: usize,
    (y, gates, c): (&mut [f32], &mut [f32], &mut [f32]),
) {
    let job = rows_per_job(h);
    y.par_chunks_mut(job * h)
        .zip(gates.par_chunks_mut(job * 4 * h))
        .zip(c.par_chunks_mut(job * h))
        .enumerate()
        .for_each_init(
            || vec![0.0f32; h],
            |zeros, (j, ((y, gates), c))| {
                let r0 = j * job;
                for (r, ((y, gates), c)) in y
                    .chunks_exact_mut(h)
                    .zip(gates.chunks_exact_mut(4 * h))
                    .zip(c.chunks_exact_mut(h))
                    .enumerate()
                {
                    let row = r0 + r;
                    gates.copy_from_slice(&p[row * 4 * h..][..4 * h]);
                    if let Some(z) = zrec {
                        for (g, z) in gates.iter_mut().zip(&z[row * 4 * h..][..4 * h]) {
                            *g += z;
                        }
                    }
                    let c_prev = c_prev.map_or(&zeros[..], |c| &c[row * h..][..h]);
                    step_row(gates, c_prev, y, c);
                }
            },
        );
}

/// The backward gate math of one row (see [`lstm_step_backward`]).
#[inline(always)]
fn step_back_row(
    gates: &[f32],
    c: &[f32],
    c_prev: &[f32],
    dh: &[f32],
    dc: &mut [f32],
    dz: &mut [f32],
) {
    let h = c.len();
    let (gi, rest) = gates.split_at(h);
    let (gf, rest) = rest.split_at(h);
    let (gg, go) = rest.split_at(h);
    let (zi, rest) = dz.split_at_mut(h);
    let (zf, rest) = rest.split_at_mut(h);
    let (zg, zo) = rest.split_at_mut(h);
    wide(
        #[inline(always)]
        |m| {
            for k in 0..h {
                let (i, f, g, o) = (gi[k], gf[k], gg[k], go[k]);
                let tc = tanh_with(m, c[k]);
                let dcell = dc[k] + dh[k] * o * (1.0 - tc * tc);
                zi[k] = dcell * g * i * (1.0 - i);
                zf[k] = dcell * c_prev[k] * f * (1.0 - f);
                zg[k] = dcell * i * (1.0 - g * g);
                zo[k] = dh[k] * tc * o * (1.0 - o);
                dc[k] = dcell * f;
            }
        },
    );
}

/// One backward step, from the cached activations `gates` (`rows x 4h`) and cell `c` of the
/// step and the previous cell `c_prev` (absent: zero): with `dh = dy + dh_rec` (`dh_rec` the
/// gradient through the next step's recurrent product, absent at the last step) and `dc` the
/// cell gradient from the next step (`rows x h`, updated in place to the gradient of
/// `c_prev`), writes the pre-activation gradient `dz` (`rows x 4h`, `[i | f | g | o]`).
pub fn lstm_step_backward(
    (gates, c, c_prev): (&[f32], &[f32], Option<&[f32]>),
    (dy, dh_rec): (&[f32], Option<&[f32]>),
    h: usize,
    (dc, dz): (&mut [f32], &mut [f32]),
) {
    let job = rows_per_job(h);
    dc.par_chunks_mut(job * h)
        .zip(dz.par_chunks_mut(job * 4 * h))
        .enumerate()
        .for_each_init(
            || (vec![0.0f32; h], vec![0.0f32; h]),
            |(zeros, dh), (j, (dc, dz))| {
                let r0 = j * job;
                for (r, (dc, dz)) in dc
                    .chunks_exact_mut(h)
                    .zip(dz.chunks_exact_mut(4 * h))
                    .enumerate()
                {
                    let row = r0 + r;
                    dh.copy_from_slice(&dy[row * h..][..h]);
                    if let Some(d) = dh_rec {
                        for (a, b) in dh.iter_mut().zip(&d[row * h..][..h]) {
                            *a += b;
                        }
                    }
                    let c_prev = c_prev.map_or(&zeros[..], |c| &c[row * h..][..h]);
                    step_back_row(
                        &gates[row * 4 * h..][..4 * h],
                        &c[row * h..][..h],
                        c_prev,
                        dh,
                        dc,
                        dz,
                    );
                }
            },
        );
}
