// Issue 17's decode measure: the KV-cache decoder of samples/models/kv_decoder.h (d 128,
// 2 layers, 4 heads, max_ctx 128) exported as a stateful bundle, its linear layers
// quantized by `kiln quantize --weights int4 --group 32 --ops linear` (and variants), and
// both bundles run step by step on the same tokens, comparing the two next-token
// distributions at every step: argmax agreement and KL(p_f32 || p_q) (test properties,
// printed). Two models:
//
// * Trained weights (tests/fixtures/kv_decoder_trained: a byte-level language model trained
//   by bench/train_kv_decoder.py on Debian's license texts; heldout.npy is text it never
//   saw). Greedy: the f32 bundle's greedy continuation of a held-out prompt, fed to both.
//   Also greedy from the first 32 bytes of each of the four held-out windows (384 steps),
//   a steadier measure than one prompt's 96 steps. Teacher-forced: held-out text fed to
//   both (also the held-out loss of each bundle). The target, >= 95 % greedy
//   agreement: int8 and int4 with GPTQ (`--calibrate`, on training text) meet it
//   (asserted); int4 rounded to nearest measures 94.8 % (one prompt) and 93.0 % (four),
//   guarded by lower bounds. docs/QUANTIZATION.md has the numbers and the analysis.
//
// * Random weights: nearly flat next-token distributions (f32 top-1 probability ~0.046
//   over 256 tokens), so a small perturbation flips the argmax. Measured
//   (docs/QUANTIZATION.md): the default (scale search, output head int8) 0.875 / 0.0031
//   nats; every linear int4 with searched scales 0.76 / 0.0064; with max-range scales (the
//   first round) 0.823 / 0.0074. Agreement moves by a few of the 96 steps between settings
//   of near-equal KL. Its bounds guard these measurements against regressions; they are not
//   the target.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <span>

#include "../../samples/models/kv_decoder_weights.h"
#include "cli_testutil.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/npy.h"
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

models::KvDecoderConfig test_config() {
  models::KvDecoderConfig config;
  config.d = 128;
  config.layers = 2;
  config.heads = 4;
  config.max_ctx = 128;
  return config;
}

// `model`'s cached step exported as a stateful bundle at `path`, loaded.
std::shared_ptr<const Program> export_decoder(models::KvDecoder& model, const std::string& path) {
  Dim seq("seq", 1, model.config.max_ctx);
  auto exported = export_program(
      [&](Tensor ids, SymInt pos) { return model.step(ids, pos); },
      {input("ids", Tensor::from_ints({1, 4}, std::vector<std::int64_t>{1, 2, 3, 4}), {Dim::STATIC, seq}),
       int_input("input_pos", 2, Dim::DYNAMIC)},
      {.name = "kv_decode"});
  EXPECT_TRUE(exported.ok()) << exported.status().message();
  if (!exported.ok()) return nullptr;
  const Status saved = exported->save(path);
  EXPECT_TRUE(saved.ok()) << saved.message();
  return saved.ok() ? load(path) : nullptr;
}

// `kiln quantize F32_PATH -o Q_PATH ARGS`, loaded.
std::shared_ptr<const Program> quantize(const std::string& f32_path, const std::string& q_path, const std::string& args) {
  const auto q = cli_test::shell(std::string(KILN_BIN) + " quantize " + f32_path + " -o " + q_path + " " + args + " 2>&1");
  EXPECT_EQ(q.code, 0) << q.out;
  return q.code == 0 ? load(q_path) : nullptr;
}

// Next-token distributions of the f32 (p) and quantized (q) bundles compared step by step.
struct Agreement {
  std::int64_t steps = 0, agree = 0;
  double kl = 0, top1 = 0, nll_p = 0, nll_q = 0;  // sums (nats); nll with a known next token

  void add(const std::vector<double>& p, const std::vector<double>& q, std::int64_t next = -1) {
    double step_kl = 0;
    for (std::size_t i = 0; i < p.size(); ++i) step_kl += p[i] * (std::log(p[i]) - std::log(q[i]));
    kl += step_kl;
    top1 += p[static_cast<std::size_t>(argmax(p))];
    agree += argmax(p) == argmax(q) ? 1 : 0;
    ++steps;
    if (next >= 0) nll_p -= std::log(p[static_cast<std::size_t>(next)]), nll_q -= std::log(q[static_cast<std::size_t>(next)]);
  }
  double rate() const { return double(agree) / double(steps); }
  double mean_kl() const { return kl / double(steps); }
  double mean_top1() const { return top1 / double(steps); }
  double bits_per_token(double nll) const { return nll / double(steps) / std::log(2.0); }
};

// Prefills `tokens[0, prefill)` in both sessions, then feeds one token a step; compares
// before each step. `next(step, p)` returns the token to feed (the f32 argmax for greedy,
// the text for teacher forcing) or -1 to stop; it is recorded as the known next token when
// `known_next`.
template <typename Next>
Agreement compare_steps(const Program& f32, const Program& quantized, std::vector<std::int64_t> tokens, bool known_next, Next next) {
  Agreement out;
  Session a(f32), b(quantized);
  RunResult ra, rb;
  const std::vector<HostValue> prefill{tokens_value(tokens), HostValue::integer(0)};
  if (!a.run(prefill, ra).ok() || !b.run(prefill, rb).ok()) {
    ADD_FAILURE() << "prefill failed";
    return out;
  }
  for (std::int64_t step = 0;; ++step) {
    const std::vector<double> p = next_token_distribution(ra.outputs[0].tensor);
    const std::vector<double> q = next_token_distribution(rb.outputs[0].tensor);
    const std::int64_t token = next(step, p);
    if (token < 0) break;
    out.add(p, q, known_next ? token : -1);
    tokens.push_back(token);
    const std::vector<HostValue> in{tokens_value({token}), HostValue::integer(static_cast<std::int64_t>(tokens.size()) - 1)};
    if (!a.run(in, ra).ok() || !b.run(in, rb).ok()) {
      ADD_FAILURE() << "step " << step << " failed";
      return out;
    }
  }
  return out;
}

// Greedy: after `prompt`, both fed the f32 bundle's argmax for `steps` steps (appended to
// `continuation` when given).
Agreement greedy_agreement(const Program& f32, const Program& quantized, const std::vector<std::int64_t>& prompt, std::int64_t steps,
                           std::vector<std::int64_t>* continuation = nullptr) {
  return compare_steps(f32, quantized, prompt, false, [&](std::int64_t step, const std::vector<double>& p) -> std::int64_t {
    if (step == steps) return -1;
    if (continuation != nullptr) continuation->push_back(argmax(p));
    return argmax(p);
  });
}

// Teacher forcing: both fed `text` (the first `prefill` tokens at once), compared at every
// position that predicts one of text[prefill, end).
Agreement teacher_forced(const Program& f32, const Program& quantized, std::span<const std::int64_t> text, std::size_t prefill) {
  return compare_steps(f32, quantized, {text.begin(), text.begin() + static_cast<std::ptrdiff_t>(prefill)}, true,
                       [&](std::int64_t step, const std::vector<double>&) -> std::int64_t {
                         const std::size_t at = prefill + static_cast<std::size_t>(step);
                         return at < text.size() ? text[at] : -1;
                       });
}

// One bundle's own greedy continuation of `prompt`.
std::vector<std::int64_t> greedy_tokens(const Program& program, const std::vector<std::int64_t>& prompt, std::int64_t steps) {
  std::vector<std::int64_t> out;
  Session s(program);
  RunResult r;
  std::vector<HostValue> in{tokens_value(prompt), HostValue::integer(0)};
  for (std::int64_t step = 0; step < steps; ++step) {
    if (!s.run(in, r).ok()) {
      ADD_FAILURE() << "greedy step " << step << " failed";
      break;
    }
    out.push_back(argmax(next_token_distribution(r.outputs[0].tensor)));
    in = {tokens_value({out.back()}), HostValue::integer(static_cast<std::int64_t>(prompt.size() + out.size()) - 1)};
  }
  return out;
}

TEST(QuantizeDecode, Int4KvDecoderGreedyAgreementAndKlAgainstF32) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_quantize_decode_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const models::KvDecoderConfig config = test_config();
  models::KvDecoder model(config);
  const std::string f32_path = (dir / "kv.kiln").string();
  const auto f32 = export_decoder(model, f32_path);
  ASSERT_TRUE(f32);
  struct Measure {
    double agreement = 0, mean_kl = 0;
  };
  // Quantizes the f32 bundle with `args` and runs both step by step.
  auto measure = [&](const std::string& label, const std::string& args) -> Measure {
    const auto q = quantize(f32_path, (dir / ("kv." + label + ".kiln")).string(), args);
    if (!q) return {};
    constexpr std::int64_t kPrompt = 16, kSteps = 96;
    std::vector<std::int64_t> prompt;
    for (std::int64_t i = 0; i < kPrompt; ++i) prompt.push_back((i * 37 + 11) % config.vocab);
    const Agreement a = greedy_agreement(*f32, *q, prompt, kSteps);
    const Measure m{a.rate(), a.mean_kl()};
    RecordProperty(label + "_agreement", std::to_string(m.agreement));
    RecordProperty(label + "_mean_kl", std::to_string(m.mean_kl));
    std::printf("%-28s vs f32 over %lld steps: greedy agreement %.3f, mean KL %.5f nats, f32 top-1 p %.4f\n",
                label.c_str(), static_cast<long long>(a.steps), m.agreement, m.mean_kl, a.mean_top1());
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

// The check on a trained model: tests/fixtures/kv_decoder_trained (its README says
// how it was made) and held-out text it never saw.
TEST(QuantizeDecode, TrainedKvDecoderInt4AndInt8AgainstF32OnHeldOutText) {
  const std::string fixture = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/kv_decoder_trained";
  const auto config = models::read_kv_decoder_config(fixture);
  ASSERT_TRUE(config.ok()) << config.status().message();
  ASSERT_EQ(models::describe(*config), models::describe(test_config()));
  models::KvDecoder model(*config);
  const Status loaded = models::load_kv_decoder_weights(model, fixture);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  const auto heldout = read_npy(fixture + "/heldout.npy");
  ASSERT_TRUE(heldout.ok()) << heldout.status().message();
  constexpr std::size_t kWindow = 128, kWindows = 4, kPrompt = 32, kPrefill = 16;
  ASSERT_EQ(heldout->dtype, DType::kI64);
  ASSERT_EQ(heldout->numel(), std::int64_t{kWindow * kWindows});
  std::vector<std::int64_t> text(kWindow * kWindows);
  std::memcpy(text.data(), heldout->data.data(), heldout->data.size());

  const fs::path dir = fs::temp_directory_path() / ("kiln_quantize_decode_trained_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string f32_path = (dir / "kv.kiln").string();
  const auto f32 = export_decoder(model, f32_path);
  ASSERT_TRUE(f32);
  struct Measure {
    Agreement greedy;      // the first window's prompt (the first rounds' measure)
    Agreement greedy_all;  // every window's prompt
    Agreement forced;
    double free_running = 0;  // the quantized bundle's own greedy tokens equal to f32's
  };
  auto accumulate = [](Agreement& sum, const Agreement& a) {
    sum.steps += a.steps, sum.agree += a.agree, sum.kl += a.kl, sum.top1 += a.top1;
    sum.nll_p += a.nll_p, sum.nll_q += a.nll_q;
  };
  const std::vector<std::int64_t> prompt(text.begin(), text.begin() + kPrompt);
  constexpr std::int64_t kSteps = kWindow - kPrompt;  // 96: the context ends at max_ctx
  auto measure = [&](const std::string& label, const std::string& args) -> Measure {
    Measure m;
    const auto q = quantize(f32_path, (dir / ("kv." + label + ".kiln")).string(), args);
    if (!q) return m;
    std::vector<std::int64_t> f32_tokens;
    m.greedy = greedy_agreement(*f32, *q, prompt, kSteps, &f32_tokens);
    const std::vector<std::int64_t> q_tokens = greedy_tokens(*q, prompt, kSteps);
    std::size_t same = 0;
    while (same < q_tokens.size() && q_tokens[same] == f32_tokens[same]) ++same;
    m.free_running = double(same) / kSteps;
    for (std::size_t w = 0; w < kWindows; ++w) {
      const auto window = std::span(text).subspan(w * kWindow, kWindow);
      accumulate(m.forced, teacher_forced(*f32, *q, window, kPrefill));
      accumulate(m.greedy_all, w == 0 ? m.greedy
                                      : greedy_agreement(*f32, *q, {window.begin(), window.begin() + kPrompt}, kSteps));
    }
    for (const auto& [name, value] : {std::pair{"greedy_agreement", m.greedy.rate()}, {"greedy_mean_kl", m.greedy.mean_kl()},
                                      {"greedy_all_agreement", m.greedy_all.rate()}, {"greedy_all_mean_kl", m.greedy_all.mean_kl()},
                                      {"free_running_prefix", m.free_running}, {"forced_agreement", m.forced.rate()},
                                      {"forced_mean_kl", m.forced.mean_kl()}}) {
      RecordProperty(label + "_" + name, std::to_string(value));
    }
    std::printf("%-16s greedy (%lld steps): agreement %.3f, mean KL %.5f nats, f32 top-1 p %.3f; its own greedy tokens = f32's for "
                "%.0f%% of the steps\n",
                label.c_str(), static_cast<long long>(m.greedy.steps), m.greedy.rate(), m.greedy.mean_kl(), m.greedy.mean_top1(),
                100 * m.free_running);
    std::printf("%-16s greedy from %zu prompts (%lld steps): agreement %.3f, mean KL %.5f nats\n", label.c_str(), kWindows,
                static_cast<long long>(m.greedy_all.steps), m.greedy_all.rate(), m.greedy_all.mean_kl());
    std::printf("%-16s teacher-forced (%lld steps): agreement %.3f, mean KL %.5f nats, f32 top-1 p %.3f; "
                "held-out loss f32 %.3f, %s %.3f bits/byte\n",
                label.c_str(), static_cast<long long>(m.forced.steps), m.forced.rate(), m.forced.mean_kl(), m.forced.mean_top1(),
                m.forced.bits_per_token(m.forced.nll_p), label.c_str(), m.forced.bits_per_token(m.forced.nll_q));
    return m;
  };
  // The default: linear layers int4 g32 with searched scales, the output head int8.
  const Measure int4 = measure("int4", "--weights int4 --group 32 --ops linear");
  // GPTQ calibrated on training text: calibration.npy (the first 32 KiB of GPL-3, which the
  // model trained on) as 256 prefill runs of 128 bytes, each a folder with ids.npy and
  // input_pos.npy (named run100.. so that their sorted order is the text's).
  const auto calibration = read_npy(fixture + "/calibration.npy");
  ASSERT_TRUE(calibration.ok()) << calibration.status().message();
  ASSERT_EQ(calibration->dtype, DType::kU8);
  ASSERT_EQ(calibration->numel() % std::int64_t{kWindow}, 0);
  for (std::size_t run = 0; run < static_cast<std::size_t>(calibration->numel()) / kWindow; ++run) {
    const fs::path run_dir = dir / "calibration" / ("run" + std::to_string(100 + run));
    fs::create_directories(run_dir);
    std::vector<std::int64_t> bytes(calibration->data.begin() + static_cast<std::ptrdiff_t>(run * kWindow),
                                    calibration->data.begin() + static_cast<std::ptrdiff_t>((run + 1) * kWindow));
    HostTensor ids{DType::kI64, {1, std::int64_t{kWindow}}, std::vector<std::uint8_t>(kWindow * 8)};
    std::memcpy(ids.data.data(), bytes.data(), kWindow * 8);
    ASSERT_TRUE(write_npy((run_dir / "ids.npy").string(), ids).ok());
    HostTensor pos{DType::kI64, {}, std::vector<std::uint8_t>(8, 0)};
    ASSERT_TRUE(write_npy((run_dir / "input_pos.npy").string(), pos).ok());
  }
  const Measure gptq = measure("int4_gptq", "--weights int4 --group 32 --ops linear --calibrate " + (dir / "calibration").string());
  measure("int4_zero_points", "--weights int4 --group 32 --ops linear --zero-points");
  measure("int4_g16", "--weights int4 --group 16 --ops linear");
  const Measure int8 = measure("int8", "--weights int8 --ops linear");
  // Measured (docs/QUANTIZATION.md): int4 rounded to nearest, greedy 0.948 (91 of 96
  // steps; KL 0.032 nats) and 0.930 on four prompts, teacher-forced 0.924 (KL 0.033),
  // held-out loss 1.800 -> 1.862 bits/byte: short of the 95 %, which GPTQ (above)
  // meets. Its weight SQNR is ~21.5 dB in every layer (no outlier layer). These bounds
  // guard the measured values against regressions.
  EXPECT_GE(int4.greedy.rate(), 0.92);
  EXPECT_GE(int4.forced.rate(), 0.90);
  EXPECT_LT(int4.greedy.mean_kl(), 0.045);
  EXPECT_LT(int4.forced.mean_kl(), 0.045);
  EXPECT_LT(int4.forced.bits_per_token(int4.forced.nll_q) - int4.forced.bits_per_token(int4.forced.nll_p), 0.1);
  // GPTQ meets the target. Measured: greedy 0.958 (one prompt, 92 of 96), 0.966
  // (four prompts, 384 steps), teacher-forced 0.964; KL 0.0082 / 0.0074 / 0.0102 nats,
  // a third to a quarter of rounding to nearest's; held-out loss 1.797 bits/byte (f32
  // 1.800). The same on every KILN_CPU_ISA. One prompt's 96 steps move by a step or two
  // between settings of near-equal KL, so the target is asserted on the four prompts.
  EXPECT_GE(gptq.greedy_all.rate(), 0.95);
  EXPECT_GE(gptq.greedy.rate(), 0.93);
  EXPECT_GE(gptq.forced.rate(), 0.94);
  EXPECT_LT(gptq.greedy_all.mean_kl(), 0.5 * int4.greedy_all.mean_kl());
  EXPECT_LT(gptq.forced.mean_kl(), 0.5 * int4.forced.mean_kl());
  EXPECT_LT(gptq.forced.bits_per_token(gptq.forced.nll_q) - gptq.forced.bits_per_token(gptq.forced.nll_p), 0.02);
  EXPECT_GE(int4.greedy_all.rate(), 0.90);
  // int8 meets the target: 1.000 greedy (KL 0.0002), 0.993 teacher-forced.
  EXPECT_GE(int8.greedy.rate(), 0.95);
  EXPECT_GE(int8.forced.rate(), 0.98);
  EXPECT_LT(int8.forced.mean_kl(), 0.001);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
