//! CPU glue of the rope category.

use brotensor_cpu::rope::{self as cpu, Freqs, Heads, MropeAxis};

use super::dtype_policy::{is_half, through_f32, Narrowed};
use super::CpuBackend;
use crate::backend::RopeOps;
use crate::ops::{MropeTables, RopeLayout, RopeParams};
use crate::{Result, Tensor};

/// The CPU angle settings of `params` for heads of `head_dim`, from position `seq_offset`.
fn freqs(params: &RopeParams, head_dim: usize, seq_offset: usize) -> Freqs {
    let (ext_factor, corr_dims, mscale) = params.yarn_terms(head_dim);
    Freqs {
        seq_offset,
        freq_base: params.freq_base,
        freq_scale: params.freq_scale,
        ext_factor,
        corr_dims,
        mscale,
    }
}

/// The CPU head geometry of `(head_dim, num_heads)` pairs laid out as `layout`.
fn heads((head_dim, num_heads): (usize, usize), layout: RopeLayout) -> Heads {
    Heads {
        num_heads,
        head_dim,
        half_split: layout == RopeLayout::HalfSplit,
    }
}

impl RopeOps for CpuBackend {
    fn rope_forward(
        &self,
        x: &Tensor,
        hd: (usize, usize),
        seq_offset: usize,
        p: &RopeParams,
        y: &mut Tensor,
    ) -> Result<()> {
        if is_half(x.dtype()) {
            return through_f32(&[x], &mut [Narrowed::written(y)], |w, o| {
                self.rope_forward(&w[0], hd, seq_offset, p, &mut o[0])
            });
        }
        let f = freqs(p, hd.0, seq_offset);
        cpu::rope_forward(x.host(), y.host_mut(), heads(hd, p.layout), &f);
        Ok(())
    }

    fn rope_backward(
        &self,
        dy: &Tensor,
        hd: (usize, usize),
        seq_offset: usize,
        p: &RopeParams,
        dx: &mut Tensor,
    ) -> Result<()> {
        if is_half(dy.dtype()) {
            return through_f32(&[dy], &mut [Narrowed::written(dx)], |w, o| {
                self.rope_backward(&w[0], hd, seq_offset, p, &mut o[0])
            });
        }
        let f = freqs(p, hd.0, seq_offset);
        cpu::rope_backward(dy.host(), dx.host_mut(), heads(hd, p.layout), &f);
        Ok(())
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
        if is_half(x.dtype()) {
            // The angle tables are F32 whatever the data's dtype.
            return through_f32(&[x], &mut [Narrowed::written(y)], |w, o| {
                self.rope_apply(&w[0], cos, sin, hd, layout, &mut o[0])
            });
        }
        let g = heads(hd, layout);
        cpu::rope_apply(x.host(), cos.host(), sin.host(), y.host_mut(), g);
        Ok(())
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
        if is_half(x.dtype()) {
            return through_f32(&[x], &mut [Narrowed::written(y)], |w, o| {
                self.rope_apply_perhead(&w[0], cos, sin, hd, layout, &mut o[0])
            });
        }
        let g = heads(hd, layout);
        cpu::rope_apply_perhead(x.host(), cos.host(), sin.host(), y.host_mut(), g);
        Ok(())
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
        if is_half(dy.dtype()) {
            return through_f32(&[dy], &mut [Narrowed::written(dx)], |w, o| {
                self.rope_apply_backward(&w[0], cos, sin, hd, layout, &mut o[0])
            });
        }
        let g = heads(hd, layout);
        cpu::rope_apply_backward(dy.host(), cos.host(), sin.host(), dx.host_mut(), g);
        Ok(())
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
        if is_half(x.dtype()) {
            return through_f32(&[x], &mut [Narrowed::written(y)], |w, o| {
                self.rope_apply_mrope(&w[0], tables, positions, hd, sections, layout, &mut o[0])
            });
        }
        let axis = |a: usize| MropeAxis {
            cos: tables[a].cos.host(),
            sin: tables[a].sin.host(),
            pos: positions[a].host(),
            pairs: sections[a],
        };
        let axes = [axis(0), axis(1), axis(2)];
        cpu::rope_apply_mrope(x.host(), axes, y.host_mut(), heads(hd, layout));
        Ok(())
    }
}
