#!/usr/bin/env bash
# Builds what a GPU machine without a Rust toolchain needs to check brotensor: the
# integration-test binary, the tour and the benchmarks (release, stripped, gzipped), plus the
# scripts that run them, into gpu-kit/out/ (ignored by git; at most 60 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
out=gpu-kit/out
rm -rf "$out"
mkdir -p "$out"

tests_exe=$(cargo test --release -p brotensor-tests --test all --no-run --message-format=json 2>/dev/null \
  | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | tail -n1)
[ -n "$tests_exe" ] || { echo "build: no test binary found"; exit 1; }
# The same tests with wgpu compiling through SPIR-V (Vulkan cooperative matrices).
spirv_exe=$(cargo test --release -p brotensor-tests --test all --features brotensor/vulkan-spirv \
  --no-run --message-format=json 2>/dev/null \
  | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | tail -n1)
[ -n "$spirv_exe" ] || { echo "build: no SPIR-V test binary found"; exit 1; }
cp "$spirv_exe" "$out/brotensor-tests-spirv"
cargo build --release -p brotensor --example tour
cargo build --release -p brotensor-models --bin tour
cp target/release/tour "$out/models_tour"
cargo build --release -p brotensor-benches --bin bench_elementwise --bin bench_dense --bin bench_ops \
  --bin bench_attention_gpu --bin bench_quant_gpu --bin bench_quant_gemm_gpu --bin bench_models --bin bench_conv \
  --bin bench_image --bin bench_train

cp "$tests_exe" "$out/brotensor-tests"
cp target/release/examples/tour "$out/tour"
cp target/release/bench_elementwise "$out/bench_elementwise"
cp target/release/bench_dense "$out/bench_dense"
cp target/release/bench_ops "$out/bench_ops"
cp target/release/bench_attention_gpu "$out/bench_attention_gpu"
cp target/release/bench_quant_gpu "$out/bench_quant_gpu"
cp target/release/bench_quant_gemm_gpu "$out/bench_quant_gemm_gpu"
cp target/release/bench_models "$out/bench_models"
cp target/release/bench_conv "$out/bench_conv"
cp target/release/bench_image "$out/bench_image"
cp target/release/bench_train "$out/bench_train"
# The digits (issue 29) travel with the kit: 265 KB, from scripts/fetch-models.sh.
digits="${BROTENSOR_MODELS:-$HOME/.cache/brotensor/models}/digits/digits.csv"
[ -f "$digits" ] || scripts/fetch-models.sh >/dev/null
mkdir -p "$out/data/digits"
cp "$digits" "$out/data/digits/digits.csv"
kit_bins=(brotensor-tests brotensor-tests-spirv tour bench_elementwise bench_dense bench_ops
  bench_attention_gpu bench_quant_gpu bench_quant_gemm_gpu models_tour bench_models bench_conv bench_image bench_train)
for b in "${kit_bins[@]}"; do
  strip "$out/$b"
  gzip -9 "$out/$b"
done
cp gpu-kit/run.sh gpu-kit/torch_peer.py scripts/ledger.sh "$out/"

size=$(du -sm "$out" | cut -f1)
ls -la "$out"
echo "gpu-kit: $size MiB in $out"
if [ "$size" -gt 60 ]; then
  echo "gpu-kit: over the 60 MiB budget"
  exit 1
fi
