#!/usr/bin/env bash
# Fuzzes the bundle loader and the .npy reader for a bounded time; exits non-zero if
# libFuzzer finds a crash, a sanitizer error, a leak, a timeout or an out-of-memory.
#
#   scripts/fuzz.sh [SECONDS] [extra libFuzzer flags...]      # default 60 s
#
# Configures and builds the `fuzz` preset (clang, libFuzzer, ASan+UBSan) into build/fuzz,
# writes the seed bundles (kiln_make_fuzz_seeds), then runs kiln_bundle_fuzzer on them and
# on fuzz/regressions/bundle_fuzzer (inputs that once crashed) with
# -max_total_time=SECONDS -rss_limit_mb=2048 -max_len=65536. kiln_npy_fuzzer then gets a
# sixth of SECONDS (at least 5 s; the bundle fuzzer the rest, so the total is unchanged) on
# fuzz/seeds/npy_fuzzer and fuzz/regressions/npy_fuzzer. The corpus grows in
# BUILD/fuzz-corpus/bundle_fuzzer and is reused by the next run; crashing inputs are
# saved to BUILD/fuzz-artifacts/ (reproduce: BUILD/fuzz/kiln_bundle_fuzzer FILE).
#
# Environment:
#   KILN_FUZZ_BUILD_DIR  build folder (default build/fuzz, configured with `--preset fuzz`;
#                        any other folder is configured with the same cache variables)
#   KILN_FUZZ_BUILD_JOBS build parallelism (default: all cores)
#   KILN_FUZZ_SKIP_BUILD set to 1 to use an existing build
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-60}
if [[ $# -gt 0 ]]; then shift; fi
build=${KILN_FUZZ_BUILD_DIR:-$root/build/fuzz}
[[ "$build" = /* ]] || build=$root/$build
jobs=${KILN_FUZZ_BUILD_JOBS:-$(nproc)}

if [[ "${KILN_FUZZ_SKIP_BUILD:-0}" != 1 ]]; then
  if [[ "$build" == "$root/build/fuzz" ]]; then
    (cd "$root" && cmake --preset fuzz)
  else
    # The cache variables of the `fuzz` preset in CMakePresets.json.
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DKILN_SANITIZE="address;undefined" \
      -DKILN_BUILD_FUZZERS=ON -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF \
      -DKILN_BUILD_SAMPLES=OFF -DKILN_BUILD_CLI=OFF
  fi
  cmake --build "$build" -j "$jobs" --target kiln_bundle_fuzzer kiln_npy_fuzzer
  # Without the seed generator, fuzz from the saved corpus only.
  cmake --build "$build" -j "$jobs" --target kiln_make_fuzz_seeds ||
    echo "fuzz.sh: warning: kiln_make_fuzz_seeds did not build; using the existing corpus only" >&2
fi

fuzzer=$build/fuzz/kiln_bundle_fuzzer
seeds=$build/fuzz-seeds/bundle_fuzzer
corpus=$build/fuzz-corpus/bundle_fuzzer
artifacts=$build/fuzz-artifacts
mkdir -p "$seeds" "$corpus" "$artifacts"
if [[ -x $build/fuzz/kiln_make_fuzz_seeds ]]; then
  "$build/fuzz/kiln_make_fuzz_seeds" "$seeds"
fi

npy_seconds=$(( seconds / 6 > 5 ? seconds / 6 : 5 ))
bundle_seconds=$(( seconds - npy_seconds > 5 ? seconds - npy_seconds : 5 ))
echo "fuzz.sh: fuzzing for ${bundle_seconds}s (corpus $corpus, artifacts $artifacts)" >&2
status=0
# fuzz/regressions/bundle_fuzzer holds inputs that once crashed: replayed first, every run.
"$fuzzer" "$corpus" "$seeds" "$root/fuzz/regressions/bundle_fuzzer" \
  -max_total_time="$bundle_seconds" -rss_limit_mb=2048 -max_len=65536 -timeout=30 \
  -dict="$root/fuzz/bundle_fuzzer.dict" -artifact_prefix="$artifacts/" -print_final_stats=1 "$@" || status=$?
if [[ $status -ne 0 ]]; then
  echo "fuzz.sh: the fuzzer failed (exit $status); inputs saved in $artifacts" >&2
  exit "$status"
fi
echo "fuzz.sh: no crash in ${bundle_seconds}s" >&2

# The .npy reader (fuzz/npy_fuzzer.cpp): committed seeds, a growing corpus, past crashes.
npy_corpus=$build/fuzz-corpus/npy_fuzzer
mkdir -p "$npy_corpus" "$root/fuzz/regressions/npy_fuzzer"
echo "fuzz.sh: fuzzing the .npy reader for ${npy_seconds}s (corpus $npy_corpus)" >&2
"$build/fuzz/kiln_npy_fuzzer" "$npy_corpus" "$root/fuzz/seeds/npy_fuzzer" "$root/fuzz/regressions/npy_fuzzer" \
  -max_total_time="$npy_seconds" -rss_limit_mb=2048 -max_len=4096 -timeout=30 \
  -dict="$root/fuzz/npy_fuzzer.dict" -artifact_prefix="$artifacts/npy-" -print_final_stats=1 "$@" || status=$?
if [[ $status -ne 0 ]]; then
  echo "fuzz.sh: the .npy fuzzer failed (exit $status); inputs saved in $artifacts" >&2
  exit "$status"
fi
echo "fuzz.sh: no crash in ${npy_seconds}s" >&2
