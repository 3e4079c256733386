// Entry point of the Vulkan backend (backends/registry.cpp declares and calls it when the
// build has KILN_HAVE_VULKAN).
#pragma once

#include <memory>

#include "backends/backend.h"

namespace kiln::backend {

Result<std::unique_ptr<Backend>> create_vulkan_backend(const BackendOptions& options);

}  // namespace kiln::backend
