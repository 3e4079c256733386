// create_backend: the one place that knows which accelerator backends this build has.
// The executor only sees backend::Backend.
#include "backends/backend.h"

namespace kiln::backend {

#if defined(KILN_HAVE_VULKAN)
// Defined in backends/vulkan/.
Result<std::unique_ptr<Backend>> create_vulkan_backend(const BackendOptions& options);
#endif

Result<std::unique_ptr<Backend>> create_backend(std::string_view name, const BackendOptions& options) {
  if (name == "vulkan") {
#if defined(KILN_HAVE_VULKAN)
    return create_vulkan_backend(options);
#else
    (void)options;
    return Status(StatusCode::kUnavailable, "this build has no Vulkan backend (configured with KILN_VULKAN=OFF or without Vulkan headers and glslc)");
#endif
  }
  return Status(StatusCode::kUsage, "unknown backend '" + std::string(name) + "'");
}

}  // namespace kiln::backend
