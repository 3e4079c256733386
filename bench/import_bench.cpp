// Import time of the torch.export `decoder` fixture (.pt2 -> ir::Program -> bundle bytes),
// training IR and core ATen IR, and of large archives named by the environment:
//   KILN_IMPORT_BENCH_ARCHIVES=a.pt2:b.pt2 kiln_import_bench
// adds BM_ImportArchive/<file> (import_pt2 + save_bundle to a temporary file, as `kiln import`
// does), e.g. the 100 MB resnet50 archives of tests/fixtures/torch_zoo/make_archives.py, which
// stay out of git. Results in docs/PERFORMANCE.md.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
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

void import_archive_to_file(benchmark::State& state, const std::string& path) {
  const std::string out = (std::filesystem::temp_directory_path() / ("kiln_import_bench_" + std::to_string(::getpid()) + ".kiln")).string();
  for (auto _ : state) {
    auto ep = kiln::import_pt2(path);
    if (!ep.ok()) {
      state.SkipWithError(ep.status().message().c_str());
      return;
    }
    if (kiln::Status st = ep->save(out); !st.ok()) {
      state.SkipWithError(st.message().c_str());
      return;
    }
  }
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  std::filesystem::remove(out, ec);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
  state.counters["archive_MB"] = static_cast<double>(bytes) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* list = std::getenv("KILN_IMPORT_BENCH_ARCHIVES")) {
    std::stringstream paths(list);
    for (std::string path; std::getline(paths, path, ':');) {
      if (path.empty()) continue;
      const std::filesystem::path p(path);
      const std::string name = "BM_ImportArchive/" + p.parent_path().filename().string() + "/" + p.filename().string();
      benchmark::RegisterBenchmark(name.c_str(), [path](benchmark::State& s) { import_archive_to_file(s, path); })
          ->Unit(benchmark::kMillisecond)
          ->MeasureProcessCPUTime()
          ->UseRealTime();
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
