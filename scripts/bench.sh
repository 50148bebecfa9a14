#!/usr/bin/env bash
# Runs the benchmarks (release build) on every device; prints markdown tables.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release -p brotensor-benches
./target/release/bench_elementwise "$@"
./target/release/bench_dense
./target/release/bench_ops
