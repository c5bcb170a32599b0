#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/serve_commands.h"
#include "machine/paths.h"
#include "serve/fake_clone_driver.h"
#include "serve/http_client.h"
#include "serve/serve_main.h"
#include "serve/service.h"
#include "version.h"

namespace smolvm::cli {

int ServeExitCode(int s) {
  if (s >= 200 && s < 300) return 0;
  switch (s) {
    case 400: case 413: return 2;
    case 404: return 3;
    case 409: return 4;
    case 401: case 403: return 5;
    case 503: return 6;
    case 429: return 7;
    default: return 1;
  }
}

std::string UrlComponent(const std::string& s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

int ServeRequest(const std::string& method, const std::string& target, const nlohmann::json& body, nlohmann::json* out,
                 int timeout_s) {
  auto r = serve::ServeCall(serve::DefaultServeSocket(machine::SmolvmHome()), method, target,
                            body.is_null() ? "" : body.dump(), std::chrono::seconds(timeout_s));
  if (!r.ok()) {
    std::fprintf(stderr, "smolvm: %s\n", r.status().message().c_str());
    return 6;
  }
  if (r->status >= 300) {
    std::fprintf(stderr, "smolvm: %s\n", r->message().c_str());
    return ServeExitCode(r->status);
  }
  if (out != nullptr) *out = r->json;
  return 0;
}

namespace {

void AddServeOpenApi(CLI::App& serve, int* exit_code) {
  CLI::App* c = serve.add_subcommand("openapi", "print the OpenAPI document of serve's routes (docs/serve-openapi.json)");
  c->callback([exit_code] {
    serve::FakeCloneDriver driver;
    char tmpl[] = "/tmp/smolvm-openapi-XXXXXX";
    char* dir = ::mkdtemp(tmpl);
    if (dir == nullptr) {
      std::perror("smolvm: mkdtemp");
      *exit_code = 1;
      return;
    }
    serve::ServiceOptions o;
    o.store_path = std::string(dir) + "/serve.db";
    o.version = SMOLVM_VERSION;
    {
      auto svc = serve::Service::Start(o, &driver);
      if (svc.ok()) std::printf("%s\n", (*svc)->OpenApi().dump(2).c_str());
      else std::fprintf(stderr, "smolvm: %s\n", svc.status().message().c_str());
      *exit_code = svc.ok() ? 0 : 1;
    }
    std::filesystem::remove_all(dir);
  });
}

}  // namespace

void RegisterServeCommands(CLI::App& app, int* exit_code) {
  struct Opts {
    std::string socket, listen, cert, key, driver = "machine";
    int max_connections = 512;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* c = app.add_subcommand("serve", "the pool service: pools of forked learners leased over REST (docs/serve.md)");
  c->add_option("--socket", o->socket, "the Unix socket (default $SMOLVM_HOME/serve.sock)");
  c->add_option("--listen", o->listen, "also listen on TCP [HOST]:PORT (loopback when no HOST; bearer tokens; TLS beyond loopback)");
  c->add_option("--tls-cert", o->cert, "PEM certificate (chain) for TCP");
  c->add_option("--tls-key", o->key, "PEM private key for TCP");
  c->add_option("--driver", o->driver, "machine (default) | fake: clones in memory, for tests and demos");
  c->add_option("--max-connections", o->max_connections, "connections served at once (beyond: 503)")->check(CLI::Range(1, 65536));
  c->footer("Exit codes: 0 stopped by a signal, 1 could not start, 2 invalid argument, 4 another serve runs, 7 not root.");
  c->callback([o, c, exit_code] {
    if (!c->get_subcommands().empty()) return;
    serve::ServeOptions so;
    so.home = machine::SmolvmHome();
    char exe[4096];
    ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    so.smolvm_exe = n > 0 ? std::string(exe, static_cast<size_t>(n)) : "smolvm";
    so.listen.unix_path = o->socket.empty() ? serve::DefaultServeSocket(so.home) : o->socket;
    if (!o->listen.empty()) {
      size_t colon = o->listen.rfind(':');
      if (colon == std::string::npos) {
        std::fprintf(stderr, "smolvm serve: --listen wants HOST:PORT (got '%s')\n", o->listen.c_str());
        *exit_code = 2;
        return;
      }
      so.listen.tcp_host = colon == 0 ? "127.0.0.1" : o->listen.substr(0, colon);  // ":PORT": loopback
      so.listen.tcp_port = std::atoi(o->listen.c_str() + colon + 1);
    }
    so.listen.tls_cert_file = o->cert;
    so.listen.tls_key_file = o->key;
    so.listen.max_connections = o->max_connections;
    so.driver = o->driver;
    so.version = SMOLVM_VERSION;
    Status s = serve::RunServe(so);
    if (!s.ok()) std::fprintf(stderr, "smolvm serve: %s\n", s.message().c_str());
    *exit_code = s.ok() ? 0
                 : s.code() == static_cast<int32_t>(Code::kInvalidArgument)   ? 2
                 : s.code() == static_cast<int32_t>(Code::kAlreadyExists)     ? 4
                 : s.code() == static_cast<int32_t>(Code::kPermissionDenied)  ? 7
                                                                               : 1;
  });
  AddServeOpenApi(*c, exit_code);
  AddServeTenantCommands(*c, exit_code);
}

}  // namespace smolvm::cli
