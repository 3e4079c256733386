#include "backends/vulkan/context.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backends/vulkan/shader_registry.h"

namespace kiln::vulkan {
namespace {

constexpr VkDeviceSize kBlockSize = VkDeviceSize{64} << 20;
constexpr VkDeviceSize kHostBlockSize = VkDeviceSize{16} << 20;

// One VkInstance per process and validation setting, made on first use and never destroyed;
// every Context makes and destroys only its own device on it. NVIDIA's driver does not
// survive many vkCreateInstance/vkDestroyInstance cycles in one process: on an H200
// (driver 580.159) the op sweep's 37th Program got VK_ERROR_INCOMPATIBLE_DRIVER, and every
// later one too. A server that loads and drops Programs would hit the same.
struct SharedInstances {
  std::mutex mu;
  VkInstance instance[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};  // [validation]
};

SharedInstances& shared_instances() {
  static SharedInstances* const s = new SharedInstances();  // never destroyed (see above)
  return *s;
}

Status unavailable(std::string message) { return Status(StatusCode::kUnavailable, "Vulkan: " + std::move(message)); }

const char* type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

int type_rank(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
  }
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// The compute queue family of `dev`, or -1.
int compute_family(const Api& api, VkPhysicalDevice dev) {
  std::uint32_t n = 0;
  api.vkGetPhysicalDeviceQueueFamilyProperties(dev, &n, nullptr);
  std::vector<VkQueueFamilyProperties> fams(n);
  api.vkGetPhysicalDeviceQueueFamilyProperties(dev, &n, fams.data());
  for (std::uint32_t i = 0; i < n; ++i) {
    if ((fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) != 0) return static_cast<int>(i);
  }
  return -1;
}

// Why `props` cannot run Kiln's shaders, or empty.
std::string missing_limits(const VkPhysicalDeviceProperties& p) {
  const VkPhysicalDeviceLimits& l = p.limits;
  if (l.maxPushConstantsSize < kPushWords * 4) return "maxPushConstantsSize < 128";
  if (l.maxComputeWorkGroupInvocations < 256) return "maxComputeWorkGroupInvocations < 256";
  if (l.maxComputeWorkGroupSize[0] < 256 || l.maxComputeWorkGroupSize[1] < 16) return "maxComputeWorkGroupSize < (256, 16)";
  if (l.maxComputeSharedMemorySize < 16384) return "maxComputeSharedMemorySize < 16 KiB";
  if (l.maxPerStageDescriptorStorageBuffers < kMaxBindings) return "maxPerStageDescriptorStorageBuffers < 6";
  if (l.maxComputeWorkGroupCount[0] < 65535 || l.maxComputeWorkGroupCount[1] < 65535) {
    return "maxComputeWorkGroupCount < 65535";
  }
  return {};
}

}  // namespace

Status Context::check(VkResult r, std::string_view what) {
  if (r == VK_SUCCESS) return Status::Ok();
  if (r == VK_ERROR_DEVICE_LOST) lost_ = true;
  const StatusCode code = (r == VK_ERROR_DEVICE_LOST || r == VK_ERROR_OUT_OF_DEVICE_MEMORY ||
                           r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_INITIALIZATION_FAILED)
                              ? StatusCode::kUnavailable
                              : StatusCode::kInternal;
  return Status(code, "Vulkan: " + std::string(what) + " failed: " + vk_result_name(r));
}

VKAPI_ATTR VkBool32 VKAPI_CALL Context::debug_callback(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                       VkDebugUtilsMessageTypeFlagsEXT type,
                                                       const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  auto* self = static_cast<Context*>(user);
  const bool validation = (type & VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT) != 0;
  const bool error = (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) != 0;
  if (error || validation) {
    std::lock_guard<std::mutex> lock(self->validation_mutex_);
    self->validation_messages_.emplace_back(data != nullptr && data->pMessage != nullptr ? data->pMessage : "?");
  }
  return VK_FALSE;
}

Status Context::take_validation_errors() {
  std::lock_guard<std::mutex> lock(validation_mutex_);
  if (validation_messages_.empty()) return Status::Ok();
  std::string msg = "Vulkan validation: " + validation_messages_.front();
  if (validation_messages_.size() > 1) msg += " (and " + std::to_string(validation_messages_.size() - 1) + " more)";
  validation_messages_.clear();
  return Status(StatusCode::kInternal, std::move(msg));
}

Result<std::unique_ptr<Context>> Context::create(bool validation, std::string pipeline_cache_path) {
  std::unique_ptr<Context> ctx(new Context());
  ctx->pipeline_cache_path_ = std::move(pipeline_cache_path);
  if (const char* t = std::getenv("KILN_VULKAN_TIMEOUT_MS"); t != nullptr && std::atoll(t) > 0) {
    ctx->timeout_ns_ = static_cast<std::uint64_t>(std::atoll(t)) * 1'000'000ull;
  }
  KILN_RETURN_IF_ERROR(ctx->init(validation));
  return ctx;
}

Status Context::init(bool validation) {
  std::string error;
  if (!load_loader(api_, error)) return unavailable(error);

  std::vector<const char*> layers;
  std::vector<const char*> extensions;
  bool sync_validation = false;
  if (validation) {
    std::uint32_t n = 0;
    api_.vkEnumerateInstanceLayerProperties(&n, nullptr);
    std::vector<VkLayerProperties> props(n);
    api_.vkEnumerateInstanceLayerProperties(&n, props.data());
    const bool have = std::any_of(props.begin(), props.end(), [](const VkLayerProperties& p) {
      return std::strcmp(p.layerName, "VK_LAYER_KHRONOS_validation") == 0;
    });
    if (!have) return unavailable("validation requested but VK_LAYER_KHRONOS_validation is not installed");
    layers.push_back("VK_LAYER_KHRONOS_validation");
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    // Synchronization validation too (missing or wrong barriers), when the layer offers it.
    std::uint32_t ne = 0;
    api_.vkEnumerateInstanceExtensionProperties("VK_LAYER_KHRONOS_validation", &ne, nullptr);
    std::vector<VkExtensionProperties> exts(ne);
    api_.vkEnumerateInstanceExtensionProperties("VK_LAYER_KHRONOS_validation", &ne, exts.data());
    for (const VkExtensionProperties& e : exts) {
      if (std::strcmp(e.extensionName, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME) == 0) {
        extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
        sync_validation = true;
      }
    }
  }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "kiln";
  app.pEngineName = "kiln";
  app.apiVersion = VK_API_VERSION_1_0;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  ci.enabledLayerCount = static_cast<std::uint32_t>(layers.size());
  ci.ppEnabledLayerNames = layers.data();
  ci.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
  ci.ppEnabledExtensionNames = extensions.data();
  const VkValidationFeatureEnableEXT enables[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  VkValidationFeaturesEXT features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
  features.enabledValidationFeatureCount = 1;
  features.pEnabledValidationFeatures = enables;
  if (sync_validation) ci.pNext = &features;
  {
    SharedInstances& shared = shared_instances();
    std::lock_guard<std::mutex> lock(shared.mu);
    VkInstance& slot = shared.instance[validation ? 1 : 0];
    if (slot == VK_NULL_HANDLE) {  // a failed attempt leaves the slot empty: the next Context retries
      VkResult r = api_.vkCreateInstance(&ci, nullptr, &slot);
      if (r != VK_SUCCESS) slot = VK_NULL_HANDLE;
      if (r == VK_ERROR_INCOMPATIBLE_DRIVER) return unavailable("no Vulkan driver (VK_ERROR_INCOMPATIBLE_DRIVER)");
      if (r != VK_SUCCESS) return unavailable(std::string("vkCreateInstance failed: ") + vk_result_name(r));
    }
    instance_ = slot;
  }
  if (!load_instance_functions(api_, instance_, error)) return unavailable(error);
  if (validation && api_.vkCreateDebugUtilsMessengerEXT != nullptr) {
    VkDebugUtilsMessengerCreateInfoEXT mi{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    mi.pfnUserCallback = &Context::debug_callback;
    mi.pUserData = this;
    KILN_RETURN_IF_ERROR(check(api_.vkCreateDebugUtilsMessengerEXT(instance_, &mi, nullptr, &messenger_),
                               "vkCreateDebugUtilsMessengerEXT"));
  }
  KILN_RETURN_IF_ERROR(select_device());
  KILN_RETURN_IF_ERROR(create_device());
  KILN_RETURN_IF_ERROR(create_layouts());
  load_pipeline_cache();
  return take_validation_errors();
}

Status Context::select_device() {
  std::uint32_t n = 0;
  VkResult r = api_.vkEnumeratePhysicalDevices(instance_, &n, nullptr);
  if (r != VK_SUCCESS || n == 0) return unavailable("no Vulkan device");
  std::vector<VkPhysicalDevice> devs(n);
  api_.vkEnumeratePhysicalDevices(instance_, &n, devs.data());

  struct Candidate {
    VkPhysicalDevice dev;
    VkPhysicalDeviceProperties props;
    std::uint32_t index;
    std::string unusable;  // why not
  };
  std::vector<Candidate> cands;
  for (std::uint32_t i = 0; i < n; ++i) {
    Candidate c{devs[i], {}, i, {}};
    api_.vkGetPhysicalDeviceProperties(devs[i], &c.props);
    if (compute_family(api_, devs[i]) < 0) c.unusable = "no compute queue";
    else c.unusable = missing_limits(c.props);
    cands.push_back(std::move(c));
  }

  const Candidate* chosen = nullptr;
  if (const char* env = std::getenv("KILN_VULKAN_DEVICE"); env != nullptr && *env != '\0') {
    const std::string want(env);
    const bool numeric = std::all_of(want.begin(), want.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); });
    for (const Candidate& c : cands) {
      if (numeric ? c.index == static_cast<std::uint32_t>(std::atoi(env))
                  : lower(c.props.deviceName).find(lower(want)) != std::string::npos) {
        chosen = &c;
        break;
      }
    }
    if (chosen == nullptr) return unavailable("KILN_VULKAN_DEVICE=" + want + " matches no device");
    if (!chosen->unusable.empty()) {
      return unavailable(std::string("device '") + chosen->props.deviceName + "' is unusable: " + chosen->unusable);
    }
  } else {
    for (const Candidate& c : cands) {
      if (!c.unusable.empty()) continue;
      if (chosen == nullptr || type_rank(c.props.deviceType) < type_rank(chosen->props.deviceType)) chosen = &c;
    }
    if (chosen == nullptr) {
      std::string why = "no usable Vulkan device:";
      for (const Candidate& c : cands) why += std::string(" ") + c.props.deviceName + " (" + c.unusable + ")";
      return unavailable(why);
    }
  }
  physical_ = chosen->dev;
  props_ = chosen->props;
  queue_family_ = static_cast<std::uint32_t>(compute_family(api_, physical_));
  api_.vkGetPhysicalDeviceMemoryProperties(physical_, &mem_props_);
  alignment_ = std::max<VkDeviceSize>({VkDeviceSize{16}, props_.limits.minStorageBufferOffsetAlignment,
                                       props_.limits.nonCoherentAtomSize});
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s (%s, Vulkan %u.%u.%u, driver 0x%x, vendor 0x%04x)", props_.deviceName,
                type_name(props_.deviceType), VK_VERSION_MAJOR(props_.apiVersion), VK_VERSION_MINOR(props_.apiVersion),
                VK_VERSION_PATCH(props_.apiVersion), props_.driverVersion, props_.vendorID);
  description_ = buf;
  return Status::Ok();
}

Status Context::create_device() {
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qi.queueFamilyIndex = queue_family_;
  qi.queueCount = 1;
  qi.pQueuePriorities = &priority;
  VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  di.queueCreateInfoCount = 1;
  di.pQueueCreateInfos = &qi;
  // f32 kernels need no optional feature (no fp16, 16-bit storage or subgroup ops).
  VkResult r = api_.vkCreateDevice(physical_, &di, nullptr, &device_);
  if (r != VK_SUCCESS) return unavailable(std::string("vkCreateDevice failed: ") + vk_result_name(r));
  std::string error;
  if (!load_device_functions(api_, device_, error)) return unavailable(error);
  api_.vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
  VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pi.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT | VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pi.queueFamilyIndex = queue_family_;
  VkCommandPool pool = VK_NULL_HANDLE;
  KILN_RETURN_IF_ERROR(check(api_.vkCreateCommandPool(device_, &pi, nullptr, &pool), "vkCreateCommandPool"));
  transient_pool_ = UniqueCommandPool(api_, device_, pool);
  return Status::Ok();
}

Status Context::create_layouts() {
  VkDescriptorSetLayoutBinding b[kMaxBindings];
  for (std::uint32_t i = 0; i < kMaxBindings; ++i) {
    b[i] = {};
    b[i].binding = i;
    b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    b[i].descriptorCount = 1;
    b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo li{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  li.bindingCount = kMaxBindings;
  li.pBindings = b;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  KILN_RETURN_IF_ERROR(check(api_.vkCreateDescriptorSetLayout(device_, &li, nullptr, &set_layout), "vkCreateDescriptorSetLayout"));
  set_layout_ = UniqueDescriptorSetLayout(api_, device_, set_layout);
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushWords * 4};
  VkPipelineLayoutCreateInfo pi{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pi.setLayoutCount = 1;
  pi.pSetLayouts = &set_layout;
  pi.pushConstantRangeCount = 1;
  pi.pPushConstantRanges = &range;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  KILN_RETURN_IF_ERROR(check(api_.vkCreatePipelineLayout(device_, &pi, nullptr, &layout), "vkCreatePipelineLayout"));
  pipeline_layout_ = UniquePipelineLayout(api_, device_, layout);
  return Status::Ok();
}

void Context::load_pipeline_cache() {
  std::vector<char> data;
  if (!pipeline_cache_path_.empty()) {
    if (FILE* f = std::fopen(pipeline_cache_path_.c_str(), "rb")) {
      char buf[65536];
      std::size_t got;
      while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) data.insert(data.end(), buf, buf + got);
      std::fclose(f);
    }
    // A cache from another device or driver is ignored (the header names both).
    if (data.size() < 16 + VK_UUID_SIZE ||
        std::memcmp(data.data() + 16, props_.pipelineCacheUUID, VK_UUID_SIZE) != 0) {
      data.clear();
    }
  }
  VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  ci.initialDataSize = data.size();
  ci.pInitialData = data.empty() ? nullptr : data.data();
  VkPipelineCache cache = VK_NULL_HANDLE;
  if (api_.vkCreatePipelineCache(device_, &ci, nullptr, &cache) != VK_SUCCESS) {
    ci.initialDataSize = 0;
    ci.pInitialData = nullptr;
    if (api_.vkCreatePipelineCache(device_, &ci, nullptr, &cache) != VK_SUCCESS) cache = VK_NULL_HANDLE;
  }
  pipeline_cache_ = UniquePipelineCache(api_, device_, cache);
}

void Context::save_pipeline_cache() {
  if (pipeline_cache_path_.empty() || !pipeline_cache_) return;
  std::size_t size = 0;
  if (api_.vkGetPipelineCacheData(device_, pipeline_cache_.get(), &size, nullptr) != VK_SUCCESS || size == 0) return;
  std::vector<char> data(size);
  if (api_.vkGetPipelineCacheData(device_, pipeline_cache_.get(), &size, data.data()) != VK_SUCCESS) return;
  const std::string tmp = pipeline_cache_path_ + ".tmp";
  if (FILE* f = std::fopen(tmp.c_str(), "wb")) {
    const bool ok = std::fwrite(data.data(), 1, size, f) == size;
    if (std::fclose(f) == 0 && ok) std::rename(tmp.c_str(), pipeline_cache_path_.c_str());
    else std::remove(tmp.c_str());
  }
}

Context::~Context() {
  if (device_ != VK_NULL_HANDLE) {
    api_.vkDeviceWaitIdle(device_);  // returns VK_ERROR_DEVICE_LOST at once on a lost device
    save_pipeline_cache();
    // The device's children first (freeing mapped memory unmaps it).
    pipelines_.clear();
    pipeline_cache_.reset();
    pipeline_layout_.reset();
    set_layout_.reset();
    transient_pool_.reset();
    blocks_.clear();
    api_.vkDestroyDevice(device_, nullptr);
  }
  if (messenger_ != VK_NULL_HANDLE) api_.vkDestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
  // instance_ is the process's shared one (shared_instances): it stays.
}

std::uint32_t Context::memory_type(MemoryKind kind, std::uint32_t type_bits) const {
  // Device: prefer DEVICE_LOCAL. Host: HOST_VISIBLE | HOST_COHERENT, preferring HOST_CACHED
  // (fast read-back).
  int best = -1, best_score = -1;
  for (std::uint32_t i = 0; i < mem_props_.memoryTypeCount; ++i) {
    if ((type_bits & (1u << i)) == 0) continue;
    const VkMemoryPropertyFlags f = mem_props_.memoryTypes[i].propertyFlags;
    int score;
    if (kind == MemoryKind::kDevice) {
      score = (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) != 0 ? 2 : 1;
    } else {
      const VkMemoryPropertyFlags need = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
      if ((f & need) != need) continue;
      score = (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) != 0 ? 2 : 1;
    }
    if (score > best_score) {
      best = static_cast<int>(i);
      best_score = score;
    }
  }
  return best < 0 ? UINT32_MAX : static_cast<std::uint32_t>(best);
}

Status Context::add_block(MemoryKind kind, VkDeviceSize size) {
  Block b;
  b.kind = kind;
  b.size = size;
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = size;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer buffer = VK_NULL_HANDLE;
  KILN_RETURN_IF_ERROR(check(api_.vkCreateBuffer(device_, &bi, nullptr, &buffer), "vkCreateBuffer"));
  b.buffer = UniqueBuffer(api_, device_, buffer);
  VkMemoryRequirements req;
  api_.vkGetBufferMemoryRequirements(device_, buffer, &req);
  const std::uint32_t type = memory_type(kind, req.memoryTypeBits);
  if (type == UINT32_MAX) return unavailable("no suitable memory type");
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = type;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  KILN_RETURN_IF_ERROR(check(api_.vkAllocateMemory(device_, &ai, nullptr, &memory), "vkAllocateMemory"));
  b.memory = UniqueMemory(api_, device_, memory);
  KILN_RETURN_IF_ERROR(check(api_.vkBindBufferMemory(device_, buffer, memory, 0), "vkBindBufferMemory"));
  if (kind == MemoryKind::kHost) {
    void* p = nullptr;
    KILN_RETURN_IF_ERROR(check(api_.vkMapMemory(device_, memory, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory"));
    b.mapped = static_cast<std::uint8_t*>(p);
  }
  b.free[0] = size;
  blocks_.push_back(std::move(b));
  return Status::Ok();
}

Result<OwnedAllocation> Context::allocate(VkDeviceSize size, MemoryKind kind) {
  size = std::max<VkDeviceSize>(size, 4);
  size = (size + alignment_ - 1) / alignment_ * alignment_;
  std::lock_guard<std::mutex> lock(alloc_mutex_);
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (std::uint32_t bi = 0; bi < blocks_.size(); ++bi) {
      Block& b = blocks_[bi];
      if (b.kind != kind) continue;
      for (auto it = b.free.begin(); it != b.free.end(); ++it) {
        if (it->second < size) continue;  // offsets stay aligned: every size is a multiple
        const VkDeviceSize off = it->first, avail = it->second;
        b.free.erase(it);
        if (avail > size) b.free[off + size] = avail - size;
        Allocation a;
        a.buffer = b.buffer.get();
        a.offset = off;
        a.size = size;
        a.kind = kind;
        a.block = bi;
        a.mapped = b.mapped != nullptr ? b.mapped + off : nullptr;
        return OwnedAllocation(*this, a);
      }
    }
    if (attempt == 0) {
      const VkDeviceSize base = kind == MemoryKind::kDevice ? kBlockSize : kHostBlockSize;
      KILN_RETURN_IF_ERROR(add_block(kind, std::max(base, size)));
    }
  }
  return Status(StatusCode::kInternal, "Vulkan: allocator failed");
}

void Context::free(const Allocation& a) {
  if (!a.valid()) return;
  std::lock_guard<std::mutex> lock(alloc_mutex_);
  auto& fl = blocks_[a.block].free;
  auto [it, inserted] = fl.emplace(a.offset, a.size);
  if (!inserted) return;
  auto next = std::next(it);
  if (next != fl.end() && it->first + it->second == next->first) {
    it->second += next->second;
    fl.erase(next);
  }
  if (it != fl.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      fl.erase(it);
    }
  }
}

Result<VkPipeline> Context::pipeline(std::string_view variant) {
  std::lock_guard<std::mutex> lock(pipeline_mutex_);
  if (auto it = pipelines_.find(std::string(variant)); it != pipelines_.end()) return it->second.get();
  const std::span<const std::uint32_t> code = find_shader(variant);
  if (code.empty()) return Status(StatusCode::kInternal, "Vulkan: no shader variant '" + std::string(variant) + "'");
  VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mi.codeSize = code.size() * 4;
  mi.pCode = code.data();
  VkShaderModule raw_module = VK_NULL_HANDLE;
  KILN_RETURN_IF_ERROR(check(api_.vkCreateShaderModule(device_, &mi, nullptr, &raw_module), "vkCreateShaderModule"));
  const UniqueShaderModule module(api_, device_, raw_module);
  VkComputePipelineCreateInfo pi{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  pi.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  pi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  pi.stage.module = module.get();
  pi.stage.pName = "main";
  pi.layout = pipeline_layout_.get();
  VkPipeline p = VK_NULL_HANDLE;
  KILN_RETURN_IF_ERROR(check(api_.vkCreateComputePipelines(device_, pipeline_cache_.get(), 1, &pi, nullptr, &p),
                             "creating pipeline " + std::string(variant)));
  pipelines_.emplace(std::string(variant), UniquePipeline(api_, device_, p));
  return p;
}

Status Context::submit_and_wait(VkCommandBuffer cmd, VkFence fence, std::string_view what) {
  if (lost_) return unavailable("the device was lost earlier");
  std::lock_guard<std::mutex> lock(queue_mutex_);
  KILN_RETURN_IF_ERROR(check(api_.vkResetFences(device_, 1, &fence), what));
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cmd;
  KILN_RETURN_IF_ERROR(check(api_.vkQueueSubmit(queue_, 1, &si, fence), what));
  const VkResult r = api_.vkWaitForFences(device_, 1, &fence, VK_TRUE, timeout_ns_);
  if (r == VK_TIMEOUT) {
    lost_ = true;
    return unavailable(std::string(what) + " did not finish within the timeout (KILN_VULKAN_TIMEOUT_MS)");
  }
  return check(r, what);
}

}  // namespace kiln::vulkan
