#!/usr/bin/env bash
# The whole test suite (what CI runs): dependencies, a dev build with every test, then the
# loader tests under ASan+UBSan, the runtime-only -fno-exceptions build, and a bounded
# fuzzing run of the loader. Idempotent; build folders are reused (build/<preset>).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${KILN_JOBS:-2}"
step() { echo; echo "=== [kiln test] $* ($(date +%T))"; }

step "dependencies"
bash scripts/install-deps.sh

step "dev build"
cmake --preset dev >/dev/null
cmake --build --preset dev -j"$jobs"

step "tests (dev)"
ctest --preset dev -j"$jobs" --timeout 600

step "loader tests under ASan+UBSan"
cmake --preset asan >/dev/null
cmake --build --preset asan -j"$jobs" --target kiln_format_tests kiln_runtime
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ./build/asan/tests/kiln_format_tests --gtest_brief=1

step "runtime-only build (-fno-exceptions, no export code)"
cmake --preset runtime-only >/dev/null
cmake --build --preset runtime-only -j"$jobs"

step "fuzzing the loader"
if [ -f scripts/fuzz.sh ]; then
  bash scripts/fuzz.sh "${KILN_FUZZ_SECONDS:-60}"
fi

step "all tests passed"
