// The Vulkan device context shared by every prepared segment of one backend: instance and
// device selection, a block sub-allocator, the universal pipeline layout, the pipeline
// registry/cache, one-shot submissions with fence timeouts, and validation messages.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backends/vulkan/shaders/shader_abi.h"
#include "backends/vulkan/vk_api.h"
#include "kiln/runtime/status.h"

namespace kiln::vulkan {

/// Bindings in the one descriptor-set layout every pipeline uses, and its push-constant size.
inline constexpr std::uint32_t kMaxBindings = 6;
inline constexpr std::uint32_t kPushWords = KILN_PUSH_WORDS;

enum class MemoryKind : std::uint8_t { kDevice, kHost };

/// A range of one block's buffer. Host allocations are persistently mapped (`mapped`).
struct Allocation {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize offset = 0;
  VkDeviceSize size = 0;
  std::uint8_t* mapped = nullptr;
  MemoryKind kind = MemoryKind::kDevice;
  std::uint32_t block = 0;
  bool valid() const { return buffer != VK_NULL_HANDLE; }
};

class Context {
 public:
  /// Creates the instance and device; kUnavailable with the reason when Vulkan is unusable.
  static Result<std::unique_ptr<Context>> create(bool validation, std::string pipeline_cache_path);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Api& api() const { return api_; }
  VkDevice device() const { return device_; }
  const VkPhysicalDeviceProperties& properties() const { return props_; }
  const std::string& description() const { return description_; }
  VkDescriptorSetLayout set_layout() const { return set_layout_; }
  VkPipelineLayout pipeline_layout() const { return pipeline_layout_; }
  std::uint32_t queue_family() const { return queue_family_; }

  /// Sub-allocates `size` bytes (aligned for storage-buffer descriptors and copies).
  Result<Allocation> allocate(VkDeviceSize size, MemoryKind kind);
  void free(const Allocation& a);

  /// The compute pipeline of a shader variant (shaders/variants.cmake), created once.
  Result<VkPipeline> pipeline(std::string_view variant);

  /// Submits `cmd` and waits on `fence` with the backend's timeout; a timeout or device
  /// loss is kUnavailable (and marks the device lost), never a hang.
  Status submit_and_wait(VkCommandBuffer cmd, VkFence fence, std::string_view what);
  /// Records `record` into a transient command buffer and runs it to completion.
  template <typename F>
  Status one_shot(std::string_view what, F record);

  /// kInternal naming the first validation message since the last call (validation only).
  Status take_validation_errors();
  Status check(VkResult r, std::string_view what);
  bool lost() const { return lost_; }

 private:
  Context() = default;
  Status init(bool validation);
  Status select_device();
  Status create_device();
  Status create_layouts();
  void load_pipeline_cache();
  void save_pipeline_cache();
  static VKAPI_ATTR VkBool32 VKAPI_CALL debug_callback(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                       VkDebugUtilsMessageTypeFlagsEXT type,
                                                       const VkDebugUtilsMessengerCallbackDataEXT* data, void* user);

  struct Block {
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceSize size = 0;
    std::uint8_t* mapped = nullptr;
    MemoryKind kind = MemoryKind::kDevice;
    std::map<VkDeviceSize, VkDeviceSize> free;  // offset -> size, coalesced
  };
  Status add_block(MemoryKind kind, VkDeviceSize size);
  std::uint32_t memory_type(MemoryKind kind, std::uint32_t type_bits) const;

  Api api_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkPhysicalDeviceProperties props_{};
  VkPhysicalDeviceMemoryProperties mem_props_{};
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  std::uint32_t queue_family_ = 0;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout pipeline_layout_ = VK_NULL_HANDLE;
  VkPipelineCache pipeline_cache_ = VK_NULL_HANDLE;
  std::string pipeline_cache_path_;
  std::string description_;
  std::uint64_t timeout_ns_ = 60'000'000'000ull;
  bool lost_ = false;

  std::mutex alloc_mutex_;
  std::vector<Block> blocks_;
  VkDeviceSize alignment_ = 256;

  std::mutex pipeline_mutex_;
  std::unordered_map<std::string, VkPipeline> pipelines_;

  std::mutex queue_mutex_;
  VkCommandPool transient_pool_ = VK_NULL_HANDLE;

  std::mutex validation_mutex_;
  std::vector<std::string> validation_messages_;
};

template <typename F>
Status Context::one_shot(std::string_view what, F record) {
  std::lock_guard<std::mutex> lock(queue_mutex_);
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = transient_pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  KILN_RETURN_IF_ERROR(check(api_.vkAllocateCommandBuffers(device_, &ai, &cmd), what));
  VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VkFence fence = VK_NULL_HANDLE;
  Status st = check(api_.vkCreateFence(device_, &fi, nullptr, &fence), what);
  if (st.ok()) {
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    st = check(api_.vkBeginCommandBuffer(cmd, &bi), what);
    if (st.ok()) {
      record(cmd);
      st = check(api_.vkEndCommandBuffer(cmd), what);
    }
    if (st.ok()) {
      VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
      si.commandBufferCount = 1;
      si.pCommandBuffers = &cmd;
      st = check(api_.vkQueueSubmit(queue_, 1, &si, fence), what);
      if (st.ok()) {
        VkResult r = api_.vkWaitForFences(device_, 1, &fence, VK_TRUE, timeout_ns_);
        if (r == VK_TIMEOUT) {
          lost_ = true;
          st = Status(StatusCode::kUnavailable, std::string("Vulkan: ") + std::string(what) +
                                                         " did not finish within the timeout (KILN_VULKAN_TIMEOUT_MS)");
        } else {
          st = check(r, what);
        }
      }
    }
    if (!lost_) api_.vkDestroyFence(device_, fence, nullptr);
  }
  if (!lost_) api_.vkFreeCommandBuffers(device_, transient_pool_, 1, &cmd);
  return st;
}

}  // namespace kiln::vulkan
