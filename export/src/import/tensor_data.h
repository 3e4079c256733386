// The tensors of a `.pt2` archive, from either layout (docs/IMPORT.md, "Layouts"):
//   PT2 (PyTorch >= 2.7): `*/models/*.json`, `data/weights/*_weights_config.json` + raw
//     files, `data/constants/*` likewise;
//   legacy (PyTorch <= 2.6): `serialized_exported_program.json`, `serialized_state_dict.pt`
//     and `serialized_constants.pt` (torch.save zips read with the restricted unpickler).
// Independent of the importer (no IR, no exceptions), so the fuzzer links it alone.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "import/archive.h"
#include "kiln/base/status.h"
#include "kiln/format/dtype.h"

namespace kiln::pt2 {

/// PyTorch ScalarType code (serde schema) -> DType; nullopt for complex / float8 / unknown.
std::optional<DType> dtype_from_torch(std::int64_t code);

/// Checks that a view (sizes, strides, offset, in elements) lies inside a storage of
/// `storage_numel` elements, with overflow-safe arithmetic: no negative size, stride or
/// offset, and no element index past the end. kInvalidBundle naming `what`.
Status check_view(std::span<const std::int64_t> sizes, std::span<const std::int64_t> strides, std::int64_t offset,
                  std::int64_t storage_numel, const std::string& what);

/// A view can be larger than its storage only through zero or overlapping strides (an
/// expanded tensor); beyond this it is an error, so a tiny file cannot demand terabytes.
inline constexpr std::uint64_t kMaxExpandedViewBytes = 256ull << 20;

/// Checks the bytes a C-contiguous copy of the view needs: at most MemberLimits::kTensorData,
/// and at most kMaxExpandedViewBytes when more than the storage's `storage_bytes`.
Status check_view_bytes(std::span<const std::int64_t> sizes, DType dtype, std::uint64_t storage_bytes, const std::string& what);

/// A tensor read from an archive: C-contiguous bytes (shared with the storage when the view
/// is the whole storage, so a weight is not copied).
struct ArchiveTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::shared_ptr<const std::vector<std::uint8_t>> data;
};

enum class ArchiveLayout { kPt2, kLegacy };

/// Where the model JSON is and which layout the archive has. kInvalidBundle when neither.
struct ArchiveModel {
  ArchiveLayout layout = ArchiveLayout::kPt2;
  std::string json_member;
};
Result<ArchiveModel> find_model(const ZipArchive& archive);

/// PyTorch <= 2.6 writes non-finite floats as bare `Infinity`, `-Infinity`, `NaN` (Python's
/// json.dumps), which is not JSON; later versions write them as strings. Quotes the bare
/// ones outside string literals; returns how many.
std::size_t quote_nonfinite_literals(std::vector<std::uint8_t>& text);

/// The parameters / buffers ("weights") and tensor constants of either layout.
struct ArchiveTensors {
  std::vector<ArchiveTensor> weights;
  std::vector<ArchiveTensor> constants;
};
Result<ArchiveTensors> read_tensors(const ZipArchive& archive, ArchiveLayout layout);

/// The tensors of one `torch.save` zip (`<name>/data.pkl`, `<name>/data/<key>`,
/// `<name>/byteorder`), unpickled with the restricted unpickler (pickle.h).
Result<std::vector<ArchiveTensor>> read_torch_save(const ZipArchive& zip);

}  // namespace kiln::pt2
