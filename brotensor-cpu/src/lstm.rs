//! The fused time step of an LSTM (PyTorch `nn.LSTM` gate order i | f | g | o) and its
//! backward step. The products (the input projection of every step, the recurrent product
//! of each) are GEMMs done by the caller; these functions do the gate math of one step for
//! a batch, one row of `4H` pre-activations per batch entry. Rows are split over rayon.

use rayon::prelude::*;

/// Batch rows per rayon job for rows of `h` hidden units.
fn rows_per_job(h: usize) -> usize {
    (4096 / h.max(1)).max(1)
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
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
        .for_each(|(j, ((y, gates), c))| {
            let r0 = j * job;
            for (r, ((y, gates), c)) in y
                .chunks_exact_mut(h)
                .zip(gates.chunks_exact_mut(4 * h))
                .zip(c.chunks_exact_mut(h))
                .enumerate()
            {
                let row = r0 + r;
                let p = &p[row * 4 * h..][..4 * h];
                let zrec = zrec.map(|z| &z[row * 4 * h..][..4 * h]);
                let c_prev = c_prev.map(|c| &c[row * h..][..h]);
                for k in 0..h {
                    let z = |g: usize| p[g * h + k] + zrec.map_or(0.0, |z| z[g * h + k]);
                    let (i, f, g, o) = (sigmoid(z(0)), sigmoid(z(1)), z(2).tanh(), sigmoid(z(3)));
                    let cell = f * c_prev.map_or(0.0, |c| c[k]) + i * g;
                    gates[k] = i;
                    gates[h + k] = f;
                    gates[2 * h + k] = g;
                    gates[3 * h + k] = o;
                    c[k] = cell;
                    y[k] = o * cell.tanh();
                }
            }
        });
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
        .for_each(|(j, (dc, dz))| {
            let r0 = j * job;
            for (r, (dc, dz)) in dc
                .chunks_exact_mut(h)
                .zip(dz.chunks_exact_mut(4 * h))
                .enumerate()
            {
                let row = r0 + r;
                let gates = &gates[row * 4 * h..][..4 * h];
                let c = &c[row * h..][..h];
                let c_prev = c_prev.map(|c| &c[row * h..][..h]);
                let dy = &dy[row * h..][..h];
                let dh_rec = dh_rec.map(|d| &d[row * h..][..h]);
                for k in 0..h {
                    let (i, f, g, o) = (gates[k], gates[h + k], gates[2 * h + k], gates[3 * h + k]);
                    let dh = dy[k] + dh_rec.map_or(0.0, |d| d[k]);
                    let tc = c[k].tanh();
                    let dcell = dc[k] + dh * o * (1.0 - tc * tc);
                    let cp = c_prev.map_or(0.0, |c| c[k]);
                    dz[k] = dcell * g * i * (1.0 - i);
                    dz[h + k] = dcell * cp * f * (1.0 - f);
                    dz[2 * h + k] = dcell * i * (1.0 - g * g);
                    dz[3 * h + k] = dh * tc * o * (1.0 - o);
                    dc[k] = dcell * f;
                }
            }
        });
}
