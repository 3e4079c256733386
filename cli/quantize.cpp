// kiln quantize IN.kiln -o OUT.kiln --weights int8|int4 [--group N] [--ops LIST]
//   [--scale-dtype f16|f32] [--zero-points] [--embed-head int8|int4|f32] [--scales mse|max]
//   [--calibrate DIR [--calibration-memory MIB]] [--json]
// Post-training weight-only quantization (docs/QUANTIZATION.md): the constant 2-D weights of
// linear, matmul and embedding nodes become int8/int4 constants with scales (schema
// Constant.quant) read by linear_q / embedding_q; everything else is copied. The numbers
// (scale search, rounding, GPTQ with --calibrate) are quantize_math.cpp, the calibration
// runs calibrate.cpp. The self-tests are replayed on the quantized program and their
// tolerances widened to the measured error. The output is written atomically; on any
// error no file is left at OUT.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "calibrate.h"
#include "commands.h"
#include "kiln/export/bundle_writer.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/file_io.h"
#include "kiln/runtime/program.h"
#include "quantize_math.h"

namespace kiln::cli {
namespace {

using json = nlohmann::ordered_json;

struct QuantizeOptions {
  std::string input;
  std::string output;
  std::string weights;
  std::int64_t group = 0;  // 0: per channel for int8, 32 for int4
  std::string ops = "linear,matmul,embedding";
  std::string scale_dtype;  // default: f32 for int8, f16 for int4
  bool zero_points = false;
  std::string embed_head;  // int8, int4 or f32; default: int8 with --weights int4, else --weights
  std::string scales = "mse";  // mse (per-group scale search) or max (plain range mapping)
  std::string calibrate;       // a folder of calibration runs: GPTQ (cli/calibrate.h)
  std::int64_t calibration_memory_mib = 1024;
  bool json = false;
};

// How one layer's weight is stored: --weights' format for most layers, --embed-head's for
// the embedding tables and the output head.
struct LayerFormat {
  int bits = 8;
  std::int64_t group = 0;  // 0: the whole row (per output channel)
  bool f16 = false;
  bool zero_points = false;
  std::string text() const {
    return std::string(bits == 8 ? "int8" : "int4") + (group > 0 ? " g" + std::to_string(group) : "") +
           (zero_points ? " zp" : "");
  }
};

// Where the weight of each op sits, and whether its quantized rows are the stored rows
// (linear W[N,K], embedding [V,D]) or the stored columns (matmul B[K,N]).
struct Candidate {
  int weight_input;
  bool transposed;
};

std::optional<Candidate> candidate_for(const std::string& op) {
  if (op == "linear") return Candidate{1, false};
  if (op == "matmul") return Candidate{1, true};
  if (op == "embedding") return Candidate{0, false};
  return std::nullopt;
}

struct Layer {
  std::string name;  // the weight constant's name
  std::string op;
  std::vector<std::int64_t> shape;  // the f32 weight's shape
  bool quantized = false;
  std::string format;  // LayerFormat::text() when quantized
  std::string reason;  // why not
  double sqnr_db = 0;
  std::uint64_t bytes_before = 0, bytes_after = 0;
  // With --calibrate: GPTQ's result on the calibration inputs (quant::QuantizedWeight), or
  // why the layer was rounded to nearest without calibration.
  bool calibrated = false;
  std::string uncalibrated_reason;
  std::int64_t calibration_rows = 0, skipped_rows = 0, gptq_rows = 0;
  double output_sqnr_db = 0, nearest_output_sqnr_db = 0, damp_fraction = 0;
};

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string bytes_text(std::uint64_t b) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1);
  if (b >= (1u << 20)) {
    os << static_cast<double>(b) / (1 << 20) << " MiB";
  } else if (b >= 1024) {
    os << static_cast<double>(b) / 1024 << " KiB";
  } else {
    os << b << " B";
  }
  return os.str();
}

Status check_options(QuantizeOptions& o, std::set<std::string>& ops) {
  if (o.weights != "int8" && o.weights != "int4") return Status(StatusCode::kUsage, "--weights must be int8 or int4");
  if (o.group < 0) return Status(StatusCode::kUsage, "--group " + std::to_string(o.group) + " must be positive");
  if (o.weights == "int4" && o.group == 0) o.group = 32;
  if (o.weights == "int4" && o.group % 2 != 0) {
    return Status(StatusCode::kUsage, "--group " + std::to_string(o.group) + ": int4 groups must be even (two weights per byte)");
  }
  if (o.scale_dtype.empty()) o.scale_dtype = o.weights == "int4" ? "f16" : "f32";
  if (o.embed_head.empty()) o.embed_head = o.weights == "int4" ? "int8" : o.weights;
  if (o.embed_head != "int8" && o.embed_head != "int4" && o.embed_head != "f32") {
    return Status(StatusCode::kUsage, "--embed-head must be int8, int4 or f32");
  }
  if (o.scales != "mse" && o.scales != "max") return Status(StatusCode::kUsage, "--scales must be mse or max");
  if (o.calibration_memory_mib < 1 || o.calibration_memory_mib > (std::int64_t{1} << 30)) {
    return Status(StatusCode::kUsage, "--calibration-memory " + std::to_string(o.calibration_memory_mib) +
                                          " must be between 1 and 2^30 MiB");
  }
  if (o.zero_points && o.weights == "int8") {
    return Status(StatusCode::kUsage, "--zero-points is for int4 (int8 is symmetric per output channel)");
  }
  std::stringstream list(o.ops);
  for (std::string op; std::getline(list, op, ',');) {
    if (op != "linear" && op != "matmul" && op != "embedding" && op != "conv2d") {
      return Status(StatusCode::kUsage, "--ops: unknown op '" + op + "' (linear, matmul, embedding, conv2d)");
    }
    ops.insert(op);
  }
  if (ops.empty()) return Status(StatusCode::kUsage, "--ops lists no op");
  KILN_RETURN_IF_ERROR(check_output_target(o.output));
  struct stat in {}, out {};
  if (::stat(o.input.c_str(), &in) == 0 && ::stat(o.output.c_str(), &out) == 0 && in.st_dev == out.st_dev &&
      in.st_ino == out.st_ino) {
    return Status(StatusCode::kUsage, "refusing to write the quantized bundle over its own input '" + o.input + "'");
  }
  return Status::Ok();
}

// The bundle rewrite: weights quantized once per (constant, layout), nodes retargeted.
class Quantizer {
 public:
  // `calibration` (may be null: no --calibrate) must outlive the Quantizer.
  Quantizer(const QuantizeOptions& o, const std::set<std::string>& ops, const Bundle& bundle, fb::ProgramT& program,
            Calibration* calibration)
      : o_(o), ops_(ops), bundle_(bundle), p_(program), pool_(program), calibration_(calibration) {
    main_.bits = o.weights == "int4" ? 4 : 8;
    main_.group = o.group;
    main_.f16 = o.scale_dtype == "f16";
    main_.zero_points = o.zero_points;
    if (o.embed_head == o.weights) {
      edge_ = main_;
    } else if (o.embed_head == "int8") {
      edge_ = LayerFormat{8, 0, false, false};  // int8's defaults: per channel, f32 scales
    } else if (o.embed_head == "int4") {
      edge_ = LayerFormat{4, 32, true, false};  // int4's defaults: group 32, f16 scales
    }
  }

  Status run() {
    for (const auto& c : p_.constants) {
      if (c->quant) {
        return Status(StatusCode::kUsage, "'" + o_.input + "' is already quantized (constant '" + c->name +
                                              "' is stored as " + fb::EnumNameQuantFormat(c->quant->format) +
                                              "): quantize the f32 bundle instead");
      }
    }
    for (std::uint32_t g = 0; g < p_.graphs.size(); ++g) KILN_RETURN_IF_ERROR(rewrite_graph(g));
    drop_unused_constants();
    return Status::Ok();
  }

  std::vector<Layer> layers;  // quantized ones first, in order of appearance; then the rest
  std::deque<std::vector<std::uint8_t>> owned;  // bytes of the new constants
  std::vector<const std::vector<std::uint8_t>*> new_data;  // per constant: owned bytes or null (the bundle's)
  std::vector<std::uint32_t> old_index;  // per constant: its index in the input bundle (when not new)

 private:
  struct Done {
    std::uint32_t weight, scales;
    std::int32_t zero_points;
  };

  std::uint32_t op_index(const std::string& name) {
    for (std::uint32_t i = 0; i < p_.op_names.size(); ++i) if (p_.op_names[i] == name) return i;
    p_.op_names.push_back(name);
    return static_cast<std::uint32_t>(p_.op_names.size() - 1);
  }

  std::uint32_t add_constant(const std::string& name, fb::DType dtype, std::vector<std::int64_t> shape,
                             std::vector<std::uint8_t> bytes) {
    auto c = std::make_unique<fb::ConstantT>();
    c->name = name;
    c->dtype = dtype;
    c->shape = std::move(shape);
    c->nbytes = bytes.size();
    owned.push_back(std::move(bytes));
    p_.constants.push_back(std::move(c));
    added_.push_back(&owned.back());
    return static_cast<std::uint32_t>(p_.constants.size() - 1);
  }

  std::uint32_t add_value(fb::GraphT& graph, fb::ValueKind kind, fb::DType dtype, std::uint32_t constant,
                          const std::vector<std::int64_t>& shape, const std::string& name) {
    auto v = std::make_unique<fb::ValueT>();
    v->kind = kind;
    v->dtype = dtype;
    v->constant = constant;
    v->name = name;
    for (std::int64_t d : shape) v->shape.push_back(pool_.constant(d));
    graph.values.push_back(std::move(v));
    return static_cast<std::uint32_t>(graph.values.size() - 1);
  }

  void skip(const std::string& name, const std::string& op, std::vector<std::int64_t> shape, const std::string& reason) {
    for (const Layer& l : skipped_) if (l.name == name && l.op == op && l.reason == reason) return;
    Layer l;
    l.name = name;
    l.op = op;
    l.shape = std::move(shape);
    l.reason = reason;
    skipped_.push_back(l);
  }

  // Why the weight of `node` (op `op`) cannot be quantized, or "" when it can; fills rows/cols.
  std::string check_candidate(const fb::GraphT& graph, const fb::NodeT& node, const std::string& op, const Candidate& cand,
                              const std::vector<int>& other_uses, const LayerFormat& format, std::int64_t& rows,
                              std::int64_t& cols, std::int64_t& group) {
    const auto& w = *graph.values[node.inputs[static_cast<std::size_t>(cand.weight_input)]];
    if (w.kind != fb::ValueKind::Constant) return "the weight is computed at run time, not a constant";
    const auto& c = *p_.constants[w.constant];
    if (c.dtype != fb::DType::f32) return std::string("the weight is ") + fb::EnumNameDType(c.dtype) + ", not f32";
    if (c.shape.size() != 2) return "the weight is not 2-D";
    if (op != "embedding") {
      const auto& x = *graph.values[node.inputs[0]];
      if (x.dtype != fb::DType::f32) return std::string("the input is ") + fb::EnumNameDType(x.dtype) + ", not f32";
    }
    if (other_uses[node.inputs[static_cast<std::size_t>(cand.weight_input)]] != 0) {
      return "the weight is also read as f32 by another node (or is a graph output)";
    }
    rows = cand.transposed ? c.shape[1] : c.shape[0];
    cols = cand.transposed ? c.shape[0] : c.shape[1];
    if (rows < 1 || cols < 1) return "the weight is empty";
    group = format.group > 0 ? format.group : cols;
    const std::string dim = op == "embedding" ? "embedding dim" : "input dim";
    if (cols % group != 0) {
      return dim + " " + std::to_string(cols) + " is not a multiple of the group size " + std::to_string(group);
    }
    return "";
  }

  Status rewrite_graph(std::uint32_t g) {
    fb::GraphT& graph = *p_.graphs[g];
    // Uses of each value other than as the weight of a node this run may quantize, with
    // the layout each quantizing use wants (a value used by both layouts stays f32).
    std::vector<int> other_uses(graph.values.size(), 0);
    std::vector<int> layout(graph.values.size(), -1);
    for (const auto& n : graph.nodes) {
      const std::string& op = p_.op_names[n->op];
      const auto cand = ops_.count(op) ? candidate_for(op) : std::nullopt;
      for (std::size_t k = 0; k < n->inputs.size(); ++k) {
        const std::uint32_t v = n->inputs[k];
        if (cand && static_cast<int>(k) == cand->weight_input) {
          const int want = cand->transposed ? 1 : 0;
          if (layout[v] >= 0 && layout[v] != want) other_uses[v]++;
          layout[v] = want;
        } else {
          other_uses[v]++;
        }
      }
    }
    for (std::uint32_t v : graph.outputs) other_uses[v]++;
    // The output head: a linear or matmul whose result is a graph output, in a graph with
    // more than one quantizable layer (a lone linear is the whole model, not a head).
    int layer_nodes = 0;
    for (const auto& n : graph.nodes) {
      const std::string& op = p_.op_names[n->op];
      if (ops_.count(op) && candidate_for(op)) ++layer_nodes;
    }
    const std::set<std::uint32_t> outputs(graph.outputs.begin(), graph.outputs.end());
    for (auto& n : graph.nodes) {
      const std::string op = p_.op_names[n->op];
      if (!ops_.count(op)) continue;
      if (op == "conv2d") {
        const std::uint32_t wv = n->inputs.size() > 1 ? n->inputs[1] : 0;
        const auto& w = *graph.values[wv];
        const std::string name = w.kind == fb::ValueKind::Constant ? p_.constants[w.constant]->name : w.name;
        skip(name, op, w.kind == fb::ValueKind::Constant ? p_.constants[w.constant]->shape : std::vector<std::int64_t>{},
             "conv2d weights are not quantized by this version (no quantized convolution kernel)");
        continue;
      }
      const auto cand = candidate_for(op);
      if (!cand || n->inputs.size() <= static_cast<std::size_t>(cand->weight_input)) continue;
      const std::uint32_t wv = n->inputs[static_cast<std::size_t>(cand->weight_input)];
      auto& w = *graph.values[wv];
      std::int64_t rows = 0, cols = 0, group = 0;
      const bool edge = op == "embedding" || (layer_nodes > 1 && !n->outputs.empty() && outputs.count(n->outputs[0]) != 0);
      const LayerFormat& format = edge ? edge_ : main_;
      const bool already = w.kind == fb::ValueKind::Constant && p_.constants[w.constant]->quant != nullptr;
      std::string why = already ? "" : check_candidate(graph, *n, op, *cand, other_uses, format, rows, cols, group);
      const std::string name = w.kind == fb::ValueKind::Constant ? p_.constants[w.constant]->name : w.name;
      if (why.empty() && !already && edge && o_.embed_head == "f32") {
        why = op == "embedding" ? "an embedding table, kept f32 by --embed-head f32"
                                : "the output head (its result is a graph output), kept f32 by --embed-head f32";
      }
      if (!why.empty()) {
        skip(name, op, w.kind == fb::ValueKind::Constant ? p_.constants[w.constant]->shape : std::vector<std::int64_t>{}, why);
        continue;
      }
      Done done{};
      if (already) {  // the same value, rewritten by an earlier node of this graph
        const auto& q = *p_.constants[w.constant]->quant;
        done = {w.constant, q.scales, q.zero_points};
      } else {
        KILN_ASSIGN_OR_RETURN(done, quantize_constant(w.constant, *cand, op, format, rows, cols, group));
        const auto& qc = *p_.constants[done.weight];
        w.dtype = qc.dtype;
        w.constant = done.weight;
        w.shape.clear();
        for (std::int64_t d : qc.shape) w.shape.push_back(pool_.constant(d));
      }
      const auto& sc = *p_.constants[done.scales];
      const std::uint32_t sv = add_value(graph, fb::ValueKind::Constant, sc.dtype, done.scales, sc.shape, sc.name);
      std::optional<std::uint32_t> zv;
      if (done.zero_points >= 0) {
        const auto& zc = *p_.constants[static_cast<std::uint32_t>(done.zero_points)];
        zv = add_value(graph, fb::ValueKind::Constant, zc.dtype, static_cast<std::uint32_t>(done.zero_points), zc.shape, zc.name);
      }
      if (op == "embedding") {
        n->op = op_index("embedding_q");
        n->inputs = {wv, sv, n->inputs[1]};
        if (zv) n->inputs.push_back(*zv);
      } else {
        const bool has_bias = op == "linear" && n->inputs.size() > 2;
        std::vector<std::uint32_t> in{n->inputs[0], wv, sv};
        if (has_bias || zv) {
          in.push_back(has_bias ? n->inputs[2] : add_value(graph, fb::ValueKind::None, fb::DType::f32, 0, {}, ""));
        }
        if (zv) in.push_back(*zv);
        n->op = op_index("linear_q");
        n->inputs = std::move(in);
      }
    }
    return Status::Ok();
  }

  Result<Done> quantize_constant(std::uint32_t index, const Candidate& cand, const std::string& op,
                                 const LayerFormat& format, std::int64_t rows, std::int64_t cols, std::int64_t group) {
    const auto key = std::make_pair(index, cand.transposed);
    if (auto it = done_.find(key); it != done_.end()) return it->second;
    const auto bytes = bundle_.constant_data(source_index(index));
    if (bytes.size() != static_cast<std::size_t>(rows * cols) * 4) {
      return Status(StatusCode::kInvalidBundle, "constant '" + p_.constants[index]->name + "' holds " +
                                                    std::to_string(bytes.size()) + " bytes, not its f32 shape");
    }
    // The mapping is 64-byte aligned (format rule), so the floats can be read in place.
    const auto* w = reinterpret_cast<const float*>(bytes.data());
    const bool int4 = format.bits == 4, f16 = format.f16;
    std::shared_ptr<const std::vector<double>> moments;
    std::string uncalibrated;
    if (calibration_ != nullptr && op == "embedding") {
      uncalibrated = "an embedding table (its input is token ids)";
    } else if (calibration_ != nullptr) {
      KILN_ASSIGN_OR_RETURN(moments, calibration_->moments(index, cand.transposed, uncalibrated));
    }
    const quant::WeightFormat wf{format.bits, group, f16, format.zero_points, o_.scales == "mse"};
    // Consecutive layers with the same moments (q/k/v of one activation) share the factor;
    // holding the moments keeps the cache's key from being freed and reused.
    if (moments != cached_moments_) cached_moments_ = moments, factor_cache_ = {};
    quant::QuantizedWeight q = quant::quantize_weight(w, rows, cols, cand.transposed, wf, moments.get(), &factor_cache_);
    if (moments != nullptr && !q.calibrated) uncalibrated = "its inputs' second moments stayed singular with 100 % damping";
    const std::string name = p_.constants[index]->name;
    const std::int64_t groups = cols / group;
    Done done{};
    done.scales = add_constant(name + ".scales", f16 ? fb::DType::f16 : fb::DType::f32, {rows, groups}, std::move(q.scales));
    done.zero_points = -1;
    if (format.zero_points) {
      done.zero_points = static_cast<std::int32_t>(add_constant(name + ".zero_points", fb::DType::u8, {rows, groups},
                                                                std::move(q.zero_points)));
    }
    const std::uint64_t after = q.data.size() + p_.constants[done.scales]->nbytes +
                                (done.zero_points >= 0 ? p_.constants[static_cast<std::uint32_t>(done.zero_points)]->nbytes : 0);
    done.weight = add_constant(name, int4 ? fb::DType::u8 : fb::DType::i8, {rows, int4 ? cols / 2 : cols}, std::move(q.data));
    auto qt = std::make_unique<fb::QuantizationT>();
    qt->format = int4 ? fb::QuantFormat::Int4 : fb::QuantFormat::Int8;
    qt->shape = {rows, cols};
    qt->axis = 0;
    qt->group_size = static_cast<std::uint32_t>(group);
    qt->scales = done.scales;
    qt->zero_points = done.zero_points;
    qt->source_dtype = fb::DType::f32;
    p_.constants[done.weight]->quant = std::move(qt);
    Layer l;
    l.name = name;
    l.op = op;
    l.shape = p_.constants[index]->shape;
    l.quantized = true;
    l.format = format.text();
    l.sqnr_db = q.sqnr_db;
    l.bytes_before = bytes.size();
    l.bytes_after = after;
    l.calibrated = q.calibrated;
    l.uncalibrated_reason = uncalibrated;
    if (q.calibrated) {
      l.calibration_rows = calibration_->rows(index, cand.transposed);
      l.skipped_rows = calibration_->skipped_rows(index, cand.transposed);
      l.gptq_rows = q.gptq_rows;
      l.output_sqnr_db = q.output_sqnr_db;
      l.nearest_output_sqnr_db = q.nearest_output_sqnr_db;
      l.damp_fraction = q.damp_fraction;
    }
    layers.push_back(l);
    done_.emplace(key, done);
    return done;
  }

  // Constants are renumbered below; before that, index i < n_input_ is the input's i.
  std::uint32_t source_index(std::uint32_t index) const { return index; }

  void drop_unused_constants() {
    const std::size_t n = p_.constants.size();
    const std::size_t n_input = n - added_.size();
    std::vector<bool> used(n, false);
    for (const auto& g : p_.graphs) {
      for (const auto& v : g->values) if (v->kind == fb::ValueKind::Constant) used[v->constant] = true;
    }
    if (p_.signature) for (const auto& st : p_.signature->states) used[st->initial] = true;
    std::vector<std::uint32_t> remap(n, 0);
    std::vector<std::unique_ptr<fb::ConstantT>> kept;
    for (std::size_t i = 0; i < n; ++i) {
      if (!used[i]) continue;
      remap[i] = static_cast<std::uint32_t>(kept.size());
      kept.push_back(std::move(p_.constants[i]));
      new_data.push_back(i < n_input ? nullptr : added_[i - n_input]);
      old_index.push_back(static_cast<std::uint32_t>(i));
    }
    p_.constants = std::move(kept);
    for (auto& g : p_.graphs) {
      for (auto& v : g->values) if (v->kind == fb::ValueKind::Constant) v->constant = remap[v->constant];
    }
    if (p_.signature) for (auto& st : p_.signature->states) st->initial = remap[st->initial];
    for (auto& c : p_.constants) {
      if (!c->quant) continue;
      c->quant->scales = remap[c->quant->scales];
      if (c->quant->zero_points >= 0) c->quant->zero_points = static_cast<std::int32_t>(remap[static_cast<std::size_t>(c->quant->zero_points)]);
    }
    layers.insert(layers.end(), skipped_.begin(), skipped_.end());
  }

  const QuantizeOptions& o_;
  const std::set<std::string>& ops_;
  const Bundle& bundle_;
  fb::ProgramT& p_;
  ExprPool pool_;
  Calibration* calibration_;
  std::shared_ptr<const std::vector<double>> cached_moments_;
  quant::FactorCache factor_cache_;
  LayerFormat main_, edge_;
  std::vector<const std::vector<std::uint8_t>*> added_;
  std::map<std::pair<std::uint32_t, bool>, Done> done_;
  std::vector<Layer> skipped_;
};

HostValue test_value(const Bundle& b, const fb::TestTensorT& t) {
  if (t.kind == fb::InputKind::Int) return HostValue::integer(t.int_value);
  HostTensor h;
  h.dtype = static_cast<DType>(t.dtype);
  h.shape = t.shape;
  const auto bytes = b.data_ref(t.segment, t.offset, t.nbytes);
  h.data.assign(bytes.begin(), bytes.end());
  return HostValue::of(std::move(h));
}

// Replays every self-test on the quantized program (`bytes`) and widens each floating
// output's atol to twice the largest difference from the f32 golden output.
// The test tensors are read from the draft itself (`program`'s data references are its).
Result<json> widen_self_tests(const std::vector<std::uint8_t>& bytes, fb::ProgramT& program) {
  KILN_ASSIGN_OR_RETURN(auto bundle, Bundle::from_bytes(bytes));
  KILN_ASSIGN_OR_RETURN(auto loaded, Program::load(std::move(bundle)));
  const Bundle& original = loaded->bundle();
  Session session(*loaded);
  json report = json::array();
  for (auto& st : program.self_tests) {
    std::vector<HostValue> inputs;
    for (const auto& t : st->inputs) inputs.push_back(test_value(original, *t));
    auto result = session.run(inputs);
    if (!result.ok()) return result.status().with_context("self-test '" + st->name + "' on the quantized program");
    json tj{{"name", st->name}};
    json outs = json::array();
    for (std::size_t k = 0; k < st->outputs.size() && k < result->outputs.size(); ++k) {
      fb::TestTensorT& spec = *st->outputs[k];
      const HostValue want = test_value(original, spec);
      const HostValue& got = result->outputs[k];
      if (want.is_int || got.is_int || !dtype_is_floating(want.tensor.dtype) || got.tensor.numel() != want.tensor.numel()) continue;
      double max_abs = 0, dot = 0, gg = 0, ww = 0, noise = 0;
      for (std::int64_t i = 0; i < want.tensor.numel(); ++i) {
        const double a = got.tensor.element(i), b = want.tensor.element(i);
        max_abs = std::max(max_abs, std::fabs(a - b));
        dot += a * b, gg += a * a, ww += b * b, noise += (a - b) * (a - b);
      }
      const double before = spec.atol;
      spec.atol = std::max(spec.atol, 2.0 * max_abs);
      outs.push_back({{"index", k},
                      {"max_abs_diff", max_abs},
                      {"cosine", gg > 0 && ww > 0 ? dot / std::sqrt(gg * ww) : 1.0},
                      {"sqnr_db", noise > 0 ? 10.0 * std::log10(ww / noise) : 999.0},
                      {"atol_before", before},
                      {"atol_after", spec.atol},
                      {"rtol", spec.rtol}});
    }
    tj["outputs"] = outs;
    report.push_back(tj);
  }
  return report;
}

void print_report(const QuantizeOptions& o, const std::vector<Layer>& layers, const json& tests, std::uint64_t in_size,
                  std::uint64_t out_size, const Calibration* calibration) {
  std::ostream& os = std::cerr;  // human text goes to stderr (docs/CLI.md)
  os << "quantized " << printable(o.input) << " -> " << printable(o.output) << ": " << o.weights
     << (o.weights == "int8" && o.group == 0 ? " per output channel" : " group " + std::to_string(o.group)) << ", "
     << o.scale_dtype << " scales, " << (o.zero_points ? "zero points" : "symmetric") << "; embedding tables and output head "
     << o.embed_head << "; " << (o.scales == "mse" ? "scales searched for the least squared error" : "max-range scales");
  if (calibration != nullptr) {
    os << "; GPTQ on " << calibration->run_count() << " calibration run(s) of " << printable(o.calibrate);
  }
  os << "\n\n";
  os << std::left << std::setw(28) << "layer" << std::setw(11) << "op" << std::setw(16) << "shape" << std::setw(10) << "format"
     << std::right
     << std::setw(9) << "SQNR dB" << std::setw(14) << "bytes before" << std::setw(13) << "bytes after";
  // With calibration: the output's SQNR on the calibration inputs, GPTQ's and rounding to
  // nearest's.
  if (calibration != nullptr) os << std::setw(10) << "out dB" << std::setw(10) << "RTN dB";
  os << "\n";
  std::uint64_t before = 0, after = 0;
  int quantized = 0;
  for (const Layer& l : layers) {
    if (!l.quantized) continue;
    ++quantized;
    before += l.bytes_before;
    after += l.bytes_after;
    os << std::left << std::setw(28) << printable(l.name) << std::setw(11) << l.op << std::setw(16) << shape_text(l.shape)
       << std::setw(10) << l.format << std::right << std::setw(9) << std::fixed << std::setprecision(1) << l.sqnr_db << std::setw(14) << l.bytes_before
       << std::setw(13) << l.bytes_after;
    if (calibration != nullptr && l.calibrated) {
      os << std::setw(10) << l.output_sqnr_db << std::setw(10) << l.nearest_output_sqnr_db;
    } else if (calibration != nullptr) {
      os << "   not calibrated: " << l.uncalibrated_reason;
    }
    if (l.skipped_rows > 0) os << "   (" << l.skipped_rows << " calibration rows with non-finite values skipped)";
    os << "\n";
  }
  const auto not_quantized = std::count_if(layers.begin(), layers.end(), [](const Layer& l) { return !l.quantized; });
  if (not_quantized > 0) {
    os << "\nnot quantized (kept f32):\n";
    for (const Layer& l : layers) {
      if (!l.quantized) {
        os << "  " << printable(l.name) << " (" << l.op << (l.shape.empty() ? "" : " " + shape_text(l.shape)) << "): " << l.reason
           << "\n";
      }
    }
  }
  os << "\n" << quantized << " layer(s) quantized, " << not_quantized << " kept f32; quantized weights " << bytes_text(before)
     << " -> " << bytes_text(after);
  if (after > 0) os << " (" << std::setprecision(2) << static_cast<double>(before) / static_cast<double>(after) << "x smaller)";
  os << "; bundle " << bytes_text(in_size) << " -> " << bytes_text(out_size) << "\n";
  if (tests.empty()) {
    os << "no self-tests embedded\n";
    return;
  }
  os << "self-tests kept, tolerances widened from the measured quantization error (atol = max(atol, 2 x max |diff|)):\n";
  for (const auto& t : tests) {
    for (const auto& out : t["outputs"]) {
      os << "  " << printable(t["name"].get<std::string>()) << " output " << out["index"].get<int>() << ": max |diff| "
         << std::scientific << std::setprecision(3) << out["max_abs_diff"].get<double>() << std::fixed << ", cosine "
         << std::setprecision(6) << out["cosine"].get<double>() << ", SQNR " << std::setprecision(1)
         << out["sqnr_db"].get<double>() << " dB; atol " << std::scientific << std::setprecision(3)
         << out["atol_before"].get<double>() << " -> " << out["atol_after"].get<double>() << std::fixed << "\n";
    }
  }
}

int run_quantize(QuantizeOptions o) {
  std::set<std::string> ops;
  KILN_RETURN_IF_ERROR_CLI(check_options(o, ops), o.json);
  auto opened = Bundle::open(o.input);
  if (!opened.ok()) return report_error(with_path(opened.status(), o.input), o.json);
  const Bundle& bundle = **opened;
  std::unique_ptr<fb::ProgramT> program(bundle.program().UnPack());
  std::unique_ptr<Calibration> calibration;
  if (!o.calibrate.empty()) {
    auto opened_calibration =
        Calibration::open(o.input, o.calibrate, static_cast<std::uint64_t>(o.calibration_memory_mib) << 20);
    if (!opened_calibration.ok()) return report_error(opened_calibration.status(), o.json);
    calibration = std::move(opened_calibration).value();
  }
  Quantizer q(o, ops, bundle, *program, calibration.get());
  KILN_RETURN_IF_ERROR_CLI(q.run(), o.json);
  BundleWriter writer;
  for (std::size_t i = 0; i < program->constants.size(); ++i) {
    auto& c = *program->constants[i];
    const std::span<const std::uint8_t> bytes =
        q.new_data[i] != nullptr ? std::span<const std::uint8_t>(*q.new_data[i]) : bundle.constant_data(q.old_index[i]);
    const auto compression = q.new_data[i] != nullptr
                                 ? format::Compression::kNone
                                 : bundle.segment_entry(bundle.program().constants()->Get(q.old_index[i])->segment()).compression;
    const DataRef ref = writer.add_data(bytes, compression);
    c.segment = ref.segment;
    c.offset = ref.offset;
    c.nbytes = ref.nbytes;
  }
  for (auto& st : program->self_tests) {
    for (auto* list : {&st->inputs, &st->outputs}) {
      for (auto& t : *list) {
        if (t->kind == fb::InputKind::Int) continue;
        const DataRef ref = writer.add_data(bundle.data_ref(t->segment, t->offset, t->nbytes));
        t->segment = ref.segment;
        t->offset = ref.offset;
        t->nbytes = ref.nbytes;
      }
    }
  }
  auto kv = std::make_unique<fb::KeyValueT>();
  kv->key = "kiln.quantize";
  kv->value = o.weights + (o.weights == "int8" && o.group == 0 ? " per channel" : " group " + std::to_string(o.group)) + ", " +
              o.scale_dtype + " scales" + (o.zero_points ? ", zero points" : "") + "; embedding tables and output head " +
              o.embed_head + "; " + o.scales + " scales" +
              (calibration ? "; GPTQ on " + std::to_string(calibration->run_count()) + " calibration run(s)" : "") +
              "; self-test tolerances widened from the measured quantization error";
  program->metadata.push_back(std::move(kv));
  // Self-test tolerances are measured on the quantized program, then the final bytes written.
  auto draft = writer.to_bytes(*program);
  if (!draft.ok()) return report_error(draft.status(), o.json);
  auto tests = widen_self_tests(*draft, *program);
  if (!tests.ok()) return report_error(tests.status(), o.json);
  auto final_bytes = writer.to_bytes(*program);
  if (!final_bytes.ok()) return report_error(final_bytes.status(), o.json);
  KILN_RETURN_IF_ERROR_CLI(writer.write(o.output, *program), o.json);
  struct stat in_stat {};
  const std::uint64_t in_size = ::stat(o.input.c_str(), &in_stat) == 0 ? static_cast<std::uint64_t>(in_stat.st_size) : 0;
  const std::uint64_t out_size = final_bytes->size();
  if (!o.json) {
    print_report(o, q.layers, *tests, in_size, out_size, calibration.get());
    return 0;
  }
  json layers = json::array();
  for (const Layer& l : q.layers) {
    json lj{{"name", l.name}, {"op", l.op}, {"shape", l.shape}, {"quantized", l.quantized}};
    if (l.quantized) {
      lj["format"] = l.format;
      lj["sqnr_db"] = l.sqnr_db;
      lj["bytes_before"] = l.bytes_before;
      lj["bytes_after"] = l.bytes_after;
      if (calibration) {
        json cj{{"calibrated", l.calibrated}};
        if (l.calibrated) {
          cj["rows"] = l.calibration_rows;
          cj["skipped_rows"] = l.skipped_rows;
          cj["output_sqnr_db"] = l.output_sqnr_db;
          cj["nearest_output_sqnr_db"] = l.nearest_output_sqnr_db;
          cj["gptq_rows"] = l.gptq_rows;
          cj["damp_fraction"] = l.damp_fraction;
        } else {
          cj["reason"] = l.uncalibrated_reason;
        }
        lj["calibration"] = cj;
      }
    } else {
      lj["reason"] = l.reason;
    }
    layers.push_back(lj);
  }
  std::cout << dump_json({{"input", o.input},
                          {"output", o.output},
                          {"weights", o.weights},
                          {"group", o.group},
                          {"scale_dtype", o.scale_dtype},
                          {"zero_points", o.zero_points},
                          {"embed_head", o.embed_head},
                          {"scales", o.scales},
                          {"calibration", calibration ? json{{"dir", o.calibrate},
                                                             {"runs", calibration->run_count()},
                                                             {"passes", calibration->passes()}}
                                                      : json(nullptr)},
                          {"layers", layers},
                          {"self_tests", *tests},
                          {"bundle_bytes_before", in_size},
                          {"bundle_bytes_after", out_size}})
            << "\n";
  return 0;
}

}  // namespace

Command add_quantize(CLI::App& app) {
  auto o = std::make_shared<QuantizeOptions>();
  app.add_option("bundle", o->input, "the f32 bundle (.kiln)")->required();
  app.add_option("-o,--output", o->output, "quantized bundle to write (.kiln)")->required();
  app.add_option("--weights", o->weights, "int8 (symmetric per output channel) or int4 (groupwise)")->required();
  app.add_option("--group", o->group, "weights per scale along the input dim (int4 default 32; int8 default: the whole row)");
  app.add_option("--ops", o->ops, "comma-separated ops whose weights to quantize: linear,matmul,embedding,conv2d")
      ->capture_default_str();
  app.add_option("--scale-dtype", o->scale_dtype, "f16 or f32 (default: f32 for int8, f16 for int4)")
      ->check(CLI::IsMember({"f16", "f32"}));
  app.add_flag("--zero-points", o->zero_points, "int4 only: asymmetric groups with a u8 zero point each");
  app.add_option("--embed-head", o->embed_head,
                 "int8, int4 or f32: the embedding tables and the output head (a linear/matmul whose result is a graph "
                 "output, when the graph has more than one layer); default int8 with --weights int4, else --weights");
  app.add_option("--scales", o->scales,
                 "mse (default: per-group search for the scale with the least squared error) or max (max-range scales)");
  app.add_option("--calibrate", o->calibrate,
                 "a folder of calibration runs (one subfolder per run, or the folder itself, holding <input>.npy for "
                 "every input): GPTQ spreads each weight column's rounding error over the columns not yet quantized, "
                 "weighted by the layer's inputs on these runs");
  app.add_option("--calibration-memory", o->calibration_memory_mib,
                 "MiB: the most memory the input moments of one calibration pass may take (2 K^2 doubles per layer of "
                 "input dim K); layers beyond it are measured in further passes over the runs")
      ->capture_default_str();
  app.add_flag("--json", o->json, "machine-readable report on stdout");
  app.footer("Example:\n  kiln quantize model.kiln -o model.q4.kiln --weights int4 --group 32\n"
             "  kiln quantize model.kiln -o model.q4.kiln --weights int4 --embed-head int4   (every layer int4)\n"
             "  kiln quantize model.kiln -o model.q8.kiln --weights int8 --json\n"
             "  kiln quantize model.kiln -o model.q4.kiln --weights int4 --calibrate calib/   (GPTQ; calib/run0/tokens.npy, ...)");
  return [o] { return run_quantize(*o); };
}

}  // namespace kiln::cli
