#include "import/tensor_data.h"

#include <cstring>
#include <string_view>
#include <map>
#include <nlohmann/json.hpp>

#include "import/pickle.h"

namespace kiln::pt2 {

std::optional<DType> dtype_from_torch(std::int64_t code) {
  switch (code) {
    case 1: return DType::kU8;
    case 2: return DType::kI8;
    case 3: return DType::kI16;
    case 4: return DType::kI32;
    case 5: return DType::kI64;
    case 6: return DType::kF16;
    case 7: return DType::kF32;
    case 8: return DType::kF64;
    case 12: return DType::kBool;
    case 13: return DType::kBF16;
    default: return std::nullopt;
  }
}

namespace {

using json = nlohmann::json;
using Bytes = std::shared_ptr<const std::vector<std::uint8_t>>;

Status invalid(const std::string& message) { return Status(StatusCode::kInvalidBundle, message); }

std::int64_t numel_of(std::span<const std::int64_t> sizes) {
  std::int64_t n = 1;
  for (std::int64_t s : sizes) n *= s;  // check_view has bounded the product
  return n;
}

// The view's elements in C order. Shares `storage` when the view is all of it, in order.
Bytes gather(const Bytes& storage, DType dtype, std::span<const std::int64_t> sizes, std::span<const std::int64_t> strides,
             std::int64_t offset) {
  const std::size_t es = dtype_size(dtype);
  const std::int64_t numel = numel_of(sizes);
  bool contiguous = true;
  std::int64_t expected = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != 1 && strides[d] != expected) contiguous = false;
    expected *= sizes[d];
  }
  const std::size_t bytes = static_cast<std::size_t>(numel) * es;
  if (contiguous && offset == 0 && bytes == storage->size()) return storage;
  auto out = std::make_shared<std::vector<std::uint8_t>>(bytes);
  if (numel == 0) return out;
  const std::uint8_t* src = storage->data();
  if (contiguous) {
    std::memcpy(out->data(), src + static_cast<std::size_t>(offset) * es, bytes);
    return out;
  }
  // Copy runs of the innermost dim (one element when it is strided).
  const std::size_t rank = sizes.size();
  const bool inner_unit = strides[rank - 1] == 1;
  const std::int64_t run = inner_unit ? sizes[rank - 1] : 1;
  const std::size_t outer_dims = inner_unit ? rank - 1 : rank;
  std::vector<std::int64_t> index(outer_dims, 0);
  std::uint8_t* dst = out->data();
  for (std::int64_t done = 0; done < numel; done += run) {
    std::int64_t at = offset;
    for (std::size_t d = 0; d < outer_dims; ++d) at += index[d] * strides[d];
    std::memcpy(dst, src + static_cast<std::size_t>(at) * es, static_cast<std::size_t>(run) * es);
    dst += static_cast<std::size_t>(run) * es;
    for (std::size_t d = outer_dims; d-- > 0;) {
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

Status check_storage(std::size_t have_bytes, std::int64_t storage_numel, DType dtype, const std::string& what) {
  if (storage_numel < 0) return invalid(what + ": the storage's size " + std::to_string(storage_numel) + " is negative");
  std::uint64_t need = 0;
  if ( __builtin_mul_overflow(static_cast<std::uint64_t>(storage_numel), dtype_size(dtype), &need) || have_bytes < need) {
    return invalid(what + " has " + std::to_string(have_bytes) + " bytes, too few for its " + std::to_string(storage_numel) + " " +
                   std::string(dtype_name(dtype)) + " elements");
  }
  return Status::Ok();
}

// ---- the PT2 layout ---------------------------------------------------------------------

const json* field(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// An integer written as N or {"as_int": N}.
Result<std::int64_t> int_value(const json* f, const std::string& what) {
  if (f && f->is_object()) f = field(*f, "as_int");
  if (!f || !f->is_number_integer()) return invalid(what + " is not an integer");
  if (f->is_number_unsigned() && f->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
    return invalid(what + " does not fit 64 bits");
  }
  return f->get<std::int64_t>();
}

Result<std::vector<std::int64_t>> int_list(const json& meta, const char* key, const std::string& where) {
  const json* list = field(meta, key);
  std::vector<std::int64_t> out;
  if (!list) return out;
  if (!list->is_array()) return invalid(where + ": '" + key + "' is not a list");
  if (list->size() > 64) return invalid(where + ": '" + key + "' has " + std::to_string(list->size()) + " dims (at most 64)");
  for (const json& e : *list) {
    KILN_ASSIGN_OR_RETURN(std::int64_t v, int_value(&e, where + ": an entry of '" + key + "'"));
    out.push_back(v);
  }
  return out;
}

Result<std::vector<ArchiveTensor>> read_pt2_tensors(const ZipArchive& archive, const std::string& config_suffix, const std::string& folder) {
  std::vector<ArchiveTensor> out;
  auto config_name = archive.find(config_suffix, folder);
  if (!config_name) return out;
  KILN_ASSIGN_OR_RETURN(auto bytes, archive.read(*config_name, MemberLimits::kSmall));
  const json config = json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (config.is_discarded()) return invalid("'" + *config_name + "' is not valid JSON");
  const json* entries = field(config, "config");
  if (!entries) return out;
  if (!entries->is_object()) return invalid("'" + *config_name + "': 'config' is not an object");
  const std::string dir = config_name->substr(0, config_name->rfind('/') + 1);
  std::map<std::string, Bytes> storages;
  for (const auto& [name, e] : entries->items()) {
    const std::string where = "tensor '" + name + "' (" + *config_name + ")";
    if (!e.is_object()) return invalid(where + " is not an object");
    if (const json* p = field(e, "use_pickle"); p && p->is_boolean() && p->get<bool>()) {
      return Status(StatusCode::kUnsupported, where + " is pickled (only raw tensors are supported)");
    }
    const json* file = field(e, "path_name");
    const json* meta = field(e, "tensor_meta");
    if (!file || !file->is_string() || !meta || !meta->is_object()) return invalid(where + " needs 'path_name' and 'tensor_meta'");
    KILN_ASSIGN_OR_RETURN(std::int64_t code, int_value(field(*meta, "dtype"), where + ": 'dtype'"));
    auto dtype = dtype_from_torch(code);
    if (!dtype) return Status(StatusCode::kUnsupported, where + ": dtype code " + std::to_string(code) + " is not supported");
    KILN_ASSIGN_OR_RETURN(auto sizes, int_list(*meta, "sizes", where));
    KILN_ASSIGN_OR_RETURN(auto strides, int_list(*meta, "strides", where));
    std::int64_t offset = 0;
    if (field(*meta, "storage_offset")) {
      KILN_ASSIGN_OR_RETURN(offset, int_value(field(*meta, "storage_offset"), where + ": 'storage_offset'"));
    }
    if (strides.size() != sizes.size()) {
      return invalid(where + ": " + std::to_string(strides.size()) + " strides for " + std::to_string(sizes.size()) + " sizes");
    }
    const std::string member = dir + file->get<std::string>();
    auto it = storages.find(member);
    if (it == storages.end()) {
      KILN_ASSIGN_OR_RETURN(auto raw, archive.read(member, MemberLimits::kTensorData));
      it = storages.emplace(member, std::make_shared<const std::vector<std::uint8_t>>(std::move(raw))).first;
    }
    const auto storage_numel = static_cast<std::int64_t>(it->second->size() / dtype_size(*dtype));
    KILN_RETURN_IF_ERROR(check_view(sizes, strides, offset, storage_numel, where + ", file '" + file->get<std::string>() + "'"));
    KILN_RETURN_IF_ERROR(check_view_bytes(sizes, *dtype, it->second->size(), where));
    out.push_back({name, *dtype, sizes, gather(it->second, *dtype, sizes, strides, offset)});
  }
  return out;
}

}  // namespace

// ---- shared ---------------------------------------------------------------------------------

Status check_view(std::span<const std::int64_t> sizes, std::span<const std::int64_t> strides, std::int64_t offset,
                  std::int64_t storage_numel, const std::string& what) {
  if (sizes.size() != strides.size()) return invalid(what + ": " + std::to_string(sizes.size()) + " sizes but " + std::to_string(strides.size()) + " strides");
  if (offset < 0) return invalid(what + ": storage offset " + std::to_string(offset) + " is negative");
  std::int64_t numel = 1;
  std::int64_t last = offset;  // the largest element index the view touches
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] < 0) return invalid(what + ": size " + std::to_string(sizes[d]) + " of dim " + std::to_string(d) + " is negative");
    if (strides[d] < 0) return invalid(what + ": stride " + std::to_string(strides[d]) + " of dim " + std::to_string(d) + " is negative");
    if (__builtin_mul_overflow(numel, sizes[d], &numel) || numel > (std::int64_t{1} << 59)) {
      return invalid(what + ": sizes overflow (more than 2^59 elements)");
    }
  }
  if (numel == 0) {
    if (offset > storage_numel) return invalid(what + ": storage offset " + std::to_string(offset) + " is past the storage's " + std::to_string(storage_numel) + " elements");
    return Status::Ok();
  }
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    std::int64_t span = 0;
    if (__builtin_mul_overflow(sizes[d] - 1, strides[d], &span) || __builtin_add_overflow(last, span, &last)) {
      return invalid(what + ": offset and strides overflow 64 bits");
    }
  }
  if (last >= storage_numel) {
    return invalid(what + ": the view reaches element " + std::to_string(last) + " (offset " + std::to_string(offset) +
                   ") of a storage of " + std::to_string(storage_numel) + " elements, too few for its sizes/strides");
  }
  return Status::Ok();
}

std::size_t quote_nonfinite_literals(std::vector<std::uint8_t>& text) {
  auto at = [&](std::size_t i, std::string_view word) {
    return text.size() - i >= word.size() && std::memcmp(text.data() + i, word.data(), word.size()) == 0;
  };
  std::vector<std::size_t> starts;  // where a bare literal begins
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const std::uint8_t c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (at(i, "Infinity") || at(i, "NaN") || at(i, "-Infinity")) {
      starts.push_back(i);
      i += text[i] == '-' ? 8 : text[i] == 'N' ? 2 : 7;
    }
  }
  if (starts.empty()) return 0;
  std::vector<std::uint8_t> out;
  out.reserve(text.size() + 2 * starts.size());
  std::size_t from = 0;
  for (std::size_t s : starts) {
    const std::size_t len = text[s] == '-' ? 9 : text[s] == 'N' ? 3 : 8;
    out.insert(out.end(), text.begin() + static_cast<std::ptrdiff_t>(from), text.begin() + static_cast<std::ptrdiff_t>(s));
    out.push_back('"');
    out.insert(out.end(), text.begin() + static_cast<std::ptrdiff_t>(s), text.begin() + static_cast<std::ptrdiff_t>(s + len));
    out.push_back('"');
    from = s + len;
  }
  out.insert(out.end(), text.begin() + static_cast<std::ptrdiff_t>(from), text.end());
  text = std::move(out);
  return starts.size();
}

Status check_view_bytes(std::span<const std::int64_t> sizes, DType dtype, std::uint64_t storage_bytes, const std::string& what) {
  const std::uint64_t bytes = static_cast<std::uint64_t>(numel_of(sizes)) * dtype_size(dtype);  // numel <= 2^59 (check_view)
  if (bytes > MemberLimits::kTensorData) {
    return invalid(what + ": " + std::to_string(bytes) + " bytes, more than the " + std::to_string(MemberLimits::kTensorData) + " allowed for one tensor");
  }
  if (bytes > storage_bytes && bytes > kMaxExpandedViewBytes) {
    return invalid(what + ": a view of " + std::to_string(bytes) + " bytes over a storage of " + std::to_string(storage_bytes) +
                   " bytes (zero or overlapping strides), more than the " + std::to_string(kMaxExpandedViewBytes) + " allowed for expanded views");
  }
  return Status::Ok();
}

Result<ArchiveModel> find_model(const ZipArchive& archive) {
  if (auto name = archive.find("/models/model.json")) return ArchiveModel{ArchiveLayout::kPt2, *name};
  if (auto name = archive.find(".json", "/models/")) return ArchiveModel{ArchiveLayout::kPt2, *name};
  if (auto name = archive.find("serialized_exported_program.json")) return ArchiveModel{ArchiveLayout::kLegacy, *name};
  return invalid("'" + archive.label() + "' is a zip but not a torch.export archive: no models/*.json entry (PyTorch >= 2.7) "
                 "and no serialized_exported_program.json (PyTorch <= 2.6)");
}

Result<std::vector<ArchiveTensor>> read_torch_save(const ZipArchive& archive) {
  const ZipArchive* zip = &archive;
  const std::string& label = archive.label();
  auto pkl = zip->find("/data.pkl");
  if (!pkl) pkl = zip->find("data.pkl");
  if (!pkl) return invalid("'" + label + "' is not a torch.save archive: no data.pkl");
  const std::string prefix = pkl->substr(0, pkl->size() - std::strlen("data.pkl"));
  if (auto order = zip->find(prefix + "byteorder"); order && *order == prefix + "byteorder") {
    KILN_ASSIGN_OR_RETURN(auto text, zip->read(*order, 64));
    if (std::string(text.begin(), text.end()) != "little") {
      return Status(StatusCode::kUnsupported, "'" + label + "': byte order '" + std::string(text.begin(), text.end()) + "' (only little-endian)");
    }
  }
  KILN_ASSIGN_OR_RETURN(auto pickle, zip->read(*pkl, MemberLimits::kSmall));
  KILN_ASSIGN_OR_RETURN(auto pickled, unpickle_tensor_dict(pickle, label + ":" + *pkl));
  std::map<std::string, Bytes> storages;
  std::vector<ArchiveTensor> out;
  out.reserve(pickled.size());
  for (PickledTensor& t : pickled) {
    const std::string member = prefix + "data/" + t.storage_key;
    const std::string what = "tensor '" + t.name + "' ('" + label + "' storage " + member + ")";
    auto it = storages.find(member);
    if (it == storages.end()) {
      auto raw = zip->read(member, MemberLimits::kTensorData);
      if (!raw.ok()) return Status(raw.status().code(), what + ": " + raw.status().message());
      it = storages.emplace(member, std::make_shared<const std::vector<std::uint8_t>>(std::move(raw).value())).first;
    }
    KILN_RETURN_IF_ERROR(check_storage(it->second->size(), t.storage_numel, t.dtype, what));
    KILN_RETURN_IF_ERROR(check_view(t.sizes, t.strides, t.offset, t.storage_numel, what));
    KILN_RETURN_IF_ERROR(check_view_bytes(t.sizes, t.dtype, it->second->size(), what));
    out.push_back({std::move(t.name), t.dtype, t.sizes, gather(it->second, t.dtype, t.sizes, t.strides, t.offset)});
  }
  return out;
}

Result<ArchiveTensors> read_tensors(const ZipArchive& archive, ArchiveLayout layout) {
  ArchiveTensors out;
  if (layout == ArchiveLayout::kPt2) {
    KILN_ASSIGN_OR_RETURN(out.weights, read_pt2_tensors(archive, "_weights_config.json", "/data/weights/"));
    KILN_ASSIGN_OR_RETURN(out.constants, read_pt2_tensors(archive, "_constants_config.json", "/data/constants/"));
    return out;
  }
  for (auto [suffix, into] : {std::pair{"serialized_state_dict.pt", &out.weights}, std::pair{"serialized_constants.pt", &out.constants}}) {
    auto member = archive.find(suffix);
    if (!member) continue;
    KILN_ASSIGN_OR_RETURN(auto nested, archive.open_nested(*member, MemberLimits::kArchive));
    KILN_ASSIGN_OR_RETURN(*into, read_torch_save(*nested));
  }
  return out;
}

}  // namespace kiln::pt2
