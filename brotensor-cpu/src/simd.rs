//! Runtime selection of wider vector instructions for the hot loops.
//!
//! The crate is compiled for the baseline of its target (SSE2 on x86-64). [`wide`] runs a
//! closure compiled for AVX2 + FMA when the CPU has them, so the element loops inside it
//! vectorize 8-wide, and as is otherwise. Results are the same either way except for FMA
//! contraction, which only removes a rounding.

/// Runs `f`, compiled for AVX2 + FMA where the running CPU supports them.
#[inline(always)]
pub fn wide<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: `with_avx2` only enables instructions that were detected on this CPU
            // just above; the closure itself is safe code.
            return unsafe { with_avx2(f) };
        }
    }
    f()
}

/// `f` inlined into a function compiled with AVX2 and FMA enabled.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wide_path_computes_what_the_plain_one_does() {
        let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.37 - 100.0).collect();
        let plain: Vec<f32> = x.iter().map(|v| v * 2.0 + 1.0).collect();
        let fast = wide(|| x.iter().map(|v| v * 2.0 + 1.0).collect::<Vec<f32>>());
        assert_eq!(plain, fast);
        let e = wide(|| {
            x.iter()
                .map(|&v| crate::elementwise::exp_fast(v * 0.1))
                .collect::<Vec<_>>()
        });
        for (i, &v) in x.iter().enumerate() {
            let want = (v * 0.1).exp();
            assert!(((e[i] - want) / want).abs() < 4e-7, "{v}");
        }
    }
}
