// The Vulkan implementation of backend::Backend: device context, weight cache, device
// buffers the executor keeps state in (VulkanBuffer), and prepared segments (buffers,
// descriptor sets and one pre-recorded command buffer each, plus one that undoes their
// in-place writes of device state).
#include "backends/vulkan/vulkan_backend.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <unordered_map>

#include "backends/vulkan/context.h"
#include "backends/vulkan/lowering.h"

namespace kiln::vulkan {
namespace {

using backend::ConstantSource;
using backend::PreparedSegment;
using backend::SegmentDesc;
using backend::SegmentRun;
using backend::SegmentTensor;

constexpr std::int64_t kMaxElements = (std::int64_t{1} << 31) - 1;

std::int64_t numel(const std::vector<std::int64_t>& s) {
  std::int64_t n = 1;
  for (std::int64_t d : s) n *= d;
  return n;
}
VkDeviceSize device_bytes(std::int64_t n) { return static_cast<VkDeviceSize>(std::max<std::int64_t>(n, 1)) * 4; }

// Host bytes -> one 32-bit word per element.
Status to_device(DType dtype, const void* src, std::int64_t n, std::uint32_t* dst, std::string_view what) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32: std::memcpy(dst, src, static_cast<std::size_t>(n) * 4); return Status::Ok();
    case DType::kBool: {
      const auto* s = static_cast<const std::uint8_t*>(src);
      for (std::int64_t i = 0; i < n; ++i) dst[i] = s[i] != 0 ? 1u : 0u;
      return Status::Ok();
    }
    case DType::kI64: {
      const auto* s = static_cast<const std::int64_t*>(src);
      for (std::int64_t i = 0; i < n; ++i) {
        if (s[i] < INT32_MIN || s[i] > INT32_MAX) {
          return Status(StatusCode::kUnsupported, "Vulkan: " + std::string(what) + " holds the i64 value " +
                                                      std::to_string(s[i]) + " at position " + std::to_string(i) +
                                                      ", outside the device's 32-bit integer range");
        }
        dst[i] = static_cast<std::uint32_t>(static_cast<std::int32_t>(s[i]));
      }
      return Status::Ok();
    }
    default: return Status(StatusCode::kUnsupported, "Vulkan: dtype " + std::string(dtype_name(dtype)) + " is not on the device");
  }
}

void from_device(DType dtype, const std::uint32_t* src, std::int64_t n, void* dst) {
  switch (dtype) {
    case DType::kBool: {
      auto* d = static_cast<std::uint8_t*>(dst);
      for (std::int64_t i = 0; i < n; ++i) d[i] = src[i] != 0 ? 1 : 0;
      return;
    }
    case DType::kI64: {
      auto* d = static_cast<std::int64_t*>(dst);
      for (std::int64_t i = 0; i < n; ++i) d[i] = static_cast<std::int32_t>(src[i]);
      return;
    }
    default: std::memcpy(dst, src, static_cast<std::size_t>(n) * 4); return;
  }
}

// One memory barrier on `cmd`.
void memory_barrier(const Api& api, VkCommandBuffer cmd, VkPipelineStageFlags src_stage, VkAccessFlags src,
                    VkPipelineStageFlags dst_stage, VkAccessFlags dst) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = src;
  mb.dstAccessMask = dst;
  api.vkCmdPipelineBarrier(cmd, src_stage, dst_stage, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

// Every earlier device write (compute or transfer, in an earlier submission too) before
// what follows reads or writes.
constexpr VkPipelineStageFlags kDeviceStages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
constexpr VkAccessFlags kDeviceWrites = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;

// A Session's state tensor in device memory (backend::DeviceBuffer): uploaded and downloaded
// through a host staging buffer of its own, by one-shot submissions.
class VulkanBuffer final : public backend::DeviceBuffer {
 public:
  VulkanBuffer(Context& ctx, DType dtype, std::vector<std::int64_t> shape) : ctx_(ctx), dtype_(dtype), shape_(std::move(shape)) {}
  Status init() {
    KILN_ASSIGN_OR_RETURN(device_, ctx_.allocate(device_bytes(numel(shape_)), MemoryKind::kDevice));
    KILN_ASSIGN_OR_RETURN(staging_, ctx_.allocate(device_bytes(numel(shape_)), MemoryKind::kHost));
    return Status::Ok();
  }
  Status upload(const TensorView& host) override {
    KILN_RETURN_IF_ERROR(check(host));
    const std::int64_t n = numel(shape_);
    KILN_RETURN_IF_ERROR(to_device(dtype_, host.data, n, reinterpret_cast<std::uint32_t*>(staging_->mapped), "a state tensor"));
    if (n == 0) return Status::Ok();
    const Allocation &s = staging_.get(), &d = device_.get();
    return ctx_.one_shot("uploading a state tensor", [&](VkCommandBuffer cmd) {
      memory_barrier(ctx_.api(), cmd, kDeviceStages, kDeviceWrites | VK_ACCESS_SHADER_READ_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                     VK_ACCESS_TRANSFER_WRITE_BIT);
      VkBufferCopy region{s.offset, d.offset, static_cast<VkDeviceSize>(n) * 4};
      ctx_.api().vkCmdCopyBuffer(cmd, s.buffer, d.buffer, 1, &region);
    });
  }
  Status download(const TensorView& host) override {
    KILN_RETURN_IF_ERROR(check(host));
    const std::int64_t n = numel(shape_);
    if (n == 0) return Status::Ok();
    const Allocation &s = staging_.get(), &d = device_.get();
    KILN_RETURN_IF_ERROR(ctx_.one_shot("downloading a state tensor", [&](VkCommandBuffer cmd) {
      memory_barrier(ctx_.api(), cmd, kDeviceStages, kDeviceWrites, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
      VkBufferCopy region{d.offset, s.offset, static_cast<VkDeviceSize>(n) * 4};
      ctx_.api().vkCmdCopyBuffer(cmd, d.buffer, s.buffer, 1, &region);
      memory_barrier(ctx_.api(), cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                     VK_ACCESS_HOST_READ_BIT);
    }));
    from_device(dtype_, reinterpret_cast<const std::uint32_t*>(staging_->mapped), n, host.data);
    return Status::Ok();
  }
  DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  const Allocation& allocation() const { return device_.get(); }

 private:
  Status check(const TensorView& host) const {
    bool same = host.dtype == dtype_ && host.rank == static_cast<int>(shape_.size());
    for (int d = 0; same && d < host.rank; ++d) same = host.shape[d] == shape_[static_cast<std::size_t>(d)];
    if (!same || (host.data == nullptr && numel(shape_) > 0)) {
      return Status(StatusCode::kInternal, "Vulkan: a state tensor transfer with another dtype or shape than the buffer's");
    }
    return Status::Ok();
  }
  Context& ctx_;
  DType dtype_;
  std::vector<std::int64_t> shape_;
  OwnedAllocation device_, staging_;
};

class VulkanBackend;

class VulkanSegment final : public PreparedSegment {
 public:
  VulkanSegment(VulkanBackend& backend, Context& ctx) : backend_(backend), ctx_(ctx) {}
  ~VulkanSegment() override;
  Status build(const SegmentDesc& desc, const ConstantSource& constants);
  Status run(const SegmentRun& run) override;
  std::uint64_t bytes_uploaded() const override { return uploaded_; }
  std::uint64_t bytes_downloaded() const override { return downloaded_; }
  Status undo_writes() override;

 private:
  Status place_tensors(const SegmentDesc& desc, const ConstantSource& constants, VkDeviceSize& staging_size);
  Status place_internals(const SegmentDesc& desc, const LoweredSegment& lowered);
  Result<std::vector<VkDescriptorSet>> descriptor_sets(const std::vector<Dispatch>& dispatches);
  Result<VkCommandBuffer> create_command_buffer();
  Status record(const LoweredSegment& lowered);
  Status record_dispatches(VkCommandBuffer cmd, const std::vector<Dispatch>& dispatches, std::span<const VkDescriptorSet> ds);
  void barrier(VkPipelineStageFlags src_stage, VkAccessFlags src, VkPipelineStageFlags dst_stage, VkAccessFlags dst);

  VulkanBackend& backend_;
  Context& ctx_;
  SegmentDesc desc_;  // tensors only (shapes for run-time checks)
  std::vector<Allocation> tensor_alloc_;  // per tensor, views (constants: the backend's copy)
  std::vector<OwnedAllocation> owned_;    // the non-constant tensors' buffers
  std::vector<std::uint32_t> inputs_, outputs_;  // tensor ids by io_index
  std::vector<VkDeviceSize> in_staging_off_, out_staging_off_;
  OwnedAllocation staging_, error_;
  std::vector<OwnedAllocation> undo_;     // per in-place update of device state: its undo log
  std::vector<IndexCheck> index_checks_;  // by error tag - 1
  UniqueDescriptorPool pool_;
  UniqueCommandPool cmd_pool_;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;       // freed with cmd_pool_
  VkCommandBuffer undo_cmd_ = VK_NULL_HANDLE;  // the restore dispatches; null when there are none
  UniqueFence fence_;
  std::uint64_t uploaded_ = 0, downloaded_ = 0;
  bool submitted_ = false;  // the last run() reached the queue: its undo logs are this run's
};

class VulkanBackend final : public backend::Backend {
 public:
  explicit VulkanBackend(std::unique_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  Status init() {
    KILN_ASSIGN_OR_RETURN(dummy_, ctx_->allocate(256, MemoryKind::kDevice));
    const Allocation d = dummy_.get();
    return ctx_->one_shot("zeroing the dummy buffer", [&](VkCommandBuffer cmd) {
      ctx_->api().vkCmdFillBuffer(cmd, d.buffer, d.offset, d.size, 0);
    });
  }

  std::string_view name() const override { return "vulkan"; }
  std::string device_description() const override { return ctx_->description(); }
  bool supports(OpKind op, std::span<const DType> input_dtypes, std::span<const DType> output_dtypes,
                std::span<const AttrValue> attrs) const override {
    return op_supported(op, input_dtypes, output_dtypes, attrs);
  }
  Result<std::unique_ptr<PreparedSegment>> prepare(const SegmentDesc& segment, const ConstantSource& constants) override {
    if (ctx_->lost()) return Status(StatusCode::kUnavailable, "Vulkan: the device was lost");
    auto seg = std::make_unique<VulkanSegment>(*this, *ctx_);
    Status st = seg->build(segment, constants);
    if (st.ok()) st = ctx_->take_validation_errors();
    if (!st.ok()) return st;
    return std::unique_ptr<PreparedSegment>(std::move(seg));
  }

  /// The device copy of a constant, uploaded on first use.
  Result<Allocation> constant(const SegmentTensor& t, const ConstantSource& source) {
    std::lock_guard<std::mutex> lock(const_mutex_);
    if (auto it = constants_.find(t.constant); it != constants_.end()) {
      if (it->second.numel != numel(t.shape) || it->second.dtype != t.dtype) {
        return Status(StatusCode::kInvalidBundle,
                      "Vulkan: constant " + std::to_string(t.constant) + " used with another shape or dtype");
      }
      return it->second.alloc.get();
    }
    const std::int64_t n = numel(t.shape);
    const std::span<const std::uint8_t> bytes = source.constant_data(t.constant);
    if (bytes.size() != static_cast<std::size_t>(n) * dtype_size(t.dtype)) {
      return Status(StatusCode::kInvalidBundle, "constant " + std::to_string(t.constant) + " has " +
                                                    std::to_string(bytes.size()) + " bytes, its shape needs " +
                                                    std::to_string(n * static_cast<std::int64_t>(dtype_size(t.dtype))));
    }
    KILN_ASSIGN_OR_RETURN(OwnedAllocation dev, ctx_->allocate(device_bytes(n), MemoryKind::kDevice));
    KILN_ASSIGN_OR_RETURN(const OwnedAllocation staging, ctx_->allocate(device_bytes(n), MemoryKind::kHost));
    KILN_RETURN_IF_ERROR(to_device(t.dtype, bytes.data(), n, reinterpret_cast<std::uint32_t*>(staging->mapped),
                                   "constant " + std::to_string(t.constant)));
    if (n > 0) {
      const Allocation& s = staging.get();
      const Allocation& d = dev.get();
      KILN_RETURN_IF_ERROR(ctx_->one_shot("uploading a constant", [&](VkCommandBuffer cmd) {
        VkBufferCopy region{s.offset, d.offset, static_cast<VkDeviceSize>(n) * 4};
        ctx_->api().vkCmdCopyBuffer(cmd, s.buffer, d.buffer, 1, &region);
      }));
    }
    const Allocation view = dev.get();
    constants_.emplace(t.constant, Weight{std::move(dev), n, t.dtype});
    return view;
  }
  const Allocation& dummy() const { return dummy_.get(); }

  Result<std::unique_ptr<backend::DeviceBuffer>> create_buffer(DType dtype, std::span<const std::int64_t> shape) override {
    if (!dtype_on_device(dtype)) return Status(StatusCode::kUnsupported, "Vulkan: dtype " + std::string(dtype_name(dtype)) + " is not on the device");
    std::int64_t n = 1;
    for (std::int64_t d : shape) {
      if (d < 0 || (d > 0 && n > kMaxElements / d)) return Status(StatusCode::kUnsupported, "Vulkan: a state tensor too large for 32-bit indexing");
      n *= d;
    }
    if (device_bytes(n) > ctx_->properties().limits.maxStorageBufferRange) {
      return Status(StatusCode::kUnsupported, "Vulkan: a state tensor of " + std::to_string(device_bytes(n)) + " bytes exceeds maxStorageBufferRange");
    }
    auto b = std::make_unique<VulkanBuffer>(*ctx_, dtype, std::vector<std::int64_t>(shape.begin(), shape.end()));
    KILN_RETURN_IF_ERROR(b->init());
    return std::unique_ptr<backend::DeviceBuffer>(std::move(b));
  }

 private:
  std::unique_ptr<Context> ctx_;  // declared first: outlives the allocations below
  std::mutex const_mutex_;
  struct Weight {
    OwnedAllocation alloc;
    std::int64_t numel = 0;
    DType dtype = DType::kF32;
  };
  std::unordered_map<std::uint32_t, Weight> constants_;  // by bundle constant index
  OwnedAllocation dummy_;
};

VulkanSegment::~VulkanSegment() {
  // run() always waits for its submission, so nothing of this segment is in flight here,
  // unless a run timed out: then wait for the device (a hung device is reported lost by
  // the driver's own hang detection) before the members destroy what it may still be using.
  if (ctx_.lost()) ctx_.api().vkDeviceWaitIdle(ctx_.device());
}

Status VulkanSegment::build(const SegmentDesc& desc, const ConstantSource& constants) {
  const VkPhysicalDeviceLimits& limits = ctx_.properties().limits;
  LoweredSegment lowered;
  KILN_RETURN_IF_ERROR(lower_segment(desc, limits, lowered));
  desc_.tensors = desc.tensors;
  desc_.num_inputs = desc.num_inputs;
  desc_.num_outputs = desc.num_outputs;
  inputs_.assign(desc.num_inputs, UINT32_MAX);
  outputs_.assign(desc.num_outputs, UINT32_MAX);
  VkDeviceSize staging_size = 0;
  KILN_RETURN_IF_ERROR(place_tensors(desc, constants, staging_size));
  KILN_RETURN_IF_ERROR(place_internals(desc, lowered));
  for (std::uint32_t s : inputs_) {
    if (s == UINT32_MAX) return Status(StatusCode::kInvalidBundle, "Vulkan: a segment input has no tensor");
  }
  for (std::uint32_t s : outputs_) {
    if (s == UINT32_MAX) return Status(StatusCode::kInvalidBundle, "Vulkan: a segment output has no tensor");
  }
  KILN_ASSIGN_OR_RETURN(staging_, ctx_.allocate(std::max<VkDeviceSize>(staging_size, 4), MemoryKind::kHost));
  VkDeviceSize at = 0;
  for (std::uint32_t id : inputs_) {
    in_staging_off_.push_back(at);
    at += device_bytes(numel(desc.tensors[id].shape));
  }
  for (std::uint32_t id : outputs_) {
    out_staging_off_.push_back(at);
    at += device_bytes(numel(desc.tensors[id].shape));
  }
  if (lowered.uses_error_buffer) {
    KILN_ASSIGN_OR_RETURN(error_, ctx_.allocate(16, MemoryKind::kHost));
  }
  index_checks_ = lowered.index_checks;
  for (std::int64_t words : lowered.undo_words) {
    KILN_ASSIGN_OR_RETURN(OwnedAllocation a, ctx_.allocate(device_bytes(words), MemoryKind::kDevice));
    undo_.push_back(std::move(a));
  }
  for (const Dispatch& d : lowered.dispatches) KILN_RETURN_IF_ERROR(ctx_.pipeline(d.variant).status());
  for (const Dispatch& d : lowered.undo_dispatches) KILN_RETURN_IF_ERROR(ctx_.pipeline(d.variant).status());
  return record(lowered);
}

// Buffers: constants from the backend's cache, inputs and outputs owned by the segment
// (internals are placed by place_internals). Checks each tensor against the device limits.
Status VulkanSegment::place_tensors(const SegmentDesc& desc, const ConstantSource& constants, VkDeviceSize& staging_size) {
  const VkPhysicalDeviceLimits& limits = ctx_.properties().limits;
  tensor_alloc_.resize(desc.tensors.size());
  for (std::uint32_t i = 0; i < desc.tensors.size(); ++i) {
    const SegmentTensor& t = desc.tensors[i];
    if (!dtype_on_device(t.dtype)) {
      return Status(StatusCode::kUnsupported, "Vulkan: tensor " + std::to_string(i) + " has dtype " +
                                                  std::string(dtype_name(t.dtype)));
    }
    std::int64_t n = 1;
    for (std::int64_t d : t.shape) {
      if (d < 0 || (d > 0 && n > kMaxElements / d)) {
        return Status(StatusCode::kUnsupported, "Vulkan: tensor " + std::to_string(i) + " is too large for 32-bit indexing");
      }
      n *= d;
    }
    if (device_bytes(n) > limits.maxStorageBufferRange) {
      return Status(StatusCode::kUnsupported, "Vulkan: tensor " + std::to_string(i) + " (" + std::to_string(device_bytes(n)) +
                                                  " bytes) exceeds maxStorageBufferRange " +
                                                  std::to_string(limits.maxStorageBufferRange));
    }
    using Role = SegmentTensor::Role;
    if (t.role == Role::kConstant) {
      KILN_ASSIGN_OR_RETURN(tensor_alloc_[i], backend_.constant(t, constants));
      continue;
    }
    if (t.role == Role::kInternal) continue;  // placed below, sharing memory by lifetime
    if (t.role == Role::kDevice) {             // the executor's buffer, bound where it lies
      const auto* b = t.io_index < desc.device_buffers.size() ? dynamic_cast<const VulkanBuffer*>(desc.device_buffers[t.io_index]) : nullptr;
      if (b == nullptr || b->dtype() != t.dtype || b->shape() != t.shape) {
        return Status(StatusCode::kInternal, "Vulkan: tensor " + std::to_string(i) + " names a missing device buffer or one of another dtype or shape");
      }
      tensor_alloc_[i] = b->allocation();
      continue;
    }
    KILN_ASSIGN_OR_RETURN(OwnedAllocation a, ctx_.allocate(device_bytes(n), MemoryKind::kDevice));
    tensor_alloc_[i] = a.get();
    owned_.push_back(std::move(a));
    if (t.role == Role::kInput || t.role == Role::kOutput) {
      auto& slots = t.role == Role::kInput ? inputs_ : outputs_;
      if (t.io_index >= slots.size() || slots[t.io_index] != UINT32_MAX) {
        return Status(StatusCode::kInvalidBundle, "Vulkan: tensor " + std::to_string(i) + " has a bad or repeated io_index");
      }
      slots[t.io_index] = i;
      staging_size += device_bytes(n);
    }
  }
  return Status::Ok();
}

// Internal tensors share buffers: an internal's buffer returns to a free list after the
// last dispatch that touches it, and a later internal of at most that size reuses it
// (best fit). The barrier logic in record() tracks buffers, not tensors, so the
// write-after-read this creates is ordered.
Status VulkanSegment::place_internals(const SegmentDesc& desc, const LoweredSegment& lowered) {
  const std::size_t nt = desc.tensors.size();
  std::vector<std::int64_t> first(nt, -1), last(nt, -1);
  for (std::size_t i = 0; i < lowered.dispatches.size(); ++i) {
    const Dispatch& d = lowered.dispatches[i];
    auto touch = [&](std::uint32_t t) {
      if (first[t] < 0) first[t] = static_cast<std::int64_t>(i);
      last[t] = static_cast<std::int64_t>(i);
    };
    for (std::uint32_t t : d.reads) touch(t);
    for (std::uint32_t t : d.writes) touch(t);
    for (const BindingRef& b : d.bindings) {
      if (b.kind == BindingRef::kTensor) touch(b.tensor);
    }
  }
  std::multimap<VkDeviceSize, Allocation> free_list;  // by size
  std::vector<std::vector<std::uint32_t>> ends(lowered.dispatches.size());
  std::vector<std::vector<std::uint32_t>> starts(lowered.dispatches.size());
  for (std::uint32_t t = 0; t < nt; ++t) {
    if (desc.tensors[t].role != SegmentTensor::Role::kInternal || first[t] < 0) continue;
    starts[static_cast<std::size_t>(first[t])].push_back(t);
    ends[static_cast<std::size_t>(last[t])].push_back(t);
  }
  for (std::size_t i = 0; i < lowered.dispatches.size(); ++i) {
    for (std::uint32_t t : starts[i]) {
      const VkDeviceSize need = device_bytes(numel(desc.tensors[t].shape));
      auto it = free_list.lower_bound(need);
      if (it != free_list.end() && it->first <= 4 * need + 4096) {
        tensor_alloc_[t] = it->second;
        free_list.erase(it);
      } else {
        KILN_ASSIGN_OR_RETURN(OwnedAllocation a, ctx_.allocate(need, MemoryKind::kDevice));
        tensor_alloc_[t] = a.get();
        owned_.push_back(std::move(a));
      }
    }
    for (std::uint32_t t : ends[i]) free_list.emplace(tensor_alloc_[t].size, tensor_alloc_[t]);
  }
  return Status::Ok();
}

// One descriptor set per dispatch, written once (bindings never change between runs).
Result<std::vector<VkDescriptorSet>> VulkanSegment::descriptor_sets(const std::vector<Dispatch>& dispatches) {
  const Api& api = ctx_.api();
  VkDevice dev = ctx_.device();
  const auto sets = static_cast<std::uint32_t>(std::max<std::size_t>(dispatches.size(), 1));
  VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, sets * kMaxBindings};
  VkDescriptorPoolCreateInfo pi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  pi.maxSets = sets;
  pi.poolSizeCount = 1;
  pi.pPoolSizes = &size;
  VkDescriptorPool pool = VK_NULL_HANDLE;
  KILN_RETURN_IF_ERROR(ctx_.check(api.vkCreateDescriptorPool(dev, &pi, nullptr, &pool), "vkCreateDescriptorPool"));
  pool_ = UniqueDescriptorPool(api, dev, pool);
  std::vector<VkDescriptorSet> ds(dispatches.size());
  if (!ds.empty()) {
    std::vector<VkDescriptorSetLayout> layouts(ds.size(), ctx_.set_layout());
    VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorPool = pool;
    ai.descriptorSetCount = static_cast<std::uint32_t>(ds.size());
    ai.pSetLayouts = layouts.data();
    KILN_RETURN_IF_ERROR(ctx_.check(api.vkAllocateDescriptorSets(dev, &ai, ds.data()), "vkAllocateDescriptorSets"));
  }
  std::vector<VkDescriptorBufferInfo> infos(ds.size() * kMaxBindings);
  std::vector<VkWriteDescriptorSet> writes;
  for (std::size_t i = 0; i < ds.size(); ++i) {
    for (std::uint32_t b = 0; b < kMaxBindings; ++b) {
      const BindingRef& ref = dispatches[i].bindings[b];
      const Allocation& a = ref.kind == BindingRef::kTensor ? tensor_alloc_[ref.tensor]
                            : ref.kind == BindingRef::kError ? error_.get()
                            : ref.kind == BindingRef::kUndo  ? undo_.at(ref.tensor).get()
                                                             : backend_.dummy();
      infos[i * kMaxBindings + b] = {a.buffer, a.offset, a.size};
      VkWriteDescriptorSet w{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
      w.dstSet = ds[i];
      w.dstBinding = b;
      w.descriptorCount = 1;
      w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      w.pBufferInfo = &infos[i * kMaxBindings + b];
      writes.push_back(w);
    }
  }
  if (!writes.empty()) api.vkUpdateDescriptorSets(dev, static_cast<std::uint32_t>(writes.size()), writes.data(), 0, nullptr);
  return ds;
}

// A command buffer from the segment's pool (created, with the segment's fence, on first use).
Result<VkCommandBuffer> VulkanSegment::create_command_buffer() {
  const Api& api = ctx_.api();
  VkDevice dev = ctx_.device();
  if (!cmd_pool_) {
    VkCommandPoolCreateInfo ci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    ci.queueFamilyIndex = ctx_.queue_family();
    VkCommandPool cmd_pool = VK_NULL_HANDLE;
    KILN_RETURN_IF_ERROR(ctx_.check(api.vkCreateCommandPool(dev, &ci, nullptr, &cmd_pool), "vkCreateCommandPool"));
    cmd_pool_ = UniqueCommandPool(api, dev, cmd_pool);
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkFence fence = VK_NULL_HANDLE;
    KILN_RETURN_IF_ERROR(ctx_.check(api.vkCreateFence(dev, &fi, nullptr, &fence), "vkCreateFence"));
    fence_ = UniqueFence(api, dev, fence);
  }
  VkCommandBufferAllocateInfo cai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  cai.commandPool = cmd_pool_.get();
  cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cai.commandBufferCount = 1;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  KILN_RETURN_IF_ERROR(ctx_.check(api.vkAllocateCommandBuffers(dev, &cai, &cmd), "vkAllocateCommandBuffers"));
  return cmd;
}

void VulkanSegment::barrier(VkPipelineStageFlags src_stage, VkAccessFlags src, VkPipelineStageFlags dst_stage,
                            VkAccessFlags dst) {
  memory_barrier(ctx_.api(), cmd_, src_stage, src, dst_stage, dst);
}

Status VulkanSegment::record(const LoweredSegment& lowered) {
  const Api& api = ctx_.api();
  std::vector<Dispatch> all = lowered.dispatches;
  all.insert(all.end(), lowered.undo_dispatches.begin(), lowered.undo_dispatches.end());
  KILN_ASSIGN_OR_RETURN(const std::vector<VkDescriptorSet> ds, descriptor_sets(all));
  const std::span<const VkDescriptorSet> run_sets(ds.data(), lowered.dispatches.size());
  const std::span<const VkDescriptorSet> undo_sets(ds.data() + lowered.dispatches.size(), lowered.undo_dispatches.size());
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  if (!lowered.undo_dispatches.empty()) {  // after every earlier write of the state (this run's included)
    KILN_ASSIGN_OR_RETURN(undo_cmd_, create_command_buffer());
    KILN_RETURN_IF_ERROR(ctx_.check(api.vkBeginCommandBuffer(undo_cmd_, &bi), "vkBeginCommandBuffer"));
    memory_barrier(api, undo_cmd_, kDeviceStages, kDeviceWrites, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                   VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    KILN_RETURN_IF_ERROR(record_dispatches(undo_cmd_, lowered.undo_dispatches, undo_sets));
    KILN_RETURN_IF_ERROR(ctx_.check(api.vkEndCommandBuffer(undo_cmd_), "vkEndCommandBuffer"));
  }
  KILN_ASSIGN_OR_RETURN(cmd_, create_command_buffer());
  KILN_RETURN_IF_ERROR(ctx_.check(api.vkBeginCommandBuffer(cmd_, &bi), "vkBeginCommandBuffer"));
  // Host-written staging -> input buffers; device state written by an earlier submission
  // (another segment, an upload) before the dispatches touch it.
  barrier(VK_PIPELINE_STAGE_HOST_BIT | kDeviceStages, VK_ACCESS_HOST_WRITE_BIT | kDeviceWrites, VK_PIPELINE_STAGE_TRANSFER_BIT,
          VK_ACCESS_TRANSFER_READ_BIT);
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    const std::int64_t n = numel(desc_.tensors[inputs_[i]].shape);
    if (n == 0) continue;
    const Allocation& dst = tensor_alloc_[inputs_[i]];
    VkBufferCopy region{staging_->offset + in_staging_off_[i], dst.offset, static_cast<VkDeviceSize>(n) * 4};
    api.vkCmdCopyBuffer(cmd_, staging_->buffer, dst.buffer, 1, &region);
  }
  barrier(kDeviceStages, kDeviceWrites, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
  KILN_RETURN_IF_ERROR(record_dispatches(cmd_, lowered.dispatches, run_sets));
  barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
          VK_ACCESS_TRANSFER_READ_BIT);
  for (std::size_t i = 0; i < outputs_.size(); ++i) {
    const std::int64_t n = numel(desc_.tensors[outputs_[i]].shape);
    if (n == 0) continue;
    const Allocation& src = tensor_alloc_[outputs_[i]];
    VkBufferCopy region{src.offset, staging_->offset + out_staging_off_[i], static_cast<VkDeviceSize>(n) * 4};
    api.vkCmdCopyBuffer(cmd_, src.buffer, staging_->buffer, 1, &region);
  }
  barrier(VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
          VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
  return ctx_.check(api.vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
}

// The dispatches, with barriers where they are needed.
Status VulkanSegment::record_dispatches(VkCommandBuffer cmd, const std::vector<Dispatch>& dispatches, std::span<const VkDescriptorSet> ds) {
  const Api& api = ctx_.api();
  // Hazards are tracked per buffer range (internals share ranges): a barrier goes before a
  // dispatch that reads or writes a range written since the last barrier, or writes a
  // range read since then.
  using Range = std::pair<VkBuffer, VkDeviceSize>;
  auto range_of = [&](std::uint32_t t) { return Range{tensor_alloc_[t].buffer, tensor_alloc_[t].offset}; };
  std::set<Range> written, read;
  VkPipeline bound = VK_NULL_HANDLE;
  for (std::size_t i = 0; i < dispatches.size(); ++i) {
    const Dispatch& d = dispatches[i];
    bool hazard = d.barrier_before && i > 0;
    for (std::uint32_t t : d.reads) hazard = hazard || written.count(range_of(t)) != 0;
    for (std::uint32_t t : d.writes) hazard = hazard || written.count(range_of(t)) != 0 || read.count(range_of(t)) != 0;
    if (hazard) {
      memory_barrier(api, cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
                     VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
      written.clear();
      read.clear();
    }
    KILN_ASSIGN_OR_RETURN(VkPipeline p, ctx_.pipeline(d.variant));
    if (p != bound) {
      api.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p);
      bound = p;
    }
    api.vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, ctx_.pipeline_layout(), 0, 1, &ds[i], 0, nullptr);
    api.vkCmdPushConstants(cmd, ctx_.pipeline_layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushWords * 4, d.push.data());
    api.vkCmdDispatch(cmd, d.groups[0], d.groups[1], d.groups[2]);
    for (std::uint32_t t : d.writes) written.insert(range_of(t));
    for (std::uint32_t t : d.reads) read.insert(range_of(t));
  }
  return Status::Ok();
}

Status VulkanSegment::run(const SegmentRun& run) {
  if (run.inputs.size() != inputs_.size() || run.outputs.size() != outputs_.size()) {
    return Status(StatusCode::kInternal, "Vulkan: segment run with " + std::to_string(run.inputs.size()) + " inputs and " +
                                             std::to_string(run.outputs.size()) + " outputs, prepared for " +
                                             std::to_string(inputs_.size()) + " and " + std::to_string(outputs_.size()));
  }
  auto matches = [&](const TensorView& v, const SegmentTensor& t) {
    if (v.dtype != t.dtype || v.rank != static_cast<int>(t.shape.size())) return false;
    for (int d = 0; d < v.rank; ++d) {
      if (v.shape[d] != t.shape[d]) return false;
    }
    return v.data != nullptr || v.numel() == 0;
  };
  uploaded_ = downloaded_ = 0;
  submitted_ = false;
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    const SegmentTensor& t = desc_.tensors[inputs_[i]];
    if (!matches(run.inputs[i], t)) return Status(StatusCode::kInternal, "Vulkan: input " + std::to_string(i) + " does not match the prepared shape");
    KILN_RETURN_IF_ERROR(to_device(t.dtype, run.inputs[i].data, run.inputs[i].numel(),
                                   reinterpret_cast<std::uint32_t*>(staging_->mapped + in_staging_off_[i]),
                                   "input " + std::to_string(i)));
    uploaded_ += run.inputs[i].nbytes();
  }
  for (std::size_t i = 0; i < outputs_.size(); ++i) {
    if (!matches(run.outputs[i], desc_.tensors[outputs_[i]])) {
      return Status(StatusCode::kInternal, "Vulkan: output " + std::to_string(i) + " does not match the prepared shape");
    }
  }
  if (error_.valid()) std::memset(error_->mapped, 0, 16);
  submitted_ = true;
  KILN_RETURN_IF_ERROR(ctx_.submit_and_wait(cmd_, fence_.get(), "running a segment"));
  KILN_RETURN_IF_ERROR(ctx_.take_validation_errors());
  if (error_.valid()) {
    std::uint32_t e[3];
    std::memcpy(e, error_->mapped, sizeof e);
    std::uint32_t tag = 0;
    std::memcpy(&tag, error_->mapped + 12, 4);
    if (e[0] != 0 && tag >= 1 && tag <= index_checks_.size()) {  // the CPU kernel's message
      const IndexCheck& c = index_checks_[tag - 1];
      return Status(StatusCode::kInvalidInput, "[" + std::string(c.op) + "] indices[0] element " + std::to_string(e[1]) + " = " +
                                                   std::to_string(static_cast<std::int32_t>(e[2])) + " out of range for dim " +
                                                   std::to_string(c.dim) + " of size " + std::to_string(c.size) +
                                                   (c.where.empty() ? "" : " [" + c.where + "]"));
    }
    if (e[0] != 0) {
      return Status(StatusCode::kInvalidInput, "[index] index " + std::to_string(static_cast<std::int32_t>(e[2])) +
                                                   " at position " + std::to_string(e[1]) + " is out of range");
    }
  }
  for (std::size_t i = 0; i < outputs_.size(); ++i) {
    const TensorView& v = run.outputs[i];
    from_device(v.dtype, reinterpret_cast<const std::uint32_t*>(staging_->mapped + out_staging_off_[i]), v.numel(), v.data);
    downloaded_ += v.nbytes();
  }
  return Status::Ok();
}

Status VulkanSegment::undo_writes() {
  // A run that failed before its submission wrote nothing, and the undo logs hold an
  // earlier run's words: putting those back would undo that run.
  if (undo_cmd_ == VK_NULL_HANDLE || !submitted_) return Status::Ok();
  submitted_ = false;
  KILN_RETURN_IF_ERROR(ctx_.submit_and_wait(undo_cmd_, fence_.get(), "undoing a segment's writes of device state"));
  return ctx_.take_validation_errors();
}

}  // namespace

}  // namespace kiln::vulkan

namespace kiln::backend {

Result<std::unique_ptr<Backend>> create_vulkan_backend(const BackendOptions& options) {
  using namespace kiln::vulkan;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Context> ctx, Context::create(options.validation, options.pipeline_cache_path));
  auto b = std::make_unique<VulkanBackend>(std::move(ctx));
  KILN_RETURN_IF_ERROR(b->init());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace kiln::backend
