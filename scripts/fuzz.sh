#!/usr/bin/env bash
# Fuzzes the bundle loader, the .pt2 archive reader and the .npy reader for a bounded time; exits non-zero if
# libFuzzer finds a crash, a sanitizer error, a leak, a timeout or an out-of-memory.
#
#   scripts/fuzz.sh [SECONDS] [extra libFuzzer flags...]      # default 60 s in all
#
# Configures and builds the `fuzz` preset (clang, libFuzzer, ASan+UBSan; the CPU kernels, which
# no fuzzer runs, uninstrumented: KILN_SANITIZE_CPU_KERNELS=OFF) into build/fuzz,
# writes the seed bundles (kiln_make_fuzz_seeds), then runs each target for its share of
# SECONDS (bundle_fuzzer 1/2, archive_fuzzer 1/3, npy_fuzzer 1/6) with -rss_limit_mb=2048 -max_len=65536:
#   kiln_bundle_fuzzer  on the generated seeds and fuzz/regressions/bundle_fuzzer;
#   kiln_archive_fuzzer on fuzz/seeds/archive_fuzzer (pickles, torch.save zips, both .pt2
#                       layouts) and fuzz/regressions/archive_fuzzer;
#   kiln_npy_fuzzer     on fuzz/seeds/npy_fuzzer and fuzz/regressions/npy_fuzzer.
# fuzz/regressions/<target> holds inputs that once crashed: replayed first, every run. The
# corpus grows in BUILD/fuzz-corpus/<target> and is reused by the next run; crashing inputs
# are saved to BUILD/fuzz-artifacts/ (reproduce: BUILD/fuzz/kiln_<target> FILE).
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
      -DKILN_BUILD_FUZZERS=ON -DKILN_SANITIZE_CPU_KERNELS=OFF -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF \
      -DKILN_BUILD_SAMPLES=OFF -DKILN_BUILD_CLI=OFF
  fi
  cmake --build "$build" -j "$jobs" --target kiln_bundle_fuzzer kiln_archive_fuzzer kiln_npy_fuzzer
  # Without the seed generator, fuzz from the saved corpus only.
  cmake --build "$build" -j "$jobs" --target kiln_make_fuzz_seeds ||
    echo "fuzz.sh: warning: kiln_make_fuzz_seeds did not build; using the existing corpus only" >&2
fi

seeds=$build/fuzz-seeds/bundle_fuzzer
artifacts=$build/fuzz-artifacts
mkdir -p "$seeds" "$artifacts"
if [[ -x $build/fuzz/kiln_make_fuzz_seeds ]]; then
  "$build/fuzz/kiln_make_fuzz_seeds" "$seeds"
fi

# run_fuzzer TARGET SECONDS SEED_DIR... [-- libFuzzer flags]
run_fuzzer() {
  local target=$1 time=$2
  shift 2
  local corpus=$build/fuzz-corpus/$target
  local dirs=() flags=()
  while [[ $# -gt 0 && $1 != -- ]]; do dirs+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  flags=("$@")
  mkdir -p "$corpus"
  [[ -d $root/fuzz/regressions/$target ]] && dirs+=("$root/fuzz/regressions/$target")
  local dict=()
  [[ -f $root/fuzz/$target.dict ]] && dict=(-dict="$root/fuzz/$target.dict")
  echo "fuzz.sh: fuzzing $target for ${time}s (corpus $corpus, artifacts $artifacts)" >&2
  local status=0
  "$build/fuzz/kiln_$target" "$corpus" "${dirs[@]}" \
    -max_total_time="$time" -rss_limit_mb=2048 -max_len=65536 -timeout=30 \
    "${dict[@]}" -artifact_prefix="$artifacts/" -print_final_stats=1 "${flags[@]}" || status=$?
  if [[ $status -ne 0 ]]; then
    echo "fuzz.sh: $target failed (exit $status); inputs saved in $artifacts" >&2
    exit "$status"
  fi
}

archive_seconds=$(( seconds / 3 > 0 ? seconds / 3 : 1 ))
npy_seconds=$(( seconds / 6 > 0 ? seconds / 6 : 1 ))
bundle_seconds=$(( seconds - archive_seconds - npy_seconds > 0 ? seconds - archive_seconds - npy_seconds : 1 ))
run_fuzzer bundle_fuzzer "$bundle_seconds" "$seeds" -- "$@"
run_fuzzer archive_fuzzer "$archive_seconds" "$root/fuzz/seeds/archive_fuzzer" -- "$@"
run_fuzzer npy_fuzzer "$npy_seconds" "$root/fuzz/seeds/npy_fuzzer" -- "$@"
echo "fuzz.sh: no crash in ${seconds}s" >&2
