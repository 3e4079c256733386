// Issue 17's decode measure: the KV-cache decoder of samples/models/kv_decoder.h (d 128,
// 2 layers, random weights) exported as a stateful bundle, its linear layers quantized by
// `kiln quantize --weights int4 --group 32 --ops linear` (and variants), and both bundles
// run step by step on the same tokens (the f32 bundle's greedy continuation fed to both, so
// every step compares the two next-token distributions on the same context). Reports the
// greedy agreement and the mean KL(p_f32 || p_int4) per setting (test properties, printed).
//
// The target is >= 95 % agreement; this untrained model's next-token
// distributions are nearly flat (f32 top-1 probability ~0.046 over 256 tokens), so a
// small perturbation flips the argmax. Measured (docs/QUANTIZATION.md): the default (scale
// search, output head int8) 0.875 / 0.0031 nats; every linear int4 with searched scales
// 0.76 / 0.0064; with max-range scales (the first round) 0.823 / 0.0074. Agreement moves by
// a few of the 96 steps between settings of near-equal KL. The bounds below guard these
// measurements against regressions; they are not the target.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "../../samples/models/kv_decoder.h"
#include "cli_testutil.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

HostValue tokens_value(const std::vector<std::int64_t>& tokens) {
  HostTensor t{DType::kI64, {1, static_cast<std::int64_t>(tokens.size())}, std::vector<std::uint8_t>(tokens.size() * 8)};
  std::memcpy(t.data.data(), tokens.data(), t.data.size());
  return HostValue::of(std::move(t));
}

// The last position's logits as a softmax distribution (double).
std::vector<double> next_token_distribution(const HostTensor& logits) {
  const std::int64_t vocab = logits.shape.back(), row = logits.numel() / vocab - 1;
  const auto* v = reinterpret_cast<const float*>(logits.data.data()) + row * vocab;
  double max = v[0];
  for (std::int64_t i = 1; i < vocab; ++i) max = std::max(max, double(v[i]));
  std::vector<double> p(static_cast<std::size_t>(vocab));
  double total = 0;
  for (std::int64_t i = 0; i < vocab; ++i) total += p[i] = std::exp(double(v[i]) - max);
  for (double& x : p) x /= total;
  return p;
}

std::int64_t argmax(const std::vector<double>& p) {
  return std::max_element(p.begin(), p.end()) - p.begin();
}

std::shared_ptr<const Program> load(const std::string& path) {
  auto bundle = Bundle::open(path);
  EXPECT_TRUE(bundle.ok()) << bundle.status().message();
  if (!bundle.ok()) return nullptr;
  auto program = Program::load(std::move(bundle).value());
  EXPECT_TRUE(program.ok()) << program.status().message();
  return program.ok() ? *program : nullptr;
}

TEST(QuantizeDecode, Int4KvDecoderGreedyAgreementAndKlAgainstF32) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_quantize_decode_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  models::KvDecoderConfig config;
  config.d = 128;
  config.layers = 2;
  config.heads = 4;
  config.max_ctx = 128;
  models::KvDecoder model(config);
  Dim seq("seq", 1, config.max_ctx);
  auto exported = export_program(
      [&](Tensor ids, SymInt pos) { return model.step(ids, pos); },
      {input("ids", Tensor::from_ints({1, 4}, std::vector<std::int64_t>{1, 2, 3, 4}), {Dim::STATIC, seq}),
       int_input("input_pos", 2, Dim::DYNAMIC)},
      {.name = "kv_decode"});
  ASSERT_TRUE(exported.ok()) << exported.status().message();
  const std::string f32_path = (dir / "kv.kiln").string();
  ASSERT_TRUE(exported->save(f32_path).ok());
  const auto f32 = load(f32_path);
  ASSERT_TRUE(f32);
  struct Measure {
    double agreement = 0, mean_kl = 0;
  };
  // Quantizes the f32 bundle with `args` and runs both step by step.
  auto measure = [&](const std::string& label, const std::string& args) -> Measure {
    const std::string q_path = (dir / ("kv." + label + ".kiln")).string();
    const auto q = cli_test::shell(std::string(KILN_BIN) + " quantize " + f32_path + " -o " + q_path + " " + args + " 2>&1");
    EXPECT_EQ(q.code, 0) << q.out;
    const auto q4 = load(q_path);
    if (!q4) return {};
    constexpr std::int64_t kPrompt = 16, kSteps = 96;
    std::vector<std::int64_t> tokens;
    for (std::int64_t i = 0; i < kPrompt; ++i) tokens.push_back((i * 37 + 11) % config.vocab);
    Session a(*f32), b(*q4);
    RunResult ra, rb;
    const std::vector<HostValue> prefill{tokens_value(tokens), HostValue::integer(0)};
    EXPECT_TRUE(a.run(prefill, ra).ok());
    EXPECT_TRUE(b.run(prefill, rb).ok());
    int agree = 0;
    double kl_total = 0, top1_total = 0;
    for (std::int64_t step = 0; step < kSteps; ++step) {
      const std::vector<double> p = next_token_distribution(ra.outputs[0].tensor);
      const std::vector<double> qd = next_token_distribution(rb.outputs[0].tensor);
      double kl = 0;
      for (std::size_t i = 0; i < p.size(); ++i) kl += p[i] * (std::log(p[i]) - std::log(qd[i]));
      kl_total += kl;
      top1_total += p[static_cast<std::size_t>(argmax(p))];
      agree += argmax(p) == argmax(qd) ? 1 : 0;
      tokens.push_back(argmax(p));  // both continue on f32's greedy token
      const std::vector<HostValue> next{tokens_value({tokens.back()}),
                                        HostValue::integer(static_cast<std::int64_t>(tokens.size()) - 1)};
      if (!a.run(next, ra).ok() || !b.run(next, rb).ok()) {
        ADD_FAILURE() << label << ": step " << step << " failed";
        return {};
      }
    }
    const Measure m{double(agree) / kSteps, kl_total / kSteps};
    RecordProperty(label + "_agreement", std::to_string(m.agreement));
    RecordProperty(label + "_mean_kl", std::to_string(m.mean_kl));
    std::printf("%-28s vs f32 over %lld steps: greedy agreement %.3f, mean KL %.5f nats, f32 top-1 p %.4f\n",
                label.c_str(), static_cast<long long>(kSteps), m.agreement, m.mean_kl, top1_total / kSteps);
    return m;
  };
  // The default: linear layers int4 g32 with searched scales, the output head int8.
  const Measure mixed = measure("int4_head_int8", "--weights int4 --group 32 --ops linear");
  // Every linear layer int4, searched scales; and the plain max-range scales (the first round).
  const Measure all4 = measure("int4_all", "--weights int4 --group 32 --ops linear --embed-head int4");
  const Measure all4_max = measure("int4_all_max_scales", "--weights int4 --group 32 --ops linear --embed-head int4 --scales max");
  // Asymmetric groups; and the embeddings quantized too (int8 by default).
  measure("int4_zero_points_head_int8", "--weights int4 --group 32 --ops linear --zero-points");
  measure("int4_embeddings_head_int8", "--weights int4 --group 32");
  // Guards against regressions of the measured values (docs/QUANTIZATION.md), not the issue's
  // 95 % target.
  EXPECT_GE(mixed.agreement, 0.84);
  EXPECT_LT(mixed.mean_kl, 0.005);
  EXPECT_GE(all4.agreement, 0.70);
  EXPECT_LT(all4.mean_kl, 0.01);
  EXPECT_LT(all4.mean_kl, all4_max.mean_kl);  // the scale search lowers the KL
  EXPECT_LT(mixed.mean_kl, all4.mean_kl);     // and so does the int8 head
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
