//! `BROTENSOR_CPU_TIER` and `brotensor::cpu_tier()`. The tier is fixed once per process, so
//! each check runs in a child process of this test binary (the ignored test below).

/// Runs the child check with `BROTENSOR_CPU_TIER` set to `value` (or unset) and returns
/// what it printed.
fn child(value: Option<&str>) -> String {
    brotensor_tests::run_child_test(
        "cpu_tier::child_reports_tier",
        brotensor::CPU_TIER_ENV,
        value,
    )
}

/// The widest tier this CPU has, found independently of the library.
fn widest() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && has!("avx512vl") && has!("avx512bw") && has!("avx512dq") {
            "avx512"
        } else if has!("avx2") && has!("fma") && has!("f16c") {
            "avx2"
        } else {
            "scalar"
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        "neon"
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        "scalar"
    }
}

#[test]
fn the_variable_caps_the_tier_and_bad_values_are_errors() {
    let top = widest();
    assert!(child(None).contains(&format!("tier={top}\n")));
    assert!(child(Some("scalar")).contains("tier=scalar\n"));
    assert!(child(Some("")).contains(&format!("tier={top}\n")));
    #[cfg(target_arch = "x86_64")]
    {
        // A cap wider than the CPU changes nothing; a narrower one is taken.
        let capped = if top == "scalar" { "scalar" } else { "avx2" };
        assert!(child(Some("AVX2")).contains(&format!("tier={capped}\n")));
        assert!(child(Some("avx512")).contains(&format!("tier={top}\n")));
        let text = child(Some("neon"));
        assert!(
            text.contains("tier=err brotensor: cpu_tier: BROTENSOR_CPU_TIER=\"neon\" names a tier of another architecture"),
            "{text}"
        );
        // The ops ignore it (with one line on standard error) and run the widest tier.
        assert!(text.contains(&format!("ops on {top}")), "{text}");
    }
    let text = child(Some("sse9"));
    assert!(
        text.contains("tier=err brotensor: cpu_tier: BROTENSOR_CPU_TIER=\"sse9\" is not a tier (expected scalar, avx2, avx512 or neon)"),
        "{text}"
    );
}

/// Run by the test above in a child process.
#[test]
#[ignore = "run in a child process by the_variable_caps_the_tier_and_bad_values_are_errors"]
fn child_reports_tier() {
    match brotensor::cpu_tier() {
        Ok(t) => println!("tier={t}"),
        Err(e) => println!("tier=err {e}"),
    }
    println!("ops on {}", brotensor_cpu::simd::tier().name());
    println!("child done");
}
