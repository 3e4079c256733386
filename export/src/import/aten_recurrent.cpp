// aten recurrent layers (lstm, gru, rnn_tanh, rnn_relu and their cells), grid sampling
// (grid_sampler, affine_grid_generator) and the training IR's 1-D / 3-D / nearest-exact
// upsampling, by decomposition into Kiln's ops.
//
// Recurrent layers are unrolled over their static sequence length: one linear per layer and
// direction projects the inputs of all steps at once, then each step adds h @ W_hh^T and
// applies the gates (PyTorch's gate order: i, f, g, o for LSTM; r, z, n for GRU).
// Grid sampling gathers the corner taps with an index node over [N, spatial..., C] and
// weights them as PyTorch's CPU kernel does (GridSampler.h: unnormalize, clip / reflect,
// within-bounds masks). Upsampling gathers with index constants computed as PyTorch's
// kernels compute them (UpSample.h) and lerps along one axis at a time.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "import/importer.h"

namespace kiln::pt2 {
namespace {

using sym::Expr;

Expr c(std::int64_t v) { return Expr::constant(v); }

std::int64_t static_size(Importer& im, const Expr& e, const std::string& what) {
  auto k = im.simplify(e).constant_value();
  if (!k) im.unsupported(what + " must be static");
  return *k;
}

// numpy broadcasting of two shapes (a size-1 dim takes the other's size).
Shape broadcast(Importer& im, const Shape& a, const Shape& b) {
  const std::size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (std::size_t i = 0; i < r; ++i) {
    const bool ha = i < a.size(), hb = i < b.size();
    const Expr ea = ha ? a[a.size() - 1 - i] : c(1), eb = hb ? b[b.size() - 1 - i] : c(1);
    const auto ka = im.simplify(ea).constant_value();
    out[r - 1 - i] = ka && *ka == 1 ? eb : ea;
  }
  return out;
}

// Elementwise binary op with broadcasting; comparisons give bool.
int bin(Importer& im, OpKind op, int a, int b) {
  const bool cmp = op == OpKind::Eq || op == OpKind::Ne || op == OpKind::Lt || op == OpKind::Le || op == OpKind::Gt ||
                   op == OpKind::Ge || op == OpKind::LogicalAnd || op == OpKind::LogicalOr;
  return im.emit(op, {a, b}, {}, cmp ? DType::kBool : im.dtype(a), broadcast(im, im.shape(a), im.shape(b)));
}
int add(Importer& im, int a, int b) { return bin(im, OpKind::Add, a, b); }
int sub(Importer& im, int a, int b) { return bin(im, OpKind::Sub, a, b); }
int mul(Importer& im, int a, int b) { return bin(im, OpKind::Mul, a, b); }
int un(Importer& im, OpKind op, int a) { return im.emit(op, {a}, {}, im.dtype(a), im.shape(a)); }
int addc(Importer& im, int a, double v) { return v == 0.0 ? a : add(im, a, im.scalar(v, im.dtype(a))); }
int mulc(Importer& im, int a, double v) { return v == 1.0 ? a : mul(im, a, im.scalar(v, im.dtype(a))); }
int clampc(Importer& im, int a, double lo, double hi) {
  return im.emit(OpKind::Clamp, {a}, {lo, hi}, im.dtype(a), im.shape(a));
}
int where(Importer& im, int cond, int a, int b) {
  return im.emit(OpKind::Where, {cond, a, b}, {}, im.dtype(a), broadcast(im, im.shape(cond), broadcast(im, im.shape(a), im.shape(b))));
}

// A floating constant of `dt` (f32 / f64 stored; half types cast from f32).
int float_constant(Importer& im, DType dt, std::vector<std::int64_t> shape, const std::vector<double>& v, const std::string& name) {
  const bool f64 = dt == DType::kF64;
  std::vector<std::uint8_t> bytes(v.size() * (f64 ? 8 : 4));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (f64) {
      std::memcpy(bytes.data() + 8 * i, &v[i], 8);
    } else {
      const float f = static_cast<float>(v[i]);
      std::memcpy(bytes.data() + 4 * i, &f, 4);
    }
  }
  return im.cast(im.constant(f64 ? DType::kF64 : DType::kF32, std::move(shape), std::move(bytes), name), dt);
}

// Splits `v` along `dim` into `n` equal static parts.
std::vector<int> split_even(Importer& im, int v, std::int64_t dim, std::int64_t n) {
  if (n == 1) return {v};
  Shape s = im.shape(v);
  const std::int64_t total = static_size(im, s[static_cast<std::size_t>(dim)], "the split size");
  if (n < 1 || total % n != 0) {
    im.bad("cannot split a dim of " + std::to_string(total) + " into " + std::to_string(n) + " equal parts");
  }
  s[static_cast<std::size_t>(dim)] = c(total / n);
  return im.emit_multi(OpKind::Split, {v}, {dim, std::vector<Expr>(static_cast<std::size_t>(n), c(total / n))}, im.dtype(v),
                       std::vector<Shape>(static_cast<std::size_t>(n), s));
}

int cat(Importer& im, const std::vector<int>& parts, std::int64_t dim) {
  if (parts.size() == 1) return parts[0];
  Shape s = im.shape(parts[0]);
  Expr total = c(0);
  for (int p : parts) total = total + im.shape(p)[static_cast<std::size_t>(dim)];
  s[static_cast<std::size_t>(dim)] = im.simplify(total);
  return im.emit(OpKind::Cat, parts, {dim}, im.dtype(parts[0]), s);
}

int linear(Importer& im, int x, int w, std::optional<int> bias) {
  Shape s = im.shape(x);
  s.back() = im.shape(w)[0];
  std::vector<int> in{x, w};
  if (bias) in.push_back(*bias);
  return im.emit(OpKind::Linear, in, {}, im.dtype(x), s);
}

// ---- recurrent layers -------------------------------------------------------------------

enum class Cell { kLstm, kGru, kRnnTanh, kRnnRelu };

struct CellWeights {
  int w_ih = -1, w_hh = -1;
  std::optional<int> b_ih, b_hh, w_hr;
  std::optional<int> input_bias;  // the bias folded into the input projection
};

// The input projection's bias: b_ih + b_hh for LSTM / RNN (both add to every gate), b_ih
// only for GRU (b_hn is scaled by r).
std::optional<int> input_bias(Importer& im, Cell cell, const CellWeights& w) {
  if (!w.b_ih) return std::nullopt;
  if (cell == Cell::kGru || !w.b_hh) return w.b_ih;
  return add(im, *w.b_ih, *w.b_hh);
}

// One step from the projected input p [B, G*H]; updates h (and c for LSTM).
void cell_step(Importer& im, Cell cell, const CellWeights& w, int p, int& h, int& c_state) {
  switch (cell) {
    case Cell::kLstm: {
      const int g = add(im, p, linear(im, h, w.w_hh, std::nullopt));
      const auto q = split_even(im, g, 1, 4);
      const int i = un(im, OpKind::Sigmoid, q[0]), f = un(im, OpKind::Sigmoid, q[1]);
      const int gg = un(im, OpKind::Tanh, q[2]), o = un(im, OpKind::Sigmoid, q[3]);
      c_state = add(im, mul(im, f, c_state), mul(im, i, gg));
      h = mul(im, o, un(im, OpKind::Tanh, c_state));
      if (w.w_hr) h = linear(im, h, *w.w_hr, std::nullopt);
      return;
    }
    case Cell::kGru: {
      const int gh = linear(im, h, w.w_hh, w.b_hh);
      const auto pi = split_even(im, p, 1, 3), ph = split_even(im, gh, 1, 3);
      const int r = un(im, OpKind::Sigmoid, add(im, pi[0], ph[0]));
      const int z = un(im, OpKind::Sigmoid, add(im, pi[1], ph[1]));
      const int n = un(im, OpKind::Tanh, add(im, pi[2], mul(im, r, ph[2])));
      h = add(im, n, mul(im, z, sub(im, h, n)));  // (1 - z) * n + z * h
      return;
    }
    case Cell::kRnnTanh:
    case Cell::kRnnRelu:
      h = un(im, cell == Cell::kRnnTanh ? OpKind::Tanh : OpKind::Relu, add(im, p, linear(im, h, w.w_hh, std::nullopt)));
      return;
  }
}

const char* cell_name(Cell cell) {
  switch (cell) {
    case Cell::kLstm: return "LSTM";
    case Cell::kGru: return "GRU";
    case Cell::kRnnTanh: return "RNN (tanh)";
    case Cell::kRnnRelu: return "RNN (relu)";
  }
  return "RNN";
}

// aten.lstm.input(input, hx[h0, c0], params, has_biases, num_layers, dropout, train,
// bidirectional, batch_first) -> (output, h_n, c_n); gru.input / rnn_tanh.input /
// rnn_relu.input take hx as one tensor and return (output, h_n).
void recurrent(Importer& im, Cell cell) {
  const std::string name = cell_name(cell);
  if (im.overload() != "input") im.unsupported(name + " over packed sequences (overload '" + im.overload() + "')");
  const DType dt = im.out_dtype(0);
  if (!dtype_is_floating(dt)) im.unsupported(name + " of integers");
  int x = im.cast(im.tensor(0, "input"), dt);
  std::vector<int> hx = cell == Cell::kLstm ? im.tensor_list(1, "hx") : std::vector<int>{im.tensor(1, "hx")};
  for (int& v : hx) v = im.cast(v, dt);
  std::vector<int> params = im.tensor_list(2, "params");
  for (int& v : params) v = im.cast(v, dt);
  const bool has_biases = im.bool_arg(3, "has_biases", true);
  const std::int64_t layers = im.int_arg(4, "num_layers", 1);
  const double dropout = im.float_arg(5, "dropout", 0.0);
  const bool train = im.bool_arg(6, "train", false);
  const bool bidir = im.bool_arg(7, "bidirectional", false);
  const bool batch_first = im.bool_arg(8, "batch_first", false);
  if (train && dropout > 0.0 && layers > 1) im.unsupported(name + " dropout between layers in training mode");
  if (hx.size() != (cell == Cell::kLstm ? 2u : 1u)) im.bad(name + " hx has " + std::to_string(hx.size()) + " tensors");
  if (im.rank(x) != 3) im.unsupported(name + " input of rank " + std::to_string(im.rank(x)) + " (expected [T, B, I] or [B, T, I])");
  if (batch_first) x = im.permute(x, {1, 0, 2});
  const Shape xs = im.shape(x);
  const auto steps = im.simplify(xs[0]).constant_value();
  if (!steps) {
    im.unsupported(name + " over a symbolic sequence length: recurrent layers are unrolled over a static number of time steps");
  }
  const std::int64_t T = *steps, D = bidir ? 2 : 1;
  if (T < 0 || layers < 0 || T > 65536 || layers > 65536 || T * std::max<std::int64_t>(layers, 1) * D > 65536) {
    im.unsupported(name + " of " + std::to_string(T) + " steps x " + std::to_string(layers) + " layers: more than 65536 unrolled steps");
  }
  const Expr B = xs[1];
  const std::size_t base = has_biases ? 4 : 2;
  if (layers < 1 || params.size() % static_cast<std::size_t>(layers * D) != 0) im.bad(name + " has a params list of the wrong length");
  const std::size_t per = params.size() / static_cast<std::size_t>(layers * D);
  const bool proj = cell == Cell::kLstm && per == base + 1;
  if (per != base && !proj) im.bad(name + " has " + std::to_string(per) + " params per layer and direction");
  for (int h0 : hx) {
    if (im.rank(h0) != 3) im.unsupported(name + " with an initial state of rank " + std::to_string(im.rank(h0)));
  }

  std::vector<int> h_n, c_n;
  int layer_in = x;
  int output = -1;
  for (std::int64_t l = 0; l < layers; ++l) {
    std::vector<int> dir_out;
    for (std::int64_t d = 0; d < D; ++d) {
      const std::int64_t k = l * D + d;
      const std::size_t at = static_cast<std::size_t>(k) * per;
      CellWeights w;
      w.w_ih = params[at];
      w.w_hh = params[at + 1];
      if (has_biases) {
        w.b_ih = params[at + 2];
        w.b_hh = params[at + 3];
      }
      if (proj) w.w_hr = params[at + base];
      if (im.rank(w.w_ih) != 2 || im.rank(w.w_hh) != 2) im.bad(name + " weights must be 2-D");
      // Initial state of this layer and direction: hx[k] -> [B, H].
      auto state = [&](int v) {
        Shape s = im.shape(v);
        Shape one = s;
        one[0] = c(1);
        const int sl = im.emit(OpKind::Slice, {v}, {std::int64_t{0}, c(k), c(k + 1), std::int64_t{1}}, dt, one);
        return im.reshape(sl, {s[1], s[2]});
      };
      int h = state(hx[0]);
      int cs = cell == Cell::kLstm ? state(hx[1]) : -1;
      // All steps' input projections at once: [T, B, G*H], then one [B, G*H] per step.
      const int proj_in = linear(im, layer_in, w.w_ih, input_bias(im, cell, w));
      const Expr gh = im.shape(proj_in)[2];
      std::vector<int> p = split_even(im, proj_in, 0, T);
      for (int& v : p) v = im.reshape(v, {B, gh});
      std::vector<int> hs(static_cast<std::size_t>(T));
      for (std::int64_t s = 0; s < T; ++s) {
        const std::size_t t = static_cast<std::size_t>(d == 0 ? s : T - 1 - s);
        cell_step(im, cell, w, p[t], h, cs);
        const Shape hsh = im.shape(h);
        hs[t] = im.reshape(h, {c(1), hsh[0], hsh[1]});
      }
      dir_out.push_back(cat(im, hs, 0));
      const Shape hsh = im.shape(h);
      h_n.push_back(im.reshape(h, {c(1), hsh[0], hsh[1]}));
      if (cell == Cell::kLstm) {
        const Shape csh = im.shape(cs);
        c_n.push_back(im.reshape(cs, {c(1), csh[0], csh[1]}));
      }
    }
    output = cat(im, dir_out, 2);
    layer_in = output;
  }
  if (im.output_used(0)) {
    if (batch_first) output = im.permute(output, {1, 0, 2});
    im.define(0, output);
  }
  if (im.num_outputs() > 1 && im.output_used(1)) im.define(1, cat(im, h_n, 0));
  if (cell == Cell::kLstm && im.num_outputs() > 2 && im.output_used(2)) im.define(2, cat(im, c_n, 0));
}

// lstm_cell(input, hx[h, c], w_ih, w_hh, b_ih?, b_hh?) -> (h, c); gru_cell /
// rnn_tanh_cell / rnn_relu_cell(input, hx, w_ih, w_hh, b_ih?, b_hh?) -> h.
void recurrent_cell(Importer& im, Cell cell) {
  const DType dt = im.out_dtype(0);
  if (!dtype_is_floating(dt)) im.unsupported(std::string(cell_name(cell)) + " cell of integers");
  const int x = im.cast(im.tensor(0, "input"), dt);
  std::vector<int> hx = cell == Cell::kLstm ? im.tensor_list(1, "hx") : std::vector<int>{im.tensor(1, "hx")};
  for (int& v : hx) v = im.cast(v, dt);
  CellWeights w;
  w.w_ih = im.cast(im.tensor(2, "w_ih"), dt);
  w.w_hh = im.cast(im.tensor(3, "w_hh"), dt);
  if (auto b = im.opt_tensor(4, "b_ih")) w.b_ih = im.cast(*b, dt);
  if (auto b = im.opt_tensor(5, "b_hh")) w.b_hh = im.cast(*b, dt);
  if (w.b_hh && !w.b_ih) {  // only b_hh: fold it like b_ih for the non-GRU cells
    if (cell != Cell::kGru) std::swap(w.b_ih, w.b_hh);
  }
  if (im.rank(x) != 2) im.unsupported(std::string(cell_name(cell)) + " cell input of rank " + std::to_string(im.rank(x)));
  int h = hx[0];
  int cs = cell == Cell::kLstm ? hx.at(1) : -1;
  const int p = linear(im, x, w.w_ih, input_bias(im, cell, w));
  cell_step(im, cell, w, p, h, cs);
  im.define(0, h);
  if (cell == Cell::kLstm && im.num_outputs() > 1 && im.output_used(1)) im.define(1, cs);
}

// ---- grid sampling ------------------------------------------------------------------------

// PyTorch's reflect_coordinates: reflects `v` into [twice_low / 2, twice_high / 2].
int reflect(Importer& im, int v, std::int64_t twice_low, std::int64_t twice_high) {
  const DType dt = im.dtype(v);
  if (twice_low == twice_high) return mulc(im, v, 0.0);
  const double lo = static_cast<double>(twice_low) / 2, span = static_cast<double>(twice_high - twice_low) / 2;
  const int in = un(im, OpKind::Abs, addc(im, v, -lo));
  const int extra = bin(im, OpKind::Remainder, in, im.scalar(span, dt));
  const int flips = un(im, OpKind::Floor, mulc(im, in, 1.0 / span));
  const int even = bin(im, OpKind::Eq, bin(im, OpKind::Remainder, flips, im.scalar(2, dt)), im.scalar(0, dt));
  const int a = addc(im, extra, lo);
  const int b = addc(im, mulc(im, extra, -1.0), span + lo);
  return where(im, even, a, b);
}

// PyTorch's compute_coordinates: padding 1 (border) clips, 2 (reflection) reflects and clips.
int pad_coordinates(Importer& im, int v, std::int64_t size, std::int64_t padding, bool align) {
  if (padding == 1) return clampc(im, v, 0.0, static_cast<double>(size - 1));
  if (padding == 2) {
    v = align ? reflect(im, v, 0, 2 * (size - 1)) : reflect(im, v, -1, 2 * size - 1);
    return clampc(im, v, 0.0, static_cast<double>(size - 1));
  }
  return v;
}

// grid_sampler(input [N, C, *in], grid [N, *out, k], interpolation, padding, align_corners)
// for k = 2 (4-D input) or 3 (5-D input). interpolation: 0 bilinear, 1 nearest, 2 bicubic
// (2-D only); padding: 0 zeros, 1 border, 2 reflection.
void grid_sampler(Importer& im) {
  const DType dt = im.out_dtype();
  if (!dtype_is_floating(dt)) im.unsupported("grid sampling of integers");
  const int x = im.cast(im.tensor(0, "input"), dt);
  const int grid = im.cast(im.tensor(1, "grid"), dt);
  const std::int64_t mode = im.int_arg(2, "interpolation_mode", 0);
  const std::int64_t padding = im.int_arg(3, "padding_mode", 0);
  const bool align = im.bool_arg(4, "align_corners", false);
  const Shape xs = im.shape(x), gs = im.shape(grid);
  const std::int64_t r = im.rank(x);
  if (r != 4 && r != 5) im.unsupported("grid sampling of a rank-" + std::to_string(r) + " input (4-D or 5-D only)");
  const std::size_t nsp = static_cast<std::size_t>(r - 2);
  if (gs.size() != nsp + 2) im.bad("grid sampling: the grid has the wrong rank");
  if (mode < 0 || mode > 2) im.unsupported("grid sampling interpolation mode " + std::to_string(mode));
  if (mode == 2 && nsp != 2) im.unsupported("bicubic grid sampling of a 5-D input");
  if (padding < 0 || padding > 2) im.unsupported("grid sampling padding mode " + std::to_string(padding));
  std::vector<std::int64_t> in_size(nsp);
  for (std::size_t a = 0; a < nsp; ++a) in_size[a] = static_size(im, xs[2 + a], "grid sampling's input spatial size");
  // The grid's components, spatial axis a reading component nsp - 1 - a: [N, *out].
  const Shape os(gs.begin(), gs.end() - 1);
  const std::vector<int> comps = split_even(im, grid, static_cast<std::int64_t>(nsp + 1), static_cast<std::int64_t>(nsp));
  std::vector<int> coord(nsp);
  for (std::size_t a = 0; a < nsp; ++a) {
    const int g = im.reshape(comps[nsp - 1 - a], os);
    const double size = static_cast<double>(in_size[a]);
    // grid_sampler_unnormalize
    coord[a] = align ? mulc(im, mulc(im, addc(im, g, 1.0), 0.5), size - 1) : mulc(im, addc(im, mulc(im, addc(im, g, 1.0), size), -1.0), 0.5);
  }
  // Gathers from [N, *in, C] with index tensors [N, *out] per spatial axis -> [N, *out, C].
  std::vector<std::int64_t> perm{0};
  for (std::size_t a = 0; a < nsp; ++a) perm.push_back(static_cast<std::int64_t>(2 + a));
  perm.push_back(1);
  const int xt = im.permute(x, perm);
  Shape bshape{gs[0]};
  for (std::size_t a = 0; a < nsp; ++a) bshape.push_back(c(1));
  const int batch = im.reshape(im.emit(OpKind::Arange, {}, {c(0), gs[0], c(1), DType::kI64}, DType::kI64, {gs[0]}), bshape);
  Shape gathered = os;
  gathered.push_back(xs[1]);
  Shape os1 = os;
  os1.push_back(c(1));
  std::vector<std::int64_t> dims;
  for (std::size_t a = 0; a <= nsp; ++a) dims.push_back(static_cast<std::int64_t>(a));
  // The value at integer-valued float coordinates `at` (zero where out of bounds when `masked`).
  auto tap = [&](const std::vector<int>& at, bool masked) {
    std::vector<int> in{xt, batch};
    int mask = -1;
    for (std::size_t a = 0; a < nsp; ++a) {
      const double hi = static_cast<double>(in_size[a] - 1);
      if (masked) {
        const int ok = bin(im, OpKind::LogicalAnd, bin(im, OpKind::Ge, at[a], im.scalar(0, dt)), bin(im, OpKind::Le, at[a], im.scalar(hi, dt)));
        mask = mask < 0 ? ok : bin(im, OpKind::LogicalAnd, mask, ok);
      }
      in.push_back(im.cast(masked ? clampc(im, at[a], 0.0, hi) : at[a], DType::kI64));
    }
    int v = im.emit(OpKind::Index, in, {dims}, dt, gathered);
    if (masked) v = where(im, im.reshape(mask, os1), v, im.scalar(0, dt));
    return v;
  };
  int out = -1;
  auto accumulate = [&](int v, int weight) {
    const int t = weight < 0 ? v : mul(im, v, im.reshape(weight, os1));
    out = out < 0 ? t : add(im, out, t);
  };
  if (mode == 1) {  // nearest: round half to even (std::nearbyint)
    std::vector<int> at(nsp);
    for (std::size_t a = 0; a < nsp; ++a) at[a] = un(im, OpKind::Round, pad_coordinates(im, coord[a], in_size[a], padding, align));
    accumulate(tap(at, padding == 0), -1);
  } else if (mode == 0) {  // (bi/tri)linear over the 2^nsp corners
    std::vector<int> lo(nsp), w_lo(nsp), w_hi(nsp), hi(nsp);
    for (std::size_t a = 0; a < nsp; ++a) {
      const int v = pad_coordinates(im, coord[a], in_size[a], padding, align);
      lo[a] = un(im, OpKind::Floor, v);
      hi[a] = addc(im, lo[a], 1.0);
      w_lo[a] = sub(im, hi[a], v);  // e.g. nw = (ix_se - ix) * (iy_se - iy)
      w_hi[a] = sub(im, v, lo[a]);
    }
    for (std::size_t corner = 0; corner < (std::size_t{1} << nsp); ++corner) {
      std::vector<int> at(nsp);
      int weight = -1;
      for (std::size_t a = 0; a < nsp; ++a) {
        const bool up = (corner >> a) & 1;
        at[a] = up ? hi[a] : lo[a];
        const int wa = up ? w_hi[a] : w_lo[a];
        weight = weight < 0 ? wa : mul(im, weight, wa);
      }
      // Border / reflection clip the coordinate into range, but its upper neighbour can
      // still fall outside (with weight 0): mask every padding mode.
      accumulate(tap(at, true), weight);
    }
  } else {  // bicubic: 4x4 taps, each coordinate padded on its own (get_value_bounded)
    constexpr double A = -0.75;
    std::array<std::array<int, 4>, 2> coeff{};
    std::array<int, 2> base{};
    for (std::size_t a = 0; a < 2; ++a) {
      base[a] = un(im, OpKind::Floor, coord[a]);
      const int t = sub(im, coord[a], base[a]);
      // cubic_convolution1(x) = ((A + 2) x - (A + 3)) x^2 + 1; cubic_convolution2(x) = ((A x - 5A) x + 8A) x - 4A
      auto conv1 = [&](int v) { return addc(im, mul(im, addc(im, mulc(im, v, A + 2), -(A + 3)), mul(im, v, v)), 1.0); };
      auto conv2 = [&](int v) { return addc(im, mul(im, addc(im, mul(im, addc(im, mulc(im, v, A), -5 * A), v), 8 * A), v), -4 * A); };
      const int one_minus = addc(im, mulc(im, t, -1.0), 1.0);
      coeff[a] = {conv2(addc(im, t, 1.0)), conv1(t), conv1(one_minus), conv2(addc(im, one_minus, 1.0))};
    }
    // axis 0 is y (H), axis 1 is x (W)
    for (std::int64_t j = 0; j < 4; ++j) {
      const int y = pad_coordinates(im, addc(im, base[0], static_cast<double>(j - 1)), in_size[0], padding, align);
      const int yi = padding == 2 ? un(im, OpKind::Floor, y) : y;  // (int64_t) of a non-negative coordinate
      int row = -1;
      for (std::int64_t i = 0; i < 4; ++i) {
        const int xc = pad_coordinates(im, addc(im, base[1], static_cast<double>(i - 1)), in_size[1], padding, align);
        const int xi = padding == 2 ? un(im, OpKind::Floor, xc) : xc;
        const int v = mul(im, tap({yi, xi}, true), im.reshape(coeff[1][static_cast<std::size_t>(i)], os1));
        row = row < 0 ? v : add(im, row, v);
      }
      accumulate(row, coeff[0][static_cast<std::size_t>(j)]);
    }
  }
  // [N, *out, C] -> [N, C, *out]
  std::vector<std::int64_t> back{0, static_cast<std::int64_t>(nsp + 1)};
  for (std::size_t a = 0; a < nsp; ++a) back.push_back(static_cast<std::int64_t>(1 + a));
  im.define(0, im.permute(out, back));
}

// PyTorch's linspace(-1, 1, n) (scaled by (n - 1) / n unless align_corners).
std::vector<double> linspace_from_neg_one(std::int64_t n, bool align) {
  std::vector<double> v(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)), 0.0);
  if (n <= 1) return v;
  const float step = 2.0f / static_cast<float>(n - 1);
  for (std::int64_t i = 0; i < n; ++i) {
    float f = i < n / 2 ? -1.0f + step * static_cast<float>(i) : 1.0f - step * static_cast<float>(n - 1 - i);
    if (!align) f = f * static_cast<float>(n - 1) / static_cast<float>(n);
    v[static_cast<std::size_t>(i)] = f;
  }
  return v;
}

// affine_grid_generator(theta [N, k, k+1], size [N, C, *spatial], align_corners): the base
// grid [prod(spatial), k+1] of (x, y[, z], 1) rows times theta^T.
void affine_grid(Importer& im) {
  const DType dt = im.out_dtype();
  if (!dtype_is_floating(dt)) im.unsupported("affine_grid of integers");
  const int theta = im.cast(im.tensor(0, "theta"), dt);
  const std::vector<std::int64_t> size = im.int_list(1, "size");
  const bool align = im.bool_arg(2, "align_corners", false);
  if (size.size() != 4 && size.size() != 5) im.unsupported("affine_grid of a size of length " + std::to_string(size.size()));
  const std::size_t k = size.size() - 2;
  std::vector<std::vector<double>> axis(k);  // axis[a]: the coordinates along spatial dim a
  std::int64_t points = 1;
  for (std::size_t a = 0; a < k; ++a) {
    if (size[2 + a] < 1 || size[2 + a] > (std::int64_t{1} << 16)) im.bad("affine_grid size " + std::to_string(size[2 + a]) + " is outside [1, 65536]");
    if (points * size[2 + a] > (std::int64_t{1} << 24)) im.unsupported("affine_grid of more than 2^24 points");
    axis[a] = linspace_from_neg_one(size[2 + a], align);
    points *= size[2 + a];
  }
  std::vector<double> base;
  base.reserve(static_cast<std::size_t>(points) * (k + 1));
  std::vector<std::int64_t> at(k, 0);
  for (std::int64_t p = 0; p < points; ++p) {
    for (std::size_t comp = 0; comp < k; ++comp) base.push_back(axis[k - 1 - comp][static_cast<std::size_t>(at[k - 1 - comp])]);
    base.push_back(1.0);
    for (std::size_t a = k; a-- > 0;) {
      if (++at[a] < size[2 + a]) break;
      at[a] = 0;
    }
  }
  const int b = float_constant(im, dt, {points, static_cast<std::int64_t>(k + 1)}, base, "affine_grid_base");
  const Shape ts = im.shape(theta);
  if (ts.size() != 3) im.bad("affine_grid theta must be 3-D");
  const int tt = im.permute(theta, {0, 2, 1});
  const int g = im.emit(OpKind::Matmul, {b, tt}, {}, dt, {ts[0], c(points), c(static_cast<std::int64_t>(k))});
  im.define(0, im.reshape(g, im.out_shape()));
}

// ---- upsampling ------------------------------------------------------------------------------

// The scale factors of an upsampling op (one per spatial dim; <= 0: none): `scale_factors`
// of the .vec overloads, else the scales_* / scales arguments from position `first`.
std::vector<double> upsample_scales(Importer& im, std::size_t nsp, std::size_t vec_pos, std::size_t first) {
  std::vector<double> scales(nsp, 0.0);
  if (im.overload() == "vec") {
    if (const json* a = im.arg(vec_pos, "scale_factors")) {
      if (const auto it = a->find("as_floats"); it != a->end() && it->size() == nsp) {
        for (std::size_t i = 0; i < nsp; ++i) scales[i] = (*it)[i].get<double>();
      }
    }
    return scales;
  }
  static const char* const kNames1[] = {"scales"};
  static const char* const kNames2[] = {"scales_h", "scales_w"};
  static const char* const kNames3[] = {"scales_d", "scales_h", "scales_w"};
  const char* const* names = nsp == 1 ? kNames1 : nsp == 2 ? kNames2 : kNames3;
  for (std::size_t i = 0; i < nsp; ++i) {
    if (im.has(first + i, names[i])) scales[i] = im.float_arg(first + i, names[i]);
  }
  return scales;
}

// floor(source coordinate) as an index in [0, n_in - 1]: an archive's scale (1e-30, 1e30) can
// put the coordinate anywhere, and casting a float outside int64 is undefined.
std::int64_t source_index(double floored, std::int64_t n_in) {
  if (!(floored > 0)) return 0;  // NaN too
  return floored >= static_cast<double>(n_in - 1) ? n_in - 1 : static_cast<std::int64_t>(floored);
}

// compute_scales_value<float>: 1 / scale when given, else in / out.
float scale_value(double scale, std::int64_t in, std::int64_t out) {
  return scale > 0 ? static_cast<float>(1.0 / scale) : static_cast<float>(in) / static_cast<float>(out);
}

// upsample_nearest{1,3}d and _upsample_nearest_exact{1,2,3}d: index_select along each
// spatial axis with PyTorch's nearest_idx / nearest_neighbor_exact_compute_source_index.
void upsample_nearest_nd(Importer& im, std::size_t nsp, bool exact) {
  const int x = im.tensor(0, im.overload() == "vec" ? "input" : "self");
  const Shape xs = im.shape(x), out = im.out_shape();
  if (xs.size() != nsp + 2 || out.size() != nsp + 2) im.bad("upsampling input / output of the wrong rank");
  const std::vector<double> scales = upsample_scales(im, nsp, 2, 2);
  int v = x;
  for (std::size_t a = 0; a < nsp; ++a) {
    const std::size_t ax = 2 + a;
    const std::int64_t n_in = static_size(im, xs[ax], "nearest upsampling's spatial size");
    const std::int64_t n_out = static_size(im, out[ax], "nearest upsampling's output size");
    if (n_in < 1 || n_out < 0 || n_out > (std::int64_t{1} << 24)) im.bad("nearest upsampling from " + std::to_string(n_in) + " to " + std::to_string(n_out) + " elements");
    std::vector<std::int64_t> idx(static_cast<std::size_t>(n_out));
    bool identity = n_in == n_out;
    const float scale = scale_value(scales[a], n_in, n_out);
    for (std::int64_t o = 0; o < n_out; ++o) {
      std::int64_t i;
      if (!exact && n_out == n_in) i = o;
      else if (!exact && n_out == 2 * n_in) i = o >> 1;
      else i = source_index(std::floor((static_cast<float>(o) + (exact ? 0.5f : 0.0f)) * scale), n_in);
      i = std::min(i, n_in - 1);
      idx[static_cast<std::size_t>(o)] = i;
      identity = identity && i == o;
    }
    if (identity) continue;
    Shape s = im.shape(v);
    s[ax] = c(n_out);
    v = im.emit(OpKind::IndexSelect, {v, im.index_constant(idx)}, {static_cast<std::int64_t>(ax)}, im.dtype(v), s);
  }
  im.define(0, v);
}

// upsample_linear1d / upsample_bilinear2d / upsample_trilinear3d: per spatial axis, two
// index_selects and a lerp with PyTorch's area_pixel_compute_source_index weights.
void upsample_linear_nd(Importer& im, std::size_t nsp) {
  const DType dt = im.out_dtype();
  if (!dtype_is_floating(dt)) im.unsupported("linear upsampling of integers");
  const int x = im.cast(im.tensor(0, im.overload() == "vec" ? "input" : "self"), dt);
  const Shape xs = im.shape(x), out = im.out_shape();
  if (xs.size() != nsp + 2 || out.size() != nsp + 2) im.bad("upsampling input / output of the wrong rank");
  const bool align = im.bool_arg(2, "align_corners", false);
  const std::vector<double> scales = upsample_scales(im, nsp, 3, 3);
  int v = x;
  for (std::size_t a = 0; a < nsp; ++a) {
    const std::size_t ax = 2 + a;
    const std::int64_t n_in = static_size(im, xs[ax], "linear upsampling's spatial size");
    const std::int64_t n_out = static_size(im, out[ax], "linear upsampling's output size");
    if (n_in < 1 || n_out < 0 || n_out > (std::int64_t{1} << 24)) im.bad("linear upsampling from " + std::to_string(n_in) + " to " + std::to_string(n_out) + " elements");
    float scale;
    if (align) scale = n_out > 1 ? static_cast<float>(n_in - 1) / static_cast<float>(n_out - 1) : 0.0f;
    else scale = scale_value(scales[a], n_in, n_out);
    std::vector<std::int64_t> i0(static_cast<std::size_t>(n_out)), i1(static_cast<std::size_t>(n_out));
    std::vector<double> lambda(static_cast<std::size_t>(n_out));
    bool identity = n_in == n_out;
    for (std::int64_t o = 0; o < n_out; ++o) {
      float src = align ? scale * static_cast<float>(o) : scale * (static_cast<float>(o) + 0.5f) - 0.5f;
      if (src < 0) src = 0;
      const std::int64_t lo = std::min<std::int64_t>(source_index(std::floor(src), n_in), n_in - 1);
      const float l = std::clamp(src - static_cast<float>(lo), 0.0f, 1.0f);
      const auto k = static_cast<std::size_t>(o);
      i0[k] = lo;
      i1[k] = std::min<std::int64_t>(lo + 1, n_in - 1);
      lambda[k] = l;
      identity = identity && lo == o && l == 0.0f;
    }
    if (identity) continue;
    Shape s = im.shape(v);
    s[ax] = c(n_out);
    const int x0 = im.emit(OpKind::IndexSelect, {v, im.index_constant(i0)}, {static_cast<std::int64_t>(ax)}, dt, s);
    const int x1 = im.emit(OpKind::IndexSelect, {v, im.index_constant(i1)}, {static_cast<std::int64_t>(ax)}, dt, s);
    std::vector<std::int64_t> ws{n_out};
    for (std::size_t b = ax + 1; b < xs.size(); ++b) ws.push_back(1);
    const int w = float_constant(im, dt, ws, lambda, "upsample_linear_lambda");
    v = add(im, x0, mul(im, sub(im, x1, x0), w));
  }
  im.define(0, v);
}

}  // namespace

void register_recurrent(HandlerTable& t) {
  t["aten.lstm"] = [](Importer& im) { recurrent(im, Cell::kLstm); };
  t["aten.gru"] = [](Importer& im) { recurrent(im, Cell::kGru); };
  t["aten.rnn_tanh"] = [](Importer& im) { recurrent(im, Cell::kRnnTanh); };
  t["aten.rnn_relu"] = [](Importer& im) { recurrent(im, Cell::kRnnRelu); };
  t["aten.lstm_cell"] = [](Importer& im) { recurrent_cell(im, Cell::kLstm); };
  t["aten.gru_cell"] = [](Importer& im) { recurrent_cell(im, Cell::kGru); };
  t["aten.rnn_tanh_cell"] = [](Importer& im) { recurrent_cell(im, Cell::kRnnTanh); };
  t["aten.rnn_relu_cell"] = [](Importer& im) { recurrent_cell(im, Cell::kRnnRelu); };
  t["aten.grid_sampler"] = grid_sampler;
  t["aten.grid_sampler_2d"] = grid_sampler;
  t["aten.grid_sampler_3d"] = grid_sampler;
  t["aten.affine_grid_generator"] = affine_grid;
  t["aten.upsample_nearest1d"] = [](Importer& im) { upsample_nearest_nd(im, 1, false); };
  t["aten.upsample_nearest3d"] = [](Importer& im) { upsample_nearest_nd(im, 3, false); };
  t["aten._upsample_nearest_exact1d"] = [](Importer& im) { upsample_nearest_nd(im, 1, true); };
  t["aten._upsample_nearest_exact2d"] = [](Importer& im) { upsample_nearest_nd(im, 2, true); };
  t["aten._upsample_nearest_exact3d"] = [](Importer& im) { upsample_nearest_nd(im, 3, true); };
  t["aten.upsample_linear1d"] = [](Importer& im) { upsample_linear_nd(im, 1); };
  t["aten.upsample_trilinear3d"] = [](Importer& im) { upsample_linear_nd(im, 3); };
}

}  // namespace kiln::pt2
