// Bundle open time against weight size (docs/FORMAT.md, "Loading").
//
//   kiln_bundle_open_bench [--benchmark_filter=Raw]
//
// Bundles with 1 MiB, 100 MiB and 1 GiB of raw weights (the format sample plus one large
// f32 tensor) and with 1 MiB and 100 MiB of zstd weights are written once into a
// temporary folder (the 1 GiB one takes a few seconds), opened repeatedly, and removed at
// the end. The files stay in the page cache, so these are warm-cache numbers.
//
//   BM_OpenRaw          Bundle::open (mmap, default options): should not grow with the weights
//   BM_OpenRawVerified  verify_segment_checksums = true: hashes every raw segment (XXH3)
//   BM_OpenRawRead      use_mmap = false: reads the whole file into memory
//   BM_OpenZstd         zstd segments are checksummed and decompressed at open
//
// Counters: weights (bytes of weight data in the file), file (its size) and, where the
// work is proportional to the weights, bytes/s (weight bytes hashed, read or decompressed
// per second of CPU time, Google Benchmark's default for rates). Results: docs/FORMAT.md.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <utility>

#include "kiln/export/testing/format_sample.h"
#include "kiln/runtime/bundle.h"

namespace {

namespace fs = std::filesystem;
using kiln::format::Compression;

constexpr std::int64_t kMiB = 1 << 20;

// The bundles written so far, by (compression, weight bytes); removed by remove_all().
class BundleFiles {
 public:
  static BundleFiles& get() {
    static BundleFiles files;
    return files;
  }
  // Path of a bundle with `weight_bytes` of extra weights, written on first use.
  const std::string* path(Compression compression, std::int64_t weight_bytes) {
    const auto key = std::make_pair(compression, weight_bytes);
    if (auto it = paths_.find(key); it != paths_.end()) return &it->second;
    if (dir_.empty()) {
      dir_ = fs::temp_directory_path() / ("kiln_open_bench_" + std::to_string(::getpid()));
      fs::create_directories(dir_);
    }
    kiln::testing::FormatSampleOptions options;
    options.compression = compression;
    options.extra_weight_bytes = static_cast<std::uint64_t>(weight_bytes);
    const std::string p = (dir_ / ((compression == Compression::kZstd ? "zstd_" : "raw_") +
                                   std::to_string(weight_bytes) + ".kiln")).string();
    const kiln::Status s = kiln::testing::make_format_sample(options)->write(p);
    if (!s.ok()) {
      std::fprintf(stderr, "cannot write %s: %s\n", p.c_str(), s.to_string().c_str());
      return nullptr;
    }
    return &paths_.emplace(key, p).first->second;
  }
  void remove_all() {
    if (!dir_.empty()) fs::remove_all(dir_);
    paths_.clear();
  }

 private:
  fs::path dir_;
  std::map<std::pair<Compression, std::int64_t>, std::string> paths_;
};

void open_loop(benchmark::State& state, Compression compression, const kiln::LoadOptions& options, bool rate) {
  const std::int64_t weights = state.range(0);
  const std::string* path = BundleFiles::get().path(compression, weights);
  if (path == nullptr) {
    state.SkipWithError("cannot write the bundle");
    return;
  }
  std::uint64_t file_size = 0;
  for (auto _ : state) {
    auto bundle = kiln::Bundle::open(*path, options);
    if (!bundle.ok()) {
      state.SkipWithError(bundle.status().to_string().c_str());
      return;
    }
    file_size = (*bundle)->file_size();
    benchmark::DoNotOptimize(bundle);
  }
  state.counters["weights"] = benchmark::Counter(static_cast<double>(weights), benchmark::Counter::kDefaults,
                                                 benchmark::Counter::OneK::kIs1024);
  state.counters["file"] = benchmark::Counter(static_cast<double>(file_size), benchmark::Counter::kDefaults,
                                              benchmark::Counter::OneK::kIs1024);
  if (rate) {
    state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(weights), benchmark::Counter::kIsIterationInvariantRate,
                                                   benchmark::Counter::OneK::kIs1000);
  }
}

void BM_OpenRaw(benchmark::State& state) { open_loop(state, Compression::kNone, {}, false); }
void BM_OpenRawVerified(benchmark::State& state) {
  open_loop(state, Compression::kNone, {.verify_segment_checksums = true}, true);
}
void BM_OpenRawRead(benchmark::State& state) { open_loop(state, Compression::kNone, {.use_mmap = false}, true); }
void BM_OpenZstd(benchmark::State& state) { open_loop(state, Compression::kZstd, {}, true); }

BENCHMARK(BM_OpenRaw)->Arg(kMiB)->Arg(100 * kMiB)->Arg(1024 * kMiB)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_OpenRawVerified)->Arg(kMiB)->Arg(100 * kMiB)->Arg(1024 * kMiB)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OpenRawRead)->Arg(kMiB)->Arg(100 * kMiB)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OpenZstd)->Arg(kMiB)->Arg(100 * kMiB)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  BundleFiles::get().remove_all();
  return 0;
}
