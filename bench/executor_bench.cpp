// Executor overheads: the per-op cost of the interpreter on a chain of 1,000 tiny ops (goal
// < 100 ns per op), and the fixed cost of one run() — input checks, signature lookup,
// specialization dispatch — on a one-op program with two specializations (goal < 1 µs).
#include <benchmark/benchmark.h>

#include "kiln/export/export.h"
#include "kiln/export/ops.h"
#include "kiln/export/serialize.h"
#include "kiln/runtime/program.h"

namespace {

std::shared_ptr<const kiln::Program> load(const kiln::ExportedProgram& ep) {
  auto bytes = kiln::serialize_bundle(ep.program());
  auto bundle = kiln::Bundle::from_bytes(*bytes);
  return *kiln::Program::load(std::move(bundle).value());
}

kiln::HostValue host(const kiln::Tensor& t) { return kiln::HostValue::of({t.dtype(), t.concrete_shape(), t.bytes()}); }

void BM_ChainOfTinyOps(benchmark::State& state) {
  const int ops = static_cast<int>(state.range(0));
  auto ep = kiln::export_program(
      [&](kiln::Tensor x) {
        for (int i = 0; i < ops; ++i) x = i % 2 ? kiln::relu(x) : kiln::add(x, x);
        return x;
      },
      {kiln::input("x", kiln::Tensor::randn({4}))});
  auto program = load(*ep);
  kiln::Session session(*program);
  const std::vector<kiln::HostValue> inputs{host(kiln::Tensor::randn({4}))};
  for (auto _ : state) benchmark::DoNotOptimize(session.run(inputs));
  // ops per second; the per-op time is its inverse (Time / 1000 for Arg(1000)).
  state.SetItemsProcessed(state.iterations() * ops);
}
BENCHMARK(BM_ChainOfTinyOps)->Arg(1000);

void BM_RunDispatchOverhead(benchmark::State& state) {
  kiln::Dim seq("seq", 1, 4096);
  seq.specialize_on({"seq % 16 == 0", "seq == 32"});
  auto ep = kiln::export_program([](kiln::Tensor x) { return kiln::relu(x); }, {kiln::input("x", kiln::Tensor::randn({8}), {seq})});
  auto program = load(*ep);
  kiln::Session session(*program);
  const std::vector<kiln::HostValue> inputs{host(kiln::Tensor::randn({static_cast<std::int64_t>(state.range(0))}))};
  for (auto _ : state) {
    auto r = session.run(inputs);
    benchmark::DoNotOptimize(r);
  }
  state.SetLabel(session.run(inputs)->variant);
}
BENCHMARK(BM_RunDispatchOverhead)->Arg(7)->Arg(32);

}  // namespace

BENCHMARK_MAIN();
