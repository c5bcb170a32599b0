// The CUDA part of a gVisor machine's bundle (`--cuda`; docs/machines.md,
// "Isolation modes"): the machine's own endpoint, reached through runsc's
// host-UDS path (runsc --host-uds=open), the shims at /run/smolvm/lib, and
// every guest copy of a library they replace covered by a read-only bind of
// the shim, as the sandbox's pid 1 covers them (cuda_libs.h). The daemon
// knows the endpoint passes no descriptors (AttachCudaMachine) and tells
// each session so in its Hello reply.
#include <limits.h>
#include <stdlib.h>

#include "machine/cuda_libs.h"
#include "machine/gvisor_internal.h"

namespace smolvm::machine::gvisor_internal {
namespace {

// `path` below `dir` (both absolute): the rest after dir, or nullopt.
bool Below(const std::string& path, const std::string& dir, std::string* rest) {
  if (dir.empty() || path.size() <= dir.size() || path.compare(0, dir.size(), dir) != 0 || path[dir.size()] != '/')
    return false;
  *rest = path.substr(dir.size());
  return true;
}

std::string RealPath(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) != nullptr ? std::string(buf) : p;
}

}  // namespace

Result<std::vector<BundleBind>> CudaBinds(const SandboxConfig& cfg, const Staging& staging,
                                          const std::vector<std::string>& system_dirs) {
  std::vector<BundleBind> binds;
  ASSIGN_OR_RETURN(std::string lib, staging.Bind(cfg.shim_dir, "lib", true));
  ASSIGN_OR_RETURN(std::string sock, staging.Bind(cfg.paths.cuda_sock, "cuda.sock", false));
  binds.push_back({lib, "/run/smolvm/lib", true});
  binds.push_back({sock, "/run/smolvm/cuda.sock", false});

  // Where the guest sees each host directory the copies can be in.
  struct Tree {
    std::string host, guest;
  };
  std::vector<Tree> trees;
  for (const Volume& v : cfg.spec.volumes) trees.push_back({RealPath(v.host), v.guest});
  auto cover = [&](const std::vector<CudaLibraryCopy>& found, auto guest_of) {
    for (const auto& c : found) {
      std::string guest = guest_of(c.host_path);
      if (!guest.empty()) binds.push_back({lib + "/" + c.soname, guest, true});
    }
  };
  for (const Tree& t : trees) {
    ASSIGN_OR_RETURN(auto found, FindCudaLibraryCopies(t.host, {"."}, {}));
    cover(found, [&](const std::string& host) {
      std::string rest;
      return Below(host, t.host, &rest) ? t.guest + rest : std::string();
    });
  }
  // The host's system library directories, bound at the same paths.
  ASSIGN_OR_RETURN(auto found, FindCudaLibraryCopies("/", {}, CudaSystemLibraryDirs()));
  cover(found, [&](const std::string& host) {
    std::string rest;
    for (const auto& d : system_dirs)
      if (Below(host, d, &rest)) return host;
    return std::string();
  });
  return binds;
}

}  // namespace smolvm::machine::gvisor_internal
