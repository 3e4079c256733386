// Dense and grouped convolution on NCHW8c activations (nchwc.h): weight packing, the
// driver that cuts the output into tiles, and the portable tile kernels. The tile kernels
// and the weight layout: conv_nchwc_kernels.h; Winograd: conv_nchwc_winograd.cpp.
//
// The driver groups output pixels into regions whose windows have the same kernel taps
// inside the input (the interior, each border strip, each corner: make_plan), so a tile
// runs one tap list with no bounds test and never reads padding; a tile may span rows of
// its region, so narrow maps (7x7) still fill the register tile. Per unit of work (image,
// band of pixels, range of block groups) it walks each region in chunks of 252 pixels and
// runs every block group over a chunk before the next (the chunk's input stays in L1/L2
// while the weights stream), from offset arrays or, for evenly spaced pixels (1x1 stride
// 1, one row), from a base and a step. Tiles write blocked y directly with the epilogue;
// a plain y or a plain residual goes through a blocked scratch per block group that
// finish_scratch adds, activates and stores in y's layout.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "backends/cpu/kernels/conv_nchwc_kernels.h"
#include "backends/cpu/kernels/simd.h"

// 8-lane vectors in a non-AVX build: every function using them is internal (static or
// always inlined), so the ABI note about passing them in registers does not apply.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"  // the same, for clang (the fuzz preset)
#endif

namespace kiln::cpu::nchwc {

namespace portable_impl {
#define KILN_NCHWC_FMA8(a, b, c) ((a) * (b) + (c))
#include "backends/cpu/kernels/conv_nchwc_tile.inc"
#undef KILN_NCHWC_FMA8

// 8-lane vectors are SSE pairs here: 16 registers hold 8 of them.
int preferred_width(std::int64_t out_blocks, std::int64_t, std::int64_t) { return out_blocks >= 2 ? 2 : 1; }

constexpr DenseKernels make_kernels() {
  DenseKernels k{"baseline", {4, 2, 1, 1, 1, 1, 1, 1}, &preferred_width, {}, &nchwc_winograd_input, &nchwc_winograd_output};
  nchwc_fill<1, 4>(k);
  nchwc_fill<2, 2>(k);
  nchwc_fill<3, 1>(k);
  nchwc_fill<4, 1>(k);
  nchwc_fill<5, 1>(k);
  nchwc_fill<6, 1>(k);
  nchwc_fill<7, 1>(k);
  nchwc_fill<8, 1>(k);
  return k;
}
constexpr DenseKernels kKernels = make_kernels();
}  // namespace portable_impl

#if defined(__x86_64__) || defined(__i386__)
// conv_nchwc_avx2.cpp, conv_nchwc_avx512.cpp.
const DenseKernels& dense_kernels_avx2_table();
const DenseKernels& dense_kernels_avx512_table();
#endif

const DenseKernels& dense_kernels_portable() { return portable_impl::kKernels; }

const DenseKernels* dense_kernels_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  return kernels::simd_avx2() != nullptr ? &dense_kernels_avx2_table() : nullptr;
#else
  return nullptr;
#endif
}

const DenseKernels* dense_kernels_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  // KILN_CPU_ISA=avx2 (or baseline) keeps the lower paths.
  return kernels::cpu_avx512_usable() ? &dense_kernels_avx512_table() : nullptr;
#else
  return nullptr;
#endif
}

const DenseKernels& dense_kernels() {
  static const DenseKernels* const best = dense_kernels_avx512() != nullptr ? dense_kernels_avx512()
                                          : dense_kernels_avx2() != nullptr ? dense_kernels_avx2()
                                                                            : &dense_kernels_portable();
  return *best;
}

namespace {

constexpr const char* kOp = "[conv2d_dense] ";

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The packed weights (layout: conv_nchwc_kernels.h).
class PackedDense final : public DenseWeights {
 public:
  ConvShape shape;
  int width = 1;                // output blocks per block group
  std::int64_t in_blocks = 0;   // input channel blocks per convolution group
  std::int64_t out_blocks = 0;  // output channel blocks per convolution group
  std::int64_t taps = 0;        // kh * kw
  std::int64_t group_floats = 0;
  std::unique_ptr<float, FreeDeleter> data;

  std::int64_t block_groups() const { return ceil_div(out_blocks, width); }
  const float* block_group(std::int64_t g, std::int64_t q) const {
    return data.get() + g * group_floats + q * width * in_blocks * taps * 64;
  }
};

bool mul_ok(std::int64_t a, std::int64_t b, std::int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// Output extent along one axis; -1 when the window does not fit.
std::int64_t out_extent(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t pad, std::int64_t dilation) {
  const std::int64_t span = in + 2 * pad - dilation * (k - 1) - 1;
  return span < 0 ? -1 : span / stride + 1;
}

std::string dims(const Act& a) {
  return "[" + std::to_string(a.n) + ", " + std::to_string(a.c) + ", " + std::to_string(a.h) + ", " +
         std::to_string(a.w) + (a.blocked ? "] blocked" : "] plain");
}

Status check_act(const Act& a, const char* name, const auto& invalid) {
  if (a.n < 0 || a.c < 1 || a.h < 1 || a.w < 1) return invalid(std::string(name) + " has extents " + dims(a));
  if (a.data == nullptr && a.n > 0) return invalid(std::string(name) + ".data is null");
  return Status::Ok();
}

}  // namespace

Status check_conv_call(const char* op, const Act& x, const ConvShape& p, bool supported, const ConvShape& s,
                       const Epilogue& e, const Act& y) {
  const auto invalid = [op](const std::string& what) {
    return Status(StatusCode::kInvalidInput, "[" + std::string(op) + "] " + what);
  };
  if (p.in_channels != s.in_channels || p.out_channels != s.out_channels || p.groups != s.groups || p.kh != s.kh ||
      p.kw != s.kw) {
    return invalid("weights prepared for in_channels=" + std::to_string(p.in_channels) +
                   " out_channels=" + std::to_string(p.out_channels) + " groups=" + std::to_string(p.groups) +
                   " kernel " + std::to_string(p.kh) + "x" + std::to_string(p.kw) +
                   ", called with in_channels=" + std::to_string(s.in_channels) +
                   " out_channels=" + std::to_string(s.out_channels) + " groups=" + std::to_string(s.groups) +
                   " kernel " + std::to_string(s.kh) + "x" + std::to_string(s.kw));
  }
  if (!supported) return invalid("unsupported convolution shape");
  KILN_RETURN_IF_ERROR(check_act(x, "x", invalid));
  KILN_RETURN_IF_ERROR(check_act(y, "y", invalid));
  if (x.c != s.in_channels) {
    return invalid("x.c=" + std::to_string(x.c) + " != in_channels=" + std::to_string(s.in_channels));
  }
  if (y.c != s.out_channels) {
    return invalid("y.c=" + std::to_string(y.c) + " != out_channels=" + std::to_string(s.out_channels));
  }
  if (y.n != x.n) return invalid("y.n=" + std::to_string(y.n) + " != x.n=" + std::to_string(x.n));
  const std::int64_t oh = out_extent(x.h, s.kh, s.stride_h, s.pad_h, s.dilation_h);
  const std::int64_t ow = out_extent(x.w, s.kw, s.stride_w, s.pad_w, s.dilation_w);
  if (y.h != oh) {
    return invalid("y.h=" + std::to_string(y.h) + " != output height " + std::to_string(oh) + " (x.h=" +
                   std::to_string(x.h) + ", kh=" + std::to_string(s.kh) + ", stride_h=" + std::to_string(s.stride_h) +
                   ", pad_h=" + std::to_string(s.pad_h) + ", dilation_h=" + std::to_string(s.dilation_h) + ")");
  }
  if (y.w != ow) {
    return invalid("y.w=" + std::to_string(y.w) + " != output width " + std::to_string(ow) + " (x.w=" +
                   std::to_string(x.w) + ", kw=" + std::to_string(s.kw) + ", stride_w=" + std::to_string(s.stride_w) +
                   ", pad_w=" + std::to_string(s.pad_w) + ", dilation_w=" + std::to_string(s.dilation_w) + ")");
  }
  if (x.n > 0 && x.data == y.data) return invalid("x and y share their data");
  if (e.residual != nullptr) {
    const Act& r = *e.residual;
    if (r.n != y.n || r.c != y.c || r.h != y.h || r.w != y.w) {
      return invalid("residual " + dims(r) + " != y " + dims(y));
    }
    if (r.data == nullptr && r.n > 0) return invalid("residual.data is null");
    if (r.data == y.data && r.blocked != y.blocked) return invalid("residual shares y's data in another layout");
  }
  return Status::Ok();
}

namespace {

// ---------------------------------------------------------------------------------------
// The plan: output pixels grouped by the kernel taps their window has inside the input.

// Output positions [begin, end) along one axis whose taps [first, last) fall inside the input.
struct AxisClass {
  std::int64_t begin, end, first, last;
};

std::vector<AxisClass> axis_classes(std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride,
                                    std::int64_t pad, std::int64_t dilation) {
  std::vector<AxisClass> classes;
  for (std::int64_t o = 0; o < out; ++o) {
    const std::int64_t origin = o * stride - pad;  // input position of tap 0
    std::int64_t first = origin >= 0 ? 0 : ceil_div(-origin, dilation);
    std::int64_t last = origin > in - 1 ? 0 : std::min(k, (in - 1 - origin) / dilation + 1);
    first = std::min(first, k);
    if (last <= first) first = last = 0;
    if (!classes.empty() && classes.back().first == first && classes.back().last == last) {
      classes.back().end = o + 1;
    } else {
      classes.push_back(AxisClass{o, o + 1, first, last});
    }
  }
  return classes;
}

// Output rows [r0, r1) x columns [c0, c1) whose windows all have the same kernel taps inside
// the input: rows from i0, columns from j0 (a pixel's offset is that of its tap (i0, j0));
// `taps` of them from `tap` in the plan's lists (none when the window is all padding).
struct Region {
  std::int64_t r0, r1, c0, c1, i0, j0;
  std::int64_t tap, taps;
};

struct Plan {
  std::int64_t oh = 0, ow = 0;
  std::int64_t pixel_stride = 8;  // floats between input pixels: 8 blocked, 1 plain
  std::vector<Region> regions;
  std::vector<std::int64_t> tap_in, tap_index;
};

Plan make_plan(const Act& x, const ConvShape& s, const Act& y) {
  Plan plan;
  plan.oh = y.h;
  plan.ow = y.w;
  plan.pixel_stride = x.blocked ? kBlock : 1;
  const auto rows = axis_classes(x.h, y.h, s.kh, s.stride_h, s.pad_h, s.dilation_h);
  const auto cols = axis_classes(x.w, y.w, s.kw, s.stride_w, s.pad_w, s.dilation_w);
  for (const AxisClass& r : rows) {
    for (const AxisClass& c : cols) {
      Region g{r.begin, r.end, c.begin, c.end, r.first, c.first, static_cast<std::int64_t>(plan.tap_in.size()), 0};
      if (c.last > c.first) {
        for (std::int64_t i = r.first; i < r.last; ++i) {
          for (std::int64_t j = c.first; j < c.last; ++j) {
            plan.tap_in.push_back(((i - r.first) * s.dilation_h * x.w + (j - c.first) * s.dilation_w) *
                                  plan.pixel_stride);
            plan.tap_index.push_back(i * s.kw + j);
          }
        }
      }
      g.taps = static_cast<std::int64_t>(plan.tap_in.size()) - g.tap;
      plan.regions.push_back(g);
    }
  }
  return plan;
}

// ---------------------------------------------------------------------------------------
// The run.

// One unit of work: image n, output pixels [p0, p1), block groups [q0, q1).
struct Unit {
  std::int64_t n, p0, p1, q0, q1;
  std::int64_t scratch_block_stride = 0;  // floats between a scratch's blocks; 0: 8 * (p1 - p0)
};

struct Run {
  const Act& x;
  const PackedDense& w;
  const ConvShape& s;
  const Epilogue& e;
  const Act& y;
  const Plan& plan;
  const DenseKernels& kernels;
  const float* bias;    // padded: out blocks of all groups x 8
  bool direct;          // tiles write y themselves (blocked y, no plain residual)
  TileActivation tile_act;
  bool late_act;        // an activation the tiles leave to a pass over the output
  bool scratch_act = false;  // tiles into a scratch apply tile_act too (PointwiseRows)
};

TileActivation tile_activation(FusedActivation act) {
  switch (act) {
    case FusedActivation::kRelu: return TileActivation::kRelu;
    case FusedActivation::kRelu6: return TileActivation::kRelu6;
    case FusedActivation::kHardswish: return TileActivation::kHardswish;
    case FusedActivation::kHardsigmoid: return TileActivation::kHardsigmoid;
    default: return TileActivation::kNone;
  }
}

bool tile_applies(FusedActivation act) {
  return act == FusedActivation::kNone || tile_activation(act) != TileActivation::kNone;
}

// The pixels of a region inside the band [p0, p1), row by row: their input offsets (first
// tap) and output offsets (pixel * 8, from `out_base`).
class RegionWalk {
 public:
  RegionWalk(const Run& r, const Region& g, std::int64_t p0, std::int64_t p1, std::int64_t out_base)
      : g_(g), ow_(r.plan.ow), p0_(p0), p1_(p1), out_base_(out_base), empty_(g.taps == 0) {
    const ConvShape& s = r.s;
    in_step_ = s.stride_w * r.plan.pixel_stride;
    in_row_step_ = s.stride_h * r.x.w * r.plan.pixel_stride;
    in_origin_ = ((g.i0 * s.dilation_h - s.pad_h) * r.x.w + g.j0 * s.dilation_w - s.pad_w) * r.plan.pixel_stride;
    oy_ = std::max(g.r0, p0 / ow_);
    row_end_ = std::min(g.r1, (p1 - 1) / ow_ + 1);
    for (std::int64_t oy = oy_; oy < row_end_; ++oy) {
      std::int64_t c0, c1;
      columns(oy, &c0, &c1);
      count_ += std::max<std::int64_t>(c1 - c0, 0);
    }
    columns(oy_, &c0_, &c1_);
    ox_ = c0_;
  }
  std::int64_t count() const { return count_; }

  // Whether the walk's pixels are evenly spaced in the input and the output (one row, or
  // whole rows whose inputs follow each other: 1x1 stride 1 without padding); then its
  // first pixel's offsets and the input step.
  bool uniform(std::int64_t* in0, std::int64_t* out0, std::int64_t* in_step) const {
    const bool one_row = row_end_ - oy_ <= 1;
    if (!one_row && !(g_.c0 == 0 && g_.c1 == ow_ && in_row_step_ == ow_ * in_step_)) return false;
    *in0 = empty_ ? 0 : in_origin_ + oy_ * in_row_step_ + ox_ * in_step_;
    *out0 = (oy_ * ow_ + ox_ - out_base_) * kBlock;
    *in_step = empty_ ? 0 : in_step_;
    return true;
  }

  // The next n pixels (n <= the ones left).
  void fill(std::int64_t n, std::int64_t* __restrict in_off, std::int64_t* __restrict out_off) {
    std::int64_t i = 0;
    while (i < n) {
      while (ox_ >= c1_) {
        ++oy_;
        columns(oy_, &c0_, &c1_);
        ox_ = c0_;
      }
      const std::int64_t take = std::min(n - i, c1_ - ox_);
      const std::int64_t in0 = empty_ ? 0 : in_origin_ + oy_ * in_row_step_ + ox_ * in_step_;
      const std::int64_t in_step = empty_ ? 0 : in_step_;
      const std::int64_t out0 = (oy_ * ow_ + ox_ - out_base_) * kBlock;
      std::int64_t* __restrict in_run = in_off + i;
      std::int64_t* __restrict out_run = out_off + i;
      for (std::int64_t k = 0; k < take; ++k) in_run[k] = in0 + k * in_step;
      for (std::int64_t k = 0; k < take; ++k) out_run[k] = out0 + k * kBlock;
      i += take;
      ox_ += take;
    }
  }

 private:
  // The columns of row `oy` inside both the region and the band.
  void columns(std::int64_t oy, std::int64_t* c0, std::int64_t* c1) const {
    *c0 = std::max(g_.c0, oy == p0_ / ow_ ? p0_ % ow_ : 0);
    *c1 = std::min(g_.c1, oy == (p1_ - 1) / ow_ ? (p1_ - 1) % ow_ + 1 : ow_);
  }

  const Region& g_;
  std::int64_t ow_, p0_, p1_, out_base_;
  bool empty_;
  std::int64_t in_step_ = 0, in_row_step_ = 0, in_origin_ = 0;
  std::int64_t oy_ = 0, row_end_ = 0, ox_ = 0, c0_ = 0, c1_ = 0, count_ = 0;
};

// The tile arguments of block group q (without the taps).
DenseTileArgs block_group_args(const Run& r, const Unit& u, std::int64_t q, float* scratch) {
  const PackedDense& w = r.w;
  const Act& x = r.x;
  const std::int64_t plane = r.plan.oh * r.plan.ow, in_plane = x.h * x.w, qg = w.block_groups();
  const std::int64_t g = q / qg, qq = q % qg;
  const std::int64_t width = std::min<std::int64_t>(w.width, w.out_blocks - qq * w.width);
  const std::int64_t block0 = g * w.out_blocks + qq * w.width;  // first output block, all groups
  DenseTileArgs args;
  args.in = x.data + u.n * x.image_floats() + g * w.in_blocks * kBlock * in_plane;
  args.in_block_stride = kBlock * in_plane;
  args.in_channel_stride = x.blocked ? 1 : in_plane;
  args.in_blocks = w.in_blocks;
  args.last_block_channels = x.blocked ? kBlock : w.shape.in_channels / w.shape.groups - (w.in_blocks - 1) * kBlock;
  args.w = w.block_group(g, qq);
  args.w_block_stride = w.taps * 64 * width;
  args.bias = r.bias + block0 * kBlock;
  if (scratch == nullptr) {
    args.out = r.y.data + u.n * r.y.image_floats() + block0 * kBlock * plane;
    args.out_block_stride = kBlock * plane;
    if (r.e.residual != nullptr) {
      args.residual = r.e.residual->data + u.n * r.e.residual->image_floats() + block0 * kBlock * plane;
    }
    args.act = r.tile_act;
  } else {
    args.out = scratch;
    args.out_block_stride = u.scratch_block_stride > 0 ? u.scratch_block_stride : kBlock * (u.p1 - u.p0);
    if (r.scratch_act) args.act = r.tile_act;
  }
  return args;
}

// A block group whose weights outgrow L2 (2048 input channels x 9 taps: 3.5 MB) would
// stream them again for every tile and every region. Its input blocks then run in slices
// of about kSliceWeightBytes of weights, each slice over every region and tile of the unit
// (run_unit): the first slice adds the bias (and the residual), the later ones the partial
// sums already in `out` (as their residual), the last applies the activation.
constexpr std::int64_t kSplitWeightBytes = std::int64_t{1} << 20;
constexpr std::int64_t kSliceWeightBytes = std::int64_t{256} << 10;
// The bias of the slices after the first (every width's).
alignas(64) constexpr float kZeroBias[kMaxWidth * kBlock] = {};

// Input blocks [begin, end) of a block group's tiles; end < 0: all of them, as one pass.
struct InputSlice {
  std::int64_t begin = 0, end = -1;

  DenseTileArgs apply(const DenseTileArgs& args) const {
    if (end < 0) return args;
    DenseTileArgs a = args;
    a.in = args.in + begin * args.in_block_stride;
    a.in_blocks = end - begin;
    a.last_block_channels = end == args.in_blocks ? args.last_block_channels : kBlock;
    a.w = args.w + begin * args.w_block_stride;
    if (begin > 0) {
      a.bias = kZeroBias;
      a.residual = args.out;
    }
    if (end < args.in_blocks) a.act = TileActivation::kNone;
    return a;
  }
};

// Every tile of region `g` in the unit's band for block groups [q0, q1): the region's
// pixels in chunks (whose input stays in cache while every block group runs over them),
// each split into balanced tiles of at most the kernel's pixel count.
void run_region(const Run& r, const Unit& u, const Region& g, std::int64_t q0, std::int64_t q1, float* scratch,
                const InputSlice& slice = {}) {
  RegionWalk walk(r, g, u.p0, u.p1, scratch == nullptr ? 0 : u.p0);
  constexpr std::int64_t kChunk = 252;  // a multiple of every tile size up to 12
  std::int64_t in_off[kChunk], out_off[kChunk];
  std::int64_t run_in = 0, run_out = 0, run_step = 0;
  const bool uniform = walk.uniform(&run_in, &run_out, &run_step);
  const std::int64_t qg = r.w.block_groups();
  for (std::int64_t done = 0, total = walk.count(); done < total;) {
    const std::int64_t n = std::min(total - done, kChunk);
    if (!uniform) walk.fill(n, in_off, out_off);
    for (std::int64_t q = q0; q < q1; ++q) {
      DenseTileArgs args = block_group_args(r, u, q, scratch);
      args.tap_in = r.plan.tap_in.data() + g.tap;
      args.tap_index = r.plan.tap_index.data() + g.tap;
      args.taps = g.taps;
      args.run_in = run_in + done * run_step;
      args.run_in_step = run_step;
      args.run_out = run_out + done * kBlock;
      const int width = static_cast<int>(std::min<std::int64_t>(r.w.width, r.w.out_blocks - q % qg * r.w.width));
      const std::int64_t max_pixels = r.kernels.max_pixels[width - 1];
      const std::int64_t tiles = ceil_div(n, max_pixels), small = n / tiles, big = n % tiles;
      const auto& fns = r.kernels.fn[r.x.blocked ? 1 : 0][width - 1];
      // `big` tiles of small + 1 pixels, then the others.
      auto run_tiles = [&](DenseTileArgs a) {
        if (big > 0) fns[small](a, uniform ? nullptr : in_off, uniform ? nullptr : out_off, big);
        const std::int64_t skip = big * (small + 1);
        a.run_in += skip * run_step;
        a.run_out += skip * kBlock;
        fns[small - 1](a, uniform ? nullptr : in_off + skip, uniform ? nullptr : out_off + skip, tiles - big);
      };
      run_tiles(slice.apply(args));
    }
    done += n;
  }
}

// The scratch tiles of block group q (blocks [b0, b0 + width) of all groups) over pixels
// [p0, p1) -> y: + residual, activation, store in y's layout.
void finish_scratch(const Run& r, float* scratch, std::int64_t n, std::int64_t block0, int width, std::int64_t p0,
                    std::int64_t p1) {
  const std::int64_t pixels = p1 - p0, plane = r.plan.oh * r.plan.ow;
  const Act& y = r.y;
  for (int b = 0; b < width; ++b) {
    float* src = scratch + b * pixels * kBlock;
    const std::int64_t block = block0 + b;
    const std::int64_t lanes = std::min(kBlock, y.c - block * kBlock);
    if (r.e.residual != nullptr) {
      const Act& res = *r.e.residual;
      const float* rimg = res.data + n * res.image_floats();
      if (res.blocked) {
        const float* rp = rimg + (block * plane + p0) * kBlock;
        for (std::int64_t i = 0; i < pixels * kBlock; ++i) src[i] += rp[i];
      } else {
        for (std::int64_t l = 0; l < lanes; ++l) {
          const float* rp = rimg + (block * kBlock + l) * plane + p0;
          for (std::int64_t p = 0; p < pixels; ++p) src[p * kBlock + l] += rp[p];
        }
      }
    }
    apply_activation(r.e.act, src, pixels * kBlock);
    float* yimg = y.data + n * y.image_floats();
    if (y.blocked) {
      std::memcpy(yimg + (block * plane + p0) * kBlock, src, static_cast<std::size_t>(pixels * kBlock) * sizeof(float));
    } else {
      for (std::int64_t l = 0; l < lanes; ++l) {
        float* yp = yimg + (block * kBlock + l) * plane + p0;
        for (std::int64_t p = 0; p < pixels; ++p) yp[p] = src[p * kBlock + l];
      }
    }
  }
}

// Returns false when the scratch cannot be allocated.
bool run_unit(const Run& r, const Unit& u) {
  const PackedDense& w = r.w;
  std::unique_ptr<float[]> scratch;
  if (!r.direct) {
    scratch.reset(new (std::nothrow) float[static_cast<std::size_t>(w.width * (u.p1 - u.p0) * kBlock)]);
    if (scratch == nullptr) return false;
  }
  const std::int64_t plane = r.plan.oh * r.plan.ow, qg = w.block_groups();
  // Weights of one input block of a block group, all taps (the widest group's).
  const std::int64_t per_block = w.taps * 64 * w.width * static_cast<std::int64_t>(sizeof(float));
  const bool sliced = w.in_blocks * per_block > kSplitWeightBytes;
  const std::int64_t slice = std::max<std::int64_t>(1, kSliceWeightBytes / per_block);
  // Direct: every block group over each chunk of pixels. Scratch or sliced: one block group
  // at a time.
  const std::int64_t q_step = r.direct && !sliced ? u.q1 - u.q0 : 1;
  for (std::int64_t qa = u.q0; qa < u.q1; qa += q_step) {
    const std::int64_t qb = std::min(u.q1, qa + q_step);
    if (!sliced) {
      for (const Region& g : r.plan.regions) run_region(r, u, g, qa, qb, scratch.get());
    } else {
      for (std::int64_t cb0 = 0; cb0 < w.in_blocks; cb0 += slice) {
        const InputSlice part{cb0, std::min(w.in_blocks, cb0 + slice)};
        for (const Region& g : r.plan.regions) run_region(r, u, g, qa, qb, scratch.get(), part);
      }
    }
    for (std::int64_t q = qa; q < qb; ++q) {
      const std::int64_t width = std::min<std::int64_t>(w.width, w.out_blocks - q % qg * w.width);
      const std::int64_t block0 = q / qg * w.out_blocks + q % qg * w.width;
      if (!r.direct) {
        finish_scratch(r, scratch.get(), u.n, block0, static_cast<int>(width), u.p0, u.p1);
      } else if (r.late_act) {
        float* out = r.y.data + u.n * r.y.image_floats() + (block0 * plane + u.p0) * kBlock;
        for (std::int64_t b = 0; b < width; ++b) apply_activation(r.e.act, out + b * plane * kBlock, (u.p1 - u.p0) * kBlock);
      }
    }
  }
  return true;
}

// How a call's work is cut into units (image, band of pixels, range of block groups).
struct Split {
  std::int64_t bands = 1;                // equal pixel bands per image
  std::vector<std::int64_t> q_bounds;    // block-group ranges: [q_bounds[i], q_bounds[i + 1])
};

// Bands of output pixels whose input rows fit in L2 next to the weights. With several
// threads and images that do not split evenly among them: a multiple of the thread count
// of equal bands per image (every thread the same pixels of every block group), or, when an
// image has too few pixels to share, the block groups split by their output blocks.
Split split_work(const DenseKernels& kernels, const Act& x, const PackedDense& w, const ConvShape& s, const Plan& plan,
                 std::int64_t threads) {
  const std::int64_t pixels = plan.oh * plan.ow, qs = s.groups * w.block_groups();
  const std::int64_t in_row_bytes = x.w * w.in_blocks * kBlock * 4;
  const std::int64_t rows_per_band = std::max<std::int64_t>(1, (256 << 10) / in_row_bytes / s.stride_h);
  Split split;
  split.bands = ceil_div(plan.oh, rows_per_band);
  split.q_bounds = {0, qs};
  if (threads == 1 || x.n % threads == 0) return split;
  // Pixel bands make every thread stream all the weights and its share of the input; block
  // groups split among the threads make each stream its share of the weights and all the
  // input (the output is shared out either way). So bands when the weights are the smaller
  // stream: a depthwise-separable net's expansions on 14x14 and 7x7 planes (96 -> 576 at
  // 14x14: 221 KB of weights against 75 KB of input) run split by block groups, as do
  // resnet18's 512-channel 7x7 layers (9.4 MB against 0.1).
  const std::int64_t weight_bytes = s.groups * w.group_floats * 4;
  const std::int64_t in_bytes = x.h * x.w * w.in_blocks * s.groups * kBlock * 4;
  if (pixels >= threads * kernels.max_pixels[w.width - 1] && (weight_bytes <= in_bytes || qs < threads)) {
    split.bands = std::min(pixels, ceil_div(split.bands, threads) * threads);
    return split;
  }
  // A share ends before the block group whose middle passes its end.
  const std::int64_t shares = std::min(qs, threads), blocks = s.groups * w.out_blocks;
  split.q_bounds.assign(1, 0);
  for (std::int64_t q = 0, done = 0; q < qs; ++q) {
    const std::int64_t width = std::min<std::int64_t>(w.width, w.out_blocks - q % w.block_groups() * w.width);
    const auto share = static_cast<std::int64_t>(split.q_bounds.size());
    if (share < shares && q > split.q_bounds.back() && (2 * done + width) * shares >= 2 * share * blocks) {
      split.q_bounds.push_back(q);
    }
    done += width;
  }
  split.q_bounds.push_back(qs);
  return split;
}

}  // namespace

bool dense_supported(const ConvShape& s) {
  if (s.in_channels < 1 || s.out_channels < 1 || s.groups < 1 || s.kh < 1 || s.kw < 1 || s.stride_h < 1 ||
      s.stride_w < 1 || s.dilation_h < 1 || s.dilation_w < 1 || s.pad_h < 0 || s.pad_w < 0) {
    return false;
  }
  if (s.in_channels % s.groups != 0 || s.out_channels % s.groups != 0) return false;
  if (s.groups == 1) return true;
  return (s.in_channels / s.groups) % kBlock == 0 && (s.out_channels / s.groups) % kBlock == 0;
}

Result<std::unique_ptr<DenseWeights>> prepare_dense_width(const float* w, const ConvShape& s, int width) {
  if (!dense_supported(s)) {
    return Status(StatusCode::kInvalidInput,
                  "[prepare_dense] unsupported convolution: in_channels=" + std::to_string(s.in_channels) +
                      " out_channels=" + std::to_string(s.out_channels) + " groups=" + std::to_string(s.groups));
  }
  if (width < 1 || width > kMaxWidth) {
    return Status(StatusCode::kInvalidInput,
                  "[prepare_dense] width=" + std::to_string(width) + " outside [1, " + std::to_string(kMaxWidth) + "]");
  }
  if (w == nullptr) return Status(StatusCode::kInvalidInput, "[prepare_dense] w is null");
  auto packed = std::unique_ptr<PackedDense>(new (std::nothrow) PackedDense);
  if (packed == nullptr) return Status(StatusCode::kUnavailable, "[prepare_dense] out of memory");
  const std::int64_t cin = s.in_channels / s.groups, cout = s.out_channels / s.groups;
  packed->shape = s;
  packed->in_blocks = ceil_div(cin, kBlock);
  packed->out_blocks = ceil_div(cout, kBlock);
  packed->width = static_cast<int>(std::min<std::int64_t>(width, packed->out_blocks));
  std::int64_t taps = 0, floats = 0, total = 0;
  if (!mul_ok(s.kh, s.kw, &taps) || !mul_ok(taps, packed->in_blocks * packed->out_blocks * 64, &floats) ||
      !mul_ok(floats, s.groups, &total) || total > (std::int64_t{1} << 40)) {
    return Status(StatusCode::kInvalidInput, "[prepare_dense] weight size overflows");
  }
  packed->taps = taps;
  packed->group_floats = floats;
  const auto bytes = static_cast<std::size_t>((total * 4 + 63) / 64 * 64);
  packed->data.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  if (packed->data == nullptr) {
    return Status(StatusCode::kUnavailable, "[prepare_dense] cannot allocate " + std::to_string(bytes) + " bytes");
  }
  float* dst = packed->data.get();
  for (std::int64_t g = 0; g < s.groups; ++g) {
    for (std::int64_t q = 0; q < packed->block_groups(); ++q) {
      const std::int64_t width_q = std::min<std::int64_t>(packed->width, packed->out_blocks - q * packed->width);
      for (std::int64_t cb = 0; cb < packed->in_blocks; ++cb) {
        for (std::int64_t t = 0; t < taps; ++t) {
          for (std::int64_t ci = 0; ci < kBlock; ++ci) {
            for (std::int64_t b = 0; b < width_q; ++b) {
              for (std::int64_t lane = 0; lane < kBlock; ++lane) {
                const std::int64_t o = (q * packed->width + b) * kBlock + lane, c = cb * kBlock + ci;
                *dst++ = o < cout && c < cin ? w[((g * cout + o) * cin + c) * taps + t] : 0.0f;
              }
            }
          }
        }
      }
    }
  }
  return std::unique_ptr<DenseWeights>(std::move(packed));
}

std::int64_t dense_weight_floats(const DenseWeights& weights) {
  const auto& w = static_cast<const PackedDense&>(weights);
  return w.group_floats * w.shape.groups;
}

Result<std::unique_ptr<DenseWeights>> scale_dense_inputs(const DenseWeights& weights, const float* scale, ThreadPool& pool) {
  const auto& w = static_cast<const PackedDense&>(weights);
  auto out = std::unique_ptr<PackedDense>(new (std::nothrow) PackedDense);
  if (out == nullptr) return Status(StatusCode::kUnavailable, "[scale_dense_inputs] out of memory");
  out->shape = w.shape;
  out->width = w.width;
  out->in_blocks = w.in_blocks;
  out->out_blocks = w.out_blocks;
  out->taps = w.taps;
  out->group_floats = w.group_floats;
  const std::int64_t total = w.group_floats * w.shape.groups;
  const auto bytes = static_cast<std::size_t>((total * 4 + 63) / 64 * 64);
  out->data.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  if (out->data == nullptr) {
    return Status(StatusCode::kUnavailable, "[scale_dense_inputs] cannot allocate " + std::to_string(bytes) + " bytes");
  }
  // Layout (conv_nchwc_kernels.h): per group and block group q, [cb][tap][ci: 8][b: width_q][8];
  // one input channel's run is width_q * 8 floats.
  const std::int64_t cin = w.shape.in_channels / w.shape.groups, groups = w.shape.groups, qs = w.block_groups();
  const std::int64_t units = groups * qs * w.in_blocks;
  pool.parallel_for(units, pool.even_grain(units, w.taps * 64 * w.width, 1 << 14), [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t u = first; u < last; ++u) {
      const std::int64_t g = u / (qs * w.in_blocks), q = u / w.in_blocks % qs, cb = u % w.in_blocks;
      const std::int64_t width_q = std::min<std::int64_t>(w.width, w.out_blocks - q * w.width), run = width_q * kBlock;
      const std::int64_t at = (w.block_group(g, q) - w.data.get()) + cb * w.taps * kBlock * run;
      const float* src = w.data.get() + at;
      float* dst = out->data.get() + at;
      for (std::int64_t t = 0; t < w.taps; ++t) {
        for (std::int64_t ci = 0; ci < kBlock; ++ci) {
          const std::int64_t c = cb * kBlock + ci;
          const float f = c < cin ? scale[g * cin + c] : 0.0f;
          for (std::int64_t j = 0; j < run; ++j) dst[j] = src[j] * f;
          src += run;
          dst += run;
        }
      }
    }
  });
  return std::unique_ptr<DenseWeights>(std::move(out));
}

Result<std::unique_ptr<DenseWeights>> prepare_dense(const float* w, const ConvShape& s) {
  if (!dense_supported(s)) return prepare_dense_width(w, s, 1);  // the error
  const std::int64_t out_blocks = ceil_div(s.out_channels / s.groups, kBlock);
  return prepare_dense_width(w, s, dense_kernels().preferred_width(out_blocks, s.in_channels / s.groups, s.kh * s.kw));
}

Status conv2d_dense(const Act& x, const DenseWeights& w, const ConvShape& s, const Epilogue& e, const Act& y,
                    ThreadPool& pool) {
  return conv2d_dense_on(dense_kernels(), x, w, s, e, y, pool);
}

Status conv2d_dense_on(const DenseKernels& kernels, const Act& x, const DenseWeights& weights, const ConvShape& s,
                       const Epilogue& e, const Act& y, ThreadPool& pool) {
  const auto& w = static_cast<const PackedDense&>(weights);
  KILN_RETURN_IF_ERROR(check_conv_call("conv2d_dense", x, w.shape, dense_supported(s), s, e, y));
  if (x.n == 0) return Status::Ok();

  // The bias, padded to whole blocks.
  std::unique_ptr<float[]> bias(new (std::nothrow) float[static_cast<std::size_t>(s.groups * w.out_blocks * kBlock)]());
  if (bias == nullptr) return Status(StatusCode::kUnavailable, kOp + std::string("out of memory"));
  if (e.bias != nullptr) std::copy(e.bias, e.bias + s.out_channels, bias.get());

  const Plan plan = make_plan(x, s, y);
  const Split split = split_work(kernels, x, w, s, plan, pool.num_threads());
  const Run run{x, w, s, e, y, plan, kernels, bias.get(),
                y.blocked && (e.residual == nullptr || e.residual->blocked),
                tile_activation(e.act), !tile_applies(e.act)};
  const std::int64_t pixels = plan.oh * plan.ow, bands = split.bands;
  const auto q_chunks = static_cast<std::int64_t>(split.q_bounds.size()) - 1;
  const std::int64_t units = x.n * bands * q_chunks;
  const std::int64_t unit_cost =
      ceil_div(pixels, bands) * ceil_div(s.groups * w.block_groups(), q_chunks) * w.width * w.in_blocks * w.taps * 64;
  std::atomic<bool> failed{false};
  pool.parallel_for(units, pool.even_grain(units, unit_cost, 1 << 18), [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t i = first; i < last; ++i) {
      // Block-group ranges outside bands: a thread's contiguous units are its share of the
      // block groups (over every band) when the split is by block groups.
      const std::int64_t n = i / (bands * q_chunks), band = i % bands;
      const auto chunk = static_cast<std::size_t>(i / bands % q_chunks);
      const Unit u{n, band * pixels / bands, (band + 1) * pixels / bands, split.q_bounds[chunk],
                   split.q_bounds[chunk + 1]};
      if (!run_unit(run, u)) failed.store(true);
    }
  });
  if (failed.load()) return Status(StatusCode::kUnavailable, kOp + std::string("out of memory for the output tiles"));
  return Status::Ok();
}

namespace {

class PointwiseRowsImpl final : public PointwiseRows {
 public:
  PointwiseRowsImpl(const DenseKernels& kernels, const Act& x, const PackedDense& w, const ConvShape& s,
                    const Epilogue& e, std::unique_ptr<float[]> bias)
      : x_(x), mid_{nullptr, x.n, s.out_channels, x.h, x.w, true}, s_(s), e_{e.bias, nullptr, e.act},
        plan_(make_plan(x_, s_, mid_)), bias_(std::move(bias)),
        run_{x_, w, s_, e_, mid_, plan_, kernels, bias_.get(), false, tile_activation(e.act), !tile_applies(e.act), true} {}

  std::int64_t block_groups() const override { return run_.w.block_groups(); }
  std::int64_t first_block(std::int64_t q) const override { return q * run_.w.width; }
  std::int64_t width(std::int64_t q) const override {
    return std::min<std::int64_t>(run_.w.width, run_.w.out_blocks - q * run_.w.width);
  }
  void run(std::int64_t n, std::int64_t q, std::int64_t r0, std::int64_t r1, float* out,
           std::int64_t out_block_stride) const override {
    if (r1 <= r0) return;
    Unit u{n, r0 * x_.w, r1 * x_.w, q, q + 1, out_block_stride};
    // Input blocks in slices when the group's weights outgrow L2, as run_unit does.
    const PackedDense& w = run_.w;
    const std::int64_t per_block = w.taps * 64 * w.width * static_cast<std::int64_t>(sizeof(float));
    if (w.in_blocks * per_block <= kSplitWeightBytes) {
      for (const Region& g : plan_.regions) run_region(run_, u, g, q, q + 1, out);
    } else {
      const std::int64_t slice = std::max<std::int64_t>(1, kSliceWeightBytes / per_block);
      for (std::int64_t cb0 = 0; cb0 < w.in_blocks; cb0 += slice) {
        const InputSlice part{cb0, std::min(w.in_blocks, cb0 + slice)};
        for (const Region& g : plan_.regions) run_region(run_, u, g, q, q + 1, out, part);
      }
    }
    if (run_.late_act) {
      const std::int64_t floats = (r1 - r0) * x_.w * kBlock;
      for (std::int64_t b = 0; b < width(q); ++b) apply_activation(e_.act, out + b * out_block_stride, floats);
    }
  }

 private:
  Act x_, mid_;
  ConvShape s_;
  Epilogue e_;
  Plan plan_;
  std::unique_ptr<float[]> bias_;
  Run run_;
};

}  // namespace

Result<std::unique_ptr<PointwiseRows>> pointwise_rows(const DenseKernels& kernels, const Act& x, const DenseWeights& weights,
                                                      const ConvShape& s, const Epilogue& e) {
  const auto& w = static_cast<const PackedDense&>(weights);
  const ConvShape& p = w.shape;
  if (s.kh != 1 || s.kw != 1 || s.stride_h != 1 || s.stride_w != 1 || s.pad_h != 0 || s.pad_w != 0 ||
      s.dilation_h != 1 || s.dilation_w != 1 || s.groups != 1 || p.in_channels != s.in_channels ||
      p.out_channels != s.out_channels || p.groups != 1 || p.kh != 1 || p.kw != 1 || x.c != s.in_channels ||
      x.h < 1 || x.w < 1 || x.n < 0 || (x.data == nullptr && x.n > 0) || e.residual != nullptr) {
    return Status(StatusCode::kInvalidInput, "[pointwise_rows] needs a 1x1 convolution of stride 1 without padding, "
                                             "one group, no residual, and x of in_channels channels");
  }
  std::unique_ptr<float[]> bias(new (std::nothrow) float[static_cast<std::size_t>(w.out_blocks * kBlock)]());
  if (bias == nullptr) return Status(StatusCode::kUnavailable, "[pointwise_rows] out of memory");
  if (e.bias != nullptr) std::copy(e.bias, e.bias + s.out_channels, bias.get());
  std::unique_ptr<PointwiseRows> rows(new (std::nothrow) PointwiseRowsImpl(kernels, x, w, s, e, std::move(bias)));
  if (rows == nullptr) return Status(StatusCode::kUnavailable, "[pointwise_rows] out of memory");
  return rows;
}

}  // namespace kiln::cpu::nchwc
