// libFuzzer target: the `.pt2` archive reader and the restricted unpickler on arbitrary
// bytes (export/src/import/{archive,pickle,tensor_data}.cpp, compiled in: the rest of the
// export library needs a newer compiler than the fuzz preset's clang 14).
//
// The first byte picks what the rest is:
//   0: a data.pkl            -> unpickle_tensor_dict
//   1: a torch.save zip      -> read_torch_save (the nested zips of the legacy layout)
//   2+: a whole .pt2 archive -> every member read and opened as a nested zip (the zip
//       reader itself: stored, deflated, ZIP64), find_model, the model JSON member
//       (non-finite literals quoted), read_tensors (either layout)
// Any result other than a value or a non-empty kInvalidBundle / kUnsupported error is a
// crash (__builtin_trap); libFuzzer's -rss_limit_mb catches unbounded memory.
//
//   scripts/fuzz.sh 300        # build (fuzz preset), write seeds, fuzz both targets
#include <cstddef>
#include <cstdint>
#include <span>

#include "import/archive.h"
#include "import/pickle.h"
#include "import/tensor_data.h"

namespace {

using kiln::Status;
using kiln::StatusCode;

void check(const Status& s) {
  if (s.ok()) return;
  if (s.message().empty()) __builtin_trap();
  if (s.code() != StatusCode::kInvalidBundle && s.code() != StatusCode::kUnsupported) __builtin_trap();
}

// Reads every byte of every tensor, so an over-read shows up under ASan.
std::uint64_t touch(const std::vector<kiln::pt2::ArchiveTensor>& tensors) {
  std::uint64_t sum = 0;
  for (const auto& t : tensors) {
    std::int64_t numel = 1;
    for (std::int64_t s : t.shape) numel *= s;
    if (!t.data || t.data->size() != static_cast<std::size_t>(numel) * kiln::dtype_size(t.dtype)) __builtin_trap();
    for (std::uint8_t b : *t.data) sum += b;
  }
  return sum;
}

// Reads every member of `zip` (the first 64, at most 1 MiB each), and each as a nested zip.
std::uint64_t read_members(const kiln::pt2::ZipArchive& zip, int depth) {
  std::uint64_t sum = 0;
  std::size_t n = 0;
  for (const std::string& name : zip.names()) {
    if (++n > 64) break;
    auto bytes = zip.read(name, 1 << 20);
    check(bytes.status());
    if (bytes.ok()) {
      for (std::uint8_t b : *bytes) sum += b;
    }
    if (depth == 0) {
      auto nested = zip.open_nested(name, 1 << 20);
      check(nested.status());
      if (nested.ok()) sum += read_members(**nested, 1);
    }
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::span<const std::uint8_t> body(data + 1, size - 1);
  volatile std::uint64_t sink = 0;
  if (data[0] == 0) {
    auto r = kiln::pt2::unpickle_tensor_dict(body, "fuzz");
    check(r.status());
    if (r.ok()) sink = sink + r->size();
  } else if (data[0] == 1) {
    auto zip = kiln::pt2::ZipArchive::from_bytes(body, "fuzz");
    check(zip.status());
    if (!zip.ok()) return 0;
    auto r = kiln::pt2::read_torch_save(**zip);
    check(r.status());
    if (r.ok()) sink = sink + touch(*r);
  } else {
    auto zip = kiln::pt2::ZipArchive::from_bytes(body, "fuzz");
    check(zip.status());
    if (!zip.ok()) return 0;
    sink = sink + read_members(**zip, 0);
    auto model = kiln::pt2::find_model(**zip);
    check(model.status());
    if (!model.ok()) return 0;
    auto json = (*zip)->read(model->json_member, kiln::pt2::MemberLimits::kJson);
    check(json.status());
    if (json.ok()) sink = sink + kiln::pt2::quote_nonfinite_literals(*json);
    auto tensors = kiln::pt2::read_tensors(**zip, model->layout);
    check(tensors.status());
    if (tensors.ok()) sink = sink + touch(tensors->weights) + touch(tensors->constants);
  }
  return 0;
}
