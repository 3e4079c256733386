// KV-cache decoding: a GPT-style decoder (samples/models/kv_decoder.h) traced in C++ with its
// keys and values in state buffers, exported as a stateful bundle, then a prompt prefilled
// and tokens generated greedily one at a time, each step writing one new K/V row per layer.
// The same model exported without the cache (a stateless program) recomputes the whole
// sequence for every new token; both must produce the same tokens, and the sample prints
// tokens/s for each.
//
//   kiln_sample_kv_decode OUT.kiln [--d 256] [--layers 4] [--heads 4] [--max-ctx 1024]
//                         [--prompt 32] [--new 64] [--threads 1] [--weights-out DIR]
//                         [--weights-in DIR]
//
// Writes OUT.kiln (stateful: inputs ids i64[1, seq] and input_pos, states
// att.<i>.k_cache / v_cache) and OUT.full.kiln (stateless: ids i64[1, seq]). The weights
// are deterministic pseudo-random, or with --weights-in read from DIR (the format of
// models/kv_decoder_weights.h: DIR/<name>.npy and DIR/config.txt, whose sizes replace the
// --d/--layers/--heads/--max-ctx defaults; e.g. tests/fixtures/kv_decoder_trained, trained
// by bench/train_kv_decoder.py), so a trained model can be exported and then quantized
// (`kiln quantize OUT.kiln -o OUT.q4.kiln --weights int4`). --weights-out writes every
// parameter as DIR/<name>.npy, DIR/tokens.npy (prompt then generated tokens) and
// DIR/config.txt, which bench/compare_kv_decode.py loads into the PyTorch model.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../models/kv_decoder_weights.h"
#include "kiln/runtime/npy.h"
#include "kiln/runtime/program.h"

using namespace kiln;

namespace {

struct Options {
  std::string out;
  models::KvDecoderConfig model;
  std::int64_t prompt = 32, generate = 64;
  int threads = 1;
  std::string weights_out, weights_in;
};

[[noreturn]] void die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "%s: %s\n", what.c_str(), s.message().c_str());
  std::exit(exit_code(s.code()));
}

Options parse(int argc, char** argv) {
  Options o;
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr, "usage: %s OUT.kiln [--d N] [--layers N] [--heads N] [--max-ctx N] [--prompt N] [--new N] [--threads N] [--weights-out DIR] [--weights-in DIR]\n", argv[0]);
    std::exit(1);
  }
  o.out = argv[1];
  std::vector<std::string> sizes;  // the model-size flags given
  for (int i = 2; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) die("usage", Status(StatusCode::kUsage, flag + " needs a value"));
    const std::string value = argv[i + 1];
    const auto number = [&] {
      char* end = nullptr;
      const long long v = std::strtoll(value.c_str(), &end, 10);
      if (*end != '\0' || v < 1) die("usage", Status(StatusCode::kUsage, flag + " must be a positive integer, got '" + value + "'"));
      return static_cast<std::int64_t>(v);
    };
    if (flag == "--d" || flag == "--layers" || flag == "--heads" || flag == "--max-ctx") sizes.push_back(flag);
    if (flag == "--d") o.model.d = number();
    else if (flag == "--layers") o.model.layers = number();
    else if (flag == "--heads") o.model.heads = number();
    else if (flag == "--max-ctx") o.model.max_ctx = number();
    else if (flag == "--prompt") o.prompt = number();
    else if (flag == "--new") o.generate = number();
    else if (flag == "--threads") o.threads = static_cast<int>(number());
    else if (flag == "--weights-out") o.weights_out = value;
    else if (flag == "--weights-in") o.weights_in = value;
    else die("usage", Status(StatusCode::kUsage, "unknown option " + flag));
  }
  if (!o.weights_in.empty()) {
    if (!sizes.empty()) die("usage", Status(StatusCode::kUsage, sizes[0] + " with --weights-in: the sizes come from " + o.weights_in + "/config.txt"));
    auto config = models::read_kv_decoder_config(o.weights_in);
    if (!config.ok()) die("--weights-in", config.status());
    o.model = *config;
  }
  if (o.model.d % o.model.heads != 0) die("usage", Status(StatusCode::kUsage, "--d must be a multiple of --heads"));
  if (o.prompt + o.generate > o.model.max_ctx) {
    die("usage", Status(StatusCode::kUsage, "--prompt + --new = " + std::to_string(o.prompt + o.generate) + " exceeds --max-ctx " +
                                                std::to_string(o.model.max_ctx)));
  }
  return o;
}

std::shared_ptr<const Program> save_and_load(const ExportedProgram& ep, const std::string& path) {
  if (Status s = ep.save(path); !s.ok()) die("save " + path, s);
  auto bundle = Bundle::open(path);
  if (!bundle.ok()) die("open " + path, bundle.status());
  auto program = Program::load(std::move(*bundle));
  if (!program.ok()) die("load " + path, program.status());
  return *program;
}

HostValue token_tensor(const std::vector<std::int64_t>& tokens) {
  HostTensor t{DType::kI64, {1, static_cast<std::int64_t>(tokens.size())}, std::vector<std::uint8_t>(tokens.size() * 8)};
  std::memcpy(t.data.data(), tokens.data(), t.data.size());
  return HostValue::of(std::move(t));
}

// The argmax of the last row of logits [1, seq, vocab].
std::int64_t greedy(const HostTensor& logits) {
  const std::int64_t vocab = logits.shape.back(), row = logits.numel() / vocab - 1;
  const auto* v = reinterpret_cast<const float*>(logits.data.data()) + row * vocab;
  std::int64_t best = 0;
  for (std::int64_t i = 1; i < vocab; ++i) if (v[i] > v[best]) best = i;
  return best;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void write_weights(const Options& o, models::KvDecoder& model, const std::vector<std::int64_t>& tokens) {
  if (Status st = models::write_kv_decoder_weights(model, o.weights_out, "prompt " + std::to_string(o.prompt) + "\n"); !st.ok()) {
    die("write weights", st);
  }
  HostTensor tok{DType::kI64, {static_cast<std::int64_t>(tokens.size())}, std::vector<std::uint8_t>(tokens.size() * 8)};
  std::memcpy(tok.data.data(), tokens.data(), tok.data.size());
  if (Status s = write_npy(o.weights_out + "/tokens.npy", tok); !s.ok()) die("write tokens", s);
  std::printf("wrote the weights, tokens and config to %s\n", o.weights_out.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  models::KvDecoder model(o.model);
  if (!o.weights_in.empty()) {
    if (Status s = models::load_kv_decoder_weights(model, o.weights_in); !s.ok()) die("--weights-in", s);
  }
  const std::int64_t total = o.prompt + o.generate;

  Dim seq("seq", 1, o.model.max_ctx);
  ExportOptions cached_options;
  cached_options.name = "kv_decode";
  auto cached = export_program([&](Tensor ids, SymInt pos) { return model.step(ids, pos); },
                               {input("ids", Tensor::from_ints({1, 4}, std::vector<std::int64_t>{1, 2, 3, 4}), {Dim::STATIC, seq}),
                                int_input("input_pos", 2, Dim::DYNAMIC)},
                               cached_options);
  if (!cached.ok()) die("export (cached)", cached.status());
  ExportOptions full_options;
  full_options.name = "kv_decode_full";
  auto full = export_program([&](Tensor ids) { return model.full(ids); },
                             {input("ids", Tensor::from_ints({1, 4}, std::vector<std::int64_t>{1, 2, 3, 4}), {Dim::STATIC, seq})},
                             full_options);
  if (!full.ok()) die("export (full)", full.status());
  std::printf("model: d=%lld, %lld layers, %lld heads, vocab %lld, max_ctx %lld; %zu state tensors\n",
              static_cast<long long>(o.model.d), static_cast<long long>(o.model.layers), static_cast<long long>(o.model.heads),
              static_cast<long long>(o.model.vocab), static_cast<long long>(o.model.max_ctx), cached->program().states.size());
  const std::string full_path = o.out.substr(0, o.out.size() - (o.out.ends_with(".kiln") ? 5 : 0)) + ".full.kiln";
  auto cached_program = save_and_load(*cached, o.out);
  auto full_program = save_and_load(*full, full_path);
  std::printf("wrote %s (stateful) and %s (stateless)\n", o.out.c_str(), full_path.c_str());

  std::vector<std::int64_t> prompt;
  for (std::int64_t i = 0; i < o.prompt; ++i) prompt.push_back((i * 37 + 11) % o.model.vocab);

  // Cached: prefill the prompt at position 0, then one token per step at position n.
  Session session(*cached_program, {.threads = o.threads});
  std::vector<std::int64_t> tokens = prompt;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<HostValue> in{token_tensor(prompt), HostValue::integer(0)};
  auto r = session.run(in);
  if (!r.ok()) die("prefill", r.status());
  const double prefill_s = seconds_since(t0);
  tokens.push_back(greedy(r->outputs[0].tensor));
  t0 = std::chrono::steady_clock::now();
  while (static_cast<std::int64_t>(tokens.size()) < total) {
    std::vector<HostValue> step{token_tensor({tokens.back()}), HostValue::integer(static_cast<std::int64_t>(tokens.size()) - 1)};
    if (Status s = session.run(step, *r); !s.ok()) die("decode", s);
    tokens.push_back(greedy(r->outputs[0].tensor));
  }
  const double cached_s = seconds_since(t0);

  // Stateless: every new token recomputes the whole sequence.
  Session full_session(*full_program, {.threads = o.threads});
  std::vector<std::int64_t> recomputed = prompt;
  RunResult fr;
  t0 = std::chrono::steady_clock::now();
  double full_first_s = 0.0;
  while (static_cast<std::int64_t>(recomputed.size()) < total) {
    std::vector<HostValue> step{token_tensor(recomputed)};
    if (Status s = full_session.run(step, fr); !s.ok()) die("recompute", s);
    recomputed.push_back(greedy(fr.outputs[0].tensor));
    if (recomputed.size() == prompt.size() + 1) full_first_s = seconds_since(t0), t0 = std::chrono::steady_clock::now();
  }
  const double full_s = seconds_since(t0);

  const double decoded = static_cast<double>(o.generate - 1);  // tokens after the prefill's
  std::printf("prompt %lld tokens, %lld generated, %d thread(s)\n", static_cast<long long>(o.prompt),
              static_cast<long long>(o.generate), o.threads);
  std::printf("  KV cache : prefill %8.2f ms, decode %9.1f tokens/s (%.3f ms/token)\n", 1e3 * prefill_s,
              decoded > 0 ? decoded / cached_s : 0.0, decoded > 0 ? 1e3 * cached_s / decoded : 0.0);
  std::printf("  recompute: prefill %8.2f ms, decode %9.1f tokens/s (%.3f ms/token)\n", 1e3 * full_first_s,
              decoded > 0 ? decoded / full_s : 0.0, decoded > 0 ? 1e3 * full_s / decoded : 0.0);
  std::printf("generated:");
  for (std::size_t i = prompt.size(); i < tokens.size() && i < prompt.size() + 16; ++i) std::printf(" %lld", static_cast<long long>(tokens[i]));
  std::printf("%s\n", tokens.size() > prompt.size() + 16 ? " ..." : "");
  if (!o.weights_out.empty()) write_weights(o, model, tokens);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] != recomputed[i]) {
      std::fprintf(stderr, "MISMATCH: token %zu is %lld with the KV cache, %lld recomputed\n", i, static_cast<long long>(tokens[i]),
                   static_cast<long long>(recomputed[i]));
      return 5;
    }
  }
  std::printf("KV-cache and recomputed decoding produced the same %lld tokens\n", static_cast<long long>(o.generate));
  return 0;
}
