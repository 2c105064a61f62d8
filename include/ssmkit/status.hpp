// Errors are values: every op returns a Status whose message names the argument and the
// expected vs given shape, dtype or stride. Nothing in the library aborts or throws across
// its public functions.
#pragma once

#include <string>
#include <utility>

namespace ssmkit {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // a shape, dtype, stride, pointer or value the op does not accept
  kUnsupported = 2,      // a valid request this build cannot serve (e.g. a CUDA tensor, no CUDA)
  kOutOfMemory = 3,      // a workspace allocation failed
  kInternal = 4,         // a bug: please report
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string message) {
    return {StatusCode::kInvalidArgument, std::move(message)};
  }
  static Status Unsupported(std::string message) {
    return {StatusCode::kUnsupported, std::move(message)};
  }
  static Status OutOfMemory(std::string message) {
    return {StatusCode::kOutOfMemory, std::move(message)};
  }
  static Status Internal(std::string message) {
    return {StatusCode::kInternal, std::move(message)};
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Returns early from the calling function when `expr` yields a non-ok Status.
#define SSMKIT_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::ssmkit::Status ssmkit_status_ = (expr);        \
    if (!ssmkit_status_.ok()) return ssmkit_status_; \
  } while (0)

}  // namespace ssmkit
