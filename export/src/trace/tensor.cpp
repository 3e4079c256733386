#include "kiln/export/tensor.h"

#include <cmath>
#include <cstring>
#include <random>

#include "kiln/export/guards.h"
#include "kiln/export/module.h"
#include "kiln/export/symbolic/print.h"
#include "trace/context.h"

namespace kiln {

using detail::current_trace;

// ---------------------------------------------------------------------------------------
// SymInt / SymBool

SymInt::SymInt(std::int64_t value, SourceLoc loc) : expr_(sym::Expr::constant(value)), loc_(loc) {}
SymInt::SymInt(sym::Expr expr, SourceLoc loc, bool user_loc) : expr_(expr), loc_(loc), user_loc_(user_loc) {}

namespace {
// The location of a binary expression: the operand created on the user's line.
SourceLoc at(const SymInt& a, const SymInt& b) { return a.has_user_loc() || !b.has_user_loc() ? a.loc() : b.loc(); }
bool user(const SymInt& a, const SymInt& b) { return a.has_user_loc() || b.has_user_loc(); }
}  // namespace

std::int64_t SymInt::guard_int(SourceLoc loc) const {
  if (auto v = maybe_int()) return *v;
  detail::TraceContext* ctx = current_trace();
  if (ctx == nullptr) throw ExportError(StatusCode::kInternal, "symbolic int outside a trace");
  const auto hint = ctx->env().evaluate_with_hints(expr_);
  if (!hint) {
    throw ExportError(StatusCode::kExportError, "could not specialize data-dependent value " + ctx->symbol_text(expr_) +
                                                    " to an int (" + detail::loc_text(loc) + "): use kiln::check(...) on it instead");
  }
  ctx->guard(sym::eq(expr_, sym::Expr::constant(*hint)), loc);
  return *hint;
}

SymInt& SymInt::operator+=(const SymInt& o) { return *this = *this + o; }
SymInt& SymInt::operator-=(const SymInt& o) { return *this = *this - o; }
SymInt& SymInt::operator*=(const SymInt& o) { return *this = *this * o; }

SymInt operator+(const SymInt& a, const SymInt& b) { return SymInt(a.expr() + b.expr(), at(a, b), user(a, b)); }
SymInt operator-(const SymInt& a, const SymInt& b) { return SymInt(a.expr() - b.expr(), at(a, b), user(a, b)); }
SymInt operator*(const SymInt& a, const SymInt& b) { return SymInt(a.expr() * b.expr(), at(a, b), user(a, b)); }
SymInt operator-(const SymInt& a) { return SymInt(-a.expr(), a.loc(), a.has_user_loc()); }
SymInt floordiv(const SymInt& a, const SymInt& b) {
  if (b.maybe_int() == 0) throw ExportError(StatusCode::kExportError, "division by zero (" + detail::loc_text(a.loc()) + ")");
  return SymInt(sym::floordiv(a.expr(), b.expr()), at(a, b), user(a, b));
}
SymInt operator/(const SymInt& a, const SymInt& b) { return floordiv(a, b); }
SymInt operator%(const SymInt& a, const SymInt& b) {
  if (b.maybe_int() == 0) throw ExportError(StatusCode::kExportError, "modulo by zero (" + detail::loc_text(a.loc()) + ")");
  return SymInt(sym::mod(a.expr(), b.expr()), at(a, b), user(a, b));
}
SymInt sym_min(const SymInt& a, const SymInt& b) { return SymInt(sym::min(a.expr(), b.expr()), at(a, b), user(a, b)); }
SymInt sym_max(const SymInt& a, const SymInt& b) { return SymInt(sym::max(a.expr(), b.expr()), at(a, b), user(a, b)); }

SymBool::SymBool(bool value, SourceLoc loc) : expr_(sym::Expr::boolean(value)), loc_(loc) {}

SymBool::operator bool() const {
  if (auto v = maybe_bool()) return *v;
  detail::TraceContext* ctx = current_trace();
  if (ctx == nullptr) throw ExportError(StatusCode::kInternal, "symbolic condition outside a trace");
  return ctx->guard(expr_, loc_);
}

SymBool operator==(const SymInt& a, const SymInt& b) { return SymBool(sym::eq(a.expr(), b.expr()), at(a, b)); }
SymBool operator!=(const SymInt& a, const SymInt& b) { return SymBool(sym::ne(a.expr(), b.expr()), at(a, b)); }
SymBool operator<(const SymInt& a, const SymInt& b) { return SymBool(sym::lt(a.expr(), b.expr()), at(a, b)); }
SymBool operator<=(const SymInt& a, const SymInt& b) { return SymBool(sym::le(a.expr(), b.expr()), at(a, b)); }
SymBool operator>(const SymInt& a, const SymInt& b) { return SymBool(sym::gt(a.expr(), b.expr()), at(a, b)); }
SymBool operator>=(const SymInt& a, const SymInt& b) { return SymBool(sym::ge(a.expr(), b.expr()), at(a, b)); }
SymBool operator&&(const SymBool& a, const SymBool& b) { return SymBool(sym::sym_and({a.expr(), b.expr()}), a.loc()); }
SymBool operator||(const SymBool& a, const SymBool& b) { return SymBool(sym::sym_or({a.expr(), b.expr()}), a.loc()); }
SymBool operator!(const SymBool& a) { return SymBool(sym::sym_not(a.expr()), a.loc()); }

// ---------------------------------------------------------------------------------------
// Guards

void check(const SymBool& condition, SourceLoc loc) {
  if (auto v = condition.maybe_bool()) {
    if (*v) return;
    throw ExportError(current_trace() ? StatusCode::kExportError : StatusCode::kInvalidInput,
                      "check failed (" + detail::loc_text(loc) + ")");
  }
  detail::TraceContext* ctx = current_trace();
  if (ctx == nullptr) throw ExportError(StatusCode::kInternal, "symbolic check outside a trace");
  ctx->check(condition.expr(), loc);
}

namespace {
std::optional<bool> decide(const SymBool& c) {
  if (auto v = c.maybe_bool()) return *v;
  detail::TraceContext* ctx = current_trace();
  return ctx == nullptr ? std::nullopt : ctx->env().statically_known(c.expr());
}
}  // namespace

bool guard_or_false(const SymBool& c) { return decide(c).value_or(false); }
bool guard_or_true(const SymBool& c) { return decide(c).value_or(true); }
bool statically_known_true(const SymBool& c) { return decide(c) == true; }

SymBool sym_and(std::initializer_list<SymBool> cs) {
  std::vector<sym::Expr> es;
  for (const SymBool& c : cs) es.push_back(c.expr());
  return SymBool(sym::sym_and(es), cs.size() ? cs.begin()->loc() : SourceLoc::current());
}
SymBool sym_or(std::initializer_list<SymBool> cs) {
  std::vector<sym::Expr> es;
  for (const SymBool& c : cs) es.push_back(c.expr());
  return SymBool(sym::sym_or(es), cs.size() ? cs.begin()->loc() : SourceLoc::current());
}

// ---------------------------------------------------------------------------------------
// Tensor

DType Tensor::dtype() const { return impl_->dtype; }
std::int64_t Tensor::dim() const { return static_cast<std::int64_t>(impl_->shape.size()); }
bool Tensor::is_traced() const {
  // A state tensor is a graph value (the state's input, or its latest update) while tracing.
  return impl_ && (impl_->ctx != nullptr || (impl_->is_state() && current_trace() != nullptr));
}

SymInt Tensor::size(std::int64_t d, SourceLoc loc) const {
  const std::int64_t rank = dim();
  if (d < -rank || d >= rank) {
    detail::op_error("size", "dim " + std::to_string(d) + " out of range for a tensor of rank " + std::to_string(rank), loc);
  }
  sym::Expr e = impl_->shape[static_cast<std::size_t>(d < 0 ? d + rank : d)];
  if (impl_->ctx != nullptr) e = impl_->ctx->env().simplify(e);
  return SymInt(e, loc);
}

std::vector<SymInt> Tensor::sizes(SourceLoc loc) const {
  std::vector<SymInt> out;
  for (std::int64_t d = 0; d < dim(); ++d) out.push_back(size(d, loc));
  return out;
}

SymInt Tensor::numel(SourceLoc loc) const {
  SymInt n(1, loc);
  for (std::int64_t d = 0; d < dim(); ++d) n = n * size(d, loc);
  return n;
}

std::vector<std::int64_t> Tensor::concrete_shape() const {
  std::vector<std::int64_t> out;
  for (const sym::Expr& d : impl_->shape) {
    auto v = d.constant_value();
    if (!v) throw ExportError(StatusCode::kUsage, "concrete_shape() of a traced tensor with a symbolic shape");
    out.push_back(*v);
  }
  return out;
}

const std::vector<std::uint8_t>& Tensor::bytes() const {
  if (!impl_->data) throw ExportError(StatusCode::kUsage, "bytes() of a traced tensor: it has no data");
  if (impl_->is_state() && current_trace() != nullptr) {
    throw ExportError(StatusCode::kUsage, "bytes() of state '" + impl_->param_name + "' while tracing: its value is only known at run time");
  }
  return *impl_->data;
}

Tensor Tensor::from_bytes(DType dtype, std::vector<std::int64_t> shape, std::vector<std::uint8_t> bytes) {
  std::uint64_t numel = 1;
  for (std::int64_t d : shape) {
    if (d < 0) throw ExportError(StatusCode::kUsage, "negative dim " + std::to_string(d));
    numel *= static_cast<std::uint64_t>(d);
  }
  if (bytes.size() != numel * dtype_size(dtype)) {
    throw ExportError(StatusCode::kUsage, "from_bytes: " + std::to_string(bytes.size()) + " bytes for " +
                                              std::to_string(numel) + " elements of " + std::string(dtype_name(dtype)));
  }
  auto impl = std::make_shared<detail::TensorImpl>();
  impl->dtype = dtype;
  for (std::int64_t d : shape) impl->shape.push_back(sym::Expr::constant(d));
  impl->data = std::make_shared<std::vector<std::uint8_t>>(std::move(bytes));
  return Tensor(impl);
}

namespace {
template <typename T>
std::vector<std::uint8_t> to_bytes(std::span<const T> values) {
  std::vector<std::uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}
}  // namespace

Tensor Tensor::from_floats(std::vector<std::int64_t> shape, std::span<const float> values) {
  return from_bytes(DType::kF32, std::move(shape), to_bytes(values));
}
Tensor Tensor::from_ints(std::vector<std::int64_t> shape, std::span<const std::int64_t> values) {
  return from_bytes(DType::kI64, std::move(shape), to_bytes(values));
}
Tensor Tensor::from_bools(std::vector<std::int64_t> shape, std::span<const bool> values) {
  std::vector<std::uint8_t> b(values.begin(), values.end());
  return from_bytes(DType::kBool, std::move(shape), std::move(b));
}

Tensor Tensor::randn(std::vector<std::int64_t> shape, std::uint64_t seed) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(rng);
  return from_floats(std::move(shape), v);
}

// ---------------------------------------------------------------------------------------
// Modules

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, t] : params_) out.emplace_back(t.impl()->param_name, t);
  for (const auto& [name, child] : children_) {
    auto sub = child->named_parameters();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  return register_tensor("register_parameter", name, std::move(value), Kind::kParameter);
}

Tensor Module::register_buffer(const std::string& name, Tensor value, BufferOptions options) {
  return register_tensor("register_buffer", name, std::move(value), options.state ? Kind::kState : Kind::kBuffer);
}

Tensor Module::register_tensor(std::string_view what, const std::string& name, Tensor value, Kind kind) {
  using Role = detail::TensorImpl::Role;
  const Role role = kind == Kind::kParameter ? Role::kParameter : kind == Kind::kBuffer ? Role::kBuffer : Role::kState;
  if (!value.defined() || value.is_traced()) {
    throw ExportError(StatusCode::kUsage, std::string(what) + "(\"" + name + "\"): parameters and buffers must be eager tensors");
  }
  if (name.empty()) throw ExportError(StatusCode::kUsage, std::string(what) + "(\"\"): the name must be non-empty");
  for (const auto& [n, t] : params_) {
    if (n == name) throw ExportError(StatusCode::kUsage, std::string(what) + "(\"" + name + "\"): the module already has a tensor of that name");
  }
  if (role == Role::kState) {
    for (const sym::Expr& d : value.impl()->shape) {
      if (!d.constant_value()) throw ExportError(StatusCode::kUsage, std::string(what) + "(\"" + name + "\"): a state needs a static shape");
    }
  }
  value.impl()->param_name = path_.empty() ? name : path_ + "." + name;
  value.impl()->module_path = path_;
  value.impl()->role = role;
  params_.emplace_back(name, value);
  return value;
}

void Module::register_module(const std::string& name, Module& child) {
  children_.emplace_back(name, &child);
  child.set_path(path_.empty() ? name : path_ + "." + name);
}

void Module::set_path(const std::string& path) {
  path_ = path;
  for (auto& [name, t] : params_) {
    t.impl()->param_name = path_.empty() ? name : path_ + "." + name;
    t.impl()->module_path = path_;
  }
  for (auto& [name, child] : children_) child->set_path(path_.empty() ? name : path_ + "." + name);
}

ModuleScope::ModuleScope(const Module& module) {
  if (detail::TraceContext* ctx = current_trace()) ctx->module_stack.push_back(module.path());
}
ModuleScope::~ModuleScope() {
  if (detail::TraceContext* ctx = current_trace(); ctx && !ctx->module_stack.empty()) ctx->module_stack.pop_back();
}

}  // namespace kiln
