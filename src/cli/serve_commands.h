// `smolvm serve`, `smolvm pool ...`, `smolvm lease ...`: the service and
// its operators' commands (cmd_serve.cc, cmd_pool.cc, cmd_lease.cc). The
// pool and lease commands are clients of a running serve on its Unix
// socket ($SMOLVM_SERVE_SOCKET, else $SMOLVM_HOME/serve.sock).
//
// Exit codes (docs/serve.md): 0 ok, 1 failure, 2 invalid argument (HTTP 400,
// 413), 3 not found (404), 4 conflict (409: exists, wrong state,
// cancelled), 5 refused (401, 403), 6 unavailable (503, or serve not
// answering), 7 quota exceeded (429).
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

namespace smolvm::cli {

int ServeExitCode(int http_status);
// s percent-encoded as one path segment or query value (all but A-Z a-z
// 0-9 - . _ ~): a name with '?', '/' or '#' names itself, never another
// resource.
std::string UrlComponent(const std::string& s);
// Calls serve; on success fills *out and returns 0; else prints
// "smolvm: <message>" and returns the exit code.
int ServeRequest(const std::string& method, const std::string& target, const nlohmann::json& body, nlohmann::json* out,
                 int timeout_s = 60);

void AddServeTenantCommands(CLI::App& serve, int* exit_code);

}  // namespace smolvm::cli
