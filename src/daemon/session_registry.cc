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
  Session* found = nullptr;
  for (auto& [id, s] : sessions_)
    if (s.guest_pid == pid && s.role != proto::SessionRole::kClone) found = &s;
  return found;
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
  it->second.module_bytes = r.module_bytes;
  it->second.limit_bytes = r.limit_bytes;
  it->second.workspace_bytes = r.workspace_bytes;
  it->second.private_live_bytes = r.private_live_bytes;
}

}  // namespace smolvm
