// Symbol.debug at import: the archive's assert that narrows a symbol's range
// (`torch._check(n >= 1)` -> aten._assert_scalar(u0 >= 1)) is where that range was narrowed,
// with the user's line from the node's stack trace (issue 19.4).
#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/export/import_pt2.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/bundle.h"

namespace kiln {
namespace {

std::string fixture(const std::string& model) {
  return (std::filesystem::path(KILN_FIXTURES_DIR) / model / "model.pt2").string();
}

TEST(ImportRangeOrigin, AssertOnOneSymbolRecordsWhereItsRangeWasNarrowed) {
  auto ep = import_pt2(fixture("item_size"));
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Program& p = ep->program();
  const int u0 = p.graphs[0].bindings.at(0).symbol;
  ASSERT_TRUE(p.range_origins.count(u0));
  const ir::NodeMeta& where = p.range_origins.at(u0);
  EXPECT_TRUE(where.location.known());
  // The same source line as the archive's assert of that bound.
  bool same_line = false;
  for (const ir::RuntimeAssert& a : p.graphs[0].asserts) same_line |= a.meta.location.line == where.location.line;
  EXPECT_TRUE(same_line);
  // Saved as the symbol's debug entry.
  auto bytes = serialize_bundle(p);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  auto bundle = Bundle::from_bytes(*bytes);
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  const fb::Program& fp = (*bundle)->program();
  const DebugLocation loc = debug_location(fp, fp.symbols()->Get(static_cast<std::uint32_t>(u0))->debug());
  EXPECT_EQ(loc.file_line, where.location.file + ":" + std::to_string(where.location.line));
}

}  // namespace
}  // namespace kiln
