// The archive reader as a hostile-file parser: both layouts (PT2, legacy torch.save
// pickles), schema versions, member caps, non-regular files, the restricted unpickler,
// range checks on every offset / size / stride, and the rejection of every mutation.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <nlohmann/json.hpp>

#include "import/zip_testutil.h"
#include "kiln/export/import_pt2.h"
#include "kiln/export/serialize.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace kiln::testing;
using namespace std::string_literals;

std::string fixture(const std::string& model, const std::string& file = "model.pt2") {
  return (fs::path(KILN_FIXTURES_DIR) / model / file).string();
}
std::string legacy_fixture(const std::string& model, const std::string& file = "model.pt2") {
  return (fs::path(KILN_FIXTURES_DIR) / ".." / "torch26" / model / file).string();
}
std::string stateful_fixture(const std::string& model, const std::string& file) {
  return (fs::path(KILN_FIXTURES_DIR) / ".." / "torch_export_stateful" / model / file).string();
}

std::string floats(std::initializer_list<float> values) {
  std::string out(values.size() * sizeof(float), '\0');
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

class ImportArchive : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_archive_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // `archive` with the member ending in `suffix` rewritten by `edit`.
  std::string edited(const std::string& archive, const std::string& suffix, const std::string& name,
                     const std::function<void(std::string&)>& edit) {
    auto entries = read_zip(archive);
    bool found = false;
    for (auto& [n, data] : entries) {
      if (n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
        edit(data);
        found = true;
      }
    }
    EXPECT_TRUE(found) << suffix << " in " << archive;
    EXPECT_TRUE(write_zip(path(name), entries));
    return path(name);
  }
  std::string json_edited(const std::string& archive, const std::string& suffix, const std::string& name,
                          const std::function<void(json&)>& edit) {
    return edited(archive, suffix, name, [&](std::string& text) {
      json j = json::parse(text);
      edit(j);
      text = j.dump();
    });
  }
  // The legacy mlp archive with its state dict replaced by a hand-made torch.save zip. Its
  // members are deflated, so the nested zip is read into memory; with `stored` they are
  // stored as torch.export.save writes them, and the nested zip is read in place.
  std::string legacy_mlp_with_state_dict(const std::string& name, const std::string& torch_save, bool stored = false) {
    auto entries = read_zip(legacy_fixture("mlp", "model.core.pt2"));
    entries.at("serialized_state_dict.pt") = torch_save;
    if (stored) {
      std::ofstream(path(name), std::ios::binary) << zip_bytes(entries);
    } else {
      EXPECT_TRUE(write_zip(path(name), entries));
    }
    return path(name);
  }
  fs::path dir_;
};

void expect_error(const Result<ExportedProgram>& ep, StatusCode code, const std::vector<std::string>& parts) {
  ASSERT_FALSE(ep.ok()) << "imported, expected an error mentioning " << (parts.empty() ? "" : parts[0]);
  EXPECT_EQ(ep.status().code(), code) << ep.status().message();
  for (const std::string& p : parts) EXPECT_NE(ep.status().message().find(p), std::string::npos) << "'" << p << "' not in: " << ep.status().message();
}

// ---- layouts and versions -----------------------------------------------------------------

TEST_F(ImportArchive, LegacyLayoutReadsTheTorchSavePicklesOfBothIrs) {
  for (const char* file : {"model.pt2", "model.core.pt2"}) {
    SCOPED_TRACE(file);
    auto ep = import_pt2(legacy_fixture("mlp", file));
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    const ir::Program& p = ep->program();
    ASSERT_EQ(p.constants.size(), 4u);
    std::map<std::string, std::vector<std::int64_t>> shapes;
    for (const auto& c : p.constants) shapes[c.name] = c.shape;
    EXPECT_EQ(shapes["fc1.weight"], (std::vector<std::int64_t>{128, 64}));
    EXPECT_EQ(shapes["fc2.bias"], (std::vector<std::int64_t>{10}));
    bool source = false;
    for (const auto& [k, v] : p.metadata) source = source || (k == "torch_version" && v.rfind("2.6", 0) == 0);
    EXPECT_TRUE(source);
  }
}

TEST_F(ImportArchive, EverySchemaVersionFromPyTorch26To211Imports) {
  // 8.2 is PyTorch 2.6's, 8.17 PyTorch 2.11's; the minors between only add fields.
  for (int minor : {2, 3, 5, 8, 10, 12, 14, 17}) {
    SCOPED_TRACE(minor);
    const std::string p = json_edited(fixture("mlp"), "models/model.json", "v.pt2", [&](json& j) { j["schema_version"] = {{"major", 8}, {"minor", minor}}; });
    auto ep = import_pt2(p);
    EXPECT_TRUE(ep.ok()) << ep.status().message();
  }
  auto legacy = import_pt2(legacy_fixture("mlp"));
  EXPECT_TRUE(legacy.ok()) << legacy.status().message();
}

// Schema 8.x fields by version (torch/_export/serde/schema.py): PyTorch 2.6 writes 8.2 without
// Node.name, Node.is_hop_single_tensor_return, NamedArgument.kind, Argument.as_optional_tensor,
// GraphModule.treespec_namedtuple_fields and ExportedProgram.guards_code, which later minors
// added (2.11 writes 8.17 with all of them); an optional tensor argument is then `as_tensor`
// or `as_none` instead of `as_optional_tensor: {as_tensor | as_none}`.
void for_each_node(json& graph, const std::function<void(json&)>& visit) {
  for (json& node : graph["nodes"]) {
    visit(node);
    for (json& in : node["inputs"]) {
      if (in.contains("arg") && in["arg"].contains("as_graph")) for_each_node(in["arg"]["as_graph"]["graph"], visit);
    }
  }
}

void as_schema_8_2(json& j) {
  j["schema_version"] = {{"major", 8}, {"minor", 2}};
  j.erase("guards_code");
  j["graph_module"].erase("treespec_namedtuple_fields");
  for_each_node(j["graph_module"]["graph"], [](json& node) {
    node.erase("name");
    node.erase("is_hop_single_tensor_return");
    for (json& in : node["inputs"]) {
      in.erase("kind");
      if (in["arg"].contains("as_optional_tensor")) in["arg"] = json(in["arg"]["as_optional_tensor"]);
    }
  });
}

// The optional tensor arguments (a conv or linear bias, batch-norm statistics) in the
// `as_optional_tensor` form of the later minors.
int as_optional_tensor_form(json& j) {
  int rewritten = 0;
  for_each_node(j["graph_module"]["graph"], [&](json& node) {
    for (json& in : node["inputs"]) {
      const std::string name = in.value("name", "");
      if (name != "bias" && name != "running_mean" && name != "running_var" && name != "weight") continue;
      const std::string target = node.value("target", "");
      if (name == "weight" && target.find("batch_norm") == std::string::npos) continue;  // a conv's weight is not optional
      json& a = in["arg"];
      if (a.contains("as_tensor")) {
        a = {{"as_optional_tensor", {{"as_tensor", a["as_tensor"]}}}};
      } else if (a.contains("as_none")) {
        a = {{"as_optional_tensor", {{"as_none", true}}}};
      } else {
        continue;
      }
      ++rewritten;
    }
  });
  return rewritten;
}

TEST_F(ImportArchive, TheFieldsOfEverySchemaMinorImportToTheSameBundle) {
  for (const char* model : {"convnet", "decoder", "cond_dyn"}) {
    for (const char* file : {"model.pt2", "model.core.pt2"}) {
      SCOPED_TRACE(std::string(model) + "/" + file);
      // Every variant is written to the same file name: the bundle records it.
      auto bundle_of = [&](const std::function<void(json&)>& edit) -> std::vector<std::uint8_t> {
        auto ep = import_pt2(json_edited(fixture(model, file), "models/model.json", "v.pt2", edit));
        EXPECT_TRUE(ep.ok()) << ep.status().message();
        if (!ep.ok()) return {};
        auto bytes = serialize_bundle(ep->program());
        EXPECT_TRUE(bytes.ok()) << bytes.status().message();
        return bytes.ok() ? *bytes : std::vector<std::uint8_t>{};
      };
      const auto as_written = bundle_of([](json&) {});  // 8.17, PyTorch 2.11
      ASSERT_FALSE(as_written.empty());
      for (int minor : {2, 3, 5, 8, 10, 12, 14, 16, 17}) {
        SCOPED_TRACE(minor);
        EXPECT_EQ(bundle_of([&](json& j) { as_schema_8_2(j); j["schema_version"]["minor"] = minor; }), as_written) << "8.2 fields";
        EXPECT_EQ(bundle_of([&](json& j) { j["schema_version"]["minor"] = minor; }), as_written) << "8.17 fields";
      }
      int optional = 0;
      EXPECT_EQ(bundle_of([&](json& j) { optional = as_optional_tensor_form(j); }), as_written);
      if (std::string(model) == "convnet") {
        EXPECT_GT(optional, 0);
      }
      // A later minor only adds fields, which are ignored.
      EXPECT_EQ(bundle_of([](json& j) {
                  j["schema_version"]["minor"] = 30;
                  j["a_field_of_8_30"] = {1, 2};
                  j["graph_module"]["a_field_of_8_30"] = "x";
                  for_each_node(j["graph_module"]["graph"], [](json& node) {
                    node["a_field_of_8_30"] = {{"k", 1}};
                    for (json& in : node["inputs"]) in["a_field_of_8_30"] = false;
                  });
                }),
                as_written);
    }
  }
  // PyTorch 2.6's own archives (legacy layout, 8.2) with the 8.17 fields added import alike.
  for (const char* file : {"model.pt2", "model.core.pt2"}) {
    SCOPED_TRACE(file);
    auto original = import_pt2(legacy_fixture("convnet", file));
    ASSERT_TRUE(original.ok()) << original.status().message();
    auto upgraded = import_pt2(json_edited(legacy_fixture("convnet", file), "serialized_exported_program.json", "lv.pt2", [](json& j) {
      j["schema_version"]["minor"] = 17;
      j["guards_code"] = json::array();
      j["graph_module"]["treespec_namedtuple_fields"] = json::object();
      int k = 0;
      for_each_node(j["graph_module"]["graph"], [&](json& node) {
        node["name"] = "node" + std::to_string(k++);
        node["is_hop_single_tensor_return"] = nullptr;
        for (json& in : node["inputs"]) in["kind"] = 1;
      });
      as_optional_tensor_form(j);
    }));
    ASSERT_TRUE(upgraded.ok()) << upgraded.status().message();
    original->program().metadata.clear();
    upgraded->program().metadata.clear();
    upgraded->program().name = original->program().name;
    auto a = serialize_bundle(original->program());
    auto b = serialize_bundle(upgraded->program());
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b);
  }
}

TEST_F(ImportArchive, ArgumentsOfLaterMinorsKilnCannotMapAreRefusedNamingThem) {
  auto with_arg = [&](const std::string& param, const json& replacement) {
    return json_edited(fixture("decoder"), "models/model.json", "v.pt2", [&](json& j) {
      for (json& node : j["graph_module"]["graph"]["nodes"]) {
        if (node["target"] != "torch.ops.aten.layer_norm.default") continue;
        for (json& in : node["inputs"]) if (in["name"] == param) in["arg"] = replacement;
      }
    });
  };
  expect_error(import_pt2(with_arg("eps", {{"as_complex", {{"real", 1e-5}, {"imag", 0.0}}}})), StatusCode::kInvalidBundle,
               {"[aten.layer_norm.default]", "as_complex"});
  expect_error(import_pt2(with_arg("normalized_shape", {{"as_int_lists", {{64}}}})), StatusCode::kInvalidBundle,
               {"[aten.layer_norm.default]", "'normalized_shape'"});
  const std::string float8 = json_edited(fixture("mlp"), "_weights_config.json", "f8.pt2", [](json& j) {
    for (auto& [name, e] : j["config"].items()) e["tensor_meta"]["dtype"] = 29;  // FLOAT8E4M3FN
  });
  expect_error(import_pt2(float8), StatusCode::kUnsupported, {"dtype code 29 is not supported"});
}

TEST_F(ImportArchive, MalformedOptionalTensorArgumentsAreInvalidArchives) {
  struct Case {
    json arg;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{"as_optional_tensor", 5}}, "tensor argument has no field 'name'"},
      {{{"as_optional_tensor", json::object()}}, "tensor argument has no field 'name'"},
      {{{"as_optional_tensor", {{"as_tensor", {{"name", 3}}}}}}, "tensor name"},
      {{{"as_optional_tensor", {{"as_tensor", {{"name", "no_such_tensor"}}}}}}, "uses tensor 'no_such_tensor' before it is defined"},
      {{{"as_optional_tensor", json::array({1, 2})}}, "tensor argument has no field 'name'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.arg.dump());
    int edited_args = 0;
    const std::string p = json_edited(fixture("convnet", "model.core.pt2"), "models/model.json", "o.pt2", [&](json& j) {
      for (json& node : j["graph_module"]["graph"]["nodes"]) {
        if (node["target"].get<std::string>().find("convolution") == std::string::npos) continue;
        for (json& in : node["inputs"]) {
          if (in["name"] == "bias") {
            in["arg"] = c.arg;
            ++edited_args;
          }
        }
      }
    });
    ASSERT_GT(edited_args, 0);
    expect_error(import_pt2(p), StatusCode::kInvalidBundle, {c.message});
  }
}

TEST_F(ImportArchive, UnknownSchemaMajorVersionIsAnInvalidArchiveNamingIt) {
  for (auto [major, text] : {std::pair{999, "999.0"}, std::pair{7, "7.0"}, std::pair{9, "9.0"}}) {
    const std::string p = json_edited(fixture("mlp"), "models/model.json", "v.pt2", [&](json& j) { j["schema_version"] = {{"major", major}, {"minor", 0}}; });
    expect_error(import_pt2(p), StatusCode::kInvalidBundle, {std::string("archive schema version ") + text, "reads schema 8.x"});
  }
  const std::string p = json_edited(legacy_fixture("mlp"), "serialized_exported_program.json", "lv.pt2", [&](json& j) { j["schema_version"]["major"] = 999; });
  expect_error(import_pt2(p), StatusCode::kInvalidBundle, {"archive schema version 999.2"});
}

TEST_F(ImportArchive, AZipWithNeitherLayoutNamesBoth) {
  ASSERT_TRUE(write_zip(path("other.pt2"), {{"model/readme.txt", "hello"}}));
  expect_error(import_pt2(path("other.pt2")), StatusCode::kInvalidBundle, {"no models/*.json", "serialized_exported_program.json"});
}

// ---- files that are not archives ----------------------------------------------------------

TEST_F(ImportArchive, FifoDirectoryAndDevicesAreRejectedWithoutReading) {
  ASSERT_EQ(::mkfifo(path("fifo.pt2").c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  expect_error(import_pt2(path("fifo.pt2")), StatusCode::kInvalidBundle, {"is a FIFO"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  fs::create_directories(path("dir.pt2"));
  expect_error(import_pt2(path("dir.pt2")), StatusCode::kInvalidBundle, {"is a directory"});
  expect_error(import_pt2("/dev/zero"), StatusCode::kInvalidBundle, {"/dev/zero: is a character device, not a regular file"});
  expect_error(import_pt2(path("missing.pt2")), StatusCode::kInvalidBundle, {"cannot open", "missing.pt2"});
}

TEST_F(ImportArchive, OversizedMembersAreRejectedNamingTheMemberAndTheCap) {
  // 257 MiB of padding after the JSON: over the 256 MiB cap, before anything is allocated.
  auto entries = read_zip(fixture("mlp"));
  entries.at("model/models/model.json").append(257u << 20, ' ');
  ASSERT_TRUE(write_zip(path("padded.pt2"), entries, /*stored=*/true));
  entries.clear();
  expect_error(import_pt2(path("padded.pt2")), StatusCode::kInvalidBundle, {"model/models/model.json", "268435456 bytes allowed"});
  fs::remove(path("padded.pt2"));
}

TEST_F(ImportArchive, AMemberDeclaringMoreThanTheZipCanHoldIsRejectedBeforeAllocating) {
  // The central directory of a stored zip rewritten to declare 200 MB for the model JSON.
  auto entries = read_zip(fixture("mlp"));
  std::string bytes = zip_bytes(entries);
  const std::string name = "model/models/model.json";
  std::size_t at = std::string::npos;
  for (std::size_t p = bytes.find("PK\x01\x02"); p != std::string::npos; p = bytes.find("PK\x01\x02", p + 4)) {
    if (bytes.compare(p + 46, name.size(), name) == 0) at = p;
  }
  ASSERT_NE(at, std::string::npos);
  for (std::size_t field : {20u, 24u}) {  // compressed and uncompressed size
    const std::uint32_t size = 200u << 20;
    for (int i = 0; i < 4; ++i) bytes[at + field + static_cast<std::size_t>(i)] = static_cast<char>((size >> (8 * i)) & 0xff);
  }
  std::ofstream(path("liar.pt2"), std::ios::binary) << bytes;
  expect_error(import_pt2(path("liar.pt2")), StatusCode::kInvalidBundle, {name, "declares 209715200 bytes, more than its", "can expand to"});
}

// ---- range checks on weights (PT2 layout) ---------------------------------------------------

TEST_F(ImportArchive, WeightOffsetsSizesAndStridesAreRangeChecked) {
  struct Case {
    const char* field;
    json value;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"storage_offset", json{{"as_int", -1}}, "storage offset -1 is negative"},
      {"storage_offset", json{{"as_int", INT64_MAX}}, "overflow"},
      {"storage_offset", json{{"as_int", 1}}, "reaches element 8192"},
      {"storage_offset", json{{"as_int", std::int64_t{1} << 62}}, "reaches element 4611686018427396095"},
      {"sizes", json::array({json{{"as_int", 128}}, json{{"as_int", -64}}}), "size -64 of dim 1 is negative"},
      {"sizes", json::array({json{{"as_int", INT64_MAX}}, json{{"as_int", INT64_MAX}}}), "sizes overflow"},
      {"sizes", json::array({json{{"as_int", 129}}, json{{"as_int", 64}}}), "too few for its sizes/strides"},
      {"strides", json::array({json{{"as_int", 64}}, json{{"as_int", -1}}}), "stride -1 of dim 1 is negative"},
      {"strides", json::array({json{{"as_int", INT64_MAX}}, json{{"as_int", 1}}}), "overflow"},
      {"strides", json::array({json{{"as_int", 64}}}), "1 strides for 2 sizes"},
      {"dtype", json("seven"), "'dtype' is not an integer"},

      {"storage_offset", json{{"as_int", "x"}}, "'storage_offset' is not an integer"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.field) + "=" + c.value.dump());
    const std::string p = json_edited(fixture("mlp"), "model_weights_config.json", "w.pt2",
                                      [&](json& j) { j["config"]["fc1.weight"]["tensor_meta"][c.field] = c.value; });
    expect_error(import_pt2(p), StatusCode::kInvalidBundle, {"tensor 'fc1.weight'", c.message});
  }
  // Zero strides expand a weight beyond its storage: fine when small, an error when it would
  // make a tiny archive allocate gigabytes.
  auto expanded = [&](std::int64_t rows, std::int64_t cols) {
    return json_edited(fixture("mlp"), "model_weights_config.json", "x.pt2", [&](json& j) {
      auto& meta = j["config"]["fc1.weight"]["tensor_meta"];
      meta["sizes"] = json::array({json{{"as_int", rows}}, json{{"as_int", cols}}});
      meta["strides"] = json::array({json{{"as_int", 0}}, json{{"as_int", 0}}});
    });
  };
  EXPECT_TRUE(import_pt2(expanded(128, 64)).ok());
  expect_error(import_pt2(expanded(std::int64_t{1} << 14, std::int64_t{1} << 14)), StatusCode::kInvalidBundle,
               {"tensor 'fc1.weight'", "over a storage of 32768 bytes", "allowed for expanded views"});
  expect_error(import_pt2(expanded(std::int64_t{1} << 40, 64)), StatusCode::kInvalidBundle, {"tensor 'fc1.weight'", "allowed for one tensor"});
}

// ---- the legacy layout's pickles ------------------------------------------------------------

TEST_F(ImportArchive, LegacyStridedViewsOfSharedStoragesAreGatheredInCOrder) {
  // fc2.bias (10) is elements 2..11 of storage "s"; fc2.weight (10, 128) is the transpose
  // of a (128, 10) storage. Both must come out C-contiguous with the right values.
  const std::string bias(floats({9, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  std::string wt(128 * 10 * sizeof(float), '\0');
  for (int i = 0; i < 128; ++i) {
    for (int o = 0; o < 10; ++o) {
      const float v = static_cast<float>(o * 1000 + i);
      std::memcpy(wt.data() + (static_cast<std::size_t>(i) * 10 + static_cast<std::size_t>(o)) * sizeof(float), &v, sizeof v);
    }
  }
  std::string w1(128 * 64 * 4, '\0'), b1(128 * 4, '\0');
  const std::string pkl = pickle_state_dict({{"fc1.weight", "FloatStorage", "0", 128 * 64, 0, {128, 64}, {64, 1}},
                                             {"fc1.bias", "FloatStorage", "1", 128, 0, {128}, {1}},
                                             {"fc2.weight", "FloatStorage", "t", 1280, 0, {10, 128}, {1, 10}},
                                             {"fc2.bias", "FloatStorage", "s", 12, 2, {10}, {1}}});
  for (bool stored : {false, true}) {
    const std::string p = legacy_mlp_with_state_dict("strided.pt2", torch_save_zip(pkl, {{"0", w1}, {"1", b1}, {"t", wt}, {"s", bias}}), stored);
    auto ep = import_pt2(p);
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    for (const auto& c : ep->program().constants) {
      const float* v = reinterpret_cast<const float*>(c.data->data());
      if (c.name == "fc2.bias") {
        ASSERT_EQ(c.data->size(), 40u);
        for (int i = 0; i < 10; ++i) EXPECT_EQ(v[i], static_cast<float>(i));
      }
      if (c.name == "fc2.weight") {
        ASSERT_EQ(c.data->size(), 1280u * 4);
        for (int o = 0; o < 10; ++o) for (int i = 0; i < 128; ++i) ASSERT_EQ(v[o * 128 + i], static_cast<float>(o * 1000 + i));
      }
    }
  }
}

// Pickles written by Python's own pickler as torch.save writes them, protocols 2 and 4
// (FRAME, MEMOIZE, STACK_GLOBAL), parameters (_rebuild_parameter), a transposed view, a view
// at an offset: fuzz/make_archive_seeds.py, also the fuzzer's seeds.
TEST_F(ImportArchive, LegacyPicklesFromPythonsPicklerImportWithTheirValues) {
  for (const char* seed : {"torchsave_proto2", "torchsave_proto4"}) {
    SCOPED_TRACE(seed);
    std::ifstream in(fs::path(KILN_SOURCE_DIR) / "fuzz" / "seeds" / "archive_fuzzer" / seed, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 1u);
    auto ep = import_pt2(legacy_mlp_with_state_dict("python.pt2", bytes.substr(1), true));  // byte 0: the fuzzer's mode
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    int checked = 0;
    for (const auto& c : ep->program().constants) {
      const float* v = reinterpret_cast<const float*>(c.data->data());
      if (c.name == "fc1.weight") {
        ASSERT_EQ(c.shape, (std::vector<std::int64_t>{128, 64}));
        EXPECT_EQ(v[8191], 8191.0f / 8192);
        ++checked;
      } else if (c.name == "fc2.weight") {
        ASSERT_EQ(c.shape, (std::vector<std::int64_t>{10, 128}));
        for (int o = 0; o < 10; ++o) for (int i = 0; i < 128; ++i) ASSERT_EQ(v[o * 128 + i], static_cast<float>(o * 1000 + i));
        ++checked;
      } else if (c.name == "fc2.bias") {
        for (int i = 0; i < 10; ++i) EXPECT_EQ(v[i], static_cast<float>(i));
        ++checked;
      }
    }
    EXPECT_EQ(checked, 3);
  }
}

TEST_F(ImportArchive, LegacyPickleViewsAreRangeCheckedNamingTheTensor) {
  const std::string b(10 * 4, '\0');
  struct Case {
    TensorPickle bias;
    std::string storage_bytes;
    const char* message;
  };
  const std::vector<Case> cases = {
      {{"fc2.bias", "FloatStorage", "0", 10, -1, {10}, {1}}, b, "storage offset -1 is negative"},
      {{"fc2.bias", "FloatStorage", "0", 10, INT64_MAX, {10}, {1}}, b, "overflow"},
      {{"fc2.bias", "FloatStorage", "0", 10, 1, {10}, {1}}, b, "reaches element 10"},
      {{"fc2.bias", "FloatStorage", "0", 10, 0, {10}, {INT64_MAX}}, b, "overflow"},
      {{"fc2.bias", "FloatStorage", "0", 10, 0, {std::int64_t{1} << 40, std::int64_t{1} << 40}, {0, 0}}, b, "sizes overflow"},
      {{"fc2.bias", "FloatStorage", "0", 10, 0, {std::int64_t{1} << 30}, {0}}, b, "allowed for expanded views"},
      {{"fc2.bias", "FloatStorage", "0", 10, 0, {10}, {-1}}, b, "stride -1 of dim 0 is negative"},
      {{"fc2.bias", "FloatStorage", "0", 11, 0, {10}, {1}}, b, "40 bytes, too few for its 11 f32 elements"},
      {{"fc2.bias", "FloatStorage", "0", std::int64_t{1} << 62, 0, {10}, {1}}, b, "too few for its"},
      {{"fc2.bias", "FloatStorage", "0", -5, 0, {10}, {1}}, b, "the storage's size -5 is negative"},
      {{"fc2.bias", "FloatStorage", "missing", 10, 0, {10}, {1}}, b, "archive/data/missing' is missing"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    const std::string pkl = pickle_state_dict({c.bias});
    const std::string p = legacy_mlp_with_state_dict("bad.pt2", torch_save_zip(pkl, {{"0", c.storage_bytes}}));
    expect_error(import_pt2(p), StatusCode::kInvalidBundle, {"fc2.bias", c.message});
  }
  // A storage key is a member name inside the torch.save zip: never a path.
  const std::string pkl = pickle_state_dict({{"fc2.bias", "FloatStorage", "../0", 10, 0, {10}, {1}}});
  expect_error(import_pt2(legacy_mlp_with_state_dict("key.pt2", torch_save_zip(pkl, {{"0", b}}))), StatusCode::kInvalidBundle,
               {"storage key '../0' is not a plain name"});
}

TEST_F(ImportArchive, LegacyPickleGlobalsAndOpcodesOutsideTheAllowListAreRejectedNamingThem) {
  struct Case {
    std::string pickle;
    const char* message;
  };
  const std::string s = pickle_string("x");
  const std::vector<Case> cases = {
      {"\x80\x02" + pickle_global("os", "system") + "(" + pickle_string("touch /tmp/pwned") + "tR.", "global 'os.system' is not allowed"},
      {"\x80\x02" + pickle_global("builtins", "eval") + ".", "global 'builtins.eval' is not allowed"},
      {"\x80\x02" + pickle_global("torch", "FloatStorage") + ")R.", "global 'torch.FloatStorage' cannot be called"},
      {"\x80\x02" + pickle_global("collections", "OrderedDict") + "(" + s + "tR.", "OrderedDict is only allowed with no arguments"},
      {"\x80\x02(ios\nsystem\n.", "opcode 0x69 ('i', INST) at byte 3 is not allowed"},
      {"\x80\x02" + s + s + "\x93.", "global 'x.x' is not allowed"},
      {"\x80\x02}" + s + "\x82\x01s.", "opcode 0x82 (EXT1)"},
      {"\x80\x02" + s + "0.", "opcode 0x30 ('0', POP)"},
      {"\x80\x09}.", "protocol 9 is not supported"},
      {"\x80\x02]" + s + "a.", "holds a list, not a dict of tensors"},
      {"\x80\x02}" + s + "Ns.", "entry 'x' is None, not a tensor"},
      {"\x80\x02}", "ends without a STOP opcode"},
      {"\x80\x02}" + pickle_string("x") + ".", "leaves 2 values on the stack at STOP"},
      {"\x80\x02)Q."s, "a persistent id must be ('storage', type, key, location, numel)"},
      {"\x80\x02}(" + s + "(" + pickle_string("storage") + pickle_global("torch", "ComplexFloatStorage") + s + s + "K\x01tQu.",
       "storage type torch.ComplexFloatStorage has no Kiln dtype"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    const std::string p = legacy_mlp_with_state_dict("evil.pt2", torch_save_zip(c.pickle, {}));
    auto ep = import_pt2(p);
    const bool unsupported = std::string(c.message).find("no Kiln dtype") != std::string::npos;
    expect_error(ep, unsupported ? StatusCode::kUnsupported : StatusCode::kInvalidBundle, {"serialized_state_dict.pt", c.message});
  }
}

TEST_F(ImportArchive, LegacyPickleBombsEndInClearErrorsWithBoundedMemory) {
  struct Case {
    std::string pickle;
    const char* message;
  };
  std::string deep = "\x80\x02)";  // a tuple nested two million deep: no recursion anywhere
  for (int i = 0; i < 900'000; ++i) deep += "\x85";
  deep += ".";
  std::string marks = "\x80\x02" + std::string(2'000'000, '(') + ".";
  std::string objects = "\x80\x02]";
  for (int i = 0; i < 1'100'000; ++i) objects += "Na";
  objects += ".";
  std::string memo = "\x80\x02}r\xff\xff\xff\xffj\xff\xff\xff\xff";  // the largest memo index costs one entry
  memo += "0.";
  const std::vector<Case> cases = {
      {deep, "holds a tuple, not a dict of tensors"},
      {marks, "too many MARKs"},
      {objects, "builds more than 1048576 objects"},
      {"\x80\x02}h\x07.", "reads memo entry 7, which was never stored"},
      {memo, "opcode 0x30 ('0', POP)"},
      {"\x80\x02X\xff\xff\xff\xff.", "a string of 4294967295 bytes is too long"},
      {"\x80\x02\x8d\xff\xff\xff\xff\xff\xff\xff\xff.", "is too long"},
      {"\x80\x02X\x00\x01\x00\x00"s + "ab.", "truncated at byte 7"},
      {"\x80\x02\x8a\x09\x01\x02\x03\x04\x05\x06\x07\x08\x09.", "an integer of 9 bytes does not fit 64 bits"},
      {"\x80\x02t.", "uses a MARK that was never set"},
      {"\x80\x02R.", "pops an empty stack"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    const std::string p = legacy_mlp_with_state_dict("bomb.pt2", torch_save_zip(c.pickle, {}));
    expect_error(import_pt2(p), StatusCode::kInvalidBundle, {c.message});
  }
}

// Random byte damage to a real torch.save pickle: every import ends in a Status (ok or
// invalid), never a crash, an exception or an internal error.
TEST_F(ImportArchive, RandomlyDamagedLegacyPicklesNeverCrash) {
  auto outer = read_zip(legacy_fixture("mlp", "model.core.pt2"));
  auto inner = read_zip([&] {
    std::ofstream(path("state.zip"), std::ios::binary) << outer.at("serialized_state_dict.pt");
    return path("state.zip");
  }());
  std::string pkl_name;
  for (const auto& [n, d] : inner) if (n.size() >= 8 && n.compare(n.size() - 8, 8, "data.pkl") == 0) pkl_name = n;
  ASSERT_FALSE(pkl_name.empty());
  const std::string original = inner.at(pkl_name);
  std::mt19937 rng(99);
  int ok = 0;
  for (int trial = 0; trial < 150; ++trial) {
    std::string damaged = original;
    const int edits = 1 + trial % 4;
    for (int k = 0; k < edits; ++k) {
      const std::size_t at = std::uniform_int_distribution<std::size_t>(0, damaged.size() - 1)(rng);
      damaged[at] = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
    }
    inner[pkl_name] = damaged;
    auto ep = import_pt2(legacy_mlp_with_state_dict("damaged.pt2", zip_bytes(inner), trial % 2 == 0));
    if (ep.ok()) {
      ++ok;
      continue;
    }
    EXPECT_TRUE(ep.status().code() == StatusCode::kInvalidBundle || ep.status().code() == StatusCode::kUnsupported)
        << "trial " << trial << ": " << ep.status().message();
  }
  EXPECT_LT(ok, 150);
}

TEST_F(ImportArchive, LegacyTorchSaveZipsThatAreDamagedAreInvalid) {
  for (bool stored : {false, true}) {
    SCOPED_TRACE(stored ? "stored (read in place)" : "deflated (read into memory)");
    expect_error(import_pt2(legacy_mlp_with_state_dict("notzip.pt2", "not a zip", stored)), StatusCode::kInvalidBundle,
                 {"serialized_state_dict.pt' is not a readable zip"});
    expect_error(import_pt2(legacy_mlp_with_state_dict("nopkl.pt2", zip_bytes({{"archive/other", "x"}}), stored)),
                 StatusCode::kInvalidBundle, {"no data.pkl"});
    const std::string big = zip_bytes({{"archive/data.pkl", "\x80\x02}."}, {"archive/byteorder", "big"}});
    expect_error(import_pt2(legacy_mlp_with_state_dict("bigendian.pt2", big, stored)), StatusCode::kUnsupported, {"byte order 'big'"});
    // A torch.save zip cut short: its storages are no longer all there.
    auto entries = read_zip(legacy_fixture("mlp", "model.core.pt2"));
    std::string state = entries.at("serialized_state_dict.pt");
    expect_error(import_pt2(legacy_mlp_with_state_dict("cut.pt2", state.substr(0, state.size() / 2), stored)), StatusCode::kInvalidBundle,
                 {"serialized_state_dict.pt"});
  }
}

// ---- mutations are never dropped ----------------------------------------------------------

// Every OutputSpec kind of torch/_export/serde/schema.py: USER_OUTPUT and BUFFER_MUTATION
// are represented (outputs, state), every other kind is refused naming it.
TEST_F(ImportArchive, EveryOutputKindOfTheArchiveSchemaIsRepresentedOrRefusedNamingIt) {
  {
    auto ep = import_pt2(stateful_fixture("counter", "model.core.pt2"));  // 2 USER_OUTPUT, 2 BUFFER_MUTATION
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    EXPECT_EQ(ep->program().outputs.size(), 2u);
    ASSERT_EQ(ep->program().states.size(), 2u);
    EXPECT_EQ(ep->program().states[0].name, "total");
  }
  struct Case {
    json spec;
    std::string message;
  };
  auto tensor_arg = json{{"name", "relu"}};
  const std::vector<Case> cases = {
      {{{"buffer_mutation", {{"arg", tensor_arg}, {"buffer_name", "running"}}}}, "buffer 'running' is mutated by the graph (output 0, BUFFER_MUTATION) but is not a buffer input of the graph"},
      {{{"parameter_mutation", {{"arg", tensor_arg}, {"parameter_name", "fc1.weight"}}}}, "parameter 'fc1.weight' is mutated by the graph (output 0, PARAMETER_MUTATION): only buffers can be state"},
      {{{"user_input_mutation", {{"arg", tensor_arg}, {"user_input_name", "x"}}}}, "input 'x' is mutated by the graph (output 0, USER_INPUT_MUTATION): Kiln never writes into the caller's inputs"},
      {{{"gradient_to_parameter", {{"arg", tensor_arg}, {"parameter_name", "fc1.weight"}}}}, "output 0 is the gradient of parameter 'fc1.weight' (GRADIENT_TO_PARAMETER)"},
      {{{"gradient_to_user_input", {{"arg", tensor_arg}, {"user_input_name", "x"}}}}, "output 0 is the gradient of input 'x' (GRADIENT_TO_USER_INPUT)"},
      {{{"loss_output", {{"arg", tensor_arg}}}}, "output 0 is a loss (LOSS_OUTPUT)"},
      {{{"token", {{"arg", {{"name", "token"}}}}}}, "output 0 is an effect token (TOKEN)"},
      {{{"something_new", {{"arg", tensor_arg}}}}, "output 0 has the output kind 'something_new'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.spec.dump());
    const std::string p = json_edited(fixture("mlp", "model.core.pt2"), "models/model.json", "out.pt2", [&](json& j) {
      auto& specs = j["graph_module"]["signature"]["output_specs"];
      specs.insert(specs.begin(), c.spec);
      auto& outs = j["graph_module"]["graph"]["outputs"];
      outs.insert(outs.begin(), json{{"as_tensor", {{"name", "relu"}}}});
    });
    // A BUFFER_MUTATION is imported as state: one naming no buffer input is a broken archive.
    expect_error(import_pt2(p), c.spec.contains("buffer_mutation") ? StatusCode::kInvalidBundle : StatusCode::kUnsupported, {c.message});
  }
}

TEST_F(ImportArchive, InPlaceUpdatesOfUserInputsAndParametersAreRejectedNamingThem) {
  // x.add_(1) in the training IR: a user input mutated in place.
  const std::string on_input = json_edited(fixture("mlp"), "models/model.json", "inplace.pt2", [](json& j) {
    auto& nodes = j["graph_module"]["graph"]["nodes"];
    json node = {{"name", "add_"}, {"target", "torch.ops.aten.add_.Tensor"},
                 {"inputs", json::array({json{{"name", "self"}, {"arg", {{"as_tensor", {{"name", "x"}}}}}, {"kind", 1}},
                                         json{{"name", "other"}, {"arg", {{"as_int", 1}}}, {"kind", 1}}})},
                 {"outputs", json::array({json{{"as_tensor", {{"name", "add_"}}}}})},
                 {"metadata", json::object()}};
    nodes.insert(nodes.begin(), node);
  });
  expect_error(import_pt2(on_input), StatusCode::kUnsupported,
               {"input 'x' is mutated in place by aten.add_.Tensor (node 'add_'): Kiln never writes into the caller's inputs; update a clone of the input instead"});
  // A parameter mutated through a view: t = fc1.weight.t(); t.mul_(2).
  const std::string on_view_of_param = json_edited(fixture("mlp"), "models/model.json", "viewparam.pt2", [](json& j) {
    auto& nodes = j["graph_module"]["graph"]["nodes"];
    json view = {{"name", "t"}, {"target", "torch.ops.aten.t.default"},
                 {"inputs", json::array({json{{"name", "self"}, {"arg", {{"as_tensor", {{"name", "p_fc1_weight"}}}}}}})},
                 {"outputs", json::array({json{{"as_tensor", {{"name", "t"}}}}})}};
    json mul = {{"name", "mul_"}, {"target", "torch.ops.aten.mul_.Tensor"},
                {"inputs", json::array({json{{"name", "self"}, {"arg", {{"as_tensor", {{"name", "t"}}}}}},
                                        json{{"name", "other"}, {"arg", {{"as_int", 2}}}}})},
                {"outputs", json::array({json{{"as_tensor", {{"name", "mul_"}}}}})}};
    nodes.insert(nodes.begin(), mul);
    nodes.insert(nodes.begin(), view);
  });
  expect_error(import_pt2(on_view_of_param), StatusCode::kUnsupported,
               {"parameter 'fc1.weight' is mutated in place by aten.mul_.Tensor (node 'mul_'): only buffers can be state; register it as a buffer"});
}

}  // namespace
}  // namespace kiln
