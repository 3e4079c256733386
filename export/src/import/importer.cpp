#include "import/importer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>

#include "import/archive.h"
#include "kiln/export/symbolic/parse.h"
#include "kiln/export/symbolic/print.h"

namespace kiln::pt2 {

void fail(StatusCode code, const std::string& message) { throw ImportError(code, message); }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const bool fa = dtype_is_floating(a), fb = dtype_is_floating(b);
  if (fa != fb) return fa ? a : b;
  if (fa) {
    if (a == DType::kF64 || b == DType::kF64) return DType::kF64;
    return DType::kF32;  // f32 with a half type, or f16 with bf16
  }
  if (a == DType::kBool) return b;
  if (b == DType::kBool) return a;
  auto width = [](DType d) { return dtype_size(d); };
  if ((a == DType::kU8) != (b == DType::kU8)) {
    const DType other = a == DType::kU8 ? b : a;
    return other == DType::kI8 ? DType::kI16 : other;
  }
  return width(a) >= width(b) ? a : b;
}

const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

const json& need(const json& j, const char* key, const std::string& where) {
  const json* m = member(j, key);
  if (!m) fail(StatusCode::kInvalidBundle, "model json: " + where + " has no field '" + key + "'");
  return *m;
}

namespace {

std::int64_t need_int(const json& j, const std::string& where) {
  if (!j.is_number_integer()) fail(StatusCode::kInvalidBundle, "model json: " + where + " is not an integer");
  return j.get<std::int64_t>();
}

std::string need_string(const json& j, const std::string& where) {
  if (!j.is_string()) fail(StatusCode::kInvalidBundle, "model json: " + where + " is not a string");
  return j.get<std::string>();
}

std::optional<std::string> bare_symbol_name(const std::string& srepr) {
  static const std::regex re(R"(^\s*Symbol\('([A-Za-z_][A-Za-z0-9_]*)'.*\)\s*$)");
  std::smatch m;
  if (std::regex_match(srepr, m, re)) return m[1].str();
  return std::nullopt;
}

std::string strip_prefix(std::string s) {
  for (const char* p : {"torch.ops.", "torch."}) {
    if (s.rfind(p, 0) == 0) return s.substr(std::strlen(p));
  }
  return s;
}

bool is_torch_frame(const std::string& file) {
  return file.empty() || file[0] == '<' || file.find("/torch/") != std::string::npos ||
         file.find("site-packages") != std::string::npos;
}

}  // namespace

// ---- arguments ---------------------------------------------------------------------------

const json* Importer::arg(std::size_t pos, const char* name) const {
  const json* a = nullptr;
  if (name && *name) {
    auto it = kwargs_.find(name);
    if (it != kwargs_.end()) a = it->second;
    else if (!kwargs_.empty()) return nullptr;
  }
  if (!a && pos < args_.size()) a = args_[pos];
  if (!a || a->is_null() || member(*a, "as_none") != nullptr || (a->is_object() && a->contains("as_none"))) return nullptr;
  // Schema >= 8.x writes an absent optional tensor as `as_optional_tensor: {as_none: true}`.
  if (const json* o = member(*a, "as_optional_tensor"); o && o->is_object() && o->contains("as_none")) return nullptr;
  return a;
}

void Importer::bad(const std::string& why) {
  fail(StatusCode::kInvalidBundle, "[" + target_ + "] node '" + (node_ ? node_->value("name", std::string()) : "") + "': " + why);
}

void Importer::unsupported(const std::string& why) {
  std::string where;
  if (meta_.location.known()) where = " (" + meta_.location.file + ":" + std::to_string(meta_.location.line) + ")";
  fail(StatusCode::kUnsupported, "[" + target_ + "] " + why + where);
}

int Importer::tensor(std::size_t pos, const char* name) {
  auto t = opt_tensor(pos, name);
  if (!t) bad(std::string("missing tensor argument '") + name + "'");
  return *t;
}

std::optional<int> Importer::opt_tensor(std::size_t pos, const char* name) {
  const json* a = arg(pos, name);
  if (!a) return std::nullopt;
  const json* t = member(*a, "as_tensor");
  if (!t) t = member(*a, "as_optional_tensor");
  if (t && member(*t, "as_tensor")) t = member(*t, "as_tensor");
  if (!t) bad(std::string("argument '") + name + "' is not a tensor");
  const std::string n = need_string(need(*t, "name", "tensor argument"), "tensor name");
  auto it = scope_->tensors.find(n);
  if (it == scope_->tensors.end()) bad("uses tensor '" + n + "' before it is defined (or it comes from an unsupported output)");
  return it->second;
}

std::vector<int> Importer::tensor_list(std::size_t pos, const char* name) {
  std::vector<int> out;
  for (const auto& t : opt_tensor_list(pos, name)) {
    if (!t) bad(std::string("argument '") + name + "' holds None");
    out.push_back(*t);
  }
  return out;
}

std::vector<std::optional<int>> Importer::opt_tensor_list(std::size_t pos, const char* name) {
  const json* a = arg(pos, name);
  if (!a) return {};
  const json* list = member(*a, "as_tensors");
  const bool optional = list == nullptr;
  if (!list) list = member(*a, "as_optional_tensors");
  if (!list || !list->is_array()) bad(std::string("argument '") + name + "' is not a tensor list");
  std::vector<std::optional<int>> out;
  for (const json& e : *list) {
    const json* t = optional ? member(e, "as_tensor") : &e;
    if (!t) {
      out.push_back(std::nullopt);
      continue;
    }
    const std::string n = need_string(need(*t, "name", "tensor list element"), "tensor name");
    auto it = scope_->tensors.find(n);
    if (it == scope_->tensors.end()) bad("uses tensor '" + n + "' before it is defined");
    out.push_back(it->second);
  }
  return out;
}

sym::Expr Importer::sym_expr_of(const json& a) {
  if (const json* v = member(a, "as_int")) return sym::Expr::constant(need_int(*v, "as_int"));
  if (const json* v = member(a, "as_bool")) return sym::Expr::boolean(v->get<bool>());
  for (const char* key : {"as_sym_int", "as_sym_bool"}) {
    if (const json* s = member(a, key)) {
      if (const json* v = member(*s, "as_int")) return sym::Expr::constant(need_int(*v, "as_int"));
      if (const json* v = member(*s, "as_bool")) return sym::Expr::boolean(v->get<bool>());
      const std::string n = need_string(need(*s, "as_name", key), "symbol name");
      auto it = scope_->syms.find(n);
      if (it == scope_->syms.end()) bad("uses symbolic value '" + n + "' before it is defined");
      return it->second;
    }
  }
  bad("expected an int or a symbolic int/bool argument, got " + a.dump().substr(0, 80));
}

sym::Expr Importer::sym_int(std::size_t pos, const char* name) {
  auto e = opt_sym_int(pos, name);
  if (!e) bad(std::string("missing int argument '") + name + "'");
  return *e;
}

std::optional<sym::Expr> Importer::opt_sym_int(std::size_t pos, const char* name) {
  const json* a = arg(pos, name);
  if (!a) return std::nullopt;
  return sym_expr_of(*a);
}

std::vector<sym::Expr> Importer::sym_int_list(std::size_t pos, const char* name) {
  const json* a = arg(pos, name);
  if (!a) bad(std::string("missing int list argument '") + name + "'");
  std::vector<sym::Expr> out;
  if (const json* l = member(*a, "as_ints")) {
    for (const json& v : *l) out.push_back(sym::Expr::constant(need_int(v, "as_ints element")));
    return out;
  }
  if (const json* l = member(*a, "as_sym_ints")) {
    for (const json& v : *l) out.push_back(sym_expr_of(json{{"as_sym_int", v}}));
    return out;
  }
  if (member(*a, "as_int") || member(*a, "as_sym_int")) return {sym_expr_of(*a)};
  bad(std::string("argument '") + name + "' is not an int list");
}

std::int64_t Importer::int_arg(std::size_t pos, const char* name, std::optional<std::int64_t> fallback) {
  const json* a = arg(pos, name);
  if (!a) {
    if (!fallback) bad(std::string("missing int argument '") + name + "'");
    return *fallback;
  }
  const sym::Expr e = simplify(sym_expr_of(*a));
  if (auto c = e.constant_value()) return *c;
  if (auto b = e.bool_value()) return *b ? 1 : 0;
  unsupported(std::string("argument '") + name + "' is symbolic (" + sym::to_string(e, &program.env) + ") where Kiln needs a constant");
}

std::vector<std::int64_t> Importer::int_list(std::size_t pos, const char* name, std::vector<std::int64_t> fallback) {
  if (!arg(pos, name)) return fallback;
  std::vector<std::int64_t> out;
  for (const sym::Expr& e : sym_int_list(pos, name)) {
    auto c = simplify(e).constant_value();
    if (!c) unsupported(std::string("argument '") + name + "' is symbolic where Kiln needs constants");
    out.push_back(*c);
  }
  return out;
}

static std::optional<double> json_float(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "Infinity" || s == "inf") return HUGE_VAL;
    if (s == "-Infinity" || s == "-inf") return -HUGE_VAL;
    if (s == "NaN" || s == "nan") return std::nan("");
  }
  return std::nullopt;
}

double Importer::float_arg(std::size_t pos, const char* name, std::optional<double> fallback) {
  const json* a = arg(pos, name);
  if (!a) {
    if (!fallback) bad(std::string("missing float argument '") + name + "'");
    return *fallback;
  }
  const json* s = member(*a, "as_scalar");
  const json& v = s ? *s : *a;
  if (const json* f = member(v, "as_float")) {
    if (auto d = json_float(*f)) return *d;
    bad(std::string("argument '") + name + "' is not a float");
  }
  if (const json* i = member(v, "as_int")) return static_cast<double>(need_int(*i, name));
  if (const json* b = member(v, "as_bool")) return b->get<bool>() ? 1.0 : 0.0;
  return static_cast<double>(int_arg(pos, name));
}

bool Importer::bool_arg(std::size_t pos, const char* name, bool fallback) {
  const json* a = arg(pos, name);
  if (!a) return fallback;
  if (const json* v = member(*a, "as_bool")) return v->get<bool>();
  return int_arg(pos, name) != 0;
}

std::string Importer::string_arg(std::size_t pos, const char* name, const std::string& fallback) {
  const json* a = arg(pos, name);
  if (!a) return fallback;
  if (const json* v = member(*a, "as_string")) return need_string(*v, name);
  bad(std::string("argument '") + name + "' is not a string");
}

std::optional<DType> Importer::dtype_arg(std::size_t pos, const char* name) {
  const json* a = arg(pos, name);
  if (!a) return std::nullopt;
  const json* v = member(*a, "as_scalar_type");
  if (!v) bad(std::string("argument '") + name + "' is not a dtype");
  auto d = dtype_from_torch(need_int(*v, name));
  if (!d) unsupported("dtype code " + std::to_string(v->get<std::int64_t>()) + " (complex / float8) is not supported");
  return d;
}

Operand Importer::operand(std::size_t pos, const char* name) {
  const json* a = arg(pos, name);
  if (!a) bad(std::string("missing operand '") + name + "'");
  Operand o;
  if (member(*a, "as_tensor")) {
    o.value = tensor(pos, name);
    return o;
  }
  const json* s = member(*a, "as_scalar");
  const json& v = s ? *s : *a;
  if (const json* f = member(v, "as_float")) {
    auto d = json_float(*f);
    if (!d) bad(std::string("operand '") + name + "' is not a number");
    o.number = *d;
    return o;
  }
  if (const json* i = member(v, "as_int")) {
    o.number = static_cast<double>(need_int(*i, name));
    o.is_int = true;
    return o;
  }
  if (const json* b = member(v, "as_bool")) {
    o.number = b->get<bool>() ? 1 : 0;
    o.is_int = o.is_bool = true;
    return o;
  }
  if (member(v, "as_sym_int") || member(v, "as_sym_bool")) {
    const sym::Expr e = simplify(sym_expr_of(v));
    o.is_int = true;
    o.is_bool = e.is_bool();
    if (auto c = e.constant_value()) o.number = static_cast<double>(*c);
    else if (auto b = e.bool_value()) o.number = *b ? 1 : 0;
    else o.symbolic = e;
    return o;
  }
  if (member(v, "as_sym_float")) unsupported("symbolic float operands are not supported");
  bad(std::string("operand '") + name + "' is neither a tensor nor a scalar");
}

// ---- outputs -----------------------------------------------------------------------------

std::size_t Importer::num_outputs() const { return outputs_.size(); }

const json& Importer::tensor_meta(const std::string& name) const {
  const json& tv = need(*scope_->jgraph, "tensor_values", "graph");
  const json* m = member(tv, name.c_str());
  if (!m) fail(StatusCode::kInvalidBundle, "model json: tensor '" + name + "' has no entry in tensor_values");
  return *m;
}

static std::string out_name(const json* o) {
  if (!o) return "";
  if (const json* n = member(*o, "name")) return n->is_string() ? n->get<std::string>() : "";
  for (const char* key : {"as_tensor", "as_sym_int", "as_sym_bool"}) {
    if (const json* t = member(*o, key)) {
      if (const json* n = member(*t, "name")) return n->get<std::string>();
      if (const json* n = member(*t, "as_name")) return n->get<std::string>();
    }
  }
  return "";
}

DType Importer::out_dtype(std::size_t k) {
  if (k >= outputs_.size()) bad("has no output " + std::to_string(k));
  const json& m = tensor_meta(out_name(outputs_[k]));
  auto d = dtype_from_torch(need_int(need(m, "dtype", "tensor meta"), "dtype"));
  if (!d) unsupported("output dtype code " + std::to_string(m["dtype"].get<std::int64_t>()) + " is not supported");
  return *d;
}

Shape Importer::out_shape(std::size_t k) {
  if (k >= outputs_.size()) bad("has no output " + std::to_string(k));
  return tensor_shape(tensor_meta(out_name(outputs_[k])));
}

bool Importer::output_used(std::size_t k) const {
  return k < outputs_.size() && used_names_.count(out_name(outputs_[k])) > 0;
}

void Importer::define(std::size_t k, int v) {
  if (k >= outputs_.size()) bad("has no output " + std::to_string(k));
  const std::string n = out_name(outputs_[k]);
  if (n.empty()) return;
  scope_->tensors[n] = v;
  ir::Value& val = graph().values[static_cast<std::size_t>(v)];
  if (val.name.empty() && val.kind == ir::ValueKind::kTensor) val.name = n;
}

void Importer::define_sym(std::size_t k, sym::Expr e) {
  if (k >= outputs_.size()) bad("has no output " + std::to_string(k));
  scope_->syms[out_name(outputs_[k])] = e;
}

// ---- emitting ----------------------------------------------------------------------------

int Importer::emit(OpKind op, std::vector<int> inputs, std::vector<ir::Attr> attrs, DType dtype, Shape shape) {
  return emit_multi(op, std::move(inputs), std::move(attrs), dtype, {std::move(shape)})[0];
}

std::vector<int> Importer::emit_multi(OpKind op, std::vector<int> inputs, std::vector<ir::Attr> attrs, DType dtype,
                                      std::vector<Shape> shapes) {
  ir::Graph& g = graph();
  ir::Node n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.meta = meta_;
  for (Shape& s : shapes) {
    for (sym::Expr& e : s) e = simplify(e);
    n.outputs.push_back(g.add_value({ir::ValueKind::kTensor, dtype, std::move(s), {}, -1, ""}));
  }
  g.nodes.push_back(std::move(n));
  return g.nodes.back().outputs;
}

int Importer::emit_out(OpKind op, std::vector<int> inputs, std::vector<ir::Attr> attrs, std::size_t k) {
  const int v = emit(op, std::move(inputs), std::move(attrs), out_dtype(k), out_shape(k));
  define(k, v);
  return v;
}

int Importer::cast(int v, DType to) {
  if (dtype(v) == to) return v;
  return emit(OpKind::Cast, {v}, {to}, to, shape(v));
}

int Importer::reshape(int v, Shape s) {
  if (shape(v) == s) return v;
  return emit(OpKind::Reshape, {v}, {s}, dtype(v), s);
}

int Importer::permute(int v, std::vector<std::int64_t> dims) {
  bool identity = true;
  for (std::size_t i = 0; i < dims.size(); ++i) identity = identity && dims[i] == static_cast<std::int64_t>(i);
  if (identity) return v;
  const Shape in = shape(v);
  Shape out;
  for (std::int64_t d : dims) out.push_back(in[static_cast<std::size_t>(d)]);
  return emit(OpKind::Permute, {v}, {dims}, dtype(v), out);
}

int Importer::unsqueeze(int v, std::int64_t dim) {
  Shape s = shape(v);
  dim = norm_dim(dim, static_cast<std::int64_t>(s.size()) + 1);
  s.insert(s.begin() + dim, sym::Expr::constant(1));
  return reshape(v, s);
}

int Importer::constant(DType dtype, std::vector<std::int64_t> shape, std::vector<std::uint8_t> bytes, const std::string& name) {
  ir::ConstantTensor c;
  c.name = name;
  c.dtype = dtype;
  c.shape = std::move(shape);
  c.data = std::make_shared<const std::vector<std::uint8_t>>(std::move(bytes));
  program.constants.push_back(std::move(c));
  return constant_value(static_cast<int>(program.constants.size()) - 1);
}

int Importer::constant_value(int index) {
  auto it = scope_->constant_values.find(index);
  if (it != scope_->constant_values.end()) return it->second;
  const ir::ConstantTensor& c = program.constants[static_cast<std::size_t>(index)];
  Shape s;
  for (std::int64_t d : c.shape) s.push_back(sym::Expr::constant(d));
  const int v = graph().add_value({ir::ValueKind::kConstant, c.dtype, s, {}, index, c.name});
  scope_->constant_values[index] = v;
  return v;
}

static std::vector<std::uint8_t> encode_scalar(double v, DType dtype) {
  std::vector<std::uint8_t> b(dtype_size(dtype));
  auto put = [&](auto x) { std::memcpy(b.data(), &x, sizeof(x)); };
  switch (dtype) {
    case DType::kF32: put(static_cast<float>(v)); break;
    case DType::kF64: put(v); break;
    case DType::kI8: put(static_cast<std::int8_t>(v)); break;
    case DType::kI16: put(static_cast<std::int16_t>(v)); break;
    case DType::kI32: put(static_cast<std::int32_t>(v)); break;
    case DType::kI64: put(static_cast<std::int64_t>(v)); break;
    case DType::kU8: put(static_cast<std::uint8_t>(v)); break;
    case DType::kBool: put(static_cast<std::uint8_t>(v != 0)); break;
    case DType::kF16:
    case DType::kBF16: {
      // Round-to-nearest-even of the f32 value's top bits (bf16); f16 through a float cast.
      const float f = static_cast<float>(v);
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      std::uint16_t h;
      if (dtype == DType::kBF16) {
        h = static_cast<std::uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
      } else {
        const std::uint32_t sign = (u >> 16) & 0x8000;
        const int exp = static_cast<int>((u >> 23) & 0xFF) - 127 + 15;
        std::uint32_t mant = u & 0x7FFFFF;
        if (std::isnan(f)) h = 0x7E00;
        else if (exp >= 31) h = static_cast<std::uint16_t>(sign | 0x7C00);
        else if (exp <= 0) h = static_cast<std::uint16_t>(sign);
        else {
          std::uint32_t r = (static_cast<std::uint32_t>(exp) << 10) | (mant >> 13);
          if ((mant & 0x1FFF) > 0x1000 || ((mant & 0x1FFF) == 0x1000 && (r & 1))) ++r;
          h = static_cast<std::uint16_t>(sign | r);
        }
      }
      std::memcpy(b.data(), &h, 2);
      break;
    }
  }
  return b;
}

int Importer::scalar(double v, DType dtype) {
  std::string text = std::to_string(v);
  return constant(dtype, {}, encode_scalar(v, dtype), "scalar_" + std::string(dtype_name(dtype)) + "_" + text);
}

int Importer::as_tensor(const Operand& o, DType dtype) {
  if (o.is_tensor()) return cast(o.value, dtype);
  if (o.symbolic) {
    sym::Expr e = *o.symbolic;
    if (e.is_bool()) unsupported("a symbolic bool used as a tensor operand");
    const int r = emit(OpKind::Arange, {}, {e, e + sym::Expr::constant(1), sym::Expr::constant(1), DType::kI64}, DType::kI64,
                       {sym::Expr::constant(1)});
    return cast(reshape(r, {}), dtype);
  }
  return scalar(o.number, dtype);
}

std::int64_t Importer::norm_dim(std::int64_t d, std::int64_t rank) {
  const std::int64_t r = std::max<std::int64_t>(rank, 1);
  if (d < -r || d >= r) bad("dim " + std::to_string(d) + " out of range for rank " + std::to_string(rank));
  return d < 0 ? d + r : d;
}

// ---- symbols -----------------------------------------------------------------------------

std::optional<int> Importer::resolve_name(std::string_view name) const {
  auto it = symbols_.find(std::string(name));
  if (it != symbols_.end()) return it->second;
  return std::nullopt;
}

sym::Expr Importer::parse_sym(const std::string& srepr) {
  auto resolver = [this](std::string_view name) -> std::optional<int> {
    const std::string n(name);
    auto it = symbols_.find(n);
    if (it != symbols_.end()) return it->second;
    auto range = ranges_.count(n) ? ranges_.at(n) : std::pair<std::int64_t, std::int64_t>{sym::kNegInf, sym::kPosInf};
    int id;
    if (!n.empty() && n[0] == 'u') {
      id = program.env.create_unbacked_symbol(range.first >= 0);
    } else {
      const std::int64_t lo = range.first == sym::kNegInf ? 0 : range.first;
      std::int64_t hint = hints_.count(n) ? hints_.at(n) : lo;
      hint = std::clamp(hint, lo, range.second);
      auto s = program.env.create_backed_symbol("", {range.first, range.second}, hint);
      if (!s.ok()) return std::nullopt;
      id = *s;
    }
    if (range.first != sym::kNegInf || range.second != sym::kPosInf) {
      (void)program.env.constrain_range(id, range.first, range.second);
    }
    symbols_[n] = id;
    return id;
  };
  auto e = sym::parse_srepr(srepr, resolver);
  if (!e.ok()) {
    fail(e.status().code() == StatusCode::kUnsupported ? StatusCode::kUnsupported : StatusCode::kInvalidBundle,
         "symbolic expression '" + srepr + "': " + e.status().message());
  }
  return *e;
}

Shape Importer::tensor_shape(const json& meta) {
  Shape out;
  const json& sizes = need(meta, "sizes", "tensor meta");
  if (!sizes.is_array()) fail(StatusCode::kInvalidBundle, "model json: tensor meta sizes is not a list");
  for (const json& s : sizes) {
    if (const json* i = member(s, "as_int")) out.push_back(sym::Expr::constant(need_int(*i, "size")));
    else if (const json* e = member(s, "as_expr")) out.push_back(simplify(parse_sym(need_string(need(*e, "expr_str", "as_expr"), "expr_str"))));
    else fail(StatusCode::kInvalidBundle, "model json: a size is neither as_int nor as_expr");
  }
  if (out.size() > 8) fail(StatusCode::kUnsupported, "a tensor of rank " + std::to_string(out.size()) + " (Kiln supports up to 8)");
  return out;
}

void Importer::create_symbols() {
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> derived_ranges;
  if (const json* rc = member(model_, "range_constraints")) {
    for (auto it = rc->begin(); it != rc->end(); ++it) {
      const std::string key = it.key();
      bool plain = !key.empty();
      for (char c : key) plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
      const json* lo = member(*it, "min_val");
      const json* hi = member(*it, "max_val");
      auto bound = [&](const json* b, std::int64_t inf) -> std::int64_t {
        if (!b || !b->is_number_integer()) return inf;
        const std::int64_t v = b->get<std::int64_t>();
        // PyTorch writes int_oo as a huge integer in some versions.
        if (v >= (std::int64_t{1} << 62)) return sym::kPosInf;
        if (v <= -(std::int64_t{1} << 62)) return sym::kNegInf;
        return v;
      };
      if (plain) {
        ranges_[key] = {bound(lo, sym::kNegInf), bound(hi, sym::kPosInf)};
        continue;
      }
      // A derived dim ("32*s39", "s3 + 1"): PyTorch checks the input size against this
      // range, not its root's (which keeps the internal min 2), so the root's range
      // becomes the one this implies.
      static const std::regex linear(R"(^\s*(?:(\d+)\*)?([A-Za-z_]\w*)(?:\s*\+\s*(\d+))?\s*$)");
      std::smatch m;
      if (!std::regex_match(key, m, linear)) continue;
      const std::int64_t a = m[1].matched ? std::stoll(m[1].str()) : 1, b = m[3].matched ? std::stoll(m[3].str()) : 0;
      const std::int64_t dlo = bound(lo, sym::kNegInf), dhi = bound(hi, sym::kPosInf);
      auto floor_div = [](std::int64_t x, std::int64_t y) { return x >= 0 ? x / y : -((-x + y - 1) / y); };
      derived_ranges[m[2].str()] = {dlo == sym::kNegInf ? sym::kNegInf : -floor_div(-(dlo - b), a),
                                    dhi == sym::kPosInf ? sym::kPosInf : floor_div(dhi - b, a)};
    }
    for (const auto& [name, r] : derived_ranges) ranges_[name] = r;
  }
  // Hints: example values of bare symbols in the entry graph's metadata.
  const json& g = need(need(model_, "graph_module", "model"), "graph", "graph_module");
  std::vector<std::pair<std::string, std::int64_t>> derived;
  auto note = [&](const json& as_expr) {
    const json* s = member(as_expr, "expr_str");
    const json* h = member(as_expr, "hint");
    if (!s || !s->is_string() || !h) return;
    const json* hv = member(*h, "as_int");
    if (!hv || !hv->is_number_integer()) return;
    if (auto name = bare_symbol_name(s->get<std::string>())) hints_.emplace(*name, hv->get<std::int64_t>());
  };
  if (const json* tv = member(g, "tensor_values")) {
    for (const auto& [name, meta] : tv->items()) {
      if (const json* sizes = member(meta, "sizes")) {
        for (const json& s : *sizes) if (const json* e = member(s, "as_expr")) note(*e);
      }
    }
  }
  if (const json* sv = member(g, "sym_int_values")) {
    for (const auto& [name, v] : sv->items()) if (const json* e = member(v, "as_expr")) note(*e);
  }
  // Symbols first seen in input order get the lowest Kiln numbers.
  if (const json* inputs = member(g, "inputs")) {
    for (const json& in : *inputs) {
      const std::string n = out_name(&in);
      if (n.empty()) continue;
      if (const json* tv = member(g, "tensor_values"); tv && member(*tv, n.c_str())) {
        for (const json& s : (*tv)[n].value("sizes", json::array())) {
          if (const json* e = member(s, "as_expr")) (void)parse_sym(need_string(need(*e, "expr_str", "as_expr"), "expr_str"));
        }
      } else if (const json* sv = member(g, "sym_int_values"); sv && member(*sv, n.c_str())) {
        if (const json* e = member((*sv)[n], "as_expr")) (void)parse_sym(need_string(need(*e, "expr_str", "as_expr"), "expr_str"));
      }
    }
  }
  for (const auto& [name, r] : ranges_) {
    if (!name.empty() && name[0] != 'u') (void)parse_sym("Symbol('" + name + "', integer=True)");
  }
}

// ---- node metadata -----------------------------------------------------------------------

ir::NodeMeta Importer::node_meta(const json& node) const {
  ir::NodeMeta m;
  const json* md = member(node, "metadata");
  std::string target = strip_prefix(node.value("target", std::string()));
  m.user_op = target;
  if (!md) return m;
  if (const json* st = member(*md, "stack_trace"); st && st->is_string()) {
    static const std::regex frame(R"re(File "([^"]+)", line (\d+))re");
    const std::string text = st->get<std::string>();
    std::string file;
    std::uint32_t line = 0;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), frame); it != std::sregex_iterator(); ++it) {
      const std::string f = (*it)[1].str();
      if (is_torch_frame(f)) continue;
      file = f;
      line = static_cast<std::uint32_t>(std::stoul((*it)[2].str()));
    }
    if (!file.empty()) m.location = {file, line, 0};
  }
  if (const json* ms = member(*md, "nn_module_stack"); ms && ms->is_string()) {
    const std::string text = ms->get<std::string>();
    const std::size_t last = text.rfind(';');
    const std::string entry = last == std::string::npos ? text : text.substr(last + 1);
    const std::size_t a = entry.find(','), b = entry.rfind(',');
    if (a != std::string::npos && b != std::string::npos && b > a) m.module_path = entry.substr(a + 1, b - a - 1);
  }
  if (const json* tf = member(*md, "torch_fn"); tf && tf->is_string()) {
    const std::string text = tf->get<std::string>();
    const std::size_t dot = text.rfind('.');
    if (dot != std::string::npos && dot + 1 < text.size()) m.user_op = text.substr(dot + 1);
  }
  return m;
}

}  // namespace kiln::pt2

namespace kiln::pt2 {

int Importer::none_value() { return graph().add_value({ir::ValueKind::kNone, DType::kF32, {}, {}, -1, ""}); }

int Importer::index_constant(const std::vector<std::int64_t>& values) {
  std::vector<std::uint8_t> bytes(values.size() * sizeof(std::int64_t));
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return constant(DType::kI64, {static_cast<std::int64_t>(values.size())}, std::move(bytes), "index");
}

const HandlerTable& aten_handlers() {
  static const HandlerTable table = [] {
    HandlerTable t;
    register_elementwise(t);
    register_nn(t);
    register_shape(t);
    register_volume(t);
    register_scatter(t);
    register_recurrent(t);
    return t;
  }();
  return table;
}

}  // namespace kiln::pt2
