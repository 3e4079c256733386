#include "backends/vulkan/vk_api.h"

#include <dlfcn.h>

namespace kiln::vulkan {

bool load_loader(Api& api, std::string& error) {
  // Kept open for the life of the process (unloading a Vulkan loader is not worth the risk).
  static void* handle = [] {
    void* h = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) h = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
    return h;
  }();
  if (handle == nullptr) {
    error = "no Vulkan loader (libvulkan.so.1 could not be opened; install libvulkan1 and a driver such as "
            "mesa-vulkan-drivers)";
    return false;
  }
  api.vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(handle, "vkGetInstanceProcAddr"));
  if (api.vkGetInstanceProcAddr == nullptr) {
    error = "the Vulkan loader has no vkGetInstanceProcAddr";
    return false;
  }
#define KILN_VK_LOAD(name)                                                                   \
  api.name = reinterpret_cast<PFN_##name>(api.vkGetInstanceProcAddr(VK_NULL_HANDLE, #name)); \
  if (api.name == nullptr) {                                                                 \
    error = "the Vulkan loader lacks " #name;                                                \
    return false;                                                                            \
  }
  KILN_VK_GLOBAL_FUNCTIONS(KILN_VK_LOAD)
#undef KILN_VK_LOAD
  return true;
}

bool load_instance_functions(Api& api, VkInstance instance, std::string& error) {
#define KILN_VK_LOAD(name)                                                              \
  api.name = reinterpret_cast<PFN_##name>(api.vkGetInstanceProcAddr(instance, #name)); \
  if (api.name == nullptr) {                                                            \
    error = "the Vulkan instance lacks " #name;                                         \
    return false;                                                                       \
  }
  KILN_VK_INSTANCE_FUNCTIONS(KILN_VK_LOAD)
#undef KILN_VK_LOAD
  api.vkCreateDebugUtilsMessengerEXT = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
      api.vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
  api.vkDestroyDebugUtilsMessengerEXT = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
      api.vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
  return true;
}

bool load_device_functions(Api& api, VkDevice device, std::string& error) {
#define KILN_VK_LOAD(name)                                                        \
  api.name = reinterpret_cast<PFN_##name>(api.vkGetDeviceProcAddr(device, #name)); \
  if (api.name == nullptr) {                                                      \
    error = "the Vulkan device lacks " #name;                                     \
    return false;                                                                 \
  }
  KILN_VK_DEVICE_FUNCTIONS(KILN_VK_LOAD)
#undef KILN_VK_LOAD
  return true;
}

const char* vk_result_name(VkResult r) {
  switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default: return "VkResult(other)";
  }
}

}  // namespace kiln::vulkan
