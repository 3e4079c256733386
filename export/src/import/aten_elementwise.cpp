// aten elementwise, selection, reduction and conversion ops.
#include <algorithm>
#include <cmath>
#include <limits>

#include "import/importer.h"

namespace kiln::pt2 {
namespace {

using sym::Expr;

enum class Kind { kArith, kCompare, kLogical };

// PyTorch's result type of two operands (scalars and 0-d tensors rank below tensors of
// the same category).
DType result_type(Importer& im, const Operand& a, const Operand& b) {
  auto category = [](DType d) { return d == DType::kBool ? 0 : dtype_is_floating(d) ? 2 : 1; };
  if (a.is_tensor() && b.is_tensor()) {
    const DType da = im.dtype(a.value), db = im.dtype(b.value);
    const bool za = im.rank(a.value) == 0, zb = im.rank(b.value) == 0;
    if (za != zb) {
      const DType dim_t = za ? db : da, zero_t = za ? da : db;
      if (category(zero_t) <= category(dim_t)) return dim_t;
      return zero_t;
    }
    return promote_types(da, db);
  }
  const Operand& t = a.is_tensor() ? a : b;
  const Operand& s = a.is_tensor() ? b : a;
  if (!t.is_tensor()) return s.is_bool ? DType::kBool : s.is_int ? DType::kI64 : DType::kF32;
  const DType dt = im.dtype(t.value);
  if (!s.is_int && !dtype_is_floating(dt)) return DType::kF32;
  if (s.is_int && !s.is_bool && dt == DType::kBool) return DType::kI64;
  return dt;
}

void binary(Importer& im, OpKind op, Kind kind, const char* lhs = "self", const char* rhs = "other") {
  if (kind == Kind::kArith && im.out_dtype() == DType::kBool) {  // bool * bool is and, bool + bool is or
    if (op == OpKind::Mul) op = OpKind::LogicalAnd, kind = Kind::kLogical;
    if (op == OpKind::Add && !im.has(2, "alpha")) op = OpKind::LogicalOr, kind = Kind::kLogical;
    if (op == OpKind::Maximum) op = OpKind::LogicalOr, kind = Kind::kLogical;
    if (op == OpKind::Minimum) op = OpKind::LogicalAnd, kind = Kind::kLogical;
  }
  Operand a = im.operand(0, lhs);
  Operand b = im.operand(1, rhs);
  if (im.has(2, "alpha")) {
    const double alpha = im.float_arg(2, "alpha");
    if (alpha != 1.0) {
      if (b.is_tensor()) {
        const DType d = im.out_dtype();
        const int bt = im.cast(b.value, d);
        b.value = im.emit(OpKind::Mul, {bt, im.scalar(alpha, d)}, {}, d, im.shape(bt));
      } else if (b.symbolic) {
        im.unsupported("alpha with a symbolic operand");
      } else {
        b.number *= alpha;
        b.is_int = b.is_int && std::floor(alpha) == alpha;
      }
    }
  }
  DType common = im.out_dtype();
  if (kind == Kind::kCompare) common = result_type(im, a, b);
  if (kind == Kind::kLogical) common = DType::kBool;
  std::vector<ir::Attr> attrs;
  if (op == OpKind::Div) {
    const std::string mode = im.string_arg(2, "rounding_mode");
    if (mode.empty()) {
      attrs.emplace_back(std::monostate{});
    } else {
      attrs.emplace_back(mode);
    }
    if (mode.empty() && !dtype_is_floating(common)) common = DType::kF32;
    if (!mode.empty() && !dtype_is_floating(common) && !dtype_is_floating(im.out_dtype())) common = im.out_dtype();
  }
  const int ta = im.as_tensor(a, common);
  const int tb = im.as_tensor(b, common);
  const DType out = im.out_dtype();
  if (kind == Kind::kArith && out != common) {
    const int v = im.emit(op, {ta, tb}, attrs, common, im.out_shape());
    im.define(0, im.cast(v, out));
    return;
  }
  im.emit_out(op, {ta, tb}, attrs);
}

void unary(Importer& im, OpKind op, std::vector<ir::Attr> attrs = {}) {
  const int x = im.tensor(0, "self");
  im.emit_out(op, {im.cast(x, im.out_dtype())}, std::move(attrs));
}

// Reduction dims: "dim" may be an int, a list, or absent (all).
std::vector<std::int64_t> reduce_dims(Importer& im, int x, const char* name = "dim", std::size_t pos = 1) {
  std::vector<std::int64_t> dims;
  const std::int64_t r = im.rank(x);
  if (im.has(pos, name)) dims = im.int_list(pos, name);
  if (dims.empty()) for (std::int64_t d = 0; d < r; ++d) dims.push_back(d);
  for (auto& d : dims) d = im.norm_dim(d, r);
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  if (r == 0) dims.clear();
  return dims;
}

void reduction(Importer& im, OpKind op) {
  const int x = im.tensor(0, "self");
  const auto dims = reduce_dims(im, x);
  const bool keepdim = im.bool_arg(2, "keepdim", false);
  std::vector<ir::Attr> attrs{dims, keepdim};
  int in = x;
  const DType out = im.out_dtype();
  if (op == OpKind::Sum || op == OpKind::Prod) {
    if (dtype_is_floating(out) && in >= 0) in = im.cast(x, out);
    if (op == OpKind::Sum) attrs.emplace_back(std::monostate{});
  } else if (op == OpKind::Mean) {
    in = im.cast(x, out);
  }
  if (im.rank(x) == 0 && (op == OpKind::Amax || op == OpKind::Amin || op == OpKind::Any || op == OpKind::All)) {
    im.define(0, im.cast(x, out));
    return;
  }
  im.emit_out(op, {in}, attrs);
}

void max_min(Importer& im, bool is_max) {
  const std::string& ov = im.overload();
  if (ov == "other" || ov == "Tensor") {
    binary(im, is_max ? OpKind::Maximum : OpKind::Minimum, Kind::kArith);
    return;
  }
  const int x = im.tensor(0, "self");
  if (!im.has(1, "dim")) {  // max.default: the extreme of all elements
    std::vector<std::int64_t> all;
    for (std::int64_t d = 0; d < im.rank(x); ++d) all.push_back(d);
    im.emit_out(is_max ? OpKind::Amax : OpKind::Amin, {x}, {all, false});
    return;
  }
  const std::int64_t d = im.norm_dim(im.int_arg(1, "dim"), im.rank(x));
  const bool keepdim = im.bool_arg(2, "keepdim", false);
  im.emit_out(is_max ? OpKind::Amax : OpKind::Amin, {x}, {std::vector<std::int64_t>{d}, keepdim}, 0);
  if (im.num_outputs() > 1 && im.output_used(1)) {
    im.emit_out(is_max ? OpKind::Argmax : OpKind::Argmin, {x}, {d, keepdim}, 1);
  }
}

void arg_extreme(Importer& im, OpKind op) {
  int x = im.tensor(0, "self");
  const bool keepdim = im.bool_arg(2, "keepdim", false);
  if (!im.has(1, "dim")) {
    Shape s = im.shape(x);
    Expr n = Expr::constant(1);
    for (const Expr& e : s) n = n * e;
    x = im.reshape(x, {n});
    const int v = im.emit(op, {x}, {std::int64_t{0}, false}, DType::kI64, {});
    im.define(0, im.reshape(v, im.out_shape()));
    return;
  }
  const std::int64_t d = im.norm_dim(im.int_arg(1, "dim"), im.rank(x));
  im.emit_out(op, {x}, {d, keepdim});
}

void variance(Importer& im, bool is_std) {
  const int x = im.tensor(0, "self");
  const std::string& ov = im.overload();
  double correction = 1;
  if (im.has(2, "correction")) correction = im.float_arg(2, "correction");
  else if (im.has(1, "unbiased") && ov != "dim" && ov != "correction") correction = im.bool_arg(1, "unbiased", true) ? 1 : 0;
  else if (im.has(2, "unbiased")) correction = im.bool_arg(2, "unbiased", true) ? 1 : 0;
  const auto dims = reduce_dims(im, x);
  const bool keepdim = im.bool_arg(3, "keepdim", false);
  const DType out = im.out_dtype();
  const int in = im.cast(x, out);
  if (!is_std) {
    im.emit_out(OpKind::Var, {in}, {dims, correction, keepdim});
    return;
  }
  const int v = im.emit(OpKind::Var, {in}, {dims, correction, keepdim}, out, im.out_shape());
  im.emit_out(OpKind::Sqrt, {v}, {});
}

void logsumexp(Importer& im) {
  const int x0 = im.tensor(0, "self");
  const DType out = im.out_dtype();
  const int x = im.cast(x0, dtype_is_floating(out) ? out : DType::kF32);
  const auto dims = reduce_dims(im, x);
  const bool keepdim = im.bool_arg(2, "keepdim", false);
  Shape kept = im.shape(x);
  for (auto d : dims) kept[static_cast<std::size_t>(d)] = Expr::constant(1);
  const DType dt = im.dtype(x);
  const int m = im.emit(OpKind::Amax, {x}, {dims, true}, dt, kept);
  // Rows that are all -inf: subtract 0 instead of -inf (PyTorch's masking).
  const int finite = im.emit(OpKind::Eq, {m, im.scalar(-HUGE_VAL, dt)}, {}, DType::kBool, kept);
  const int ms = im.emit(OpKind::Where, {finite, im.scalar(0, dt), m}, {}, dt, kept);
  const int sh = im.emit(OpKind::Sub, {x, ms}, {}, dt, im.shape(x));
  const int e = im.emit(OpKind::Exp, {sh}, {}, dt, im.shape(x));
  const int s = im.emit(OpKind::Sum, {e}, {dims, true, std::monostate{}}, dt, kept);
  const int l = im.emit(OpKind::Log, {s}, {}, dt, kept);
  const int r = im.emit(OpKind::Add, {l, ms}, {}, dt, kept);
  im.define(0, im.reshape(r, im.out_shape()));
  (void)keepdim;
}

// clamp(self, min?, max?) with scalar or tensor bounds.
void clamp(Importer& im, const char* lo_name, const char* hi_name) {
  const int x = im.tensor(0, "self");
  const DType out = im.out_dtype();
  const bool tensor_bounds = (im.has(1, lo_name) && im.operand(1, lo_name).is_tensor()) ||
                             (im.has(2, hi_name) && im.operand(2, hi_name).is_tensor());
  if (!tensor_bounds) {
    ir::Attr lo = std::monostate{}, hi = std::monostate{};
    if (im.has(1, lo_name)) lo = im.float_arg(1, lo_name);
    if (im.has(2, hi_name)) hi = im.float_arg(2, hi_name);
    im.emit_out(OpKind::Clamp, {im.cast(x, out)}, {lo, hi});
    return;
  }
  int v = im.cast(x, out);
  if (im.has(1, lo_name)) v = im.emit(OpKind::Maximum, {v, im.as_tensor(im.operand(1, lo_name), out)}, {}, out, im.out_shape());
  if (im.has(2, hi_name)) v = im.emit(OpKind::Minimum, {v, im.as_tensor(im.operand(2, hi_name), out)}, {}, out, im.out_shape());
  im.define(0, v);
}

void where(Importer& im) {
  const int cond = im.cast(im.tensor(0, "condition"), DType::kBool);
  const DType out = im.out_dtype();
  const int a = im.as_tensor(im.operand(1, "self"), out);
  const int b = im.as_tensor(im.operand(2, "other"), out);
  im.emit_out(OpKind::Where, {cond, a, b});
}

void masked_fill(Importer& im) {
  const int x = im.tensor(0, "self");
  const int mask = im.cast(im.tensor(1, "mask"), DType::kBool);
  const int value = im.as_tensor(im.operand(2, "value"), im.dtype(x));
  im.emit_out(OpKind::MaskedFill, {x, mask, value});
}

// A function of x built from other ops: f(x) with x already in the output dtype.
template <typename F>
void composite(Importer& im, F f) {
  const int x = im.cast(im.tensor(0, "self"), im.out_dtype());
  im.define(0, f(x, im.out_dtype(), im.shape(x)));
}

// f(a, b) of two operands (tensors or numbers) in the output dtype, built from other ops.
template <typename F>
void composite2(Importer& im, const char* rhs, F f) {
  const DType d = im.out_dtype();
  const int a = im.as_tensor(im.operand(0, "self"), d);
  const int b = im.as_tensor(im.operand(1, rhs), d);
  im.define(0, f(a, b, d, im.out_shape()));
}

// signbit(v) of a floating-point v: v < 0, or -0.0 (whose reciprocal is -inf). A NaN
// counts as positive whatever its sign bit.
int signbit_of(Importer& im, int v) {
  const DType d = im.dtype(v);
  const Shape s = im.shape(v);
  const int neg = im.emit(OpKind::Lt, {v, im.scalar(0, d)}, {}, DType::kBool, s);
  if (!dtype_is_floating(d)) return neg;
  const int r = im.emit(OpKind::Reciprocal, {v}, {}, d, s);
  const int neg_zero = im.emit(OpKind::Lt, {r, im.scalar(0, d)}, {}, DType::kBool, s);
  return im.emit(OpKind::LogicalOr, {neg, neg_zero}, {}, DType::kBool, s);
}

// elu(x) = scale * (x > 0 ? x : alpha * (exp(x * input_scale) - 1)), the form of selu and celu.
int elu_of(Importer& im, int x, DType d, const Shape& s, double alpha, double scale, double in_scale) {
  const int xs = in_scale == 1.0 ? x : im.emit(OpKind::Mul, {x, im.scalar(in_scale, d)}, {}, d, s);
  const int e = im.emit(OpKind::Exp, {xs}, {}, d, s);
  const int em1 = im.emit(OpKind::Sub, {e, im.scalar(1, d)}, {}, d, s);
  const int neg = im.emit(OpKind::Mul, {em1, im.scalar(alpha, d)}, {}, d, s);
  const int pos = im.emit(OpKind::Gt, {x, im.scalar(0, d)}, {}, DType::kBool, s);
  const int r = im.emit(OpKind::Where, {pos, x, neg}, {}, d, s);
  return scale == 1.0 ? r : im.emit(OpKind::Mul, {r, im.scalar(scale, d)}, {}, d, s);
}

void cast_like(Importer& im) {
  const int x = im.has(0, "self") ? im.tensor(0, "self") : im.tensor(0, "input");
  im.define(0, im.cast(x, im.out_dtype()));
}

}  // namespace

void register_elementwise(HandlerTable& t) {
  auto bin = [&](const char* name, OpKind op, Kind kind) { t[name] = [op, kind](Importer& im) { binary(im, op, kind); }; };
  bin("aten.add", OpKind::Add, Kind::kArith);
  bin("aten.sub", OpKind::Sub, Kind::kArith);
  bin("aten.mul", OpKind::Mul, Kind::kArith);
  bin("aten.multiply", OpKind::Mul, Kind::kArith);
  bin("aten.div", OpKind::Div, Kind::kArith);
  bin("aten.divide", OpKind::Div, Kind::kArith);
  bin("aten.true_divide", OpKind::Div, Kind::kArith);
  bin("aten.maximum", OpKind::Maximum, Kind::kArith);
  bin("aten.minimum", OpKind::Minimum, Kind::kArith);
  bin("aten.fmax", OpKind::Maximum, Kind::kArith);
  bin("aten.fmin", OpKind::Minimum, Kind::kArith);
  bin("aten.remainder", OpKind::Remainder, Kind::kArith);
  for (auto [name, op] : {std::pair{"aten.eq", OpKind::Eq}, {"aten.ne", OpKind::Ne}, {"aten.lt", OpKind::Lt},
                          {"aten.le", OpKind::Le}, {"aten.gt", OpKind::Gt}, {"aten.ge", OpKind::Ge},
                          {"aten.less", OpKind::Lt}, {"aten.less_equal", OpKind::Le}, {"aten.greater", OpKind::Gt},
                          {"aten.greater_equal", OpKind::Ge}, {"aten.not_equal", OpKind::Ne}}) {
    bin(name, op, Kind::kCompare);
  }
  bin("aten.logical_and", OpKind::LogicalAnd, Kind::kLogical);
  bin("aten.logical_or", OpKind::LogicalOr, Kind::kLogical);
  bin("aten.logical_xor", OpKind::LogicalXor, Kind::kLogical);
  // Bitwise ops: logical ops on bools, the bitwise kernels on integers.
  struct BitwiseName {
    const char* name;
    OpKind on_bool, on_int;
  };
  for (auto [name, on_bool, on_int] :
       {BitwiseName{"aten.bitwise_and", OpKind::LogicalAnd, OpKind::BitwiseAnd}, {"aten.__and__", OpKind::LogicalAnd, OpKind::BitwiseAnd},
        {"aten.bitwise_or", OpKind::LogicalOr, OpKind::BitwiseOr}, {"aten.__or__", OpKind::LogicalOr, OpKind::BitwiseOr},
        {"aten.bitwise_xor", OpKind::LogicalXor, OpKind::BitwiseXor}, {"aten.__xor__", OpKind::LogicalXor, OpKind::BitwiseXor}}) {
    t[name] = [on_bool, on_int](Importer& im) {
      if (im.out_dtype() == DType::kBool) {
        binary(im, on_bool, Kind::kLogical);
        return;
      }
      if (dtype_is_floating(im.out_dtype())) im.unsupported("bitwise ops on floating-point tensors");
      binary(im, on_int, Kind::kArith);
    };
  }
  for (auto [name, op] : {std::pair{"aten.bitwise_left_shift", OpKind::BitwiseLeftShift}, {"aten.__lshift__", OpKind::BitwiseLeftShift},
                          {"aten.bitwise_right_shift", OpKind::BitwiseRightShift}, {"aten.__rshift__", OpKind::BitwiseRightShift}}) {
    t[name] = [op](Importer& im) {
      const DType out = im.out_dtype();
      if (dtype_is_floating(out) || out == DType::kBool) im.unsupported("shifts of floating-point or bool tensors");
      binary(im, op, Kind::kArith);
    };
  }
  t["aten.floor_divide"] = [](Importer& im) {
    const DType out = im.out_dtype();
    const int a = im.as_tensor(im.operand(0, "self"), out);
    const int b = im.as_tensor(im.operand(1, "other"), out);
    im.emit_out(OpKind::Div, {a, b}, {std::string("floor")});
  };
  t["aten.rsub"] = [](Importer& im) {  // other - alpha * self
    const DType out = im.out_dtype();
    int a = im.as_tensor(im.operand(0, "self"), out);
    if (im.has(2, "alpha") && im.float_arg(2, "alpha") != 1.0) {
      a = im.emit(OpKind::Mul, {a, im.scalar(im.float_arg(2, "alpha"), out)}, {}, out, im.shape(a));
    }
    const int b = im.as_tensor(im.operand(1, "other"), out);
    im.emit_out(OpKind::Sub, {b, a});
  };
  t["aten.pow"] = [](Importer& im) {
    const DType out = im.out_dtype();
    const Operand base = im.operand(0, "self");
    const Operand exp = im.operand(1, "exponent");
    if (!exp.is_tensor() && !exp.symbolic && exp.number == 2.0 && base.is_tensor()) {
      const int x = im.cast(base.value, out);
      im.emit_out(OpKind::Mul, {x, x});
      return;
    }
    if (!exp.is_tensor() && !exp.symbolic && exp.number == 0.5 && base.is_tensor() && dtype_is_floating(out)) {
      im.emit_out(OpKind::Sqrt, {im.cast(base.value, out)});
      return;
    }
    im.emit_out(OpKind::Pow, {im.as_tensor(base, out), im.as_tensor(exp, out)});
  };
  t["aten.fmod"] = [](Importer& im) {  // a - trunc(a / b) * b
    const DType out = im.out_dtype();
    const int a = im.as_tensor(im.operand(0, "self"), out);
    const int b = im.as_tensor(im.operand(1, "other"), out);
    const Shape s = im.out_shape();
    const int q = im.emit(OpKind::Div, {a, b}, {std::string("trunc")}, out, s);
    const int p = im.emit(OpKind::Mul, {q, b}, {}, out, s);
    im.emit_out(OpKind::Sub, {a, p});
  };

  for (auto [name, op] : {std::pair{"aten.neg", OpKind::Neg}, {"aten.negative", OpKind::Neg}, {"aten.abs", OpKind::Abs},
                          {"aten.exp", OpKind::Exp}, {"aten.log", OpKind::Log}, {"aten.sqrt", OpKind::Sqrt},
                          {"aten.rsqrt", OpKind::Rsqrt}, {"aten.reciprocal", OpKind::Reciprocal}, {"aten.sin", OpKind::Sin},
                          {"aten.cos", OpKind::Cos}, {"aten.tanh", OpKind::Tanh}, {"aten.sigmoid", OpKind::Sigmoid},
                          {"aten.relu", OpKind::Relu}, {"aten.silu", OpKind::Silu}, {"aten.hardswish", OpKind::Hardswish},
                          {"aten.hardsigmoid", OpKind::Hardsigmoid}, {"aten.erf", OpKind::Erf}, {"aten.floor", OpKind::Floor},
                          {"aten.ceil", OpKind::Ceil}, {"aten.sign", OpKind::Sign}, {"aten.sgn", OpKind::Sign},
                          {"aten.atan", OpKind::Atan}, {"aten.asin", OpKind::Asin}, {"aten.acos", OpKind::Acos}, {"aten.tan", OpKind::Tan}, {"aten.sinh", OpKind::Sinh}, {"aten.cosh", OpKind::Cosh}, {"aten.asinh", OpKind::Asinh}, {"aten.acosh", OpKind::Acosh}, {"aten.atanh", OpKind::Atanh}}) {
    t[name] = [op](Importer& im) { unary(im, op); };
  }
  t["aten.round"] = [](Importer& im) {
    const std::int64_t decimals = im.has(1, "decimals") ? im.int_arg(1, "decimals") : 0;
    if (decimals == 0) {
      unary(im, OpKind::Round);
      return;
    }
    // PyTorch: nearbyint(x * 10^d) / 10^d, or nearbyint(x / 10^-d) * 10^-d for d < 0.
    if (!dtype_is_floating(im.out_dtype())) im.unsupported("round with decimals of an integer tensor");
    composite(im, [&](int x, DType d, const Shape& s) {
      const int ten = im.scalar(std::pow(10.0, static_cast<double>(std::abs(decimals))), d);
      const int up = decimals > 0 ? im.emit(OpKind::Mul, {x, ten}, {}, d, s) : im.emit(OpKind::Div, {x, ten}, {std::monostate{}}, d, s);
      const int r = im.emit(OpKind::Round, {up}, {}, d, s);
      return decimals > 0 ? im.emit(OpKind::Div, {r, ten}, {std::monostate{}}, d, s) : im.emit(OpKind::Mul, {r, ten}, {}, d, s);
    });
  };
  t["aten.gelu"] = [](Importer& im) { unary(im, OpKind::Gelu, {im.string_arg(1, "approximate", "none")}); };
  t["aten.leaky_relu"] = [](Importer& im) { unary(im, OpKind::LeakyRelu, {im.float_arg(1, "negative_slope", 0.01)}); };
  t["aten.logical_not"] = [](Importer& im) { im.emit_out(OpKind::LogicalNot, {im.tensor(0, "self")}); };
  t["aten.bitwise_not"] = [](Importer& im) {
    const int x = im.tensor(0, "self");
    if (im.dtype(x) == DType::kBool) {
      im.emit_out(OpKind::LogicalNot, {x});
      return;
    }
    if (dtype_is_floating(im.dtype(x))) im.unsupported("bitwise_not of a floating-point tensor");
    im.emit_out(OpKind::BitwiseNot, {x});
  };
  t["aten.clamp"] = [](Importer& im) { clamp(im, "min", "max"); };
  t["aten.clip"] = [](Importer& im) { clamp(im, "min", "max"); };
  t["aten.clamp_min"] = [](Importer& im) { clamp(im, "min", "__none__"); };
  t["aten.clamp_max"] = [](Importer& im) {
    const int x = im.tensor(0, "self");
    const Operand hi = im.operand(1, "max");
    const DType out = im.out_dtype();
    if (hi.is_tensor()) {
      im.emit_out(OpKind::Minimum, {im.cast(x, out), im.cast(hi.value, out)});
    } else {
      im.emit_out(OpKind::Clamp, {im.cast(x, out)}, {std::monostate{}, im.float_arg(1, "max")});
    }
  };
  t["aten.hardtanh"] = [](Importer& im) {
    const int x = im.tensor(0, "self");
    im.emit_out(OpKind::Clamp, {im.cast(x, im.out_dtype())}, {im.float_arg(1, "min_val", -1.0), im.float_arg(2, "max_val", 1.0)});
  };
  t["aten.relu6"] = [](Importer& im) {
    im.emit_out(OpKind::Clamp, {im.cast(im.tensor(0, "self"), im.out_dtype())}, {0.0, 6.0});
  };
  t["aten.elu"] = [](Importer& im) {
    const double alpha = im.float_arg(1, "alpha", 1.0), scale = im.float_arg(2, "scale", 1.0), in_scale = im.float_arg(3, "input_scale", 1.0);
    composite(im, [&](int x, DType d, const Shape& s) { return elu_of(im, x, d, s, alpha, scale, in_scale); });
  };
  t["aten.selu"] = [](Importer& im) {
    composite(im, [&](int x, DType d, const Shape& s) {
      return elu_of(im, x, d, s, 1.6732632423543772848170429916717, 1.0507009873554804934193349852946, 1.0);
    });
  };
  t["aten.celu"] = [](Importer& im) {
    const double alpha = im.float_arg(1, "alpha", 1.0);
    if (alpha == 0.0) im.bad("celu with alpha 0");
    composite(im, [&](int x, DType d, const Shape& s) { return elu_of(im, x, d, s, alpha, 1.0, 1.0 / alpha); });
  };
  t["aten.hardshrink"] = [](Importer& im) {  // |x| > lambda ? x : 0
    const double lambda = im.float_arg(1, "lambd", 0.5);
    composite(im, [&](int x, DType d, const Shape& s) {
      const int a = im.emit(OpKind::Abs, {x}, {}, d, s);
      const int keep = im.emit(OpKind::Gt, {a, im.scalar(lambda, d)}, {}, DType::kBool, s);
      return im.emit(OpKind::Where, {keep, x, im.scalar(0, d)}, {}, d, s);
    });
  };
  t["aten.softshrink"] = [](Importer& im) {  // x - clamp(x, -lambda, lambda)
    const double lambda = im.float_arg(1, "lambd", 0.5);
    composite(im, [&](int x, DType d, const Shape& s) {
      const int c = im.emit(OpKind::Clamp, {x}, {-lambda, lambda}, d, s);
      return im.emit(OpKind::Sub, {x, c}, {}, d, s);
    });
  };
  t["aten.threshold"] = [](Importer& im) {  // x > threshold ? x : value
    const DType d = im.out_dtype();
    const int x = im.cast(im.tensor(0, "self"), d);
    const int th = im.as_tensor(im.operand(1, "threshold"), d);
    const int value = im.as_tensor(im.operand(2, "value"), d);
    const int keep = im.emit(OpKind::Gt, {x, th}, {}, DType::kBool, im.shape(x));
    im.emit_out(OpKind::Where, {keep, x, value});
  };
  for (const char* name : {"aten.log_sigmoid", "aten.log_sigmoid_forward"}) {
    t[name] = [](Importer& im) {  // min(x, 0) - log(1 + exp(-|x|))
      if (im.num_outputs() > 1 && im.output_used(1)) im.unsupported("the buffer output of log_sigmoid_forward");
      composite(im, [&](int x, DType d, const Shape& s) {
        const int lo = im.emit(OpKind::Minimum, {x, im.scalar(0, d)}, {}, d, s);
        const int a = im.emit(OpKind::Abs, {x}, {}, d, s);
        const int e = im.emit(OpKind::Exp, {im.emit(OpKind::Neg, {a}, {}, d, s)}, {}, d, s);
        const int l = im.emit(OpKind::Log, {im.emit(OpKind::Add, {e, im.scalar(1, d)}, {}, d, s)}, {}, d, s);
        return im.emit(OpKind::Sub, {lo, l}, {}, d, s);
      });
    };
  }
  // rrelu in eval mode is leaky_relu with the mean slope; training mode draws random slopes.
  t["aten.rrelu"] = [](Importer& im) {
    if (im.bool_arg(3, "training", false)) im.unsupported("rrelu in training mode (random slopes; export the model in eval mode)");
    const double slope = (im.float_arg(1, "lower", 1.0 / 8) + im.float_arg(2, "upper", 1.0 / 3)) / 2;
    unary(im, OpKind::LeakyRelu, {slope});
  };
  for (const char* name : {"aten.rrelu_with_noise", "aten.rrelu_with_noise_functional"}) {
    t[name] = [](Importer& im) {
      if (im.bool_arg(4, "training", false)) im.unsupported("rrelu in training mode (random slopes; export the model in eval mode)");
      if (im.num_outputs() > 1 && im.output_used(1)) im.unsupported("the noise output of rrelu_with_noise");
      const double slope = (im.float_arg(2, "lower", 1.0 / 8) + im.float_arg(3, "upper", 1.0 / 3)) / 2;
      unary(im, OpKind::LeakyRelu, {slope});
    };
  }
  t["aten.softsign"] = [](Importer& im) {  // x / (1 + |x|)
    composite(im, [&](int x, DType d, const Shape& s) {
      const int a = im.emit(OpKind::Add, {im.emit(OpKind::Abs, {x}, {}, d, s), im.scalar(1, d)}, {}, d, s);
      return im.emit(OpKind::Div, {x, a}, {std::monostate{}}, d, s);
    });
  };
  t["aten.tanhshrink"] = [](Importer& im) {  // x - tanh(x)
    composite(im, [&](int x, DType d, const Shape& s) {
      return im.emit(OpKind::Sub, {x, im.emit(OpKind::Tanh, {x}, {}, d, s)}, {}, d, s);
    });
  };
  t["aten.log10"] = [](Importer& im) {
    composite(im, [&](int x, DType d, const Shape& s) {
      const int l = im.emit(OpKind::Log, {x}, {}, d, s);
      return im.emit(OpKind::Mul, {l, im.scalar(1.0 / std::log(10.0), d)}, {}, d, s);
    });
  };
  t["aten.exp2"] = [](Importer& im) {  // 2^x, exact at integers as PyTorch's
    composite(im, [&](int x, DType d, const Shape& s) { return im.emit(OpKind::Pow, {im.scalar(2, d), x}, {}, d, s); });
  };
  t["aten.frac"] = [](Importer& im) {  // x - trunc(x)
    composite(im, [&](int x, DType d, const Shape& s) {
      const int a = im.emit(OpKind::Abs, {x}, {}, d, s);
      const int f = im.emit(OpKind::Floor, {a}, {}, d, s);
      const int tr = im.emit(OpKind::Mul, {f, im.emit(OpKind::Sign, {x}, {}, d, s)}, {}, d, s);
      return im.emit(OpKind::Sub, {x, tr}, {}, d, s);
    });
  };
  t["aten.logit"] = [](Importer& im) {  // log(z / (1 - z)), z = clamp(x, eps, 1 - eps) when eps is given
    const std::optional<double> eps = im.has(1, "eps") ? std::optional<double>(im.float_arg(1, "eps")) : std::nullopt;
    composite(im, [&](int x, DType d, const Shape& s) {
      const int z = eps ? im.emit(OpKind::Clamp, {x}, {*eps, 1.0 - *eps}, d, s) : x;
      const int one_minus = im.emit(OpKind::Sub, {im.scalar(1, d), z}, {}, d, s);
      return im.emit(OpKind::Log, {im.emit(OpKind::Div, {z, one_minus}, {std::monostate{}}, d, s)}, {}, d, s);
    });
  };
  t["aten.atan2"] = [](Importer& im) {  // atan(y / x), moved to the right quadrant
    composite2(im, "other", [&](int y, int x, DType d, const Shape& s) {
      const Shape ys = im.shape(y), xs = im.shape(x);
      const int q = im.emit(OpKind::Atan, {im.emit(OpKind::Div, {y, x}, {std::monostate{}}, d, s)}, {}, d, s);
      const int x_neg = signbit_of(im, x), y_neg = signbit_of(im, y);
      const int pi = im.scalar(M_PI, d), neg_pi = im.scalar(-M_PI, d);
      const int turn = im.emit(OpKind::Where, {y_neg, neg_pi, pi}, {}, d, ys);
      const int moved = im.emit(OpKind::Add, {q, turn}, {}, d, s);
      const int r = im.emit(OpKind::Where, {x_neg, moved, q}, {}, d, s);
      // atan2(+-0, +0) = +-0 and atan2(+-0, -0) = +-pi: 0 / 0 gave NaN above.
      const int y_zero = im.emit(OpKind::Eq, {y, im.scalar(0, d)}, {}, DType::kBool, ys);
      const int x_zero = im.emit(OpKind::Eq, {x, im.scalar(0, d)}, {}, DType::kBool, xs);
      const int both = im.emit(OpKind::LogicalAnd, {y_zero, x_zero}, {}, DType::kBool, s);
      const int at_zero = im.emit(OpKind::Where, {x_neg, turn, y}, {}, d, s);
      return im.emit(OpKind::Where, {both, at_zero, r}, {}, d, s);
    });
  };
  t["aten.hypot"] = [](Importer& im) {
    composite2(im, "other", [&](int a, int b, DType d, const Shape& s) {
      const int aa = im.emit(OpKind::Mul, {a, a}, {}, d, im.shape(a));
      const int bb = im.emit(OpKind::Mul, {b, b}, {}, d, im.shape(b));
      return im.emit(OpKind::Sqrt, {im.emit(OpKind::Add, {aa, bb}, {}, d, s)}, {}, d, s);
    });
  };
  t["aten.copysign"] = [](Importer& im) {  // |a| with b's sign
    composite2(im, "other", [&](int a, int b, DType d, const Shape& s) {
      const int mag = im.emit(OpKind::Abs, {a}, {}, d, im.shape(a));
      const int neg = im.emit(OpKind::Neg, {mag}, {}, d, im.shape(a));
      return im.emit(OpKind::Where, {signbit_of(im, b), neg, mag}, {}, d, s);
    });
  };
  t["aten.signbit"] = [](Importer& im) {
    const int x = im.tensor(0, "self");
    if (im.dtype(x) == DType::kBool) {
      im.define(0, im.emit(OpKind::Ne, {x, x}, {}, DType::kBool, im.shape(x)));
      return;
    }
    im.define(0, signbit_of(im, x));
  };
  t["aten.isfinite"] = [](Importer& im) {  // x == x and |x| != inf
    const int x = im.tensor(0, "self");
    const DType d = im.dtype(x);
    const Shape s = im.shape(x);
    const int not_nan = im.emit(OpKind::Eq, {x, x}, {}, DType::kBool, s);
    if (!dtype_is_floating(d)) {
      im.define(0, not_nan);
      return;
    }
    const int a = im.emit(OpKind::Abs, {x}, {}, d, s);
    const int not_inf = im.emit(OpKind::Ne, {a, im.scalar(HUGE_VAL, d)}, {}, DType::kBool, s);
    im.emit_out(OpKind::LogicalAnd, {not_nan, not_inf});
  };
  t["aten.nan_to_num"] = [](Importer& im) {
    const int x = im.tensor(0, "self");
    const DType d = im.dtype(x);
    if (!dtype_is_floating(d)) {
      im.define(0, x);
      return;
    }
    const double biggest = d == DType::kF64 ? std::numeric_limits<double>::max()
                          : d == DType::kF16 ? 65504.0
                          : d == DType::kBF16 ? 3.3895313892515355e38
                                              : static_cast<double>(std::numeric_limits<float>::max());
    const double nan = im.has(1, "nan") ? im.float_arg(1, "nan") : 0.0;
    const double posinf = im.has(2, "posinf") ? im.float_arg(2, "posinf") : biggest;
    const double neginf = im.has(3, "neginf") ? im.float_arg(3, "neginf") : -biggest;
    const Shape s = im.shape(x);
    const int is_nan = im.emit(OpKind::Ne, {x, x}, {}, DType::kBool, s);
    const int is_pos = im.emit(OpKind::Eq, {x, im.scalar(HUGE_VAL, d)}, {}, DType::kBool, s);
    const int is_neg = im.emit(OpKind::Eq, {x, im.scalar(-HUGE_VAL, d)}, {}, DType::kBool, s);
    int r = im.emit(OpKind::Where, {is_nan, im.scalar(nan, d), x}, {}, d, s);
    r = im.emit(OpKind::Where, {is_pos, im.scalar(posinf, d), r}, {}, d, s);
    im.emit_out(OpKind::Where, {is_neg, im.scalar(neginf, d), r});
  };
  t["aten.addcmul"] = [](Importer& im) {  // self + value * t1 * t2
    const DType d = im.out_dtype();
    const int x = im.cast(im.tensor(0, "self"), d), a = im.cast(im.tensor(1, "tensor1"), d), b = im.cast(im.tensor(2, "tensor2"), d);
    const double value = im.has(3, "value") ? im.float_arg(3, "value") : 1.0;
    const Shape s = im.out_shape();
    int p = im.emit(OpKind::Mul, {a, b}, {}, d, s);
    if (value != 1.0) p = im.emit(OpKind::Mul, {p, im.scalar(value, d)}, {}, d, s);
    im.emit_out(OpKind::Add, {x, p});
  };
  t["aten.addcdiv"] = [](Importer& im) {  // self + value * t1 / t2
    const DType d = im.out_dtype();
    const int x = im.cast(im.tensor(0, "self"), d), a = im.cast(im.tensor(1, "tensor1"), d), b = im.cast(im.tensor(2, "tensor2"), d);
    const double value = im.has(3, "value") ? im.float_arg(3, "value") : 1.0;
    const Shape s = im.out_shape();
    int q = im.emit(OpKind::Div, {a, b}, {std::monostate{}}, d, s);
    if (value != 1.0) q = im.emit(OpKind::Mul, {q, im.scalar(value, d)}, {}, d, s);
    im.emit_out(OpKind::Add, {x, q});
  };
  t["aten.count_nonzero"] = [](Importer& im) {
    const int x = im.tensor(0, "self");
    const Shape xs = im.shape(x);
    std::vector<std::int64_t> dims;
    if (im.has(1, "dim")) dims = im.int_list(1, "dim");
    if (dims.empty()) for (std::int64_t k = 0; k < im.rank(x); ++k) dims.push_back(k);
    for (auto& k : dims) k = im.norm_dim(k, im.rank(x));
    std::sort(dims.begin(), dims.end());
    const int nz = im.cast(im.emit(OpKind::Ne, {x, im.scalar(0, im.dtype(x))}, {}, DType::kBool, xs), DType::kI64);
    im.emit_out(OpKind::Sum, {nz}, {dims, false, std::monostate{}});
  };
  t["aten.deg2rad"] = [](Importer& im) {
    composite(im, [&](int x, DType d, const Shape& s) { return im.emit(OpKind::Mul, {x, im.scalar(M_PI / 180.0, d)}, {}, d, s); });
  };
  t["aten.rad2deg"] = [](Importer& im) {
    composite(im, [&](int x, DType d, const Shape& s) { return im.emit(OpKind::Mul, {x, im.scalar(180.0 / M_PI, d)}, {}, d, s); });
  };
  t["aten.heaviside"] = [](Importer& im) {  // 0 below 0, values at 0, 1 above
    composite2(im, "values", [&](int x, int v, DType d, const Shape& s) {
      const Shape xs = im.shape(x);
      const int step = im.cast(im.emit(OpKind::Gt, {x, im.scalar(0, d)}, {}, DType::kBool, xs), d);
      const int zero = im.emit(OpKind::Eq, {x, im.scalar(0, d)}, {}, DType::kBool, xs);
      return im.emit(OpKind::Where, {zero, v, step}, {}, d, s);
    });
  };
  for (const char* name : {"aten.erfc", "aten.special_erfc"}) {
    t[name] = [](Importer& im) {  // 1 - erf(x)
      composite(im, [&](int x, DType d, const Shape& s) {
        return im.emit(OpKind::Sub, {im.scalar(1, d), im.emit(OpKind::Erf, {x}, {}, d, s)}, {}, d, s);
      });
    };
  }
  t["aten.float_power"] = [](Importer& im) {  // pow in float64
    const Operand base = im.operand(0, "self"), exp = im.operand(1, "exponent");
    im.emit_out(OpKind::Pow, {im.as_tensor(base, DType::kF64), im.as_tensor(exp, DType::kF64)});
  };
  t["aten.xlogy"] = [](Importer& im) {  // x * log(y); 0 where x == 0 unless y is NaN
    composite2(im, "other", [&](int x, int y, DType d, const Shape& s) {
      const int p = im.emit(OpKind::Mul, {x, im.emit(OpKind::Log, {y}, {}, d, im.shape(y))}, {}, d, s);
      const int x_zero = im.emit(OpKind::Eq, {x, im.scalar(0, d)}, {}, DType::kBool, im.shape(x));
      const int y_num = im.emit(OpKind::Eq, {y, y}, {}, DType::kBool, im.shape(y));
      const int zero = im.emit(OpKind::LogicalAnd, {x_zero, y_num}, {}, DType::kBool, s);
      return im.emit(OpKind::Where, {zero, im.scalar(0, d), p}, {}, d, s);
    });
  };
  t["aten.sinc"] = [](Importer& im) {  // sin(pi x) / (pi x), 1 at 0
    composite(im, [&](int x, DType d, const Shape& s) {
      const int px = im.emit(OpKind::Mul, {x, im.scalar(M_PI, d)}, {}, d, s);
      const int q = im.emit(OpKind::Div, {im.emit(OpKind::Sin, {px}, {}, d, s), px}, {std::monostate{}}, d, s);
      const int zero = im.emit(OpKind::Eq, {x, im.scalar(0, d)}, {}, DType::kBool, s);
      return im.emit(OpKind::Where, {zero, im.scalar(1, d), q}, {}, d, s);
    });
  };
  t["aten.logaddexp"] = [](Importer& im) {  // max + log(1 + exp(-|a - b|)); a where a == b = +-inf
    composite2(im, "other", [&](int a, int b, DType d, const Shape& s) {
      const int m = im.emit(OpKind::Maximum, {a, b}, {}, d, s);
      const int diff = im.emit(OpKind::Abs, {im.emit(OpKind::Sub, {a, b}, {}, d, s)}, {}, d, s);
      const int e = im.emit(OpKind::Exp, {im.emit(OpKind::Neg, {diff}, {}, d, s)}, {}, d, s);
      const int l = im.emit(OpKind::Log, {im.emit(OpKind::Add, {e, im.scalar(1, d)}, {}, d, s)}, {}, d, s);
      const int r = im.emit(OpKind::Add, {m, l}, {}, d, s);
      const int same = im.emit(OpKind::Eq, {a, b}, {}, DType::kBool, s);
      const int inf = im.emit(OpKind::Eq, {im.emit(OpKind::Abs, {a}, {}, d, im.shape(a)), im.scalar(HUGE_VAL, d)}, {}, DType::kBool,
                              im.shape(a));
      const int both_inf = im.emit(OpKind::LogicalAnd, {same, inf}, {}, DType::kBool, s);
      return im.emit(OpKind::Where, {both_inf, m, r}, {}, d, s);
    });
  };
  t["aten.lerp"] = [](Importer& im) {  // PyTorch's two forms: a + w (b - a) for |w| < 0.5, else b - (1 - w)(b - a)
    const DType d = im.out_dtype();
    const int a = im.cast(im.tensor(0, "self"), d);
    const int b = im.cast(im.tensor(1, "end"), d);
    const Operand w = im.operand(2, "weight");
    const Shape s = im.out_shape();
    const int diff = im.emit(OpKind::Sub, {b, a}, {}, d, s);
    if (!w.is_tensor()) {
      if (w.symbolic) im.unsupported("lerp with a symbolic weight");
      const bool high = std::abs(w.number) >= 0.5;
      const int p = im.emit(OpKind::Mul, {diff, im.scalar(high ? w.number - 1 : w.number, d)}, {}, d, s);
      im.emit_out(OpKind::Add, {p, high ? b : a});
      return;
    }
    const int wt = im.cast(w.value, d);
    const Shape ws = im.shape(wt);
    const int high = im.emit(OpKind::Ge, {im.emit(OpKind::Abs, {wt}, {}, d, ws), im.scalar(0.5, d)}, {}, DType::kBool, ws);
    const int coef = im.emit(OpKind::Where, {high, im.emit(OpKind::Sub, {wt, im.scalar(1, d)}, {}, d, ws), wt}, {}, d, ws);
    const int base = im.emit(OpKind::Where, {high, b, a}, {}, d, s);
    im.emit_out(OpKind::Add, {im.emit(OpKind::Mul, {coef, diff}, {}, d, s), base});
  };
  t["aten.softplus"] = [](Importer& im) {
    const double beta = im.float_arg(1, "beta", 1.0), threshold = im.float_arg(2, "threshold", 20.0);
    composite(im, [&](int x, DType d, const Shape& s) {
      const int bx = beta == 1.0 ? x : im.emit(OpKind::Mul, {x, im.scalar(beta, d)}, {}, d, s);
      const int e = im.emit(OpKind::Exp, {bx}, {}, d, s);
      const int e1 = im.emit(OpKind::Add, {e, im.scalar(1, d)}, {}, d, s);
      int l = im.emit(OpKind::Log, {e1}, {}, d, s);
      if (beta != 1.0) l = im.emit(OpKind::Div, {l, im.scalar(beta, d)}, {std::monostate{}}, d, s);
      const int big = im.emit(OpKind::Gt, {bx, im.scalar(threshold, d)}, {}, DType::kBool, s);
      return im.emit(OpKind::Where, {big, x, l}, {}, d, s);
    });
  };
  t["aten.mish"] = [](Importer& im) {
    composite(im, [&](int x, DType d, const Shape& s) {
      const int e = im.emit(OpKind::Exp, {x}, {}, d, s);
      const int e1 = im.emit(OpKind::Add, {e, im.scalar(1, d)}, {}, d, s);
      const int sp = im.emit(OpKind::Log, {e1}, {}, d, s);
      const int th = im.emit(OpKind::Tanh, {sp}, {}, d, s);
      return im.emit(OpKind::Mul, {x, th}, {}, d, s);
    });
  };
  t["aten.square"] = [](Importer& im) {
    composite(im, [&](int x, DType d, const Shape& s) { return im.emit(OpKind::Mul, {x, x}, {}, d, s); });
  };
  t["aten.log2"] = [](Importer& im) {
    composite(im, [&](int x, DType d, const Shape& s) {
      const int l = im.emit(OpKind::Log, {x}, {}, d, s);
      return im.emit(OpKind::Mul, {l, im.scalar(1.0 / std::log(2.0), d)}, {}, d, s);
    });
  };
  t["aten.log1p"] = [](Importer& im) {
    composite(im, [&](int x, DType d, const Shape& s) {
      return im.emit(OpKind::Log, {im.emit(OpKind::Add, {x, im.scalar(1, d)}, {}, d, s)}, {}, d, s);
    });
  };
  t["aten.expm1"] = [](Importer& im) {
    composite(im, [&](int x, DType d, const Shape& s) {
      return im.emit(OpKind::Sub, {im.emit(OpKind::Exp, {x}, {}, d, s), im.scalar(1, d)}, {}, d, s);
    });
  };
  t["aten.trunc"] = [](Importer& im) {
    composite(im, [&](int x, DType d, const Shape& s) {
      const int a = im.emit(OpKind::Abs, {x}, {}, d, s);
      const int f = im.emit(OpKind::Floor, {a}, {}, d, s);
      const int sg = im.emit(OpKind::Sign, {x}, {}, d, s);
      return im.emit(OpKind::Mul, {f, sg}, {}, d, s);
    });
  };
  t["aten.isnan"] = [](Importer& im) {
    const int x = im.tensor(0, "self");
    im.emit_out(OpKind::Ne, {x, x});
  };
  t["aten.isinf"] = [](Importer& im) {
    const int x = im.tensor(0, "self");
    const DType d = im.dtype(x);
    const int a = im.emit(OpKind::Abs, {x}, {}, d, im.shape(x));
    im.emit_out(OpKind::Eq, {a, im.scalar(HUGE_VAL, d)});
  };

  t["aten.where"] = [](Importer& im) {
    if (im.overload() != "default") {
      where(im);
      return;
    }
    // where(condition): one index tensor per dim, the columns of nonzero(condition).
    const int cond = im.tensor(0, "condition");
    const std::int64_t r = im.rank(cond);
    if (r == 0 || static_cast<std::int64_t>(im.num_outputs()) != r) im.unsupported("where(condition) of a 0-d condition");
    const Expr count = im.out_shape(0)[0];
    const int nz = im.emit(OpKind::Nonzero, {cond}, {}, DType::kI64, {count, Expr::constant(r)});
    for (std::int64_t k = 0; k < r; ++k) {
      const int col = im.emit(OpKind::Slice, {nz}, {std::int64_t{1}, Expr::constant(k), Expr::constant(k + 1), std::int64_t{1}}, DType::kI64,
                              {count, Expr::constant(1)});
      im.define(static_cast<std::size_t>(k), im.reshape(col, {count}));
    }
  };
  t["aten.masked_fill"] = masked_fill;

  for (auto [name, op] : {std::pair{"aten.sum", OpKind::Sum}, {"aten.mean", OpKind::Mean}, {"aten.amax", OpKind::Amax},
                          {"aten.amin", OpKind::Amin}, {"aten.prod", OpKind::Prod}, {"aten.any", OpKind::Any},
                          {"aten.all", OpKind::All}}) {
    t[name] = [op](Importer& im) { reduction(im, op); };
  }
  t["aten.max"] = [](Importer& im) { max_min(im, true); };
  t["aten.min"] = [](Importer& im) { max_min(im, false); };
  t["aten.argmax"] = [](Importer& im) { arg_extreme(im, OpKind::Argmax); };
  t["aten.argmin"] = [](Importer& im) { arg_extreme(im, OpKind::Argmin); };
  t["aten.var"] = [](Importer& im) { variance(im, false); };
  t["aten.std"] = [](Importer& im) { variance(im, true); };
  // var_mean / std_mean: (var or std, mean) over the same dims.
  for (auto [name, is_std] : {std::pair{"aten.var_mean", false}, {"aten.std_mean", true}}) {
    t[name] = [is_std](Importer& im) {
      variance(im, is_std);
      const int x = im.tensor(0, "self");
      const DType out = im.out_dtype(1);
      im.emit_out(OpKind::Mean, {im.cast(x, out)}, {reduce_dims(im, x), im.bool_arg(3, "keepdim", false)}, 1);
    };
  }
  t["aten.aminmax"] = [](Importer& im) {  // (amin, amax) over one dim, or over all
    const int x = im.tensor(0, "self");
    std::vector<std::int64_t> dims;
    if (im.has(1, "dim")) dims.push_back(im.norm_dim(im.int_arg(1, "dim"), im.rank(x)));
    else for (std::int64_t d = 0; d < im.rank(x); ++d) dims.push_back(d);
    const bool keepdim = im.bool_arg(2, "keepdim", false);
    im.emit_out(OpKind::Amin, {x}, {dims, keepdim}, 0);
    im.emit_out(OpKind::Amax, {x}, {dims, keepdim}, 1);
  };
  t["aten.logsumexp"] = logsumexp;
  t["aten.cumsum"] = [](Importer& im) {
    const int x = im.tensor(0, "self");
    const DType out = im.out_dtype();
    const int in = dtype_is_floating(out) ? im.cast(x, out) : x;
    im.emit_out(OpKind::Cumsum, {in}, {im.norm_dim(im.int_arg(1, "dim"), im.rank(x))});
  };

  // Conversions and aliases: values are immutable, so copies and views of the same data
  // are the same value.
  for (const char* name : {"aten._to_copy", "aten.to", "aten.type_as", "aten._to_dim_order_copy", "aten.clone",
                           "aten.contiguous", "aten.detach", "aten.detach_", "aten.alias", "aten.lift_fresh_copy",
                           "aten.lift_fresh", "aten.dropout", "aten.dropout_", "aten.feature_dropout", "aten.alpha_dropout",
                           "aten.feature_alpha_dropout", "aten.native_dropout", "aten.lift", "aten.alias_copy",
                           "aten.detach_copy", "aten.positive", "aten._assert_tensor_metadata_copy", "aten.resolve_conj",
                           "aten.resolve_neg"}) {
    t[name] = [](Importer& im) {
      cast_like(im);
      if (im.num_outputs() > 1 && im.output_used(1)) im.unsupported("the dropout mask output");
    };
  }
}

}  // namespace kiln::pt2
