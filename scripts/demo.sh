#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what is missing, build Kiln, export a
# GPT-style transformer with dynamic batch/seq, specializations and self-tests, inspect the
# bundle, run it, and validate it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${KILN_JOBS:-2}"
step() { echo; echo "=== [kiln demo] $* ($(date +%T))"; }

step "dependencies"
bash scripts/install-deps.sh

step "configure and build (release preset, build/release; a few minutes on 2 cores)"
cmake --preset release -DKILN_BUILD_BENCH=OFF >/dev/null
cmake --build --preset release -j"$jobs" --target kiln kiln_sample_transformer

mkdir -p out
step "export the transformer sample (specialized on batch == 1 and seq % 16 == 0, 2 self-tests)"
./build/release/samples/kiln_sample_transformer out/transformer.kiln

step "kiln inspect out/transformer.kiln"
./build/release/bin/kiln inspect out/transformer.kiln

step "kiln run out/transformer.kiln --input ids=out/transformer.kiln.ids.npy --output-dir out/"
./build/release/bin/kiln run out/transformer.kiln --input ids=out/transformer.kiln.ids.npy --output-dir out/

if ./build/release/bin/kiln run out/transformer.kiln --input ids=out/transformer.kiln.ids.npy --backend vulkan -o out/ 2>/dev/null; then
  echo "(ran on Vulkan too)"
else
  echo "(Vulkan backend: not available in this build yet; CPU only)"
fi

step "kiln validate out/transformer.kiln"
./build/release/bin/kiln validate out/transformer.kiln

step "done: bundle at out/transformer.kiln"
