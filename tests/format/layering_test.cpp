// The runtime ships to devices without export code: it must never include export headers.
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

TEST(Layering, RuntimeCMakeDoesNotLinkExport) {
  std::ifstream in(fs::path(KILN_SOURCE_DIR) / "runtime" / "CMakeLists.txt");
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text.find("kiln_export"), std::string::npos);
}

}  // namespace
