// Status and Result<T>: how host code (daemon, worker, CLI, machine layer)
// reports failure without exceptions on request paths.
//
// A Status is OK or carries a numeric code and a message. Codes are
// CUresult values when a GPU operation failed (so they can travel to the
// guest unchanged), or one of the smolvm codes below for everything else.
// OK costs one int compare and no allocation.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace smolvm {

// Codes outside CUDA's own numbering (CUresult stays below 1000).
enum class Code : int32_t {
  kOk = 0,
  kInvalidArgument = 100001,
  kNotFound = 100002,
  kAlreadyExists = 100003,
  kUnavailable = 100004,        // peer closed, daemon gone, resource exhausted
  kProtocolMismatch = 100005,   // handshake hash differs
  kMalformed = 100006,          // frame or field failed to decode
  kUnknownOp = 100007,
  kNotSupported = 100008,
  kInternal = 100009,
  kIo = 100010,                 // a system call failed; message has errno text
  kPermissionDenied = 100011,
  kTimeout = 100012,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(int32_t code, std::string message) : code_(code), message_(std::move(message)) {}
  Status(Code code, std::string message) : Status(static_cast<int32_t>(code), std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == 0; }
  int32_t code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  int32_t code_ = 0;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
inline Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
inline Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
inline Status Malformed(std::string m) { return Status(Code::kMalformed, std::move(m)); }
inline Status NotSupported(std::string m) { return Status(Code::kNotSupported, std::move(m)); }
inline Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }
inline Status Timeout(std::string m) { return Status(Code::kTimeout, std::move(m)); }
inline Status PermissionDenied(std::string m) { return Status(Code::kPermissionDenied, std::move(m)); }
// A failed system call: "<what>: <strerror(err)>".
Status ErrnoStatus(const std::string& what, int err);

// Result<T>: a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}         // NOLINT: must not be OK
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace smolvm

#define SMOLVM_CONCAT_INNER(a, b) a##b
#define SMOLVM_CONCAT(a, b) SMOLVM_CONCAT_INNER(a, b)

// RETURN_IF_ERROR(expr): expr yields a Status; return it from the caller if not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::smolvm::Status smolvm_status_ = (expr);          \
    if (!smolvm_status_.ok()) return smolvm_status_;   \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): expr yields a Result<T>; on error return its status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(SMOLVM_CONCAT(smolvm_result_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
