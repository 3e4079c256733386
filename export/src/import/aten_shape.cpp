// aten data movement, creation, indexing and data-dependent ops.
#include <algorithm>
#include <cmath>

#include "import/importer.h"

namespace kiln::pt2 {
namespace {

using sym::Expr;

Expr c(std::int64_t v) { return Expr::constant(v); }

// Ops that only reinterpret the shape: a reshape to the declared output shape.
void as_reshape(Importer& im) {
  const int x = im.tensor(0, "self");
  if (im.out_dtype() != im.dtype(x)) im.unsupported("a view as another dtype (bitcast)");
  im.define(0, im.reshape(x, im.out_shape()));
}

void expand(Importer& im) {
  const int x = im.tensor(0, "self");
  const Shape out = im.out_shape();
  if (im.shape(x) == out) {
    im.define(0, x);
    return;
  }
  im.emit_out(OpKind::Expand, {x}, {out});
}

void permute(Importer& im) {
  const int x = im.tensor(0, "self");
  std::vector<std::int64_t> dims = im.int_list(1, "dims");
  for (auto& d : dims) d = im.norm_dim(d, im.rank(x));
  im.define(0, im.permute(x, dims));
}

void transpose(Importer& im) {
  const int x = im.tensor(0, "self");
  const std::int64_t r = im.rank(x);
  if (r < 2) {
    im.define(0, x);
    return;
  }
  std::int64_t a = 0, b = 1;
  if (im.target().rfind("aten.transpose", 0) == 0 || im.target().rfind("aten.swapaxes", 0) == 0 ||
      im.target().rfind("aten.swapdims", 0) == 0) {
    a = im.norm_dim(im.int_arg(1, "dim0"), r);
    b = im.norm_dim(im.int_arg(2, "dim1"), r);
  } else if (r != 2) {
    im.bad("t() needs a tensor of rank <= 2");
  }
  std::vector<std::int64_t> perm;
  for (std::int64_t i = 0; i < r; ++i) perm.push_back(i);
  std::swap(perm[static_cast<std::size_t>(a)], perm[static_cast<std::size_t>(b)]);
  im.define(0, im.permute(x, perm));
}

void slice(Importer& im) {
  const int x = im.tensor(0, "self");
  const std::int64_t d = im.norm_dim(im.int_arg(1, "dim", 0), im.rank(x));
  const Expr start = im.opt_sym_int(2, "start").value_or(c(0));
  const Expr end = im.opt_sym_int(3, "end").value_or(c(INT64_MAX));
  const std::int64_t step = im.int_arg(4, "step", 1);
  if (step < 1) im.unsupported("slice with step < 1");
  im.emit_out(OpKind::Slice, {x}, {d, start, end, step});
}

// x.select(dim, i) == x[..., i:i+1, ...].reshape(out)
void select(Importer& im) {
  const int x = im.tensor(0, "self");
  const std::int64_t d = im.norm_dim(im.int_arg(1, "dim"), im.rank(x));
  Expr index = im.sym_int(2, "index");
  const Expr size = im.shape(x)[static_cast<std::size_t>(d)];
  if (auto k = index.constant_value(); k && *k < 0) index = im.simplify(size + index);
  Shape s = im.shape(x);
  s[static_cast<std::size_t>(d)] = c(1);
  const int sl = im.emit(OpKind::Slice, {x}, {d, index, im.simplify(index + c(1)), std::int64_t{1}}, im.dtype(x), s);
  im.define(0, im.reshape(sl, im.out_shape()));
}

void narrow(Importer& im) {
  const int x = im.tensor(0, "self");
  const std::int64_t d = im.norm_dim(im.int_arg(1, "dim"), im.rank(x));
  Expr start = im.sym_int(2, "start");
  const Expr length = im.sym_int(3, "length");
  if (auto k = start.constant_value(); k && *k < 0) start = im.simplify(im.shape(x)[static_cast<std::size_t>(d)] + start);
  im.emit_out(OpKind::Slice, {x}, {d, start, im.simplify(start + length), std::int64_t{1}});
}

void cat(Importer& im) {
  const std::vector<int> xs = im.tensor_list(0, "tensors");
  const DType dt = im.out_dtype();
  const Shape out = im.out_shape();
  std::vector<int> in;
  for (int x : xs) {
    // PyTorch skips 1-D empty tensors in cat.
    if (im.rank(x) == 1 && static_cast<std::int64_t>(out.size()) != 1 && im.shape(x)[0].constant_value() == 0) continue;
    in.push_back(im.cast(x, dt));
  }
  const std::int64_t d = im.norm_dim(im.int_arg(1, "dim", 0), static_cast<std::int64_t>(out.size()));
  if (in.size() == 1) {
    im.define(0, in[0]);
    return;
  }
  im.emit_out(OpKind::Cat, in, {d});
}

void stack(Importer& im) {
  const std::vector<int> xs = im.tensor_list(0, "tensors");
  const DType dt = im.out_dtype();
  const Shape out = im.out_shape();
  const std::int64_t d = im.norm_dim(im.int_arg(1, "dim", 0), static_cast<std::int64_t>(out.size()));
  std::vector<int> in;
  for (int x : xs) in.push_back(im.unsqueeze(im.cast(x, dt), d));
  if (in.size() == 1) {
    im.define(0, im.reshape(in[0], out));
    return;
  }
  im.emit_out(OpKind::Cat, in, {d});
}

void split(Importer& im) {
  const int x = im.tensor(0, "self");
  const std::int64_t d = im.norm_dim(im.int_arg(2, "dim", 0), im.rank(x));
  std::vector<Expr> sizes;
  std::vector<Shape> shapes;
  for (std::size_t k = 0; k < im.num_outputs(); ++k) {
    shapes.push_back(im.out_shape(k));
    if (static_cast<std::int64_t>(shapes.back().size()) != im.rank(x)) im.bad("split output " + std::to_string(k) + " has the wrong rank");
    sizes.push_back(shapes.back()[static_cast<std::size_t>(d)]);
  }
  if (shapes.size() == 1) {
    im.define(0, x);
    return;
  }
  const std::vector<int> outs = im.emit_multi(OpKind::Split, {x}, {d, sizes}, im.dtype(x), shapes);
  for (std::size_t k = 0; k < outs.size(); ++k) im.define(k, outs[k]);
}

void unbind(Importer& im) {
  const int x = im.tensor(0, "self");
  const std::int64_t d = im.norm_dim(im.int_arg(1, "dim", 0), im.rank(x));
  std::vector<Expr> sizes;
  std::vector<Shape> shapes;
  for (std::size_t k = 0; k < im.num_outputs(); ++k) {
    Shape s = im.shape(x);
    s[static_cast<std::size_t>(d)] = c(1);
    shapes.push_back(s);
    sizes.push_back(c(1));
  }
  std::vector<int> outs = shapes.size() == 1 ? std::vector<int>{x} : im.emit_multi(OpKind::Split, {x}, {d, sizes}, im.dtype(x), shapes);
  for (std::size_t k = 0; k < outs.size(); ++k) im.define(k, im.reshape(outs[k], im.out_shape(k)));
}

void pad(Importer& im) {
  const int x = im.tensor(0, "self");
  const std::string mode = im.string_arg(2, "mode", "constant");
  const auto pads = im.int_list(1, "pad");
  if (mode == "reflect" || mode == "replicate" || mode == "circular") {
    for (auto p : pads) {
      if (p < 0) im.unsupported("negative pads with mode '" + mode + "'");
    }
    im.emit_out(OpKind::PadBorder, {x}, {pads, mode});
    return;
  }
  if (mode != "constant") im.unsupported("pad mode '" + mode + "'");
  const double value = im.target().rfind("aten.pad", 0) == 0 ? im.float_arg(3, "value", 0.0) : im.float_arg(2, "value", 0.0);
  im.emit_out(OpKind::Pad, {x}, {pads, value});
}

// fill(self, value): a tensor of self's shape holding value (a number or a 0-d tensor).
void fill(Importer& im) {
  const int x = im.tensor(0, "self");
  const Operand v = im.operand(1, "value");
  const DType dt = im.out_dtype();
  if (v.is_tensor() || v.symbolic) {
    const int t = im.reshape(im.as_tensor(v, dt), {});
    im.emit_out(OpKind::Expand, {t}, {im.shape(x)});
    return;
  }
  im.emit_out(OpKind::Full, {}, {im.shape(x), v.number, dt});
}

// zero(self): zeros of self's shape and dtype (zero_ in the training IR).
void zero(Importer& im) {
  const int x = im.tensor(0, "self");
  im.emit_out(OpKind::Full, {}, {im.shape(x), 0.0, im.out_dtype()});
}

// as_strided(self, size, stride, storage_offset) over static sizes, reading self as the
// contiguous buffer Kiln holds: a reshape when the view is self's elements in order, else
// an index_select of the flattened tensor with the view's element offsets.
void as_strided(Importer& im) {
  const int x = im.tensor(0, "self");
  const auto size = im.int_list(1, "size");
  const auto stride = im.int_list(2, "stride");
  const std::int64_t offset = im.has(3, "storage_offset") ? im.int_arg(3, "storage_offset") : 0;
  if (size.size() != stride.size()) im.bad("as_strided with " + std::to_string(size.size()) + " sizes and " + std::to_string(stride.size()) + " strides");
  std::int64_t n_in = 1;
  for (const Expr& e : im.shape(x)) {
    const auto k = im.simplify(e).constant_value();
    if (!k) im.unsupported("as_strided of a tensor with a symbolic size");
    n_in *= *k;
  }
  std::int64_t count = 1;
  for (auto d : size) {
    if (d < 0) im.bad("as_strided with a negative size");
    count *= d;
  }
  if (count > (std::int64_t{1} << 26)) im.unsupported("as_strided producing more than 2^26 elements");
  std::vector<std::int64_t> offsets;
  offsets.reserve(static_cast<std::size_t>(count));
  std::vector<std::int64_t> pos(size.size(), 0);
  for (std::int64_t i = 0; i < count; ++i) {
    std::int64_t off = offset;
    for (std::size_t d = 0; d < size.size(); ++d) off += pos[d] * stride[d];
    if (off < 0 || off >= n_in) im.unsupported("as_strided reading outside the tensor's " + std::to_string(n_in) + " elements");
    offsets.push_back(off);
    for (std::size_t d = size.size(); d-- > 0;) {
      if (++pos[d] < size[d]) break;
      pos[d] = 0;
    }
  }
  bool in_order = count == n_in;
  for (std::int64_t i = 0; in_order && i < count; ++i) in_order = offsets[static_cast<std::size_t>(i)] == i;
  Shape out;
  for (auto d : size) out.push_back(c(d));
  if (in_order) {
    im.define(0, im.reshape(x, out));
    return;
  }
  const int flat = im.reshape(x, {c(n_in)});
  const int picked = im.emit(OpKind::IndexSelect, {flat, im.index_constant(offsets)}, {std::int64_t{0}}, im.dtype(x), {c(count)});
  im.define(0, im.reshape(picked, out));
}

// reflection_padNd / replication_padNd(self, padding): pad_border over the last N dims.
void border_pad(Importer& im, const std::string& mode) {
  const int x = im.tensor(0, "self");
  const auto pads = im.int_list(1, "padding");
  for (auto p : pads) {
    if (p < 0) im.unsupported("negative pads with mode '" + mode + "'");
  }
  im.emit_out(OpKind::PadBorder, {x}, {pads, mode});
}

// index_put(self, indices, values, accumulate) with integer index tensors on adjacent dims
// (None entries skip dims): the index_put op.
void index_put_ints(Importer& im, int x, const std::vector<std::optional<int>>& idx) {
  std::vector<std::int64_t> dims;
  std::vector<int> in{x, im.cast(im.tensor(2, "values"), im.dtype(x))};
  for (std::size_t i = 0; i < idx.size(); ++i) {
    if (!idx[i]) continue;
    const DType d = im.dtype(*idx[i]);
    if (d == DType::kBool || d == DType::kU8) im.unsupported("index_put mixing boolean masks with other indices");
    if (!dims.empty() && static_cast<std::int64_t>(i) != dims.back() + 1) {
      im.unsupported("index_put on non-adjacent dims");
    }
    dims.push_back(static_cast<std::int64_t>(i));
    in.push_back(*idx[i]);
  }
  if (dims.empty()) im.unsupported("index_put without index tensors");
  im.emit_out(OpKind::IndexPut, in, {dims, im.bool_arg(3, "accumulate", false)});
}

// index_put(self, [mask], values) with one boolean mask of self's rank and a broadcastable
// value: where(mask, values, self); integer indices: the index_put op.
void index_put(Importer& im) {
  const int x = im.tensor(0, "self");
  const auto idx = im.opt_tensor_list(1, "indices");
  bool has_mask = false;
  for (const auto& i : idx) has_mask = has_mask || (i && (im.dtype(*i) == DType::kBool || im.dtype(*i) == DType::kU8));
  if (!has_mask) {
    index_put_ints(im, x, idx);
    return;
  }
  if (im.bool_arg(3, "accumulate", false)) im.unsupported("index_put with accumulate=True through a boolean mask");
  if (idx.size() != 1 || !idx[0] || (im.dtype(*idx[0]) != DType::kBool && im.dtype(*idx[0]) != DType::kU8) ||
      im.rank(*idx[0]) != im.rank(x)) {
    im.unsupported("index_put other than x[mask] = value with a full boolean mask");
  }
  const int values = im.cast(im.tensor(2, "values"), im.dtype(x));
  if (im.rank(values) > 1 || (im.rank(values) == 1 && im.shape(values)[0].constant_value() != 1)) {
    im.unsupported("index_put of more than one value through a boolean mask");
  }
  im.emit_out(OpKind::Where, {im.cast(*idx[0], DType::kBool), im.reshape(values, {}), x});
}

// index_copy(self, dim, index, source): self[..., index, ...] = source along dim (the
// training IR's KV-cache update), an index_put on one dim.
void index_copy(Importer& im) {
  const int x = im.tensor(0, "self");
  const std::int64_t d = im.norm_dim(im.int_arg(1, "dim"), im.rank(x));
  int index = im.tensor(2, "index");
  if (dtype_is_floating(im.dtype(index)) || im.dtype(index) == DType::kBool) im.bad("index_copy with a non-integer index");
  if (im.rank(index) > 1) im.bad("index_copy with an index of rank " + std::to_string(im.rank(index)) + " (expected 0 or 1)");
  int source = im.cast(im.tensor(3, "source"), im.dtype(x));
  if (im.rank(index) == 0) {  // one position: source lacks dim d when it has rank(self) - 1
    index = im.reshape(index, {c(1)});
    if (im.rank(source) + 1 == im.rank(x)) source = im.unsqueeze(source, d);
  }
  im.emit_out(OpKind::IndexPut, {x, source, index}, {std::vector<std::int64_t>{d}, false});
}

void index(Importer& im) {
  const int x = im.tensor(0, "self");
  const auto idx = im.opt_tensor_list(1, "indices");
  std::vector<std::int64_t> dims;
  std::vector<int> in{x};
  for (std::size_t i = 0; i < idx.size(); ++i) {
    if (!idx[i]) continue;
    dims.push_back(static_cast<std::int64_t>(i));
    in.push_back(*idx[i]);
  }
  if (in.size() == 2 && (im.dtype(in[1]) == DType::kBool || im.dtype(in[1]) == DType::kU8)) {
    const int mask = im.cast(in[1], DType::kBool);
    if (dims[0] == 0 && im.rank(mask) == im.rank(x)) {
      im.emit_out(OpKind::MaskedSelect, {x, mask});
      return;
    }
    // A mask over the leading dims: nonzero(mask) -> one index column per masked dim.
    const std::int64_t k = im.rank(mask);
    if (dims[0] != 0 || k == 0 || k > im.rank(x)) im.unsupported("a boolean mask that does not cover leading dims");
    const Expr rows = im.out_shape()[0];
    const int nz = im.emit(OpKind::Nonzero, {mask}, {}, DType::kI64, {rows, c(k)});
    std::vector<int> cols{x};
    std::vector<std::int64_t> idims;
    std::vector<Shape> col_shapes(static_cast<std::size_t>(k), Shape{rows, c(1)});
    const auto split = k == 1 ? std::vector<int>{nz}
                              : im.emit_multi(OpKind::Split, {nz}, {std::int64_t{1}, std::vector<Expr>(static_cast<std::size_t>(k), c(1))},
                                              DType::kI64, col_shapes);
    for (std::int64_t i = 0; i < k; ++i) {
      cols.push_back(im.reshape(split[static_cast<std::size_t>(i)], {rows}));
      idims.push_back(i);
    }
    im.emit_out(OpKind::Index, cols, {idims});
    return;
  }
  for (std::size_t k = 1; k < in.size(); ++k) {
    if (im.dtype(in[k]) == DType::kBool) im.unsupported("mixing boolean masks with other indices");
  }
  for (std::size_t k = 1; k < dims.size(); ++k) {
    if (dims[k] != dims[k - 1] + 1) im.unsupported("advanced indexing on non-adjacent dims");
  }
  if (dims.size() == 1 && im.rank(in[1]) == 1) {
    im.emit_out(OpKind::IndexSelect, {x, in[1]}, {dims[0]});
    return;
  }
  im.emit_out(OpKind::Index, in, {dims});
}

// diff(self, n, dim, prepend, append): cat(prepend, self, append) along dim, then n times
// x[1:] - x[:-1] (logical_xor for bools, as PyTorch).
void diff(Importer& im) {
  int x = im.tensor(0, "self");
  const std::int64_t n = im.int_arg(1, "n", 1);
  if (n < 0) im.bad("diff needs n >= 0");
  const std::int64_t d = im.norm_dim(im.int_arg(2, "dim", -1), im.rank(x));
  const DType dt = im.out_dtype();
  x = im.cast(x, dt);
  std::vector<int> parts;
  auto add_part = [&](std::size_t pos, const char* name) {
    if (!im.has(pos, name)) return;
    int p = im.cast(im.tensor(pos, name), dt);
    if (im.rank(p) != im.rank(x)) im.unsupported(std::string("diff with a ") + name + " of another rank");
    parts.push_back(p);
  };
  add_part(3, "prepend");
  parts.push_back(x);
  add_part(4, "append");
  if (parts.size() > 1) {
    Shape s = im.shape(x);
    Expr total = c(0);
    for (int p : parts) total = total + im.shape(p)[static_cast<std::size_t>(d)];
    s[static_cast<std::size_t>(d)] = im.simplify(total);
    x = im.emit(OpKind::Cat, parts, {d}, dt, s);
  }
  const OpKind op = dt == DType::kBool ? OpKind::LogicalXor : OpKind::Sub;
  for (std::int64_t k = 0; k < n; ++k) {
    Shape s = im.shape(x);
    const Expr len = s[static_cast<std::size_t>(d)];
    s[static_cast<std::size_t>(d)] = im.simplify(sym::max(len - c(1), c(0)));
    const int hi = im.emit(OpKind::Slice, {x}, {d, c(1), c(INT64_MAX), std::int64_t{1}}, dt, s);
    const int lo = im.emit(OpKind::Slice, {x}, {d, c(0), im.simplify(len - c(1)), std::int64_t{1}}, dt, s);
    x = im.emit(op, {hi, lo}, {}, dt, s);
  }
  im.define(0, im.reshape(x, im.out_shape()));
}

// repeat: [1]*(n-r) + shape, interleave each dim with its factor, merge.
void repeat(Importer& im) {
  const int x = im.tensor(0, "self");
  const auto reps = im.sym_int_list(1, "repeats");
  Shape s = im.shape(x);
  if (reps.size() < s.size()) im.bad("repeat needs at least as many factors as dims");
  while (s.size() < reps.size()) s.insert(s.begin(), c(1));
  Shape split, expanded;
  for (std::size_t i = 0; i < s.size(); ++i) {
    split.push_back(c(1));
    split.push_back(s[i]);
    expanded.push_back(reps[i]);
    expanded.push_back(s[i]);
  }
  const int r = im.reshape(x, split);
  const int e = im.emit(OpKind::Expand, {r}, {expanded}, im.dtype(x), expanded);
  im.define(0, im.reshape(e, im.out_shape()));
}

}  // namespace

// slice_scatter(self, src, dim, start, end, step=1): cat(self[:start], src, self[end:]).
int slice_scatter_impl(Importer& im, int self, int src, std::int64_t d, Expr start, Expr end) {
  const Shape s = im.shape(self);
  const Expr n = s[static_cast<std::size_t>(d)];
  // Python clamping of the bounds, as the slice kernel does.
  auto clamp = [&](Expr e) {
    if (auto k = e.constant_value()) {
      if (*k < 0) e = im.simplify(n + e);
      if (auto k2 = e.constant_value(); k2 && *k2 < 0) return c(0);
      if (auto k3 = e.constant_value(); k3 && *k3 == INT64_MAX) return n;
    }
    return im.simplify(sym::min(sym::max(e, c(0)), n));
  };
  start = clamp(start);
  end = clamp(end);
  std::vector<int> parts;
  const DType dt = im.dtype(self);
  auto piece = [&](Expr a, Expr b) {
    const Expr len = im.simplify(b - a);
    if (len.constant_value() == 0) return;
    Shape ps = s;
    ps[static_cast<std::size_t>(d)] = len;
    parts.push_back(im.emit(OpKind::Slice, {self}, {d, a, b, std::int64_t{1}}, dt, ps));
  };
  piece(c(0), start);
  parts.push_back(im.cast(src, dt));
  piece(end, n);
  if (parts.size() == 1) return parts[0];
  return im.emit(OpKind::Cat, parts, {d}, dt, s);
}

namespace {

void slice_scatter(Importer& im) {
  const int self = im.tensor(0, "self");
  const int src = im.tensor(1, "src");
  const std::int64_t d = im.norm_dim(im.int_arg(2, "dim", 0), im.rank(self));
  if (im.int_arg(5, "step", 1) != 1) im.unsupported("slice_scatter with step != 1");
  const Expr start = im.opt_sym_int(3, "start").value_or(c(0));
  const Expr end = im.opt_sym_int(4, "end").value_or(c(INT64_MAX));
  im.define(0, slice_scatter_impl(im, self, src, d, start, end));
}

void select_scatter(Importer& im) {
  const int self = im.tensor(0, "self");
  const std::int64_t d = im.norm_dim(im.int_arg(2, "dim"), im.rank(self));
  const int src = im.unsqueeze(im.tensor(1, "src"), d);
  Expr index = im.sym_int(3, "index");
  if (auto k = index.constant_value(); k && *k < 0) index = im.simplify(im.shape(self)[static_cast<std::size_t>(d)] + index);
  im.define(0, slice_scatter_impl(im, self, src, d, index, im.simplify(index + c(1))));
}

// repeat_interleave(self, repeats: int, dim): unsqueeze, expand, merge.
void repeat_interleave(Importer& im) {
  const int x = im.tensor(0, "self");
  if (const json* r = im.arg(1, "repeats"); r && r->contains("as_tensor")) im.unsupported("repeat_interleave with a tensor of repeats");
  const Expr reps = im.sym_int(1, "repeats");
  int v = x;
  std::int64_t d;
  if (!im.has(2, "dim")) {
    Expr n = c(1);
    for (const Expr& e : im.shape(x)) n = n * e;
    v = im.reshape(x, {im.simplify(n)});
    d = 0;
  } else {
    d = im.norm_dim(im.int_arg(2, "dim"), im.rank(x));
  }
  const Shape s = im.shape(v);
  Shape split = s, expanded = s;
  split.insert(split.begin() + d + 1, c(1));
  expanded.insert(expanded.begin() + d + 1, reps);
  const int r = im.reshape(v, split);
  const int e = im.emit(OpKind::Expand, {r}, {expanded}, im.dtype(v), expanded);
  im.define(0, im.reshape(e, im.out_shape()));
}

// roll: per dim, cat(x[n-k:], x[:n-k]) (static sizes and shifts).
void roll(Importer& im) {
  int v = im.tensor(0, "self");
  const auto shifts = im.int_list(1, "shifts");
  auto dims = im.int_list(2, "dims", {});
  const Shape orig = im.shape(v);
  if (dims.empty()) {  // flattened roll
    Expr n = c(1);
    for (const Expr& e : orig) n = n * e;
    v = im.reshape(v, {im.simplify(n)});
    dims = {0};
  }
  if (shifts.size() != dims.size()) im.bad("roll needs one shift per dim");
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::int64_t d = im.norm_dim(dims[i], im.rank(v));
    const Shape s = im.shape(v);
    auto n = im.simplify(s[static_cast<std::size_t>(d)]).constant_value();
    if (!n) im.unsupported("roll along a dynamic dim");
    if (*n == 0) continue;
    const std::int64_t k = ((shifts[i] % *n) + *n) % *n;
    if (k == 0) continue;
    Shape a = s, b = s;
    a[static_cast<std::size_t>(d)] = c(k);
    b[static_cast<std::size_t>(d)] = c(*n - k);
    const int tail = im.emit(OpKind::Slice, {v}, {d, c(*n - k), c(*n), std::int64_t{1}}, im.dtype(v), a);
    const int head = im.emit(OpKind::Slice, {v}, {d, c(0), c(*n - k), std::int64_t{1}}, im.dtype(v), b);
    v = im.emit(OpKind::Cat, {tail, head}, {d}, im.dtype(v), s);
  }
  im.define(0, im.reshape(v, im.out_shape()));
}

// pixel_shuffle(r): [N, C*r*r, H, W] -> [N, C, H*r, W*r]; pixel_unshuffle the inverse.
void pixel_shuffle(Importer& im, bool inverse) {
  const int x = im.tensor(0, "self");
  const std::int64_t r = im.int_arg(1, inverse ? "downscale_factor" : "upscale_factor");
  const Shape s = im.shape(x);
  if (s.size() != 4) im.unsupported("pixel shuffle of rank other than 4");
  const Expr n = s[0], ch = s[1], h = s[2], w = s[3];
  int v;
  if (!inverse) {
    const Expr co = im.simplify(sym::floordiv(ch, c(r * r)));
    v = im.reshape(x, {n, co, c(r), c(r), h, w});
    v = im.permute(v, {0, 1, 4, 2, 5, 3});
  } else {
    const Expr ho = im.simplify(sym::floordiv(h, c(r))), wo = im.simplify(sym::floordiv(w, c(r)));
    v = im.reshape(x, {n, ch, ho, c(r), wo, c(r)});
    v = im.permute(v, {0, 1, 3, 5, 2, 4});
  }
  im.define(0, im.reshape(v, im.out_shape()));
}

// topk / sort / argsort through the topk kernel (k = the dim's size for sorts).
void topk(Importer& im, bool is_sort, bool indices_only) {
  const int x = im.tensor(0, "self");
  const std::int64_t r = im.rank(x);
  std::int64_t k, d;
  bool largest;
  if (is_sort) {
    d = im.norm_dim(im.int_arg(indices_only ? 1 : 2, "dim", -1), r);
    largest = im.bool_arg(indices_only ? 2 : 3, "descending", false);
    auto n = im.simplify(im.shape(x)[static_cast<std::size_t>(r == 0 ? 0 : d)]).constant_value();
    if (r > 0 && !n) im.unsupported("sorting along a dynamic dim");
    k = r == 0 ? 1 : *n;
  } else {
    k = im.int_arg(1, "k");
    d = im.norm_dim(im.int_arg(2, "dim", -1), r);
    largest = im.bool_arg(3, "largest", true);
  }
  Shape s = im.shape(x);
  if (r > 0) s[static_cast<std::size_t>(d)] = c(k);
  const auto outs = im.emit_multi(OpKind::Topk, {x}, {k, d, largest, true}, im.dtype(x), {s, s});
  // emit_multi gives every output x's dtype; the indices are i64.
  im.graph().values[static_cast<std::size_t>(outs[1])].dtype = DType::kI64;
  if (indices_only) {
    im.define(0, outs[1]);
  } else {
    im.define(0, outs[0]);
    if (im.num_outputs() > 1) im.define(1, outs[1]);
  }
}

void full_like(Importer& im, std::optional<double> value, std::size_t value_pos) {
  const DType dt = im.out_dtype();
  if (!value) {
    const char* name = im.target().rfind("aten.scalar_tensor", 0) == 0 ? "s" : "fill_value";
    const Operand o = im.operand(value_pos, name);
    if (o.symbolic || o.is_tensor()) {  // a symbolic (or 0-d tensor) fill value: broadcast it
      const int t = im.as_tensor(o, dt);
      const Shape out = im.out_shape();
      if (out.empty()) {
        im.define(0, t);
        return;
      }
      im.define(0, im.emit(OpKind::Expand, {im.reshape(t, Shape(out.size(), c(1)))}, {out}, dt, out));
      return;
    }
  }
  const double v = value ? *value : im.float_arg(value_pos, "fill_value");
  im.emit_out(OpKind::Full, {}, {im.out_shape(), v, dt});
}

void arange(Importer& im) {
  Expr start = c(0), end, step = c(1);
  const std::string& ov = im.overload();
  bool floating = false;
  for (const char* name : {"start", "end", "step"}) {
    const json* a = im.arg(0, name);
    floating = floating || (a && a->contains("as_float"));
  }
  if (floating) {
    // Static float bounds: arange(0, n) * step + start in the output dtype.
    const bool only_end = ov == "default" || ov == "out";
    const double fs = only_end ? 0.0 : im.float_arg(0, "start"), fe = im.float_arg(only_end ? 0 : 1, "end");
    const double fst = only_end ? 1.0 : im.float_arg(2, "step", 1.0);
    if (fst == 0.0) im.bad("arange step is 0");
    const auto n = static_cast<std::int64_t>(std::max(0.0, std::ceil((fe - fs) / fst)));
    const DType dt = im.out_dtype();
    int v = im.emit(OpKind::Arange, {}, {c(0), c(n), c(1), dt}, dt, {c(n)});
    if (fst != 1.0) v = im.emit(OpKind::Mul, {v, im.scalar(fst, dt)}, {}, dt, {c(n)});
    if (fs != 0.0) v = im.emit(OpKind::Add, {v, im.scalar(fs, dt)}, {}, dt, {c(n)});
    im.define(0, v);
    return;
  }
  if (ov == "default" || ov == "out") {
    end = im.sym_int(0, "end");
  } else {
    start = im.sym_int(0, "start");
    end = im.sym_int(1, "end");
    if (ov == "start_step" || im.has(2, "step")) step = im.opt_sym_int(2, "step").value_or(c(1));
  }
  const DType dt = im.out_dtype();
  im.emit_out(OpKind::Arange, {}, {start, end, step, dt});
}

}  // namespace

void register_shape(HandlerTable& t) {
  for (const char* name : {"aten.view", "aten.reshape", "aten._unsafe_view", "aten.view_copy", "aten._reshape_alias",
                           "aten.unsqueeze", "aten.unsqueeze_copy", "aten.squeeze", "aten.squeeze_copy", "aten.flatten",
                           "aten.unflatten", "aten.view_as", "aten.reshape_as", "aten.ravel", "aten.atleast_1d",
                           "aten.atleast_2d"}) {
    t[name] = as_reshape;
  }
  t["aten.expand"] = expand;
  t["aten.expand_copy"] = expand;
  t["aten.expand_as"] = expand;
  t["aten.broadcast_to"] = expand;
  t["aten.permute"] = permute;
  t["aten.permute_copy"] = permute;
  t["aten.transpose"] = transpose;
  t["aten.transpose_copy"] = transpose;
  t["aten.swapaxes"] = transpose;
  t["aten.swapdims"] = transpose;
  t["aten.t"] = transpose;
  t["aten.numpy_T"] = [](Importer& im) {
    const int x = im.tensor(0, "self");
    std::vector<std::int64_t> perm;
    for (std::int64_t d = im.rank(x) - 1; d >= 0; --d) perm.push_back(d);
    im.define(0, im.permute(x, perm));
  };
  t["aten.slice"] = slice;
  t["aten.slice_copy"] = slice;
  t["aten.select"] = select;
  t["aten.select_copy"] = select;
  t["aten.narrow"] = narrow;
  t["aten.cat"] = cat;
  t["aten.concat"] = cat;
  t["aten.concatenate"] = cat;
  t["aten.stack"] = stack;
  t["aten.split"] = split;
  t["aten.split_with_sizes"] = split;
  t["aten.split_copy"] = split;
  t["aten.split_with_sizes_copy"] = split;
  t["aten.chunk"] = split;
  t["aten.unsafe_split"] = split;
  t["aten.unbind"] = unbind;
  t["aten.unbind_copy"] = unbind;
  t["aten.constant_pad_nd"] = pad;
  t["aten.pad"] = pad;
  t["aten.flip"] = [](Importer& im) {
    const int x = im.tensor(0, "self");
    auto dims = im.int_list(1, "dims");
    for (auto& d : dims) d = im.norm_dim(d, im.rank(x));
    im.emit_out(OpKind::Flip, {x}, {dims});
  };
  t["aten.gather"] = [](Importer& im) {
    const int x = im.tensor(0, "self");
    im.emit_out(OpKind::Gather, {x, im.tensor(2, "index")}, {im.norm_dim(im.int_arg(1, "dim"), im.rank(x))});
  };
  t["aten.index_select"] = [](Importer& im) {
    const int x = im.tensor(0, "self");
    im.emit_out(OpKind::IndexSelect, {x, im.tensor(2, "index")}, {im.norm_dim(im.int_arg(1, "dim"), im.rank(x))});
  };
  t["aten.index"] = index;
  t["aten.index_put"] = index_put;
  t["aten.index_copy"] = index_copy;
  t["aten.diff"] = diff;
  t["aten.fill"] = fill;
  t["aten.zero"] = zero;
  t["aten.as_strided"] = as_strided;
  t["aten.as_strided_copy"] = as_strided;
  for (const char* name : {"aten.reflection_pad1d", "aten.reflection_pad2d", "aten.reflection_pad3d"}) {
    t[name] = [](Importer& im) { border_pad(im, "reflect"); };
  }
  for (const char* name : {"aten.replication_pad1d", "aten.replication_pad2d", "aten.replication_pad3d"}) {
    t[name] = [](Importer& im) { border_pad(im, "replicate"); };
  }
  t["aten.repeat"] = repeat;
  t["aten.tril"] = [](Importer& im) { im.emit_out(OpKind::Tril, {im.tensor(0, "self")}, {im.int_arg(1, "diagonal", 0)}); };
  t["aten.triu"] = [](Importer& im) { im.emit_out(OpKind::Triu, {im.tensor(0, "self")}, {im.int_arg(1, "diagonal", 0)}); };

  t["aten.full"] = [](Importer& im) { full_like(im, std::nullopt, 1); };
  t["aten.new_full"] = [](Importer& im) { full_like(im, std::nullopt, 2); };
  t["aten.full_like"] = [](Importer& im) { full_like(im, std::nullopt, 1); };
  t["aten.scalar_tensor"] = [](Importer& im) { full_like(im, im.float_arg(0, "s"), 0); };
  for (const char* name : {"aten.zeros", "aten.new_zeros", "aten.zeros_like", "aten.empty", "aten.new_empty", "aten.empty_like",
                           "aten.empty_strided", "aten.new_empty_strided", "aten.empty_permuted"}) {
    t[name] = [](Importer& im) { full_like(im, 0.0, 0); };
  }
  for (const char* name : {"aten.ones", "aten.new_ones", "aten.ones_like"}) {
    t[name] = [](Importer& im) { full_like(im, 1.0, 0); };
  }
  t["aten.arange"] = arange;
  t["aten.topk"] = [](Importer& im) { topk(im, false, false); };
  t["aten.roll"] = roll;
  t["aten.slice_scatter"] = slice_scatter;
  t["aten.select_scatter"] = select_scatter;
  t["aten.repeat_interleave"] = repeat_interleave;
  t["aten.copy"] = [](Importer& im) {  // functional copy: src cast and broadcast to self
    const int src = im.cast(im.tensor(1, "src"), im.out_dtype());
    const Shape out = im.out_shape();
    if (im.shape(src) == out) {
      im.define(0, src);
      return;
    }
    im.emit_out(OpKind::Expand, {src}, {out});
  };
  t["aten.pixel_shuffle"] = [](Importer& im) { pixel_shuffle(im, false); };
  t["aten.pixel_unshuffle"] = [](Importer& im) { pixel_shuffle(im, true); };
  t["aten.sort"] = [](Importer& im) { topk(im, true, false); };
  t["aten.argsort"] = [](Importer& im) { topk(im, true, true); };

  // diagonal(x, offset, dim1, dim2): the two dims moved last and flattened, then the
  // diagonal's flat positions picked (static sizes); the diagonal becomes the last dim.
  t["aten.diagonal"] = [](Importer& im) {
    const int x = im.tensor(0, "self");
    const std::int64_t r = im.rank(x), offset = im.int_arg(1, "offset", 0);
    const std::int64_t d1 = im.norm_dim(im.int_arg(2, "dim1", 0), r), d2 = im.norm_dim(im.int_arg(3, "dim2", 1), r);
    if (d1 == d2) im.bad("diagonal dim1 and dim2 are the same");
    const Shape xs = im.shape(x);
    auto n1 = im.simplify(xs[static_cast<std::size_t>(d1)]).constant_value(), n2 = im.simplify(xs[static_cast<std::size_t>(d2)]).constant_value();
    if (!n1 || !n2) im.unsupported("diagonal of dynamic sizes");
    std::vector<std::int64_t> perm, flat_idx;
    Shape rest;
    for (std::int64_t k = 0; k < r; ++k) {
      if (k != d1 && k != d2) perm.push_back(k), rest.push_back(xs[static_cast<std::size_t>(k)]);
    }
    perm.push_back(d1), perm.push_back(d2);
    for (std::int64_t i = std::max<std::int64_t>(0, -offset); i < *n1 && i + offset < *n2; ++i) flat_idx.push_back(i * *n2 + i + offset);
    Shape flat = rest;
    flat.push_back(c(*n1 * *n2));
    const int f = im.reshape(im.permute(x, perm), flat);
    im.emit_out(OpKind::IndexSelect, {f, im.index_constant(flat_idx)}, {static_cast<std::int64_t>(rest.size())});
  };
  t["aten.trace"] = [](Importer& im) {  // the sum of the main diagonal of a matrix
    const int x = im.tensor(0, "self");
    if (im.rank(x) != 2) im.bad("trace needs a matrix");
    const Shape xs = im.shape(x);
    auto n1 = im.simplify(xs[0]).constant_value(), n2 = im.simplify(xs[1]).constant_value();
    if (!n1 || !n2) im.unsupported("trace of dynamic sizes");
    std::vector<std::int64_t> idx;
    for (std::int64_t i = 0; i < std::min(*n1, *n2); ++i) idx.push_back(i * *n2 + i);
    const int f = im.reshape(x, {c(*n1 * *n2)});
    const int diag = im.emit(OpKind::IndexSelect, {f, im.index_constant(idx)}, {std::int64_t{0}}, im.dtype(x), {c(static_cast<std::int64_t>(idx.size()))});
    const DType out = im.out_dtype();
    im.emit_out(OpKind::Sum, {im.cast(diag, dtype_is_floating(out) ? out : im.dtype(diag))}, {std::vector<std::int64_t>{0}, false, std::monostate{}});
  };
  t["aten.meshgrid"] = [](Importer& im) {  // each 1-D input expanded over the grid ('ij'; 'xy' swaps the first two)
    const auto xs = im.tensor_list(0, "tensors");
    const std::string indexing = im.string_arg(1, "indexing", "ij");
    if (indexing != "ij" && indexing != "xy") im.bad("meshgrid indexing must be 'ij' or 'xy'");
    const bool xy = indexing == "xy" && xs.size() >= 2;
    Shape grid;
    for (int v : xs) {
      if (im.rank(v) > 1) im.bad("meshgrid takes 0-d or 1-d tensors");
      grid.push_back(im.rank(v) == 0 ? c(1) : im.shape(v)[0]);
    }
    if (xy) std::swap(grid[0], grid[1]);
    for (std::size_t k = 0; k < xs.size(); ++k) {
      const std::size_t pos = xy && k < 2 ? 1 - k : k;
      Shape s(xs.size(), c(1));
      s[pos] = grid[pos];
      const int r = im.reshape(xs[k], s);
      im.define(k, im.emit(OpKind::Expand, {r}, {grid}, im.dtype(xs[k]), grid));
    }
  };
  t["aten.one_hot"] = [](Importer& im) {  // x[..., None] == arange(num_classes)
    const int x = im.tensor(0, "self");
    const std::int64_t n = im.int_arg(1, "num_classes", -1);
    if (n < 0) im.unsupported("one_hot without num_classes (its size would depend on the data)");
    const int classes = im.emit(OpKind::Arange, {}, {c(0), c(n), c(1), im.dtype(x)}, im.dtype(x), {c(n)});
    const int eq = im.emit(OpKind::Eq, {im.unsqueeze(x, im.rank(x)), classes}, {}, DType::kBool, im.out_shape());
    im.define(0, im.cast(eq, im.out_dtype()));
  };
  t["aten.rot90"] = [](Importer& im) {  // PyTorch: k = 1 flips dims[1] then transposes; 2 flips both; 3 flips dims[0]
    const int x = im.tensor(0, "self");
    const std::int64_t r = im.rank(x);
    auto dims = im.int_list(2, "dims", {0, 1});
    if (dims.size() != 2) im.bad("rot90 needs two dims");
    const std::int64_t a = im.norm_dim(dims[0], r), b = im.norm_dim(dims[1], r);
    if (a == b) im.bad("rot90 dims must differ");
    const std::int64_t k = ((im.int_arg(1, "k", 1) % 4) + 4) % 4;
    std::vector<std::int64_t> swap;
    for (std::int64_t i = 0; i < r; ++i) swap.push_back(i == a ? b : i == b ? a : i);
    const DType d = im.dtype(x);
    const Shape xs = im.shape(x);
    if (k == 0) {
      im.define(0, x);
    } else if (k == 2) {
      im.emit_out(OpKind::Flip, {x}, {std::vector<std::int64_t>{std::min(a, b), std::max(a, b)}});
    } else {
      const int f = im.emit(OpKind::Flip, {x}, {std::vector<std::int64_t>{k == 1 ? b : a}}, d, xs);
      im.define(0, im.permute(f, swap));
    }
  };
  t["aten.take_along_dim"] = [](Importer& im) {  // gather after broadcasting all dims but `dim`
    int x = im.tensor(0, "self");
    int idx = im.tensor(1, "indices");
    if (!im.has(2, "dim")) {
      Expr n = c(1);
      for (const Expr& e : im.shape(x)) n = n * e;
      Expr m = c(1);
      for (const Expr& e : im.shape(idx)) m = m * e;
      im.emit_out(OpKind::Gather, {im.reshape(x, {im.simplify(n)}), im.reshape(idx, {im.simplify(m)})}, {std::int64_t{0}});
      return;
    }
    const std::int64_t r = im.rank(x);
    if (im.rank(idx) != r) im.bad("take_along_dim indices must have the rank of self");
    const std::int64_t d = im.norm_dim(im.int_arg(2, "dim"), r);
    Shape xs = im.shape(x), is = im.shape(idx), bx = xs, bi = is;
    for (std::int64_t k = 0; k < r; ++k) {
      if (k == d) continue;
      const auto u = static_cast<std::size_t>(k);
      const Expr e = im.simplify(xs[u]).constant_value() == 1 ? is[u] : xs[u];
      bx[u] = e, bi[u] = e;
    }
    if (bx != xs) x = im.emit(OpKind::Expand, {x}, {bx}, im.dtype(x), bx);
    if (bi != is) idx = im.emit(OpKind::Expand, {idx}, {bi}, im.dtype(idx), bi);
    im.emit_out(OpKind::Gather, {x, idx}, {d});
  };
  t["aten.nonzero"] = [](Importer& im) { im.emit_out(OpKind::Nonzero, {im.tensor(0, "self")}); };
  t["aten.masked_select"] = [](Importer& im) {
    im.emit_out(OpKind::MaskedSelect, {im.tensor(0, "self"), im.cast(im.tensor(1, "mask"), DType::kBool)});
  };
  auto item_handler = [](Importer& im) {
    const int x = im.tensor(0, "self");
    if (dtype_is_floating(im.dtype(x))) im.unsupported("item() of a floating tensor (symbolic floats)");
    Shape one;
    const int v = im.emit(OpKind::Item, {x}, {}, im.dtype(x), one);
    (void)v;
    const int node = static_cast<int>(im.graph().nodes.size()) - 1;
    im.define_declared_sym(0);
    im.bind_scalar(im.declared_sym(0), node, 0);
  };
  t["aten.item"] = item_handler;
  t["aten._local_scalar_dense"] = item_handler;
}

}  // namespace kiln::pt2
