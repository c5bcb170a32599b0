// What serve's handlers see of an HTTP exchange, independent of the HTTP
// library: the request (method, path, query, body), who asked (Caller), and
// the response. http_server.cc fills these from the wire; unit tests build
// them by hand.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace smolvm::serve {

// Who sent a request, once the transport has told us.
//   Unix socket: the peer's uid from SO_PEERCRED (0 = the operator).
//   TCP: the bearer token's tenant (token_hash is its SHA-256); no uid.
struct Peer {
  bool unix_socket = true;
  uid_t uid = static_cast<uid_t>(-1);
  std::string bearer_token;  // TCP only: the Authorization header's token ("" = none)
};

// The caller after authentication (tenants.h): the operator, or one tenant.
struct Caller {
  bool operator_ = false;
  std::string tenant;  // the operator acts as tenant "root"
  bool authenticated = false;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query, percent-decoded
  std::map<std::string, std::string> query;
  std::map<std::string, std::string> params;  // path template values ({pool} -> "p")
  std::string body;
  std::string content_type;
  std::string idempotency_key;  // the Idempotency-Key header
  Peer peer;
  Caller caller;
  // True once the client hung up (a long poll stops waiting). May be empty.
  std::function<bool()> gone;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

// Every error answers {"error": {"code": "<name>", "message": "..."}}.
HttpResponse JsonResponse(int status, const nlohmann::json& body);
HttpResponse ErrorResponse(int status, const std::string& code, const std::string& message);

}  // namespace smolvm::serve
