#!/usr/bin/env bash
# Lowers every GPU kernel, in every specialisation the library launches (dtypes, vector
# sizes, instructions, comptime flags), to CUDA C++ on the host (the brotensor-kernels test
# cuda_lowering::every_kernel_lowers_to_cuda, which also checks that its enumeration covers
# every kernel, instruction and dtype in the sources) and compiles each unit to PTX with
# NVRTC from PyPI's NVIDIA wheels, for every ARCH: catches CUDA code-generation errors on a
# machine without a GPU. Needs the software Vulkan device (it builds the kernel
# definitions) and pip or a filled cache. test.sh runs it.
# Usage: scripts/nvrtc-check.sh [ARCH ...] (default: compute_80 compute_90, A100 and H100/H200;
# every unit for the first, the tensor-core units for the others: see nvrtc_check.py)
#   NVRTC_CACHE  where the wheels are unpacked (default /tmp/brotensor-nvrtc; kept between runs)
set -euo pipefail
cd "$(dirname "$0")/.."
archs=("$@")
[ ${#archs[@]} -gt 0 ] || archs=(compute_80 compute_90)
cache="${NVRTC_CACHE:-/tmp/brotensor-nvrtc}"
if [ ! -f "$cache/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ]; then
    mkdir -p "$cache/wheels"
    python3 -m pip download -q --no-deps -d "$cache/wheels" \
        nvidia-cuda-nvrtc-cu12==12.9.86 nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-nvcc-cu12==12.9.86
    for w in "$cache"/wheels/*.whl; do python3 -m zipfile -e "$w" "$cache"; done
fi
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp/xdg}"
mkdir -p "$XDG_RUNTIME_DIR"
units="$(mktemp -d)"
trap 'rm -rf "$units"' EXIT
cu="$units/cu"
# --workspace and test.sh's features: the same build as test.sh's, so nothing is rebuilt.
if ! BROTENSOR_CUDA_DIR="$cu" BROTENSOR_REQUIRE_GPU=wgpu cargo test -q --workspace --lib \
        --features="${BROTENSOR_FEATURES-}" every_kernel_lowers_to_cuda -- --nocapture \
        >"$units/log" 2>&1; then
    cat "$units/log"
    echo "nvrtc-check: FAILED to lower the kernels to CUDA C++"
    exit 1
fi
grep "^CUDA lowering: [0-9]" "$units/log" || { cat "$units/log"; echo "nvrtc-check: the lowering test did not run"; exit 1; }
python3 scripts/nvrtc_check.py "$cache" "$cu" "${archs[@]}"
