// The SPIR-V of every shader variant, embedded at build time (see vulkan.cmake and
// shaders/variants.cmake).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace kiln::vulkan {

/// The SPIR-V words of the named variant ("matmul_f32_t64"), or an empty span.
std::span<const std::uint32_t> find_shader(std::string_view name);
std::size_t shader_count();

}  // namespace kiln::vulkan
