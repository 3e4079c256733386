// A grow-only, 64-byte aligned float buffer kept between calls: one per thread and purpose
// (thread_local), for the kernels' per-thread working sets (the SGEMM's packed panels,
// Winograd's transforms, the expansion fold's band of rows).
#pragma once

#include <algorithm>
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

}  // namespace kiln::cpu
