//! CPU glue of the sampling category.

use brotensor_cpu::sampling::{self as smp, SampleParams};

use super::CpuBackend;
use crate::backend::{Draw, SamplingOps};
use crate::ops::checked_product;
use crate::{Result, Tensor};

fn params(d: &Draw, counter: u64) -> SampleParams {
    SampleParams {
        inv_temperature: d.inv_temperature,
        top_k: d.top_k,
        top_p: d.top_p,
        key: d.key,
        counter,
    }
}

impl SamplingOps for CpuBackend {
    fn sample_logits(&self, logits: &Tensor, draw: &Draw, indices: &mut Tensor) -> Result<()> {
        let (rows, v) = logits.shape();
        let mut scratch = vec![0.0f32; checked_product("sample_logits", "3 N V", &[3, rows, v])?];
        smp::sample_logits(
            logits.host(),
            v,
            params(draw, draw.counter),
            &mut scratch,
            indices.host_mut(),
        );
        Ok(())
    }

    fn sample_logits_into(
        &self,
        logits: &Tensor,
        draw: &Draw,
        counter: &mut Tensor,
        scratch: &mut Tensor,
        indices: &mut Tensor,
    ) -> Result<()> {
        let (rows, v) = logits.shape();
        let c = counter.host_mut::<i32>();
        let base = u64::from(c[0] as u32);
        c[0] = (c[0] as u32).wrapping_add(rows as u32) as i32;
        smp::sample_logits(
            logits.host(),
            v,
            params(draw, base),
            scratch.host_mut(),
            indices.host_mut(),
        );
        Ok(())
    }

    fn randn(&self, key: u64, counter: u64, y: &mut Tensor) -> Result<()> {
        smp::randn(key, counter, y.host_mut());
        Ok(())
    }

    fn rand_uniform(&self, key: u64, counter: u64, y: &mut Tensor) -> Result<()> {
        smp::rand_uniform(key, counter, y.host_mut());
        Ok(())
    }

    fn rand_bernoulli(&self, p: f32, key: u64, counter: u64, y: &mut Tensor) -> Result<()> {
        smp::rand_bernoulli(p, key, counter, y.host_mut());
        Ok(())
    }

    fn randn_truncated(
        &self,
        lo: f32,
        hi: f32,
        key: u64,
        counter: u64,
        y: &mut Tensor,
    ) -> Result<()> {
        smp::randn_truncated(lo, hi, key, counter, y.host_mut());
        Ok(())
    }
}
