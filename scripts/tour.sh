#!/usr/bin/env bash
# The main job: list every device and run real work on each (see brotensor/examples/tour.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
exec cargo run -p brotensor --example tour
