//! CPU glue of the flash_grad category.

use brotensor_cpu::flash_grad::{self as fg, FlashBwdGeometry, FlashBwdInputs};

use super::dtype_policy::{is_half, through_f32, Narrowed};
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
        if is_half(q.dtype()) {
            // The mask is F32 whatever the data's dtype; every output is overwritten.
            let mut outputs = [o, dq, dk, dv].map(Narrowed::written);
            return through_f32(&[q, k, v, d_o], &mut outputs, |w, out| {
                let [o, dq, dk, dv] = out else {
                    unreachable!("four outputs")
                };
                self.flash_attention_backward(
                    [&w[0], &w[1], &w[2], &w[3]],
                    mask,
                    geometry,
                    [o, dq, dk, dv],
                )
            });
        }
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
        cu_host: [&[usize]; 2],
        geometry: FlashBwdGeometry,
        [dq, dk, dv]: [&mut Tensor; 3],
    ) -> Result<()> {
        if is_half(q.dtype()) {
            let mut outputs = [dq, dk, dv].map(Narrowed::written);
            return through_f32(&[q, k, v, d_o], &mut outputs, |w, out| {
                let [dq, dk, dv] = out else {
                    unreachable!("three outputs")
                };
                let inputs = [&w[0], &w[1], &w[2], &w[3]];
                varlen_backward_f32(inputs, cu_host, geometry, [dq, dk, dv]);
                Ok(())
            });
        }
        varlen_backward_f32([q, k, v, d_o], cu_host, geometry, [dq, dk, dv]);
        Ok(())
    }
}

/// [`FlashAttentionGradOps::flash_attention_varlen_backward`] on F32 tensors.
fn varlen_backward_f32(
    [q, k, v, d_o]: [&Tensor; 4],
    [cu_q, cu_k]: [&[usize]; 2],
    geometry: FlashBwdGeometry,
    [dq, dk, dv]: [&mut Tensor; 3],
) {
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
}
