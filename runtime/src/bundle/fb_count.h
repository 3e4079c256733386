// The length of an optional FlatBuffers vector (an absent vector has none).
#pragma once

#include <cstdint>

namespace kiln {

template <typename V>
std::uint32_t count(const V* vec) {
  return vec == nullptr ? 0 : vec->size();
}

}  // namespace kiln
