//! GPU glue of the flash category.

use brotensor_kernels::flash as fk;
use cubecl::prelude::*;
use half::{bf16, f16};

use super::{out_handle, with_float, CubeBackend, Narrowed};
use crate::backend::{FlashAttentionOps, FlashSpec, SeqLens};
use crate::{Dtype, Error, Result, Tensor};

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
        if self.words(q.dtype()) {
            return self.through_f32(&[q, k, v], &mut [Narrowed::written(o)], |w, out| {
                self.flash_attention(&w[0], &w[1], &w[2], mask, spec, &mut out[0])
            });
        }
        let g = self.flash_geometry(q, spec)?;
        let (qh, kh, vh, oh) = (out_handle(q), out_handle(k), out_handle(v), out_handle(o));
        let mh = mask.map(out_handle);
        with_float!(q.dtype(), |F| fk::launch_flash_attention::<R, F>(
            &self.client,
            (&qh, &kh, &vh),
            mh.as_ref(),
            None,
            &oh,
            &g
        ))
        .map_err(|e| self.launch_error(spec.op, e))
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
        if self.words(q.dtype()) {
            return self.through_f32(&[q, k, v], &mut [Narrowed::written(o)], |w, out| {
                self.flash_attention_varlen(&w[0], &w[1], &w[2], seqs, spec, &mut out[0])
            });
        }
        let g = self.flash_geometry(q, spec)?;
        let (qh, kh, vh, oh) = (out_handle(q), out_handle(k), out_handle(v), out_handle(o));
        let (cq, ck) = (out_handle(seqs.q), out_handle(seqs.k));
        let varlen = fk::Varlen {
            cu_q: &cq,
            cu_k: &ck,
            batch: seqs.q_host.len().saturating_sub(1),
            max_q: seqs.max_q,
        };
        with_float!(q.dtype(), |F| fk::launch_flash_attention::<R, F>(
            &self.client,
            (&qh, &kh, &vh),
            None,
            Some(varlen),
            &oh,
            &g
        ))
        .map_err(|e| self.launch_error(spec.op, e))
    }

    fn kv_cache_append(
        &self,
        k_new: &Tensor,
        v_new: &Tensor,
        cur_len: usize,
        k_cache: &mut Tensor,
        v_cache: &mut Tensor,
    ) -> Result<()> {
        if self.words(k_new.dtype()) {
            let mut outs = [Narrowed::updated(k_cache), Narrowed::updated(v_cache)];
            return self.through_f32(&[k_new, v_new], &mut outs, |w, out| {
                let (kc, vc) = out.split_at_mut(1);
                self.kv_cache_append(&w[0], &w[1], cur_len, &mut kc[0], &mut vc[0])
            });
        }
        let shape = (k_new.rows(), k_new.cols(), cur_len, k_cache.rows());
        for (src, cache) in [(k_new, &*k_cache), (v_new, &*v_cache)] {
            let (sh, ch) = (out_handle(src), out_handle(cache));
            with_float!(k_new.dtype(), |F| fk::launch_kv_append::<R, F>(
                &self.client,
                &sh,
                &ch,
                shape
            ))
            .map_err(|e| self.launch_error("kv_cache_append", e))?;
        }
        Ok(())
    }
}
