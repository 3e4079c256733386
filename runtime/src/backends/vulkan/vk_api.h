// Vulkan entry points loaded at run time: libvulkan.so.1 is opened with dlopen and every
// function is resolved through vkGetInstanceProcAddr / vkGetDeviceProcAddr, so the runtime
// has no load-time dependency on a Vulkan loader (a machine without one runs the CPU path).
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>
#include <utility>

namespace kiln::vulkan {

#define KILN_VK_GLOBAL_FUNCTIONS(X)        \
  X(vkCreateInstance)                      \
  X(vkEnumerateInstanceLayerProperties)    \
  X(vkEnumerateInstanceExtensionProperties)

#define KILN_VK_INSTANCE_FUNCTIONS(X)           \
  X(vkDestroyInstance)                          \
  X(vkEnumeratePhysicalDevices)                 \
  X(vkGetPhysicalDeviceProperties)              \
  X(vkGetPhysicalDeviceFeatures)                \
  X(vkGetPhysicalDeviceQueueFamilyProperties)   \
  X(vkGetPhysicalDeviceMemoryProperties)        \
  X(vkCreateDevice)                             \
  X(vkGetDeviceProcAddr)                        \
  X(vkEnumerateDeviceExtensionProperties)

#define KILN_VK_DEVICE_FUNCTIONS(X)     \
  X(vkDestroyDevice)                    \
  X(vkGetDeviceQueue)                   \
  X(vkDeviceWaitIdle)                   \
  X(vkQueueSubmit)                      \
  X(vkAllocateMemory)                   \
  X(vkFreeMemory)                       \
  X(vkMapMemory)                        \
  X(vkUnmapMemory)                      \
  X(vkCreateBuffer)                     \
  X(vkDestroyBuffer)                    \
  X(vkGetBufferMemoryRequirements)      \
  X(vkBindBufferMemory)                 \
  X(vkCreateShaderModule)               \
  X(vkDestroyShaderModule)              \
  X(vkCreatePipelineCache)              \
  X(vkDestroyPipelineCache)             \
  X(vkGetPipelineCacheData)             \
  X(vkCreateComputePipelines)           \
  X(vkDestroyPipeline)                  \
  X(vkCreatePipelineLayout)             \
  X(vkDestroyPipelineLayout)            \
  X(vkCreateDescriptorSetLayout)        \
  X(vkDestroyDescriptorSetLayout)       \
  X(vkCreateDescriptorPool)             \
  X(vkDestroyDescriptorPool)            \
  X(vkAllocateDescriptorSets)           \
  X(vkUpdateDescriptorSets)             \
  X(vkCreateCommandPool)                \
  X(vkDestroyCommandPool)               \
  X(vkAllocateCommandBuffers)           \
  X(vkFreeCommandBuffers)               \
  X(vkBeginCommandBuffer)               \
  X(vkEndCommandBuffer)                 \
  X(vkCmdBindPipeline)                  \
  X(vkCmdBindDescriptorSets)            \
  X(vkCmdPushConstants)                 \
  X(vkCmdDispatch)                      \
  X(vkCmdPipelineBarrier)               \
  X(vkCmdCopyBuffer)                    \
  X(vkCmdFillBuffer)                    \
  X(vkCreateFence)                      \
  X(vkDestroyFence)                     \
  X(vkResetFences)                      \
  X(vkWaitForFences)

struct Api {
#define KILN_VK_DECLARE(name) PFN_##name name = nullptr;
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  KILN_VK_GLOBAL_FUNCTIONS(KILN_VK_DECLARE)
  KILN_VK_INSTANCE_FUNCTIONS(KILN_VK_DECLARE)
  KILN_VK_DEVICE_FUNCTIONS(KILN_VK_DECLARE)
  PFN_vkCreateDebugUtilsMessengerEXT vkCreateDebugUtilsMessengerEXT = nullptr;
  PFN_vkDestroyDebugUtilsMessengerEXT vkDestroyDebugUtilsMessengerEXT = nullptr;
#undef KILN_VK_DECLARE
};

/// Owns one handle created from a VkDevice (a fence, pool, buffer, memory, pipeline...): it
/// is destroyed with `Destroy`, the Api member that destroys or frees it
/// (`&Api::vkDestroyFence`), when the owner goes, so no early return leaks it. Move-only.
/// The Api and the device must outlive the owner (they belong to the Context).
template <typename Handle, auto Api::*Destroy>
class UniqueHandle {
 public:
  UniqueHandle() = default;
  UniqueHandle(const Api& api, VkDevice device, Handle handle) : api_(&api), device_(device), handle_(handle) {}
  ~UniqueHandle() { reset(); }
  UniqueHandle(UniqueHandle&& other) noexcept
      : api_(other.api_), device_(other.device_), handle_(std::exchange(other.handle_, Handle{})) {}
  UniqueHandle& operator=(UniqueHandle&& other) noexcept {
    if (this != &other) {
      reset();
      api_ = other.api_;
      device_ = other.device_;
      handle_ = std::exchange(other.handle_, Handle{});
    }
    return *this;
  }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;

  Handle get() const { return handle_; }
  explicit operator bool() const { return handle_ != Handle{}; }
  /// Destroys the handle now (no-op when empty).
  void reset() {
    if (handle_ != Handle{}) (api_->*Destroy)(device_, std::exchange(handle_, Handle{}), nullptr);
  }
  /// Gives the handle up without destroying it (a lost device may still be using it).
  Handle release() { return std::exchange(handle_, Handle{}); }

 private:
  const Api* api_ = nullptr;
  VkDevice device_ = VK_NULL_HANDLE;
  Handle handle_{};
};

using UniqueFence = UniqueHandle<VkFence, &Api::vkDestroyFence>;
using UniqueCommandPool = UniqueHandle<VkCommandPool, &Api::vkDestroyCommandPool>;
using UniqueDescriptorPool = UniqueHandle<VkDescriptorPool, &Api::vkDestroyDescriptorPool>;
using UniqueDescriptorSetLayout = UniqueHandle<VkDescriptorSetLayout, &Api::vkDestroyDescriptorSetLayout>;
using UniquePipelineLayout = UniqueHandle<VkPipelineLayout, &Api::vkDestroyPipelineLayout>;
using UniquePipelineCache = UniqueHandle<VkPipelineCache, &Api::vkDestroyPipelineCache>;
using UniquePipeline = UniqueHandle<VkPipeline, &Api::vkDestroyPipeline>;
using UniqueShaderModule = UniqueHandle<VkShaderModule, &Api::vkDestroyShaderModule>;
using UniqueBuffer = UniqueHandle<VkBuffer, &Api::vkDestroyBuffer>;
using UniqueMemory = UniqueHandle<VkDeviceMemory, &Api::vkFreeMemory>;

/// Opens the loader (once per process) and fills the global entry points; false with a
/// reason when there is no usable loader.
bool load_loader(Api& api, std::string& error);
bool load_instance_functions(Api& api, VkInstance instance, std::string& error);
bool load_device_functions(Api& api, VkDevice device, std::string& error);

/// "VK_ERROR_DEVICE_LOST" etc.
const char* vk_result_name(VkResult r);

}  // namespace kiln::vulkan
