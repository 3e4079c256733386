// `kiln inspect --dot`: Graphviz DOT of a bundle. Checked structurally (balanced braces,
// every edge endpoint declared, a cluster per graph, dashed edges from the cond node into
// its branch clusters, labels with op, symbolic shape and source line) on the format
// sample, which has a cond with two branch subgraphs and a specialization, and on a traced
// model with a while_loop and a compile region; and, when Graphviz is installed, rendered
// with `dot`.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "kiln/export/export.h"
#include "kiln/export/ops.h"
#include "cli_testutil.h"

namespace {

namespace fs = std::filesystem;

using CmdResult = kiln::cli_test::CommandResult;

CmdResult shell(const std::string& cmd) {
  return kiln::cli_test::shell(cmd);
}

CmdResult kiln(const std::string& args) { return shell(std::string(KILN_BIN) + " " + args + " 2>/dev/null"); }

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// What the test needs of a DOT text: its statements, parsed with quoting respected.
struct Dot {
  int max_depth = 0;
  bool balanced = true;
  std::set<std::string> nodes;                            // declared node ids
  std::vector<std::pair<std::string, std::string>> edges;  // a -> b
  std::vector<std::string> edge_attrs;                    // the [...] of each edge
  std::set<std::string> clusters;
  std::map<std::string, std::string> labels;              // node id -> label (unescaped \n kept)
};

Dot parse_dot(const std::string& text) {
  Dot d;
  int depth = 0;
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '\\') ++i;
      else if (c == '"') quoted = false;
      continue;
    }
    if (c == '"') quoted = true;
    else if (c == '{') d.max_depth = std::max(d.max_depth, ++depth);
    else if (c == '}' && --depth < 0) d.balanced = false;
  }
  if (depth != 0 || quoted) d.balanced = false;
  static const std::regex node_re(R"re(^\s*(\w+) \[(.*)\];$)re");
  static const std::regex edge_re(R"re(^\s*(\w+) -> (\w+)( \[(.*)\])?;$)re");
  static const std::regex cluster_re(R"re(^\s*subgraph (cluster_\w+) \{$)re");
  static const std::regex label_re(R"re(label="((?:[^"\\]|\\.)*)")re");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, edge_re)) {
      d.edges.emplace_back(m[1], m[2]);
      d.edge_attrs.push_back(m[4]);
    } else if (std::regex_match(line, m, node_re) && m[1] != "graph" && m[1] != "node" && m[1] != "edge") {
      d.nodes.insert(m[1]);
      const std::string attrs = m[2];
      std::smatch l;
      if (std::regex_search(attrs, l, label_re)) d.labels[m[1]] = l[1];
    } else if (std::regex_match(line, m, cluster_re)) {
      d.clusters.insert(m[1]);
    }
  }
  return d;
}

class InspectDot : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("kiln_dot_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    ASSERT_EQ(std::system((std::string(KILN_MAKE_SAMPLE) + " " + (dir_ / "s.kiln").string()).c_str()), 0);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string path(const char* name) { return (dir_ / name).string(); }
  static fs::path dir_;
};
fs::path InspectDot::dir_;

TEST_F(InspectDot, IsWellFormedWithEveryEdgeEndpointDeclared) {
  const CmdResult r = kiln("inspect " + path("s.kiln") + " --dot");
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_EQ(r.out.rfind("digraph \"", 0), 0u) << r.out;
  const Dot d = parse_dot(r.out);
  EXPECT_TRUE(d.balanced) << r.out;
  EXPECT_EQ(d.max_depth, 2);  // the digraph and its clusters
  ASSERT_FALSE(d.edges.empty());
  for (const auto& [a, b] : d.edges) {
    EXPECT_TRUE(d.nodes.count(a)) << "undeclared edge source " << a;
    EXPECT_TRUE(d.nodes.count(b)) << "undeclared edge target " << b;
  }
}

TEST_F(InspectDot, ClusterPerGraphAndEdgesFromTheCondToItsBranches) {
  const CmdResult r = kiln("inspect " + path("s.kiln") + " --dot");
  ASSERT_EQ(r.code, 0) << r.out;
  const Dot d = parse_dot(r.out);
  // The format sample: graph 0 main, graphs 1 and 2 the cond's branches, graph 3 the
  // specialization `batch % 16 == 0`.
  EXPECT_EQ(d.clusters, (std::set<std::string>{"cluster_g0", "cluster_g1", "cluster_g2", "cluster_g3"}));
  std::string cond_node;
  for (const auto& [id, label] : d.labels) {
    if (id.rfind("g0_n", 0) == 0 && label.rfind("cond\\n", 0) == 0) cond_node = id;
  }
  ASSERT_FALSE(cond_node.empty()) << r.out;
  std::set<std::string> called;
  for (std::size_t e = 0; e < d.edges.size(); ++e) {
    if (d.edges[e].first != cond_node) continue;
    std::smatch m;
    if (std::regex_search(d.edge_attrs[e], m, std::regex("lhead=(cluster_g\\d+)"))) {
      called.insert(m[1]);
      EXPECT_NE(d.edge_attrs[e].find("style=dashed"), std::string::npos);
      EXPECT_EQ(d.edges[e].second.rfind(std::string(m[1]).substr(8) + "_", 0), 0u) << "the edge must end inside its cluster";
    }
  }
  EXPECT_EQ(called, (std::set<std::string>{"cluster_g1", "cluster_g2"}));
  EXPECT_NE(r.out.find("specialization batch % 16 == 0: s0 % 16 == 0"), std::string::npos) << r.out;
}

TEST_F(InspectDot, LabelsHaveOpSymbolicShapeAndSourceLine) {
  const CmdResult r = kiln("inspect " + path("s.kiln") + " --dot");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* needle : {R"x(label="linear\nf32[s0, 64]\nmodel.cpp:41 (fc)")x",  // a node
                             R"x(label="input x\nf32[s0, 32]")x",                      // a graph input
                             R"x(label="fc.weight\nf32[64, 32]")x",                    // a constant
                             R"x(label="nonzero\ni64[u0, 2]\nmodel.cpp:43\nassert u0 <= 64*s0")x",  // unbacked
                             R"x(label="true (graph 1)")x", R"x(label="false (graph 2)")x"}) {
    EXPECT_NE(r.out.find(needle), std::string::npos) << "missing: " << needle << "\n" << r.out;
  }
}

TEST_F(InspectDot, WritesAFileAndAcceptsTheBundleAfterDot) {
  const std::string out = path("s.dot");
  ASSERT_EQ(kiln("inspect " + path("s.kiln") + " --dot " + out).code, 0);
  const std::string to_stdout = kiln("inspect " + path("s.kiln") + " --dot").out;
  EXPECT_EQ(read_file(out), to_stdout);
  // `--dot BUNDLE` with no other path: the path is the bundle, the DOT goes to stdout.
  EXPECT_EQ(kiln("inspect --dot " + path("s.kiln")).out, to_stdout);
  EXPECT_EQ(kiln("inspect --dot=- " + path("s.kiln")).out, to_stdout);
}

TEST_F(InspectDot, InvalidBundleExitsTwoAndWritesNothing) {
  const std::string bad = path("bad.kiln");
  std::ofstream(bad) << "not a bundle";
  const std::string out = path("bad.dot");
  EXPECT_EQ(kiln("inspect " + bad + " --dot " + out).code, 2);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(kiln("inspect " + path("s.kiln") + " --dot " + path("no/such/dir/x.dot")).code, 8);
  EXPECT_EQ(kiln("inspect --dot").code, 1);
}

TEST_F(InspectDot, WhileLoopAndCompileRegionCallees) {
  using namespace kiln;
  auto ep = export_program(
      [](Tensor x, SymInt n) {
        CompileRegion twice("twice", [](Tensor h) { return h * 2.0; });
        auto [i, y] = while_loop([n](SymInt i, Tensor) { return i < n; },
                                 [](SymInt i, Tensor v) { return std::make_tuple(i + 1, v + 1.0); }, {SymInt(0), twice(x)});
        return std::make_tuple(twice(y), i);
      },
      {input("x", Tensor::randn({2, 3}), {Dim("batch", 1, 8)}), int_input("n", 3, Dim::DYNAMIC)}, {.name = "loop"});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ASSERT_TRUE(ep->save(path("loop.kiln")).ok());
  const CmdResult r = kiln("inspect " + path("loop.kiln") + " --dot");
  ASSERT_EQ(r.code, 0) << r.out;
  const Dot d = parse_dot(r.out);
  EXPECT_TRUE(d.balanced);
  for (const auto& [a, b] : d.edges) EXPECT_TRUE(d.nodes.count(a) && d.nodes.count(b)) << a << " -> " << b;
  // The entry graph, the region's subgraph (called twice) and the loop's cond and body.
  EXPECT_EQ(d.clusters.size(), 4u) << r.out;
  int region_calls = 0;
  for (std::size_t e = 0; e < d.edges.size(); ++e) {
    if (d.edge_attrs[e].find("label=\"calls (graph") != std::string::npos) ++region_calls;
  }
  EXPECT_EQ(region_calls, 2) << r.out;
  for (const char* needle : {"label=\"cond (graph", "label=\"body (graph", "label=\"while_loop\\n", "label=\"invoke_subgraph\\nf32[s0, 3]",
                             "label=\"input n\\nSym(s1)\""}) {
    EXPECT_NE(r.out.find(needle), std::string::npos) << "missing: " << needle << "\n" << r.out;
  }
}

TEST_F(InspectDot, GraphvizRendersIt) {
  if (shell("command -v dot >/dev/null 2>&1").code != 0) GTEST_SKIP() << "Graphviz (dot) is not installed";
  const std::string dot_file = path("render.dot"), svg = path("render.svg");
  ASSERT_EQ(kiln("inspect " + path("s.kiln") + " --dot " + dot_file).code, 0);
  const CmdResult r = shell("dot -Tsvg " + dot_file + " -o " + svg + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "") << "dot warned";
  const std::string text = read_file(svg);
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("cluster_g1"), std::string::npos);
}

}  // namespace
