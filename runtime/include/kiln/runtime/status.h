// `Status` and `Result<T>` live in the base library both the runtime and export build on
// (kiln_base, kiln/base/status.h). This header keeps the runtime's public name working.
#pragma once

#include "kiln/base/status.h"
