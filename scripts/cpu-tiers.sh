#!/usr/bin/env bash
# Runs the CPU tests once more under each CPU vector tier narrower than the widest this
# machine has (BROTENSOR_CPU_TIER caps it; x86-64: avx512, then avx2, then scalar), so every
# tier's kernels pass the same tests: brotensor-cpu's unit tests, the integration suite's
# CPU side (its float64 and fixture references included) and the models' float64 forwards.
# The GPU devices are hidden (the Vulkan loader gets no driver; the main run already tested
# the GPUs with the widest CPU tier), so the parity tests run their CPU half and say that
# they skipped the GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

widest=$(cargo run -q -p brotensor-benches --bin bench_models -- tier | sed -n 's/.*"tier":"\([a-z0-9]*\)".*/\1/p')
case "$widest" in
  avx512) tiers=(avx2 scalar) ;;
  avx2 | neon) tiers=(scalar) ;;
  scalar) tiers=() ;;
  *) echo "cpu-tiers: FAIL: cannot tell this CPU's tier (got '$widest')"; exit 1 ;;
esac
echo "cpu-tiers: widest tier $widest (tested by the main run); now: ${tiers[*]:-none}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for tier in "${tiers[@]}"; do
  echo "cpu-tiers: BROTENSOR_CPU_TIER=$tier"
  if ! BROTENSOR_CPU_TIER=$tier BROTENSOR_REQUIRE_GPU= VK_ICD_FILENAMES=/nonexistent.json \
      VK_DRIVER_FILES=/nonexistent.json \
      cargo test -q -p brotensor-cpu -p brotensor-tests -p brotensor-models --lib --tests \
      >"$log" 2>&1; then
    cat "$log"
    echo "cpu-tiers: FAIL under BROTENSOR_CPU_TIER=$tier"
    exit 1
  fi
  grep -v "SKIPPED on GPU" "$log" | grep -E "^test result|panicked|NOT tested" || true
  echo "cpu-tiers: $tier passed; $(grep -c "SKIPPED on GPU" "$log" || true) parity checks ran their CPU half only (GPUs hidden on purpose)"
done
