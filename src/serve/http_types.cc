#include "serve/http_types.h"

#include "serve/errors.h"

namespace smolvm::serve {

HttpResponse JsonResponse(int status, const nlohmann::json& body) {
  HttpResponse r;
  r.status = status;
  r.body = body.dump();
  r.body += '\n';
  return r;
}

HttpResponse ErrorResponse(int status, const std::string& code, const std::string& message) {
  return JsonResponse(status, {{"error", {{"code", code}, {"message", message}}}});
}

int HttpStatusOf(const Status& s) {
  switch (s.code()) {
    case static_cast<int32_t>(Code::kOk): return 200;
    case static_cast<int32_t>(Code::kInvalidArgument):
    case static_cast<int32_t>(Code::kMalformed): return 400;
    case kUnauthenticated: return 401;
    case static_cast<int32_t>(Code::kPermissionDenied): return 403;
    case static_cast<int32_t>(Code::kNotFound): return 404;
    case static_cast<int32_t>(Code::kAlreadyExists):
    case kConflict:
    case kCancelled: return 409;
    case kTooLarge: return 413;
    case kQuota: return 429;
    case static_cast<int32_t>(Code::kUnavailable):
    case kNoRoom:
    case static_cast<int32_t>(Code::kTimeout): return 503;
    case static_cast<int32_t>(Code::kNotSupported): return 501;
    default: return 500;
  }
}

std::string ErrorNameOf(const Status& s) {
  switch (HttpStatusOf(s)) {
    case 400: return "invalid_argument";
    case 401: return "unauthenticated";
    case 403: return "forbidden";
    case 404: return "not_found";
    case 409: return s.code() == kCancelled ? "cancelled" : "conflict";
    case 413: return "too_large";
    case 429: return "quota_exceeded";
    case 503: return "unavailable";
    case 501: return "not_supported";
    default: return "internal";
  }
}

HttpResponse ResponseOf(const Status& s) { return ErrorResponse(HttpStatusOf(s), ErrorNameOf(s), s.message()); }

}  // namespace smolvm::serve
