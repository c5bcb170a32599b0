// serve's status codes beyond base/status.h and the HTTP answer of each.
//
//   status code              HTTP  "code" in the error body
//   kInvalidArgument         400   invalid_argument
//   kUnauthenticated         401   unauthenticated   (TCP without a valid token)
//   kPermissionDenied        403   forbidden         (an operator route; a uid that is no tenant)
//   kNotFound                404   not_found         (also: another tenant's resource)
//   (no route method)        405   method_not_allowed
//   kAlreadyExists           409   conflict
//   kConflict                409   conflict          (wrong state: draining, ended, ...)
//   kCancelled               409   cancelled         (a waiting acquire was cancelled)
//   kTooLarge                413   too_large         (body, payload or result over its limit)
//   kQuota                   429   quota_exceeded    (the tenant's leases or GPU MiB)
//   kUnavailable, kTimeout   503   unavailable       (no ready clone in time; admission refused)
//   kNoRoom                  503   unavailable       (the device lacks memory for a fork's clones)
//   kNotSupported            501   not_supported
//   anything else            500   internal
#pragma once

#include <string>

#include "base/status.h"
#include "serve/http_types.h"

namespace smolvm::serve {

inline constexpr int32_t kConflict = 300001;
inline constexpr int32_t kCancelled = 300002;
inline constexpr int32_t kTooLarge = 300003;
inline constexpr int32_t kQuota = 300004;
inline constexpr int32_t kUnauthenticated = 300005;
// CloneDriver::ForkParked: the device has no room for the fork's clones (the
// CUDA daemon's fork admission); a fork of fewer may fit (refill_pacer.h).
inline constexpr int32_t kNoRoom = 300006;

inline Status Conflict(std::string m) { return Status(kConflict, std::move(m)); }
inline Status CancelledError(std::string m) { return Status(kCancelled, std::move(m)); }
inline Status TooLarge(std::string m) { return Status(kTooLarge, std::move(m)); }
inline Status QuotaExceeded(std::string m) { return Status(kQuota, std::move(m)); }
inline Status Unauthenticated(std::string m) { return Status(kUnauthenticated, std::move(m)); }
inline Status NoRoom(std::string m) { return Status(kNoRoom, std::move(m)); }

// The HTTP status and error name of a non-OK Status.
int HttpStatusOf(const Status& s);
std::string ErrorNameOf(const Status& s);
HttpResponse ResponseOf(const Status& s);

}  // namespace smolvm::serve
