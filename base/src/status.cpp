#include "kiln/base/status.h"

namespace kiln {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kUsage: return "usage";
    case StatusCode::kInvalidBundle: return "invalid_bundle";
    case StatusCode::kInvalidInput: return "invalid_input";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kValidationFailed: return "validation_failed";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kExportError: return "export_error";
    case StatusCode::kIoError: return "io_error";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

int exit_code(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 0;
    case StatusCode::kUsage: return 1;
    case StatusCode::kInvalidBundle: return 2;
    case StatusCode::kInvalidInput: return 3;
    case StatusCode::kUnavailable: return 4;
    case StatusCode::kValidationFailed: return 5;
    case StatusCode::kUnsupported: return 6;
    case StatusCode::kExportError: return 7;
    case StatusCode::kIoError: return 8;
    case StatusCode::kInternal: return 70;
  }
  return 70;
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string out(status_code_name(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message_;
  return Status(code_, std::move(msg));
}

}  // namespace kiln
