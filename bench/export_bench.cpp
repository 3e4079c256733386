// Export time of a 48-layer GPT-style decoder (> 1,000 nodes): trace + passes + serialize.
// Goal (step 2): under 200 ms. Results in docs/PERFORMANCE.md.
#include <benchmark/benchmark.h>

#include <filesystem>

#include "../samples/models/models.h"

namespace {

using namespace kiln;

struct Fixture {
  models::Decoder model{256, 64, 48, 4, 128};
  Tensor ids = Tensor::from_ints({2, 16}, std::vector<std::int64_t>(32, 3));
  Dim batch{"batch", 1, 8};
  Dim seq{"seq", 1, 128};
  Result<ExportedProgram> trace() {
    return export_program([this](Tensor x) { return model(x); }, {input("ids", ids, {batch, seq})});
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

void BM_TraceDecoder48(benchmark::State& state) {
  auto& f = fixture();
  std::size_t nodes = 0;
  for (auto _ : state) {
    auto ep = f.trace();
    if (!ep.ok()) state.SkipWithError(ep.status().message().c_str());
    nodes = ep->program().graphs[0].nodes.size();
    benchmark::DoNotOptimize(ep);
  }
  state.counters["nodes"] = static_cast<double>(nodes);
}
BENCHMARK(BM_TraceDecoder48)->Unit(benchmark::kMillisecond);

void BM_ExportDecoder48ToFile(benchmark::State& state) {
  auto& f = fixture();
  const std::string path = (std::filesystem::temp_directory_path() / "kiln_export_bench.kiln").string();
  std::uintmax_t size = 0;
  for (auto _ : state) {
    auto ep = f.trace();
    if (!ep.ok()) state.SkipWithError(ep.status().message().c_str());
    const Status s = ep->save(path);
    if (!s.ok()) state.SkipWithError(s.message().c_str());
  }
  size = std::filesystem::file_size(path);
  std::filesystem::remove(path);
  state.counters["bundle_MiB"] = static_cast<double>(size) / (1 << 20);
}
BENCHMARK(BM_ExportDecoder48ToFile)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
