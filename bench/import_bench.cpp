// Import time of the torch.export `decoder` fixture (.pt2 -> ir::Program -> bundle bytes),
// training IR and core ATen IR. Results in docs/PERFORMANCE.md.
#include <benchmark/benchmark.h>

#include <string>

#include "kiln/export/import_pt2.h"
#include "kiln/export/serialize.h"

namespace {

std::string archive(const char* file) { return std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch_export/decoder/" + file; }

void import_only(benchmark::State& state, const char* file) {
  std::size_t nodes = 0;
  for (auto _ : state) {
    auto ep = kiln::import_pt2(archive(file));
    if (!ep.ok()) {
      state.SkipWithError(ep.status().message().c_str());
      return;
    }
    nodes = ep->program().graphs[0].nodes.size();
    benchmark::DoNotOptimize(ep);
  }
  state.counters["nodes"] = static_cast<double>(nodes);
}

void import_and_serialize(benchmark::State& state, const char* file) {
  for (auto _ : state) {
    auto ep = kiln::import_pt2(archive(file));
    if (!ep.ok()) {
      state.SkipWithError(ep.status().message().c_str());
      return;
    }
    auto bytes = kiln::serialize_bundle(ep->program());
    benchmark::DoNotOptimize(bytes);
  }
}

void BM_ImportDecoder(benchmark::State& s) { import_only(s, "model.pt2"); }
void BM_ImportDecoderCore(benchmark::State& s) { import_only(s, "model.core.pt2"); }
void BM_ImportDecoderToBytes(benchmark::State& s) { import_and_serialize(s, "model.pt2"); }
BENCHMARK(BM_ImportDecoder)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ImportDecoderCore)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ImportDecoderToBytes)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
