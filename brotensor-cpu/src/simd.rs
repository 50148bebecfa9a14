//! Runtime selection of wider vector instructions for the hot loops.
//!
//! The crate is compiled for the baseline of its target (SSE2 on x86-64). [`wide`] runs a
//! closure compiled for AVX-512 (with AVX2 and FMA) or for AVX2 + FMA, the widest the CPU
//! has, so the element loops inside it vectorize 16- or 8-wide, and as is otherwise. Rust
//! never contracts `a * b + c` into a fused multiply-add, so plain arithmetic gives the same
//! bits on every path; math that takes the [`MulAdd`] the path hands it (the exp-based ops)
//! fuses where the path has FMA and may differ from the other paths in the last bit.
//!
//! The tier is the widest the CPU has unless [`TIER_ENV`] (`BROTENSOR_CPU_TIER`) caps it, so
//! every narrower tier's kernels can be tested and timed on a wider CPU.

/// Runs `f`, compiled for the widest vector extension the running CPU supports.
///
/// `f` receives the [`MulAdd`] the path supports. Pass an `#[inline(always)]` closure
/// (`wide(#[inline(always)] |m| ...)`), call only `#[inline(always)]` helpers from it, and
/// write its loops as `for` loops rather than `for_each` (whose `fold` is a separate
/// function): code is compiled for the wider extension only where it is inlined into the
/// dispatching function, LLVM declines to inline large bodies, and a fused multiply-add left
/// in baseline code becomes a library call per element.
#[inline(always)]
pub fn wide<R>(f: impl FnOnce(MulAdd) -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    match level() {
        // SAFETY: `level` returned this tier only after detecting every feature the
        // function enables on this CPU; the closure itself is safe code.
        Level::Avx512 => unsafe {
            with_avx512(
                #[inline(always)]
                || f(MulAdd::Fused),
            )
        },
        // SAFETY: as above, AVX2 and FMA were detected.
        Level::Avx2 => unsafe {
            with_avx2(
                #[inline(always)]
                || f(MulAdd::Fused),
            )
        },
        Level::Baseline => f(MulAdd::Split),
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // AArch64 has FMA in its baseline; other targets are not assumed to.
        f(if cfg!(target_arch = "aarch64") {
            MulAdd::Fused
        } else {
            MulAdd::Split
        })
    }
}

/// How `a * b + c` is evaluated on the path [`wide`] chose.
///
/// [`wide`] hands `Fused` only to code compiled with FMA enabled, where it is one
/// instruction; elsewhere `f32::mul_add` is a slow library call, so code outside [`wide`]
/// uses `Split`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MulAdd {
    /// One fused multiply-add (one rounding).
    Fused,
    /// A multiply, then an add (two roundings).
    Split,
}

impl MulAdd {
    /// `a * b + c`, fused or not.
    #[inline(always)]
    pub fn apply(self, a: f32, b: f32, c: f32) -> f32 {
        match self {
            MulAdd::Fused => a.mul_add(b, c),
            MulAdd::Split => a * b + c,
        }
    }
}

/// Asks the CPU to start loading the cache line that holds `p` into L2 (not L1, which the
/// row being worked on and its scratch already fill), so a later read does not wait for
/// memory (x86-64; nothing elsewhere). Any address is allowed: a prefetch never faults and
/// changes no value.
#[inline(always)]
pub fn prefetch(p: *const f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of the x86-64 baseline, and PREFETCHT0 neither faults nor writes,
    // whatever address it is given.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The vector tiers [`wide`] picks from.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    Baseline = 0,
    Avx2 = 1,
    Avx512 = 2,
}

/// The environment variable that caps the CPU tier: `scalar`, `avx2`, `avx512` or `neon`
/// (see [`tier_cap`]).
pub const TIER_ENV: &str = "BROTENSOR_CPU_TIER";

/// A vector tier a CPU kernel can be compiled for, narrowest first on each architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// The target's baseline and no hand-written vector kernels: SSE2 on x86-64 (what
    /// LLVM vectorizes by itself), NEON on AArch64.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C: 8 FP32 lanes.
    Avx2,
    /// x86-64 AVX-512 F, VL, BW, DQ (with AVX2, FMA and F16C): 16 FP32 lanes.
    Avx512,
    /// AArch64 NEON (Advanced SIMD): 4 FP32 lanes.
    Neon,
}

impl Tier {
    /// The name [`TIER_ENV`] takes for this tier.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Scalar => "scalar",
            Tier::Avx2 => "avx2",
            Tier::Avx512 => "avx512",
            Tier::Neon => "neon",
        }
    }
}

/// The tier [`TIER_ENV`] asks for: `Ok(None)` when unset or empty, an error naming the
/// variable and the accepted values when it holds anything else, or a tier this
/// architecture has no kernels for (`neon` on x86-64, `avx2` / `avx512` on AArch64).
pub fn tier_cap() -> Result<Option<Tier>, String> {
    let Ok(v) = std::env::var(TIER_ENV) else {
        return Ok(None);
    };
    let tier = match v.trim().to_ascii_lowercase().as_str() {
        "" => return Ok(None),
        "scalar" => Tier::Scalar,
        "avx2" => Tier::Avx2,
        "avx512" => Tier::Avx512,
        "neon" => Tier::Neon,
        _ => {
            return Err(format!(
                "{TIER_ENV}={v:?} is not a tier (expected scalar, avx2, avx512 or neon)"
            ))
        }
    };
    let here = match tier {
        Tier::Scalar => true,
        Tier::Avx2 | Tier::Avx512 => cfg!(target_arch = "x86_64"),
        Tier::Neon => cfg!(target_arch = "aarch64"),
    };
    if here {
        Ok(Some(tier))
    } else {
        Err(format!(
            "{TIER_ENV}={v:?} names a tier of another architecture (this one is {})",
            std::env::consts::ARCH
        ))
    }
}

/// The tier the CPU kernels run: the widest this CPU has, capped by [`TIER_ENV`] (a cap
/// wider than the CPU changes nothing). Decided once per process; an unusable value of
/// the variable is reported on standard error once and ignored (`brotensor::cpu_tier`
/// returns it as an error).
pub fn tier() -> Tier {
    #[cfg(target_arch = "x86_64")]
    match level() {
        Level::Baseline => Tier::Scalar,
        Level::Avx2 => Tier::Avx2,
        Level::Avx512 => Tier::Avx512,
    }
    #[cfg(target_arch = "aarch64")]
    {
        static TIER: std::sync::OnceLock<Tier> = std::sync::OnceLock::new();
        *TIER.get_or_init(|| match tier_cap() {
            Ok(Some(Tier::Scalar)) => Tier::Scalar,
            Ok(_) => Tier::Neon,
            Err(e) => {
                eprintln!("brotensor: cpu: {e}; ignoring it");
                Tier::Neon
            }
        })
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    Tier::Scalar
}

/// The tier [`wide`] and the hand-written kernels run on this CPU: [`tier`] as a
/// [`Level`] (detected and capped once; later calls are one atomic load).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn level() -> Level {
    use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
    static LEVEL: AtomicU8 = AtomicU8::new(u8::MAX);
    match LEVEL.load(Relaxed) {
        0 => Level::Baseline,
        1 => Level::Avx2,
        2 => Level::Avx512,
        _ => {
            let l = capped_level();
            LEVEL.store(l as u8, Relaxed);
            l
        }
    }
}

/// The widest tier this CPU has, capped by [`TIER_ENV`].
#[cfg(target_arch = "x86_64")]
#[cold]
fn capped_level() -> Level {
    let cap = match tier_cap() {
        Ok(Some(Tier::Scalar)) => Level::Baseline,
        Ok(Some(Tier::Avx2)) => Level::Avx2,
        Ok(_) => Level::Avx512,
        Err(e) => {
            eprintln!("brotensor: cpu: {e}; ignoring it");
            Level::Avx512
        }
    };
    detected_level().min(cap)
}

/// The widest tier this CPU has (`is_x86_feature_detected` caches).
#[cfg(target_arch = "x86_64")]
fn detected_level() -> Level {
    use std::arch::is_x86_feature_detected as has;
    if has!("avx2") && has!("fma") && has!("f16c") {
        if has!("avx512f") && has!("avx512vl") && has!("avx512bw") && has!("avx512dq") {
            Level::Avx512
        } else {
            Level::Avx2
        }
    } else {
        Level::Baseline
    }
}

/// `f` inlined into a function compiled with AVX2, FMA and F16C enabled.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// `f` inlined into a function compiled with AVX-512 (F, VL, BW, DQ), AVX2 and FMA enabled.
///
/// # Safety
/// The CPU must support every one of those features.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c")]
pub(crate) unsafe fn with_avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wide_path_computes_what_the_plain_one_does() {
        let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.37 - 100.0).collect();
        let plain: Vec<f32> = x.iter().map(|v| v * 2.0 + 1.0).collect();
        let fast = wide(|_| x.iter().map(|v| v * 2.0 + 1.0).collect::<Vec<f32>>());
        assert_eq!(plain, fast);
        // The fused path (where this CPU has one) keeps exp's accuracy bound.
        let e = wide(|m| {
            x.iter()
                .map(|&v| crate::elementwise::exp_with(m, v * 0.1))
                .collect::<Vec<_>>()
        });
        for (i, &v) in x.iter().enumerate() {
            let want = (v * 0.1).exp();
            assert!(((e[i] - want) / want).abs() < 4e-7, "{v}");
        }
    }

    #[test]
    fn every_tier_this_cpu_has_gives_the_same_bits() {
        let x: Vec<f32> = (0..1003).map(|i| i as f32 * 0.173 - 87.0).collect();
        let run = |x: &[f32]| -> Vec<u32> {
            x.iter()
                .map(|&v| (crate::activation::gelu(v) + crate::elementwise::exp_fast(v)).to_bits())
                .collect()
        };
        let plain = run(&x);
        assert_eq!(wide(|_| run(&x)), plain);
        #[cfg(target_arch = "x86_64")]
        {
            let l = level();
            if l != Level::Baseline {
                // SAFETY: AVX2 and FMA were detected (every tier above the baseline has them).
                assert_eq!(unsafe { with_avx2(|| run(&x)) }, plain);
            }
            assert_eq!(wide(|m| m) == MulAdd::Fused, l != Level::Baseline);
            if l == Level::Avx512 {
                // SAFETY: `level` detected every AVX-512 feature `with_avx512` enables.
                assert_eq!(unsafe { with_avx512(|| run(&x)) }, plain);
            }
        }
    }

    #[test]
    fn prefetch_accepts_any_address() {
        // Dangling, null and far-out-of-range addresses must not fault.
        let v = vec![1.0f32; 16];
        prefetch(v.as_ptr());
        prefetch(v.as_ptr().wrapping_add(1 << 40));
        prefetch(std::ptr::null());
        drop(v);
        prefetch(std::ptr::NonNull::<f32>::dangling().as_ptr());
    }
}
