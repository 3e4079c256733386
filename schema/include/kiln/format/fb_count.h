// The length of an optional FlatBuffers vector (an absent vector has none): the one helper
// the loader, the executor and `kiln inspect` read bundle tables with.
#pragma once

#include <cstdint>

namespace kiln {

template <typename V>
std::uint32_t count(const V* vec) {
  return vec == nullptr ? 0 : vec->size();
}

}  // namespace kiln
