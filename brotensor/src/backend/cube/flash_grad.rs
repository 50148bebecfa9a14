//! GPU glue of the flash_grad category.

use brotensor_cpu::flash_grad::FlashBwdGeometry;
use brotensor_kernels::flash_grad::{self as fg, FlashBwdBuffers, FlashBwdShape};
use cubecl::prelude::*;

use super::{float_launch, out_handle, CubeBackend};
use crate::backend::{Backend, FlashAttentionGradOps};
use crate::{Error, Result, Tensor};

impl<R: Runtime> CubeBackend<R> {
    /// The three backward kernels on native (or widened) operands: segments from the I32
    /// prefix sums `cu` (`batch + 1` values each), outputs `[O, dQ, dK, dV]`.
    fn flash_backward_kernels(
        &self,
        op: &'static str,
        inputs: [&Tensor; 4],
        mask: Option<&Tensor>,
        cu: [&Tensor; 2],
        geometry: FlashBwdGeometry,
        mut outputs: [&mut Tensor; 4],
    ) -> Result<()> {
        let [q, k, ..] = inputs;
        if geometry.head_dim > fg::MAX_HEAD_DIM {
            return Err(Error::invalid(
                op,
                format!(
                    "head_dim = {} exceeds the GPU kernels' {}",
                    geometry.head_dim,
                    fg::MAX_HEAD_DIM
                ),
            ));
        }
        let ins = inputs.map(out_handle);
        let outs = outputs.each_ref().map(|t| out_handle(t));
        let mask_h = mask.map(out_handle);
        let cu_h = cu.map(out_handle);
        let buffers = FlashBwdBuffers {
            inputs: ins.each_ref(),
            mask: mask_h.as_ref(),
            cu: cu_h.each_ref(),
            outputs: outs.each_ref(),
        };
        let shape = FlashBwdShape {
            rows_q: q.rows(),
            rows_k: k.rows(),
            heads: geometry.heads,
            head_dim: geometry.head_dim,
            batch: cu[0].numel() - 1,
            causal: geometry.causal,
        };
        if self.is_software() && fg::unit_iterations(&shape) > fg::SOFTWARE_LOOP_LIMIT {
            return Err(Error::invalid(
                op,
                format!(
                    "{} query and {} key rows at head_dim {} need longer per-thread loops \
                     than the software Vulkan device runs ({} iterations); use the CPU or a \
                     hardware GPU",
                    shape.rows_q,
                    shape.rows_k,
                    shape.head_dim,
                    fg::SOFTWARE_LOOP_LIMIT
                ),
            ));
        }
        let c = &self.client;
        self.float_op(op, q.dtype())
            .inputs(&inputs)
            .written(&mut outputs)
            .run(
                |w, out| {
                    let [o, dq, dk, dv] = out else {
                        unreachable!("four outputs")
                    };
                    self.flash_backward_kernels(
                        op,
                        [&w[0], &w[1], &w[2], &w[3]],
                        mask,
                        cu,
                        geometry,
                        [o, dq, dk, dv],
                    )
                },
                float_launch!(|F| fg::launch_flash_attention_backward::<R, F>(c, &buffers, shape)),
            )
    }

    /// The one-segment prefix sums `[0, rows]` on this device.
    fn whole_segment(&self, rows: usize) -> Result<Tensor> {
        // The caller checked that the rows fit in I32.
        Tensor::from_slice_on(self.device, &[0i32, rows as i32], 1, 2)
    }
}

impl<R: Runtime> FlashAttentionGradOps for CubeBackend<R> {
    fn flash_attention_backward(
        &self,
        inputs: [&Tensor; 4],
        mask: Option<&Tensor>,
        geometry: FlashBwdGeometry,
        outputs: [&mut Tensor; 4],
    ) -> Result<()> {
        let cu_q = self.whole_segment(inputs[0].rows())?;
        let cu_k = self.whole_segment(inputs[1].rows())?;
        self.flash_backward_kernels(
            "flash_attention_backward",
            inputs,
            mask,
            [&cu_q, &cu_k],
            geometry,
            outputs,
        )
    }

    fn flash_attention_varlen_backward(
        &self,
        inputs: [&Tensor; 4],
        cu: [&Tensor; 2],
        _cu_host: [&[usize]; 2],
        geometry: FlashBwdGeometry,
        [dq, dk, dv]: [&mut Tensor; 3],
    ) -> Result<()> {
        // The recomputed forward output is not returned here.
        let mut o = Tensor::empty_on(self.device, dq.rows(), dq.cols(), dq.dtype())?;
        self.flash_backward_kernels(
            "flash_attention_varlen_backward",
            inputs,
            None,
            cu,
            geometry,
            [&mut o, dq, dk, dv],
        )
    }
}
