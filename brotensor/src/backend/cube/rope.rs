//! GPU glue of the rope category. BF16 stored as words runs through F32 copies of the
//! data (the angle tables and positions are F32 / I32 already).

use brotensor_kernels::rope::{self as k, MropeAxisArgs, RopeFreqs, RopeGeometry};
use cubecl::prelude::*;

use super::{float_launch, out_handle, CubeBackend};
use crate::backend::RopeOps;
use crate::ops::{MropeTables, RopeLayout, RopeParams};
use crate::{Result, Tensor};

/// The launch geometry of `x` with `(head_dim, num_heads)` pairs laid out as `layout`.
fn geometry(x: &Tensor, (head_dim, num_heads): (usize, usize), layout: RopeLayout) -> RopeGeometry {
    RopeGeometry {
        rows: x.rows(),
        heads: num_heads,
        half: head_dim / 2,
        half_split: layout == RopeLayout::HalfSplit,
    }
}

impl<R: Runtime> CubeBackend<R> {
    /// [`RopeOps::rope_forward`] (or its transpose when `inverse`).
    fn rope_freq(
        &self,
        (op, inverse): (&'static str, bool),
        x: &Tensor,
        hd: (usize, usize),
        seq_offset: usize,
        p: &RopeParams,
        y: &mut Tensor,
    ) -> Result<()> {
        let (xh, yh) = (out_handle(x), out_handle(y));
        let g = geometry(x, hd, p.layout);
        let (ext_factor, corr_dims, mscale) = p.yarn_terms(hd.0);
        let freqs = RopeFreqs {
            seq_offset,
            ln_base: p.freq_base.ln(),
            freq_scale: p.freq_scale,
            ext_factor,
            corr_dims,
            mscale,
        };
        self.float_op(op, x.dtype())
            .inputs(&[x])
            .written(&mut [y])
            .run(
                |w, o| self.rope_freq((op, inverse), &w[0], hd, seq_offset, p, &mut o[0]),
                float_launch!(|F| k::launch_rope_freq::<R, F>(
                    &self.client,
                    (&xh, &yh),
                    g,
                    freqs,
                    inverse
                )),
            )
    }

    /// The table-driven ops: `(per_head, inverse)` picks which.
    #[allow(clippy::too_many_arguments)]
    fn rope_table(
        &self,
        (op, per_head, inverse): (&'static str, bool, bool),
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        hd: (usize, usize),
        layout: RopeLayout,
        y: &mut Tensor,
    ) -> Result<()> {
        let (xh, yh) = (out_handle(x), out_handle(y));
        let (ch, sh) = (out_handle(cos), out_handle(sin));
        let g = geometry(x, hd, layout);
        let which = (op, per_head, inverse);
        self.float_op(op, x.dtype())
            .inputs(&[x])
            .written(&mut [y])
            .run(
                |w, o| self.rope_table(which, &w[0], cos, sin, hd, layout, &mut o[0]),
                float_launch!(|F| k::launch_rope_table::<R, F>(
                    &self.client,
                    (&xh, &yh),
                    (&ch, &sh),
                    g,
                    (per_head, inverse)
                )),
            )
    }
}

impl<R: Runtime> RopeOps for CubeBackend<R> {
    fn rope_forward(
        &self,
        x: &Tensor,
        hd: (usize, usize),
        seq_offset: usize,
        p: &RopeParams,
        y: &mut Tensor,
    ) -> Result<()> {
        self.rope_freq(("rope_forward", false), x, hd, seq_offset, p, y)
    }

    fn rope_backward(
        &self,
        dy: &Tensor,
        hd: (usize, usize),
        seq_offset: usize,
        p: &RopeParams,
        dx: &mut Tensor,
    ) -> Result<()> {
        self.rope_freq(("rope_backward", true), dy, hd, seq_offset, p, dx)
    }

    fn rope_apply(
        &self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        hd: (usize, usize),
        layout: RopeLayout,
        y: &mut Tensor,
    ) -> Result<()> {
        self.rope_table(("rope_apply", false, false), x, cos, sin, hd, layout, y)
    }

    fn rope_apply_perhead(
        &self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        hd: (usize, usize),
        layout: RopeLayout,
        y: &mut Tensor,
    ) -> Result<()> {
        let op = ("rope_apply_perhead", true, false);
        self.rope_table(op, x, cos, sin, hd, layout, y)
    }

    fn rope_apply_backward(
        &self,
        dy: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        hd: (usize, usize),
        layout: RopeLayout,
        dx: &mut Tensor,
    ) -> Result<()> {
        let op = ("rope_apply_backward", false, true);
        self.rope_table(op, dy, cos, sin, hd, layout, dx)
    }

    fn rope_apply_mrope(
        &self,
        x: &Tensor,
        tables: [MropeTables<'_>; 3],
        positions: [&Tensor; 3],
        hd: (usize, usize),
        sections: [usize; 3],
        layout: RopeLayout,
        y: &mut Tensor,
    ) -> Result<()> {
        let (xh, yh) = (out_handle(x), out_handle(y));
        // An axis without pairs is never read (its tables may be empty): it is bound to the
        // buffers of an axis with pairs (one exists, since the sections add up to hd / 2).
        let used = (0..3).find(|&a| sections[a] > 0).unwrap_or(0);
        let source = |a: usize| if sections[a] > 0 { a } else { used };
        let handles: Vec<_> = (0..3)
            .map(|a| {
                let s = source(a);
                (
                    out_handle(tables[s].cos),
                    out_handle(tables[s].sin),
                    out_handle(positions[s]),
                )
            })
            .collect();
        let axis = |a: usize| MropeAxisArgs {
            cos: &handles[a].0,
            sin: &handles[a].1,
            pos: &handles[a].2,
            max_pos: tables[a].cos.rows(),
            pairs: sections[a],
        };
        let axes = [axis(0), axis(1), axis(2)];
        let shape = (x.rows(), hd.1, layout == RopeLayout::HalfSplit);
        self.float_op("rope_apply_mrope", x.dtype())
            .inputs(&[x])
            .written(&mut [y])
            .run(
                |w, o| {
                    let wy = &mut o[0];
                    self.rope_apply_mrope(&w[0], tables, positions, hd, sections, layout, wy)
                },
                float_launch!(|F| k::launch_rope_mrope::<R, F>(
                    &self.client,
                    (&xh, &yh),
                    axes,
                    shape
                )),
            )
    }
}
