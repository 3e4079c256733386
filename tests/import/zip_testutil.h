// Zip helpers for the import tests: read every member of an archive, write one, and build
// the torch.save pickles of a legacy (PyTorch <= 2.6) archive by hand.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::testing {

/// Every member of the zip at `path`, by name.
std::map<std::string, std::string> read_zip(const std::string& path);
/// Writes `entries` as a zip to `path` (deflated, or stored when `stored`); false on failure.
bool write_zip(const std::string& path, const std::map<std::string, std::string>& entries, bool stored = false);
/// The bytes of a zip holding `entries` (stored, as torch.save writes them).
std::string zip_bytes(const std::map<std::string, std::string>& entries);

/// Builds protocol-2 pickles the way torch.save writes a state dict.
struct TensorPickle {
  std::string name;
  std::string storage_type = "FloatStorage";
  std::string key = "0";
  std::int64_t numel = 0;
  std::int64_t offset = 0;
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
};
std::string pickle_int(std::int64_t v);
std::string pickle_string(const std::string& s);
std::string pickle_global(const std::string& module, const std::string& name);
/// `{name: _rebuild_tensor_v2(storage, offset, sizes, strides, False, OrderedDict())...}`.
std::string pickle_state_dict(const std::vector<TensorPickle>& tensors);
/// A torch.save zip: archive/data.pkl, archive/byteorder, archive/data/<key> for each storage.
std::string torch_save_zip(const std::string& pickle, const std::map<std::string, std::string>& storages);

}  // namespace kiln::testing
