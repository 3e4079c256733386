// The step-3 decoder with `batch == 1` and `seq % 16 == 0` specializations against the same
// model exported without them (so only its generic graph exists), on shapes each variant
// matches. Both bundles hold the same weights; the runtime picks the variant per call.
//
//   kiln_specialization_bench --benchmark_repetitions=3
//
// Results in docs/PERFORMANCE.md.
#include <benchmark/benchmark.h>

#include <array>
#include <cstring>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../samples/models/models.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/program.h"

namespace {

using namespace kiln;

// (batch, seq) per benchmark argument, and the variant the specialized bundle picks.
constexpr std::array<std::pair<std::int64_t, std::int64_t>, 4> kShapes = {{{1, 32}, {1, 31}, {2, 32}, {2, 31}}};

std::shared_ptr<const Program> load(bool specialized) {
  static models::Decoder model(256, 64, 2, 4, 128);
  Dim batch("batch", 1, 8), seq("seq", 1, 128);
  if (specialized) {
    batch.specialize_on({"batch == 1"});
    seq.specialize_on({"seq % 16 == 0"});
  }
  auto ep = export_program([&](Tensor ids) { return model(ids); },
                           {input("ids", Tensor::from_ints({2, 8}, std::vector<std::int64_t>(16, 5)), {batch, seq})},
                           {.name = "decoder"});
  if (!ep.ok()) return nullptr;
  auto bytes = serialize_bundle(ep->program());
  if (!bytes.ok()) return nullptr;
  auto bundle = Bundle::from_bytes(*bytes);
  if (!bundle.ok()) return nullptr;
  auto program = Program::load(std::move(bundle).value());
  return program.ok() ? *program : nullptr;
}

void BM_Decoder(benchmark::State& state) {
  const auto [b, t] = kShapes[static_cast<std::size_t>(state.range(0))];
  const bool specialized = state.range(1) != 0;
  static const std::shared_ptr<const Program> programs[2] = {load(false), load(true)};
  const std::shared_ptr<const Program>& program = programs[specialized ? 1 : 0];
  if (program == nullptr) {
    state.SkipWithError("export or load failed");
    return;
  }
  Session session(*program, {.threads = 1});
  HostTensor ids;
  ids.dtype = DType::kI64;
  ids.shape = {b, t};
  ids.data.resize(static_cast<std::size_t>(b * t) * sizeof(std::int64_t));
  for (std::int64_t i = 0; i < b * t; ++i) {
    const std::int64_t token = (i * 37 + 11) % 256;
    std::memcpy(ids.data.data() + i * 8, &token, 8);
  }
  const std::vector<HostValue> inputs{HostValue::of(std::move(ids))};
  RunResult result;
  std::string variant;
  for (auto _ : state) {
    const Status s = session.run(inputs, result);
    if (!s.ok()) {
      state.SkipWithError(s.message().c_str());
      return;
    }
    variant = result.variant;
  }
  state.SetLabel(variant);
}
BENCHMARK(BM_Decoder)
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1}})
    ->ArgNames({"shape", "specialized"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
