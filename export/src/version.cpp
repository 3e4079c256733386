#include "kiln/export/version.h"

namespace kiln {
std::string_view kiln_version() { return "0.1.0"; }
std::string_view kiln_producer() { return "kiln 0.1.0"; }
}  // namespace kiln
