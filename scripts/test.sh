#!/usr/bin/env bash
# The whole test suite (what CI runs): dependencies, a dev build with every test (samples
# included), an install of it used by a find_package(kiln) consumer, the
# loader tests under ASan+UBSan, the executor and kernel tests under TSan (8 sessions on
# one Program, the thread pool, every threaded kernel), the runtime-only -fno-exceptions
# build, and a bounded fuzzing run of the loader. Idempotent; build folders are reused (build/<preset>).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${KILN_JOBS:-2}"
step() { echo; echo "=== [kiln test] $* ($(date +%T))"; }

# Installs a configured build folder ($1, default build/dev) to a temporary prefix, then
# configures, builds and runs tests/install/consumer (find_package(kiln)) against it: a
# tiny model exported with kiln::export and run with kiln::runtime alone, then validated
# with the installed `kiln`. Standalone: bash scripts/test.sh install-check [BUILD_DIR]
install_consumer_check() {
  local build="${1:-build/dev}" tmp
  tmp="$(mktemp -d)"  # kept on failure, for a look; removed on success
  cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
  cmake -S tests/install/consumer -B "$tmp/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
  cmake --build "$tmp/consumer" -j"$jobs"
  "$tmp/consumer/consumer_export" "$tmp/tiny.kiln"
  "$tmp/consumer/consumer_run" "$tmp/tiny.kiln"
  "$tmp/prefix/bin/kiln" validate "$tmp/tiny.kiln" >/dev/null
  echo "installed $(find "$tmp/prefix" -type f | wc -l) files; the consumer built, exported, ran and validated"
  rm -rf "$tmp"
}

if [ "${1:-}" = "install-check" ]; then
  install_consumer_check "${2:-build/dev}"
  exit 0
fi

step "dependencies"
bash scripts/install-deps.sh

step "dev build"
cmake --preset dev >/dev/null
cmake --build --preset dev -j"$jobs"

step "tests (dev)"
ctest --preset dev -j"$jobs" --timeout 600

step "install tree: a find_package(kiln) consumer builds and runs"
install_consumer_check build/dev

step "loader tests under ASan+UBSan"
cmake --preset asan >/dev/null
cmake --build --preset asan -j"$jobs" --target kiln_format_tests kiln_runtime
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ./build/asan/tests/kiln_format_tests --gtest_brief=1

step "executor and kernel tests under TSan"
cmake --preset tsan -DKILN_VULKAN=OFF >/dev/null
cmake --build --preset tsan -j"$jobs" --target kiln_runtime_tests kiln_kernel_tests
TSAN_OPTIONS=halt_on_error=1 ./build/tsan/tests/kiln_runtime_tests --gtest_brief=1
TSAN_OPTIONS=halt_on_error=1 KILN_TEST_THREADS=2 ./build/tsan/tests/kiln_kernel_tests --gtest_brief=1

step "runtime-only build (-fno-exceptions, no export code)"
cmake --preset runtime-only >/dev/null
cmake --build --preset runtime-only -j"$jobs"

step "fuzzing the loader"
if [ -f scripts/fuzz.sh ]; then
  bash scripts/fuzz.sh "${KILN_FUZZ_SECONDS:-60}"
fi

step "all tests passed"
