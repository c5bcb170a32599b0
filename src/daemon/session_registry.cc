// The session registry: every session the daemon serves (a guest's, a
// golden's, a clone's), found by id or by its program's pid, and kept up to
// date from its worker's WorkerState and WorkerStats.
#include "daemon/daemon.h"
#include "proto/frame.h"

namespace smolvm {

void ReplyHelloError(UnixChannel& ch, uint32_t seq, Code code, const std::string& message) {
  std::string out;
  proto::AppendErrorReply(&out, proto::HelloRequest::kNumber, seq, static_cast<int32_t>(code), 0, message);
  (void)ch.Write(out);
}

Daemon::Session* Daemon::FindSession(uint64_t session, uint32_t pid) {
  if (session) {
    auto it = sessions_.find(session);
    return it == sessions_.end() ? nullptr : &it->second;
  }
  // By the host pid the kernel gave (SO_PEERCRED), on the daemon's own
  // socket only: never the pid a guest claimed in its Hello, and never a
  // machine's session (issue 29: a guest of another machine claiming the
  // golden's pid received the operator's fork order).
  // A process with several sessions: the one at its forkpoint, else its newest.
  Session* found = nullptr;
  for (auto& [id, s] : sessions_) {
    if (!s.machine.empty() || s.host_pid != pid || pid == 0 || s.role == proto::SessionRole::kClone) continue;
    if (!found || found->state != "forkpoint") found = &s;
  }
  return found;
}

Daemon::Session* Daemon::FindMachineGolden(const std::string& machine, uint32_t pid) {
  if (pid == 0) return nullptr;
  // Machine "": the daemon's own socket, by host pid as `--pid` is.
  if (machine.empty()) return FindSession(0, pid);
  Session* claimed = nullptr;
  for (auto& [id, s] : sessions_) {
    if (s.machine != machine || s.role == proto::SessionRole::kClone) continue;
    if (s.host_pid == pid) return &s;
    // A guest's own pid (from its Hello) chooses among its machine's
    // sessions only, and only where no host pid matches (a machine whose
    // guests share one host peer).
    if (s.guest_pid == pid && !claimed) claimed = &s;
  }
  return claimed;
}

void Daemon::OnSessionState(const WorkerProc& w, const proto::WorkerStateRequest& r) {
  auto it = sessions_.find(r.session_id);
  if (it == sessions_.end() || it->second.worker_pid != w.pid) return;
  it->second.state = r.state;
  if (r.state == "forkpoint" && it->second.role == proto::SessionRole::kStandalone)
    it->second.role = proto::SessionRole::kGolden;
  if (r.state != "forkpoint") ForgetAhead(r.session_id);
}

void Daemon::OnSessionStats(const WorkerProc& w, const proto::WorkerStatsRequest& r) {
  auto it = sessions_.find(r.session_id);
  if (it == sessions_.end() || it->second.worker_pid != w.pid) return;
  it->second.shared_chunks = r.shared_chunks;
  it->second.shared_bytes = r.shared_bytes;
  it->second.private_chunks = r.private_chunks;
  it->second.private_bytes = r.private_bytes;
  it->second.allocations = r.allocations;
  // Its modules grew: the bound over every tenant's images (module_cache_bound.h).
  if (r.module_bytes > it->second.module_bytes && module_bound_)
    module_bound_->OnModulesGrew(std::chrono::steady_clock::now());
  it->second.module_bytes = r.module_bytes;
  it->second.limit_bytes = r.limit_bytes;
  it->second.workspace_bytes = r.workspace_bytes;
  it->second.private_live_bytes = r.private_live_bytes;
  it->second.created_contexts = r.created_contexts;
}

}  // namespace smolvm
