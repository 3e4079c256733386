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
#include <utility>
#include <vector>

#include "backends/vulkan/vk_api.h"
#include "kiln/runtime/status.h"

namespace kiln::vulkan {

/// Bindings in the one descriptor-set layout every pipeline uses, and its push-constant size
/// in 32-bit words (KILN_PUSH_WORDS of shaders/shader_abi.h; lowerer.cpp checks they agree).
inline constexpr std::uint32_t kMaxBindings = 6;
inline constexpr std::uint32_t kPushWords = 32;

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

class Context;

/// Owns an Allocation: returned to its Context's free list when the owner goes (so an early
/// return cannot leak it). Move-only; the Context must outlive it.
class OwnedAllocation {
 public:
  OwnedAllocation() = default;
  OwnedAllocation(Context& ctx, const Allocation& a) : ctx_(&ctx), a_(a) {}
  ~OwnedAllocation() { reset(); }
  OwnedAllocation(OwnedAllocation&& other) noexcept : ctx_(other.ctx_), a_(std::exchange(other.a_, Allocation{})) {}
  OwnedAllocation& operator=(OwnedAllocation&& other) noexcept {
    if (this != &other) {
      reset();
      ctx_ = other.ctx_;
      a_ = std::exchange(other.a_, Allocation{});
    }
    return *this;
  }
  OwnedAllocation(const OwnedAllocation&) = delete;
  OwnedAllocation& operator=(const OwnedAllocation&) = delete;

  /// A view of the range (copies of it do not own it).
  const Allocation& get() const { return a_; }
  const Allocation* operator->() const { return &a_; }
  bool valid() const { return a_.valid(); }
  /// Frees the range now (no-op when empty).
  void reset();

 private:
  Context* ctx_ = nullptr;
  Allocation a_;
};

class Context {
 public:
  /// Creates the device on the process's instance for `validation` (made on first use and
  /// kept: see context.cpp's SharedInstances); kUnavailable with the reason when Vulkan is
  /// unusable. With validation, each Context has its own messenger, but a message about
  /// another live validation Context's objects may reach it too.
  static Result<std::unique_ptr<Context>> create(bool validation, std::string pipeline_cache_path);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Api& api() const { return api_; }
  VkInstance instance() const { return instance_; }
  VkDevice device() const { return device_; }
  const VkPhysicalDeviceProperties& properties() const { return props_; }
  const std::string& description() const { return description_; }
  VkDescriptorSetLayout set_layout() const { return set_layout_.get(); }
  VkPipelineLayout pipeline_layout() const { return pipeline_layout_.get(); }
  std::uint32_t queue_family() const { return queue_family_; }

  /// Sub-allocates `size` bytes (aligned for storage-buffer descriptors and copies); the
  /// range returns to the free list when the OwnedAllocation goes.
  Result<OwnedAllocation> allocate(VkDeviceSize size, MemoryKind kind);

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

  friend class OwnedAllocation;
  void free(const Allocation& a);

  struct Block {
    UniqueMemory memory;  // declared first: destroyed after the buffer bound to it
    UniqueBuffer buffer;
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
  // Device children: the destructor destroys them (reset/clear) before the device.
  UniqueDescriptorSetLayout set_layout_;
  UniquePipelineLayout pipeline_layout_;
  UniquePipelineCache pipeline_cache_;
  std::string pipeline_cache_path_;
  std::string description_;
  std::uint64_t timeout_ns_ = 60'000'000'000ull;
  bool lost_ = false;

  std::mutex alloc_mutex_;
  std::vector<Block> blocks_;
  VkDeviceSize alignment_ = 256;

  std::mutex pipeline_mutex_;
  std::unordered_map<std::string, UniquePipeline> pipelines_;

  std::mutex queue_mutex_;
  UniqueCommandPool transient_pool_;

  std::mutex validation_mutex_;
  std::vector<std::string> validation_messages_;
};

template <typename F>
Status Context::one_shot(std::string_view what, F record) {
  std::lock_guard<std::mutex> lock(queue_mutex_);
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = transient_pool_.get();
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  KILN_RETURN_IF_ERROR(check(api_.vkAllocateCommandBuffers(device_, &ai, &cmd), what));
  // Freed on every return; left alone on a lost device (it may still be executing).
  struct CommandBufferOwner {
    Context& ctx;
    VkCommandBuffer cmd;
    ~CommandBufferOwner() {
      if (!ctx.lost_) ctx.api_.vkFreeCommandBuffers(ctx.device_, ctx.transient_pool_.get(), 1, &cmd);
    }
  } cmd_owner{*this, cmd};
  VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VkFence raw_fence = VK_NULL_HANDLE;
  KILN_RETURN_IF_ERROR(check(api_.vkCreateFence(device_, &fi, nullptr, &raw_fence), what));
  UniqueFence fence(api_, device_, raw_fence);
  struct KeepIfLost {  // a hung or lost submission may still use the fence
    Context& ctx;
    UniqueFence& fence;
    ~KeepIfLost() {
      if (ctx.lost_) fence.release();
    }
  } keep_if_lost{*this, fence};
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  KILN_RETURN_IF_ERROR(check(api_.vkBeginCommandBuffer(cmd, &bi), what));
  record(cmd);
  KILN_RETURN_IF_ERROR(check(api_.vkEndCommandBuffer(cmd), what));
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cmd;
  KILN_RETURN_IF_ERROR(check(api_.vkQueueSubmit(queue_, 1, &si, raw_fence), what));
  const VkResult r = api_.vkWaitForFences(device_, 1, &raw_fence, VK_TRUE, timeout_ns_);
  if (r == VK_TIMEOUT) {
    lost_ = true;
    return Status(StatusCode::kUnavailable,
                  std::string("Vulkan: ") + std::string(what) + " did not finish within the timeout (KILN_VULKAN_TIMEOUT_MS)");
  }
  return check(r, what);
}

}  // namespace kiln::vulkan

namespace kiln::vulkan {

inline void OwnedAllocation::reset() {
  if (a_.valid()) ctx_->free(std::exchange(a_, Allocation{}));
}

}  // namespace kiln::vulkan
