//! GPU glue of the sampling category.

use brotensor_kernels::sampling::{self as smp, RandomFill, SampleArgs};
use cubecl::prelude::*;

use super::{out_handle, CubeBackend};
use crate::backend::{Draw, SamplingOps};
use crate::ops::checked_product;
use crate::{Result, Tensor};

fn args(d: &Draw) -> SampleArgs {
    SampleArgs {
        inv_temperature: d.inv_temperature,
        top_k: d.top_k,
        top_p: d.top_p,
        key: d.key,
        counter: d.counter,
    }
}

impl<R: Runtime> CubeBackend<R> {
    fn fill(
        &self,
        op: &'static str,
        fill: RandomFill,
        (key, counter): (u64, u64),
        y: &mut Tensor,
    ) -> Result<()> {
        let yh = out_handle(y);
        smp::launch_random_fill(&self.client, &yh, y.numel(), fill, (key, counter))
            .map_err(|e| self.launch_error(op, e))
    }
}

impl<R: Runtime> SamplingOps for CubeBackend<R> {
    fn sample_logits(&self, logits: &Tensor, draw: &Draw, indices: &mut Tensor) -> Result<()> {
        let op = "sample_logits";
        let shape = logits.shape();
        let bytes = checked_product(op, "3 N V 4 bytes", &[3, shape.0, shape.1, 4])?;
        let scratch = self.client.empty(bytes);
        let (lh, ih) = (out_handle(logits), out_handle(indices));
        smp::launch_sample_logits(&self.client, &lh, None, (&scratch, &ih), shape, args(draw))
            .map_err(|e| self.launch_error(op, e))
    }

    fn sample_logits_into(
        &self,
        logits: &Tensor,
        draw: &Draw,
        counter: &mut Tensor,
        scratch: &mut Tensor,
        indices: &mut Tensor,
    ) -> Result<()> {
        let op = "sample_logits_into";
        let (lh, ch) = (out_handle(logits), out_handle(counter));
        let (sh, ih) = (out_handle(scratch), out_handle(indices));
        let shape = logits.shape();
        smp::launch_sample_logits(&self.client, &lh, Some(&ch), (&sh, &ih), shape, args(draw))
            .map_err(|e| self.launch_error(op, e))?;
        // The caller checked N against the kernels' 32-bit indexing (3 N V < 2^32).
        smp::launch_advance_counter(&self.client, &ch, shape.0 as u32)
            .map_err(|e| self.launch_error(op, e))
    }

    fn randn(&self, key: u64, counter: u64, y: &mut Tensor) -> Result<()> {
        self.fill("randn", RandomFill::Normal, (key, counter), y)
    }

    fn rand_uniform(&self, key: u64, counter: u64, y: &mut Tensor) -> Result<()> {
        self.fill("rand_uniform", RandomFill::Uniform, (key, counter), y)
    }

    fn rand_bernoulli(&self, p: f32, key: u64, counter: u64, y: &mut Tensor) -> Result<()> {
        self.fill(
            "rand_bernoulli",
            RandomFill::Bernoulli(p),
            (key, counter),
            y,
        )
    }

    fn randn_truncated(
        &self,
        lo: f32,
        hi: f32,
        key: u64,
        counter: u64,
        y: &mut Tensor,
    ) -> Result<()> {
        let fill = RandomFill::Truncated(lo, hi);
        self.fill("randn_truncated", fill, (key, counter), y)
    }
}
