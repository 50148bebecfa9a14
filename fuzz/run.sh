#!/usr/bin/env bash
# Fuzzes each model-file reader for SECONDS (default 600) with cargo fuzz (nightly), seeded
# with the committed fixtures. Usage: fuzz/run.sh [SECONDS] [TARGET...]
# FUZZ_JOBS=N runs N fuzzing processes side by side (default: one per core), each with one
# rayon thread (the ops' tensors are small: a thread pool per process only adds contention).
# Targets: safetensors, gguf, dequantize, api (all four when none is named). Crashes land in
# fuzz/artifacts/<target>/; each one becomes a regression test in tests/tests/all/.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors gguf dequantize api)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
fixtures=../tests/fixtures
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    case $t in
        safetensors) cp "$fixtures"/*.safetensors "corpus/$t/" ;;
        gguf) cp "$fixtures"/*.gguf "corpus/$t/" ;;
        dequantize)
            # One seed per dtype: the dtype byte, then a few blocks from the quant fixture.
            for i in $(seq 0 20); do
                { printf "\\x$(printf %02x "$i")"; head -c 2048 "$fixtures/quants.gguf"; } > "corpus/$t/seed-$i"
            done ;;
        api)
            # A few programs: each byte picks an op, operands, sizes and scalars.
            for i in $(seq 0 47); do
                { head -c 64 /dev/zero | tr '\0' '\003'; printf "\\x$(printf %02x "$i")"; head -c 256 "$fixtures/quants.gguf"; } > "corpus/$t/seed-$i"
            done ;;
    esac
done
# Allocations over 2 GiB fail (return null) instead of aborting, so the library's own
# handling of a failed allocation (an Err) is what runs; libFuzzer's own limit is set above it.
export ASAN_OPTIONS="${ASAN_OPTIONS:-allocator_may_return_null=1:max_allocation_size_mb=2048}"
export RAYON_NUM_THREADS="${RAYON_NUM_THREADS:-1}"
jobs="${FUZZ_JOBS:-$(nproc)}"
for t in "${targets[@]}"; do
    echo "== $t: ${seconds}s"
    rm -f fuzz-*.log
    cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$seconds" -max_len=65536 \
        -jobs="$jobs" -workers="$jobs" \
        -rss_limit_mb=6144 -malloc_limit_mb=4096 -print_final_stats=1 2>&1 | tee "/tmp/fuzz-$t.log" | grep -E "^(#[0-9]+ +DONE|stat::|==|SUMMARY|Done)" || true
    # Each job logs to fuzz-<n>.log here: their executions and any crash.
    grep -hE "^stat::number_of_executed_units|SUMMARY" fuzz-*.log 2>/dev/null || true
done
