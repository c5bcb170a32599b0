#include "daemon/guest_admission.h"

#include <algorithm>

namespace smolvm {

std::string TenantName(const std::string& machine, uint32_t uid) {
  return machine.empty() ? "uid " + std::to_string(uid) + " on the daemon's socket" : "machine '" + machine + "'";
}

Status GuestAdmission::AdmitConnection(const std::string& socket, const std::string& tenant, bool shared,
                                       uint32_t host_pid, const Pending& held) const {
  if (held.tenant >= static_cast<size_t>(caps_.conns_per_machine))
    return Unavailable("too many connections " + (shared ? "from " + tenant : "on " + socket) + " (cap " +
                       std::to_string(caps_.conns_per_machine) + ", --max-conns-per-machine)");
  if (shared && held.pid >= static_cast<size_t>(caps_.conns_per_pid))
    return Unavailable("too many connections from host pid " + std::to_string(host_pid) + " on " + socket +
                       " (cap " + std::to_string(caps_.conns_per_pid) + ", --max-conns-per-pid)");
  if (held.total >= static_cast<size_t>(caps_.conns))
    return Unavailable("too many connections on the smolvm daemon (cap " + std::to_string(caps_.conns) +
                       ", --max-conns)");
  return Status::Ok();
}

size_t GuestAdmission::FairShare(size_t tenants) const {
  return std::max<size_t>(1, static_cast<size_t>(caps_.workers) / (tenants + 1));
}

Status GuestAdmission::AdmitSession(const std::string& tenant, const Sessions& held) const {
  if (held.tenant >= static_cast<size_t>(caps_.sessions_per_machine))
    return Unavailable("too many CUDA sessions " + std::string(tenant.rfind("machine", 0) == 0 ? "on " : "of ") +
                       tenant + " (cap " + std::to_string(caps_.sessions_per_machine) +
                       ", --max-sessions-per-machine)");
  if (held.committed >= static_cast<size_t>(caps_.workers))
    return Unavailable("too many CUDA workers on the smolvm daemon (cap " + std::to_string(caps_.workers) +
                       ", --max-workers)");
  const size_t share = FairShare(held.other_tenants + 1);
  const size_t free_after = static_cast<size_t>(caps_.workers) - held.committed - 1;
  if (held.tenant >= share && free_after < share)
    return Unavailable(tenant + " holds " + std::to_string(held.tenant) +
                       " CUDA worker(s), its fair share of --max-workers " + std::to_string(caps_.workers) +
                       " beside " + std::to_string(held.other_tenants) + " other tenant(s)");
  return Status::Ok();
}

void RefusalTally::Count(const Status& why) {
  const std::string& m = why.message();
  const size_t at = m.rfind(", --");
  Count(at == std::string::npos ? (m.find("fair share") != std::string::npos ? "fair share" : "other")
                                : m.substr(at + 2, m.find(')', at) - at - 2));
}

}  // namespace smolvm
