// Hostile arguments in real archives: every case of the op sweep (tests/fixtures/op_sweep),
// with one int / ints / float / floats / bool argument of one node replaced by a hostile
// value (0, negatives, 2^31, 2^62, an empty or longer list, 1e30, ...), one value's
// TensorMeta changed (a size, the rank, the dtype), or one node given another op of the
// sweep (whose handler then meets arguments it does not expect), is imported and, when
// the import succeeds, run on the case's inputs. Any error is fine as long as it is a clean
// one (never kInternal, never a crash or a hang): the importer's handlers check what they
// read. Deterministic: a fixed seed picks the sites and values (KILN_MUTATION_SEED=N picks
// another, for exploring by hand; KILN_MUTATION_VERBOSE=1 prints each one before its import).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "import/tensor_data.h"  // export/src: quote_nonfinite_literals
#include "import/zip_testutil.h"
#include "kiln/export/import_pt2.h"
#include "kiln/export/serialize.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/npy.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kSweep = fs::path(KILN_SOURCE_DIR) / "tests" / "fixtures" / "op_sweep";
constexpr std::int64_t kHostileInts[] = {0,       -1, -2, 1, 2, 3, 7, std::int64_t{1} << 20, std::int64_t{1} << 31, -(std::int64_t{1} << 31),
                                         std::int64_t{1} << 62, -(std::int64_t{1} << 62), 65537};
constexpr double kHostileFloats[] = {0.0, -1.0, 1e30, -1e30, 1e-30, 3.5};
constexpr std::size_t kSitesPerArchive = 12;
constexpr std::size_t kSitesPerOtherArchive = 6;
// Symbolic expressions an archive could carry (sym_int_values' expr_str).
const char* const kHostileExprs[] = {"", "((((", "s0 +", "Symbol('zz', positive=True, integer=True)", "99999999999999999999999999",
                                     "s77**s77", "Mod(s77, 0)", "FloorDiv(s77, 0)", "-s77", "s77*s77*s77*s77*s77*s77*s77*s77",
                                     "Max(s77, -9223372036854775808)", "nan", "1/0"};

// Legacy archives write the non-JSON numbers -Infinity, Infinity and NaN (an unbounded
// symbol range, a float argument), which strict JSON does not read: quoted first, as the
// importer itself does (and as later PyTorch versions write them).
json parse_archive_json(const std::string& text) {
  std::vector<std::uint8_t> bytes(text.begin(), text.end());
  pt2::quote_nonfinite_literals(bytes);
  return json::parse(bytes.begin(), bytes.end(), nullptr, false);
}

// A node argument (node, input, kind = its "as_*" key), or a TensorMeta (kind "size", "rank"
// or "dtype" of tensor_values[value]).
struct Site {
  std::size_t node = 0, input = 0;
  std::string kind, value;
};

// The new value of argument `kind` (its old value `old`).
json hostile(const std::string& kind, const json& old, std::mt19937& rng) {
  auto pick_int = [&] { return kHostileInts[rng() % std::size(kHostileInts)]; };
  if (kind == "as_int") return pick_int();
  if (kind == "as_float") return kHostileFloats[rng() % std::size(kHostileFloats)];
  if (kind == "as_floats") return json::array();
  if (kind == "as_bool") return !old.get<bool>();
  json v = old;  // as_ints
  switch (rng() % 4) {
    case 0: return json::array();
    case 1:
      for (auto& e : v) e = pick_int();
      if (v.empty()) v.push_back(0);
      return v;
    case 2: v.push_back(pick_int()); return v;
    default:
      if (!v.empty()) v[rng() % v.size()] = pick_int();
      return v;
  }
}

// Serializes, loads and runs the import on the case's inputs; the status of the first step
// that fails.
Status load_and_run(const ExportedProgram& ep, const fs::path& dir) {
  auto bytes = serialize_bundle(ep.program());
  if (!bytes.ok()) return bytes.status();
  auto bundle = Bundle::from_bytes(*bytes);
  if (!bundle.ok()) return bundle.status();
  auto program = Program::load(std::move(*bundle));
  if (!program.ok()) return program.status();
  std::vector<HostValue> in;
  for (int i = 0; fs::exists(dir / ("in" + std::to_string(i) + ".npy")); ++i) {
    auto t = read_npy_any_order((dir / ("in" + std::to_string(i) + ".npy")).string());
    if (!t.ok()) return t.status();
    in.push_back(HostValue::of(std::move(*t)));
  }
  SessionOptions options;
  options.max_memory_bytes = std::uint64_t{2} << 30;
  Session session(**program, options);
  auto r = session.run(in);
  return r.ok() ? Status::Ok() : r.status();
}

TEST(ImportMutation, HostileArgumentsGiveCleanErrors) {
  // The op sweep, then the other fixtures (dynamic shapes, control flow, data-dependent
  // sizes, state, larger models; imported only when the folder has no in0.npy), with fewer
  // sites each.
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(kSweep)) {
    if (e.is_directory()) cases.push_back(e.path());
  }
  std::sort(cases.begin(), cases.end());
  ASSERT_GT(cases.size(), 100u);
  const std::size_t sweep_cases = cases.size();
  for (const char* root : {"torch_export", "torch_export_stateful", "torch26", "torch_extra", "torch_extra/stateful"}) {
    std::vector<fs::path> more;
    for (const auto& e : fs::directory_iterator(fs::path(KILN_SOURCE_DIR) / "tests" / "fixtures" / root)) {
      if (e.is_directory()) more.push_back(e.path());
    }
    std::sort(more.begin(), more.end());
    cases.insert(cases.end(), more.begin(), more.end());
  }
  const char* seed = std::getenv("KILN_MUTATION_SEED");
  const bool verbose = std::getenv("KILN_MUTATION_VERBOSE") != nullptr;  // each mutation on stderr before its import
  // Every op the sweep uses: a node may be given another's target (its arguments then fit
  // nothing the handler expects).
  std::vector<std::string> targets;
  for (const auto& e : fs::directory_iterator(kSweep)) {
    if (!e.is_directory() || !fs::exists(e.path() / "model.pt2")) continue;
    for (const auto& [name, bytes] : testing::read_zip((e.path() / "model.pt2").string())) {
      if (!name.ends_with("models/model.json")) continue;
      const json m = json::parse(bytes);
      for (const json& n : m["graph_module"]["graph"]["nodes"]) targets.push_back(n["target"].get<std::string>());
    }
  }
  std::sort(targets.begin(), targets.end());
  targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
  ASSERT_GT(targets.size(), 50u);
  std::mt19937 rng(seed != nullptr ? static_cast<std::uint32_t>(std::strtoul(seed, nullptr, 10)) : 20261128u);
  const std::string tmp = (fs::temp_directory_path() / ("kiln_mutation_" + std::to_string(::getpid()) + ".pt2")).string();
  int mutations = 0, imported = 0;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
   const fs::path& dir = cases[ci];
   const std::size_t max_sites = ci < sweep_cases ? kSitesPerArchive : kSitesPerOtherArchive;
   for (const std::string file : {"model.pt2", "model.core.pt2"}) {
    if (!fs::exists(dir / file)) continue;
    std::map<std::string, std::string> entries = testing::read_zip((dir / file).string());
    const auto member = std::find_if(entries.begin(), entries.end(), [](const auto& kv) {
      return kv.first.ends_with("models/model.json") || kv.first == "serialized_exported_program.json";  // PT2 or legacy layout
    });
    ASSERT_NE(member, entries.end()) << dir;
    const json model = parse_archive_json(member->second);
    ASSERT_FALSE(model.is_discarded()) << dir / file;
    const json& nodes = model["graph_module"]["graph"]["nodes"];
    std::vector<Site> sites;
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      sites.push_back({n, 0, "target", ""});
      for (std::size_t i = 0; i < nodes[n]["inputs"].size(); ++i) {
        const std::string kind = nodes[n]["inputs"][i]["arg"].begin().key();
        if (kind == "as_int" || kind == "as_ints" || kind == "as_float" || kind == "as_floats" || kind == "as_bool") {
          sites.push_back({n, i, kind});
        }
      }
    }
    for (const auto& [name, meta] : model["graph_module"]["graph"]["tensor_values"].items()) {
      for (const char* kind : {"size", "rank", "dtype"}) sites.push_back({0, 0, kind, name});
    }
    if (const auto it = model.find("range_constraints"); it != model.end() && it->is_object()) {
      for (const auto& [name, range] : it->items()) sites.push_back({0, 0, "range", name});
    }
    for (const auto& [name, v] : model["graph_module"]["graph"]["sym_int_values"].items()) {
      if (v.contains("as_expr")) sites.push_back({0, 0, "expr", name});
    }
    std::shuffle(sites.begin(), sites.end(), rng);
    for (std::size_t s = 0; s < sites.size() && s < max_sites; ++s) {
      const Site& site = sites[s];
      json mutated = model;
      std::string what = dir.filename().string() + "/" + file + " ";
      if (site.kind == "range") {  // a symbol's range: hostile bounds, maybe min > max
        json& range = mutated["range_constraints"][site.value];
        range[rng() % 2 == 0 ? "min_val" : "max_val"] = kHostileInts[rng() % std::size(kHostileInts)];
        what += "range_constraints[" + site.value + "] = " + range.dump();
      } else if (site.kind == "expr") {  // a symbolic int's expression text
        json& expr = mutated["graph_module"]["graph"]["sym_int_values"][site.value]["as_expr"]["expr_str"];
        const std::size_t pick = rng() % (std::size(kHostileExprs) + 1);
        expr = pick < std::size(kHostileExprs) ? std::string(kHostileExprs[pick])
                                               : std::string(100000, '(') + "s77" + std::string(100000, ')');  // deep nesting
        what += "sym_int_values[" + site.value + "] = " + expr.get<std::string>().substr(0, 60);
      } else if (!site.value.empty()) {  // the TensorMeta of a value: one size, the rank, or the dtype
        json& meta = mutated["graph_module"]["graph"]["tensor_values"][site.value];
        json& sizes = meta["sizes"];
        if (site.kind == "size" && !sizes.empty()) {
          sizes[rng() % sizes.size()] = json{{"as_int", kHostileInts[rng() % std::size(kHostileInts)]}};
        } else if (site.kind == "rank") {
          if (rng() % 2 == 0 && !sizes.empty()) sizes.erase(sizes.size() - 1);
          else sizes.push_back(json{{"as_int", 2}});
        } else {
          meta["dtype"] = static_cast<int>(rng() % 40);
        }
        what += "tensor_values[" + site.value + "] = " + meta.dump();
      } else if (site.kind == "target") {
        json& target = mutated["graph_module"]["graph"]["nodes"][site.node]["target"];
        target = targets[rng() % targets.size()];
        what += "node " + std::to_string(site.node) + " " + nodes[site.node]["target"].get<std::string>() + " -> " + target.get<std::string>();
      } else {
        json& arg = mutated["graph_module"]["graph"]["nodes"][site.node]["inputs"][site.input]["arg"][site.kind];
        arg = hostile(site.kind, arg, rng);
        what += "node " + std::to_string(site.node) + " " + nodes[site.node]["target"].get<std::string>() + " " +
                nodes[site.node]["inputs"][site.input]["name"].get<std::string>() + " = " + arg.dump();
      }
      if (verbose) std::fprintf(stderr, "mutation: %s\n", what.c_str());
      member->second = mutated.dump();
      ASSERT_TRUE(testing::write_zip(tmp, entries)) << what;
      ++mutations;
      auto ep = import_pt2(tmp);
      if (!ep.ok()) {
        if (verbose) std::fprintf(stderr, "  -> %s\n", ep.status().to_string().c_str());
        EXPECT_NE(ep.status().code(), StatusCode::kInternal) << what << ": " << ep.status().to_string();
        EXPECT_FALSE(ep.status().message().empty()) << what;
        continue;
      }
      ++imported;
      const Status st = load_and_run(*ep, dir);
      EXPECT_NE(st.code(), StatusCode::kInternal) << what << ": " << st.to_string();
    }
    member->second = model.dump();
   }
  }
  fs::remove(tmp);
  EXPECT_GT(mutations, 3000);
  RecordProperty("mutations", mutations);
  RecordProperty("imported", imported);
  std::printf("%d mutations, %d imported\n", mutations, imported);
}

// Mutations that once crashed, kept whatever the seed, with the error they give now:
// - std_all's core graph with its sqrt turned into log10 loaded into a graph where an add
//   reads a shapeless (symbolic) value, and the runtime's lerp fusion dereferenced its
//   missing shape at Program::load (any clean outcome will do);
// - max_pool2d_with_indices whose indices output claims rank 3: the handler read dim 3 past
//   the shape; Shape's checked dims now make it exit-2 naming the op.
TEST(ImportMutation, OnceCrashingMutationsGiveCleanErrors) {
  struct Pinned {
    std::string dir, file;
    std::function<void(json&)> mutate;
    std::string message;  // empty: any error but kInternal, or success
    std::string run_message = "";  // imports, then loading or running it fails with this (kInvalidBundle: the bundle's shapes lie)
  };
  const std::vector<Pinned> pinned = {
      {"std_all", "model.core.pt2", [](json& m) { m["graph_module"]["graph"]["nodes"][1]["target"] = "torch.ops.aten.log10.default"; }, ""},
      {"max_pool_indices", "model.pt2",
       [](json& m) {
         json& sizes = m["graph_module"]["graph"]["tensor_values"]["getitem_1"]["sizes"];
         sizes.erase(sizes.size() - 1);
       },
       "[aten.max_pool2d_with_indices.default] node '': malformed archive: dim 3 of a value of rank 3 (its TensorMeta does not fit the op)"},
      // - bilinear upsampling (align_corners) whose clamp of a gather's indices became a
      //   diag_embed: the load-time fusion of the four gathers and three lerps matched the
      //   declared shapes, and the fused kernel met index tensors of different shapes at run
      //   time, which it reported as an internal error.
      {"upsample_bilinear_ac", "model.core.pt2",
       [](json& m) { m["graph_module"]["graph"]["nodes"][8]["target"] = "torch.ops.aten.diag_embed.default"; }, "",
       "[index] the four gathers of a fused bilinear interpolation have index shapes that differ at run time [main, node 35] "
       "(/script/opsweep.py:49)"},
  };
  for (const Pinned& p : pinned) {
    std::map<std::string, std::string> entries = testing::read_zip((kSweep / p.dir / p.file).string());
    const auto member = std::find_if(entries.begin(), entries.end(), [](const auto& kv) { return kv.first.ends_with("models/model.json"); });
    ASSERT_NE(member, entries.end());
    json model = json::parse(member->second);
    p.mutate(model);
    member->second = model.dump();
    const std::string tmp = (fs::temp_directory_path() / ("kiln_mutation_pin_" + std::to_string(::getpid()) + ".pt2")).string();
    ASSERT_TRUE(testing::write_zip(tmp, entries));
    auto ep = import_pt2(tmp);
    fs::remove(tmp);
    if (!p.message.empty()) {
      ASSERT_FALSE(ep.ok()) << p.dir;
      EXPECT_EQ(ep.status().code(), StatusCode::kInvalidBundle) << ep.status().to_string();
      EXPECT_EQ(ep.status().message(), p.message);
      continue;
    }
    const Status st = ep.ok() ? load_and_run(*ep, kSweep / p.dir) : ep.status();
    EXPECT_NE(st.code(), StatusCode::kInternal) << p.dir << ": " << st.to_string();
    if (!p.run_message.empty()) {
      ASSERT_TRUE(ep.ok()) << ep.status().to_string();
      EXPECT_EQ(st.code(), StatusCode::kInvalidBundle) << st.to_string();
      EXPECT_EQ(st.message(), p.run_message);
    }
  }
}

}  // namespace
}  // namespace kiln
