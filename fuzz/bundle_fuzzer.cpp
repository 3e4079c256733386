// libFuzzer target: the bundle loader (Bundle::from_bytes) on arbitrary bytes.
//
// Each input is loaded twice (without and with LoadOptions::verify_segment_checksums), then
// once more "resealed": the file size, every segment checksum, the metadata checksum and
// the header checksum are recomputed so that mutations get past the checksums and reach
// the FlatBuffers Verifier, the semantic verifier and the zstd decoder. A loaded bundle is
// then used as a consumer would use it: every constant and self-test tensor is read, and
// expressions are evaluated and printed. Any result other than "loaded" or a non-empty
// kInvalidBundle error is a crash (__builtin_trap).
//
// Inputs whose segment table asks for more than kMaxDecompressed bytes of zstd output are
// not loaded: a valid zstd frame may legitimately expand that much (the loader allocates
// the declared size), which would only trip libFuzzer's memory limit.
//
//   scripts/fuzz.sh 300        # build (fuzz preset), generate seeds, fuzz for 300 s
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kiln/format/fb_count.h"
#include "kiln/format/file_format.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/expr.h"

namespace {

using kiln::count;
using Span = std::span<const std::uint8_t>;
constexpr std::uint64_t kMaxDecompressed = std::uint64_t{64} << 20;
constexpr std::size_t kOffFileSize = 16, kOffMetaSum = 56, kOffHeaderSum = 120;

void put_u64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

bool fits(std::uint64_t a, std::uint64_t b, std::uint64_t limit) { return a <= limit && b <= limit - a; }

// The header's fields if its magic, major and header size are right (checksum ignored).
bool read_header(Span bytes, kiln::format::FileHeader& h) {
  const auto status = kiln::format::decode_header(bytes, h);
  return status == kiln::format::HeaderStatus::kOk || status == kiln::format::HeaderStatus::kBadChecksum;
}

bool table_in_bounds(const kiln::format::FileHeader& h, std::uint64_t size) {
  return h.segment_count <= kiln::format::kMaxSegments &&
         fits(h.segment_table_offset, std::uint64_t{h.segment_count} * kiln::format::kSegmentEntrySize, size);
}

bool declares_huge_segment(Span bytes) {
  kiln::format::FileHeader h;
  if (!read_header(bytes, h) || !table_in_bounds(h, bytes.size())) return false;
  for (std::uint32_t i = 0; i < h.segment_count; ++i) {
    const auto e = kiln::format::decode_segment_entry(bytes.data() + h.segment_table_offset +
                                                      std::uint64_t{i} * kiln::format::kSegmentEntrySize);
    if (e.compression == kiln::format::Compression::kZstd && e.size > kMaxDecompressed) return true;
  }
  return false;
}

// A copy of `bytes` with every checksum and the file size made consistent; empty if the
// header is not recognisable.
std::vector<std::uint8_t> reseal(Span bytes) {
  kiln::format::FileHeader h;
  if (!read_header(bytes, h)) return {};
  std::vector<std::uint8_t> out(bytes.begin(), bytes.end());
  const std::uint64_t size = out.size();
  put_u64(out.data() + kOffFileSize, size);
  if (fits(h.flatbuffer_offset, h.flatbuffer_size, size) && table_in_bounds(h, size)) {
    std::uint8_t* table = out.data() + h.segment_table_offset;
    for (std::uint32_t i = 0; i < h.segment_count; ++i) {
      std::uint8_t* entry = table + std::uint64_t{i} * kiln::format::kSegmentEntrySize;
      const auto e = kiln::format::decode_segment_entry(entry);
      if (fits(e.offset, e.stored_size, size)) put_u64(entry + 24, kiln::format::checksum(Span(out.data() + e.offset, e.stored_size)));
    }
    const Span parts[] = {Span(out.data() + h.flatbuffer_offset, h.flatbuffer_size),
                          Span(table, std::uint64_t{h.segment_count} * kiln::format::kSegmentEntrySize)};
    put_u64(out.data() + kOffMetaSum, kiln::format::checksum(parts));
  }
  put_u64(out.data() + kOffHeaderSum, kiln::format::checksum(Span(out.data(), kOffHeaderSum)));
  return out;
}


// Uses a verified bundle the way the runtime and `kiln inspect` would.
void exercise(const kiln::Bundle& bundle) {
  volatile std::uint64_t sink = 0;
  const kiln::fb::Program& p = bundle.program();
  for (std::uint32_t i = 0; i < count(p.constants()); ++i) {
    const auto data = bundle.constant_data(i);
    if (!data.empty()) sink = sink + data.front() + data.back();
  }
  for (std::uint32_t t = 0; t < count(p.self_tests()); ++t) {
    const auto* test = p.self_tests()->Get(t);
    for (const auto* list : {test->inputs(), test->outputs()}) {
      for (std::uint32_t k = 0; k < count(list); ++k) {
        const auto* tt = list->Get(k);
        if (tt->kind() != kiln::fb::InputKind::Tensor) continue;
        const auto data = bundle.data_ref(tt->segment(), tt->offset(), tt->nbytes());
        if (!data.empty()) sink = sink + data.back();
      }
    }
  }
  std::vector<std::int64_t> symbols(count(p.symbols()));
  for (std::uint32_t s = 0; s < symbols.size(); ++s) {
    const auto* sym = p.symbols()->Get(s);
    const std::int64_t guess = sym->has_hint() ? sym->hint() : 2;
    symbols[s] = guess < sym->min() ? sym->min() : guess > sym->max() ? sym->max() : guess;
  }
  const std::uint32_t n_exprs = count(p.exprs());
  if (bundle.expr_info().size() != n_exprs) __builtin_trap();
  for (std::uint32_t e = 0; e < n_exprs && e < 512; ++e) {
    if (e < 64) sink = sink + kiln::expr_to_string(p, e).size();
    auto v = kiln::evaluate_expr(p, e, symbols);
    if (v.ok()) sink = sink + static_cast<std::uint64_t>(*v);
    else if (v.status().code() != kiln::StatusCode::kInvalidInput) __builtin_trap();
  }
  const auto* sig = p.signature();
  // Like every consumer, read only the fields of an input's kind (an Int input's shape is
  // not verified: it has none).
  for (std::uint32_t i = 0; i < count(sig->inputs()); ++i) {
    const auto* in = sig->inputs()->Get(i);
    if (in->kind() != kiln::fb::InputKind::Tensor || in->shape() == nullptr) continue;
    sink = sink + kiln::shape_to_string(p, "f32", {in->shape()->data(), in->shape()->size()}).size();
  }
  const kiln::Status segments = bundle.verify_segments();
  if (!segments.ok() && segments.code() != kiln::StatusCode::kInvalidBundle) __builtin_trap();
}

void load_both_ways(Span bytes) {
  if (declares_huge_segment(bytes)) return;
  for (const bool verify : {false, true}) {
    auto bundle = kiln::Bundle::from_bytes(bytes, {.verify_segment_checksums = verify});
    if (!bundle.ok()) {
      if (bundle.status().code() != kiln::StatusCode::kInvalidBundle || bundle.status().message().empty()) __builtin_trap();
      continue;
    }
    exercise(**bundle);
  }
  // Metadata only, as `kiln inspect` opens bundles: no zstd segment is decompressed.
  auto metadata = kiln::Bundle::from_bytes(bytes, {.decompress_segments = false});
  if (!metadata.ok() && (metadata.status().code() != kiln::StatusCode::kInvalidBundle || metadata.status().message().empty())) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Span input(data, size);
  load_both_ways(input);
  const std::vector<std::uint8_t> resealed = reseal(input);
  if (!resealed.empty() && !std::equal(resealed.begin(), resealed.end(), input.begin())) load_both_ways(resealed);
  return 0;
}
