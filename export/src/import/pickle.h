// A restricted unpickler for the `data.pkl` of a `torch.save` zip: it executes nothing.
//
// It understands only the opcodes a state dict of tensors needs (protocols 2-4: dicts,
// tuples, lists, strings, ints, floats, bools, None, the memo, persistent ids, REDUCE and
// BUILD) and calls only these globals, by name, with checked arguments:
//   collections.OrderedDict                         () -> an empty dict
//   torch._utils._rebuild_tensor_v2                 (storage, offset, size, stride, requires_grad, hooks[, metadata])
//   torch._utils._rebuild_tensor_v3                 (... as v2 ..., dtype[, metadata])
//   torch._utils._rebuild_parameter                 (tensor, requires_grad, hooks)
//   torch._utils._rebuild_parameter_with_state      (tensor, requires_grad, hooks, state)
//   torch.<T>Storage (FloatStorage, LongStorage, ...), torch.storage.UntypedStorage, torch.<dtype>: names only
// A persistent id must be ('storage', storage type, key, location, numel); the key names
// the zip member `<archive>/data/<key>`. Any other opcode or global is kInvalidBundle
// naming it ("global 'os.system' is not allowed", "opcode 0x69 ('i', INST) is not allowed").
//
// Bounded: memory is linear in the pickle's size (no opcode duplicates a container), the
// memo is a map (a huge memo index costs nothing), and counts are capped. Offsets, sizes
// and strides are returned as written: read_torch_save range-checks them against the
// storage, naming the tensor. The result must be a dict of string -> tensor.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/format/dtype.h"

namespace kiln::pt2 {

/// One tensor of a pickled state dict: a view (offset, sizes, strides, in elements) into
/// the storage `storage_key` of `storage_numel` elements of `dtype`.
struct PickledTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::string storage_key;
  std::int64_t storage_numel = 0;
  std::int64_t offset = 0;
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
};

/// Limits on a pickle (docs/IMPORT.md, "Limits").
struct PickleLimits {
  static constexpr std::size_t kMaxStack = 1u << 20;    // values on the stack at once
  static constexpr std::size_t kMaxObjects = 1u << 20;  // objects built, and memo entries
  static constexpr std::size_t kMaxRank = 64;           // dims of one tensor
  static constexpr std::size_t kMaxStringBytes = 1u << 24;
};

/// Unpickles `bytes` (the data.pkl of a torch.save archive) into its tensors, in dict
/// order. `where` names the pickle in errors. kInvalidBundle for anything malformed or not
/// allowed; kUnsupported for a storage type Kiln has no dtype for (complex, quantized).
Result<std::vector<PickledTensor>> unpickle_tensor_dict(std::span<const std::uint8_t> bytes, const std::string& where);

}  // namespace kiln::pt2
