// Kiln's one error vocabulary: `Status` and `Result<T>`, in the base library (kiln_base)
// that the runtime and export both build on; kiln/runtime/status.h forwards here. No
// exceptions cross the runtime API (the runtime builds with -fno-exceptions in the
// `runtime-only` preset).
//
//   Result<Bundle> b = Bundle::open(path);
//   if (!b.ok()) return b.status();
//
// Every code maps to one stable `kiln` exit code (docs/CLI.md, exit_code()).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kiln {

enum class StatusCode : std::uint8_t {
  kOk = 0,
  kUsage,              // a caller mistake in arguments or options        -> exit 1
  kInvalidBundle,      // unreadable, truncated, corrupt, wrong version   -> exit 2
  kInvalidInput,       // wrong inputs or a failed runtime assert         -> exit 3
  kUnavailable,        // a backend or device is not available            -> exit 4
  kValidationFailed,   // a self-test output outside tolerance            -> exit 5
  kUnsupported,        // an op or feature this build cannot run          -> exit 6
  kExportError,        // export failed: constraint violation, bad model  -> exit 7
  kIoError,            // reading or writing a file failed                -> exit 8
  kInternal,           // a bug in Kiln                                   -> exit 70
};

/// Short stable name of a code ("invalid_bundle"), used in JSON output.
std::string_view status_code_name(StatusCode code);
/// The `kiln` exit code for a status code (docs/CLI.md).
int exit_code(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "invalid_bundle: segment 3: checksum mismatch"
  std::string to_string() const;

  /// Returns a copy whose message is prefixed with `context: `.
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

/// Either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : data_(std::move(status)) {
    if (std::get<Status>(data_).ok()) {
      data_ = Status(StatusCode::kInternal, "Result constructed from an ok Status");
    }
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  /// The error; an ok Status when the result holds a value.
  Status status() const { return ok() ? Status() : std::get<Status>(data_); }

  /// Precondition: ok().
  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace kiln

#define KILN_CONCAT_INNER_(a, b) a##b
#define KILN_CONCAT_(a, b) KILN_CONCAT_INNER_(a, b)

/// Returns the Status from the enclosing function if `expr` is not ok.
#define KILN_RETURN_IF_ERROR(expr)            \
  do {                                        \
    ::kiln::Status kiln_status_ = (expr);     \
    if (!kiln_status_.ok()) return kiln_status_; \
  } while (0)

/// `KILN_ASSIGN_OR_RETURN(auto x, make_x());` — binds the value or returns the error.
#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL_(KILN_CONCAT_(kiln_result_, __LINE__), lhs, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
