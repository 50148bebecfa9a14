//! GPU glue of the flash category.

use brotensor_kernels::flash as fk;
use cubecl::prelude::*;

use super::{float_launch, out_handle, CubeBackend};
use crate::backend::{FlashAttentionOps, FlashSpec, SeqLens};
use crate::{Error, Result, Tensor};

impl<R: Runtime> CubeBackend<R> {
    /// The kernel geometry of `spec` over `q (q_rows, nq*hd)`, or an error for a head dim
    /// past the kernel's tiles.
    fn flash_geometry(&self, q: &Tensor, spec: &FlashSpec) -> Result<fk::Flash> {
        let hd = q.cols() / spec.nq.max(1);
        if hd > fk::MAX_HEAD_DIM {
            return Err(Error::invalid(
                spec.op,
                format!(
                    "head_dim = {hd} exceeds the GPU kernel's {} on {}",
                    fk::MAX_HEAD_DIM,
                    self.device
                ),
            ));
        }
        Ok(fk::Flash {
            q_rows: q.rows(),
            k_rows: spec.lk,
            nq: spec.nq,
            nkv: spec.nkv,
            hd,
            causal: spec.causal,
            q_offset: spec.q_offset,
            window: spec.window,
            softcap: spec.softcap,
            offset_from_mask: spec.offset_from_mask,
        })
    }
}

impl<R: Runtime> FlashAttentionOps for CubeBackend<R> {
    fn flash_attention(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        spec: &FlashSpec,
        o: &mut Tensor,
    ) -> Result<()> {
        let g = self.flash_geometry(q, spec)?;
        let (qh, kh, vh, oh) = (out_handle(q), out_handle(k), out_handle(v), out_handle(o));
        let mh = mask.map(out_handle);
        self.float_op(spec.op, q.dtype())
            .inputs(&[q, k, v])
            .written(&mut [o])
            .run(
                |w, out| self.flash_attention(&w[0], &w[1], &w[2], mask, spec, &mut out[0]),
                float_launch!(|F| fk::launch_flash_attention::<R, F>(
                    &self.client,
                    (&qh, &kh, &vh),
                    mh.as_ref(),
                    None,
                    &oh,
                    &g
                )),
            )
    }

    fn flash_attention_varlen(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        seqs: &SeqLens<'_>,
        spec: &FlashSpec,
        o: &mut Tensor,
    ) -> Result<()> {
        let g = self.flash_geometry(q, spec)?;
        let (qh, kh, vh, oh) = (out_handle(q), out_handle(k), out_handle(v), out_handle(o));
        let (cq, ck) = (out_handle(seqs.q), out_handle(seqs.k));
        let varlen = fk::Varlen {
            cu_q: &cq,
            cu_k: &ck,
            batch: seqs.q_host.len().saturating_sub(1),
            max_q: seqs.max_q,
        };
        self.float_op(spec.op, q.dtype())
            .inputs(&[q, k, v])
            .written(&mut [o])
            .run(
                |w, out| {
                    let wo = &mut out[0];
                    self.flash_attention_varlen(&w[0], &w[1], &w[2], seqs, spec, wo)
                },
                float_launch!(|F| fk::launch_flash_attention::<R, F>(
                    &self.client,
                    (&qh, &kh, &vh),
                    None,
                    Some(varlen),
                    &oh,
                    &g
                )),
            )
    }

    fn kv_cache_append(
        &self,
        k_new: &Tensor,
        v_new: &Tensor,
        cur_len: usize,
        k_cache: &mut Tensor,
        v_cache: &mut Tensor,
    ) -> Result<()> {
        let shape = (k_new.rows(), k_new.cols(), cur_len, k_cache.rows());
        let (kh, vh) = (out_handle(k_new), out_handle(v_new));
        let (kch, vch) = (out_handle(k_cache), out_handle(v_cache));
        let c = &self.client;
        // The caches keep their rows outside the appended ones.
        self.float_op("kv_cache_append", k_new.dtype())
            .inputs(&[k_new, v_new])
            .updated(&mut [k_cache, v_cache])
            .run(
                |w, out| {
                    let [kc, vc] = out else {
                        unreachable!("two outputs")
                    };
                    self.kv_cache_append(&w[0], &w[1], cur_len, kc, vc)
                },
                float_launch!(|F| {
                    fk::launch_kv_append::<R, F>(c, &kh, &kch, shape)?;
                    fk::launch_kv_append::<R, F>(c, &vh, &vch, shape)
                }),
            )
    }
}
