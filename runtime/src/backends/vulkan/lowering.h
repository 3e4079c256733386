// Lowering of segment nodes to compute dispatches (implemented behind lowerer.h in
// lower_*.cpp): which ops and dtypes run on the device, and the shader variant, push
// constants, bindings and grid of each dispatch.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "backends/vulkan/context.h"

namespace kiln::vulkan {

/// Device representation: every element is one 32-bit word (f32 bits, i32, bool as 0/1;
/// i64 narrowed to i32 with a range check at upload and sign extension at download).
bool dtype_on_device(DType d);

bool op_supported(OpKind op, std::span<const DType> in, std::span<const DType> out,
                  std::span<const AttrValue> attrs);

/// A binding: a tensor of the segment, or one of the segment's special buffers (kUndo:
/// undo log `tensor` of LoweredSegment::undo_words).
struct BindingRef {
  enum Kind : std::uint8_t { kTensor, kDummy, kError, kUndo } kind = kDummy;
  std::uint32_t tensor = 0;
};

struct Dispatch {
  std::string_view variant;
  std::array<std::int32_t, kPushWords> push{};
  std::array<BindingRef, kMaxBindings> bindings{};
  std::vector<std::uint32_t> reads;   // tensors read (for barriers)
  std::vector<std::uint32_t> writes;  // tensors written
  std::uint32_t groups[3] = {1, 1, 1};
  bool barrier_before = false;  // wait for every earlier dispatch (it reads the error buffer)
};

/// What an index out of range reported with error word 3 = tag (index + 1 here) was: the
/// host writes the CPU kernel's message from it.
struct IndexCheck {
  std::string_view op;
  std::int64_t dim = 0, size = 0;
  std::string where;  // SegmentNode::where
};

struct LoweredSegment {
  std::vector<Dispatch> dispatches;
  bool uses_error_buffer = false;
  std::vector<IndexCheck> index_checks;
  /// In-place updates of kDevice tensors: the undo logs' sizes in 32-bit words, and the
  /// dispatches that put the saved words back after a failed run (newest update first).
  std::vector<std::int64_t> undo_words;
  std::vector<Dispatch> undo_dispatches;
};

/// Checks every node against its tensors' concrete shapes and produces the dispatches.
/// Errors name the node (SegmentNode::where) and the op.
Status lower_segment(const backend::SegmentDesc& desc, const VkPhysicalDeviceLimits& limits, LoweredSegment& out);

}  // namespace kiln::vulkan
