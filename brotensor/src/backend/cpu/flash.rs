//! CPU glue of the flash category.

use brotensor_cpu::flash as fl;

use super::dtype_policy::{is_half, through_f32, with_half, Narrowed};
use super::CpuBackend;
use crate::backend::{FlashAttentionOps, FlashSpec, SeqLens};
use crate::{Dtype, Result, Tensor};

/// The CPU crate's geometry for `spec` over `q (lq, ·)`.
fn geometry(q: &Tensor, spec: &FlashSpec) -> fl::Attention {
    let hd = q.cols() / spec.nq.max(1);
    fl::Attention {
        lq: q.rows(),
        lk: spec.lk,
        nq: spec.nq,
        nkv: spec.nkv,
        hd,
        causal: spec.causal,
        q_offset: spec.q_offset,
        window: spec.window,
        softcap: spec.softcap,
        scale: 1.0 / (hd as f32).sqrt(),
    }
}

impl FlashAttentionOps for CpuBackend {
    fn flash_attention(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        spec: &FlashSpec,
        o: &mut Tensor,
    ) -> Result<()> {
        if is_half(q.dtype()) {
            // The mask is F32 whatever the data's dtype.
            return through_f32(&[q, k, v], &mut [Narrowed::written(o)], |w, out| {
                self.flash_attention(&w[0], &w[1], &w[2], mask, spec, &mut out[0])
            });
        }
        let mut a = geometry(q, spec);
        let mask = mask.map(|m| m.host::<f32>());
        if spec.offset_from_mask {
            match mask.and_then(fl::last_valid) {
                Some(p) => a.q_offset = p,
                // No kept key: every row is zero.
                None => return o.zero(),
            }
        }
        fl::attention(q.host(), k.host(), v.host(), mask, &a, o.host_mut());
        Ok(())
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
        if is_half(q.dtype()) {
            return through_f32(&[q, k, v], &mut [Narrowed::written(o)], |w, out| {
                self.flash_attention_varlen(&w[0], &w[1], &w[2], seqs, spec, &mut out[0])
            });
        }
        let a = geometry(q, spec);
        let out = o.host_mut();
        fl::attention_varlen(
            q.host(),
            k.host(),
            v.host(),
            seqs.q_host,
            seqs.k_host,
            &a,
            out,
        );
        Ok(())
    }

    fn kv_cache_append(
        &self,
        k_new: &Tensor,
        v_new: &Tensor,
        cur_len: usize,
        k_cache: &mut Tensor,
        v_cache: &mut Tensor,
    ) -> Result<()> {
        let cols = k_new.cols();
        if is_half(k_new.dtype()) {
            // A copy of the new rows into the cache: the 16-bit elements are moved as they are.
            with_half!(k_new.dtype(), |E| {
                fl::cache_append(k_new.host::<E>(), cur_len, cols, k_cache.host_mut());
                fl::cache_append(v_new.host::<E>(), cur_len, cols, v_cache.host_mut());
            });
            return Ok(());
        }
        fl::cache_append(k_new.host::<f32>(), cur_len, cols, k_cache.host_mut());
        fl::cache_append(v_new.host::<f32>(), cur_len, cols, v_cache.host_mut());
        Ok(())
    }
}
