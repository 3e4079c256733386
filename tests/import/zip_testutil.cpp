#include "import/zip_testutil.h"

#include <zip.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>

namespace kiln::testing {

std::map<std::string, std::string> read_zip(const std::string& path) {
  std::map<std::string, std::string> out;
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &err);
  for (zip_int64_t i = 0; z && i < zip_get_num_entries(z, 0); ++i) {
    zip_stat_t st;
    zip_stat_index(z, static_cast<zip_uint64_t>(i), 0, &st);
    std::string data(st.size, '\0');
    zip_file_t* f = zip_fopen_index(z, static_cast<zip_uint64_t>(i), 0);
    zip_fread(f, data.data(), st.size);
    zip_fclose(f);
    out[st.name] = data;
  }
  if (z) zip_discard(z);
  return out;
}

namespace {

bool write_zip_with(const std::string& path, const std::map<std::string, std::string>& entries, bool store) {
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  if (!z) return false;
  for (const auto& [name, data] : entries) {
    void* copy = std::malloc(data.size() + 1);
    std::memcpy(copy, data.data(), data.size());
    zip_source_t* src = zip_source_buffer(z, copy, data.size(), 1);
    const zip_int64_t index = zip_file_add(z, name.c_str(), src, ZIP_FL_OVERWRITE);
    if (index < 0) {
      zip_discard(z);
      return false;
    }
    if (store) zip_set_file_compression(z, static_cast<zip_uint64_t>(index), ZIP_CM_STORE, 0);
    else zip_set_file_compression(z, static_cast<zip_uint64_t>(index), ZIP_CM_DEFLATE, 1);
  }
  return zip_close(z) == 0;
}

}  // namespace

bool write_zip(const std::string& path, const std::map<std::string, std::string>& entries, bool stored) {
  return write_zip_with(path, entries, stored);
}

std::string zip_bytes(const std::map<std::string, std::string>& entries) {
  const auto path = std::filesystem::temp_directory_path() / ("kiln_zip_bytes_" + std::to_string(::getpid()) + ".zip");
  if (!write_zip_with(path.string(), entries, true)) return {};
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  return bytes;
}

std::string pickle_int(std::int64_t v) {
  std::string out;
  if (v >= 0 && v < 256) return std::string("K") + static_cast<char>(v);
  if (v >= INT32_MIN && v <= INT32_MAX) {
    out = "J";
    for (int i = 0; i < 4; ++i) out += static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff);
    return out;
  }
  out = "\x8a\x08";
  for (int i = 0; i < 8; ++i) out += static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff);
  return out;
}

std::string pickle_string(const std::string& s) {
  std::string out = "X";
  for (int i = 0; i < 4; ++i) out += static_cast<char>((s.size() >> (8 * i)) & 0xff);
  return out + s;
}

std::string pickle_global(const std::string& module, const std::string& name) { return "c" + module + "\n" + name + "\n"; }

std::string pickle_state_dict(const std::vector<TensorPickle>& tensors) {
  std::string p = "\x80\x02}(";
  for (const TensorPickle& t : tensors) {
    p += pickle_string(t.name) + pickle_global("torch._utils", "_rebuild_tensor_v2") + "(";
    p += "(" + pickle_string("storage") + pickle_global("torch", t.storage_type) + pickle_string(t.key) + pickle_string("cpu") +
         pickle_int(t.numel) + "tQ";
    p += pickle_int(t.offset) + "(";
    for (auto s : t.sizes) p += pickle_int(s);
    p += "t(";
    for (auto s : t.strides) p += pickle_int(s);
    p += "t\x89" + pickle_global("collections", "OrderedDict") + ")Rt" + "R";
  }
  return p + "u.";
}

std::string torch_save_zip(const std::string& pickle, const std::map<std::string, std::string>& storages) {
  std::map<std::string, std::string> entries{{"archive/data.pkl", pickle}, {"archive/byteorder", "little"}, {"archive/version", "3\n"}};
  for (const auto& [key, bytes] : storages) entries["archive/data/" + key] = bytes;
  return zip_bytes(entries);
}

}  // namespace kiln::testing
