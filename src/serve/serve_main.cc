#include "serve/serve_main.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "machine/paths.h"
#include "serve/fake_clone_driver.h"
#include "serve/machine_clone_driver.h"
#include "serve/service.h"

namespace smolvm::serve {

Status RunServe(const ServeOptions& o) {
  // What the caller asked for first (a bad driver, or machines without root,
  // says so whatever the home), then the home.
  if (o.driver != "fake" && o.driver != "machine")
    return InvalidArgument("--driver must be machine or fake (got '" + o.driver + "')");
  if (o.driver == "machine" && ::geteuid() != 0)
    return PermissionDenied("smolvm serve drives machines and needs root (or --driver fake)");
  // 0700 like every smolvm home (issue 29): serve.sock's mode is its only
  // gate otherwise.
  if (Status st = machine::MakeHome(o.home); !st.ok()) return Status(st.code(), "serve's home: " + st.message());
  std::unique_ptr<CloneDriver> driver;
  if (o.driver == "fake")
    driver = std::make_unique<FakeCloneDriver>();
  else
    driver = std::make_unique<MachineCloneDriver>(MachineCloneDriver::Options{o.home, o.smolvm_exe, 2000});
  // Signals go to sigwait below, never to another thread.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  ServiceOptions so;
  so.store_path = o.home + "/serve.db";
  so.version = o.version;
  auto svc = Service::Start(so, driver.get());
  if (!svc.ok()) return svc.status();
  ListenOptions lo = o.listen;
  if (lo.unix_path.empty()) lo.unix_path = o.home + "/serve.sock";
  Service* s = svc->get();
  auto server = HttpServer::Start(lo, [s](HttpRequest& r) { return s->Handle(r); });
  if (!server.ok()) return server.status();
  std::fprintf(stderr, "serve: listening on %s", lo.unix_path.c_str());
  if (!lo.tcp_host.empty())
    std::fprintf(stderr, " and %s:%d%s", lo.tcp_host.c_str(), (*server)->tcp_port(), lo.tls_cert_file.empty() ? "" : " (TLS)");
  std::fprintf(stderr, " (pid %d, driver %s%s)\n", static_cast<int>(::getpid()), o.driver.c_str(),
               o.driver == "machine" && !MachineCloneDriver::HasLeaseLink() ? ", without parked forks: no lease link in this build" : "");
  int sig = 0;
  sigwait(&set, &sig);
  std::fprintf(stderr, "serve: signal %d: stopping (machines and leases stay for the next serve)\n", sig);
  (*server)->Stop();
  svc->reset();
  return Status::Ok();
}

}  // namespace smolvm::serve
