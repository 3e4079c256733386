// The weights directory of the KV-cache decoder (kv_decoder.h): what
// `kiln_sample_kv_decode --weights-out DIR` writes, `--weights-in DIR` reads, and
// bench/kv_decoder_torch.py reads and writes for PyTorch (bench/train_kv_decoder.py trains
// one; tests/fixtures/kv_decoder_trained is one):
//   DIR/<name>.npy  every parameter by its dotted name (emb.weight, pos.weight,
//                   att.0.qkv.weight, mlp.0.2.bias, lnf.weight, out.weight, ...): f32, C
//                   order, the model's shapes (a linear weight is [out, in], as PyTorch's).
//                   Not the KV caches (`*_cache`: the zero initial state).
//   DIR/config.txt  `key value` lines: vocab, d, layers, heads, max_ctx; other keys (the
//                   sample's `prompt`) are ignored on reading.
// Reading trusts nothing: a missing, unreadable, truncated or malformed file, a wrong dtype
// or shape is a Status naming the file, what it holds and what the model expects; nothing
// crashes, and the model's weights are replaced only when every file checks out.
#pragma once

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/runtime/file_io.h"
#include "kiln/runtime/npy.h"
#include "kv_decoder.h"

namespace kiln::models {

/// "d 128, 2 layers, 4 heads, vocab 256, max_ctx 128"
inline std::string describe(const KvDecoderConfig& c) {
  return "d " + std::to_string(c.d) + ", " + std::to_string(c.layers) + " layers, " + std::to_string(c.heads) + " heads, vocab " +
         std::to_string(c.vocab) + ", max_ctx " + std::to_string(c.max_ctx);
}

/// The configuration in DIR/config.txt. kIoError when it cannot be read; kInvalidInput for
/// a malformed line, a value that is not an integer in [1, 65536], a missing key, or d not
/// a multiple of heads.
inline Result<KvDecoderConfig> read_kv_decoder_config(const std::string& dir) {
  const std::string path = dir + "/config.txt";
  auto bytes = read_regular_file(path, 1 << 16, StatusCode::kIoError);
  if (!bytes.ok()) return bytes.status();
  const auto bad = [&](const std::string& what) { return Status(StatusCode::kInvalidInput, path + ": " + what); };
  KvDecoderConfig c;
  std::int64_t* fields[] = {&c.vocab, &c.d, &c.layers, &c.heads, &c.max_ctx};
  const char* names[] = {"vocab", "d", "layers", "heads", "max_ctx"};
  bool seen[5] = {};
  std::string text(bytes->begin(), bytes->end());
  std::size_t start = 0;
  for (int line = 1; start < text.size(); ++line) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string l = text.substr(start, end - start);
    start = end + 1;
    if (l.find_first_not_of(" \t\r") == std::string::npos) continue;
    char key[32] = {};
    long long value = 0;
    int used = 0;
    if (std::sscanf(l.c_str(), " %31s %lld %n", key, &value, &used) != 2 || l.find_first_not_of(" \t\r", used) != std::string::npos) {
      return bad("line " + std::to_string(line) + " is not `key integer`: '" + l.substr(0, 80) + "'");
    }
    for (int k = 0; k < 5; ++k) {
      if (std::string(key) != names[k]) continue;
      if (value < 1 || value > 65536) return bad(std::string(key) + " " + std::to_string(value) + " is outside [1, 65536]");
      *fields[k] = value;
      seen[k] = true;
    }
  }
  for (int k = 0; k < 5; ++k) {
    if (!seen[k]) return bad(std::string("no '") + names[k] + "' line");
  }
  if (c.d % c.heads != 0) return bad("d " + std::to_string(c.d) + " is not a multiple of heads " + std::to_string(c.heads));
  return c;
}

/// Writes DIR/<name>.npy for every parameter and DIR/config.txt (then `extra_config`, whole
/// lines), creating DIR. kIoError naming the path on failure.
inline Status write_kv_decoder_weights(const KvDecoder& model, const std::string& dir, const std::string& extra_config = "") {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status(StatusCode::kIoError, dir + ": cannot create the directory: " + ec.message());
  for (const auto& [name, t] : model.named_parameters()) {
    if (name.ends_with("_cache")) continue;
    KILN_RETURN_IF_ERROR(write_npy(dir + "/" + name + ".npy", HostTensor{t.dtype(), t.concrete_shape(), t.bytes()}));
  }
  const KvDecoderConfig& c = model.config;
  const std::string text = "vocab " + std::to_string(c.vocab) + "\nd " + std::to_string(c.d) + "\nlayers " + std::to_string(c.layers) +
                           "\nheads " + std::to_string(c.heads) + "\nmax_ctx " + std::to_string(c.max_ctx) + "\n" + extra_config;
  const std::string path = dir + "/config.txt";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  const bool written = f != nullptr && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f != nullptr && std::fclose(f) != 0) return Status(StatusCode::kIoError, path + ": cannot write");
  return written ? Status() : Status(StatusCode::kIoError, path + ": cannot write");
}

/// Replaces every parameter of `model` by DIR/<name>.npy. Errors, all kInvalidInput naming
/// the file (the model is then unchanged): those of read_npy (a missing file, one that is
/// not a regular file, malformed or truncated), a dtype other than f32, or a shape other
/// than the parameter's (the shape found and the one expected).
inline Status load_kv_decoder_weights(KvDecoder& model, const std::string& dir) {
  std::vector<std::pair<Tensor, Tensor>> updates;
  for (const auto& [name, t] : model.named_parameters()) {
    if (name.ends_with("_cache")) continue;
    const std::string path = dir + "/" + name + ".npy";
    auto loaded = read_npy(path);
    if (!loaded.ok()) return loaded.status();
    const std::vector<std::int64_t> want = t.concrete_shape();
    if (loaded->dtype != DType::kF32 || loaded->shape != want) {
      const auto text = [](DType dtype, const std::vector<std::int64_t>& shape) {
        std::string s = std::string(dtype_name(dtype)) + "[";
        for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
        return s + "]";
      };
      return Status(StatusCode::kInvalidInput, path + ": holds " + text(loaded->dtype, loaded->shape) + ", expected " +
                                                   text(DType::kF32, want) + " for the model (" + describe(model.config) + ")");
    }
    updates.emplace_back(t, Tensor::from_bytes(DType::kF32, want, std::move(loaded->data)));
  }
  for (auto& [param, value] : updates) param.copy_(value);
  return Status();
}

}  // namespace kiln::models
