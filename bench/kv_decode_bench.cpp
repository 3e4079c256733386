// KV-cache decoding (issue 15): the latency of one decode step of the d=256, 4-layer
// decoder of samples/models/kv_decoder.h at context 16, 64, 256 and 1024 (the cache holds
// that many positions; the step writes the next one and attends over all of them), next to
// the stateless program recomputing the whole sequence for the same token. One thread.
// bench/compare_kv_decode.py runs the same model in PyTorch eager.
//
//   build/dev/bench/kiln_kv_decode_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "../samples/models/kv_decoder.h"
#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/kernels/gemv.h"
#include "kiln/export/serialize.h"
#include "kiln/runtime/program.h"

namespace {

using namespace kiln;

// Room for the step after a context of 1024.
constexpr models::KvDecoderConfig kConfig{.vocab = 256, .d = 256, .layers = 4, .heads = 4, .max_ctx = 1088};

std::shared_ptr<const Program> load(const Result<ExportedProgram>& ep) {
  if (!ep.ok()) {
    std::fprintf(stderr, "export failed: %s\n", ep.status().message().c_str());
    std::exit(7);
  }
  auto bytes = serialize_bundle(ep->program());
  auto bundle = Bundle::from_bytes(*bytes);
  return *Program::load(std::move(bundle).value());
}

struct Programs {
  std::shared_ptr<const Program> cached, full;
};

Programs export_programs(const models::KvDecoderConfig& config) {
  models::KvDecoder model(config);
  Dim seq("seq", 1, config.max_ctx);
  const Tensor example = Tensor::from_ints({1, 4}, std::vector<std::int64_t>{1, 2, 3, 4});
  Programs out;
  ExportOptions options;
  options.self_tests = 0;
  out.cached = load(export_program([&](Tensor ids, SymInt pos) { return model.step(ids, pos); },
                                   {input("ids", example, {Dim::STATIC, seq}), int_input("input_pos", 2, Dim::DYNAMIC)}, options));
  out.full = load(export_program([&](Tensor ids) { return model.full(ids); }, {input("ids", example, {Dim::STATIC, seq})}, options));
  return out;
}

const Programs& programs() {
  static const Programs p = export_programs(kConfig);
  return p;
}

// The same model with a cache of 2 * 16 positions: until the runtime updates state in place,
// every step copies the whole cache (twice: index_put's output, then the commit), so this
// shows what the step costs without most of that copying.
const Programs& tight_programs() {
  static const Programs p = export_programs({.vocab = 256, .d = 256, .layers = 4, .heads = 4, .max_ctx = 32});
  return p;
}

HostValue tokens(std::int64_t n) {
  HostTensor t{DType::kI64, {1, n}, std::vector<std::uint8_t>(static_cast<std::size_t>(n) * 8)};
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t id = (i * 37 + 11) % kConfig.vocab;
    std::memcpy(t.data.data() + 8 * i, &id, 8);
  }
  return HostValue::of(std::move(t));
}

// One decode step at context N: the prompt of N tokens is prefilled once; every iteration
// then runs the step for position N (rewriting that cache row, so the context stays N).
// KILN_BENCH_THREADS=N: the Session's threads (default 1), for compare_kv_decode.py --threads.
int bench_threads() {
  const char* v = std::getenv("KILN_BENCH_THREADS");
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : 1;
}

void decode_step(benchmark::State& state, const Program& program) {
  const std::int64_t context = state.range(0);
  Session session(program, {.threads = bench_threads()});
  std::vector<HostValue> prefill{tokens(context), HostValue::integer(0)};
  RunResult result;
  if (Status s = session.run(prefill, result); !s.ok()) return state.SkipWithError(s.message().c_str());
  const std::vector<HostValue> step{tokens(1), HostValue::integer(context)};
  for (auto _ : state) {
    if (Status s = session.run(step, result); !s.ok()) return state.SkipWithError(s.message().c_str());
  }
}
void BM_KvDecodeStep(benchmark::State& state) { decode_step(state, *programs().cached); }
BENCHMARK(BM_KvDecodeStep)->Arg(16)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
void BM_KvDecodeStepTightCache(benchmark::State& state) { decode_step(state, *tight_programs().cached); }
BENCHMARK(BM_KvDecodeStepTightCache)->Arg(16)->Unit(benchmark::kMillisecond);

// Decoding as the sample does: each step at the next position (context, context + 1, ...,
// 64 steps from one prefill, then a fresh Session and prefill, untimed). Unlike
// BM_KvDecodeStep, every step has a new `input_pos`, so it includes planning that position
// (plans are cached per input shapes and int inputs).
void BM_KvDecodeAdvancing(benchmark::State& state) {
  const std::int64_t context = state.range(0);
  const Program& program = *programs().cached;
  std::unique_ptr<Session> session;
  RunResult result;
  std::int64_t i = 0;
  for (auto _ : state) {
    if (i % 64 == 0) {
      state.PauseTiming();
      session = std::make_unique<Session>(program, SessionOptions{.threads = 1});
      const std::vector<HostValue> prefill{tokens(context), HostValue::integer(0)};
      const Status s = session->run(prefill, result);
      state.ResumeTiming();
      if (!s.ok()) return state.SkipWithError(s.message().c_str());
    }
    const std::vector<HostValue> step{tokens(1), HostValue::integer(context + i % 64)};
    if (Status s = session->run(step, result); !s.ok()) return state.SkipWithError(s.message().c_str());
    ++i;
  }
}
BENCHMARK(BM_KvDecodeAdvancing)->Arg(16)->Arg(1024)->Unit(benchmark::kMillisecond);

// The same token without the cache: the stateless program runs over all N + 1 tokens.
void BM_RecomputeStep(benchmark::State& state) {
  const std::int64_t context = state.range(0);
  Session session(*programs().full, {.threads = 1});
  const std::vector<HostValue> all{tokens(context + 1)};
  RunResult result;
  for (auto _ : state) {
    if (Status s = session.run(all, result); !s.ok()) return state.SkipWithError(s.message().c_str());
  }
}
BENCHMARK(BM_RecomputeStep)->Arg(16)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);

// The two attention products of one layer's decode step at context N, on their own: q kᵀ
// (4 heads of [1, 64] x the window [64, N] of k_cache [64, 1088]) and a v (4 heads of
// [1, N] x the window [N, 64] of v_cache [1088, 64]), over caches (1.1 MB each) bigger than
// L2. Arg 1: 0 = the SGEMM's M = 1 path (what matmul took before), 1 = gemv_rows_f32.
void BM_AttentionProducts(benchmark::State& state) {
  const std::int64_t n = state.range(0), max_ctx = kConfig.max_ctx, hd = 64, heads = 4;
  std::vector<float> k_cache(static_cast<std::size_t>(heads * hd * max_ctx), 0.5f), v_cache(k_cache.size(), 0.25f);
  std::vector<float> q(static_cast<std::size_t>(heads * hd), 1.0f), a(static_cast<std::size_t>(heads * n), 0.001f);
  std::vector<float> scores(static_cast<std::size_t>(heads * n)), out(static_cast<std::size_t>(heads * hd));
  auto product = [&](std::int64_t m_n, std::int64_t m_k, const float* x, const float* b, std::int64_t ldb, float* c) {
    if (state.range(1) == 1) return cpu::kernels::gemv_rows_f32(m_n, m_k, x, b, ldb, c, nullptr);
    cpu::GemmParams p;
    p.m = 1, p.n = m_n, p.k = m_k, p.a = x, p.lda = m_k, p.b = b, p.ldb = ldb, p.c = c, p.ldc = m_n;
    if (!cpu::sgemm(p, nullptr).ok()) state.SkipWithError("sgemm failed");
  };
  for (auto _ : state) {
    for (std::int64_t h = 0; h < heads; ++h) {
      product(n, hd, q.data() + h * hd, k_cache.data() + h * hd * max_ctx, max_ctx, scores.data() + h * n);
      product(hd, n, a.data() + h * n, v_cache.data() + h * max_ctx * hd, hd, out.data() + h * hd);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * heads * hd * n * 4);
}
BENCHMARK(BM_AttentionProducts)->ArgsProduct({{256, 1024}, {0, 1}})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
