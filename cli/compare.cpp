// kiln compare: one bundle on two backends, or two bundles, run on the same inputs with
// every top-level node's outputs kept (SessionOptions::observer), compared node by node.
// The second side (--against, or B) is the reference. docs/CLI.md, "kiln compare".
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <map>
#include <random>
#include <sstream>

#include "commands.h"
#include "max_memory.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/expr.h"

namespace kiln::cli {
namespace {

using json = nlohmann::ordered_json;

struct CompareOptions {
  std::vector<std::string> positional;  // A [B] [VALUES...]
  std::vector<std::string> inputs;
  std::string backend = "cpu";
  std::string against;  // set: one bundle, two backends
  double rtol = 1e-4;
  double atol = 1e-5;
  std::string self_test;  // index or name; empty = the given values (random where absent)
  std::uint64_t seed = 0;
  int threads = 1;
  std::uint64_t max_memory = 0;
  bool json = false;
  bool no_mmap = false;
};

// One top-level node as one side ran it.
struct NodeRecord {
  std::uint32_t node = 0;
  std::vector<HostValue> outputs;
  std::vector<bool> present;        // per output: false when the node left it absent
  std::uint64_t subgraph_nodes = 0;  // nodes its cond/while_loop/invoke_subgraph calls ran
};

struct Side {
  std::string label;  // "cpu", "vulkan" or the bundle path
  std::string path;
  std::string backend;
  std::shared_ptr<const Program> program;
  RunResult result;
  std::uint32_t graph = 0;  // the graph the top-level nodes belong to (the variant that ran)
  std::vector<NodeRecord> nodes;  // execution order
};

// Error statistics of one tensor against its reference.
struct Stats {
  std::string error;  // a dtype/shape/kind mismatch that makes the numbers meaningless
  double max_abs = 0.0, max_rel = 0.0, cosine = 1.0, sqnr_db = INFINITY;
  std::uint64_t mismatched = 0, worst_index = 0;
  bool diverged() const { return !error.empty() || mismatched > 0; }
};

std::string shape_text(DType dtype, const std::vector<std::int64_t>& shape) {
  std::string s = std::string(dtype_name(dtype)) + "[";
  for (std::size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

std::string value_text(const HostValue& v) { return v.is_int ? "int " + std::to_string(v.int_value) : shape_text(v.tensor.dtype, v.tensor.shape); }

// `got` against the reference `want` with the validate formula: an element is out of
// tolerance when |got - want| > atol + rtol * |want| (integers and bools: any difference).
Stats compare_values(const HostValue& got, const HostValue& want, double rtol, double atol) {
  Stats s;
  if (got.is_int != want.is_int) {
    s.error = "got " + value_text(got) + ", reference " + value_text(want);
    return s;
  }
  if (got.is_int) {
    s.max_abs = std::fabs(static_cast<double>(got.int_value) - static_cast<double>(want.int_value));
    s.mismatched = got.int_value != want.int_value;
    s.max_rel = want.int_value != 0 ? s.max_abs / std::fabs(static_cast<double>(want.int_value)) : 0.0;
    s.cosine = s.mismatched ? NAN : 1.0;
    s.sqnr_db = s.mismatched ? NAN : INFINITY;
    return s;
  }
  const HostTensor &g = got.tensor, &w = want.tensor;
  if (g.shape != w.shape) {
    s.error = "shape " + shape_text(g.dtype, g.shape) + ", reference " + shape_text(w.dtype, w.shape);
    return s;
  }
  const bool exact = !dtype_is_floating(g.dtype) && !dtype_is_floating(w.dtype);
  double dot = 0.0, norm_g = 0.0, norm_w = 0.0, noise = 0.0;
  const std::uint64_t n = static_cast<std::uint64_t>(w.numel());
  for (std::uint64_t i = 0; i < n; ++i) {
    const double a = g.element(static_cast<std::int64_t>(i)), b = w.element(static_cast<std::int64_t>(i));
    const double diff = (std::isnan(a) || std::isnan(b)) ? (std::isnan(a) && std::isnan(b) ? 0.0 : INFINITY)
                        : (a == b ? 0.0 : std::fabs(a - b));
    const bool ok = exact ? diff == 0.0 : diff <= atol + rtol * std::fabs(b);
    if (!ok) ++s.mismatched;
    if (diff > s.max_abs) s.max_abs = diff, s.worst_index = i;
    if (b != 0.0 && std::isfinite(b)) s.max_rel = std::max(s.max_rel, diff / std::fabs(b));
    dot += a * b, norm_g += a * a, norm_w += b * b, noise += (a - b) * (a - b);
  }
  s.cosine = norm_g == 0.0 && norm_w == 0.0 ? 1.0 : (norm_g == 0.0 || norm_w == 0.0) ? 0.0 : dot / std::sqrt(norm_g * norm_w);
  s.sqnr_db = noise == 0.0 ? INFINITY : 10.0 * std::log10(norm_w / noise);
  if (std::isnan(noise)) s.cosine = s.sqnr_db = NAN;
  return s;
}

// JSON numbers for finite values; "inf", "-inf" or "nan" otherwise (JSON has no such numbers).
json number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

json stats_json(const Stats& s) {
  json j;
  if (!s.error.empty()) {
    j["error"] = s.error;
  } else {
    j["max_abs_error"] = number(s.max_abs);
    j["max_rel_error"] = number(s.max_rel);
    j["cosine"] = number(s.cosine);
    j["sqnr_db"] = number(s.sqnr_db);
    j["mismatched"] = s.mismatched;
    j["worst_index"] = s.worst_index;
  }
  j["diverged"] = s.diverged();
  return j;
}

// ---- inputs -----------------------------------------------------------------------------

// Symbol values for made-up inputs: the hint seen at export, else 8 clamped into the range.
std::vector<std::int64_t> example_symbols(const fb::Program& p) {
  std::vector<std::int64_t> values;
  for (std::uint32_t s = 0; s < (p.symbols() ? p.symbols()->size() : 0); ++s) {
    const auto* sym = p.symbols()->Get(s);
    values.push_back(sym->has_hint() ? sym->hint() : std::clamp<std::int64_t>(8, sym->min(), sym->max()));
  }
  return values;
}

// A random value for `spec` (seeded): floats are normal(0, 1) rounded to multiples of 1/32
// within [-4, 4) (exact in f16 and bf16 too), integers uniform in [0, 4), bools 0/1.
Result<HostValue> random_input(const fb::Program& p, const fb::InputSpec& spec, std::span<const std::int64_t> symbols,
                               std::mt19937_64& rng) {
  const std::string name = spec.name() ? spec.name()->str() : "";
  if (spec.kind() == fb::InputKind::Int) {
    if (spec.dynamism() == fb::Dynamism::Static) return HostValue::integer(spec.static_value());
    auto v = evaluate_expr(p, spec.expr(), symbols);
    if (!v.ok()) return v.status().with_context("input '" + name + "'");
    return HostValue::integer(*v);
  }
  HostTensor t;
  t.dtype = static_cast<DType>(spec.dtype());
  std::uint64_t numel = 1;
  for (std::uint32_t d = 0; d < (spec.shape() ? spec.shape()->size() : 0); ++d) {
    auto size = evaluate_expr(p, spec.shape()->Get(d), symbols);
    if (!size.ok()) return size.status().with_context("input '" + name + "'");
    if (*size < 0 || *size > (std::int64_t{1} << 31)) {
      return Status(StatusCode::kInvalidInput, "input '" + name + "': cannot make up a random value: dim " + std::to_string(d) +
                                                   " would be " + std::to_string(*size) + " (give the input)");
    }
    t.shape.push_back(*size);
    numel *= static_cast<std::uint64_t>(*size);
    if (numel > (std::uint64_t{1} << 31)) {
      return Status(StatusCode::kInvalidInput, "input '" + name + "': cannot make up a random value of more than 2^31 elements (give the input)");
    }
  }
  t.data.resize(numel * dtype_size(t.dtype));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(0, 3);
  for (std::uint64_t i = 0; i < numel; ++i) {
    std::uint8_t* at = t.data.data() + i * dtype_size(t.dtype);
    const float f = std::clamp(std::round(normal(rng) * 32.0f), -128.0f, 127.0f) / 32.0f;
    std::uint32_t bits;
    std::memcpy(&bits, &f, 4);
    switch (t.dtype) {
      case DType::kF32: std::memcpy(at, &f, 4); break;
      case DType::kF64: { const double d = f; std::memcpy(at, &d, 8); break; }
      case DType::kBF16: { const std::uint16_t h = static_cast<std::uint16_t>(bits >> 16); std::memcpy(at, &h, 2); break; }
      case DType::kF16: {  // f is 0 or a normal f16 with at most 8 significant bits: exact
        const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
        const int exp = static_cast<int>((bits >> 23) & 0xffu);
        const std::uint16_t h = f == 0.0f ? sign : static_cast<std::uint16_t>(sign | ((exp - 127 + 15) << 10) | ((bits >> 13) & 0x3ffu));
        std::memcpy(at, &h, 2);
        break;
      }
      case DType::kBool: *at = static_cast<std::uint8_t>(small(rng) & 1); break;
      default: {
        const std::int64_t v = small(rng);
        std::memcpy(at, &v, dtype_size(t.dtype));  // little-endian: the low bytes
        break;
      }
    }
  }
  return HostValue::of(std::move(t));
}

// Where each input came from, for the report.
struct InputSource {
  std::string name, source, detail;
};

Result<std::vector<HostValue>> make_inputs(const CompareOptions& o, const Bundle& bundle, std::vector<InputSource>& sources) {
  const fb::Program& p = bundle.program();
  const auto* sig = p.signature()->inputs();
  const std::uint32_t n = sig ? sig->size() : 0;
  std::vector<std::string> args(o.positional.begin() + (o.against.empty() ? 2 : 1), o.positional.end());
  args.insert(args.end(), o.inputs.begin(), o.inputs.end());
  if (!o.self_test.empty()) {
    if (!args.empty()) return Status(StatusCode::kUsage, "--self-test takes the inputs from the bundle: give no input values with it");
    const std::uint32_t count = p.self_tests() ? p.self_tests()->size() : 0;
    std::int64_t index = -1;
    for (std::uint32_t t = 0; t < count; ++t) {
      const auto* st = p.self_tests()->Get(t);
      if ((st->name() && st->name()->str() == o.self_test) || std::to_string(t) == o.self_test) index = t;
    }
    if (index < 0) {
      return Status(StatusCode::kUsage, "--self-test " + o.self_test + ": no such self-test (the bundle has " + std::to_string(count) +
                                            ", numbered from 0)");
    }
    const auto* st = p.self_tests()->Get(static_cast<std::uint32_t>(index));
    std::vector<HostValue> values;
    for (std::uint32_t k = 0; k < st->inputs()->size(); ++k) {
      values.push_back(self_test_value(bundle, *st->inputs()->Get(k)));
      sources.push_back({k < n ? sig->Get(k)->name()->str() : "", "self-test", st->name() ? st->name()->str() : std::to_string(index)});
    }
    return values;
  }
  const std::vector<std::int64_t> symbols = example_symbols(p);
  std::mt19937_64 rng(o.seed);
  std::vector<bool> made(n, false);
  InputFiller fill = [&](std::uint32_t i, const fb::InputSpec& spec) -> Result<HostValue> {
    made[i] = true;
    return random_input(p, spec, symbols, rng);
  };
  KILN_ASSIGN_OR_RETURN(std::vector<HostValue> values, parse_inputs(p, args, &fill));
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::string detail = made[i] ? "seed " + std::to_string(o.seed) : "";
    sources.push_back({sig->Get(i)->name()->str(), made[i] ? "random" : "given", detail});
  }
  return values;
}

// B must take what A takes: the same inputs by name, kind, dtype and rank.
Status check_same_signature(const Side& a, const Side& b) {
  const auto* sa = a.program->bundle().program().signature()->inputs();
  const auto* sb = b.program->bundle().program().signature()->inputs();
  const std::uint32_t na = sa ? sa->size() : 0, nb = sb ? sb->size() : 0;
  auto describe = [](const fb::InputSpec& s) {
    if (s.kind() == fb::InputKind::Int) return std::string("an int");
    return std::string(dtype_name(static_cast<DType>(s.dtype()))) + " of rank " + std::to_string(s.shape() ? s.shape()->size() : 0);
  };
  const std::string mismatch = "the bundles' signatures differ, so they cannot run on the same inputs: ";
  if (na != nb) {
    return Status(StatusCode::kInvalidInput, mismatch + a.path + " takes " + std::to_string(na) + " inputs, " + b.path + " takes " + std::to_string(nb));
  }
  for (std::uint32_t i = 0; i < na; ++i) {
    const auto *x = sa->Get(i), *y = sb->Get(i);
    if (x->name()->str() != y->name()->str()) {
      return Status(StatusCode::kInvalidInput, mismatch + "input " + std::to_string(i) + " is '" + x->name()->str() + "' in " + a.path + ", '" +
                                                   y->name()->str() + "' in " + b.path);
    }
    if (describe(*x) != describe(*y)) {
      return Status(StatusCode::kInvalidInput, mismatch + "input '" + x->name()->str() + "' is " + describe(*x) + " in " + a.path + ", " +
                                                   describe(*y) + " in " + b.path);
    }
  }
  return Status::Ok();
}

// ---- running ----------------------------------------------------------------------------

Status run_side(Side& side, const CompareOptions& o, std::span<const HostValue> inputs) {
  SessionOptions so{.threads = o.threads, .max_memory_bytes = o.max_memory};
  std::uint64_t pending_subgraph_nodes = 0;
  so.observer = [&](const NodeObservation& e) {
    if (e.depth > 0) {
      ++pending_subgraph_nodes;
      return;
    }
    side.graph = e.graph;
    NodeRecord r;
    r.node = e.node;
    r.subgraph_nodes = std::exchange(pending_subgraph_nodes, 0);
    for (const ObservedValue& v : e.outputs) {
      r.present.push_back(v.kind != ObservedValue::Kind::kAbsent);
      if (v.kind == ObservedValue::Kind::kInt) {
        r.outputs.push_back(HostValue::integer(v.int_value));
        continue;
      }
      HostTensor t;
      t.dtype = v.dtype;
      t.shape.assign(v.shape.begin(), v.shape.end());
      t.data.assign(v.data.begin(), v.data.end());
      r.outputs.push_back(HostValue::of(std::move(t)));
    }
    side.nodes.push_back(std::move(r));
  };
  Session session(*side.program, std::move(so));
  auto result = session.run(inputs);
  if (!result.ok()) return result.status().with_context(side.label);
  side.result = std::move(result).value();
  return Status::Ok();
}

// The two sides from the arguments: A on --backend and B, or BUNDLE on --backend and on
// --against; loaded without activation fusion, so every node's own output is seen.
Status open_sides(const CompareOptions& o, Side& a, Side& b) {
  KILN_RETURN_IF_ERROR(check_backend(o.backend));
  a.path = o.positional[0];
  a.backend = o.backend;
  if (!o.against.empty()) {
    KILN_RETURN_IF_ERROR(check_backend(o.against));
    b.path = a.path;
    b.backend = o.against;
    a.label = a.path + " on " + a.backend;
    b.label = b.path + " on " + b.backend;
  } else {
    if (o.positional.size() < 2) return Status(StatusCode::kUsage, "compare needs two bundles (A.kiln B.kiln) or one with --against BACKEND");
    b.path = o.positional[1];
    b.backend = o.backend;
    a.label = a.path;
    b.label = b.path;
  }
  for (Side* s : {&a, &b}) {
    auto program = open_program(s->path, /*verify_segments=*/true, s->backend, !o.no_mmap, /*fuse_activations=*/false);
    if (!program.ok()) return program.status();
    s->program = *program;
  }
  return Status::Ok();
}

// ---- matching ---------------------------------------------------------------------------

const fb::Node& fb_node(const Side& s, std::uint32_t n) { return *s.program->bundle().program().graphs()->Get(s.graph)->nodes()->Get(n); }

std::string op_of(const Side& s, std::uint32_t n) {
  const fb::Program& p = s.program->bundle().program();
  const std::uint32_t op = fb_node(s, n).op();
  return p.op_names() && op < p.op_names()->size() ? p.op_names()->Get(op)->str() : "?";
}

std::string source_of(const Side& s, std::uint32_t n) { return debug_location(s.program->bundle().program(), fb_node(s, n).debug()).text(); }

// How two bundles' nodes are matched: the name of the node's first output value, else its
// op and source location; a key seen before gets "#2", "#3"... in execution order.
std::vector<std::string> node_keys(const Side& s) {
  const auto* graph = s.program->bundle().program().graphs()->Get(s.graph);
  std::map<std::string, int> seen;
  std::vector<std::string> keys;
  for (const NodeRecord& r : s.nodes) {
    const fb::Node& node = fb_node(s, r.node);
    std::string key;
    if (node.outputs() && node.outputs()->size() > 0) {
      const auto* v = graph->values()->Get(node.outputs()->Get(0));
      if (v->name() && v->name()->size() > 0) key = v->name()->str();
    }
    if (key.empty()) key = op_of(s, r.node) + " at " + (source_of(s, r.node).empty() ? "?" : source_of(s, r.node));
    const int k = ++seen[key];
    keys.push_back(k == 1 ? key : key + "#" + std::to_string(k));
  }
  return keys;
}

// The shapes of node n's inputs, as they were when it ran (from the recorded producers,
// the run's inputs and the constants).
std::vector<std::string> input_shapes(const Side& s, std::uint32_t n, std::span<const HostValue> inputs) {
  const fb::Program& p = s.program->bundle().program();
  const auto* graph = p.graphs()->Get(s.graph);
  std::vector<std::string> out;
  const fb::Node& node = fb_node(s, n);
  for (std::uint32_t k = 0; k < (node.inputs() ? node.inputs()->size() : 0); ++k) {
    const std::uint32_t v = node.inputs()->Get(k);
    std::string text = "?";
    for (const NodeRecord& r : s.nodes) {
      const fb::Node& producer = fb_node(s, r.node);
      for (std::uint32_t j = 0; j < (producer.outputs() ? producer.outputs()->size() : 0) && j < r.outputs.size(); ++j) {
        if (producer.outputs()->Get(j) == v && r.present[j]) text = value_text(r.outputs[j]);
      }
    }
    for (std::uint32_t j = 0; j < (graph->inputs() ? graph->inputs()->size() : 0) && j < inputs.size(); ++j) {
      if (graph->inputs()->Get(j) == v) text = value_text(inputs[j]);
    }
    const auto* value = graph->values()->Get(v);
    if (value->kind() == fb::ValueKind::Constant || value->kind() == fb::ValueKind::None) {
      std::vector<std::uint32_t> dims;
      if (value->shape()) dims.assign(value->shape()->begin(), value->shape()->end());
      text = value->kind() == fb::ValueKind::None ? "absent" : shape_to_string(p, dtype_name(static_cast<DType>(value->dtype())), dims);
    }
    out.push_back(text);
  }
  return out;
}

// ---- report -----------------------------------------------------------------------------

struct Row {
  std::size_t a = 0, b = 0;  // indices into the sides' records
  std::vector<Stats> outputs;
  bool diverged = false;
};

// Everything the report says: matched rows, unmatched nodes, the final outputs.
struct Comparison {
  bool by_index = false;                   // one bundle, one graph: nodes matched by index
  std::vector<std::string> keys_a, keys_b;  // node_keys (across bundles)
  std::vector<Row> rows;                   // A's execution order
  std::vector<std::size_t> unmatched_a;    // indices into a.nodes
  std::vector<bool> matched_b;             // per b.nodes
  std::vector<Stats> outputs;              // the final outputs
  std::ptrdiff_t first = -1;               // index of the first row that diverged; -1: none
  bool diverged = false;                   // a row or an output
};

Row compare_node(const Side& a, const Side& b, std::size_t i, std::size_t j, const CompareOptions& o) {
  Row row{i, j, {}, false};
  const NodeRecord &ra = a.nodes[i], &rb = b.nodes[j];
  for (std::size_t k = 0; k < std::max(ra.outputs.size(), rb.outputs.size()); ++k) {
    Stats s;
    if (k >= ra.outputs.size() || k >= rb.outputs.size()) {
      s.error = "output " + std::to_string(k) + " exists on one side only";
    } else if (ra.present[k] != rb.present[k]) {
      s.error = std::string("absent on ") + (ra.present[k] ? "the reference" : "this side");
    } else if (ra.present[k]) {
      s = compare_values(ra.outputs[k], rb.outputs[k], o.rtol, o.atol);
    }
    row.diverged = row.diverged || s.diverged();
    row.outputs.push_back(std::move(s));
  }
  return row;
}

// Matches the nodes (by index on one bundle's graph, else by node_keys) and compares them.
Comparison compare_sides(const Side& a, const Side& b, const CompareOptions& o) {
  Comparison c;
  c.by_index = !o.against.empty() && a.graph == b.graph;
  c.keys_a = node_keys(a);
  c.keys_b = node_keys(b);
  c.matched_b.assign(b.nodes.size(), false);
  auto key = [&](const Side& s, const std::vector<std::string>& keys, std::size_t i) {
    return c.by_index ? std::to_string(s.nodes[i].node) : keys[i];
  };
  std::map<std::string, std::size_t> index_b;
  for (std::size_t j = 0; j < b.nodes.size(); ++j) index_b[key(b, c.keys_b, j)] = j;
  for (std::size_t i = 0; i < a.nodes.size(); ++i) {
    const auto it = index_b.find(key(a, c.keys_a, i));
    if (it == index_b.end()) {
      c.unmatched_a.push_back(i);
      continue;
    }
    c.matched_b[it->second] = true;
    c.rows.push_back(compare_node(a, b, i, it->second, o));
  }
  for (std::size_t k = 0; k < a.result.outputs.size() && k < b.result.outputs.size(); ++k) {
    c.outputs.push_back(compare_values(a.result.outputs[k], b.result.outputs[k], o.rtol, o.atol));
    c.diverged = c.diverged || c.outputs.back().diverged();
  }
  for (std::size_t r = 0; r < c.rows.size() && c.first < 0; ++r) {
    if (c.rows[r].diverged) c.first = static_cast<std::ptrdiff_t>(r);
  }
  c.diverged = c.diverged || c.first >= 0;
  return c;
}

// The first divergent node: where, its op, its input and output shapes, its statistics.
json first_divergence_json(const Side& a, const Side& b, const Comparison& c, std::span<const HostValue> inputs) {
  if (c.first < 0) return nullptr;
  const Row& row = c.rows[static_cast<std::size_t>(c.first)];
  const NodeRecord &ra = a.nodes[row.a], &rb = b.nodes[row.b];
  std::size_t k = 0;
  while (!row.outputs[k].diverged()) ++k;
  auto shapes = [](const NodeRecord& r) {
    json list = json::array();
    for (std::size_t j = 0; j < r.outputs.size(); ++j) list.push_back(r.present[j] ? value_text(r.outputs[j]) : "absent");
    return list;
  };
  json j{{"node", ra.node},
         {"reference_node", rb.node},
         {"op", op_of(a, ra.node)},
         {"reference_op", op_of(b, rb.node)},
         {"source", source_of(a, ra.node)},
         {"input_shapes", input_shapes(a, ra.node, inputs)},
         {"output_shapes", shapes(ra)},
         {"reference_output_shapes", shapes(rb)},
         {"output", k}};
  j.update(stats_json(row.outputs[k]));
  return j;
}

json report_json(const Side& a, const Side& b, const Comparison& c, const CompareOptions& o, const std::vector<InputSource>& sources,
                 const json& first) {
  auto side_json = [](const Side& s) {
    return json{{"bundle", s.path}, {"backend", s.program->backend_name()}, {"variant", s.result.variant}, {"graph", s.graph},
                {"nodes", s.nodes.size()}};
  };
  json in = json::array();
  for (const InputSource& src : sources) {
    json j{{"name", src.name}, {"source", src.source}};
    if (!src.detail.empty()) j["detail"] = src.detail;
    in.push_back(j);
  }
  json nodes = json::array();
  for (const Row& row : c.rows) {
    const NodeRecord &ra = a.nodes[row.a], &rb = b.nodes[row.b];
    json outs = json::array();
    for (std::size_t k = 0; k < row.outputs.size(); ++k) {
      json oj{{"index", k}, {"value", k < ra.outputs.size() && ra.present[k] ? json(value_text(ra.outputs[k])) : json("absent")}};
      oj.update(stats_json(row.outputs[k]));
      outs.push_back(oj);
    }
    json nj{{"node", ra.node}, {"reference_node", rb.node}, {"op", op_of(a, ra.node)}, {"source", source_of(a, ra.node)}};
    if (!c.by_index) nj["key"] = c.keys_a[row.a];
    if (ra.subgraph_nodes > 0 || rb.subgraph_nodes > 0) nj["subgraph_nodes"] = {ra.subgraph_nodes, rb.subgraph_nodes};
    nj["outputs"] = outs;
    nj["diverged"] = row.diverged;
    nodes.push_back(nj);
  }
  auto node_entry = [](const Side& s, const std::vector<std::string>& keys, std::size_t i) {
    return json{{"node", s.nodes[i].node}, {"op", op_of(s, s.nodes[i].node)}, {"source", source_of(s, s.nodes[i].node)}, {"key", keys[i]}};
  };
  json unmatched_a = json::array(), unmatched_b = json::array();
  for (std::size_t i : c.unmatched_a) unmatched_a.push_back(node_entry(a, c.keys_a, i));
  for (std::size_t j = 0; j < b.nodes.size(); ++j) {
    if (!c.matched_b[j]) unmatched_b.push_back(node_entry(b, c.keys_b, j));
  }
  json outs = json::array();
  for (std::size_t k = 0; k < c.outputs.size(); ++k) {
    json oj{{"index", k}};
    oj.update(stats_json(c.outputs[k]));
    outs.push_back(oj);
  }
  return {{"mode", o.against.empty() ? "bundles" : "backends"},
          {"a", side_json(a)},
          {"b", side_json(b)},
          {"tolerance", {{"rtol", o.rtol}, {"atol", o.atol}}},
          {"inputs", in},
          {"nodes", nodes},
          {"unmatched_a", unmatched_a},
          {"unmatched_b", unmatched_b},
          {"outputs", outs},
          {"first_divergence", first},
          {"diverged", c.diverged}};
}

std::string fmt(double v, int precision = 3) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream s;
  s << std::setprecision(precision) << v;
  return s.str();
}

void print_table(const Side& a, const std::vector<Row>& rows) {
  std::cerr << std::left << std::setw(6) << "node" << std::setw(16) << "op" << std::setw(22) << "output" << std::setw(11) << "max|err|"
            << std::setw(11) << "max rel" << std::setw(11) << "cosine" << std::setw(10) << "SQNR dB" << "source\n";
  for (const Row& row : rows) {
    const NodeRecord& ra = a.nodes[row.a];
    for (std::size_t k = 0; k < row.outputs.size(); ++k) {
      const Stats& s = row.outputs[k];
      std::string node = std::to_string(ra.node) + (row.outputs.size() > 1 ? "." + std::to_string(k) : "");
      std::cerr << std::left << std::setw(6) << node << std::setw(16) << printable(op_of(a, ra.node)) << std::setw(22)
                << (ra.present[k] ? value_text(ra.outputs[k]) : "absent");
      if (!s.error.empty()) {
        std::cerr << "MISMATCH: " << printable(s.error);
      } else {
        std::cerr << std::setw(11) << fmt(s.max_abs) << std::setw(11) << fmt(s.max_rel) << std::setw(11) << fmt(s.cosine, 7) << std::setw(10)
                  << fmt(s.sqnr_db, 4);
      }
      std::cerr << printable(source_of(a, ra.node));
      if (ra.subgraph_nodes > 0) std::cerr << " (" << ra.subgraph_nodes << " subgraph nodes ran)";
      std::cerr << (s.diverged() ? "  DIVERGED" : "") << "\n";
    }
  }
}

void print_report(const Side& a, const Side& b, const Comparison& c, const CompareOptions& o, const std::vector<InputSource>& sources,
                  const json& first) {
  std::cerr << "comparing " << printable(a.label) << " (variant " << printable(a.result.variant) << ") against " << printable(b.label)
            << " (variant " << printable(b.result.variant) << "), rtol " << o.rtol << ", atol " << o.atol << "\n";
  for (const InputSource& src : sources) {
    if (src.source != "given") std::cerr << "input " << printable(src.name) << ": " << src.source << " (" << printable(src.detail) << ")\n";
  }
  print_table(a, c.rows);
  auto unmatched = [](const Side& s, const std::vector<std::string>& keys, std::size_t i) {
    std::cerr << "unmatched in " << printable(s.label) << ": node " << s.nodes[i].node << " " << printable(op_of(s, s.nodes[i].node)) << " '"
              << printable(keys[i]) << "'\n";
  };
  for (std::size_t i : c.unmatched_a) unmatched(a, c.keys_a, i);
  for (std::size_t j = 0; j < b.nodes.size(); ++j) {
    if (!c.matched_b[j]) unmatched(b, c.keys_b, j);
  }
  for (std::size_t k = 0; k < c.outputs.size(); ++k) {
    const Stats& s = c.outputs[k];
    std::cerr << "output " << k << ": "
              << (s.error.empty() ? "max |err| " + fmt(s.max_abs) + ", cosine " + fmt(s.cosine, 7) + ", SQNR " + fmt(s.sqnr_db, 4) + " dB" : printable(s.error))
              << (s.diverged() ? "  DIVERGED" : "") << "\n";
  }
  if (c.first < 0) return;
  const std::size_t k = first["output"].get<std::size_t>();
  const Stats& s = c.rows[static_cast<std::size_t>(c.first)].outputs[k];
  std::string ins;
  for (const auto& t : first["input_shapes"]) ins += (ins.empty() ? "" : ", ") + t.get<std::string>();
  std::cerr << "first divergence: node " << first["node"].get<std::uint32_t>() << " " << printable(first["op"].get<std::string>()) << "("
            << printable(ins) << ") -> " << printable(first["output_shapes"][k].get<std::string>());
  const std::string src = first["source"].get<std::string>();
  if (!src.empty()) std::cerr << " at " << printable(src);
  std::cerr << ": ";
  if (!s.error.empty()) {
    std::cerr << printable(s.error) << "\n";
  } else {
    std::cerr << s.mismatched << " elements beyond atol + rtol * |reference|, max |err| " << fmt(s.max_abs) << " at index " << s.worst_index << "\n";
  }
}

}  // namespace

Command add_compare(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  app.add_option("bundles_and_values", o->positional,
                 "A.kiln, then B.kiln unless --against is given, then input values in signature order (FILE.npy or INT)")
      ->required();
  app.add_option("-i,--input", o->inputs, "NAME=FILE.npy or NAME=INT; tensor inputs not given are random (--seed)");
  app.add_option("--backend", o->backend, "Backend of A (cpu, vulkan or auto; default cpu)");
  app.add_option("--against", o->against, "Compare BUNDLE on --backend against this backend (the reference)");
  app.add_option("--rtol", o->rtol, "Relative tolerance (default 1e-4)")->check(CLI::NonNegativeNumber);
  app.add_option("--atol", o->atol, "Absolute tolerance (default 1e-5)")->check(CLI::NonNegativeNumber);
  app.add_option("--self-test", o->self_test, "Use the inputs of A's self-test N (an index from 0, or its name)");
  app.add_option("--seed", o->seed, "Seed of the random inputs (default 0)");
  app.add_option("--threads", o->threads, "Worker threads (default 1)")->check(CLI::Range(1, 256));
  add_max_memory_option(app, o->max_memory);
  app.add_flag("--json", o->json, "Print one JSON object on stdout");
  add_no_mmap_flag(app, &o->no_mmap);
  app.footer(
      "Examples:\n  kiln compare model.kiln --backend vulkan --against cpu --input x=x.npy\n"
      "  kiln compare model.q4.kiln model.kiln --self-test 0 --json\n"
      "Exit codes: 0 no node diverged, 5 a node or output diverged beyond the tolerance, otherwise the error's code (docs/CLI.md).");
  return [o]() {
    if (!std::isfinite(o->rtol) || !std::isfinite(o->atol)) {
      return report_error(Status(StatusCode::kUsage, "--rtol and --atol must be finite numbers >= 0"), o->json);
    }
    Side a, b;
    KILN_RETURN_IF_ERROR_CLI(open_sides(*o, a, b), o->json);
    KILN_RETURN_IF_ERROR_CLI(check_same_signature(a, b), o->json);
    std::vector<InputSource> sources;
    auto inputs = make_inputs(*o, a.program->bundle(), sources);
    if (!inputs.ok()) return report_error(inputs.status(), o->json);
    for (Side* s : {&a, &b}) KILN_RETURN_IF_ERROR_CLI(run_side(*s, *o, *inputs), o->json);

    const Comparison c = compare_sides(a, b, *o);
    const json first = first_divergence_json(a, b, c, *inputs);
    if (o->json) {
      std::cout << dump_json(report_json(a, b, c, *o, sources, first)) << "\n";
    } else {
      print_report(a, b, c, *o, sources, first);
    }
    if (c.diverged) {
      std::cerr << "kiln: error: " << (c.first >= 0 ? "a node" : "an output") << " diverged beyond the tolerance\n";
      return exit_code(StatusCode::kValidationFailed);
    }
    if (!o->json) std::cerr << "no node diverged\n";
    return 0;
  };
}

}  // namespace kiln::cli
