#!/usr/bin/env bash
# Runs the CPU tests once more under each CPU vector tier narrower than the widest this
# machine has (BROTENSOR_CPU_TIER caps it; x86-64: avx512, then avx2, then scalar), so every
# tier's kernels pass the same tests: brotensor-cpu's unit and reference tests, the
# integration suite's CPU side (its float64 and fixture references included) and the
# MiniLM / SmolLM2 float64 forwards (the `models::` tests of the real-model binary). The GPU devices are hidden (the Vulkan loader gets no driver; the main run
# already tested the GPUs with the widest CPU tier), so the parity tests run their CPU half
# and say that they skipped the GPU. It runs the test executables test.sh's build made
# (`cargo test --workspace --all-targets`, whose feature set a `-p` selection would change
# and rebuild).
set -euo pipefail
cd "$(dirname "$0")/.."

build=$(cargo test --workspace --all-targets --features="${BROTENSOR_FEATURES-}" --no-run --message-format=json)
exe() { # the test executable of target $1
  echo "$build" | sed -n "s/.*\"name\":\"$1\".*\"test\":true.*\"executable\":\"\([^\"]*\)\".*/\1/p" | head -n 1
}
bins=()
for target in brotensor_cpu norm_references all real_models; do
  b=$(exe "$target")
  [ -n "$b" ] || { echo "cpu-tiers: FAIL: no test executable for $target"; exit 1; }
  bins+=("$target=$b")
done
# The integration suite's child check says which tier the library runs.
all_bin=${bins[2]#*=}
tier_now() {
  (cd tests && "$all_bin" --ignored --exact cpu_tier::child_reports_tier --nocapture 2>/dev/null) |
    sed -n 's/^tier=\([a-z0-9]*\)$/\1/p'
}
widest=$(tier_now)
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
  export BROTENSOR_CPU_TIER=$tier BROTENSOR_REQUIRE_GPU= VK_ICD_FILENAMES=/nonexistent.json \
    VK_DRIVER_FILES=/nonexistent.json
  for entry in "${bins[@]}"; do
    target=${entry%%=*}
    # Packages' tests run from their own folder, as cargo runs them. Of the real models, MiniLM
    # and SmolLM2 (matmul, attention, norms, quantized GEMV); the other models' CPU forwards
    # use the same tier kernels and would add minutes under the scalar tier.
    filter=()
    case "$target" in
      brotensor_cpu | norm_references) dir=brotensor-cpu ;;
      all) dir=tests ;;
      real_models) dir=models filter=(models::) ;;
    esac
    if ! (cd "$dir" && "${entry#*=}" "${filter[@]}" -q --nocapture) >"$log" 2>&1; then
      cat "$log"
      echo "cpu-tiers: FAIL: $target under BROTENSOR_CPU_TIER=$tier"
      exit 1
    fi
    echo "cpu-tiers: $tier $target: $(grep '^test result' "$log" | tail -n 1)" \
      "($(grep -c 'SKIPPED on GPU' "$log" || true) parity checks ran their CPU half only)"
  done
  [ "$(tier_now)" = "$tier" ] ||
    { echo "cpu-tiers: FAIL: the library did not take BROTENSOR_CPU_TIER=$tier"; exit 1; }
done
