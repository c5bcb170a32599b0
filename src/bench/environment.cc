#include "bench/environment.h"

#include <unistd.h>

#include <cstdio>
#include <chrono>
#include <fstream>
#include <thread>

#include "backend/nvml_host.h"
#include "bench/child.h"
#include "base/sha256.h"
#include "proto/proto_hash.h"

namespace smolvm::bench {
namespace {

std::string Comm(uint32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string s;
  std::getline(in, s);
  return s.empty() ? "?" : s;
}

}  // namespace

bool GpuPresent() {
  auto d = HostGpuMemoryInUse();
  return d.ok() && !d->empty();
}

EnvManifest CollectEnv(const std::string& shim_dir) {
  EnvManifest e;
  e.smolvm_version = SMOLVM_BENCH_VERSION;
  auto self = Sha256File(SelfExe());
  e.smolvm_binary_sha256 = self.ok() ? *self : "";
  e.proto_hash = proto::HashHex(proto::kProtoHash);
  auto shim = Sha256File(shim_dir + "/libcudart.so.13");
  e.shim_sha256 = shim.ok() ? *shim : "";
  if (auto d = HostDriverVersion(); d.ok()) e.driver = *d;
  if (auto c = HostCudaDriverVersion(); c.ok()) e.cuda = *c;
  if (auto g = HostGpuMemoryInUse(); g.ok() && !g->empty()) e.gpu = (*g)[0].name;
  e.host_cores = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  e.host_mem_gb = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE) / (1ull << 30);
  return e;
}

Status CheckGpuIdle(double limit_mib) {
  ASSIGN_OR_RETURN(auto devices, HostGpuMemoryInUse());
  // Memory held with no compute process left is usually a process still
  // being torn down (a learner or worker that just exited): give it 10 s.
  auto settling = [&] {
    for (const auto& d : devices)
      if (d.used_bytes / 1048576.0 > limit_mib && d.processes.empty()) return true;
    return false;
  };
  for (int i = 0; i < 50 && settling(); ++i) {
    if (i == 0) std::fprintf(stderr, "bench: waiting up to 10 s for the GPU's memory to be released\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ASSIGN_OR_RETURN(devices, HostGpuMemoryInUse());
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    double used = devices[i].used_bytes / 1048576.0;
    if (used <= limit_mib) continue;
    char head[160];
    std::snprintf(head, sizeof head, "GPU %zu (%s) already has %.0f MiB in use (> %.0f MiB); compute processes:", i,
                  devices[i].name.c_str(), used, limit_mib);
    std::string msg = head;
    for (const auto& p : devices[i].processes) {
      char one[128];
      std::snprintf(one, sizeof one, " pid %u (%s) %.0f MiB;", p.pid, Comm(p.pid).c_str(), p.used_bytes / 1048576.0);
      msg += one;
    }
    if (devices[i].processes.empty()) msg += " none visible";
    return Status(Code::kUnavailable, msg + " — stop them, then run the bench again");
  }
  return Status::Ok();
}

}  // namespace smolvm::bench
