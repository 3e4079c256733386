// A grow-only, 64-byte aligned float buffer kept between calls: one per thread and purpose
// (thread_local), for the kernels' per-thread working sets (the SGEMM's packed panels,
// Winograd's transforms, the expansion fold's band of rows); and WorkspaceSlots, the same
// working sets carved out of memory a caller lends for one call (KernelContext::workspace).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace kiln::cpu {

class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer() { std::free(data_); }

  /// At least `floats` floats (16 at least), 64-byte aligned; null when the allocation
  /// fails. Growing drops the old contents.
  float* get(std::int64_t floats) {
    const auto needed = static_cast<std::size_t>(std::max<std::int64_t>(floats, 16));
    if (needed > capacity_) {
      std::free(data_);
      const std::size_t bytes = (needed * sizeof(float) + 63) / 64 * 64;
      data_ = static_cast<float*>(std::aligned_alloc(64, bytes));
      capacity_ = data_ != nullptr ? bytes / sizeof(float) : 0;
    }
    return data_;
  }

 private:
  float* data_ = nullptr;
  std::size_t capacity_ = 0;
};

/// `count` (at most 32) buffers of `stride` floats each, from `base` (64-byte aligned), for
/// the bodies of one parallel_for: a body takes one for its chunk (acquire) and gives it
/// back (release). A pool runs at most num_threads() bodies at once, so with that many
/// slots acquire always finds one; a thread tries the slot of its pool index first
/// (ThreadPool::thread_index), the one it had in the layer before, still in its core's
/// cache.
class WorkspaceSlots {
 public:
  WorkspaceSlots() = default;
  WorkspaceSlots(float* base, std::int64_t stride, int count)
      : base_(base), stride_(stride), count_(base != nullptr ? std::clamp(count, 0, 32) : 0) {}
  WorkspaceSlots(const WorkspaceSlots&) = delete;
  WorkspaceSlots& operator=(const WorkspaceSlots&) = delete;

  bool empty() const { return count_ == 0; }
  /// A free slot, or null when there are none (no slots, or all taken): the one of the
  /// thread's pool index (`first`) when free.
  float* acquire(int first) {
    for (int k = 0; k < count_; ++k) {
      const int i = (first + k) % count_;
      const std::uint32_t bit = 1u << i;
      if ((busy_.fetch_or(bit, std::memory_order_acquire) & bit) == 0) return base_ + static_cast<std::int64_t>(i) * stride_;
    }
    return nullptr;
  }
  /// Gives back a slot acquire returned (null: nothing).
  void release(float* slot) {
    if (slot == nullptr) return;
    const auto i = static_cast<int>((slot - base_) / stride_);
    busy_.fetch_and(~(1u << i), std::memory_order_release);
  }

 private:
  float* base_ = nullptr;
  std::int64_t stride_ = 0;
  int count_ = 0;
  std::atomic<std::uint32_t> busy_{0};
};

}  // namespace kiln::cpu
