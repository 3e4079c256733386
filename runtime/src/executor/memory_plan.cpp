#include "executor/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace kiln {

namespace {
std::uint64_t align_up(std::uint64_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }
}  // namespace

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests) {
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<std::size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return requests[a].bytes > requests[b].bytes; });
  struct Placed {
    std::uint64_t begin, end;
    std::int32_t first, last;
  };
  std::vector<Placed> placed;  // kept sorted by offset
  placed.reserve(requests.size());
  std::vector<const Placed*> live;
  for (std::size_t i : order) {
    const BufferRequest& r = requests[i];
    plan.naive_bytes += r.bytes;
    const std::uint64_t size = align_up(std::max<std::uint64_t>(r.bytes, 1));
    // The lowest gap between tensors alive at the same time that fits `size`.
    std::uint64_t offset = 0;
    for (const Placed& p : placed) {
      if (p.last < r.first || p.first > r.last) continue;  // disjoint lifetimes
      if (p.begin >= offset + size) break;                 // the gap before p fits
      offset = std::max(offset, p.end);
    }
    plan.offsets[i] = offset;
    const Placed mine{offset, offset + size, r.first, r.last};
    placed.insert(std::upper_bound(placed.begin(), placed.end(), mine, [](const Placed& a, const Placed& b) { return a.begin < b.begin; }), mine);
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
  }
  return plan;
}

}  // namespace kiln
