// ServeClient: the CLI's client of a running serve over its Unix socket
// (one request per connection; HTTP/1.1 through Beast's serializer and
// parser). The Python client (python/smolvm/client.py) is the users'.
//
// Thread-compatible; each call opens its own connection.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace smolvm::serve {

struct ClientReply {
  int status = 0;
  std::string body;
  nlohmann::json json;  // discarded when the body is not JSON
  // The error body's message, else the body.
  std::string message() const;
};

// kUnavailable naming the socket when nothing answers there.
Result<ClientReply> ServeCall(const std::string& socket_path, const std::string& method, const std::string& target,
                              const std::string& body, std::chrono::milliseconds timeout);

// $SMOLVM_SERVE_SOCKET, else <home>/serve.sock.
std::string DefaultServeSocket(const std::string& home);

}  // namespace smolvm::serve
