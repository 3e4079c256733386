// Static memory planning: place tensors with known sizes and lifetimes into one arena so
// that tensors whose lifetimes overlap never share bytes. Greedy (each at the lowest offset
// that fits between the already placed tensors alive at the same time) in two orders,
// largest first (the heuristic TFLite and others use) and longest-lived first, keeping the
// smaller arena; O(n²) in the number of tensors.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln {

struct BufferRequest {
  std::uint64_t bytes = 0;
  std::int32_t first = 0;  // first step (node index) the buffer is written
  std::int32_t last = 0;   // last step it is read (inclusive)
};

struct MemoryPlan {
  std::vector<std::uint64_t> offsets;  // per request, multiples of kArenaAlignment
  std::uint64_t arena_bytes = 0;       // the arena size the offsets need
  std::uint64_t naive_bytes = 0;       // the sum of all requests (no reuse), for reports
};

inline constexpr std::uint64_t kArenaAlignment = 64;

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests);

}  // namespace kiln
