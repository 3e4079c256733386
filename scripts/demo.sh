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

step "the same on Vulkan, when a device exists (Mesa lavapipe counts: a CPU implementation)"
if ./build/release/bin/kiln run out/transformer.kiln --input ids=out/transformer.kiln.ids.npy --backend vulkan -o out/vulkan; then
  ./build/release/bin/kiln validate out/transformer.kiln --backend vulkan || true
else
  echo "(no usable Vulkan device here: the CPU results above stand)"
fi

step "kiln validate out/transformer.kiln"
./build/release/bin/kiln validate out/transformer.kiln

step "kiln inspect --dot: a picture of the graph (out/transformer.svg)"
./build/release/bin/kiln inspect out/transformer.kiln --dot out/transformer.dot
if command -v dot >/dev/null; then dot -Tsvg out/transformer.dot -o out/transformer.svg && echo "wrote out/transformer.svg"; fi

step "done: bundle at out/transformer.kiln"
