#include "machine/paths.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

namespace smolvm::machine {

std::string SmolvmHome() {
  const char* h = ::getenv("SMOLVM_HOME");
  if (h != nullptr && h[0] != '\0') return h;
  const char* home = ::getenv("HOME");
  return std::string(home != nullptr && home[0] != '\0' ? home : "/root") + "/.local/share/smolvm";
}

MachinePaths::MachinePaths(const std::string& home, const std::string& name) {
  dir = home + "/machines/" + name;
  log = dir + "/log";
  ctl_sock = dir + "/ctl.sock";
  cuda_sock = dir + "/cuda.sock";
  lease_sock = dir + "/lease.sock";
  run = dir + "/run";
  forkpoint_sock = run + "/forkpoint.sock";
  cuda_mount = run + "/cuda.sock";
  lease_mount = run + "/lease.sock";
  lib = run + "/lib";
  root = dir + "/root";
  layers = dir + "/layers";
  guest = dir + "/guest";
  upper = guest + "/upper";
  work = guest + "/work";
}

std::string ShimDir() {
  const char* d = ::getenv("SMOLVM_SHIM_DIR");
  if (d != nullptr && d[0] != '\0') return d;
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "shim";
  std::string exe(buf, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/')) + "/shim";
}

}  // namespace smolvm::machine
