// The module layering (docs/ARCHITECTURE.md): base <- schema <- runtime <- export.
// The runtime ships to devices without export code: it must never include export headers.
// Export sees the runtime through its public headers plus one internal interface,
// kiln/runtime/internal/eager.h; base (Status) includes nothing else of Kiln.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

namespace {

namespace fs = std::filesystem;

TEST(Layering, RuntimeDoesNotIncludeExport) {
  const fs::path root = fs::path(KILN_SOURCE_DIR) / "runtime";
  const std::regex include_export(R"re(#\s*include\s*[<"](kiln/export/|export/|\.\./.*export/))re");
  std::size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (ext != ".h" && ext != ".cpp" && ext != ".inc") continue;
    ++files;
    std::ifstream in(entry.path());
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      EXPECT_FALSE(std::regex_search(line, include_export)) << entry.path().string() << ":" << n << ": " << line;
    }
  }
  EXPECT_GT(files, 10u);  // the scan found the runtime sources
}

// Calls `check(path, line_number, included_name, quoted)` for every #include under `dir`
// and returns how many source files it read.
template <typename F>
std::size_t for_each_include(const fs::path& dir, F check) {
  const std::regex include_re(R"re(^\s*#\s*include\s*([<"])([^>"]+)[>"])re");
  std::size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (ext != ".h" && ext != ".cpp" && ext != ".inc") continue;
    ++files;
    std::ifstream in(entry.path());
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      std::smatch m;
      if (std::regex_search(line, m, include_re)) check(entry.path(), n, m[2].str(), m[1].str() == "\"");
    }
  }
  return files;
}

// Every Kiln header export includes is its own, a base or schema header, a public runtime
// header, or the one sanctioned internal interface; runtime/src is not on its include path.
TEST(Layering, ExportIncludesOnlyPublicRuntimeAndTheEagerInterface) {
  const fs::path src = fs::path(KILN_SOURCE_DIR);
  const std::string eager = "kiln/runtime/internal/eager.h";
  ASSERT_TRUE(fs::exists(src / "runtime/include" / eager));
  std::size_t runtime_includes = 0;
  const std::size_t files = for_each_include(src / "export", [&](const fs::path& file, int n, const std::string& name,
                                                                   bool quoted) {
    const std::string where = file.string() + ":" + std::to_string(n) + ": " + name;
    if (name.rfind("kiln/runtime/", 0) == 0) {
      ++runtime_includes;
      EXPECT_TRUE(fs::exists(src / "runtime/include" / name)) << where << " is not a public runtime header";
      if (name.rfind("kiln/runtime/internal/", 0) == 0) EXPECT_EQ(name, eager) << where;
      return;
    }
    if (!quoted && name.rfind("kiln/", 0) != 0) return;  // the standard library, third-party headers
    const bool found = fs::exists(src / "export/src" / name) || fs::exists(src / "export/include" / name) ||
                       fs::exists(src / "base/include" / name) || fs::exists(src / "schema/include" / name) ||
                       name == "kiln/format/kiln_generated.h";  // generated from schema/kiln.fbs
    EXPECT_TRUE(found) << where << " is none of export's, base's, schema's or the public runtime's headers";
    EXPECT_FALSE(fs::exists(src / "runtime/src" / name) && !fs::exists(src / "export/src" / name))
        << where << " is a runtime internal";
  });
  EXPECT_GT(files, 50u);           // the scan found the export sources
  EXPECT_GT(runtime_includes, 0u);  // and the runtime headers they use
}

TEST(Layering, ExportCMakeDoesNotSeeRuntimeSources) {
  std::ifstream in(fs::path(KILN_SOURCE_DIR) / "export" / "CMakeLists.txt");
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  ASSERT_NE(text.find("add_library(kiln_export"), std::string::npos);
  EXPECT_EQ(text.find("runtime/src"), std::string::npos);
}

// Status (with its export error code) is the base library's: it includes no other module.
TEST(Layering, BaseIncludesNoOtherModule) {
  const std::size_t files = for_each_include(fs::path(KILN_SOURCE_DIR) / "base", [](const fs::path& file, int n,
                                                                                   const std::string& name, bool) {
    if (name.rfind("kiln/", 0) == 0) {
      EXPECT_EQ(name.rfind("kiln/base/", 0), 0u) << file.string() << ":" << n << ": " << name;
    }
  });
  EXPECT_GE(files, 2u);
}

TEST(Layering, RuntimeCMakeDoesNotLinkExport) {
  std::ifstream in(fs::path(KILN_SOURCE_DIR) / "runtime" / "CMakeLists.txt");
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text.find("kiln_export"), std::string::npos);
}

}  // namespace
