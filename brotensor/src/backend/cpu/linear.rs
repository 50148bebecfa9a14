//! CPU glue of the GEMM.

use brotensor_cpu::activation as act;
use brotensor_cpu::linear::{self as lin, Mat};

use super::CpuBackend;
use crate::backend::{Gemm, LinearOps};
use crate::{Result, Tensor};

/// The epilogue activation of a [`Gemm`] on one value.
fn epilogue_act(act: u32, v: f32) -> f32 {
    match act {
        1 => act::relu(v),
        2 => act::gelu(v),
        3 => act::gelu_exact(v),
        4 => act::silu(v),
        5 => act::quick_gelu(v),
        _ => v,
    }
}

/// Rows of `d` from `at` as a stored `rows x cols` matrix, read transposed when `trans`.
fn view(d: &[f32], at: usize, (rows, cols): (usize, usize), trans: bool) -> Mat<'_> {
    let m = Mat::new(&d[at..at + rows * cols], rows, cols);
    if trans {
        m.t()
    } else {
        m
    }
}

impl LinearOps for CpuBackend {
    fn gemm(
        &self,
        _name: &'static str,
        a: &Tensor,
        b: &Tensor,
        bias: Option<&Tensor>,
        c: &mut Tensor,
        g: Gemm,
    ) -> Result<()> {
        let (m, n, k) = (g.m, g.n, g.k);
        let stored =
            |trans: bool, rows: usize, cols: usize| if trans { (cols, rows) } else { (rows, cols) };
        let (a_shape, b_shape) = (stored(g.trans_a, m, k), stored(g.trans_b, k, n));
        let (ad, bd) = (a.host::<f32>(), b.host::<f32>());
        let bias = bias.map(|t| t.host::<f32>());
        let cd = c.host_mut::<f32>();
        for z in 0..g.batch {
            let out = &mut cd[z * g.strides.2..z * g.strides.2 + m * n];
            lin::matmul(
                view(ad, z * g.strides.0, a_shape, g.trans_a),
                view(bd, z * g.strides.1, b_shape, g.trans_b),
                out,
                g.accumulate,
            );
            if let Some(b) = bias {
                lin::add_row_bias(out, b);
            }
            if g.act != 0 {
                out.iter_mut().for_each(|v| *v = epilogue_act(g.act, *v));
            }
        }
        Ok(())
    }
}
