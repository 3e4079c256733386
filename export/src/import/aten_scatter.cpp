// aten scatter family (scatter, scatter_add, scatter_reduce, index_add, index_fill,
// masked_scatter, max_unpool2d, embedding_bag) and searches and scans (bucketize,
// searchsorted, median, kthvalue, cummax / cummin, cumprod, logcumsumexp), by
// decomposition into Kiln's ops:
//
// - scatter / scatter_add / scatter_reduce sum and mean: index_put on the full index grid
//   (arange on every dim but `dim`, where `index` goes), accumulate=True for the sums (the
//   index_put kernel adds duplicate indices one by one). The index is first read through
//   index_select(arange(self.size(dim)), index), which fails at run time (kInvalidInput)
//   for an index outside [0, size), negative ones included, as PyTorch does.
// - scatter_reduce prod / amax / amin (and scatter's reduce='multiply'): a one-hot of the
//   index over self.size(dim) and a masked reduction; static sizes, at most 2^24 one-hot
//   elements.
// - searches: counts of comparisons against the boundaries (exactly the binary search's
//   answer for sorted boundaries, NaN inputs included); median / kthvalue: topk, then the
//   k-th; scans: log2(n) doubling steps (Hillis-Steele) along a dim of static size.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "import/importer.h"

namespace kiln::pt2 {
namespace {

using sym::Expr;

Expr c(std::int64_t v) { return Expr::constant(v); }

// The most one-hot elements (index positions x self.size(dim)) a decomposition builds.
constexpr std::int64_t kMaxOneHot = std::int64_t{1} << 24;

// numpy broadcasting of two shapes (a dim of 1 takes the other's size).
Shape broadcast(const Shape& a, const Shape& b) {
  const std::size_t r = std::max(a.size(), b.size());
  Shape out(r, c(1));
  for (std::size_t i = 0; i < r; ++i) {
    const Expr ea = i + a.size() >= r ? a[i + a.size() - r] : c(1);
    const Expr eb = i + b.size() >= r ? b[i + b.size() - r] : c(1);
    out[i] = ea.constant_value() == 1 ? eb : ea;
  }
  return out;
}

int binary(Importer& im, OpKind op, int a, int b, std::optional<DType> dtype = std::nullopt) {
  return im.emit(op, {a, b}, {}, dtype.value_or(im.dtype(a)), broadcast(im.shape(a), im.shape(b)));
}
int compare(Importer& im, OpKind op, int a, int b) { return binary(im, op, a, b, DType::kBool); }
int unary(Importer& im, OpKind op, int a) { return im.emit(op, {a}, {}, im.dtype(a), im.shape(a)); }
int where(Importer& im, int cond, int a, int b) {
  return im.emit(OpKind::Where, {cond, a, b}, {}, im.dtype(a), broadcast(broadcast(im.shape(cond), im.shape(a)), im.shape(b)));
}
int logical_not(Importer& im, int a) { return im.emit(OpKind::LogicalNot, {a}, {}, DType::kBool, im.shape(a)); }
int nan_mask(Importer& im, int a) { return compare(im, OpKind::Ne, a, a); }

// Reduction of `x` over `dims` (kept or dropped).
int reduce_op(Importer& im, OpKind op, int x, std::vector<std::int64_t> dims, bool keepdim, std::optional<DType> dtype = std::nullopt) {
  Shape s;
  const Shape in = im.shape(x);
  for (std::size_t i = 0; i < in.size(); ++i) {
    const bool reduced = std::find(dims.begin(), dims.end(), static_cast<std::int64_t>(i)) != dims.end();
    if (!reduced) s.push_back(in[i]);
    else if (keepdim) s.push_back(c(1));
  }
  std::vector<ir::Attr> attrs{dims, keepdim};
  DType dt = im.dtype(x);
  if (op == OpKind::Any || op == OpKind::All) dt = DType::kBool;
  if (op == OpKind::Sum && dtype) {
    dt = *dtype;
    attrs.emplace_back(*dtype);
  } else if (op == OpKind::Sum) {
    attrs.emplace_back(std::monostate{});
  }
  return im.emit(op, {x}, std::move(attrs), dt, s);
}

int arange(Importer& im, const Expr& n) {
  return im.emit(OpKind::Arange, {}, {c(0), n, c(1), DType::kI64}, DType::kI64, {n});
}

// arange(shape[k]) shaped [1, .., n, .., 1] (rank shape.size(), n at k).
int arange_along(Importer& im, const Shape& shape, std::size_t k) {
  Shape s(shape.size(), c(1));
  s[k] = shape[k];
  return im.reshape(arange(im, shape[k]), s);
}

Expr numel(Importer& im, const Shape& s) {
  Expr n = c(1);
  for (const Expr& e : s) n = n * e;
  return im.simplify(n);
}

std::optional<std::int64_t> static_dim(Importer& im, const Expr& e) { return im.simplify(e).constant_value(); }

// The product of the static sizes of `s`, or nullopt when one is symbolic.
std::optional<std::int64_t> static_numel(Importer& im, const Shape& s) {
  std::int64_t n = 1;
  for (const Expr& e : s) {
    auto k = static_dim(im, e);
    if (!k) return std::nullopt;
    n *= *k;
  }
  return n;
}

// The largest (or lowest) value of `dt` as a 0-d constant (+-inf for floating dtypes).
int limit_scalar(Importer& im, DType dt, bool largest) {
  if (dtype_is_floating(dt)) return im.scalar(largest ? HUGE_VAL : -HUGE_VAL, dt);
  std::vector<std::uint8_t> b(dtype_size(dt));
  auto put = [&]<typename T>(T) {
    const T v = largest ? std::numeric_limits<T>::max() : std::numeric_limits<T>::lowest();
    std::memcpy(b.data(), &v, sizeof(T));
  };
  switch (dt) {
    case DType::kI8: put(std::int8_t{}); break;
    case DType::kI16: put(std::int16_t{}); break;
    case DType::kI32: put(std::int32_t{}); break;
    case DType::kI64: put(std::int64_t{}); break;
    case DType::kU8: put(std::uint8_t{}); break;
    case DType::kBool: b[0] = largest ? 1 : 0; break;
    default: im.unsupported(std::string("dtype ") + std::string(dtype_name(dt)));
  }
  return im.constant(dt, {}, std::move(b), largest ? "dtype_max" : "dtype_min");
}

// `index` read through index_select(arange(size), index): the same values, and a run-time
// kInvalidInput error for an index outside [0, size) (negative ones included, as PyTorch's
// scatter / index_add; index_put alone would wrap them).
int checked_index(Importer& im, int index, const Expr& size) {
  const Shape s = im.shape(index);
  const Expr n = numel(im, s);
  const int flat = im.reshape(index, {n});
  const int v = im.emit(OpKind::IndexSelect, {arange(im, size), flat}, {std::int64_t{0}}, DType::kI64, {n});
  return im.reshape(v, s);
}

int index_put(Importer& im, int x, int values, const std::vector<int>& indices, std::int64_t first_dim, bool accumulate) {
  std::vector<int> in{x, im.cast(values, im.dtype(x))};
  std::vector<std::int64_t> dims;
  for (std::size_t i = 0; i < indices.size(); ++i) {
    in.push_back(indices[i]);
    dims.push_back(first_dim + static_cast<std::int64_t>(i));
  }
  return im.emit(OpKind::IndexPut, in, {dims, accumulate}, im.dtype(x), im.shape(x));
}

void check_integer_index(Importer& im, int index, const char* op) {
  const DType d = im.dtype(index);
  if (dtype_is_floating(d) || d == DType::kBool) im.bad(std::string(op) + " with a non-integer index");
}

// ---- scatter --------------------------------------------------------------------------

// scatter's operands: self in the output dtype, the checked index, and the values to
// scatter (src sliced to index's shape, or the scalar value as a 0-d tensor); 0-d self as [1].
struct ScatterOperands {
  int self = -1, index = -1, src = -1;
  std::int64_t d = 0;
  bool was_0d = false;
};

ScatterOperands scatter_operands(Importer& im, const char* op, std::size_t src_pos, const char* src_name) {
  ScatterOperands s;
  const DType dt = im.out_dtype();
  s.self = im.cast(im.tensor(0, "self"), dt);
  s.index = im.tensor(2, "index");
  check_integer_index(im, s.index, op);
  s.was_0d = im.rank(s.self) == 0;
  if (s.was_0d) {
    s.self = im.reshape(s.self, {c(1)});
    if (im.rank(s.index) == 0) s.index = im.reshape(s.index, {c(1)});
  }
  const std::int64_t r = im.rank(s.self);
  if (im.rank(s.index) != r) {
    im.bad(std::string(op) + " with an index of rank " + std::to_string(im.rank(s.index)) + " for self of rank " + std::to_string(r));
  }
  s.d = im.norm_dim(im.int_arg(1, "dim"), r);
  const Shape idx = im.shape(s.index);
  const Operand v = im.operand(src_pos, src_name);
  if (v.is_tensor()) {
    s.src = im.cast(v.value, dt);
    if (s.was_0d && im.rank(s.src) == 0) s.src = im.reshape(s.src, {c(1)});
    if (im.rank(s.src) != r) im.bad(std::string(op) + " with src of rank " + std::to_string(im.rank(s.src)) + " for self of rank " + std::to_string(r));
    for (std::int64_t k = 0; k < r; ++k) {  // only src[:index.shape] is read
      const auto ku = static_cast<std::size_t>(k);
      Shape ss = im.shape(s.src);
      if (im.simplify(ss[ku]) == im.simplify(idx[ku])) continue;
      ss[ku] = idx[ku];
      s.src = im.emit(OpKind::Slice, {s.src}, {k, c(0), idx[ku], std::int64_t{1}}, dt, ss);
    }
  } else {
    s.src = im.reshape(im.as_tensor(v, dt), {});
  }
  s.index = checked_index(im, s.index, im.shape(s.self)[static_cast<std::size_t>(s.d)]);
  return s;
}

// The index tensors of every position of index's shape: index on dim d, arange elsewhere.
std::vector<int> scatter_grid(Importer& im, const ScatterOperands& s) {
  const Shape idx = im.shape(s.index);
  std::vector<int> grid;
  for (std::size_t k = 0; k < idx.size(); ++k) {
    grid.push_back(static_cast<std::int64_t>(k) == s.d ? s.index : arange_along(im, idx, k));
  }
  return grid;
}

void define_scatter(Importer& im, const ScatterOperands& s, int v) {
  im.define(0, s.was_0d ? im.reshape(v, {}) : v);
}

// prod / amax / amin by a one-hot of the index over self.size(d): out[.., o, ..] combines
// src[.., k, ..] over the k with index[.., k, ..] == o (and self when include_self); the
// positions no index reaches keep self.
int scatter_onehot(Importer& im, const ScatterOperands& s, const std::string& reduce, bool include_self) {
  const Shape S = im.shape(s.self);
  const Shape J = im.shape(s.index);
  const auto du = static_cast<std::size_t>(s.d);
  const DType dt = im.dtype(s.self);
  const auto n = static_dim(im, S[du]);
  const auto count = static_numel(im, J);
  if (!n || !count) im.unsupported("scatter_reduce '" + reduce + "' with dynamic sizes: the sizes of self's dim and of index must be static");
  if (*count * *n > kMaxOneHot) {
    im.unsupported("scatter_reduce '" + reduce + "' with " + std::to_string(*count) + " indices into a dim of size " + std::to_string(*n) +
                   " (the one-hot it decomposes into is limited to 2^24 elements)");
  }
  if (dt == DType::kBool) im.unsupported("scatter_reduce '" + reduce + "' of a bool tensor");
  // mask[.., o, k, ..] = index[.., k, ..] == o: the new axis o at d, index's dim d at d + 1.
  const int iu = im.unsqueeze(s.index, s.d);
  Shape os(J.size() + 1, c(1));
  os[du] = S[du];
  const int o = im.reshape(arange(im, S[du]), os);
  const int mask = compare(im, OpKind::Eq, iu, o);
  const int srcu = im.rank(s.src) == 0 ? s.src : im.unsqueeze(s.src, s.d);
  OpKind red, comb;
  int ident;
  if (reduce == "amax") {
    red = OpKind::Amax, comb = OpKind::Maximum, ident = limit_scalar(im, dt, false);
  } else if (reduce == "amin") {
    red = OpKind::Amin, comb = OpKind::Minimum, ident = limit_scalar(im, dt, true);
  } else {
    red = OpKind::Prod, comb = OpKind::Mul, ident = im.scalar(1, dt);
  }
  const int masked = where(im, mask, srcu, ident);
  const int r = reduce_op(im, red, masked, {s.d + 1}, false);  // J with dim d -> S[d]
  const int hit = reduce_op(im, OpKind::Any, mask, {s.d + 1}, false);
  // self's block that index covers.
  int block = s.self;
  const Shape R = im.shape(r);
  for (std::size_t k = 0; k < S.size(); ++k) {
    if (k == du || im.simplify(S[k]) == im.simplify(R[k])) continue;
    Shape bs = im.shape(block);
    bs[k] = R[k];
    block = im.emit(OpKind::Slice, {block}, {static_cast<std::int64_t>(k), c(0), R[k], std::int64_t{1}}, dt, bs);
  }
  const int combined = include_self ? binary(im, comb, block, r) : r;
  const int out = where(im, hit, combined, block);
  if (im.shape(out) == S) return out;
  std::vector<int> grid;
  for (std::size_t k = 0; k < R.size(); ++k) grid.push_back(arange_along(im, R, k));
  return index_put(im, s.self, out, grid, 0, false);
}

int scatter_reduce_impl(Importer& im, const ScatterOperands& s, const std::string& reduce, bool include_self) {
  const DType dt = im.dtype(s.self);
  if (reduce == "sum" || reduce == "mean") {
    const std::vector<int> grid = scatter_grid(im, s);
    const int base = include_self ? s.self : index_put(im, s.self, im.scalar(0, dt), grid, 0, false);
    const int sum = index_put(im, base, s.src, grid, 0, true);
    if (reduce == "sum") return sum;
    if (dt == DType::kBool) im.unsupported("scatter_reduce 'mean' of a bool tensor");
    const int ones = im.emit(OpKind::Full, {}, {im.shape(s.self), include_self ? 1.0 : 0.0, dt}, dt, im.shape(s.self));
    int count = index_put(im, ones, im.scalar(1, dt), grid, 0, true);
    if (!include_self) count = binary(im, OpKind::Maximum, count, im.scalar(1, dt));  // untouched: self / 1
    std::vector<ir::Attr> mode{std::monostate{}};
    if (!dtype_is_floating(dt)) mode[0] = std::string("floor");
    return im.emit(OpKind::Div, {sum, count}, mode, dt, im.shape(s.self));
  }
  if (reduce == "prod" || reduce == "amax" || reduce == "amin") return scatter_onehot(im, s, reduce, include_self);
  im.unsupported("scatter_reduce with reduce='" + reduce + "'");
}

// scatter.src / .value (overwrite), scatter.reduce / .value_reduce ('add', 'multiply').
void scatter(Importer& im) {
  const bool value = im.overload().find("value") != std::string::npos;
  const ScatterOperands s = scatter_operands(im, "scatter", 3, value ? "value" : "src");
  if (!im.has(4, "reduce")) {
    define_scatter(im, s, index_put(im, s.self, s.src, scatter_grid(im, s), 0, false));
    return;
  }
  const std::string reduce = im.string_arg(4, "reduce");
  if (reduce != "add" && reduce != "multiply") im.unsupported("scatter with reduce='" + reduce + "'");
  define_scatter(im, s, scatter_reduce_impl(im, s, reduce == "add" ? "sum" : "prod", true));
}

void scatter_add(Importer& im) {
  const ScatterOperands s = scatter_operands(im, "scatter_add", 3, "src");
  define_scatter(im, s, index_put(im, s.self, s.src, scatter_grid(im, s), 0, true));
}

void scatter_reduce(Importer& im) {
  const ScatterOperands s = scatter_operands(im, "scatter_reduce", 3, "src");
  const std::string reduce = im.string_arg(4, "reduce");
  define_scatter(im, s, scatter_reduce_impl(im, s, reduce, im.bool_arg(5, "include_self", true)));
}

// The operands index_add and index_fill share: self (a 0-d self as [1]), dim, and the
// integer index of rank 0 or 1.
struct IndexedDim {
  int x = -1, index = -1;
  bool was_0d = false;
  std::int64_t d = 0;
};

IndexedDim indexed_dim(Importer& im, DType dt, const char* what) {
  IndexedDim r;
  r.x = im.cast(im.tensor(0, "self"), dt);
  r.was_0d = im.rank(r.x) == 0;
  if (r.was_0d) r.x = im.reshape(r.x, {c(1)});
  r.d = im.norm_dim(im.int_arg(1, "dim"), im.rank(r.x));
  r.index = im.tensor(2, "index");
  check_integer_index(im, r.index, what);
  if (im.rank(r.index) > 1) im.bad(std::string(what) + " with an index of rank " + std::to_string(im.rank(r.index)) + " (expected 0 or 1)");
  return r;
}

// index_add(self, dim, index, source, alpha): index_put(accumulate) on dim.
void index_add(Importer& im) {
  const DType dt = im.out_dtype();
  auto [x, index, was_0d, d] = indexed_dim(im, dt, "index_add");
  int source = im.cast(im.tensor(3, "source"), dt);
  if (im.rank(index) == 0) {
    index = im.reshape(index, {c(1)});
    if (im.rank(source) + 1 == im.rank(x)) source = im.unsqueeze(source, d);
  }
  if (was_0d && im.rank(source) == 0) source = im.reshape(source, {c(1)});
  if (im.has(4, "alpha")) {
    const Operand a = im.operand(4, "alpha");
    if (a.is_tensor() || a.symbolic || a.number != 1.0) source = binary(im, OpKind::Mul, source, im.as_tensor(a, dt));
  }
  index = checked_index(im, index, im.shape(x)[static_cast<std::size_t>(d)]);
  const int out = index_put(im, x, source, {index}, d, true);
  im.define(0, was_0d ? im.reshape(out, {}) : out);
}

// index_fill(self, dim, index, value): index_put of the value on dim (negative indices
// count from the end, as PyTorch's index_fill).
void index_fill(Importer& im) {
  const DType dt = im.out_dtype();
  auto [x, index, was_0d, d] = indexed_dim(im, dt, "index_fill");
  if (im.rank(index) == 0) index = im.reshape(index, {c(1)});
  const Operand v = im.operand(3, "value");
  if (v.is_tensor() && im.rank(v.value) != 0) im.bad("index_fill with a value tensor of rank " + std::to_string(im.rank(v.value)));
  const int value = im.reshape(im.as_tensor(v, dt), {});
  const int out = index_put(im, x, value, {index}, d, false);
  im.define(0, was_0d ? im.reshape(out, {}) : out);
}

// masked_scatter(self, mask, source): where(mask, source.flatten()[cumsum(mask) - 1], self)
// over the broadcast shape (too few source elements: index_select's kInvalidInput).
void masked_scatter(Importer& im) {
  const DType dt = im.out_dtype();
  const Shape out = im.out_shape();
  int x = im.cast(im.tensor(0, "self"), dt);
  int mask = im.cast(im.tensor(1, "mask"), DType::kBool);
  const int source = im.cast(im.tensor(2, "source"), dt);
  if (im.shape(x) != out) x = im.emit(OpKind::Expand, {x}, {out}, dt, out);
  if (im.shape(mask) != out) mask = im.emit(OpKind::Expand, {mask}, {out}, DType::kBool, out);
  const Expr n = numel(im, out);
  const int flat_mask = im.reshape(mask, {n});
  const int count = im.emit(OpKind::Cumsum, {flat_mask}, {std::int64_t{0}}, DType::kI64, {n});
  const int pos = binary(im, OpKind::Maximum, binary(im, OpKind::Sub, count, im.scalar(1, DType::kI64)), im.scalar(0, DType::kI64));
  const Expr m = numel(im, im.shape(source));
  const int picked = im.emit(OpKind::IndexSelect, {im.reshape(source, {m}), pos}, {std::int64_t{0}}, dt, {n});
  const int r = where(im, flat_mask, picked, im.reshape(x, {n}));
  im.define(0, im.reshape(r, out));
}

// max_unpool2d(self, indices, output_size): per (N, C) plane, index_put of self at the
// flat indices into zeros of output_size.
void max_unpool2d(Importer& im) {
  const DType dt = im.out_dtype();
  const int x = im.cast(im.tensor(0, "self"), dt);
  int ind = im.tensor(1, "indices");
  check_integer_index(im, ind, "max_unpool2d");
  const auto os = im.sym_int_list(2, "output_size");
  const Shape s = im.shape(x);
  if ((s.size() != 3 && s.size() != 4) || os.size() != 2) im.bad("max_unpool2d needs a 3-D or 4-D input and 2 output sizes");
  if (im.shape(ind) != s) im.bad("max_unpool2d with indices of another shape than the input");
  const Expr planes = numel(im, Shape(s.begin(), s.end() - 2));
  const Expr hw = im.simplify(s[s.size() - 2] * s[s.size() - 1]);
  const Expr ohw = im.simplify(os[0] * os[1]);
  const int x2 = im.reshape(x, {planes, hw});
  ind = checked_index(im, im.reshape(ind, {planes, hw}), ohw);
  const int zeros = im.emit(OpKind::Full, {}, {Shape{planes, ohw}, 0.0, dt}, dt, {planes, ohw});
  const int rows = im.reshape(arange(im, planes), {planes, c(1)});
  const int out = index_put(im, zeros, x2, {rows, ind}, 0, false);
  im.define(0, im.reshape(out, im.out_shape()));
}

// ---- searches ---------------------------------------------------------------------------

// searchsorted(sorted_sequence, self, out_int32, right, side, sorter) and
// bucketize(self, boundaries, out_int32, right): the count of boundaries b with !(b >= x)
// (left) or !(b > x) (right) along the boundaries' last dim, what the binary search gives
// on sorted boundaries (a NaN x counts every boundary).
void search(Importer& im, bool bucketize) {
  int seq;
  Operand xo;
  bool right;
  std::optional<int> sorter;
  if (bucketize) {
    xo = im.operand(0, "self");
    seq = im.tensor(1, "boundaries");
    right = im.bool_arg(3, "right", false);
    if (im.rank(seq) != 1) im.bad("bucketize needs 1-D boundaries");
  } else {
    seq = im.tensor(0, "sorted_sequence");
    xo = im.operand(1, "self");
    right = im.bool_arg(3, "right", false);
    const std::string side = im.has(4, "side") ? im.string_arg(4, "side") : "";
    if (side == "right") {
      right = true;
    } else if (side == "left") {
      if (right) im.bad("searchsorted with side='left' and right=True");
    } else if (!side.empty()) {
      im.bad("searchsorted with side='" + side + "'");
    }
    sorter = im.opt_tensor(5, "sorter");
    if (im.rank(seq) == 0) im.bad("searchsorted needs a sequence of rank >= 1");
  }
  const bool out_int32 = im.bool_arg(2, "out_int32", false);
  DType dt = im.dtype(seq);
  if (xo.is_tensor()) dt = promote_types(dt, im.dtype(xo.value));
  else if (!xo.is_int) dt = promote_types(dt, DType::kF32);
  if (dt == DType::kBool) im.unsupported("searching bool boundaries");
  seq = im.cast(seq, dt);
  if (sorter) {
    if (im.shape(*sorter) != im.shape(seq)) im.bad("searchsorted with a sorter of another shape than the sequence");
    seq = im.emit(OpKind::Gather, {seq, *sorter}, {im.rank(seq) - 1}, dt, im.shape(seq));
  }
  int x = im.as_tensor(xo, dt);
  if (xo.is_tensor() && im.rank(seq) > 1) {
    // x [..., M] against seq [..., B]: [..., M, 1] against [..., 1, B].
    if (im.rank(x) != im.rank(seq)) im.bad("searchsorted with an N-D sequence needs self of the same rank");
    seq = im.unsqueeze(seq, -2);
    x = im.unsqueeze(x, -1);
  } else if (xo.is_tensor()) {
    x = im.unsqueeze(x, -1);  // x [...] against seq [B]: [..., 1]
  }
  const int ge = compare(im, right ? OpKind::Gt : OpKind::Ge, seq, x);
  const int below = logical_not(im, ge);
  const DType odt = out_int32 ? DType::kI32 : DType::kI64;
  const int r = reduce_op(im, OpKind::Sum, below, {im.rank(below) - 1}, false, odt);
  im.define(0, im.reshape(r, im.out_shape()));
}

// topk's two outputs (values in x's dtype, i64 indices).
std::pair<int, int> topk(Importer& im, int x, std::int64_t k, std::int64_t d, bool largest) {
  Shape s = im.shape(x);
  s[static_cast<std::size_t>(d)] = c(k);
  const auto outs = im.emit_multi(OpKind::Topk, {x}, {k, d, largest, true}, im.dtype(x), {s, s});
  im.graph().values[static_cast<std::size_t>(outs[1])].dtype = DType::kI64;
  return {outs[0], outs[1]};
}

int select_kept(Importer& im, int v, std::int64_t d, std::int64_t i) {
  Shape s = im.shape(v);
  s[static_cast<std::size_t>(d)] = c(1);
  return im.emit(OpKind::Slice, {v}, {d, c(i), c(i + 1), std::int64_t{1}}, im.dtype(v), s);
}

// median(self, dim, keepdim) / median(self) and kthvalue(self, k, dim, keepdim): the k-th
// smallest through topk (NaN sorts last); median takes k = (n + 1) / 2 (the lower median)
// and gives NaN (at the first NaN's index) for a row holding one, as PyTorch.
void kth(Importer& im, bool is_median) {
  int x = im.tensor(0, "self");
  const bool all = is_median && !im.has(1, "dim");
  std::int64_t d = 0;  // keepdim or not: the declared output shapes say
  if (all) {
    x = im.reshape(x, {numel(im, im.shape(x))});
  } else {
    d = im.norm_dim(im.int_arg(is_median ? 1 : 2, "dim", -1), im.rank(x));
  }
  if (im.rank(x) == 0) x = im.reshape(x, {c(1)});
  const char* op = is_median ? "median" : "kthvalue";
  const auto n = static_dim(im, im.shape(x)[static_cast<std::size_t>(d)]);
  std::int64_t k;
  if (is_median) {
    if (!n) im.unsupported(std::string(op) + " along a dynamic dim: its size must be static");
    if (*n == 0) im.unsupported(std::string(op) + " of an empty dim");
    k = (*n + 1) / 2;
  } else {
    k = im.int_arg(1, "k");
    if (k < 1 || (n && k > *n)) im.bad("kthvalue with k=" + std::to_string(k) + " outside [1, " + (n ? std::to_string(*n) : "n") + "]");
  }
  auto [values, indices] = topk(im, x, k, d, false);
  int v = select_kept(im, values, d, k - 1);
  int i = select_kept(im, indices, d, k - 1);
  if (is_median && dtype_is_floating(im.dtype(x))) {
    const int has_nan = reduce_op(im, OpKind::Any, nan_mask(im, x), {d}, true);
    v = where(im, has_nan, im.scalar(NAN, im.dtype(x)), v);
    if (!all && im.num_outputs() > 1 && im.output_used(1)) {
      const int first_nan = im.emit(OpKind::Argmax, {x}, {d, true}, DType::kI64, im.shape(has_nan));  // argmax stops at NaN
      i = where(im, has_nan, first_nan, i);
    }
  }
  im.define(0, im.reshape(im.cast(v, im.out_dtype(0)), im.out_shape(0)));
  if (im.num_outputs() > 1 && im.output_used(1)) im.define(1, im.reshape(i, im.out_shape(1)));
}

// ---- scans ------------------------------------------------------------------------------

// v shifted by s along d: v[i - s] at i >= s; at i < s, `fill` or (no fill) v[i] itself.
int shifted(Importer& im, int v, std::int64_t d, std::int64_t n, std::int64_t s, std::optional<double> fill) {
  const Shape S = im.shape(v);
  const DType dt = im.dtype(v);
  Shape hs = S, ts = S;
  hs[static_cast<std::size_t>(d)] = c(s);
  ts[static_cast<std::size_t>(d)] = c(n - s);
  const int head = fill ? im.emit(OpKind::Full, {}, {hs, *fill, dt}, dt, hs)
                        : im.emit(OpKind::Slice, {v}, {d, c(0), c(s), std::int64_t{1}}, dt, hs);
  const int tail = im.emit(OpKind::Slice, {v}, {d, c(0), c(n - s), std::int64_t{1}}, dt, ts);
  return im.emit(OpKind::Cat, {head, tail}, {d}, dt, S);
}

// The scan's input and dim: x in `dt`, 0-d as [1], the static size along dim.
struct Scan {
  int x = -1;
  std::int64_t d = 0, n = 0;
};

Scan scan_input(Importer& im, const char* op, DType dt) {
  Scan s;
  s.x = im.cast(im.tensor(0, "self"), dt);
  if (im.rank(s.x) == 0) s.x = im.reshape(s.x, {c(1)});
  s.d = im.norm_dim(im.int_arg(1, "dim"), im.rank(s.x));
  const auto n = static_dim(im, im.shape(s.x)[static_cast<std::size_t>(s.d)]);
  if (!n) im.unsupported(std::string(op) + " along a dynamic dim: its size must be static");
  s.n = *n;
  return s;
}

void define_scan(Importer& im, std::size_t k, int v) { im.define(k, im.reshape(v, im.out_shape(k))); }

// cumprod(self, dim, dtype): v *= v shifted by 1, 2, 4, ... (ones shifted in).
void cumprod(Importer& im) {
  const Scan s = scan_input(im, "cumprod", im.out_dtype());
  if (im.dtype(s.x) == DType::kBool) im.unsupported("cumprod in bool");
  int v = s.x;
  for (std::int64_t step = 1; step < s.n; step *= 2) v = binary(im, OpKind::Mul, shifted(im, v, s.d, s.n, step, 1.0), v);
  define_scan(im, 0, v);
}

// logcumsumexp(self, dim): v = logaddexp(v shifted, v) by doubling steps (-inf shifted in),
// logaddexp(a, b) = max + log(1 + exp(min - max)), and a when both are the same infinity.
void logcumsumexp(Importer& im) {
  const DType dt = im.out_dtype();
  if (!dtype_is_floating(dt)) im.unsupported("logcumsumexp to a non-floating dtype");
  const Scan s = scan_input(im, "logcumsumexp", dt);
  int v = s.x;
  for (std::int64_t step = 1; step < s.n; step *= 2) {
    const int a = shifted(im, v, s.d, s.n, step, -HUGE_VAL);
    const int hi = binary(im, OpKind::Maximum, a, v);
    const int lo = binary(im, OpKind::Minimum, a, v);
    const int e = unary(im, OpKind::Exp, binary(im, OpKind::Sub, lo, hi));
    const int l = unary(im, OpKind::Log, binary(im, OpKind::Add, e, im.scalar(1, dt)));
    const int sum = binary(im, OpKind::Add, hi, l);
    const int same_inf = binary(im, OpKind::LogicalAnd, compare(im, OpKind::Eq, lo, hi),
                                compare(im, OpKind::Eq, unary(im, OpKind::Abs, hi), im.scalar(HUGE_VAL, dt)));
    v = where(im, same_inf, hi, sum);
  }
  define_scan(im, 0, v);
}

// cummax / cummin(self, dim) -> (values, indices): doubling steps over (value, index)
// pairs; the earlier pair a wins over the later b when b is not NaN and a is NaN or
// strictly better: ties and NaNs take the later index, as PyTorch.
void cum_extreme(Importer& im, bool is_max) {
  const Scan s = scan_input(im, is_max ? "cummax" : "cummin", im.dtype(im.tensor(0, "self")));
  const bool floating = dtype_is_floating(im.dtype(s.x));
  const Shape S = im.shape(s.x);
  int v = s.x;
  int idx = im.emit(OpKind::Expand, {arange_along(im, S, static_cast<std::size_t>(s.d))}, {S}, DType::kI64, S);
  for (std::int64_t step = 1; step < s.n; step *= 2) {
    const int a = shifted(im, v, s.d, s.n, step, std::nullopt);
    const int ia = shifted(im, idx, s.d, s.n, step, std::nullopt);
    int a_wins = compare(im, is_max ? OpKind::Gt : OpKind::Lt, a, v);
    if (floating) {
      a_wins = binary(im, OpKind::LogicalOr, nan_mask(im, a), a_wins);
      a_wins = binary(im, OpKind::LogicalAnd, logical_not(im, nan_mask(im, v)), a_wins);
    }
    v = where(im, a_wins, a, v);
    idx = where(im, a_wins, ia, idx);
  }
  define_scan(im, 0, im.cast(v, im.out_dtype(0)));
  if (im.num_outputs() > 1 && im.output_used(1)) define_scan(im, 1, idx);
}

// ---- embedding_bag ------------------------------------------------------------------------

// embedding_bag / _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode,
// sparse, per_sample_weights, include_last_offset, padding_idx): the bag of each index
// position (the count of offsets at or before it, minus one), then an index_put sum per bag
// (mean: divided by the bag's size), or a one-hot max. Empty bags give zeros; padding_idx
// entries are left out. Only the first output.
void embedding_bag(Importer& im) {
  for (std::size_t k = 1; k < im.num_outputs(); ++k) {
    if (im.output_used(k)) im.unsupported("embedding_bag's offset2bag, bag_size and max_indices outputs");
  }
  const int w = im.tensor(0, "weight");
  int idx = im.tensor(1, "indices");
  check_integer_index(im, idx, "embedding_bag");
  const auto offsets = im.opt_tensor(2, "offsets");
  const std::int64_t mode = im.int_arg(4, "mode", 0);
  const auto psw = im.opt_tensor(6, "per_sample_weights");
  const bool include_last = im.bool_arg(7, "include_last_offset", false);
  if (im.rank(w) != 2) im.bad("embedding_bag needs a 2-D weight");
  if (mode < 0 || mode > 2) im.bad("embedding_bag with mode " + std::to_string(mode));
  if (psw && mode != 0) im.bad("embedding_bag per_sample_weights with a mode other than sum");
  const Expr V = im.shape(w)[0], D = im.shape(w)[1];
  std::optional<std::int64_t> padding;
  if (im.has(8, "padding_idx")) {
    std::int64_t p = im.int_arg(8, "padding_idx");
    if (im.target().rfind("aten._embedding_bag", 0) == 0) {
      if (p >= 0) padding = p;  // -1: none
    } else {
      if (p < 0) {
        const auto v = static_dim(im, V);
        if (!v) im.unsupported("embedding_bag with a negative padding_idx and a dynamic number of embeddings");
        p += *v;
      }
      padding = p;
    }
  }
  const DType dt = im.out_dtype(0);
  Expr L, B;
  int bag;
  std::optional<int> valid;
  if (im.rank(idx) == 2) {  // [B, N] bags of equal size
    if (offsets) im.bad("embedding_bag with 2-D indices and offsets");
    B = im.shape(idx)[0];
    const Expr N = im.shape(idx)[1];
    L = im.simplify(B * N);
    bag = im.reshape(im.emit(OpKind::Expand, {im.reshape(arange(im, B), {B, c(1)})}, {Shape{B, N}}, DType::kI64, {B, N}), {L});
    idx = im.reshape(idx, {L});
  } else {
    if (im.rank(idx) != 1 || !offsets || im.rank(*offsets) != 1) im.bad("embedding_bag needs 1-D indices and offsets");
    L = im.shape(idx)[0];
    const Expr nb = im.shape(*offsets)[0];
    B = include_last ? im.simplify(nb - c(1)) : nb;
    int offs = im.cast(*offsets, DType::kI64);
    if (include_last) offs = im.emit(OpKind::Slice, {offs}, {std::int64_t{0}, c(0), B, std::int64_t{1}}, DType::kI64, {B});
    const int pos = arange(im, L);
    const int started = compare(im, OpKind::Ge, im.reshape(pos, {L, c(1)}), im.reshape(offs, {c(1), B}));  // [L, B]
    const int count = reduce_op(im, OpKind::Sum, started, {1}, false, DType::kI64);
    const int b = binary(im, OpKind::Sub, count, im.scalar(1, DType::kI64));
    valid = compare(im, OpKind::Ge, b, im.scalar(0, DType::kI64));
    if (include_last) {
      const int end = im.reshape(im.emit(OpKind::Slice, {im.cast(*offsets, DType::kI64)}, {std::int64_t{0}, B, im.simplify(B + c(1)), std::int64_t{1}},
                                         DType::kI64, {c(1)}),
                                 {});
      valid = binary(im, OpKind::LogicalAnd, *valid, compare(im, OpKind::Lt, pos, end));
    }
    bag = binary(im, OpKind::Maximum, b, im.scalar(0, DType::kI64));
  }
  if (padding) {
    const int keep = compare(im, OpKind::Ne, idx, im.scalar(static_cast<double>(*padding), im.dtype(idx)));
    valid = valid ? binary(im, OpKind::LogicalAnd, *valid, keep) : keep;
  }
  int emb = im.emit(OpKind::Embedding, {im.cast(w, dt), idx}, {}, dt, {L, D});
  if (psw) emb = binary(im, OpKind::Mul, emb, im.reshape(im.cast(*psw, dt), {L, c(1)}));
  if (valid) emb = where(im, im.reshape(*valid, {L, c(1)}), emb, im.scalar(0, dt));
  int out;
  if (mode == 2) {
    const auto nb = static_dim(im, B), nl = static_dim(im, L), nd = static_dim(im, D);
    if (!nb || !nl || !nd) im.unsupported("embedding_bag mode 'max' with dynamic sizes: the sizes must be static");
    if (*nb * *nl * *nd > kMaxOneHot) im.unsupported("embedding_bag mode 'max' over more than 2^24 bag x index x feature elements");
    int mask = compare(im, OpKind::Eq, im.reshape(bag, {c(1), L}), im.reshape(arange(im, B), {B, c(1)}));  // [B, L]
    if (valid) mask = binary(im, OpKind::LogicalAnd, mask, im.reshape(*valid, {c(1), L}));
    const int masked = where(im, im.reshape(mask, {B, L, c(1)}), im.reshape(emb, {c(1), L, D}), limit_scalar(im, dt, false));
    const int r = reduce_op(im, OpKind::Amax, masked, {1}, false);
    const int hit = reduce_op(im, OpKind::Any, mask, {1}, true);
    out = where(im, hit, r, im.scalar(0, dt));
  } else {
    const int zeros = im.emit(OpKind::Full, {}, {Shape{B, D}, 0.0, dt}, dt, {B, D});
    out = index_put(im, zeros, emb, {bag}, 0, true);
    if (mode == 1) {
      const int none = im.emit(OpKind::Full, {}, {Shape{B}, 0.0, dt}, dt, {B});
      const int one = valid ? im.cast(*valid, dt) : im.scalar(1, dt);
      int count = index_put(im, none, one, {bag}, 0, true);
      count = binary(im, OpKind::Maximum, count, im.scalar(1, dt));
      out = im.emit(OpKind::Div, {out, im.reshape(count, {B, c(1)})}, {std::monostate{}}, dt, {B, D});
    }
  }
  im.define(0, im.reshape(out, im.out_shape(0)));
}

}  // namespace

void register_scatter(HandlerTable& t) {
  t["aten.scatter"] = scatter;
  t["aten.scatter_add"] = scatter_add;
  t["aten.scatter_reduce"] = scatter_reduce;
  t["aten.index_add"] = index_add;
  t["aten.index_fill"] = index_fill;
  t["aten.masked_scatter"] = masked_scatter;
  t["aten.max_unpool2d"] = max_unpool2d;
  t["aten.bucketize"] = [](Importer& im) { search(im, true); };
  t["aten.searchsorted"] = [](Importer& im) { search(im, false); };
  t["aten.median"] = [](Importer& im) { kth(im, true); };
  t["aten.kthvalue"] = [](Importer& im) { kth(im, false); };
  t["aten.cumprod"] = cumprod;
  t["aten.logcumsumexp"] = logcumsumexp;
  t["aten.cummax"] = [](Importer& im) { cum_extreme(im, true); };
  t["aten.cummin"] = [](Importer& im) { cum_extreme(im, false); };
  t["aten.embedding_bag"] = embedding_bag;
  t["aten._embedding_bag"] = embedding_bag;
  t["aten._embedding_bag_forward_only"] = embedding_bag;
}

}  // namespace kiln::pt2
