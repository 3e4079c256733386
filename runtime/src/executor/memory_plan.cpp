#include "executor/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace kiln {

namespace {

std::uint64_t align_up(std::uint64_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

// Places the requests in `order`, each at the lowest offset that fits between the already
// placed requests alive at the same time.
MemoryPlan place(const std::vector<BufferRequest>& requests, const std::vector<std::size_t>& order) {
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  struct Placed {
    std::uint64_t begin, end;
    std::int32_t first, last;
  };
  std::vector<Placed> placed;  // kept sorted by offset
  placed.reserve(requests.size());
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

}  // namespace

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests) {
  // Two orders, the smaller arena kept: largest first (TFLite's), and longest-lived first
  // (then largest), which packs the short-lived buffers (a conv's working memory, alive at
  // one node) into the gaps the long-lived ones leave. Each is optimal where the other is
  // not: torchvision CNNs reach the lower bound (the most bytes alive at one step) with one
  // of them, resnet50 and densenet121 only with the second (a tenth less arena), shufflenet
  // only with the first.
  std::vector<std::size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return requests[a].bytes > requests[b].bytes; });
  MemoryPlan by_size = place(requests, order);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const std::int64_t la = static_cast<std::int64_t>(requests[a].last) - requests[a].first,
                       lb = static_cast<std::int64_t>(requests[b].last) - requests[b].first;
    return la != lb ? la > lb : requests[a].bytes > requests[b].bytes;
  });
  MemoryPlan by_lifetime = place(requests, order);
  return by_lifetime.arena_bytes < by_size.arena_bytes ? std::move(by_lifetime) : std::move(by_size);
}

}  // namespace kiln
