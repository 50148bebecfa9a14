//! CPU glue of the flash_grad category.

use brotensor_cpu::flash_grad::{self as fg, FlashBwdGeometry, FlashBwdInputs};

use super::CpuBackend;
use crate::backend::FlashAttentionGradOps;
use crate::{Result, Tensor};

impl FlashAttentionGradOps for CpuBackend {
    fn flash_attention_backward(
        &self,
        [q, k, v, d_o]: [&Tensor; 4],
        mask: Option<&Tensor>,
        geometry: FlashBwdGeometry,
        [o, dq, dk, dv]: [&mut Tensor; 4],
    ) -> Result<()> {
        let inputs = FlashBwdInputs {
            q: q.host(),
            k: k.host(),
            v: v.host(),
            d_o: d_o.host(),
            mask: mask.map(|m| m.host()),
            cu_q: &[0, q.rows()],
            cu_k: &[0, k.rows()],
        };
        fg::flash_attention_backward(
            &inputs,
            geometry,
            o.host_mut(),
            dq.host_mut(),
            dk.host_mut(),
            dv.host_mut(),
        );
        Ok(())
    }

    fn flash_attention_varlen_backward(
        &self,
        [q, k, v, d_o]: [&Tensor; 4],
        _cu: [&Tensor; 2],
        [cu_q, cu_k]: [&[usize]; 2],
        geometry: FlashBwdGeometry,
        [dq, dk, dv]: [&mut Tensor; 3],
    ) -> Result<()> {
        let inputs = FlashBwdInputs {
            q: q.host(),
            k: k.host(),
            v: v.host(),
            d_o: d_o.host(),
            mask: None,
            cu_q,
            cu_k,
        };
        // The recomputed forward output is not returned here.
        let mut o = vec![0.0f32; q.numel()];
        fg::flash_attention_backward(
            &inputs,
            geometry,
            &mut o,
            dq.host_mut(),
            dk.host_mut(),
            dv.host_mut(),
        );
        Ok(())
    }
}
