// The accelerator backend interface: what the executor needs from a device backend
// (Vulkan today). The CPU kernels are not behind this interface: they are the executor's
// own per-op fallback, and every op has one.
//
// The executor partitions the nodes of a graph into *segments*: maximal runs of
// consecutive nodes the backend supports (Backend::supports). Once every shape a segment
// needs is known (after symbol binding, and after any data-dependent node before it ran),
// the executor describes the segment with concrete shapes (SegmentDesc) and asks the
// backend to prepare it; prepared segments are cached per shape signature by the
// executor. Running a prepared segment uploads its host inputs, runs every node on the
// device, and downloads its outputs into host memory the executor owns. Intermediates of
// a segment never leave the device, except under a SessionOptions::observer: the executor
// then declares every value of the segment an output (kOutput), so all come down.
//
// Constants (weights) are uploaded once per Program: SegmentDesc names them by their
// bundle constant index, and the backend keeps one device copy per index.
//
// State kept on the device between runs (a Session's KV cache): the executor owns one
// DeviceBuffer per such state (Backend::create_buffer), names it in a SegmentDesc
// (Role::kDevice), and the segment reads it, or updates it in place, where it lies: no
// upload, no download. A segment that writes a kDevice tensor saves the elements it
// overwrites on the device first; PreparedSegment::undo_writes puts them back (a failed
// run leaves the state as it was).
//
// Errors are Status values; a backend never throws, aborts or hangs (device loss is
// StatusCode::kUnavailable).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernel/kernel.h"
#include "kiln/format/dtype.h"
#include "kiln/format/ops.h"
#include "kiln/runtime/status.h"

namespace kiln::backend {

/// One tensor of a segment, with its concrete shape.
struct SegmentTensor {
  enum class Role : std::uint8_t {
    kInput,     // provided by the host at run time (SegmentRun::inputs, in order)
    kConstant,  // a bundle constant: `constant` is its index; bytes from constant_data()
    kInternal,  // produced and consumed inside the segment only
    kOutput,    // produced inside the segment and read by the host (SegmentRun::outputs)
    kDevice,    // lives in SegmentDesc::device_buffers[io_index] across runs (a state tensor):
                // read there, or written there in place by an update of the buffer's other
                // kDevice tensor with the same io_index (index_put); never copied to the host
  };
  Role role = Role::kInternal;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::uint32_t constant = 0;  // kConstant
  std::uint32_t io_index = 0;  // kInput / kOutput: position in SegmentRun::inputs / outputs;
                               // kDevice: position in SegmentDesc::device_buffers
};

/// A tensor the executor keeps in device memory between segment runs (Backend::create_buffer):
/// a Session's state. Its dtype and shape are fixed at creation.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  /// Host -> device: `host` has the buffer's dtype and shape.
  virtual Status upload(const TensorView& host) = 0;
  /// Device -> host: `host` has the buffer's dtype and shape and points at writable memory.
  virtual Status download(const TensorView& host) = 0;
};

/// SegmentNode::inputs entry for an absent optional input (layer_norm's weight, ...).
inline constexpr std::uint32_t kAbsentTensor = 0xffffffffu;

/// One node of a segment. Attributes are evaluated (expressions are integers), exactly as
/// the CPU kernels receive them. Their spans (`s`, `ints`, `floats`) stay valid for the life
/// of the PreparedSegment made from the SegmentDesc; other SegmentDesc memory only during
/// prepare(). The attr_* vectors are storage a backend may use when it builds descs itself
/// (tests); the executor leaves them empty.
struct SegmentNode {
  OpKind op = OpKind::Identity;
  std::vector<std::uint32_t> inputs;   // SegmentDesc::tensors indices, or kAbsentTensor
  std::vector<std::uint32_t> outputs;  // SegmentDesc::tensors indices
  std::vector<AttrValue> attrs;
  std::vector<std::vector<std::int64_t>> attr_ints;  // storage for attrs[k].ints
  std::vector<std::vector<double>> attr_floats;      // storage for attrs[k].floats
  std::vector<std::string> attr_strings;             // storage for attrs[k].s
  std::string where;                                 // "graph 0, node 12 (model.cpp:41)" for errors
};

struct SegmentDesc {
  std::vector<SegmentTensor> tensors;
  std::vector<SegmentNode> nodes;  // in execution order
  std::uint32_t num_inputs = 0;
  std::uint32_t num_outputs = 0;
  /// What kDevice tensors name (made by the same Backend's create_buffer; null where unused).
  /// They outlive the PreparedSegment, which binds them at prepare.
  std::vector<DeviceBuffer*> device_buffers;
};

/// Host memory for one run of a prepared segment: dense, C-contiguous, of the shapes and
/// dtypes the SegmentDesc declared. The executor owns it.
struct SegmentRun {
  std::span<const TensorView> inputs;
  std::span<const TensorView> outputs;  // data points at writable host memory
};

class PreparedSegment {
 public:
  virtual ~PreparedSegment() = default;
  /// Runs the segment. Not reentrant: the executor never runs one PreparedSegment from two
  /// threads at once (each Session prepares its own).
  virtual Status run(const SegmentRun& run) = 0;
  /// Bytes copied host→device and device→host by the last run (for inspect/bench).
  virtual std::uint64_t bytes_uploaded() const = 0;
  virtual std::uint64_t bytes_downloaded() const = 0;
  /// Puts back the elements of kDevice tensors the last run() overwrote (it saved them on
  /// the device before writing), newest first. The executor calls it, newest segment first,
  /// when a run that ran this segment fails, before any other run of the segment.
  virtual Status undo_writes() { return Status::Ok(); }
};

/// Access to the bundle's constants, so a backend can upload a weight the first time a
/// segment uses it.
class ConstantSource {
 public:
  virtual ~ConstantSource() = default;
  virtual std::span<const std::uint8_t> constant_data(std::uint32_t index) const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  /// "vulkan"
  virtual std::string_view name() const = 0;
  /// A line describing the device: "NVIDIA H100 80GB HBM3 (discrete, Vulkan 1.3, driver …)".
  virtual std::string device_description() const = 0;
  /// Whether `op` with these dtypes and (evaluated or not) attributes can run on the device.
  /// Called at load time per node, before shapes are known; must be cheap and pure.
  virtual bool supports(OpKind op, std::span<const DType> input_dtypes, std::span<const DType> output_dtypes,
                        std::span<const AttrValue> attrs) const = 0;
  /// Builds pipelines/buffers/command buffers for a segment with concrete shapes. Thread-safe
  /// (several Sessions may prepare at once).
  virtual Result<std::unique_ptr<PreparedSegment>> prepare(const SegmentDesc& segment, const ConstantSource& constants) = 0;
  /// A device buffer of `dtype` and `shape` for kDevice tensors (contents unspecified until
  /// an upload). kUnsupported when the backend cannot keep such a tensor. Thread-safe.
  virtual Result<std::unique_ptr<DeviceBuffer>> create_buffer(DType dtype, std::span<const std::int64_t> shape) {
    (void)dtype;
    (void)shape;
    return Status(StatusCode::kUnsupported, std::string(name()) + ": no device buffers");
  }
};

struct BackendOptions {
  /// Vulkan: run with the Khronos validation layer and fail on any message (tests).
  bool validation = false;
  /// Vulkan: a file for VkPipelineCache persistence; empty = none.
  std::string pipeline_cache_path;
};

/// Creates the named backend ("vulkan"), or an error saying why it is unusable here
/// (kUnavailable: not built in, no loader, no device, missing features).
Result<std::unique_ptr<Backend>> create_backend(std::string_view name, const BackendOptions& options = {});

}  // namespace kiln::backend
