// RunServe: `smolvm serve` — the service on its socket(s) until SIGTERM or
// SIGINT. Stopping (or dying) leaves machines and leases as they are; the
// next serve over the same $SMOLVM_HOME re-adopts them.
#pragma once

#include <string>

#include "base/status.h"
#include "serve/http_server.h"

namespace smolvm::serve {

struct ServeOptions {
  std::string home;        // $SMOLVM_HOME
  std::string smolvm_exe;  // this binary
  ListenOptions listen;    // unix_path defaults to <home>/serve.sock
  std::string driver = "machine";  // machine | fake (tests and demos: clones in memory)
  std::string version;
};

// Blocks until a signal; returns the reason it could not start, else OK.
Status RunServe(const ServeOptions& options);

}  // namespace smolvm::serve
