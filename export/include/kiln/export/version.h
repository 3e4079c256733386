// Version of the Kiln toolkit (the producer recorded in bundles it writes).
#pragma once

#include <string_view>

namespace kiln {
/// "0.1.0"
std::string_view kiln_version();
/// "kiln 0.1.0"
std::string_view kiln_producer();
}  // namespace kiln
