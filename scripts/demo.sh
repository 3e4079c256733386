#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what is missing, build Kiln, write a
# bundle and inspect it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${KILN_JOBS:-2}"
step() { echo; echo "=== [kiln demo] $* ($(date +%T))"; }

step "dependencies"
bash scripts/install-deps.sh

step "configure and build (release, build/release)"
cmake --preset release -DKILN_BUILD_BENCH=OFF >/dev/null
cmake --build --preset release -j"$jobs" --target kiln kiln_make_format_sample

mkdir -p out
step "write a bundle that uses every format feature: out/format_sample.kiln"
./build/release/bin/kiln_make_format_sample out/format_sample.kiln --zstd

step "kiln inspect out/format_sample.kiln --graph"
./build/release/bin/kiln inspect out/format_sample.kiln --graph

step "done"
