// Winograd F(4x4, 3x3) on NCHW8c (nchwc.h): the weights, the driver that cuts the batch
// into tile groups, the cost rule and the portable kernels. The algorithm, the buffers'
// layouts and the kernel table: conv_nchwc_winograd.h.
#include "backends/cpu/kernels/conv_nchwc_winograd.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "backends/cpu/kernels/nchwc_impl.h"
#include "backends/cpu/scratch_buffer.h"

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
#define KILN_WINO_FMA8(a, b, c) ((a) * (b) + (c))
#include "backends/cpu/kernels/conv_nchwc_winograd.inc"
#undef KILN_WINO_FMA8

int winograd_width(std::int64_t out_blocks) { return out_blocks >= 2 ? 2 : 1; }

constexpr WinogradKernels make_winograd_kernels() {
  WinogradKernels k{"baseline",
                    {4, 2, 1, 1, 1, 1},
                    &winograd_width,
                    {{&wino4_input, &wino4_output, &wino4_weights}, {&wino2_input, &wino2_output, &wino2_weights}},
                    {}};
  wino_fill<1, 4>(k);
  wino_fill<2, 2>(k);
  wino_fill<3, 1>(k);
  wino_fill<4, 1>(k);
  wino_fill<5, 1>(k);
  wino_fill<6, 1>(k);
  return k;
}
constexpr WinogradKernels kWinogradKernels = make_winograd_kernels();
}  // namespace portable_impl

#if defined(__x86_64__) || defined(__i386__)
// conv_nchwc_winograd_avx2.cpp, conv_nchwc_winograd_avx512.cpp.
const WinogradKernels& winograd_kernels_avx2_table();
const WinogradKernels& winograd_kernels_avx512_table();
#endif

const WinogradKernels& winograd_kernels_portable() { return portable_impl::kWinogradKernels; }

// The same CPU and KILN_CPU_ISA checks as the dense kernels'.
const WinogradKernels* winograd_kernels_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  return dense_kernels_avx2() != nullptr ? &winograd_kernels_avx2_table() : nullptr;
#else
  return nullptr;
#endif
}

const WinogradKernels* winograd_kernels_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  return dense_kernels_avx512() != nullptr ? &winograd_kernels_avx512_table() : nullptr;
#else
  return nullptr;
#endif
}

const WinogradKernels& winograd_kernels() {
  static const WinogradKernels* const best = winograd_kernels_avx512() != nullptr ? winograd_kernels_avx512()
                                             : winograd_kernels_avx2() != nullptr ? winograd_kernels_avx2()
                                                                                  : &winograd_kernels_portable();
  return *best;
}

namespace {

constexpr const char* kOp = "[conv2d_winograd] ";

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The distance between two of the transformed matrices of a buffer holding `floats` each:
// whole cache lines, an odd number of them, so that the transforms' streams do not fall
// into the same cache sets (conv_winograd.cpp's matrix_stride).
std::int64_t xi_stride(std::int64_t floats) {
  std::int64_t stride = (floats + 15) / 16 * 16;
  if ((stride / 16) % 2 == 0) stride += 16;
  return stride;
}

// The weights: the 3x3 kernels packed for the weight transform (`taps`: per block group q,
// [input channel][9 taps][width_q blocks][8 lanes], zeros past the real channels: 1x the
// raw weights, padding aside), and, in kCached, the whole transform U made by the first
// run, which then drops the packed kernels. A layer whose input sizes never pick Winograd
// never holds a transform.
class PackedWinograd final : public WinogradWeights {
 public:
  ConvShape shape;
  int width = 1;
  std::int64_t in_blocks = 0, out_blocks = 0;
  std::int64_t u_stride = 0;  // floats between the xi matrices of the whole U
  WinogradWeightMode mode = WinogradWeightMode::kStreamed;
  mutable std::unique_ptr<float, FreeDeleter> packed_taps;  // until a whole U is made

  std::int64_t block_groups() const { return ceil_div(out_blocks, width); }
  std::int64_t width_of(std::int64_t q) const { return std::min<std::int64_t>(width, out_blocks - q * width); }
  // Block group q's packed kernels (earlier groups are all `width` blocks wide).
  const float* taps(std::int64_t q) const { return packed_taps.get() + q * width * 72 * in_blocks * kBlock; }
  // U[xi] of block group q: [input channel][width_q blocks][8].
  const float* u(std::int64_t xi, std::int64_t q) const { return u_.get() + xi * u_stride + q * width * 64 * in_blocks; }

  // kCached: the whole transform, made by the first caller for `wanted`; then true and
  // *made its tile size. False in kStreamed and when it could not be allocated.
  bool whole(WinogradTile wanted, const WinogradKernels& k, WinogradTile* made, ThreadPool& pool) const {
    if (mode != WinogradWeightMode::kCached) return false;
    std::call_once(once_, [&] { transform(wanted, k, pool); });
    *made = tile_;
    return u_ != nullptr;
  }
  // Not concurrently with the first run.
  std::int64_t bytes() const {
    const std::int64_t p = packed_taps != nullptr ? padded_channels(shape.out_channels) * in_blocks * kBlock * 9 * 4 : 0;
    return p + (u_ != nullptr ? winograd_values(tile_) * u_stride * 4 : 0);
  }
  bool made(WinogradTile* tile) const {
    *tile = tile_;
    return u_ != nullptr;
  }

 private:
  void transform(WinogradTile tile, const WinogradKernels& k, ThreadPool& pool) const;

  mutable std::once_flag once_;
  mutable std::unique_ptr<float, FreeDeleter> u_;
  mutable WinogradTile tile_ = WinogradTile::kF4;
};

// Block groups over the pool: writing U's pages costs more than computing it (a first touch
// of each 4 KiB page), and both cores take page faults.
void PackedWinograd::transform(WinogradTile tile, const WinogradKernels& k, ThreadPool& pool) const {
  const int values = winograd_values(tile);
  u_.reset(static_cast<float*>(std::aligned_alloc(64, static_cast<std::size_t>((values * u_stride * 4 + 63) / 64 * 64))));
  if (u_ == nullptr) return;
  tile_ = tile;
  const auto fn = k.transforms[static_cast<int>(tile)].weights;
  pool.parallel_for(block_groups(), 1, [&](std::int64_t q0, std::int64_t q1) {
    for (std::int64_t q = q0; q < q1; ++q) {
      fn(taps(q), in_blocks * kBlock, width_of(q) * kBlock, u_.get() + q * width * 64 * in_blocks, u_stride);
    }
  });
  packed_taps.reset();
}

std::string dims(const Act& a) {
  return "[" + std::to_string(a.n) + ", " + std::to_string(a.c) + ", " + std::to_string(a.h) + ", " +
         std::to_string(a.w) + (a.blocked ? "] blocked" : "] plain");
}

Status invalid(const std::string& what) { return Status(StatusCode::kInvalidInput, kOp + what); }

Status check_act(const Act& a, const char* name) {
  if (a.n < 0 || a.c < 1 || a.h < 1 || a.w < 1) return invalid(std::string(name) + " has extents " + dims(a));
  if (a.data == nullptr && a.n > 0) return invalid(std::string(name) + ".data is null");
  return Status::Ok();
}

std::int64_t out_extent(std::int64_t in, std::int64_t pad) { return in + 2 * pad - 2 < 1 ? -1 : in + 2 * pad - 2; }

Status check(const Act& x, const PackedWinograd& w, const ConvShape& s, const Epilogue& e, const Act& y) {
  const ConvShape& p = w.shape;
  if (p.in_channels != s.in_channels || p.out_channels != s.out_channels) {
    return invalid("weights prepared for in_channels=" + std::to_string(p.in_channels) +
                   " out_channels=" + std::to_string(p.out_channels) + ", called with in_channels=" +
                   std::to_string(s.in_channels) + " out_channels=" + std::to_string(s.out_channels));
  }
  if (!winograd_supported(s)) {
    return invalid("unsupported convolution: kernel " + std::to_string(s.kh) + "x" + std::to_string(s.kw) +
                   " stride " + std::to_string(s.stride_h) + "," + std::to_string(s.stride_w) + " dilation " +
                   std::to_string(s.dilation_h) + "," + std::to_string(s.dilation_w) + " groups " +
                   std::to_string(s.groups) + " padding " + std::to_string(s.pad_h) + "," + std::to_string(s.pad_w) +
                   " (3x3, stride 1, dilation 1, groups 1, padding <= 2 only)");
  }
  KILN_RETURN_IF_ERROR(check_act(x, "x"));
  KILN_RETURN_IF_ERROR(check_act(y, "y"));
  if (x.c != s.in_channels) {
    return invalid("x.c=" + std::to_string(x.c) + " != in_channels=" + std::to_string(s.in_channels));
  }
  if (y.c != s.out_channels) {
    return invalid("y.c=" + std::to_string(y.c) + " != out_channels=" + std::to_string(s.out_channels));
  }
  if (y.n != x.n) return invalid("y.n=" + std::to_string(y.n) + " != x.n=" + std::to_string(x.n));
  const std::int64_t oh = out_extent(x.h, s.pad_h), ow = out_extent(x.w, s.pad_w);
  if (y.h != oh) {
    return invalid("y.h=" + std::to_string(y.h) + " != output height " + std::to_string(oh) + " (x.h=" +
                   std::to_string(x.h) + ", pad_h=" + std::to_string(s.pad_h) + ")");
  }
  if (y.w != ow) {
    return invalid("y.w=" + std::to_string(y.w) + " != output width " + std::to_string(ow) + " (x.w=" +
                   std::to_string(x.w) + ", pad_w=" + std::to_string(s.pad_w) + ")");
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

TileActivation tile_activation(FusedActivation act) {
  switch (act) {
    case FusedActivation::kRelu: return TileActivation::kRelu;
    case FusedActivation::kRelu6: return TileActivation::kRelu6;
    case FusedActivation::kHardswish: return TileActivation::kHardswish;
    case FusedActivation::kHardsigmoid: return TileActivation::kHardsigmoid;
    default: return TileActivation::kNone;
  }
}

// ---------------------------------------------------------------------------------------
// The schedule: tile groups x chunks of output block groups.

// A tile group's V (every input channel) and the M of a pass over some of its block groups
// stay in L2 (1 MiB per core here) next to the streamed U: up to kGroupBytes and
// kPassBytes. Groups hold at least kMinGroupTiles tiles, even with a larger V (which then
// spills to L3, read once per pass): each U element streamed from memory feeds that many
// FMAs.
constexpr std::int64_t kGroupBytes = 512 << 10;
constexpr std::int64_t kPassBytes = 256 << 10;
constexpr std::int64_t kMinGroupTiles = 16;
// kStreamed: the U a pass transforms into the thread's buffer, at most this (at least one
// block group's).
constexpr std::int64_t kPassUBytes = 160 << 10;
// kStreamed with several tile groups: a whole U up to this is transformed once per run.
constexpr std::int64_t kRunUBytes = 1 << 20;
// winograd_workspace_bytes: a thread's buffer up to this stays its own (half of a 1 MiB
// L2: Zen 4 and 5; Intel's cores have 1.25-2 MiB).
constexpr std::int64_t kOwnSlotBytes = 512 << 10;

struct Schedule {
  std::int64_t tiles = 0;        // of the batch
  std::int64_t groups = 1;       // tile groups (balanced)
  std::int64_t chunks = 1;       // chunks of block groups per tile group (one unit each)
  std::int64_t pass_groups = 1;  // block groups per pass over a group's M
  std::int64_t group_begin(std::int64_t g) const { return g * tiles / groups; }
};

// With several threads: a multiple of the thread count of groups, or, when the tiles are
// too few to share, the block groups split between the threads (each transforming the
// group's input itself). `shrink` (0..kMaxShrink) makes the buffers smaller, to fit a
// workspace: the passes first (halved, then quartered: more passes over V, the same
// work), then the groups (more of them: streamed weights transformed more often).
constexpr int kMaxShrink = 4;

Schedule make_schedule(int values, std::int64_t cin, std::int64_t tiles, std::int64_t block_groups, int width,
                       int threads, bool streamed, int shrink = 0) {
  Schedule s;
  s.tiles = tiles;
  const int pass_shift = std::min(shrink, 2), group_shift = std::max(shrink - 2, 0);
  const std::int64_t per_tile = values * 4 * padded_channels(cin);
  const std::int64_t most = std::max((kGroupBytes >> group_shift) / per_tile, kMinGroupTiles);
  s.groups = ceil_div(tiles, most);
  if (threads > 1) {
    if (s.groups < threads) {
      if (tiles >= threads * kMinGroupTiles) {
        s.groups = threads;
      } else {
        s.chunks = std::min<std::int64_t>(block_groups, ceil_div(threads, s.groups));
      }
    } else if (s.groups % threads != 0 && s.groups < 4 * threads) {
      s.groups = ceil_div(s.groups, threads) * threads;
    }
  }
  s.groups = std::min(s.groups, tiles);
  const std::int64_t group_tiles = ceil_div(tiles, s.groups);
  s.pass_groups = std::max<std::int64_t>(1, (kPassBytes >> pass_shift) / (values * 4 * group_tiles * width * kBlock));
  if (streamed) {
    const std::int64_t u_per_group = values * 4 * width * kBlock * padded_channels(cin);
    s.pass_groups = std::min(s.pass_groups, std::max<std::int64_t>(1, (kPassUBytes >> pass_shift) / u_per_group));
  }
  return s;
}

// ---------------------------------------------------------------------------------------
// The run.

struct Run {
  const Act& x;
  const PackedWinograd& w;
  const Epilogue& e;
  const Act& y;
  const WinogradKernels& k;
  const WinogradTransforms& t;
  const Schedule& sched;
  const float* bias;  // out_blocks * 8 (zeros past out_channels)
  int side, in_side, values;  // output and input tile sides, transformed values
  std::int64_t pad_h, pad_w;
  std::int64_t tiles_h, tiles_w;
  int rows;      // tiles per row block (V's layout)
  bool direct;   // the output transform writes y itself (blocked y, no plain residual)
  TileActivation tile_act;
  bool late_act;  // an activation applied over the output after the tile stores
  // The whole U ([xi][block group][input channel][width_q][8], xi matrices u_stride
  // apart): the weights' own or this run's; null: transformed per pass into the thread's
  // buffer.
  const float* u;
  std::int64_t u_stride;
};

thread_local ScratchBuffer t_buffer;  // a thread's transforms and products
// A run's whole U (kStreamed, tile groups that would each transform it again): the calling
// thread's.
thread_local ScratchBuffer t_run_u;

// Row blocks of a group of `tiles` tiles: `count` even blocks of at most `rows`.
struct RowBlocks {
  std::int64_t count, small, big;  // `big` blocks of small + 1 tiles, then blocks of small
  RowBlocks(std::int64_t tiles, std::int64_t rows)
      : count(ceil_div(tiles, rows)), small(tiles / count), big(tiles % count) {}
  std::int64_t first(std::int64_t r) const { return r * small + std::min(r, big); }
  std::int64_t size(std::int64_t r) const { return small + (r < big ? 1 : 0); }
};

// Calls fn(image, ty, tx, count, t) for the runs of tiles [t0, t1) (batch order) along tile
// rows; t: the run's first tile.
template <typename Fn>
void for_each_run(const Run& r, std::int64_t t0, std::int64_t t1, const Fn& fn) {
  const std::int64_t per_image = r.tiles_h * r.tiles_w;
  for (std::int64_t t = t0; t < t1;) {
    const std::int64_t image = t / per_image, rem = t % per_image, ty = rem / r.tiles_w, tx = rem % r.tiles_w;
    const std::int64_t count = std::min(t1 - t, r.tiles_w - tx);
    fn(image, ty, tx, count, t);
    t += count;
  }
}

// 1. V of the group's tiles [g0, g1): [xi][row block][input block][row][8].
void input_transform(const Run& r, std::int64_t g0, std::int64_t g1, float* v, std::int64_t v_xi, float* rows_buf) {
  const Act& x = r.x;
  const std::int64_t in_blocks = r.w.in_blocks, cpad = in_blocks * kBlock;
  const RowBlocks rb(g1 - g0, r.rows);
  for (std::int64_t cb = 0; cb < in_blocks; ++cb) {
    for (std::int64_t b = 0; b < rb.count; ++b) {
      const std::int64_t first = rb.first(b), size = rb.size(b);
      float* block = v + first * cpad + cb * size * kBlock;
      for_each_run(r, g0 + first, g0 + first + size, [&](std::int64_t image, std::int64_t ty, std::int64_t tx,
                                                         std::int64_t count, std::int64_t t) {
        WinogradInputRun a;
        const std::int64_t y0 = r.side * ty - r.pad_h;
        const std::int64_t r0 = std::max<std::int64_t>(y0, 0), r1 = std::min<std::int64_t>(y0 + r.in_side, x.h);
        const detail::PlaneRows plane = detail::block_rows(x, image, cb, r0, r1, rows_buf);
        for (int i = 0; i < r.in_side; ++i) {
          const std::int64_t yy = y0 + i;
          a.rows[i] = yy >= 0 && yy < x.h ? plane.data + (yy - plane.first_row) * x.w * kBlock : nullptr;
        }
        a.w = x.w;
        a.x0 = r.side * tx - r.pad_w;
        a.count = count;
        a.lanes = detail::block_channels(x.c, cb);
        a.dst = block + (t - g0 - first) * kBlock;
        a.xi_stride = v_xi;
        r.t.input(a);
      });
    }
  }
}

// 2. M of output block groups [q0, q1) (blocks from q0 * width): [xi][block][tile][8].
// U: the whole transform's, or with `u_pass` that pass's ([xi][q - q0][input channel]
// [width_q][8], xi matrices u_xi apart; just written: nothing to prefetch).
// With `u_pass`, the register tiles prefetch `next` instead: the packed kernels of the next
// pass, `next_lines` cache lines, spread over all of them.
void multiply(const Run& r, std::int64_t tiles, std::int64_t q0, std::int64_t q1, const float* v, std::int64_t v_xi,
              float* m, std::int64_t m_xi, const float* u_pass, std::int64_t u_xi, const float* next,
              std::int64_t next_taps_lines) {
  const PackedWinograd& w = r.w;
  const auto u_of = [&](std::int64_t xi, std::int64_t q) {
    return u_pass != nullptr ? u_pass + xi * u_xi + (q - q0) * w.width * 64 * w.in_blocks
                             : r.u + xi * r.u_stride + q * w.width * 64 * w.in_blocks;
  };
  const std::int64_t cpad = w.in_blocks * kBlock;
  const RowBlocks rb(tiles, r.rows);
  std::int64_t taps_per_call = 0;
  if (u_pass != nullptr && next != nullptr) {
    std::int64_t calls = 0;
    for (std::int64_t q = q0; q < q1; ++q) {
      const int most = r.k.max_rows[w.width_of(q) - 1];
      calls += rb.count * ceil_div(ceil_div(tiles, rb.count), most);
    }
    taps_per_call = ceil_div(next_taps_lines, calls * r.values);
  }
  for (int xi = 0; xi < r.values; ++xi) {
    for (std::int64_t q = q0; q < q1; ++q) {
      const int width = static_cast<int>(std::min<std::int64_t>(w.width, w.out_blocks - q * w.width));
      const int most = r.k.max_rows[width - 1];
      // The U this pass reads next, prefetched over this block group's register tiles.
      const bool last = q + 1 == q1;
      const std::int64_t next_q = last ? q0 : q + 1, next_xi = last ? xi + 1 : xi;
      std::int64_t next_lines =
          next_xi < r.values && u_pass == nullptr ? w.width_of(next_q) * 4 * w.in_blocks
                                                  : 0;  // width * 8 floats per input channel: width * 4 lines per block
      const std::int64_t calls = rb.count * ceil_div(ceil_div(tiles, rb.count), most);
      WinogradGemmArgs a;
      a.in_blocks = w.in_blocks;
      a.u = u_of(xi, q);
      a.m_block_stride = tiles * kBlock;
      const float* prefetch = next_lines > 0 ? u_of(next_xi, next_q) : nullptr;
      std::int64_t per_call = ceil_div(next_lines, calls);
      if (taps_per_call > 0 && next_taps_lines > 0) {
        prefetch = next, next_lines = next_taps_lines, per_call = taps_per_call;
      }
      a.prefetch_per_block = ceil_div(per_call, w.in_blocks);
      for (std::int64_t b = 0; b < rb.count; ++b) {
        const std::int64_t first = rb.first(b), size = rb.size(b);
        a.v_block_stride = size * kBlock;
        // The row block in register tiles of at most `most` rows (even).
        const RowBlocks parts(size, most);
        for (std::int64_t p = 0; p < parts.count; ++p) {
          const std::int64_t p0 = parts.first(p);
          a.v = v + xi * v_xi + first * cpad + p0 * kBlock;
          a.m = m + xi * m_xi + (q - q0) * w.width * tiles * kBlock + (first + p0) * kBlock;
          a.prefetch = prefetch;
          a.prefetch_lines = prefetch != nullptr ? std::min(per_call, next_lines) : 0;
          if (prefetch != nullptr) {
            prefetch += 16 * a.prefetch_lines;
            next_lines -= a.prefetch_lines;
            if (next_lines <= 0) prefetch = nullptr;
            if (taps_per_call > 0) next = prefetch, next_taps_lines = next_lines;
          }
          r.k.gemm[width - 1][parts.size(p) - 1](a);
        }
      }
    }
  }
}

// The tile values of a run (bias added, in `scratch` [rows][cols][8]) -> y, for a plain y
// or a plain residual: + residual, activation, stored in y's layout (zeros in padded lanes).
void finish_scratch(const Run& r, const float* scratch, std::int64_t image, std::int64_t block, std::int64_t oy0,
                    std::int64_t ox0, std::int64_t rows, std::int64_t cols, float* row_buf) {
  const Act& y = r.y;
  const std::int64_t lanes = detail::block_channels(y.c, block);
  float* yimg = y.data + image * y.image_floats();
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* src = scratch + i * cols * kBlock;
    std::copy(src, src + cols * kBlock, row_buf);
    if (r.e.residual != nullptr) {
      const Act& res = *r.e.residual;
      const float* rimg = res.data + image * res.image_floats();
      for (std::int64_t j = 0; j < cols; ++j) {
        for (std::int64_t l = 0; l < lanes; ++l) {
          row_buf[j * kBlock + l] += rimg[res.offset(block * kBlock + l, oy0 + i, ox0 + j)];
        }
      }
    }
    apply_activation(r.e.act, row_buf, cols * kBlock);
    for (std::int64_t j = 0; j < cols; ++j) {
      if (y.blocked) {
        float* dst = yimg + y.offset(block * kBlock, oy0 + i, ox0 + j);
        for (std::int64_t l = 0; l < kBlock; ++l) dst[l] = l < lanes ? row_buf[j * kBlock + l] : 0.0f;
      } else {
        for (std::int64_t l = 0; l < lanes; ++l) {
          yimg[y.offset(block * kBlock + l, oy0 + i, ox0 + j)] = row_buf[j * kBlock + l];
        }
      }
    }
  }
}

// 3. The output transform of the group's tiles [g0, g1) for output blocks [b0, b1).
void output_transform(const Run& r, std::int64_t g0, std::int64_t g1, std::int64_t b0, std::int64_t b1,
                      const float* m, std::int64_t m_xi, float* scratch) {
  const Act& y = r.y;
  const std::int64_t tiles = g1 - g0, plane = y.h * y.w;
  for (std::int64_t block = b0; block < b1; ++block) {
    const float* mb = m + (block - b0) * tiles * kBlock;
    for_each_run(r, g0, g1, [&](std::int64_t image, std::int64_t ty, std::int64_t tx, std::int64_t count, std::int64_t t) {
      WinogradOutputRun a;
      a.m = mb + (t - g0) * kBlock;
      a.xi_stride = m_xi;
      a.count = count;
      const std::int64_t oy0 = r.side * ty, ox0 = r.side * tx;
      a.rows = std::min<std::int64_t>(r.side, y.h - oy0);
      a.cols = std::min<std::int64_t>(r.side * count, y.w - ox0);
      a.bias = r.bias + block * kBlock;
      if (r.direct) {
        const std::int64_t at = (block * plane + oy0 * y.w + ox0) * kBlock;
        a.out = y.data + image * y.image_floats() + at;
        a.out_row = y.w * kBlock;
        if (r.e.residual != nullptr) {
          a.residual = r.e.residual->data + image * r.e.residual->image_floats() + at;
          a.residual_row = a.out_row;
        }
        a.act = r.tile_act;
        a.lanes = detail::block_channels(y.c, block);
        r.t.output(a);
        if (r.late_act) {
          for (std::int64_t i = 0; i < a.rows; ++i) apply_activation(r.e.act, a.out + i * a.out_row, a.cols * kBlock);
        }
      } else {
        a.out = scratch;
        a.out_row = a.cols * kBlock;
        r.t.output(a);
        finish_scratch(r, scratch, image, block, oy0, ox0, a.rows, a.cols, scratch + r.side * a.out_row);
      }
    });
  }
}

// What a run's buffers depend on besides its schedule.
struct BufferGeometry {
  const PackedWinograd* w;
  int values, side;  // transformed values per tile, output tile side
  bool x_blocked;
  std::int64_t x_w;
  bool direct;  // the output transform writes y itself
  std::int64_t tiles_w;
};

BufferGeometry geometry_of(const Run& r) { return {&r.w, r.values, r.side, r.x.blocked, r.x.w, r.direct, r.tiles_w}; }

// A unit's buffer: V of `tiles` tiles, M and (streamed) U of `pass` block groups, the
// rows of a plain input packed as blocks, the output scratch (a run's tile row and a
// finished row). In floats, with the parts' strides.
struct UnitBuffer {
  std::int64_t v_xi, m_xi, u_xi, rows_floats, scratch_floats, floats;
};

UnitBuffer unit_buffer(const BufferGeometry& g, std::int64_t tiles, std::int64_t pass, bool streamed) {
  const PackedWinograd& w = *g.w;
  UnitBuffer b;
  b.v_xi = xi_stride(tiles * w.in_blocks * kBlock);
  b.m_xi = xi_stride(tiles * pass * w.width * kBlock);
  b.u_xi = streamed ? xi_stride(pass * w.width * 64 * w.in_blocks) : 0;
  b.rows_floats = g.x_blocked ? 0 : (g.side + 2) * g.x_w * kBlock;
  b.scratch_floats = g.direct ? 0 : (g.side + 1) * g.side * (g.tiles_w + 1) * kBlock;
  b.floats = g.values * (b.v_xi + b.m_xi + b.u_xi) + b.rows_floats + b.scratch_floats;
  return b;
}

// The largest unit's buffer under `sched` (xi_stride grows with its argument: the most
// tiles a group holds, the longest pass a chunk makes), rounded to 64 bytes.
std::int64_t max_unit_floats(const BufferGeometry& g, const Schedule& sched, bool streamed) {
  const std::int64_t qs = g.w->block_groups();
  const std::int64_t tiles = ceil_div(sched.tiles, sched.groups);
  const std::int64_t pass = std::min(sched.pass_groups, ceil_div(qs, sched.chunks));
  return (unit_buffer(g, tiles, pass, streamed).floats + 15) / 16 * 16;
}

// A run's memory: its schedule, whether it makes a U for the run (kStreamed, several tile
// groups, a small U: transformed once over the pool instead of by every tile group), and
// one buffer (slot) per thread that can have work. `shrink`: make_schedule's.
struct BufferLayout {
  Schedule sched;
  bool run_u = false;
  std::int64_t slot_floats = 0, u_floats = 0;
  int slots = 0;
  std::uint64_t slot_bytes() const { return static_cast<std::uint64_t>(slot_floats * slots) * 4; }
  std::uint64_t bytes() const { return slot_bytes() + (run_u ? static_cast<std::uint64_t>(u_floats) * 4 : 0); }
};

BufferLayout buffer_layout(const BufferGeometry& g, std::int64_t cin, std::int64_t tiles, int threads, bool whole,
                           int shrink) {
  const PackedWinograd& w = *g.w;
  BufferLayout l;
  const Schedule first = make_schedule(g.values, cin, tiles, w.block_groups(), w.width, threads, !whole);
  l.run_u = !whole && first.groups > 1 && g.values * w.u_stride * 4 <= kRunUBytes;
  l.u_floats = (g.values * w.u_stride + 15) / 16 * 16;
  const bool streamed = !whole && !l.run_u;
  l.sched = make_schedule(g.values, cin, tiles, w.block_groups(), w.width, threads, streamed, shrink);
  l.slot_floats = max_unit_floats(g, l.sched, streamed);
  l.slots = static_cast<int>(std::min<std::int64_t>(threads, l.sched.groups * l.sched.chunks));
  return l;
}

// The same without a U for the run (no memory for one): streamed per pass.
BufferLayout streamed_layout(const BufferGeometry& g, std::int64_t cin, std::int64_t tiles, int threads) {
  const PackedWinograd& w = *g.w;
  BufferLayout l;
  l.sched = make_schedule(g.values, cin, tiles, w.block_groups(), w.width, threads, true);
  l.slot_floats = max_unit_floats(g, l.sched, true);
  l.slots = static_cast<int>(std::min<std::int64_t>(threads, l.sched.groups * l.sched.chunks));
  return l;
}

// One unit: tile group g, block groups of chunk `chunk`, in `slot` (at least
// max_unit_floats) or, when null, the thread's buffer. False without memory.
bool run_unit(const Run& r, std::int64_t g, std::int64_t chunk, float* slot) {
  const PackedWinograd& w = r.w;
  const std::int64_t g0 = r.sched.group_begin(g), g1 = r.sched.group_begin(g + 1), tiles = g1 - g0;
  const std::int64_t qs = w.block_groups();
  const std::int64_t q0 = chunk * qs / r.sched.chunks, q1 = (chunk + 1) * qs / r.sched.chunks;
  const std::int64_t b1 = std::min(w.out_blocks, q1 * w.width);
  const std::int64_t pass = std::min(r.sched.pass_groups, q1 - q0);
  const UnitBuffer ub = unit_buffer(geometry_of(r), tiles, pass, r.u == nullptr);
  const std::int64_t v_xi = ub.v_xi, m_xi = ub.m_xi, u_xi = ub.u_xi, rows_floats = ub.rows_floats;
  const bool streamed = r.u == nullptr;
  float* buf = slot != nullptr ? slot : t_buffer.get(ub.floats);
  if (buf == nullptr) return false;
  float* v = buf;
  float* m = v + r.values * v_xi;
  float* u = streamed ? m + r.values * m_xi : nullptr;
  float* extra = m + r.values * (m_xi + u_xi);
  input_transform(r, g0, g1, v, v_xi, extra);
  for (std::int64_t qa = q0; qa < q1; qa += pass) {
    const std::int64_t qb = std::min(q1, qa + pass);
    if (u != nullptr) {
      for (std::int64_t q = qa; q < qb; ++q) {
        r.t.weights(w.taps(q), w.in_blocks * kBlock, w.width_of(q) * kBlock, u + (q - qa) * w.width * 64 * w.in_blocks,
                    u_xi);
      }
    }
    // The next pass's packed kernels (block groups [qb, qn), contiguous), fetched into L2
    // along this pass's register tiles.
    const std::int64_t qn = std::min(q1, qb + pass);
    const float* next = u != nullptr && qb < q1 ? w.taps(qb) : nullptr;
    const float* next_end = next != nullptr ? w.taps(qn - 1) + 72 * w.in_blocks * kBlock * w.width_of(qn - 1) : nullptr;
    const std::int64_t next_lines = next != nullptr ? (next_end - next) / 16 : 0;
    multiply(r, tiles, qa, qb, v, v_xi, m, m_xi, u, u_xi, next, next_lines);
    output_transform(r, g0, g1, qa * w.width, std::min(b1, qb * w.width), m, m_xi, extra + rows_floats);
  }
  return true;
}

}  // namespace

bool winograd_supported(const ConvShape& s) {
  return s.in_channels >= 1 && s.out_channels >= 1 && s.groups == 1 && s.kh == 3 && s.kw == 3 && s.stride_h == 1 &&
         s.stride_w == 1 && s.dilation_h == 1 && s.dilation_w == 1 && s.pad_h >= 0 && s.pad_h <= 2 && s.pad_w >= 0 &&
         s.pad_w <= 2;
}

namespace {

}  // namespace

WinogradWeightMode winograd_weight_mode() {
  static const WinogradWeightMode mode = [] {
    const char* v = std::getenv("KILN_WINOGRAD_WEIGHTS");
    return v != nullptr && std::strcmp(v, "cached") == 0 ? WinogradWeightMode::kCached : WinogradWeightMode::kStreamed;
  }();
  return mode;
}

Result<std::unique_ptr<WinogradWeights>> prepare_winograd_width(const float* w, const ConvShape& s, int width,
                                                                WinogradWeightMode mode) {
  if (!winograd_supported(s)) {
    return Status(StatusCode::kInvalidInput,
                  "[prepare_winograd] unsupported convolution: kernel " + std::to_string(s.kh) + "x" +
                      std::to_string(s.kw) + " stride " + std::to_string(s.stride_h) + "," +
                      std::to_string(s.stride_w) + " dilation " + std::to_string(s.dilation_h) + "," +
                      std::to_string(s.dilation_w) + " groups " + std::to_string(s.groups));
  }
  if (width < 1 || width > kWinogradMaxWidth) {
    return Status(StatusCode::kInvalidInput, "[prepare_winograd] width=" + std::to_string(width) + " outside [1, " +
                                                 std::to_string(kWinogradMaxWidth) + "]");
  }
  if (w == nullptr) return Status(StatusCode::kInvalidInput, "[prepare_winograd] w is null");
  std::int64_t blocks = 0, taps = 0;
  if (__builtin_mul_overflow(padded_channels(s.in_channels), padded_channels(s.out_channels), &blocks) ||
      blocks > (std::int64_t{1} << 36)) {
    return Status(StatusCode::kInvalidInput, "[prepare_winograd] weight size overflows");
  }
  taps = blocks * 9;
  auto packed = std::unique_ptr<PackedWinograd>(new (std::nothrow) PackedWinograd);
  if (packed == nullptr) return Status(StatusCode::kUnavailable, "[prepare_winograd] out of memory");
  packed->shape = s;
  packed->in_blocks = ceil_div(s.in_channels, kBlock);
  packed->out_blocks = ceil_div(s.out_channels, kBlock);
  packed->width = static_cast<int>(std::min<std::int64_t>(width, packed->out_blocks));
  packed->u_stride = xi_stride(blocks);
  packed->mode = mode;
  packed->packed_taps.reset(static_cast<float*>(std::aligned_alloc(64, static_cast<std::size_t>((taps * 4 + 63) / 64 * 64))));
  if (packed->packed_taps == nullptr) {
    return Status(StatusCode::kUnavailable, "[prepare_winograd] cannot allocate " + std::to_string(taps * 4) + " bytes");
  }
  // [q][c][tap][b][lane], in that order: zeros past the real channels.
  const std::int64_t cin = s.in_channels, cout = s.out_channels, cpad = packed->in_blocks * kBlock;
  float* dst = packed->packed_taps.get();
  for (std::int64_t q = 0; q < packed->block_groups(); ++q) {
    const std::int64_t width_q = packed->width_of(q);
    for (std::int64_t c = 0; c < cpad; ++c) {
      for (int t = 0; t < 9; ++t) {
        for (std::int64_t b = 0; b < width_q; ++b) {
          for (std::int64_t lane = 0; lane < kBlock; ++lane) {
            const std::int64_t o = (q * packed->width + b) * kBlock + lane;
            *dst++ = o < cout && c < cin ? w[(o * cin + c) * 9 + t] : 0.0f;
          }
        }
      }
    }
  }
  return std::unique_ptr<WinogradWeights>(std::move(packed));
}

Result<std::unique_ptr<WinogradWeights>> prepare_winograd(const float* w, const ConvShape& s) {
  return prepare_winograd_width(w, s, winograd_kernels().preferred_width(ceil_div(s.out_channels, kBlock)));
}

std::int64_t winograd_weight_bytes(const WinogradWeights& w) { return static_cast<const PackedWinograd&>(w).bytes(); }

bool winograd_transformed_tile(const WinogradWeights& w, WinogradTile* tile) {
  return static_cast<const PackedWinograd&>(w).made(tile);
}

Status conv2d_winograd(const Act& x, const WinogradWeights& w, const ConvShape& s, const Epilogue& e, const Act& y,
                       ThreadPool& pool, std::span<std::byte> workspace) {
  return conv2d_winograd_on(winograd_kernels(), x, w, s, e, y, pool, workspace);
}

Status conv2d_winograd_on(const WinogradKernels& kernels, const Act& x, const WinogradWeights& w, const ConvShape& s,
                          const Epilogue& e, const Act& y, ThreadPool& pool, std::span<std::byte> workspace) {
  return conv2d_winograd_tile(kernels, winograd_tile(s, y.n, y.h, y.w, pool.num_threads()), x, w, s, e, y, pool,
                              workspace);
}

Status conv2d_winograd_tile(const WinogradKernels& kernels, WinogradTile wanted, const Act& x,
                            const WinogradWeights& weights, const ConvShape& s, const Epilogue& e, const Act& y,
                            ThreadPool& pool, std::span<std::byte> workspace) {
  const auto& w = static_cast<const PackedWinograd&>(weights);
  KILN_RETURN_IF_ERROR(check(x, w, s, e, y));
  if (x.n == 0) return Status::Ok();
  // kCached without the memory for the whole U streams it instead (the packed kernels
  // stay until a whole U is made).
  WinogradTile tile = wanted;
  const bool whole = w.whole(wanted, kernels, &tile, pool);
  if (!whole) tile = wanted;
  std::unique_ptr<float[]> bias(new (std::nothrow) float[static_cast<std::size_t>(w.out_blocks * kBlock)]());
  if (bias == nullptr) return Status(StatusCode::kUnavailable, kOp + std::string("out of memory"));
  if (e.bias != nullptr) std::copy(e.bias, e.bias + s.out_channels, bias.get());

  const int side = winograd_out_side(tile), values = winograd_values(tile);
  const std::int64_t tiles_h = ceil_div(y.h, side), tiles_w = ceil_div(y.w, side);
  const int rows = kernels.max_rows[w.width - 1];
  const std::int64_t tiles = x.n * tiles_h * tiles_w;
  Schedule sched = make_schedule(values, s.in_channels, tiles, w.block_groups(), w.width, pool.num_threads(), !whole);
  const TileActivation tile_act = tile_activation(e.act);
  Run run{x,
          w,
          e,
          y,
          kernels,
          kernels.transforms[static_cast<int>(tile)],
          sched,
          bias.get(),
          side,
          side + 2,
          values,
          s.pad_h,
          s.pad_w,
          tiles_h,
          tiles_w,
          rows,
          y.blocked && (e.residual == nullptr || e.residual->blocked),
          tile_act,
          e.act != FusedActivation::kNone && tile_act == TileActivation::kNone,
          whole ? w.u(0, 0) : nullptr,
          w.u_stride};
  // The memory: the threads' buffers (slots) and the U made for the run, from the
  // workspace when it holds them (with smaller buffers if need be), else from the threads'
  // own buffers.
  const BufferGeometry geometry = geometry_of(run);
  const bool aligned = reinterpret_cast<std::uintptr_t>(workspace.data()) % 64 == 0;
  const std::uint64_t ws_bytes = aligned ? workspace.size() : 0;
  BufferLayout chosen = buffer_layout(geometry, s.in_channels, tiles, pool.num_threads(), whole, 0);
  for (int shrink = 1; ws_bytes > 0 && chosen.bytes() > ws_bytes && shrink <= kMaxShrink; ++shrink) {
    const BufferLayout smaller = buffer_layout(geometry, s.in_channels, tiles, pool.num_threads(), whole, shrink);
    if (smaller.bytes() <= ws_bytes) chosen = smaller;
  }
  // Nothing fits: the first layout, its slots in the workspace if they fit there.
  if (chosen.bytes() > ws_bytes) chosen = buffer_layout(geometry, s.in_channels, tiles, pool.num_threads(), whole, 0);
  const bool slots_in_ws = ws_bytes > 0 && chosen.slot_bytes() <= ws_bytes;
  const bool u_in_ws = ws_bytes > 0 && chosen.bytes() <= ws_bytes;
  // Carved from the workspace's start, the slots first (all multiples of 64 bytes): a
  // workspace the executor planned for this node (GraphPlan::workspace) starts where the
  // planner put every such node's (the arena's lowest free offset), so thread t's buffer
  // (slot t) keeps its address, in its core's cache, from one layer to the next.
  float* const carved = slots_in_ws ? reinterpret_cast<float*>(workspace.data()) : nullptr;
  float* slot_base = carved;
  if (chosen.run_u) {
    float* run_u = u_in_ws ? carved + chosen.slot_floats * chosen.slots : t_run_u.get(chosen.u_floats);
    if (run_u != nullptr) {
      const auto fn = kernels.transforms[static_cast<int>(tile)].weights;
      pool.parallel_for(w.block_groups(), 1, [&](std::int64_t q0, std::int64_t q1) {
        for (std::int64_t q = q0; q < q1; ++q) {
          fn(w.taps(q), w.in_blocks * kBlock, w.width_of(q) * kBlock, run_u + q * w.width * 64 * w.in_blocks,
             w.u_stride);
        }
      });
      run.u = run_u;
    } else {  // no memory for it: streamed after all, in the threads' own buffers
      chosen = streamed_layout(geometry, s.in_channels, tiles, pool.num_threads());
      slot_base = nullptr;
    }
  }
  sched = chosen.sched;
  WorkspaceSlots slot_pool(slot_base, chosen.slot_floats, slot_base != nullptr ? chosen.slots : 0);
  const std::int64_t units = sched.groups * sched.chunks;
  std::atomic<bool> failed{false};
  pool.parallel_for(units, 1, [&](std::int64_t first, std::int64_t last) {
    float* slot = slot_pool.acquire(ThreadPool::thread_index());  // null: the thread's own buffer
    for (std::int64_t u = first; u < last; ++u) {
      if (!run_unit(run, u / sched.chunks, u % sched.chunks, slot)) failed.store(true);
    }
    slot_pool.release(slot);
  });
  if (failed.load()) return Status(StatusCode::kUnavailable, kOp + std::string("out of memory for the tile buffers"));
  return Status::Ok();
}

std::uint64_t winograd_workspace_bytes(const WinogradWeights& weights, const ConvShape& s, const Act& x, const Act& y,
                                       bool plain_residual, int threads) {
  const auto& w = static_cast<const PackedWinograd&>(weights);
  if (x.n <= 0 || y.h <= 0 || y.w <= 0 || threads < 1) return 0;
  // kCached: the first run makes the whole U for the tile it asks (winograd_tile's).
  WinogradTile tile = winograd_tile(s, y.n, y.h, y.w, threads);
  const bool whole = w.mode == WinogradWeightMode::kCached;
  if (WinogradTile made = tile; whole && w.made(&made)) tile = made;  // a later run: the tile made
  const int side = winograd_out_side(tile);
  const std::int64_t tiles_w = ceil_div(y.w, side), tiles = x.n * ceil_div(y.h, side) * tiles_w;
  const BufferGeometry g{&w, winograd_values(tile), side, x.blocked, x.w, y.blocked && !plain_residual, tiles_w};
  const BufferLayout l = buffer_layout(g, s.in_channels, tiles, threads, whole, 0);
  // A thread's buffer that fits in half of a core's L2 stays the thread's own: it is still
  // in that core's cache when the next layer starts, where arena bytes that tensors used in
  // between are not (squeezenet1_1's expand convs, 260-460 KB a thread: 11-21 % slower from
  // the arena at 2 threads on Zen 5, the network 5 %). Larger ones stream through L2 anyway.
  return l.slot_floats * 4 <= kOwnSlotBytes ? 0 : l.bytes();
}

// ---------------------------------------------------------------------------------------
// The cost rule: estimates in microseconds from rates measured on this CPU (AMD Zen 4,
// AVX-512; bench/nchwc_winograd_bench.cpp with the caches flushed before each call, as a
// network's weights come from memory, and resnet18 end to end). A kernel's time is its
// compute on `threads` threads and its weights' streaming from memory, which overlap only
// in part (the register tiles prefetch the next block group's U): max + 0.4 min of the two.
// resnet18's 256@14 layer, F(4x4) on one thread: 0.76 ms of compute, 9.4 MB of U (0.39 ms
// at 24 GB/s): estimated 0.91, measured 0.86; its 512@7 layer, F(2x2): 1.31 + 0.70 ms:
// 1.59, measured 1.4 (F(4x4), 0.74 + 1.57 ms: 1.87, measured 1.75).

namespace {

constexpr double kGemmFlopsPerUs = 105e3;     // the register tiles, per thread
constexpr double kDirectFlopsPerUs = 110e3;   // conv2d_dense on 14x14 and larger outputs
constexpr double kDirectSmallFlopsPerUs = 90e3;  // on smaller ones (more border regions)
// Per (tile, channel block): the input and output transforms of F(4x4) and F(2x2).
constexpr double kInputUs[2] = {0.045, 0.012};
constexpr double kOutputUs[2] = {0.025, 0.010};
// kStreamed, per input channel and 8 output channels: the weight transform (written to the
// thread's buffer; resnet18's 256@14 and 512@7 layers).
constexpr double kWeightUs[2] = {0.027, 0.0096};
// Bytes per microsecond from memory (one thread, two or more), and from L3 (weights
// streamed again by a later tile group).
double memory_bytes_per_us(int threads) { return threads > 1 ? 27e3 : 24e3; }
constexpr double kL3BytesPerUs = 80e3;
constexpr double kL3Bytes = 16.0 * (1 << 20);  // what a layer's weights may keep of the L3

double weight_stream_us(double bytes, std::int64_t passes, int threads) {
  const double again = bytes <= kL3Bytes ? bytes / kL3BytesPerUs : bytes / memory_bytes_per_us(threads);
  return bytes / memory_bytes_per_us(threads) + static_cast<double>(passes - 1) * again;
}

double combine(double compute_us, double memory_us) {
  return std::max(compute_us, memory_us) + 0.4 * std::min(compute_us, memory_us);
}

}  // namespace

double direct_estimate_us(const ConvShape& s, std::int64_t n, std::int64_t oh, std::int64_t ow, int threads) {
  const double cp = static_cast<double>(padded_channels(s.in_channels)),
               kp = static_cast<double>(padded_channels(s.out_channels));
  const double flops = 2.0 * 9.0 * cp * kp * static_cast<double>(n * oh * ow);
  const double rate = oh * ow >= 196 ? kDirectFlopsPerUs : kDirectSmallFlopsPerUs;
  return combine(flops / (rate * threads), weight_stream_us(9.0 * cp * kp * 4.0, 1, threads));
}

double winograd_estimate_us(WinogradTile tile, const ConvShape& s, std::int64_t n, std::int64_t oh, std::int64_t ow,
                            int threads, WinogradWeightMode mode) {
  const int side = winograd_out_side(tile), values = winograd_values(tile);
  const std::int64_t tiles = n * ceil_div(oh, side) * ceil_div(ow, side);
  const std::int64_t in_blocks = ceil_div(s.in_channels, kBlock), out_blocks = ceil_div(s.out_channels, kBlock);
  const int width = winograd_kernels().preferred_width(out_blocks);
  const bool streamed = mode == WinogradWeightMode::kStreamed;
  Schedule sched = make_schedule(values, s.in_channels, tiles, ceil_div(out_blocks, width), width, threads, streamed);
  const double cp = static_cast<double>(in_blocks * kBlock), kp = static_cast<double>(out_blocks * kBlock);
  const double t = static_cast<double>(tiles);
  // kStreamed: U made once for the run (several tile groups, a small U; then the cached
  // schedule) or by every tile group per pass.
  const std::int64_t u_bytes = values * xi_stride(static_cast<std::int64_t>(cp * kp)) * 4;
  const bool run_u = streamed && sched.groups > 1 && u_bytes <= kRunUBytes;
  if (run_u) sched = make_schedule(values, s.in_channels, tiles, ceil_div(out_blocks, width), width, threads, false);
  // A block group of one output block fills half a register tile's lanes; a register
  // tile's loads and stores weigh on short sums (few input blocks).
  const double efficiency = (out_blocks == 1 ? 0.5 : 1.0) * static_cast<double>(in_blocks) / (in_blocks + 0.5);
  const double gemm = 2.0 * values * t * cp * kp / (kGemmFlopsPerUs * efficiency);
  // Each chunk of a group transforms the group's input again.
  double transforms = t * (static_cast<double>(in_blocks * sched.chunks) * kInputUs[static_cast<int>(tile)] +
                           static_cast<double>(out_blocks) * kOutputUs[static_cast<int>(tile)]);
  const std::int64_t weight_passes = run_u ? 1 : sched.groups;
  if (streamed) transforms += cp * kp / kBlock * kWeightUs[static_cast<int>(tile)] * static_cast<double>(weight_passes);
  const double units = static_cast<double>(sched.groups * sched.chunks);
  const double parallel = std::min<double>(threads, units);
  const double weight_bytes = (streamed ? 9.0 : values) * cp * kp * 4.0;
  return combine((gemm + transforms) / parallel, weight_stream_us(weight_bytes, weight_passes, threads));
}

WinogradTile winograd_tile(const ConvShape& s, std::int64_t n, std::int64_t oh, std::int64_t ow, int threads) {
  return winograd_estimate_us(WinogradTile::kF2, s, n, oh, ow, threads) <
                 winograd_estimate_us(WinogradTile::kF4, s, n, oh, ow, threads)
             ? WinogradTile::kF2
             : WinogradTile::kF4;
}

bool winograd_preferred(const ConvShape& s, std::int64_t n, std::int64_t oh, std::int64_t ow, int threads) {
  if (!winograd_supported(s)) return false;
  const WinogradTile tile = winograd_tile(s, n, oh, ow, threads);
  return winograd_estimate_us(tile, s, n, oh, ow, threads) < direct_estimate_us(s, n, oh, ow, threads);
}

}  // namespace kiln::cpu::nchwc
