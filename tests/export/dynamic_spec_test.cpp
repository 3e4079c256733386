// The dynamic-shape spec end to end (SEMANTICS.md; issue 19): specializations together with
// unbacked sizes, related AUTO / DYNAMIC dims, op requirements on strict dims, and the
// source line of a narrowed range in the runtime's rejection. Programs are exported,
// saved, opened, loaded and run against eager execution of the same model code.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "kiln/export/export.h"
#include "kiln/export/guards.h"
#include "kiln/export/ops.h"
#include "kiln/export/symbolic/print.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

std::string text(const ExportedProgram& ep, sym::Expr e) { return sym::to_string(e, &ep.program().env); }

HostValue host(const Tensor& t) {
  HostTensor h;
  h.dtype = t.dtype();
  h.shape = t.concrete_shape();
  h.data = t.bytes();
  return HostValue::of(std::move(h));
}

Tensor floats(std::vector<std::int64_t> shape, std::vector<float> v) { return Tensor::from_floats(std::move(shape), v); }

// Rows 0, 2, 4, ... are zero: nonzero/relu results depend on the data.
Tensor ramp(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i % 2 == 0 ? 0.0f : static_cast<float>(i) - 2.5f;
  return floats({n}, v);
}

void expect_equal(const HostValue& got, const Tensor& want) {
  ASSERT_FALSE(got.is_int);
  ASSERT_EQ(got.tensor.shape, want.concrete_shape());
  ASSERT_EQ(got.tensor.dtype, want.dtype());
  if (want.dtype() != DType::kF32) {
    EXPECT_EQ(got.tensor.data, want.bytes());
    return;
  }
  const auto w = want.to_vector<float>();
  std::vector<float> g(w.size());
  std::memcpy(g.data(), got.tensor.data.data(), g.size() * 4);
  for (std::size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(g[i], w[i], 1e-5f + 1e-4f * std::fabs(w[i])) << "element " << i;
}

// Saves `ep`, opens the file (verifying it) and loads it on the CPU.
std::shared_ptr<const Program> save_and_load(const ExportedProgram& ep, const std::string& name, const SaveOptions& options = {}) {
  const std::string path = (std::filesystem::path(::testing::TempDir()) / (name + ".kiln")).string();
  const Status saved = ep.save(path, options);
  EXPECT_TRUE(saved.ok()) << saved.message();
  auto bundle = Bundle::open(path);
  EXPECT_TRUE(bundle.ok()) << bundle.status().message();
  if (!bundle.ok()) return nullptr;
  auto program = Program::load(std::move(bundle).value());
  EXPECT_TRUE(program.ok()) << program.status().message();
  return program.ok() ? *program : nullptr;
}

// ---- 1. specializations with unbacked sizes ---------------------------------------------

TEST(SpecializationWithUnbackedSize, NonzeroExportsAndDispatches) {
  Dim s("s", 1, 256);
  s.specialize_on({"s % 8 == 0"});
  auto model = [](Tensor x) { return nonzero(relu(x)); };
  auto ep = export_program(model, {input("x", Tensor::randn({6}), {s})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ASSERT_EQ(ep->program().specializations.size(), 1u);
  // The variant keeps the unbacked size's asserts and binding.
  const ir::Graph& variant = ep->program().graphs[static_cast<std::size_t>(ep->program().specializations[0].graph)];
  EXPECT_EQ(variant.bindings.size(), 1u);
  EXPECT_EQ(variant.asserts.size(), ep->program().graphs[0].asserts.size()) << ep->print();
  auto program = save_and_load(*ep, "spec_nonzero");
  ASSERT_NE(program, nullptr);
  Session session(*program);
  for (std::int64_t n : {8, 6, 16, 5, 256, 1}) {
    const Tensor x = ramp(n);
    auto r = session.run(std::vector<HostValue>{host(x)});
    ASSERT_TRUE(r.ok()) << "size " << n << ": " << r.status().message();
    EXPECT_EQ(r->variant, n % 8 == 0 ? "s % 8 == 0" : "generic") << "size " << n;
    expect_equal(r->outputs[0], model(x));
  }
}

TEST(SpecializationWithUnbackedSize, ItemWithChecksExportsAndDispatches) {
  Dim s("s", 2, 64);
  s.specialize_on({"s == 4", "s % 8 == 0"});
  auto model = [](Tensor x, Tensor k) {
    SymInt n = k.item();
    check(n >= 1);
    check(n <= x.size(0));
    return slice(x, 0, 0, n) * 2.0;
  };
  auto ep = export_program(model, {input("x", Tensor::randn({6}), {s}), input("k", Tensor::from_ints({}, std::vector<std::int64_t>{3}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = save_and_load(*ep, "spec_item");
  ASSERT_NE(program, nullptr);
  Session session(*program);
  const struct {
    std::int64_t size, n;
    const char* variant;
  } cases[] = {{4, 2, "s == 4"}, {6, 6, "generic"}, {16, 9, "s % 8 == 0"}, {8, 1, "s % 8 == 0"}, {5, 5, "generic"}};
  for (const auto& c : cases) {
    const Tensor x = ramp(c.size), k = Tensor::from_ints({}, std::vector<std::int64_t>{c.n});
    auto r = session.run(std::vector<HostValue>{host(x), host(k)});
    ASSERT_TRUE(r.ok()) << "size " << c.size << ": " << r.status().message();
    EXPECT_EQ(r->variant, c.variant) << "size " << c.size;
    expect_equal(r->outputs[0], model(x, k));
  }
  // The checks still hold in the variants: n > s is rejected under `s == 4`.
  auto r = session.run(std::vector<HostValue>{host(ramp(4)), host(Tensor::from_ints({}, std::vector<std::int64_t>{5}))});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("runtime assertion failed: s0 >= u0"), std::string::npos) << r.status().message();
}


TEST(SpecializationWithUnbackedSize, CondWithDifferingOutputSizesDispatches) {
  Dim s("s", 2, 64);
  s.specialize_on({"s == 4"});
  // The branches return s0 and 2 rows: the cond binds a fresh unbacked size.
  auto model = [](Tensor x) {
    return cond(gt(sum(x), 0.0), [](Tensor v) { return sin(v); }, [](Tensor v) { return cos(slice(v, 0, 0, 2)); }, {x});
  };
  auto ep = export_program(model, {input("x", Tensor::randn({6}), {s})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = save_and_load(*ep, "spec_cond");
  ASSERT_NE(program, nullptr);
  Session session(*program);
  for (std::int64_t n : {4, 6}) {
    for (float sign : {1.0f, -1.0f}) {
      std::vector<float> v(static_cast<std::size_t>(n), sign);
      const Tensor x = floats({n}, v);
      auto r = session.run(std::vector<HostValue>{host(x)});
      ASSERT_TRUE(r.ok()) << "size " << n << ": " << r.status().message();
      EXPECT_EQ(r->variant, n == 4 ? "s == 4" : "generic");
      expect_equal(r->outputs[0], model(x));
    }
  }
}

// ---- 2. related AUTO / DYNAMIC dims -----------------------------------------------------

// The symbols an assert or a shape of the entry graph mentions that no input binds.
std::vector<std::string> unbound_symbols(const ExportedProgram& ep) {
  const ir::Program& p = ep.program();
  std::set<int> bound;
  for (const ir::InputSpec& in : p.inputs) {
    for (const sym::Expr& d : in.shape) for (int s : sym::free_symbols(d)) bound.insert(s);
    if (in.is_int && in.dynamism != ir::Dynamism::kStatic) for (int s : sym::free_symbols(in.expr)) bound.insert(s);
  }
  std::set<std::string> out;
  auto note = [&](sym::Expr e) {
    for (int s : sym::free_symbols(e)) {
      if (p.env.symbol(s).kind == sym::SymbolKind::Backed && !bound.count(s)) out.insert(p.env.symbol(s).name);
    }
  };
  for (const ir::Graph& g : p.graphs) {
    for (const ir::RuntimeAssert& a : g.asserts) note(a.expr);
    for (const ir::Value& v : g.values) {
      for (const sym::Expr& d : v.shape) note(d);
      if (v.kind == ir::ValueKind::kSymInt) note(v.expr);
    }
  }
  return {out.begin(), out.end()};
}

TEST(RelatedDims, AutoDimsAreUnifiedIntoOneSymbol) {
  auto model = [](Tensor x, Tensor y) { return x + y; };
  auto ep = export_program(model, {input("x", Tensor::randn({4}), {Dim::AUTO}), input("y", Tensor::randn({4}), {Dim::AUTO})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(text(*ep, ep->program().inputs[0].shape[0]), "s0");
  EXPECT_EQ(text(*ep, ep->program().inputs[1].shape[0]), "s0");
  EXPECT_EQ(unbound_symbols(*ep), std::vector<std::string>{}) << ep->print();
  auto program = save_and_load(*ep, "related_auto");
  ASSERT_NE(program, nullptr);
  Session session(*program);
  for (std::int64_t n : {4, 7, 2}) {
    const Tensor x = ramp(n), y = Tensor::randn({n}, 3);
    auto r = session.run(std::vector<HostValue>{host(x), host(y)});
    ASSERT_TRUE(r.ok()) << "size " << n << ": " << r.status().message();
    expect_equal(r->outputs[0], model(x, y));
  }
  auto r = session.run(std::vector<HostValue>{host(ramp(7)), host(ramp(5))});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(r.status().message().find("input y: dim 0 is 5, expected s0 = 7"), std::string::npos) << r.status().message();
}

TEST(RelatedDims, CheckRelatingAutoDimsAndAnAutoIntRun) {
  auto model = [](Tensor x, Tensor y, SymInt n) {
    check(x.size(0) == y.size(0) + 1);
    if (n == x.size(0)) return x * 2.0;
    return x;
  };
  auto ep = export_program(model, {input("x", Tensor::randn({5}), {Dim::AUTO}), input("y", Tensor::randn({4}), {Dim::AUTO}),
                                   int_input("n", 5, Dim::AUTO)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(unbound_symbols(*ep), std::vector<std::string>{}) << ep->print();
  auto program = save_and_load(*ep, "related_check");
  ASSERT_NE(program, nullptr);
  Session session(*program);
  const Tensor x = ramp(9), y = ramp(8);
  auto r = session.run(std::vector<HostValue>{host(x), host(y), HostValue::integer(9)});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_equal(r->outputs[0], model(x, y, SymInt(9)));
  // The int must equal x.size(0): the guard's assert checks it.
  r = session.run(std::vector<HostValue>{host(x), host(y), HostValue::integer(4)});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("runtime assertion failed"), std::string::npos) << r.status().message();
  // y must be one shorter than x.
  r = session.run(std::vector<HostValue>{host(x), host(ramp(9)), HostValue::integer(9)});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("input "), std::string::npos) << r.status().message();
}

TEST(RelatedDims, DynamicDimsReportTheEqualityWithTheFix) {
  const int line = __LINE__ + 1;
  auto model = [](Tensor x, Tensor y) { return x + y; };
  auto ep = export_program(model, {input("x", Tensor::randn({4}), {Dim::DYNAMIC}), input("y", Tensor::randn({4}), {Dim::DYNAMIC})});
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kExportError);
  const std::string m = ep.status().message();
  EXPECT_NE(m.find("constraint violation: the values of x.size()[0] (s0) and y.size()[0] (s1) must always be equal (s0 == s1)"),
            std::string::npos) << m;
  EXPECT_NE(m.find("Suggested fix: d = Dim(\"d\"); use d for x.size()[0] and y.size()[0], or Dim::AUTO"), std::string::npos) << m;
  EXPECT_NE(m.find("[guard at dynamic_spec_test.cpp:" + std::to_string(line) + "]"), std::string::npos) << m;
  // One DYNAMIC dim related to an AUTO one is reported too: only AUTO dims take relations silently.
  auto mixed = export_program(model, {input("x", Tensor::randn({4}), {Dim::AUTO}), input("y", Tensor::randn({4}), {Dim::DYNAMIC})});
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("must always be equal"), std::string::npos) << mixed.status().message();
}

TEST(RelatedDims, DynamicDimsInADerivedRelationSuggestTheDerivedDim) {
  auto ep = export_program([](Tensor x, Tensor y) { return cat({x, x}, 0) + y; },
                           {input("x", Tensor::randn({3}), {Dim::DYNAMIC}), input("y", Tensor::randn({6}), {Dim::DYNAMIC})});
  ASSERT_FALSE(ep.ok());
  const std::string m = ep.status().message();
  EXPECT_NE(m.find("must always be related by s1 == 2*s0"), std::string::npos) << m;
  EXPECT_NE(m.find("Suggested fix: d = Dim(\"d\"); use d for x.size()[0] and 2*d for y.size()[0], or Dim::AUTO"), std::string::npos) << m;
}

// ---- 3. op requirements on strict dims -------------------------------------------------

TEST(OpRequirement, DivisibilityOfANamedDimIsAViolation) {
  const int line = __LINE__ + 1;
  auto model = [](Tensor x) { return x.reshape({-1, 32}); };
  Dim h("h", 32, 1024);
  auto ep = export_program(model, {input("x", Tensor::randn({64}), {h})});
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kExportError);
  const std::string m = ep.status().message();
  EXPECT_NE(m.find("constraint violation: the code requires s0 % 32 == 0 for Dim h (x.size()[0] = s0)"), std::string::npos) << m;
  EXPECT_NE(m.find("Suggested fix: declare it as a multiple: _h = Dim(\"_h\"); h = 32 * _h"), std::string::npos) << m;
  EXPECT_NE(m.find("[guard at dynamic_spec_test.cpp:" + std::to_string(line) + "]"), std::string::npos) << m;
  // The declared multiple exports, with no assert.
  Dim k("_h", 1, 32);
  auto fixed = export_program(model, {input("x", Tensor::randn({64}), {32 * k})});
  ASSERT_TRUE(fixed.ok()) << fixed.status().message();
  EXPECT_TRUE(fixed->program().graphs[0].asserts.empty()) << fixed->print();
}

TEST(OpRequirement, DivisibilityOfADynamicDimIsAModuloAssert) {
  auto model = [](Tensor x) { return x.reshape({-1, 32}); };
  auto ep = export_program(model, {input("x", Tensor::randn({64}), {Dim::DYNAMIC})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = ep->program().graphs[0];
  ASSERT_EQ(g.asserts.size(), 1u) << ep->print();
  EXPECT_EQ(g.asserts[0].message, "s0 % 32 == 0");
  auto program = save_and_load(*ep, "reshape_dynamic");
  ASSERT_NE(program, nullptr);
  Session session(*program);
  const Tensor x = Tensor::randn({96}, 5);
  auto r = session.run(std::vector<HostValue>{host(x)});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_equal(r->outputs[0], model(x));
  r = session.run(std::vector<HostValue>{host(Tensor::randn({40}))});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("runtime assertion failed: s0 % 32 == 0"), std::string::npos) << r.status().message();
}

// ---- 4. where a range was narrowed -----------------------------------------------------

TEST(RangeOrigin, RejectionNamesTheGuardThatNarrowedTheRange) {
  const int line = __LINE__ + 2;
  auto model = [](Tensor x) {
    if (x.size(0) > 3) return relu(x);
    return x;
  };
  auto ep = export_program(model, {input("x", Tensor::randn({8}), {Dim::AUTO})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = save_and_load(*ep, "range_guard");
  ASSERT_NE(program, nullptr);
  const fb::Symbol* s0 = program->bundle().program().symbols()->Get(0);
  EXPECT_EQ(debug_location(program->bundle().program(), s0->debug()).file_line, "dynamic_spec_test.cpp:" + std::to_string(line));
  Session session(*program);
  auto r = session.run(std::vector<HostValue>{host(ramp(3))});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(r.status().message(), "input x.size(0) = 3 (s0) is outside the range [4, inf] (narrowed at dynamic_spec_test.cpp:" +
                                      std::to_string(line) + ")");
  // Without debug info the message has no location.
  auto stripped = save_and_load(*ep, "range_guard_stripped", {.strip_debug = true});
  ASSERT_NE(stripped, nullptr);
  Session plain(*stripped);
  r = plain.run(std::vector<HostValue>{host(ramp(3))});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "input x.size(0) = 3 (s0) is outside the range [4, inf]");
}

TEST(RangeOrigin, RejectionNamesTheCheckThatNarrowedAnIntInput) {
  const int line = __LINE__ + 2;
  auto model = [](Tensor x, SymInt n) {
    check(n >= 1);
    return x * n;
  };
  auto ep = export_program(model, {input("x", Tensor::randn({3})), int_input("n", 2, Dim::DYNAMIC)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = save_and_load(*ep, "range_check");
  ASSERT_NE(program, nullptr);
  Session session(*program);
  auto r = session.run(std::vector<HostValue>{host(ramp(3)), HostValue::integer(0)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "input n = 0 (n, s0) is outside the range [1, inf] (narrowed at dynamic_spec_test.cpp:" +
                                      std::to_string(line) + ")");
  r = session.run(std::vector<HostValue>{host(ramp(3)), HostValue::integer(4)});
  ASSERT_TRUE(r.ok()) << r.status().message();
}

}  // namespace
}  // namespace kiln
