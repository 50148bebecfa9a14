#!/usr/bin/env bash
# The main job: fetch the two real models (once), list every device, and on each one embed
# sentences with all-MiniLM-L6-v2 and generate text with SmolLM2-135M-Instruct, checked
# against float64 references (models/src/bin/tour.rs). The synthetic op tour is
# `cargo run -p brotensor --example tour`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
scripts/fetch-models.sh >/dev/null
exec cargo run --release -q -p brotensor-models --bin tour
