#include "kiln/export/testing/format_sample.h"

#include <cstring>

namespace kiln::testing {
namespace {

using fb::ExprOp;
using Tok = fb::ExprToken;

template <typename T>
std::vector<std::uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<std::uint8_t> out(v.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::unique_ptr<fb::ValueT> tensor_value(const std::string& name, fb::DType dtype, std::vector<std::uint32_t> shape) {
  auto v = std::make_unique<fb::ValueT>();
  v->kind = fb::ValueKind::Tensor;
  v->dtype = dtype;
  v->shape = std::move(shape);
  v->name = name;
  return v;
}

std::unique_ptr<fb::ValueT> sym_value(const std::string& name, fb::ValueKind kind, std::uint32_t expr) {
  auto v = std::make_unique<fb::ValueT>();
  v->kind = kind;
  v->expr = expr;
  v->name = name;
  return v;
}

std::unique_ptr<fb::AttrT> attr(fb::AttrKind kind) {
  auto a = std::make_unique<fb::AttrT>();
  a->kind = kind;
  return a;
}

std::unique_ptr<fb::NodeT> node(std::uint32_t op, std::vector<std::uint32_t> in, std::vector<std::uint32_t> out, std::uint32_t debug) {
  auto n = std::make_unique<fb::NodeT>();
  n->op = op;
  n->inputs = std::move(in);
  n->outputs = std::move(out);
  n->debug = debug;
  return n;
}

// A branch of the cond: y -> op(y).
std::unique_ptr<fb::GraphT> branch(const std::string& name, std::uint32_t op, std::uint32_t s0, std::uint32_t c64) {
  auto g = std::make_unique<fb::GraphT>();
  g->name = name;
  g->values.push_back(tensor_value("y", fb::DType::f32, {s0, c64}));
  g->values.push_back(tensor_value("r", fb::DType::f32, {s0, c64}));
  g->inputs = {0};
  g->outputs = {1};
  g->nodes.push_back(node(op, {0}, {1}, 0));
  return g;
}

}  // namespace

std::unique_ptr<FormatSample> make_format_sample(const FormatSampleOptions& options) {
  auto sample = std::make_unique<FormatSample>();
  BundleWriteOptions wo;
  wo.compression = options.compression;
  sample->writer = std::make_unique<BundleWriter>(wo);
  fb::ProgramT& p = sample->program;
  p.name = "format_sample";
  p.producer = "kiln format sample";
  p.op_names = {"linear", "relu", "nonzero", "cond", "sin", "cos", "reshape", "full"};
  enum { kLinear, kRelu, kNonzero, kCond, kSin, kCos, kReshape, kFull };

  auto add_symbol = [&](const char* name, fb::SymbolKind kind, std::int64_t lo, std::int64_t hi, std::int64_t hint, const char* user) {
    auto s = std::make_unique<fb::SymbolT>();
    s->name = name; s->kind = kind; s->min = lo; s->max = hi; s->hint = hint;
    s->has_hint = kind == fb::SymbolKind::Backed; s->user_name = user;
    p.symbols.push_back(std::move(s));
    return static_cast<std::uint32_t>(p.symbols.size() - 1);
  };
  const auto sym_b = add_symbol("s0", fb::SymbolKind::Backed, 2, 1024, 8, "batch");
  const auto sym_n = add_symbol("s1", fb::SymbolKind::Backed, 1, 64, 3, "n");
  const auto sym_u = add_symbol("u0", fb::SymbolKind::Unbacked, 0, INT64_MAX, 0, "");

  ExprPool ex(p);
  const auto s0 = ex.symbol(sym_b), s1 = ex.symbol(sym_n), u0 = ex.symbol(sym_u);
  const auto c2 = ex.constant(2), c32 = ex.constant(32), c64 = ex.constant(64);
  const Tok t_sum[] = {Tok(ExprOp::Sym, sym_b), Tok(ExprOp::Sym, sym_n), Tok(ExprOp::Add, 2)};
  const auto s0_plus_s1 = ex.intern(t_sum);
  const Tok t_2s0[] = {Tok(ExprOp::Const, 2), Tok(ExprOp::Sym, sym_b), Tok(ExprOp::Mul, 2)};
  const auto two_s0 = ex.intern(t_2s0);
  const Tok t_gt[] = {Tok(ExprOp::Sym, sym_b), Tok(ExprOp::Const, 4), Tok(ExprOp::Gt, 0)};
  const auto s0_gt_4 = ex.intern(t_gt);
  const Tok t_u_le[] = {Tok(ExprOp::Sym, sym_u), Tok(ExprOp::Const, 64), Tok(ExprOp::Sym, sym_b), Tok(ExprOp::Mul, 2), Tok(ExprOp::Le, 0)};
  const auto u_le = ex.intern(t_u_le);
  const Tok t_even[] = {Tok(ExprOp::Sym, sym_b), Tok(ExprOp::Const, 2), Tok(ExprOp::Mod, 0), Tok(ExprOp::Const, 0), Tok(ExprOp::Eq, 0)};
  const auto s0_even = ex.intern(t_even);
  const Tok t_spec[] = {Tok(ExprOp::Sym, sym_b), Tok(ExprOp::Const, 16), Tok(ExprOp::Mod, 0), Tok(ExprOp::Const, 0), Tok(ExprOp::Eq, 0)};
  const auto s0_mod16 = ex.intern(t_spec);
  const Tok t_half[] = {Tok(ExprOp::Sym, sym_b), Tok(ExprOp::Const, 2), Tok(ExprOp::FloorDiv, 0)};
  const auto s0_half = ex.intern(t_half);

  // Constants: w (own segment when large enough), b, a duplicate of w (stored once).
  auto add_data = [&](std::vector<std::uint8_t> bytes) -> const std::vector<std::uint8_t>& {
    sample->data.push_back(std::make_unique<std::vector<std::uint8_t>>(std::move(bytes)));
    return *sample->data.back();
  };
  auto add_constant = [&](const std::string& name, fb::DType dtype, std::vector<std::int64_t> shape, const std::vector<std::uint8_t>& bytes) {
    const DataRef ref = sample->writer->add_data(bytes);
    auto c = std::make_unique<fb::ConstantT>();
    c->name = name; c->dtype = dtype; c->shape = std::move(shape);
    c->segment = ref.segment; c->offset = ref.offset; c->nbytes = ref.nbytes;
    p.constants.push_back(std::move(c));
    return static_cast<std::uint32_t>(p.constants.size() - 1);
  };
  std::vector<float> w(64 * 32), b(64);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i) * 0.01f;
  const auto& w_bytes = add_data(bytes_of(w));
  const auto k_w = add_constant("fc.weight", fb::DType::f32, {64, 32}, w_bytes);
  const auto k_b = add_constant("fc.bias", fb::DType::f32, {64}, add_data(bytes_of(b)));
  add_constant("fc_tied.weight", fb::DType::f32, {64, 32}, w_bytes);
  if (options.extra_weight_bytes > 0) {
    const std::uint64_t n = options.extra_weight_bytes / 4;
    std::vector<std::uint8_t> big(n * 4);
    for (std::uint64_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::uint8_t>((i * 2654435761u) >> 24);
    add_constant("extra.weight", fb::DType::f32, {static_cast<std::int64_t>(n)}, add_data(std::move(big)));
  }

  // Debug table.
  if (options.with_debug) {
    p.debug = std::make_unique<fb::DebugTableT>();
    p.debug->strings = {"", "model.cpp", "fc", "linear", "relu", "nonzero", "cond", "check"};
    p.debug->entries = {fb::DebugEntry(1, 41, 5, 2, 3), fb::DebugEntry(1, 42, 5, 0, 4),
                        fb::DebugEntry(1, 43, 9, 0, 5), fb::DebugEntry(1, 44, 9, 0, 6),
                        fb::DebugEntry(1, 45, 3, 0, 7)};
  }

  // Signature: x f32[s0, 32], n Int (dynamic, s1), flag Int (static 7), h f32[2*s0, 32].
  p.signature = std::make_unique<fb::SignatureT>();
  auto in_tensor = [&](const char* name, std::vector<std::uint32_t> shape) {
    auto in = std::make_unique<fb::InputSpecT>();
    in->name = name; in->kind = fb::InputKind::Tensor; in->dtype = fb::DType::f32; in->shape = std::move(shape);
    return in;
  };
  p.signature->inputs.push_back(in_tensor("x", {s0, c32}));
  auto in_n = std::make_unique<fb::InputSpecT>();
  in_n->name = "n"; in_n->kind = fb::InputKind::Int; in_n->dynamism = fb::Dynamism::Dynamic; in_n->expr = s1;
  p.signature->inputs.push_back(std::move(in_n));
  auto in_flag = std::make_unique<fb::InputSpecT>();
  in_flag->name = "flag"; in_flag->kind = fb::InputKind::Int; in_flag->dynamism = fb::Dynamism::Static; in_flag->static_value = 7;
  p.signature->inputs.push_back(std::move(in_flag));
  p.signature->inputs.push_back(in_tensor("h", {two_s0, c32}));
  auto out = [&](const char* name, fb::InputKind kind, fb::DType dtype, std::vector<std::uint32_t> shape, std::uint32_t expr) {
    auto o = std::make_unique<fb::OutputSpecT>();
    o->name = name; o->kind = kind; o->dtype = dtype; o->shape = std::move(shape); o->expr = expr;
    p.signature->outputs.push_back(std::move(o));
  };
  out("y", fb::InputKind::Tensor, fb::DType::f32, {s0, c64}, 0);
  out("idx", fb::InputKind::Tensor, fb::DType::i64, {u0, c2}, 0);
  out("total", fb::InputKind::Int, fb::DType::i64, {}, s0_plus_s1);
  out("z", fb::InputKind::Tensor, fb::DType::f32, {s0, c64}, 0);
  out("r", fb::InputKind::Tensor, fb::DType::f32, {s0_half, c64}, 0);
  out("f", fb::InputKind::Tensor, fb::DType::f32, {s1, c2}, 0);

  // Main graph.
  auto main = std::make_unique<fb::GraphT>();
  main->name = "main";
  auto& v = main->values;
  v.push_back(tensor_value("x", fb::DType::f32, {s0, c32}));                 // 0
  v.push_back(sym_value("n", fb::ValueKind::SymInt, s1));                    // 1
  v.push_back(sym_value("flag", fb::ValueKind::SymInt, ex.constant(7)));     // 2
  v.push_back(tensor_value("h", fb::DType::f32, {two_s0, c32}));             // 3
  auto cw = tensor_value("fc.weight", fb::DType::f32, {c64, c32});
  cw->kind = fb::ValueKind::Constant; cw->constant = k_w;
  v.push_back(std::move(cw));                                                // 4
  auto cb = tensor_value("fc.bias", fb::DType::f32, {c64});
  cb->kind = fb::ValueKind::Constant; cb->constant = k_b;
  v.push_back(std::move(cb));                                                // 5
  v.push_back(tensor_value("lin", fb::DType::f32, {s0, c64}));               // 6
  v.push_back(tensor_value("y", fb::DType::f32, {s0, c64}));                 // 7
  v.push_back(tensor_value("idx", fb::DType::i64, {u0, c2}));                // 8
  v.push_back(sym_value("total", fb::ValueKind::SymInt, s0_plus_s1));        // 9
  v.push_back(sym_value("pred", fb::ValueKind::SymBool, s0_gt_4));           // 10
  v.push_back(tensor_value("z", fb::DType::f32, {s0, c64}));                 // 11
  v.push_back(tensor_value("r", fb::DType::f32, {s0_half, c64}));            // 12
  v.push_back(tensor_value("f", fb::DType::f32, {s1, c2}));                  // 13
  main->inputs = {0, 1, 2, 3};
  main->outputs = {7, 8, 9, 11, 12, 13};
  main->nodes.push_back(node(kLinear, {0, 4, 5}, {6}, 1));
  main->nodes.push_back(node(kRelu, {6}, {7}, 2));
  main->nodes.push_back(node(kNonzero, {7}, {8}, 3));
  auto cond = node(kCond, {10, 7}, {11}, 4);
  cond->subgraphs = {1, 2};
  main->nodes.push_back(std::move(cond));
  auto reshape = node(kReshape, {7}, {12}, 0);
  auto shape_attr = attr(fb::AttrKind::Exprs);
  shape_attr->exprs = {s0_half, c64};
  reshape->attrs.push_back(std::move(shape_attr));
  main->nodes.push_back(std::move(reshape));
  auto full = node(kFull, {}, {13}, 0);
  auto fshape = attr(fb::AttrKind::Exprs);
  fshape->exprs = {s1, c2};
  full->attrs.push_back(std::move(fshape));
  auto fval = attr(fb::AttrKind::Float);
  fval->f = 1.5;
  full->attrs.push_back(std::move(fval));
  auto fdt = attr(fb::AttrKind::DType);
  fdt->i = static_cast<std::int64_t>(fb::DType::f32);
  full->attrs.push_back(std::move(fdt));
  for (fb::AttrKind k : {fb::AttrKind::Int, fb::AttrKind::Bool, fb::AttrKind::String, fb::AttrKind::Ints, fb::AttrKind::Floats, fb::AttrKind::None}) {
    auto a = attr(k);  // extra trailing attributes exercise every kind in round trips
    a->i = 3; a->s = "extra"; a->ints = {1, -2, 3}; a->floats = {0.5, -1.25};
    full->attrs.push_back(std::move(a));
  }
  main->nodes.push_back(std::move(full));
  auto bind = std::make_unique<fb::UnbackedBindingT>();
  bind->symbol = sym_u; bind->node = 2; bind->output = 0; bind->kind = fb::BindingKind::Size; bind->dim = 0;
  main->bindings.push_back(std::move(bind));
  auto assert_u = std::make_unique<fb::RuntimeAssertT>();
  assert_u->expr = u_le; assert_u->message = "u0 <= 64*s0"; assert_u->after_node = 2; assert_u->debug = 3;
  main->asserts.push_back(std::move(assert_u));
  auto assert_even = std::make_unique<fb::RuntimeAssertT>();
  assert_even->expr = s0_even; assert_even->message = "s0 % 2 == 0"; assert_even->after_node = -1; assert_even->debug = 5;
  main->asserts.push_back(std::move(assert_even));

  // A specialized copy of main (graph 3), dispatched when s0 % 16 == 0.
  p.graphs.push_back(std::move(main));
  p.graphs.push_back(branch("cond_true", kSin, s0, c64));
  p.graphs.push_back(branch("cond_false", kCos, s0, c64));
  flatbuffers::FlatBufferBuilder copy;
  copy.Finish(fb::Graph::Pack(copy, p.graphs[0].get()));
  auto spec = std::unique_ptr<fb::GraphT>(flatbuffers::GetRoot<fb::Graph>(copy.GetBufferPointer())->UnPack());
  spec->name = "main[s0 % 16 == 0]";
  spec->asserts.pop_back();  // s0 % 2 == 0 holds whenever s0 % 16 == 0
  p.graphs.push_back(std::move(spec));
  p.entry_graph = 0;
  auto sp = std::make_unique<fb::SpecializationT>();
  sp->label = "batch % 16 == 0"; sp->predicate = s0_mod16; sp->graph = 3;
  p.specializations.push_back(std::move(sp));

  // One self-test case (x: 8x32, n = 3, flag = 7, h: 16x32 -> outputs).
  auto tt = [&](fb::InputKind kind, std::vector<std::int64_t> shape, fb::DType dtype, std::int64_t int_value) {
    auto t = std::make_unique<fb::TestTensorT>();
    t->kind = kind; t->dtype = dtype; t->shape = shape; t->int_value = int_value;
    if (kind == fb::InputKind::Tensor) {
      std::int64_t n = 1;
      for (auto d : shape) n *= d;
      const std::size_t esz = dtype == fb::DType::i64 ? 8 : 4;
      std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n) * esz);
      for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 31 + shape.size());
      const DataRef ref = sample->writer->add_data(add_data(std::move(bytes)));
      t->segment = ref.segment; t->offset = ref.offset; t->nbytes = ref.nbytes;
    }
    return t;
  };
  auto st = std::make_unique<fb::SelfTestT>();
  st->name = "case0";
  st->inputs.push_back(tt(fb::InputKind::Tensor, {8, 32}, fb::DType::f32, 0));
  st->inputs.push_back(tt(fb::InputKind::Int, {}, fb::DType::i64, 3));
  st->inputs.push_back(tt(fb::InputKind::Int, {}, fb::DType::i64, 7));
  st->inputs.push_back(tt(fb::InputKind::Tensor, {16, 32}, fb::DType::f32, 0));
  st->outputs.push_back(tt(fb::InputKind::Tensor, {8, 64}, fb::DType::f32, 0));
  st->outputs.push_back(tt(fb::InputKind::Tensor, {5, 2}, fb::DType::i64, 0));
  st->outputs.push_back(tt(fb::InputKind::Int, {}, fb::DType::i64, 11));
  st->outputs.push_back(tt(fb::InputKind::Tensor, {8, 64}, fb::DType::f32, 0));
  st->outputs.push_back(tt(fb::InputKind::Tensor, {4, 64}, fb::DType::f32, 0));
  st->outputs.push_back(tt(fb::InputKind::Tensor, {3, 2}, fb::DType::f32, 0));
  st->outputs.back()->rtol = 1e-3;
  st->variant = "generic";
  p.self_tests.push_back(std::move(st));

  auto kv = std::make_unique<fb::KeyValueT>();
  kv->key = "purpose"; kv->value = "format test sample";
  p.metadata.push_back(std::move(kv));
  return sample;
}

}  // namespace kiln::testing
