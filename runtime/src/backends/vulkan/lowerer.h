// The node -> dispatch lowering shared by the lower_*.cpp files (internal to the Vulkan
// backend; the backend itself sees only lowering.h).
//
// A Lowerer checks one node at a time against its tensors' concrete shapes and appends the
// node's dispatches to a LoweredSegment. Each op family has its own file:
//   lower_elementwise.cpp  unary, binary, comparison, logical, where / masked_fill, cast
//   lower_linalg.cpp       matmul / linear / bmm, conv2d, pooling
//   lower_reduce.cpp       reductions, argmax / argmin, cumsum, softmax, layer / batch norm
//   lower_movement.cpp     reshape ... pad (strided copies), tril / triu, full / arange
//   lower_index.cpp        embedding / index_select / gather, index (range-checked reads)
//   lower_support.cpp      which ops and dtypes run on the device, and the op -> lowering map
// Each op's semantics follow the CPU kernel of the same name (backends/cpu/kernels/*.cpp);
// each shader's push-constant layout is documented at its top.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/vulkan/lowering.h"
#include "backends/vulkan/shaders/shader_abi.h"

namespace kiln::vulkan {

using Shape = std::vector<std::int64_t>;
using Attrs = std::span<const AttrValue>;

/// The most dims a shader walks (after coalescing).
inline constexpr int kMaxDims = KILN_MAX_DIMS;

// Shape helpers.
std::int64_t numel(const Shape& s);
/// Row-major strides of a contiguous tensor of shape `s`.
Shape contiguous(const Shape& s);
/// "[2, 3]" for error messages.
std::string shape_text(const Shape& s);
/// Merges adjacent dims that every operand walks contiguously and drops size-1 dims, so that
/// up to kMaxDims dims reach the shader. strides[k] are per-operand strides over `shape`;
/// false when more than kMaxDims dims remain.
bool coalesce(Shape& shape, std::vector<Shape>& strides);
/// Strides that broadcast `in` (right-aligned) to `out`; false when not broadcastable.
bool broadcast_strides(const Shape& in, const Shape& out, Shape& strides);
/// The [outer, d, inner] split of `xs` around `dim` (rank 0: one element, dim 0); false
/// when `dim` is outside the rank.
bool split_at(const Shape& xs, std::int64_t dim, std::int64_t& outer, std::int64_t& d, std::int64_t& inner);

/// The bits of `f` as a push-constant word.
inline std::int32_t fbits(float f) {
  std::int32_t r;
  std::memcpy(&r, &f, 4);
  return r;
}
/// Writes `value` to push-constant slot `slot` (a PC_* name of shaders/shader_abi.h); values
/// are in 32-bit range by the lowering's checks (tensors are below 2^31 elements).
inline void put(Dispatch& d, std::size_t slot, std::int64_t value) { d.push[slot] = static_cast<std::int32_t>(value); }
/// The 32-bit word of a float attribute value converted to `dtype`'s device representation.
std::int32_t scalar_bits(double v, DType dtype);
/// A 1-D grid of `items` over workgroups of `per_group` items (x capped at 65535, the rest on y).
void grid_1d(Dispatch& d, std::int64_t items, std::int64_t per_group);

class Lowerer {
 public:
  Lowerer(const backend::SegmentDesc& desc, const VkPhysicalDeviceLimits& limits, LoweredSegment& out)
      : desc_(desc), limits_(limits), out_(out) {}

  /// Checks `n`'s tensor references and lowers it; errors name the op.
  Status node(const backend::SegmentNode& n);

  // Lowerings, one per op or op family, called through the op table (lower_support.cpp)
  // and defined in the family's lower_*.cpp. Each checks the node against its tensors'
  // shapes and attributes (kInvalidBundle on a mismatch, kUnsupported past a device limit)
  // and appends its dispatches. `code` is the shader's op code (shaders/shader_abi.h) where
  // one shader serves several ops.
  Status unary(int code);
  Status binary(std::string_view variant, int code);
  Status logical_not();
  Status where();
  Status masked_fill();
  Status cast();
  Status matmul();
  Status conv2d();
  Status pool();
  Status reduce(int code);
  Status arg_reduce(bool is_max);
  Status cumsum();
  Status softmax(bool log);
  Status layer_norm();
  Status batch_norm();
  Status reshape();
  Status permute();
  Status slice();
  Status cat();
  Status split();
  Status expand();
  Status flip();
  Status pad();
  Status tri();
  Status full();
  Status arange();
  Status indexing();
  Status advanced_index();
  Status index_put();

 private:
  const backend::SegmentTensor* in(std::size_t i) const {
    if (i >= node_->inputs.size() || node_->inputs[i] == backend::kAbsentTensor) return nullptr;
    return &desc_.tensors[node_->inputs[i]];
  }
  std::uint32_t in_id(std::size_t i) const { return node_->inputs[i]; }
  const backend::SegmentTensor& out(std::size_t i = 0) const { return desc_.tensors[node_->outputs[i]]; }
  std::uint32_t out_id(std::size_t i = 0) const { return node_->outputs[i]; }
  std::string_view op() const { return op_name(node_->op); }

  template <typename... Args>
  Status invalid(const Args&... args) const {
    std::string m = "[" + std::string(op()) + "] ";
    ((m += to_str(args)), ...);
    return Status(StatusCode::kInvalidBundle, m);
  }
  template <typename... Args>
  Status unsupported(const Args&... args) const {
    std::string m = "[" + std::string(op()) + "] Vulkan: ";
    ((m += to_str(args)), ...);
    return Status(StatusCode::kUnsupported, m);
  }
  static std::string to_str(const std::string& s) { return s; }
  static std::string to_str(std::string_view s) { return std::string(s); }
  static std::string to_str(const char* s) { return s; }
  template <typename T>
  static std::string to_str(T v) { return std::to_string(v); }

  Dispatch& add(std::string_view variant, std::initializer_list<std::uint32_t> reads,
                std::initializer_list<std::uint32_t> writes) {
    Dispatch& d = out_.dispatches.emplace_back();
    d.variant = variant;
    d.reads = reads;
    d.writes = writes;
    return d;
  }
  static BindingRef T(std::uint32_t id) { return {BindingRef::kTensor, id}; }

  /// The node has lo..hi inputs (the first lo present) and at least one output.
  Status expect_inputs(std::size_t lo, std::size_t hi) const;
  /// Inputs and outputs have one dtype (the data-movement ops).
  Status expect_same_dtype() const;

  // Dispatch emitters shared by several ops.
  Status copy(std::uint32_t src, std::uint32_t dst, Shape shape, Shape in_strides, Shape out_strides,
              std::int64_t in_off, std::int64_t out_off);
  void fill(std::uint32_t dst, std::int64_t n, std::int32_t bits);
  Status where_dispatch(std::uint32_t cond, std::uint32_t a, std::uint32_t b, const Shape* a_override);

  // Parts of the lowerings above. lower_linalg.cpp: the GEMM shape of linear / bmm /
  // matmul, conv2d's two paths, the pooling window.
  struct Gemm;
  struct Conv;
  Status linear_shape(Gemm& g, Shape& expect) const;
  Status bmm_shape(Gemm& g, Shape& expect) const;
  Status matmul_shape(Gemm& g, Shape& expect) const;
  Status conv2d_gemm(const Conv& c);
  void conv2d_direct(const Conv& c);
  Status pool_window(std::array<std::int64_t, 2>& k, std::array<std::int64_t, 2>& s, std::array<std::int64_t, 2>& p,
                     std::array<std::int64_t, 2>& dil, bool& include_pad, std::int64_t& oh, std::int64_t& ow) const;
  // lower_reduce.cpp: a reduction over zero elements.
  Status reduce_empty(int code, std::int64_t n_out);
  // lower_index.cpp: index.comp's two modes, the broadcast shape of index tensors.
  Status select_push(Dispatch& d, std::int64_t& n) const;
  Status gather_push(Dispatch& d, std::int64_t& n) const;
  Status index_broadcast(int k, Shape& bshape) const;

  const backend::SegmentDesc& desc_;
  const VkPhysicalDeviceLimits& limits_;
  LoweredSegment& out_;
  const backend::SegmentNode* node_ = nullptr;
  Attrs attrs_;
};

}  // namespace kiln::vulkan
