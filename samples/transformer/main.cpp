// A GPT-style decoder exported with dynamic batch and sequence length, specialized on
// `seq % 16 == 0` and `batch == 1`, saved with golden self-tests, then loaded and run with
// the runtime: the generic graph vs the specializations on matching shapes.
//
//   kiln_sample_transformer out/transformer.kiln [--layers N]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "../models/models.h"
#include "kiln/runtime/npy.h"
#include "kiln/runtime/program.h"

using namespace kiln;

namespace {

HostTensor token_ids(std::int64_t batch, std::int64_t seq) {
  HostTensor t{DType::kI64, {batch, seq}, std::vector<std::uint8_t>(static_cast<std::size_t>(batch * seq) * 8)};
  for (std::int64_t i = 0; i < batch * seq; ++i) {
    const std::int64_t id = (i * 31 + 7) % 256;
    std::memcpy(t.data.data() + 8 * i, &id, 8);
  }
  return t;
}

// Median latency in ms of `session.run` on `input`; also reports the variant that ran.
double median_ms(Session& session, const HostTensor& input, std::string& variant) {
  std::vector<HostValue> in{HostValue::of(input)};
  std::vector<double> times;
  for (int i = 0; i < 25; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = session.run(in);
    const auto t1 = std::chrono::steady_clock::now();
    if (!r.ok()) {
      std::fprintf(stderr, "run failed: %s\n", r.status().message().c_str());
      std::exit(exit_code(r.status().code()));
    }
    variant = r->variant;
    times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT.kiln [--layers N]\n", argv[0]);
    return 1;
  }
  std::int64_t layers = 2;
  if (argc >= 4 && std::strcmp(argv[2], "--layers") == 0) layers = std::atoll(argv[3]);
  models::Decoder model(256, 64, layers, 4, 128);
  Dim batch("batch", 1, 8), seq("seq", 1, 128);
  batch.specialize_on({"batch == 1"});
  seq.specialize_on({"seq % 16 == 0"});
  ExportOptions options;
  options.name = "transformer";
  options.self_tests = 2;
  auto ep = export_program([&](Tensor ids) { return model(ids); },
                           {input("ids", Tensor::from_ints({2, 8}, std::vector<std::int64_t>(16, 5)), {batch, seq})}, options);
  if (!ep.ok()) {
    std::fprintf(stderr, "export failed: %s\n", ep.status().message().c_str());
    return exit_code(ep.status().code());
  }
  std::printf("exported %zu nodes, %zu specializations\n", ep->program().graphs[0].nodes.size(), ep->program().specializations.size());
  if (Status s = ep->save(argv[1]); !s.ok()) {
    std::fprintf(stderr, "save failed: %s\n", s.message().c_str());
    return exit_code(s.code());
  }
  std::printf("wrote %s\n", argv[1]);
  const std::string example = std::string(argv[1]) + ".ids.npy";
  if (Status s = write_npy(example, token_ids(2, 16)); !s.ok()) return std::fprintf(stderr, "%s\n", s.message().c_str()), 8;
  std::printf("wrote an example input %s (ids: i64[2, 16])\n", example.c_str());

  auto bundle = Bundle::open(argv[1]);
  if (!bundle.ok()) return std::fprintf(stderr, "%s\n", bundle.status().message().c_str()), 2;
  auto program = Program::load(std::move(bundle).value());
  if (!program.ok()) return std::fprintf(stderr, "%s\n", program.status().message().c_str()), exit_code(program.status().code());
  Session session(**program);
  std::printf("\n%-10s %-8s %-16s %10s\n", "batch", "seq", "variant", "median ms");
  for (auto [b, t] : {std::pair<std::int64_t, std::int64_t>{2, 31}, {2, 32}, {1, 31}, {1, 32}, {4, 64}, {4, 63}}) {
    std::string variant;
    const double ms = median_ms(session, token_ids(b, t), variant);
    std::printf("%-10lld %-8lld %-16s %10.3f\n", static_cast<long long>(b), static_cast<long long>(t), variant.c_str(), ms);
  }
  return 0;
}
