#!/usr/bin/env bash
# Lowers the tensor-core matmul kernel (F16 and BF16) to CUDA C++ on the host and compiles it
# to PTX with NVRTC from PyPI's NVIDIA wheels: catches CUDA code-generation errors on a
# machine without a GPU. Usage: scripts/nvrtc-check.sh [ARCH] (default compute_90, H100/H200).
set -euo pipefail
cd "$(dirname "$0")/.."
arch="${1:-compute_90}"
cache="${NVRTC_CACHE:-/tmp/brotensor-nvrtc}"
if [ ! -f "$cache/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ]; then
    mkdir -p "$cache/wheels"
    python3 -m pip download -q --no-deps -d "$cache/wheels" \
        nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12
    for w in "$cache"/wheels/*.whl; do python3 -m zipfile -e "$w" "$cache"; done
fi
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp/xdg}"
mkdir -p "$XDG_RUNTIME_DIR"
src="$(mktemp)"
trap 'rm -f "$src"' EXIT
BROTENSOR_DUMP_CUDA=1 cargo test -q -p brotensor-kernels --lib tensor_core -- --nocapture >"$src" 2>/dev/null
python3 scripts/nvrtc_check.py "$cache" "$arch" "$src"
